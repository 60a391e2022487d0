//! The C ABI against the reference model: random sequences of `hipFileDriverOpen/Close`,
//! `hipFileHandleRegister/Deregister`, `hipFileBufRegister/Deregister`, `hipFileRead/Write` and
//! `hipFileUseCount` through the entry points of `libhipfile.so`, each answer compared with
//! [`hipfile_testkit::model::api`], and after every read and write the bytes of the file and of
//! the device allocation it touched.
//!
//! The C ABI has one process-wide driver, so this is a test binary of its own with one test,
//! which runs sequence after sequence, closing the driver completely between them. On the
//! simulator, the driver and the test share one simulated GPU: the simulated HIP runtime library
//! (`libamdhip64.so` of `hipfile-simhip`, built as a dev-dependency) is both the platform the
//! driver loads (`HIPFILE_PLATFORM=amd`, `HIPFILE_HIP_LIBRARY`) and where the test allocates.
//! With `HIPFILE_GPU_TESTS=1` both use the machine's GPU instead.
//!
//! Small engine settings (16 KiB chunks, two IO threads, 8 KiB direct transfers, O_DIRECT where
//! aligned) make the sizes of a sequence cut into several pieces on every path. CI runs fixed
//! seeds; `HIPFILE_FUZZ_SECONDS=N` (what `cargo xtask fuzz` sets) adds random seeds from
//! `HIPFILE_FUZZ_SEED` (else the clock) for N seconds. A disagreement is recorded and the run goes
//! on where the states still agree (the model takes the world's bytes after a content
//! difference); at the end each kind of disagreement is shortened to a minimal sequence and
//! printed, and the test fails.
#![cfg(feature = "fallback")]

use std::collections::BTreeMap;
use std::ffi::c_void;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::ptr;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use hipfile::capi::{
    hipFileBufDeregister, hipFileBufRegister, hipFileDescr_handle_t, hipFileDescr_t,
    hipFileDriverClose, hipFileDriverOpen, hipFileError_t, hipFileHandleDeregister,
    hipFileHandleRegister, hipFileHandleTypeOpaqueFD, hipFileHandleTypeUserspaceFS,
    hipFileHandle_t, hipFileRead, hipFileUseCount, hipFileWrite, op_code,
};
use hipfile_core::{ErrorKind, IoOp};
use hipfile_hip::{DeviceBuffer, GpuRuntime, PinnedBuffer};
use hipfile_testkit::fuzz::{extra_seconds, extra_seed};
use hipfile_testkit::model::api::{
    random_sequence, ApiExpected, ApiModel, ApiOp, HandleRef, Memory, RegisterArgs, Target,
    Touched, ALLOCATIONS, ALLOCATION_LEN, DESCRIPTORS, FILES,
};
use hipfile_testkit::model::Answer;

/// Fixed seeds CI runs, and the operations in each sequence.
const SEQUENCES: u64 = 256;
const SEQUENCE_LEN: usize = 128;

/// A descriptor number that is never open (far above any process's descriptor limit).
const CLOSED_FD: RawFd = 1 << 30;

/// A handle value no driver issues.
const BOGUS_HANDLE: usize = usize::MAX - 0xF;

/// The engine settings of the run (see the module docs), and the variables that would change
/// the model's rules, which are cleared.
const SETTINGS: &[(&str, &str)] = &[
    ("HIPFILE_CHUNK_KB", "16"),
    ("HIPFILE_INLINE_KB", "4"),
    ("HIPFILE_MIN_PIECE_KB", "4"),
    ("HIPFILE_IO_THREADS", "2"),
    ("HIPFILE_PINNED_KB", "1024"),
    ("HIPFILE_MAX_DIRECT_IO_KB", "8"),
    ("HIPFILE_DIRECT_IO", "always"),
];
const CLEARED: &[&str] = &[
    "HIPFILE_ALLOW_COMPAT_MODE",
    "HIPFILE_FORCE_COMPAT_MODE",
    "HIPFILE_BACKENDS",
    "HIPFILE_STATS_LEVEL",
    "HIPFILE_EVENT_WAIT",
    "HIPFILE_SIM_ROCM",
    "HIPFILE_SIM_P2P",
    "HIPFILE_SIM_DEVICES",
];

/// Memory the sequences point at, allocated once on the runtime the driver also uses.
struct Memories {
    device: Vec<DeviceBuffer>,
    host: PinnedBuffer,
    managed: DeviceBuffer,
}

impl Memories {
    fn address(&self, memory: Memory) -> usize {
        match memory {
            Memory::Device { allocation, offset } => self.device[allocation].ptr() + offset,
            Memory::PinnedHost => self.host.as_ptr() as usize,
            Memory::Managed => self.managed.ptr(),
            Memory::Null => 0,
        }
    }
}

/// `target/<profile>/deps/libamdhip64.so`, next to this test binary.
fn simulated_hip_library() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary knows its path");
    let lib = exe
        .parent()
        .expect("the test binary lives in target/<profile>/deps")
        .join("libamdhip64.so");
    assert!(
        lib.is_file(),
        "{} is missing: hipfile-simhip (a dev-dependency) builds it",
        lib.display()
    );
    lib
}

/// Set the environment up before the driver first reads it, and allocate the memories.
fn memories() -> &'static Mutex<Memories> {
    static MEMORIES: OnceLock<Mutex<Memories>> = OnceLock::new();
    MEMORIES.get_or_init(|| {
        // This binary's only test sets the environment before anything in the process reads it;
        // no other thread of the process looks at it.
        for name in CLEARED {
            std::env::remove_var(name);
        }
        for (name, value) in SETTINGS {
            std::env::set_var(name, value);
        }
        let runtime: Arc<dyn GpuRuntime> = if hipfile_testkit::target::real_gpu_requested() {
            hipfile_testkit::target::runtime_under_test()
                .expect("the GPU runtime opens")
                .runtime
        } else {
            let lib = simulated_hip_library();
            std::env::set_var("HIPFILE_PLATFORM", "amd");
            std::env::set_var(hipfile_hip::amd::LIBRARY_ENV, &lib);
            // Wherever TMPDIR is, let the direct path serve what is aligned.
            std::env::set_var("HIPFILE_UNSUPPORTED_FILE_SYSTEMS", "true");
            hipfile_hip::amd_open_library(&lib.to_string_lossy())
                .expect("the simulated HIP library loads")
        };
        Mutex::new(Memories {
            device: (0..ALLOCATIONS)
                .map(|_| DeviceBuffer::new(runtime.clone(), ALLOCATION_LEN).expect("hipMalloc"))
                .collect(),
            host: PinnedBuffer::new(runtime.clone(), ALLOCATION_LEN).expect("hipHostMalloc"),
            managed: DeviceBuffer::new_managed(runtime, ALLOCATION_LEN).expect("hipMallocManaged"),
        })
    })
}

/// The files and descriptors of one sequence, and the handles issued for them.
struct World {
    _dir: tempfile::TempDir,
    paths: Vec<PathBuf>,
    descriptors: Vec<File>,
    socket: std::os::unix::net::UnixStream,
    _peer: std::os::unix::net::UnixStream,
    directory: File,
    /// Per descriptor: the latest handle issued and the one before.
    handles: Vec<[hipFileHandle_t; 2]>,
    /// The files' direct IO offset alignment.
    block: usize,
}

impl World {
    fn new(model: &ApiModel, memories: &mut Memories) -> World {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let paths: Vec<PathBuf> = (0..FILES)
            .map(|i| dir.path().join(format!("f{i}")))
            .collect();
        for (path, bytes) in paths.iter().zip(model.files()) {
            std::fs::write(path, bytes).expect("write a file");
        }
        for (buffer, bytes) in memories.device.iter_mut().zip(model.device()) {
            buffer.write_at(0, bytes).expect("fill device memory");
        }
        let mut descriptors: Vec<File> = Vec::new();
        for spec in DESCRIPTORS {
            let file = match spec.dup_of {
                Some(d) => descriptors[d].try_clone().expect("dup"),
                None => {
                    let mut options = OpenOptions::new();
                    use hipfile_testkit::model::api::Access::*;
                    match spec.access {
                        ReadWrite => options.read(true).write(true),
                        ReadOnly => options.read(true),
                        WriteOnly => options.write(true),
                        Append => options.read(true).append(true),
                        PathOnly => options.read(true).custom_flags(libc::O_PATH),
                    };
                    options.open(&paths[spec.file]).expect("open a file")
                }
            };
            descriptors.push(file);
        }
        let (socket, peer) = std::os::unix::net::UnixStream::pair().expect("a socket pair");
        let directory = File::open(dir.path()).expect("open the directory");
        let never = |i: usize| (BOGUS_HANDLE - 1 - i) as hipFileHandle_t;
        let block = hipfile_core::RegisteredFile::open(descriptors[0].as_raw_fd())
            .expect("a file of the world registers")
            .dio_align()
            .offset as usize;
        World {
            block,
            handles: (0..DESCRIPTORS.len())
                .map(|d| [never(2 * d), never(2 * d + 1)])
                .collect(),
            _dir: dir,
            paths,
            descriptors,
            socket,
            _peer: peer,
            directory,
        }
    }

    fn handle(&self, handle: HandleRef) -> hipFileHandle_t {
        match handle {
            HandleRef::Current(d) => self.handles[d][0],
            HandleRef::Previous(d) => self.handles[d][1],
            HandleRef::Null => ptr::null_mut(),
            HandleRef::Bogus => BOGUS_HANDLE as hipFileHandle_t,
        }
    }

    fn fd(&self, target: Target) -> RawFd {
        match target {
            Target::Descriptor(d) => self.descriptors[d].as_raw_fd(),
            Target::Negative => -1,
            Target::Closed => CLOSED_FD,
            Target::Socket => self.socket.as_raw_fd(),
            Target::Directory => self.directory.as_raw_fd(),
        }
    }

    /// Run `op` through the C ABI.
    fn apply(&mut self, op: &ApiOp, memories: &Memories) -> CAnswer {
        match *op {
            ApiOp::DriverOpen => CAnswer::status(hipFileDriverOpen()),
            ApiOp::DriverClose => CAnswer::status(hipFileDriverClose()),
            ApiOp::HandleRegister { target, args } => {
                let mut descr = hipFileDescr_t {
                    type_: if args == RegisterArgs::UnsupportedType {
                        hipFileHandleTypeUserspaceFS
                    } else {
                        hipFileHandleTypeOpaqueFD
                    },
                    handle: hipFileDescr_handle_t {
                        fd: self.fd(target),
                    },
                    fs_ops: ptr::null(),
                };
                let mut fh: hipFileHandle_t = ptr::null_mut();
                let fh_arg: *mut hipFileHandle_t = if args == RegisterArgs::NullHandle {
                    ptr::null_mut()
                } else {
                    &mut fh
                };
                let descr_arg: *mut hipFileDescr_t = if args == RegisterArgs::NullDescriptor {
                    ptr::null_mut()
                } else {
                    &mut descr
                };
                // SAFETY: each pointer is NULL or points to a live local of the right type.
                let status = unsafe { hipFileHandleRegister(fh_arg, descr_arg) };
                if status.err == hipfile::capi::hipFileSuccess {
                    if let Target::Descriptor(d) = target {
                        self.handles[d] = [fh, self.handles[d][0]];
                    }
                }
                CAnswer::status(status)
            }
            ApiOp::HandleDeregister { handle } => {
                hipFileHandleDeregister(self.handle(handle));
                CAnswer::Nothing
            }
            ApiOp::BufRegister { memory, len } => CAnswer::status(hipFileBufRegister(
                memories.address(memory) as *const c_void,
                len,
                0,
            )),
            ApiOp::BufDeregister { memory } => CAnswer::status(hipFileBufDeregister(
                memories.address(memory) as *const c_void,
            )),
            ApiOp::Io {
                op,
                handle,
                memory,
                size,
                file_offset,
                buffer_offset,
            } => {
                let fh = self.handle(handle);
                let buffer = memories.address(memory) as *mut c_void;
                let n = match op {
                    IoOp::Read => hipFileRead(fh, buffer, size, file_offset, buffer_offset),
                    IoOp::Write => hipFileWrite(fh, buffer, size, file_offset, buffer_offset),
                };
                let errno = (n == -1).then(|| std::io::Error::last_os_error().raw_os_error());
                CAnswer::Ssize(n as i64, errno.flatten())
            }
        }
    }
}

/// An answer of the C ABI, as C sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum CAnswer {
    /// A `hipFileError_t`.
    Status { err: i32, hip: i32 },
    /// An `ssize_t`, with `errno` when it is -1.
    Ssize(i64, Option<i32>),
    /// A `void` function.
    Nothing,
}

impl CAnswer {
    fn status(e: hipFileError_t) -> CAnswer {
        CAnswer::Status {
            err: e.err,
            hip: e.hip_drv_err,
        }
    }

    /// What the model's answer to `op` looks like through the C ABI.
    fn expected(op: &ApiOp, expected: &ApiExpected) -> CAnswer {
        match (op, expected) {
            (ApiOp::HandleDeregister { .. }, _) => CAnswer::Nothing,
            (ApiOp::Io { .. }, Ok(Answer::Bytes(n))) => CAnswer::Ssize(*n as i64, None),
            (ApiOp::Io { .. }, Err(f)) if f.kind == ErrorKind::Os => CAnswer::Ssize(-1, f.errno),
            (ApiOp::Io { .. }, Err(f)) => CAnswer::Ssize(-i64::from(op_code(f.kind)), None),
            (_, Ok(_)) => CAnswer::Status { err: 0, hip: 0 },
            (_, Err(f)) => CAnswer::Status {
                err: op_code(f.kind),
                hip: 0,
            },
        }
    }

    fn succeeded(&self) -> bool {
        match self {
            CAnswer::Status { err, .. } => *err == 0,
            CAnswer::Ssize(n, _) => *n >= 0,
            CAnswer::Nothing => true,
        }
    }

    /// A short name for tallies and disagreement classes: `ok`, `bytes`, `-1/EBADF`,
    /// `InvalidValue`.
    fn class(&self) -> String {
        let kind = |code: i32| {
            ErrorKind::ALL
                .iter()
                .find(|k| **k != ErrorKind::Os && op_code(**k) == code)
                .map_or(format!("code {code}"), |k| format!("{k:?}"))
        };
        match *self {
            CAnswer::Status { err: 0, .. } | CAnswer::Nothing => "ok".into(),
            CAnswer::Status { err, .. } => kind(err),
            CAnswer::Ssize(0, _) => "0 bytes".into(),
            CAnswer::Ssize(n, _) if n > 0 => "bytes".into(),
            CAnswer::Ssize(-1, errno) => format!("-1/{}", errno_name(errno)),
            CAnswer::Ssize(n, _) => kind(-n as i32),
        }
    }
}

fn errno_name(errno: Option<i32>) -> String {
    match errno {
        Some(libc::EINVAL) => "EINVAL".into(),
        Some(libc::EBADF) => "EBADF".into(),
        Some(libc::EFBIG) => "EFBIG".into(),
        Some(e) => format!("errno {e}"),
        None => "no errno".into(),
    }
}

/// One disagreement between the model and the C ABI.
#[derive(Clone, Debug)]
struct Finding {
    seed: u64,
    step: usize,
    op: ApiOp,
    /// What kind of disagreement, without the numbers: groups findings.
    class: String,
    detail: String,
}

/// What running one sequence found.
#[derive(Default)]
struct SequenceRun {
    executed: usize,
    findings: Vec<Finding>,
    bytes_checked: u64,
    tally: BTreeMap<String, u64>,
    /// Short reads that changed device bytes past the bytes they returned.
    changed_past_short_reads: u64,
    /// Open descriptors after the sequence less those before.
    descriptor_delta: i64,
}

/// The first difference of two byte strings, described.
fn difference(model: &[u8], world: &[u8]) -> Option<String> {
    if model == world {
        return None;
    }
    let differing: Vec<usize> = model
        .iter()
        .zip(world)
        .enumerate()
        .filter_map(|(i, (a, b))| (a != b).then_some(i))
        .collect();
    Some(match (differing.first(), differing.last()) {
        (Some(&first), Some(&last)) => format!(
            "{} bytes differ from byte {first} (model {:#04x}, C ABI {:#04x}) to byte {last}; lengths {} (model) and {} (C ABI)",
            differing.len(),
            model[first],
            world[first],
            model.len(),
            world.len()
        ),
        _ => format!("lengths {} (model) and {} (C ABI)", model.len(), world.len()),
    })
}

/// Run `ops` on a fresh world seeded with `seed` and a closed driver; the driver is closed
/// completely again before returning.
fn run_sequence(seed: u64, ops: &[ApiOp]) -> SequenceRun {
    // One sequence at a time: the memories, like the driver, are the process's.
    let mut memories = memories().lock().unwrap_or_else(PoisonError::into_inner);
    let mut run = SequenceRun::default();
    assert_eq!(hipFileUseCount(), 0, "a sequence starts on a closed driver");
    let fds_before = open_descriptors();
    let mut model = ApiModel::random(seed);
    let mut world = World::new(&model, &mut memories);
    model.set_block(world.block);
    for (step, op) in ops.iter().enumerate() {
        run.executed += 1;
        let touched = model.touched(op);
        let expected_model = model.apply(op);
        let expected = CAnswer::expected(op, &expected_model);
        let actual = world.apply(op, &memories);
        *run.tally
            .entry(format!("{} {}", op.name(), actual.class()))
            .or_default() += 1;
        let mut record = |class: String, detail: String| {
            run.findings.push(Finding {
                seed,
                step,
                op: *op,
                class,
                detail,
            })
        };
        if expected != actual {
            record(
                format!(
                    "{}: model {}, C ABI {}",
                    op.name(),
                    expected.class(),
                    actual.class()
                ),
                format!("model {expected:?} ({expected_model:?}), C ABI {actual:?}"),
            );
            if expected.succeeded() != actual.succeeded() && !matches!(op, ApiOp::Io { .. }) {
                // The registrations differ from here on: nothing later can be judged.
                break;
            }
        }
        let count = hipFileUseCount();
        if count != model.use_count() as i64 {
            record(
                format!("{}: use count differs", op.name()),
                format!("model {}, hipFileUseCount {count}", model.use_count()),
            );
            break;
        }
        if let Touched::Io { file, allocation } = touched {
            if let Some(f) = file {
                let bytes = std::fs::read(&world.paths[f]).expect("read a file back");
                run.bytes_checked += bytes.len() as u64;
                if let Some(why) = difference(&model.files()[f], &bytes) {
                    record(format!("{}: file contents differ", op.name()), why);
                    model.set_file(f, bytes);
                }
            }
            if let Some(a) = allocation {
                let bytes = memories.device[a]
                    .to_vec()
                    .expect("read device memory back");
                run.bytes_checked += bytes.len() as u64;
                if let Some((u, range)) = model.unspecified().filter(|(u, _)| *u == a) {
                    // Past a short read's bytes the buffer may hold anything: take the world's.
                    let mut adopted = model.device()[u].clone();
                    if adopted[range.clone()] != bytes[range.clone()] {
                        run.changed_past_short_reads += 1;
                    }
                    adopted[range.clone()].copy_from_slice(&bytes[range]);
                    model.set_device(u, adopted);
                }
                if let Some(why) = difference(&model.device()[a], &bytes) {
                    record(format!("{}: device contents differ", op.name()), why);
                    model.set_device(a, bytes);
                }
            }
        }
    }
    // Close completely, so the next sequence starts from scratch.
    for _ in 0..10_000 {
        if hipFileUseCount() <= 0 {
            break;
        }
        hipFileDriverClose();
    }
    assert_eq!(hipFileUseCount(), 0, "the driver closes completely");
    drop(world);
    // A closed driver holds no descriptor of a file it had registered. The first sequence may
    // leave what the process keeps once loaded (the runtime, the IO workers' wake-ups).
    let leaked = open_descriptors() as i64 - fds_before as i64;
    if FIRST_SEQUENCE_DONE.swap(true, std::sync::atomic::Ordering::Relaxed) && leaked != 0 {
        run.findings.push(Finding {
            seed,
            step: ops.len().saturating_sub(1),
            op: *ops.last().unwrap_or(&ApiOp::DriverClose),
            class: "descriptors left open once the driver closed".into(),
            detail: format!("{leaked} more open descriptors after the sequence than before"),
        });
    }
    run.descriptor_delta = leaked;
    run
}

static FIRST_SEQUENCE_DONE: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Descriptors open in this process.
fn open_descriptors() -> usize {
    // The directory's own descriptor is counted every time alike.
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

/// Shorten `ops` to fewer operations that still show a disagreement of `class` (greedy removal
/// of ever smaller runs of operations, at most `budget` replays).
fn minimize(seed: u64, ops: &[ApiOp], class: &str, mut budget: usize) -> Vec<ApiOp> {
    let mut ops = ops.to_vec();
    let mut chunk = ops.len().div_ceil(2).max(1);
    while chunk >= 1 && budget > 0 {
        let mut start = 0;
        while start < ops.len() && budget > 0 {
            let end = (start + chunk).min(ops.len());
            let mut fewer = ops[..start].to_vec();
            fewer.extend_from_slice(&ops[end..]);
            budget -= 1;
            if !fewer.is_empty()
                && run_sequence(seed, &fewer)
                    .findings
                    .iter()
                    .any(|f| f.class == class)
            {
                ops = fewer;
            } else {
                start = end;
            }
        }
        if chunk == 1 {
            break;
        }
        chunk = chunk.div_ceil(2);
    }
    ops
}

/// Totals over many sequences.
#[derive(Default)]
struct Totals {
    sequences: u64,
    operations: u64,
    bytes_checked: u64,
    changed_past_short_reads: u64,
    /// Sequences after which more (or fewer) descriptors were open than before it.
    descriptor_deltas: u64,
    tally: BTreeMap<String, u64>,
    /// The first finding of each class, the sequence it came from, and how often the class came.
    findings: BTreeMap<String, (Finding, Vec<ApiOp>, u64)>,
}

impl Totals {
    fn run(&mut self, seed: u64, len: usize) {
        let ops = random_sequence(seed, len);
        let run = run_sequence(seed, &ops);
        self.sequences += 1;
        self.operations += run.executed as u64;
        self.bytes_checked += run.bytes_checked;
        self.changed_past_short_reads += run.changed_past_short_reads;
        self.descriptor_deltas += u64::from(run.descriptor_delta != 0);
        for (class, n) in run.tally {
            *self.tally.entry(class).or_default() += n;
        }
        for finding in run.findings {
            let entry = self
                .findings
                .entry(finding.class.clone())
                .or_insert_with(|| (finding.clone(), ops[..=finding.step].to_vec(), 0));
            entry.2 += 1;
        }
    }

    fn report(&self, elapsed: Duration) -> String {
        let mut out = format!(
            "capi model: {} sequences, {} operations ({:.0}/s), {} bytes of files and device memory compared, {:.1} s\n",
            self.sequences,
            self.operations,
            self.operations as f64 / elapsed.as_secs_f64().max(1e-9),
            self.bytes_checked,
            elapsed.as_secs_f64()
        );
        out.push_str(&format!(
            "short reads that changed device bytes past their count (allowed): {}\n",
            self.changed_past_short_reads
        ));
        out.push_str(&format!(
            "sequences that changed the number of open descriptors: {} (the first may, once)\n",
            self.descriptor_deltas
        ));
        out.push_str("calls by entry point and answer:\n");
        for (class, n) in &self.tally {
            out.push_str(&format!("  {n:>7}  {class}\n"));
        }
        out
    }
}

#[test]
fn random_call_sequences_follow_the_reference_model() {
    let started = Instant::now();
    let mut totals = Totals::default();
    for seed in 1..=SEQUENCES {
        totals.run(seed, SEQUENCE_LEN);
    }
    if let Some(seconds) = extra_seconds() {
        let deadline = started + Duration::from_secs(seconds);
        let first = extra_seed();
        println!("capi model: longer run from seed {first} for {seconds} s");
        let mut seed = first;
        while Instant::now() < deadline {
            totals.run(seed, SEQUENCE_LEN);
            seed = seed.wrapping_add(1);
        }
    }
    println!("{}", totals.report(started.elapsed()));
    // Every entry point is reached with success and with failure, and IO moves bytes.
    for needed in [
        "hipFileDriverOpen ok",
        "hipFileDriverClose ok",
        "hipFileDriverClose DriverNotInitialized",
        "hipFileHandleRegister ok",
        "hipFileHandleRegister HandleAlreadyRegistered",
        "hipFileHandleRegister InvalidFileType",
        "hipFileHandleDeregister ok",
        "hipFileBufRegister ok",
        "hipFileBufRegister MemoryAlreadyRegistered",
        "hipFileBufRegister HipPointerRangeError",
        "hipFileBufDeregister ok",
        "hipFileBufDeregister MemoryNotRegistered",
        "hipFileRead bytes",
        "hipFileRead 0 bytes",
        "hipFileRead -1/EINVAL",
        "hipFileRead HandleNotRegistered",
        "hipFileRead InvalidValue",
        "hipFileWrite bytes",
        "hipFileWrite -1/EBADF",
        "hipFileWrite HipMemoryTypeInvalid",
    ] {
        assert!(
            totals.tally.get(needed).is_some_and(|n| *n >= 3),
            "the sequences reach `{needed}` too rarely"
        );
    }
    if totals.findings.is_empty() {
        return;
    }
    let mut failures = String::new();
    for (class, (first, ops, count)) in &totals.findings {
        let short = minimize(first.seed, ops, class, 400);
        failures.push_str(&format!(
            "\n{class}: {count} time(s); first at seed {} step {}: {:?}: {}\n  shortest sequence found ({} of {} operations):\n",
            first.seed,
            first.step,
            first.op,
            first.detail,
            short.len(),
            ops.len()
        ));
        for op in short {
            failures.push_str(&format!("    {op:?}\n"));
        }
    }
    panic!(
        "{} kind(s) of disagreement between the C ABI and the model:{failures}",
        totals.findings.len()
    );
}
