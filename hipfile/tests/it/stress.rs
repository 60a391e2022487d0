//! 64 threads race every operation of the registration state machine for a bounded time:
//! register and deregister files (shared by groups of threads, so deregistration meets IO in
//! flight) and buffers, read and write, open and close the driver (down to zero references, which
//! forgets every registration under the others' feet). Every successful read is byte-checked,
//! every write keeps the file's content, every error is one the operation may meet in such a
//! race, nothing panics and nothing hangs: a watchdog in the child names the stuck threads and
//! aborts, and the parent kills a child that outlives its limit. [`harness::SECONDS_VAR`] runs it
//! longer than the CI default.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hipfile::{Driver, Error, ErrorKind, FileHandle, FileHandleId, IoCall, IoOp};
use hipfile_hip::{DeviceBuffer, GpuRuntime};
use hipfile_testkit::conformance::pattern;
use hipfile_testkit::target::runtime_under_test;

use crate::harness::{self, figure, first_difference, Merge, Rng};

const THREADS: usize = 64;
/// Threads per shared file; the rest own a file and use the facade's RAII handles.
const SHARING: usize = 4;
const SHARED_GROUPS: usize = 12;
const FILE_LEN: usize = 512 * 1024 + 4097;
const MAX_IO: usize = 192 * 1024;
/// How long past its run the watchdog waits before it declares a hang.
const HANG_AFTER: Duration = Duration::from_secs(90);

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
enum Op {
    Idle,
    Read,
    Write,
    RegisterFile,
    DeregisterFile,
    RegisterBuffer,
    DeregisterBuffer,
    DriverOpen,
    DriverClose,
}

const OPS: [Op; 9] = [
    Op::Idle,
    Op::Read,
    Op::Write,
    Op::RegisterFile,
    Op::DeregisterFile,
    Op::RegisterBuffer,
    Op::DeregisterBuffer,
    Op::DriverOpen,
    Op::DriverClose,
];

/// The errors an operation may meet while others race it; anything else is a defect.
fn expected(op: Op, e: &Error) -> bool {
    use ErrorKind as K;
    match op {
        // The handle was deregistered, or forgotten by a close to zero; or the driver is closed.
        Op::Read | Op::Write => {
            e.kind() == K::HandleNotRegistered
                || (e.kind() == K::Os && e.errno() == Some(libc::EINVAL))
        }
        // Another thread of the group registered the file, or is deregistering it.
        Op::RegisterFile => e.kind() == K::HandleAlreadyRegistered,
        Op::DeregisterFile => matches!(
            e.kind(),
            K::HandleNotRegistered | K::DriverNotInitialized | K::InternalError
        ),
        Op::DeregisterBuffer => matches!(e.kind(), K::MemoryNotRegistered | K::DriverClosing),
        Op::DriverClose => e.kind() == K::DriverNotInitialized,
        Op::Idle | Op::RegisterBuffer | Op::DriverOpen => false,
    }
}

/// A file, its content, and (for shared files) the handle of its current registration.
struct Target {
    file: File,
    content: Vec<u8>,
    /// The registered handle's id, 0 when the group knows none.
    slot: AtomicU64,
}

/// What every thread sees.
struct World<'a> {
    driver: &'a Driver,
    gpu: Arc<dyn GpuRuntime>,
    shared: Vec<Target>,
    owned: Vec<Target>,
    stop: AtomicBool,
    /// Per thread: the operation it is in, and operations done.
    doing: Vec<AtomicU8>,
    done: Vec<AtomicU64>,
}

/// Outcomes per operation: successes and errors by kind.
#[derive(Default)]
struct Tally {
    outcomes: BTreeMap<(Op, String), u64>,
    bytes_checked: u64,
    closes_to_zero: u64,
}

impl Tally {
    fn count(&mut self, op: Op, outcome: &Result<(), Error>) {
        let key = match outcome {
            Ok(()) => "ok".to_string(),
            Err(e) => match e.errno() {
                Some(errno) => format!("{:?}({errno})", e.kind()),
                None => format!("{:?}", e.kind()),
            },
        };
        *self.outcomes.entry((op, key)).or_default() += 1;
    }
}

impl Merge for Tally {
    fn merge(&mut self, other: Tally) {
        for (k, v) in other.outcomes {
            *self.outcomes.entry(k).or_default() += v;
        }
        self.bytes_checked += other.bytes_checked;
        self.closes_to_zero += other.closes_to_zero;
    }
}

/// One thread's life: random operations until told to stop.
fn racer(world: &World<'_>, t: usize) -> Tally {
    let mut rng = Rng::new(0x5_7E55 + t as u64);
    let core = world.driver.core();
    let mut dev = DeviceBuffer::new(Arc::clone(&world.gpu), MAX_IO + 8192).expect("a buffer");
    let mut back = vec![0u8; MAX_IO];
    let mut buffer_registered = false;
    let owned = t
        .checked_sub(SHARING * SHARED_GROUPS)
        .map(|i| &world.owned[i]);
    let target = owned.unwrap_or_else(|| &world.shared[t / SHARING]);
    let mut own_handle: Option<FileHandle> = None;
    let mut tally = Tally::default();
    while !world.stop.load(Ordering::Relaxed) {
        let op = match rng.range(0, 100) {
            0..=39 => Op::Read,
            40..=59 => Op::Write,
            60..=69 => Op::RegisterFile,
            70..=77 => Op::DeregisterFile,
            78..=85 if buffer_registered => Op::DeregisterBuffer,
            78..=85 => Op::RegisterBuffer,
            86..=91 => Op::DriverOpen,
            _ => Op::DriverClose,
        };
        world.doing[t].store(op as u8, Ordering::Relaxed);
        let outcome: Result<(), Error> = match op {
            Op::Read | Op::Write => {
                let handle = match &own_handle {
                    Some(h) => Some(h.id()),
                    None if owned.is_some() => None,
                    None => match target.slot.load(Ordering::Acquire) {
                        0 => None,
                        id => Some(FileHandleId(id)),
                    },
                };
                match handle {
                    Some(id) => io(world, &mut rng, &mut dev, &mut back, target, id, op)
                        .map(|checked| tally.bytes_checked += checked as u64),
                    None => {
                        world.doing[t].store(Op::Idle as u8, Ordering::Relaxed);
                        continue;
                    }
                }
            }
            Op::RegisterFile if owned.is_some() => {
                // The facade's handle deregisters the previous registration as it drops.
                own_handle = None;
                world
                    .driver
                    .register_file(&target.file)
                    .map(|h| own_handle = Some(h))
            }
            Op::RegisterFile => core.handle_register(target.file.as_raw_fd()).map(|id| {
                target.slot.store(id.0, Ordering::Release);
            }),
            Op::DeregisterFile if owned.is_some() => {
                own_handle = None;
                Ok(())
            }
            Op::DeregisterFile => match target.slot.swap(0, Ordering::AcqRel) {
                0 => Ok(()),
                id => {
                    let result = core.handle_deregister(FileHandleId(id));
                    if matches!(&result, Err(e) if e.kind() == ErrorKind::InternalError) {
                        // Refused while IO is in flight: the registration stays, and its id too.
                        let _ = target.slot.compare_exchange(
                            0,
                            id,
                            Ordering::AcqRel,
                            Ordering::Relaxed,
                        );
                    }
                    result
                }
            },
            Op::RegisterBuffer => {
                let r = core.buf_register(dev.ptr(), dev.len(), 0);
                buffer_registered = r.is_ok();
                r
            }
            Op::DeregisterBuffer => {
                buffer_registered = false;
                core.buf_deregister(dev.ptr())
            }
            Op::DriverOpen => core.open(),
            Op::DriverClose => {
                let r = core.close();
                if r.is_ok() && core.use_count() == 0 {
                    tally.closes_to_zero += 1;
                }
                r
            }
            Op::Idle => Ok(()),
        };
        if let Err(e) = &outcome {
            assert!(
                expected(op, e),
                "thread {t}: {op:?} failed with an error it cannot meet in this race: {e:?}"
            );
        }
        tally.count(op, &outcome);
        world.done[t].fetch_add(1, Ordering::Relaxed);
        world.doing[t].store(Op::Idle as u8, Ordering::Relaxed);
    }
    drop(own_handle);
    if buffer_registered {
        let _ = core.buf_deregister(dev.ptr());
    }
    tally
}

/// A read (checked against the file's content) or a write (of the bytes the file holds there,
/// so its content never changes) of a random range; the bytes checked.
fn io(
    world: &World<'_>,
    rng: &mut Rng,
    dev: &mut DeviceBuffer,
    back: &mut [u8],
    target: &Target,
    handle: FileHandleId,
    op: Op,
) -> Result<usize, Error> {
    let aligned = rng.chance(40);
    let mut len = rng.size(1, MAX_IO + 1);
    let mut offset = rng.size(0, FILE_LEN - len + 1);
    let mut buffer_offset = rng.size(0, 4096);
    if aligned {
        len = (len / 4096).max(1) * 4096;
        offset -= offset % 4096;
        buffer_offset = 0;
    }
    let expected = &target.content[offset..offset + len];
    let io_op = if op == Op::Write {
        dev.write_at(buffer_offset, expected).expect("filling");
        IoOp::Write
    } else {
        IoOp::Read
    };
    let n = world.driver.core().io(IoCall {
        op: io_op,
        handle,
        buffer: dev.ptr(),
        size: len,
        file_offset: offset as i64,
        buffer_offset: buffer_offset as i64,
        loan: None,
    })?;
    assert_eq!(
        n, len,
        "{op:?} of {len} bytes at {offset} inside the file reported {n}"
    );
    if op == Op::Read {
        dev.read_at(buffer_offset, &mut back[..len])
            .expect("device bytes");
        if let Some(at) = first_difference(&back[..len], expected) {
            panic!("a read of {len} bytes at {offset} differs at byte {at}");
        }
        Ok(len)
    } else {
        Ok(0)
    }
}

fn stress_child() {
    let run_for = harness::run_seconds(2.5);
    let under_test = runtime_under_test().expect("the GPU runtime");
    let gpu = Arc::clone(&under_test.runtime);
    // Small staging and two workers: a driver that opens again after every close to zero
    // stays cheap to open.
    let driver = harness::driver_on(&gpu, |s| {
        s.max_io_threads = 2;
        s.per_buffer_cache_size_kb = 128;
        s.min_piece_kb = 32;
        s.max_pinned_mem_size_kb = 16 * 1024;
    });
    let dir = tempfile::tempdir().expect("a temporary directory");
    let source = pattern(0x57, 0, 2 * FILE_LEN);
    let make = |i: usize| {
        let shift = (i * 8191) % FILE_LEN;
        let content = source[shift..shift + FILE_LEN].to_vec();
        let path = dir.path().join(format!("f{i}"));
        std::fs::write(&path, &content).expect("writing a file");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("opening a file");
        Target {
            file,
            content,
            slot: AtomicU64::new(0),
        }
    };
    let owned_count = THREADS - SHARING * SHARED_GROUPS;
    let world = World {
        driver: &driver,
        gpu: Arc::clone(&gpu),
        shared: (0..SHARED_GROUPS).map(make).collect(),
        owned: (SHARED_GROUPS..SHARED_GROUPS + owned_count)
            .map(make)
            .collect(),
        stop: AtomicBool::new(false),
        doing: (0..THREADS).map(|_| AtomicU8::new(0)).collect(),
        done: (0..THREADS).map(|_| AtomicU64::new(0)).collect(),
    };
    let (tally, raced) = harness::race(
        "race",
        THREADS,
        run_for,
        HANG_AFTER,
        &world.stop,
        |t| racer(&world, t),
        |t| {
            let op = OPS[world.doing[t].load(Ordering::Relaxed) as usize];
            (op, world.done[t].load(Ordering::Relaxed))
        },
    );

    // Every shared registration still known goes; the files kept their content.
    let core = Arc::clone(driver.core());
    for target in &world.shared {
        let id = target.slot.swap(0, Ordering::AcqRel);
        if id != 0 {
            let _ = core.handle_deregister(FileHandleId(id));
        }
    }
    for (i, target) in world.shared.iter().chain(&world.owned).enumerate() {
        let mut now = vec![0u8; FILE_LEN];
        target
            .file
            .read_exact_at(&mut now, 0)
            .expect("reading a file");
        if let Some(at) = first_difference(&now, &target.content) {
            panic!("file {i} changed at byte {at}: a write put bytes where they do not belong");
        }
    }
    let ops: u64 = tally.outcomes.values().sum();
    let mut lines = Vec::new();
    for op in &OPS[1..] {
        let parts: Vec<String> = tally
            .outcomes
            .iter()
            .filter(|((o, _), _)| o == op)
            .map(|((_, k), v)| format!("{k} {v}"))
            .collect();
        lines.push(format!("{op:?}: {}", parts.join(", ")));
    }
    figure(format!(
        "stress: {THREADS} threads for {raced:.1?}: {ops} operations, {} bytes checked, {} \
         closes to zero references, no panic, no hang",
        tally.bytes_checked, tally.closes_to_zero
    ));
    for line in lines {
        figure(format!("stress:   {line}"));
    }
    let reads_ok = tally
        .outcomes
        .get(&(Op::Read, "ok".to_string()))
        .copied()
        .unwrap_or(0);
    assert!(reads_ok > 0, "no read succeeded: the race checked no bytes");
    assert!(
        tally.closes_to_zero > 0,
        "the driver never closed to zero references: registrations were never forgotten under \
         the racers"
    );
    drop(world);
    // The references the racers' opens left, then the driver's own.
    while core.close().is_ok() {}
    drop(driver);
    assert_eq!(core.use_count(), 0);
    if let Some(sim) = under_test.sim {
        // The last reference dropped: everything the driver took is given back.
        let pinned = sim.live_allocations(hipfile_hip::MemoryKind::Host);
        let streams = sim.live_streams();
        figure(format!(
            "stress: after the driver closed: {pinned} pinned allocations, {streams} streams"
        ));
        assert_eq!(
            (pinned, streams),
            (0, 0),
            "pinned memory or streams outlived the driver"
        );
    }
}

#[test]
fn sixty_four_threads_racing_registration_io_and_driver_close() {
    let name = harness::test_name(
        module_path!(),
        "sixty_four_threads_racing_registration_io_and_driver_close",
    );
    if harness::as_child(&name, stress_child) {
        return;
    }
    let limit = harness::run_seconds(2.5) + HANG_AFTER + Duration::from_secs(60);
    let run = harness::run_child(harness::child_command(&name), limit, &name);
    run.assert_passed(&name);
}
