//! Fuzz target bodies and what feeds them.
//!
//! Each body is a plain function of the fuzzer's bytes that panics when an invariant breaks, so
//! the same code runs under cargo-fuzz (`fuzz/`, nightly) and in a stable `#[test]` over a
//! fixed-seed corpus ([`corpus`]). The bodies:
//!
//! - [`io_arguments`]: the validation of one read or write by [`hipfile_core::Driver::io`] on
//!   the simulated GPU, for arbitrary handles, pointers, sizes and offsets. A backend that checks
//!   what it is given ([`CHECKING_BACKEND`]) stands behind the driver, so the body knows whether
//!   a request got through, and exactly as what.
//! - [`chunking`]: the arithmetic that cuts requests into pieces, the staged engine's `Plan` and
//!   the direct path's calls, and the alignment rules both paths apply before O_DIRECT. The
//!   functions under test come in an [`Arithmetic`], because this crate may not name backend
//!   crates (the facade's tests and the fuzz crate fill it in).
//!
//! [`SplitMix64`] is the deterministic generator behind the corpora and the C API sequences of
//! [`crate::model::api`].

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::ops::Range;
use std::os::fd::AsRawFd;
use std::sync::{Arc, OnceLock};

use hipfile_core::{
    Backend, BackendContext, BackendDescriptor, Completion, Decline, DioAlign, Driver,
    DriverOptions, EnvConfig, Error, ErrorKind, FileHandleId, IoCall, IoFailure, IoOp, IoPath,
    IoRequest, RegistryBuilder, Settings, Submit, MAX_RW_COUNT,
};
use hipfile_hip::sim::SimRuntime;
use hipfile_hip::{DeviceBuffer, GpuRuntime, MemoryKind, PinnedBuffer};
use rustix::io::Errno;

/// SplitMix64: a small, fast, seedable generator (Steele, Lea and Flood), good enough to pick
/// operations and bytes, and the same on every machine.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next_u64() % n
        }
    }

    /// A `usize` in `range` (its start when empty).
    pub fn range(&mut self, range: Range<usize>) -> usize {
        range.start + self.below(range.end.saturating_sub(range.start) as u64) as usize
    }

    /// True with probability `percent`/100.
    pub fn percent(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// An index picked by weight: `weights[i]` out of their sum.
    pub fn weighted(&mut self, weights: &[u64]) -> usize {
        let mut pick = self.below(weights.iter().sum());
        for (i, w) in weights.iter().enumerate() {
            if pick < *w {
                return i;
            }
            pick -= w;
        }
        weights.len().saturating_sub(1)
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(len + 8);
        while out.len() < len {
            out.extend_from_slice(&self.next_u64().to_le_bytes());
        }
        out.truncate(len);
        out
    }
}

/// `count` fuzz inputs from `seed`: lengths spread from empty to `max_len`, so short inputs (which
/// run out and read as zeroes) are as common as long ones.
pub fn corpus(seed: u64, count: usize, max_len: usize) -> Vec<Vec<u8>> {
    let mut rng = SplitMix64::new(seed);
    (0..count)
        .map(|_| {
            let len = rng.range(0..max_len + 1);
            rng.bytes(len)
        })
        .collect()
}

/// The fuzzer's bytes, read as numbers; past the end every read is zero, so any input is
/// a complete one.
#[derive(Clone, Debug)]
pub struct ByteSource<'a> {
    data: &'a [u8],
}

impl<'a> ByteSource<'a> {
    /// Read from `data`.
    pub fn new(data: &'a [u8]) -> Self {
        ByteSource { data }
    }

    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.data.len());
        out[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        out
    }

    /// One byte.
    pub fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }

    /// Eight bytes, little-endian.
    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take::<8>())
    }

    /// Eight bytes as a signed number.
    pub fn i64(&mut self) -> i64 {
        i64::from_le_bytes(self.take::<8>())
    }

    /// Eight bytes as a `usize`.
    pub fn usize(&mut self) -> usize {
        self.u64() as usize
    }

    /// A number in `0..n` (0 when `n` is 0), from one byte when `n` fits one.
    pub fn below(&mut self, n: usize) -> usize {
        match n {
            0 => 0,
            1..=256 => self.u8() as usize % n,
            _ => self.usize() % n,
        }
    }

    /// One bit's worth of choice.
    pub fn bool(&mut self) -> bool {
        self.u8() & 1 == 1
    }
}

// ---------------------------------------------------------------------------------------------
// io_arguments

/// Bytes in each device allocation the IO body uses.
const IO_ALLOCATION: usize = 16 * 1024;

/// What the IO body keeps across inputs: the simulated GPU, its memory and the files. Building
/// them once keeps an execution to a driver open, a few registrations and a few calls.
struct IoWorld {
    runtime: Arc<dyn GpuRuntime>,
    device: Vec<DeviceBuffer>,
    managed: DeviceBuffer,
    host: PinnedBuffer,
    _dir: tempfile::TempDir,
    /// Read-write, read-only and write-only descriptors of one file.
    files: Vec<(File, bool, bool)>,
    /// The file's direct IO offset alignment, which bounds reads near its end.
    block: u64,
}

/// Length of the IO body's file; the checking backend moves no bytes, so it never changes.
const IO_FILE_LEN: u64 = 8192;

fn io_world() -> &'static IoWorld {
    static WORLD: OnceLock<IoWorld> = OnceLock::new();
    WORLD.get_or_init(|| {
        let sim: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("data");
        std::fs::write(&path, vec![0x5Au8; IO_FILE_LEN as usize]).expect("the data file");
        let open = |read: bool, write: bool| {
            let file = OpenOptions::new()
                .read(read)
                .write(write)
                .open(&path)
                .expect("open the data file");
            (file, read, write)
        };
        let files = vec![open(true, true), open(true, false), open(false, true)];
        let block = hipfile_core::RegisteredFile::open(files[0].0.as_raw_fd())
            .expect("the data file registers")
            .dio_align()
            .offset
            .max(1)
            .into();
        IoWorld {
            block,
            device: (0..2)
                .map(|_| DeviceBuffer::new(sim.clone(), IO_ALLOCATION).expect("device memory"))
                .collect(),
            managed: DeviceBuffer::new_managed(sim.clone(), IO_ALLOCATION).expect("managed memory"),
            host: PinnedBuffer::new(sim.clone(), IO_ALLOCATION).expect("pinned memory"),
            files,
            _dir: dir,
            runtime: sim,
        }
    })
}

/// What the checking backend does with the next request it runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reply {
    /// Report every byte moved.
    All,
    /// Report this many bytes (capped at the request's size): a short read.
    Short(usize),
    /// Fail with this errno, having moved nothing.
    Fail(i32),
    /// Decline the request.
    Decline,
}

/// What the checking backend was handed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    op: IoOp,
    user_fd: i32,
    device_ptr: usize,
    size: usize,
    file_offset: u64,
    registered_buffer: bool,
}

thread_local! {
    static REPLY: RefCell<Reply> = const { RefCell::new(Reply::All) };
    static SEEN: RefCell<Vec<Seen>> = const { RefCell::new(Vec::new()) };
    static TALLY: RefCell<BTreeMap<String, u64>> = const { RefCell::new(BTreeMap::new()) };
}

/// How many IO calls of each verdict [`io_arguments`] checked on this thread since the last
/// call (`refused: InvalidValue`, `empty`, `dispatched`, ...), to show a run's spread.
pub fn take_io_tally() -> BTreeMap<String, u64> {
    TALLY.with(|t| std::mem::take(&mut *t.borrow_mut()))
}

/// The backend behind the IO body: it moves no bytes, it checks the request it is offered
/// against the contract of [`IoRequest`] (device range inside one device allocation, size at
/// most [`MAX_RW_COUNT`]) and answers as the body told it.
#[derive(Debug)]
struct CheckingBackend {
    runtime: Arc<dyn GpuRuntime>,
}

/// The descriptor of the checking backend.
pub const CHECKING_BACKEND: BackendDescriptor = BackendDescriptor {
    name: "checking",
    priority: 1,
    path: IoPath::Staged,
    init: |ctx: &BackendContext| {
        Ok(Arc::new(CheckingBackend {
            runtime: Arc::clone(&ctx.runtime),
        }) as Arc<dyn Backend>)
    },
};

impl Backend for CheckingBackend {
    fn name(&self) -> &'static str {
        "checking"
    }

    fn accepts(&self, _req: &IoRequest<'_>) -> Result<(), Decline> {
        match REPLY.with(|r| *r.borrow()) {
            Reply::Decline => Err(Decline::Other("told to".into())),
            _ => Ok(()),
        }
    }

    fn submit(&self, req: &IoRequest<'_>, _how: Submit) -> Completion {
        Completion::ready(self.check(req))
    }
}

impl CheckingBackend {
    fn check(&self, req: &IoRequest<'_>) -> Result<usize, IoFailure> {
        let (ptr, size) = (req.memory.ptr(), req.size());
        assert!(size > 0, "a zero-size request reached a backend");
        assert!(size <= MAX_RW_COUNT, "{size} bytes pass MAX_RW_COUNT");
        assert_eq!(req.memory_kind(), MemoryKind::Device);
        let info = self
            .runtime
            .pointer_info(ptr)
            .expect("the driver validated the pointer");
        assert_eq!(info.kind, MemoryKind::Device, "request on {info:?}");
        assert_eq!(
            info.device,
            req.device(),
            "the range names the owning device"
        );
        assert!(
            info.remaining_from(ptr).is_some_and(|room| room >= size),
            "{size} bytes at {ptr:#x} run past the allocation {info:?}",
        );
        SEEN.with(|s| {
            s.borrow_mut().push(Seen {
                op: req.op,
                user_fd: req.file.user_fd(),
                device_ptr: ptr,
                size,
                file_offset: req.file_offset,
                registered_buffer: req.registered_buffer,
            })
        });
        match REPLY.with(|r| *r.borrow()) {
            Reply::All | Reply::Decline => Ok(size),
            Reply::Short(n) => Ok(n.min(size)),
            Reply::Fail(errno) => Err(IoFailure::new(Error::os(errno, "told to"), 0)),
        }
    }
}

/// A device pointer the IO body may pass, as the driver must see it.
#[derive(Clone, Copy, Debug)]
struct Pointer {
    address: usize,
    /// The registered length, when exactly this address is registered.
    registered: Option<usize>,
}

/// What the driver must answer for an IO call, computed from first principles: the checks of
/// `hipFileRead`/`hipFileWrite` in their order, and what the backend was told to do.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict {
    /// Refused before any backend saw it.
    Refused(ErrorKind, Option<i32>),
    /// Zero bytes, no backend asked.
    Empty,
    /// Handed to the backend as this request.
    Dispatched(Seen),
}

/// Fuzz target body: arbitrary IO calls through [`Driver::io`] on the simulated GPU. Panics when
/// a call is answered otherwise than the validation rules say (wrong kind or errno, a backend
/// reached by an invalid call or given a range outside device memory, more bytes than asked).
pub fn io_arguments(data: &[u8]) {
    let world = io_world();
    let mut input = ByteSource::new(data);
    let mut backends = RegistryBuilder::new();
    backends
        .add(CHECKING_BACKEND)
        .expect("one backend in an empty registry");
    let driver = Driver::new(DriverOptions {
        backends: Some(backends),
        selection: None,
        env: EnvConfig::default(),
        settings: Settings::default(),
        ..DriverOptions::with_runtime(Arc::clone(&world.runtime))
    });
    // Upstream's rule: explicit opens count, a file registration opens implicitly, and so does
    // every buffer registration, even one that fails.
    // Choices read 0 for the common, valid case: a short input (read as zeroes past its end)
    // is a well-formed call, and the rarer branches take deliberate bytes.
    let mut open = input.bool();
    if open {
        driver.open().expect("the simulated driver opens");
    }

    // Registrations: each descriptor maybe, then a few device ranges.
    let mut handles: Vec<(FileHandleId, usize)> = Vec::new();
    for (i, (file, _, _)) in world.files.iter().enumerate() {
        if input.below(4) != 3 {
            let id = driver
                .handle_register(file.as_raw_fd())
                .expect("a regular file registers");
            handles.push((id, i));
            open = true;
        }
    }
    let mut registered: Vec<(usize, usize)> = Vec::new();
    for _ in 0..3 - input.below(4).min(3) {
        let buffer = &world.device[input.below(world.device.len())];
        let offset = input.below(IO_ALLOCATION);
        let len = 1 + input.below(IO_ALLOCATION - offset);
        let ptr = buffer.ptr() + offset;
        open = true;
        match driver.buf_register(ptr, len, 0) {
            Ok(()) => registered.push((ptr, len)),
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::MemoryAlreadyRegistered, "{e}");
                assert!(registered.iter().any(|(p, _)| *p == ptr));
            }
        }
    }
    if open && input.below(16) == 15 {
        driver.close().expect("an open driver closes");
        open = false;
        handles.clear();
        registered.clear();
    }
    assert_eq!(driver.use_count(), usize::from(open), "the use count");
    let closed = !open;

    for _ in 0..1 + input.below(4) {
        let op = if input.bool() {
            IoOp::Read
        } else {
            IoOp::Write
        };
        let handle = match input.below(8) {
            6 => FileHandleId(input.u64()),
            7 => FileHandleId(u64::MAX),
            _ if handles.is_empty() => FileHandleId(0),
            _ => handles[input.below(handles.len())].0,
        };
        // An arbitrary number may still be a handle this driver issued.
        let file = handles
            .iter()
            .find(|(id, _)| *id == handle)
            .map(|(_, i)| *i);
        let pointer = pick_pointer(&mut input, world, &registered);
        let size = match input.below(8) {
            5 => input.usize(),
            6 => MAX_RW_COUNT + input.below(4096),
            7 => 0,
            _ => 1 + input.below(IO_ALLOCATION),
        };
        let file_offset = match input.below(8) {
            6 => i64::MAX - input.below(1 << 20) as i64,
            7 => input.i64(),
            _ => input.below(1 << 20) as i64,
        };
        let buffer_offset = match input.below(8) {
            6 => input.i64(),
            7 => -(1 + input.below(4096) as i64),
            _ => input.below(IO_ALLOCATION / 4) as i64,
        };
        let reply = match input.below(8) {
            4 => Reply::Short(input.usize()),
            5 => Reply::Fail(
                [Errno::IO, Errno::NODEV, Errno::NOSPC, Errno::REMOTEIO][input.below(4)]
                    .raw_os_error(),
            ),
            6 => Reply::Decline,
            _ => Reply::All,
        };
        let call = IoCall {
            op,
            handle,
            buffer: pointer.address,
            size,
            file_offset,
            buffer_offset,
            loan: None,
        };
        let verdict = expected_io(world, closed, file, pointer, &call);
        let class = match &verdict {
            Verdict::Refused(ErrorKind::Os, Some(errno)) => {
                format!("refused: {}", std::io::Error::from_raw_os_error(*errno))
            }
            Verdict::Refused(kind, _) => format!("refused: {kind:?}"),
            Verdict::Empty => "zero bytes".to_string(),
            Verdict::Dispatched(_) => "dispatched".to_string(),
        };
        TALLY.with(|t| *t.borrow_mut().entry(class).or_default() += 1);
        REPLY.with(|r| *r.borrow_mut() = reply);
        SEEN.with(|s| s.borrow_mut().clear());
        let answer = driver.io(call.clone());
        let seen = SEEN.with(|s| std::mem::take(&mut *s.borrow_mut()));
        check_io_answer(&call, &verdict, reply, &answer, &seen);
    }
}

fn pick_pointer(
    input: &mut ByteSource<'_>,
    world: &IoWorld,
    registered: &[(usize, usize)],
) -> Pointer {
    let address = match input.below(12) {
        0 | 1 if !registered.is_empty() => registered[input.below(registered.len())].0,
        0..=2 => world.device[input.below(world.device.len())].ptr(),
        3..=5 => {
            world.device[input.below(world.device.len())].ptr() + input.below(IO_ALLOCATION + 1)
        }
        6 => world.managed.ptr() + input.below(IO_ALLOCATION),
        7 => world.host.as_ptr() as usize,
        8 => input.usize(),
        9 => 0,
        10 => world.device[0].ptr() + IO_ALLOCATION + input.below(64),
        _ => world.device[1].ptr() - 1 - input.below(64),
    };
    Pointer {
        address,
        registered: registered
            .iter()
            .find(|(p, _)| *p == address)
            .map(|(_, len)| *len),
    }
}

/// The checks of `Driver::io`, in order, restated.
fn expected_io(
    world: &IoWorld,
    closed: bool,
    file: Option<usize>,
    pointer: Pointer,
    call: &IoCall,
) -> Verdict {
    let einval = Verdict::Refused(ErrorKind::Os, Some(Errno::INVAL.raw_os_error()));
    if closed {
        return einval;
    }
    let Some(file) = file else {
        return Verdict::Refused(ErrorKind::HandleNotRegistered, None);
    };
    if call.file_offset < 0 || call.buffer_offset < 0 {
        return einval;
    }
    let size = call.size.min(MAX_RW_COUNT);
    // As pread(2): a file range that ends past the largest file offset.
    if (call.file_offset as u64).saturating_add(size as u64) > i64::MAX as u64 {
        return einval;
    }
    let past_end = Verdict::Refused(ErrorKind::InvalidValue, None);
    if pointer.address == 0 {
        return past_end;
    }
    let Some(end) = (call.buffer_offset as usize).checked_add(size) else {
        return past_end;
    };
    match pointer.registered {
        Some(len) if end > len => return past_end,
        Some(_) => {}
        None => {
            let info = world
                .runtime
                .pointer_info(pointer.address)
                .expect("the simulator answers every pointer query");
            if info.kind != MemoryKind::Device {
                return Verdict::Refused(ErrorKind::HipMemoryTypeInvalid, None);
            }
            if !info
                .remaining_from(pointer.address)
                .is_some_and(|room| room >= end)
            {
                return past_end;
            }
        }
    }
    let (_, readable, writable) = &world.files[file];
    let allowed = match call.op {
        IoOp::Read => *readable,
        IoOp::Write => *writable,
    };
    if !allowed {
        return Verdict::Refused(ErrorKind::Os, Some(Errno::BADF.raw_os_error()));
    }
    if size == 0 {
        return Verdict::Empty;
    }
    // A read from the end of the file on asks for nothing; one before it asks for no more than
    // the rest of the file's last block.
    let mut size = size;
    if call.op == IoOp::Read {
        let offset = call.file_offset as u64;
        if offset >= IO_FILE_LEN {
            return Verdict::Empty;
        }
        let rest = (IO_FILE_LEN - offset).div_ceil(world.block) * world.block;
        size = size.min(rest as usize);
    }
    Verdict::Dispatched(Seen {
        op: call.op,
        user_fd: world.files[file].0.as_raw_fd(),
        device_ptr: pointer.address + call.buffer_offset as usize,
        size,
        file_offset: call.file_offset as u64,
        registered_buffer: pointer.registered.is_some(),
    })
}

fn check_io_answer(
    call: &IoCall,
    verdict: &Verdict,
    reply: Reply,
    answer: &hipfile_core::Result<usize>,
    seen: &[Seen],
) {
    let context = || format!("{call:?} (expected {verdict:?}, backend told {reply:?})");
    if let Ok(n) = answer {
        assert!(
            *n <= call.size.min(MAX_RW_COUNT),
            "{n} bytes for {}: {}",
            call.size,
            context()
        );
    }
    match verdict {
        Verdict::Refused(kind, errno) => {
            assert!(
                seen.is_empty(),
                "a backend ran a refused call: {}",
                context()
            );
            match answer {
                Err(e) => assert!(
                    e.kind() == *kind && e.errno() == *errno,
                    "answered {e:?}: {}",
                    context()
                ),
                Ok(n) => panic!("answered {n} bytes: {}", context()),
            }
        }
        Verdict::Empty => {
            assert!(
                seen.is_empty(),
                "a backend ran an empty call: {}",
                context()
            );
            assert_eq!(answer.as_ref().ok(), Some(&0), "{}", context());
        }
        Verdict::Dispatched(request) => {
            let expected_seen: &[Seen] = if reply == Reply::Decline {
                &[]
            } else {
                std::slice::from_ref(request)
            };
            assert_eq!(seen, expected_seen, "the backend's requests: {}", context());
            let failover = |errno: i32| {
                errno == Errno::NODEV.raw_os_error() || errno == Errno::REMOTEIO.raw_os_error()
            };
            match (reply, answer) {
                (Reply::All, Ok(n)) => assert_eq!(*n, request.size, "{}", context()),
                (Reply::Short(k), Ok(n)) => assert_eq!(*n, k.min(request.size), "{}", context()),
                // No other backend: a decline, or a failure eligible for failover, leaves
                // nobody to run the request.
                (Reply::Decline, Err(e)) => {
                    assert_eq!(e.kind(), ErrorKind::InternalError, "{}", context())
                }
                (Reply::Fail(errno), Err(e)) if failover(errno) => {
                    assert_eq!(e.kind(), ErrorKind::InternalError, "{}", context())
                }
                (Reply::Fail(errno), Err(e)) => assert!(
                    e.kind() == ErrorKind::Os && e.errno() == Some(errno),
                    "answered {e:?}: {}",
                    context()
                ),
                (_, other) => panic!("answered {other:?}: {}", context()),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// chunking

/// A staged plan as numbers (`hipfile_fallback::plan::Plan`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagedPlan {
    /// Bytes per piece.
    pub piece: usize,
    /// Number of pieces.
    pub pieces: usize,
    /// Workers offered the transfer besides the caller.
    pub helpers: usize,
}

/// The arithmetic [`chunking`] checks, given by the caller.
#[derive(Clone, Copy, Debug)]
pub struct Arithmetic {
    /// `Plan::new(size, chunk, min_piece, inline, threads)` of the staged engine.
    pub staged_plan: fn(usize, usize, usize, usize, usize) -> StagedPlan,
    /// The request-relative byte range of piece `k` of a plan for `size` bytes
    /// (`Plan::piece_range(size, k)`).
    pub staged_piece: fn(StagedPlan, usize, usize) -> Range<usize>,
    /// Whether the staged engine may move `len` bytes at file `offset` through host `address`
    /// with O_DIRECT, for the file's alignment.
    pub staged_direct: fn(u64, usize, usize, DioAlign) -> bool,
    /// The largest single P2P call of the direct path for the file's alignment and the
    /// `max_direct_io_bytes` setting.
    pub direct_call: fn(DioAlign, usize) -> usize,
    /// Whether the direct path's verdict lets a request of `size` bytes at `file_offset` and
    /// device `address` through, everything else about it being supported.
    pub direct_accepts: fn(DioAlign, u64, usize, usize) -> bool,
}

/// The largest P2P transfer the platforms allow (`hipfile_hip::MAX_P2P_TRANSFER`).
const MAX_P2P: usize = hipfile_hip::MAX_P2P_TRANSFER;

/// Fuzz target body: the chunk and alignment arithmetic of both paths. Panics when pieces do not
/// cover a request exactly, overlap, pass the staging lane or the P2P bound, or when the two
/// paths disagree on what O_DIRECT may serve.
pub fn chunking(data: &[u8], arithmetic: &Arithmetic) {
    let mut input = ByteSource::new(data);
    staged_pieces(&mut input, arithmetic);
    direct_calls(&mut input, arithmetic);
}

/// A power of two from 1 to 2^20, or 0 (a kernel that reports none), as DIO alignments are.
fn alignment(input: &mut ByteSource<'_>) -> u32 {
    match input.below(22) {
        21 => 0,
        shift => 1 << shift,
    }
}

fn staged_pieces(input: &mut ByteSource<'_>, arithmetic: &Arithmetic) {
    // Half the inputs go through the settings, as the engine gets its numbers; half are raw.
    let (chunk, min_piece, inline, lane) = if input.bool() {
        let settings = Settings {
            per_buffer_cache_size_kb: input.u64() % (1 << 24),
            max_direct_io_size_kb: input.u64() % (1 << 24),
            max_pinned_mem_size_kb: input.u64() % (1 << 26),
            min_piece_kb: input.u64() % (1 << 24),
            min_io_threshold_kb: input.u64() % (1 << 24),
            ..Settings::default()
        };
        let chunk = settings.chunk_bytes();
        (
            chunk,
            settings.min_piece_bytes(),
            settings.inline_bytes(),
            Some(chunk),
        )
    } else {
        (input.usize(), input.usize(), input.usize(), None)
    };
    let size = match input.below(4) {
        0 => input.below(MAX_RW_COUNT + 1),
        1 => input.below(1 << 16),
        2 => MAX_RW_COUNT - input.below(1 << 16),
        _ => input.below(64 << 20),
    };
    let threads = 1 + input.below(300);
    let plan = (arithmetic.staged_plan)(size, chunk, min_piece, inline, threads);
    let why = || {
        format!("{plan:?} for size {size}, chunk {chunk}, min piece {min_piece}, inline {inline}, {threads} threads")
    };
    assert!(plan.piece >= 1, "{}", why());
    assert!(
        plan.piece <= chunk.max(4096),
        "a piece larger than a chunk: {}",
        why()
    );
    if let Some(lane) = lane {
        assert!(
            plan.piece <= lane,
            "a piece larger than the staging lane: {}",
            why()
        );
    }
    assert_eq!(plan.pieces, size.div_ceil(plan.piece), "{}", why());
    assert!(
        plan.helpers < threads,
        "more helpers than threads: {}",
        why()
    );
    assert!(
        plan.helpers <= plan.pieces.saturating_sub(1),
        "a helper with no piece: {}",
        why()
    );
    if size <= inline {
        assert_eq!(
            plan.helpers,
            0,
            "an inline request offered to helpers: {}",
            why()
        );
    }
    // The pieces tile [0, size): walk all of them when few, else the ends and a sample.
    let ks: Vec<usize> = if plan.pieces <= 2048 {
        (0..plan.pieces).collect()
    } else {
        let mut ks = vec![0, 1, plan.pieces - 2, plan.pieces - 1];
        ks.extend((0..8).map(|_| input.below(plan.pieces - 1)));
        ks
    };
    for k in ks {
        let r = (arithmetic.staged_piece)(plan, size, k);
        assert_eq!(
            r.start,
            k * plan.piece,
            "piece {k} starts elsewhere: {}",
            why()
        );
        assert!(!r.is_empty(), "piece {k} is empty: {}", why());
        assert!(r.len() <= plan.piece, "piece {k} is {r:?}: {}", why());
        assert!(r.end <= size, "piece {k} is {r:?}: {}", why());
        if k + 1 < plan.pieces {
            assert_eq!(
                r.end,
                (k + 1) * plan.piece,
                "a gap after piece {k}: {}",
                why()
            );
        } else {
            assert_eq!(r.end, size, "the last piece ends at {}: {}", r.end, why());
        }
    }
}

fn direct_calls(input: &mut ByteSource<'_>, arithmetic: &Arithmetic) {
    let align = DioAlign {
        memory: alignment(input),
        offset: alignment(input),
    };
    let setting = match input.below(3) {
        0 => input.usize(),
        _ => 4096 * (1 + input.below(8192)),
    };
    let call = (arithmetic.direct_call)(align, setting);
    let unit = align.offset.max(align.memory).max(1) as usize;
    let why = || format!("call of {call} bytes for {align:?}, max_direct_io_bytes {setting}");
    assert!(call >= unit, "{}", why());
    assert_eq!(call % unit, 0, "{}", why());
    assert!(
        call <= setting.min(MAX_P2P).max(unit),
        "a call past the bound: {}",
        why()
    );

    // A request at random numbers: both paths agree on O_DIRECT; an accepted one splits into
    // calls that stay aligned and cover it exactly.
    let offset_unit = align.offset.max(1) as usize;
    let memory_unit = align.memory.max(1) as usize;
    let aligned = input.bool();
    let pick = |input: &mut ByteSource<'_>, unit: usize, limit: usize| {
        if aligned {
            unit * input.below(limit / unit + 1)
        } else {
            input.below(limit)
        }
    };
    let file_offset = pick(input, offset_unit, 1 << 40) as u64;
    let size = pick(input, offset_unit, MAX_RW_COUNT);
    let address = pick(input, memory_unit, 1 << 47);
    let accepted = (arithmetic.direct_accepts)(align, file_offset, size, address);
    let staged = (arithmetic.staged_direct)(file_offset, size, address, align);
    assert_eq!(
        accepted,
        staged,
        "the direct path and the staged engine disagree on O_DIRECT for {size} bytes at {file_offset}, address {address:#x}, {align:?}"
    );
    if !accepted {
        return;
    }
    let calls = size.div_ceil(call);
    let mut checked = Vec::new();
    if calls <= 4096 {
        checked.extend(0..calls);
    } else {
        checked.extend([0, 1, calls - 2, calls - 1]);
    }
    for j in checked {
        let start = j * call;
        let len = call.min(size - start);
        let what = || format!("call {j} of {calls} ({len} bytes at +{start}): {}", why());
        assert!(len > 0 && len <= call && start + len <= size, "{}", what());
        assert!(
            (arithmetic.direct_accepts)(align, file_offset + start as u64, len, address + start),
            "a call the direct path itself would refuse: {}",
            what()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// the stable runner

/// Seconds a longer run lasts, from `HIPFILE_FUZZ_SECONDS` (`cargo xtask fuzz` sets it); `None`
/// for the fixed corpus alone, as CI runs it.
pub fn extra_seconds() -> Option<u64> {
    std::env::var("HIPFILE_FUZZ_SECONDS")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .filter(|s| *s > 0)
}

/// The first seed of a longer run: `HIPFILE_FUZZ_SEED`, else one from the clock (printed, so a
/// failure can be replayed).
pub fn extra_seed() -> u64 {
    std::env::var("HIPFILE_FUZZ_SEED")
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

/// Run `body` over [`corpus`]`(seed, count, max_len)`; then, when [`extra_seconds`] asks for a
/// longer run, over further corpora from [`extra_seed`] until the time is up. An input that
/// panics is printed (seed, index, hex) before the panic goes on. Prints and returns the number
/// of executions.
pub fn run_corpus(
    name: &str,
    seed: u64,
    count: usize,
    max_len: usize,
    body: impl Fn(&[u8]),
) -> u64 {
    let started = std::time::Instant::now();
    let run_one = |seed: u64, index: usize, input: &[u8]| {
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(input))) {
            let hex: String = input.iter().map(|b| format!("{b:02x}")).collect();
            eprintln!("fuzz {name}: input {index} of seed {seed} failed: {hex}");
            std::panic::resume_unwind(panic);
        }
    };
    let mut executions = 0u64;
    for (i, input) in corpus(seed, count, max_len).iter().enumerate() {
        run_one(seed, i, input);
        executions += 1;
    }
    if let Some(seconds) = extra_seconds() {
        let deadline = started + std::time::Duration::from_secs(seconds);
        let mut next = extra_seed();
        println!("fuzz {name}: longer run from seed {next} for {seconds} s");
        while std::time::Instant::now() < deadline {
            for (i, input) in corpus(next, 256, max_len).iter().enumerate() {
                run_one(next, i, input);
                executions += 1;
            }
            next = next.wrapping_add(1);
        }
    }
    println!(
        "fuzz {name}: {executions} executions in {:.1} s, no failure",
        started.elapsed().as_secs_f64()
    );
    executions
}
