//! Stream-ordered IO through the Rust API (`Driver::on_stream`, `StreamIo`, `StreamOp`) on the
//! simulated GPU: round trips on every kind of stream, stream order both ways (an op waits for
//! its stream, the stream's later work waits for the op), independence of streams, late binding
//! and the stream flags, failover from the direct path, streams held by host functions where
//! there are no stream memory operations, the legacy default stream, the driver closing under a
//! held op, and the errors upstream answers.
//!
//! A stream is held by a host function that waits until the test releases it ([`StreamHold`]);
//! it gives up after [`HOLD_LIMIT`], and every test runs [`within`] a limit, so that a bug ends
//! in a failure rather than a hang. Most tests run in every feature row: [`build_and_host_copy`]
//! serves what the build's backends decline.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use hipfile::{AsDevice, AsDeviceMut, DeviceBuffer, Driver, DriverOptions, ErrorKind, StreamOp};
use hipfile_core::stream::{FIXED_FILE_OFFSET, FIXED_FILE_SIZE, PAGE_ALIGNED_INPUTS};
use hipfile_core::{
    AsyncCall, AsyncSlots, EnvConfig, FileHandleId, IoOp, RegistryBuilder, Settings,
};
use hipfile_hip::sim::{SimConfig, SimRuntime};
use hipfile_hip::{DeviceRange, GpuRuntime, OwnedStream, StreamRef};
use hipfile_testkit::conformance::pattern;

use crate::batch_support::build_and_host_copy;
use crate::harness::scratch_dir;

pub const KIB: usize = 1024;
pub const SENTINEL: u8 = 0xA5;
/// How long a host function holds its stream at most.
pub const HOLD_LIMIT: Duration = Duration::from_secs(20);
/// How long a test waits for something that should take milliseconds before calling it a hang.
pub const PATIENCE: Duration = Duration::from_secs(20);
/// How long a whole test may run.
pub const TEST_LIMIT: Duration = Duration::from_secs(60);
/// How long the tests watch an op that must not end (its stream is held).
const STILL: Duration = Duration::from_millis(100);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------------
// What the stream tests share

/// Run `f` on a thread of its own and answer what it returns; panic if it has not returned
/// within `limit` (a hang: the thread is left behind), resume its panic if it panicked.
pub fn within<T: Send + 'static>(
    limit: Duration,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let worker = thread::Builder::new()
        .name(what.chars().take(15).collect())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .expect("starting a test thread");
    match rx.recv_timeout(limit) {
        Ok(value) => {
            let _ = worker.join();
            value
        }
        Err(RecvTimeoutError::Disconnected) => match worker.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the thread sent nothing and did not panic"),
        },
        Err(RecvTimeoutError::Timeout) => panic!("{what}: did not end within {limit:?} (a hang)"),
    }
}

/// A simulated GPU and a driver of its own on it.
pub struct Rig {
    /// The sim itself (its P2P fault script).
    #[cfg_attr(not(all(feature = "fastpath", feature = "fallback")), allow(dead_code))]
    pub sim: Arc<SimRuntime>,
    pub gpu: Arc<dyn GpuRuntime>,
    pub driver: Driver,
}

/// A sim built from `config` and a driver on it: `backends`, statistics on, the settings
/// changed by `tune`.
pub fn rig(config: SimConfig, backends: RegistryBuilder, tune: impl FnOnce(&mut Settings)) -> Rig {
    let sim = Arc::new(SimRuntime::new(config));
    let gpu: Arc<dyn GpuRuntime> = sim.clone();
    let mut options = DriverOptions {
        backends: Some(backends),
        selection: None,
        env: EnvConfig {
            stats_level: Some(1),
            ..EnvConfig::default()
        },
        ..DriverOptions::with_runtime(Arc::clone(&gpu))
    };
    tune(&mut options.settings);
    let driver = Driver::with_options(options).expect("opening a driver on the sim");
    Rig { sim, gpu, driver }
}

/// The default sim, and every request served (the build's backends, then a host copy).
pub fn plain_rig() -> Rig {
    rig(SimConfig::default(), build_and_host_copy(), |_| {})
}

/// `bytes` written to `dir/name`, opened read-write.
pub fn data_file(dir: &Path, name: &str, bytes: &[u8]) -> (PathBuf, File) {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("writing a file");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("opening a file");
    (path, file)
}

/// Device memory of `len` bytes, every byte [`SENTINEL`].
pub fn sentinel_buffer(driver: &Driver, len: usize) -> DeviceBuffer {
    let mut buf = driver.alloc(len).expect("device memory");
    buf.fill(SENTINEL).expect("filling device memory");
    buf
}

/// Device memory holding `bytes`.
pub fn filled(driver: &Driver, bytes: &[u8]) -> DeviceBuffer {
    let mut buf = driver.alloc(bytes.len()).expect("device memory");
    buf.write_at(0, bytes).expect("filling device memory");
    buf
}

/// What device memory at `ptr` holds now, read while the memory is lent to an op.
pub fn device_bytes(gpu: &Arc<dyn GpuRuntime>, ptr: usize, len: usize) -> Vec<u8> {
    let range = DeviceRange::query(gpu, ptr, len).expect("a device range");
    let mut bytes = vec![0u8; len];
    range
        .copy_to_host(&mut bytes)
        .expect("copying device memory");
    bytes
}

#[derive(Debug, Default)]
struct HoldState {
    reached: bool,
    released: bool,
    gave_up: bool,
}

/// A host function that holds a stream until [`StreamHold::release`], or [`HOLD_LIMIT`] at most.
#[derive(Clone, Debug, Default)]
pub struct StreamHold(Arc<(Mutex<HoldState>, Condvar)>);

impl StreamHold {
    /// Hold `stream` from the work queued on it so far.
    pub fn on(stream: &StreamRef<'_>) -> StreamHold {
        let hold = StreamHold::default();
        let inner = Arc::clone(&hold.0);
        stream
            .launch_host_func(Box::new(move || {
                let (state, changed) = &*inner;
                let deadline = Instant::now() + HOLD_LIMIT;
                let mut st = lock(state);
                st.reached = true;
                changed.notify_all();
                while !st.released {
                    let now = Instant::now();
                    if now >= deadline {
                        st.gave_up = true;
                        break;
                    }
                    st = changed
                        .wait_timeout(st, deadline - now)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }))
            .expect("queueing the holding host function");
        hold
    }

    /// Wait until the stream reached the hold.
    pub fn wait_reached(&self) {
        let (state, changed) = &*self.0;
        let since = Instant::now();
        let mut st = lock(state);
        while !st.reached {
            assert!(
                since.elapsed() < PATIENCE,
                "the stream never reached the hold"
            );
            st = changed
                .wait_timeout(st, Duration::from_millis(10))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Let the stream go on.
    pub fn release(&self) {
        let (state, changed) = &*self.0;
        lock(state).released = true;
        changed.notify_all();
    }

    /// Whether the hold gave up waiting (the test took longer than [`HOLD_LIMIT`]).
    pub fn gave_up(&self) -> bool {
        lock(&self.0 .0).gave_up
    }
}

/// The result of `op` once it ended; panics if it has not ended within [`PATIENCE`].
#[track_caller]
pub fn ended(op: &StreamOp) -> hipfile::Result<usize> {
    let since = Instant::now();
    loop {
        if let Some(result) = op.result() {
            return result;
        }
        assert!(since.elapsed() < PATIENCE, "the op did not end (a hang)");
        thread::sleep(Duration::from_millis(1));
    }
}

/// Watch `op` for a while: it must not end.
#[track_caller]
pub fn assert_pending(op: &StreamOp, what: &str) {
    let since = Instant::now();
    while since.elapsed() < STILL {
        assert!(
            op.result().is_none(),
            "{what}: the op ended while its stream was held: {:?}",
            op.result()
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// An op's result as a comparable value.
pub fn outcome(result: &hipfile::Result<usize>) -> Result<usize, ErrorKind> {
    result.as_ref().map(|n| *n).map_err(|e| e.kind())
}

/// The slots of an op queued through the core API ([`hipfile_core::Driver::submit_async`]),
/// for tests that drop every facade value while the op is queued.
#[derive(Debug, Default)]
pub struct CoreSlots {
    size: AtomicUsize,
    file_offset: AtomicI64,
    buffer_offset: AtomicI64,
    result: Mutex<Option<hipfile::Result<usize>>>,
    cleared: AtomicBool,
}

impl AsyncSlots for CoreSlots {
    fn size(&self) -> usize {
        self.size.load(Ordering::Acquire)
    }
    fn file_offset(&self) -> i64 {
        self.file_offset.load(Ordering::Acquire)
    }
    fn buffer_offset(&self) -> i64 {
        self.buffer_offset.load(Ordering::Acquire)
    }
    fn clear_result(&self) {
        self.cleared.store(true, Ordering::Release);
    }
    fn set_result(&self, result: &hipfile::Result<usize>) {
        *lock(&self.result) = Some(result.clone());
    }
}

impl CoreSlots {
    /// The result once the op ended; panics if it has not ended within [`PATIENCE`].
    #[track_caller]
    pub fn ended(&self) -> hipfile::Result<usize> {
        let since = Instant::now();
        loop {
            if let Some(result) = lock(&self.result).clone() {
                return result;
            }
            assert!(since.elapsed() < PATIENCE, "the op did not end (a hang)");
            thread::sleep(Duration::from_millis(1));
        }
    }

    /// The result, if the op ended.
    pub fn result(&self) -> Option<hipfile::Result<usize>> {
        lock(&self.result).clone()
    }
}

/// Queue `size` bytes at `file_offset` between file `handle` and device memory at `buffer`
/// on `stream` through the core API.
pub fn submit_core(
    core: &Arc<hipfile_core::Driver>,
    op: IoOp,
    handle: FileHandleId,
    buffer: usize,
    size: usize,
    file_offset: i64,
    stream: &StreamRef<'_>,
) -> hipfile::Result<Arc<CoreSlots>> {
    submit_core_lent(core, op, handle, buffer, size, file_offset, stream, None)
}

/// [`submit_core`] of memory that `loan` lends (host memory).
#[allow(clippy::too_many_arguments)]
pub fn submit_core_lent(
    core: &Arc<hipfile_core::Driver>,
    op: IoOp,
    handle: FileHandleId,
    buffer: usize,
    size: usize,
    file_offset: i64,
    stream: &StreamRef<'_>,
    loan: Option<hipfile::HostLoan>,
) -> hipfile::Result<Arc<CoreSlots>> {
    let slots = Arc::new(CoreSlots {
        size: AtomicUsize::new(size),
        file_offset: AtomicI64::new(file_offset),
        ..CoreSlots::default()
    });
    let session = core.async_session()?;
    core.submit_async(
        &session,
        AsyncCall {
            op,
            handle,
            buffer,
            stream,
            slots: Arc::clone(&slots) as Arc<dyn AsyncSlots>,
            loan,
        },
    )?;
    assert!(
        slots.cleared.load(Ordering::Acquire),
        "the result was not cleared"
    );
    Ok(slots)
}

/// How long the driver's threads and descriptors may take to go away once its last op ended
/// (idle stream threads linger two seconds).
const LEAK_PATIENCE: Duration = Duration::from_secs(8);

/// Wait until this process has no more descriptors than `fds` and no thread that `threads` does
/// not list; panic, naming what is left, after [`LEAK_PATIENCE`].
pub fn assert_back_to(fds: usize, threads: &[i32]) {
    let since = Instant::now();
    loop {
        let now = crate::harness::open_fds();
        let extra: Vec<(i32, String)> = crate::harness::thread_ids()
            .into_iter()
            .filter(|t| !threads.contains(t))
            .map(|t| (t, crate::harness::thread_name(t)))
            .filter(|(_, name)| !name.is_empty())
            .collect();
        if now <= fds && extra.is_empty() {
            return;
        }
        assert!(
            since.elapsed() < LEAK_PATIENCE,
            "{now} descriptors open (baseline {fds}); threads left: {extra:?}"
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// Ops moved by `backend` since the driver opened.
#[cfg(feature = "fallback")]
fn ops_by(driver: &Driver, backend: &str) -> u64 {
    driver
        .stats()
        .expect("statistics of the open driver")
        .backend(backend)
        .map_or(0, |b| b.ops)
}

// ---------------------------------------------------------------------------------------------
// Round trips

/// Writes from registered and plain memory then reads back into both, all queued on `stream`
/// (ordered by it), byte-compared, and the file too.
fn round_trip(rig: &Rig, stream: &StreamRef<'_>, seed: u64) {
    let driver = &rig.driver;
    let dir = scratch_dir();
    let (path, file) = data_file(dir.path(), "data", &[]);
    let handle = driver.register_file(&file).unwrap();
    let a = pattern(seed, 0, 64 * KIB);
    let b = pattern(seed + 1, 0, 12 * KIB);
    let registered = driver.register_buffer(filled(driver, &a)).unwrap();
    let plain = filled(driver, &b);
    let plain_src = plain.slice(13..5013).unwrap();
    let mut registered_dst = driver
        .register_buffer(sentinel_buffer(driver, 64 * KIB))
        .unwrap();
    let mut plain_dst = sentinel_buffer(driver, 8 * KIB);
    let mut plain_dst_slice = plain_dst.slice_mut(7..5007).unwrap();

    let results = driver.on_stream(stream, |io| {
        let ops = [
            io.write(&handle, &registered, 0).unwrap(),
            io.write(&handle, &plain_src, 70_001).unwrap(),
            // Ordered after the writes by the stream.
            io.read(&handle, &mut registered_dst, 0).unwrap(),
            io.read(&handle, &mut plain_dst_slice, 70_001).unwrap(),
        ];
        ops.map(|op| outcome(&ended(&op)))
    });
    assert_eq!(
        results,
        [Ok(64 * KIB), Ok(5000), Ok(64 * KIB), Ok(5000)],
        "on stream {stream:?}"
    );
    assert_eq!(registered_dst.to_vec().unwrap(), a);
    let got = plain_dst.to_vec().unwrap();
    assert_eq!(got[7..5007], b[13..5013]);
    assert!(got[..7].iter().chain(&got[5007..]).all(|&x| x == SENTINEL));
    let mut expected = a.clone();
    expected.resize(70_001, 0);
    expected.extend_from_slice(&b[13..5013]);
    assert!(
        std::fs::read(&path).unwrap() == expected,
        "the file's bytes"
    );
}

#[test]
fn writes_then_reads_round_trip_on_a_blocking_an_independent_and_the_null_stream() {
    within(TEST_LIMIT, "round trips", || {
        let rig = plain_rig();
        let independent = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        round_trip(&rig, &StreamRef::of(&independent), 3);
        // Without the staged engine the test backend serves unaligned ops with synchronous
        // copies, which the legacy default stream orders behind the held stream itself: only
        // the staged engine's independent lanes serve ops on streams ordered with it.
        if cfg!(feature = "fallback") {
            let blocking = OwnedStream::new(Arc::clone(&rig.gpu)).unwrap();
            round_trip(&rig, &StreamRef::of(&blocking), 1);
            round_trip(&rig, &StreamRef::null(&rig.gpu), 5);
        }
    });
}

#[test]
fn a_read_that_meets_the_end_of_the_file_is_short_and_one_past_it_moves_nothing() {
    within(TEST_LIMIT, "end of file", || {
        let rig = plain_rig();
        let driver = &rig.driver;
        let dir = scratch_dir();
        let content = pattern(7, 0, 10_000);
        let (_, file) = data_file(dir.path(), "data", &content);
        let handle = driver.register_file(&file).unwrap();
        let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        let mut short = sentinel_buffer(driver, 12 * KIB);
        let mut past = sentinel_buffer(driver, 4 * KIB);
        let mut at_end = sentinel_buffer(driver, 4 * KIB);
        let results = driver.on_stream(&StreamRef::of(&stream), |io| {
            let ops = [
                io.read(&handle, &mut short, 4096).unwrap(),
                io.read(&handle, &mut past, 20_000).unwrap(),
                io.read(&handle, &mut at_end, 10_000).unwrap(),
            ];
            ops.map(|op| outcome(&ended(&op)))
        });
        assert_eq!(results, [Ok(10_000 - 4096), Ok(0), Ok(0)]);
        let got = short.to_vec().unwrap();
        assert_eq!(got[..10_000 - 4096], content[4096..]);
        // The direct path may zero the rest of the file's last block; past it the memory keeps
        // what it held.
        assert!(got[10_000 - 4096..8192]
            .iter()
            .all(|&x| x == SENTINEL || x == 0));
        assert!(got[8192..].iter().all(|&x| x == SENTINEL));
        for untouched in [&past, &at_end] {
            assert!(untouched.to_vec().unwrap().iter().all(|&x| x == SENTINEL));
        }
    });
}

// ---------------------------------------------------------------------------------------------
// Stream order

/// An op's result as work later on its stream saw it (None: not ended).
type Seen = Option<Result<usize, ErrorKind>>;

/// On a held stream, a read stays queued (no result, its memory untouched) until the stream
/// reaches it; the host function queued after it sees its result already written.
fn check_stream_order(rig: &Rig) {
    let driver = &rig.driver;
    let dir = scratch_dir();
    let content = pattern(11, 0, 32 * KIB);
    let (_, file) = data_file(dir.path(), "data", &content);
    let handle = driver.register_file(&file).unwrap();
    let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
    let s = StreamRef::of(&stream);
    let mut dst = sentinel_buffer(driver, 16 * KIB);
    let ptr = dst.ptr();
    // What the host function queued after the op saw of the op's result (outer None: not run).
    let seen: Arc<Mutex<Option<Seen>>> = Arc::default();

    let hold = StreamHold::on(&s);
    let result = driver.on_stream(&s, |io| {
        let op = io.read(&handle, &mut dst, 4096).unwrap();
        let (seen_there, op_there) = (Arc::clone(&seen), op.clone());
        s.launch_host_func(Box::new(move || {
            *lock(&seen_there) = Some(op_there.result().as_ref().map(outcome));
        }))
        .unwrap();
        hold.wait_reached();
        assert_pending(&op, "stream order");
        assert_eq!(io.outstanding(), 1);
        assert!(
            device_bytes(&rig.gpu, ptr, 16 * KIB)
                .iter()
                .all(|&x| x == SENTINEL),
            "the op wrote its memory before its stream reached it"
        );
        assert_eq!(*lock(&seen), None, "work behind the op ran before it");
        hold.release();
        let result = outcome(&ended(&op));
        assert_eq!(io.outstanding(), 0);
        result
    });
    assert_eq!(result, Ok(16 * KIB));
    s.synchronize().unwrap();
    assert_eq!(
        *lock(&seen),
        Some(Some(Ok(16 * KIB))),
        "the work queued after the op ran before the op's result was written"
    );
    assert_eq!(dst.to_vec().unwrap(), content[4096..4096 + 16 * KIB]);
    assert!(!hold.gave_up());
}

#[test]
fn an_op_waits_for_its_stream_and_the_streams_later_work_waits_for_the_op() {
    within(TEST_LIMIT, "stream order", || {
        check_stream_order(&plain_rig())
    });
}

#[test]
fn an_op_on_one_stream_ends_while_another_stream_is_held() {
    within(TEST_LIMIT, "two streams", || {
        let rig = plain_rig();
        let driver = &rig.driver;
        let dir = scratch_dir();
        let content = pattern(12, 0, 32 * KIB);
        let (_, file) = data_file(dir.path(), "data", &content);
        let handle = driver.register_file(&file).unwrap();
        let held = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        let free = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        let (held, free) = (StreamRef::of(&held), StreamRef::of(&free));
        let mut on_held = sentinel_buffer(driver, 8 * KIB);
        let mut on_free = sentinel_buffer(driver, 8 * KIB);

        let hold = StreamHold::on(&held);
        let (a, b) = driver.on_stream(&held, |io_held| {
            let a = io_held.read(&handle, &mut on_held, 0).unwrap();
            hold.wait_reached();
            let b = driver.on_stream(&free, |io_free| {
                let b = io_free.read(&handle, &mut on_free, 8192).unwrap();
                outcome(&ended(&b))
            });
            assert_eq!(a.result().map(|r| outcome(&r)), None, "the held op ended");
            hold.release();
            (outcome(&ended(&a)), b)
        });
        assert_eq!((a, b), (Ok(8 * KIB), Ok(8 * KIB)));
        assert_eq!(on_held.to_vec().unwrap(), content[..8 * KIB]);
        assert_eq!(on_free.to_vec().unwrap(), content[8 * KIB..16 * KIB]);
    });
}

#[test]
fn ops_queued_on_one_stream_by_many_threads_at_once_all_run() {
    // Threads queueing on one stream hand their ops to the library's watcher in any order; the
    // stream reaches them in the order it holds them, and the watcher must follow that order or
    // wait forever for an op the stream reaches only after one the watcher has not started.
    within(TEST_LIMIT, "one stream", || {
        const THREADS: usize = 8;
        const OPS: usize = 32;
        const PIECE: usize = 4 * KIB;
        let rig = plain_rig();
        let driver = &rig.driver;
        let dir = scratch_dir();
        let content = pattern(40, 0, THREADS * OPS * PIECE);
        let (_, file) = data_file(dir.path(), "data", &content);
        let handle = driver.register_file(&file).unwrap();
        let dst = sentinel_buffer(driver, content.len());
        let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        let s = StreamRef::of(&stream);
        let core = driver.core();
        let slots: Vec<Arc<CoreSlots>> = thread::scope(|scope| {
            let workers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let (s, core, handle, base) = (&s, core, &handle, dst.ptr());
                    scope.spawn(move || {
                        (0..OPS)
                            .map(|k| {
                                let at = (t * OPS + k) * PIECE;
                                submit_core(
                                    core,
                                    IoOp::Read,
                                    handle.id(),
                                    base + at,
                                    PIECE,
                                    at as i64,
                                    s,
                                )
                                .expect("queueing a read")
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            workers
                .into_iter()
                .flat_map(|w| w.join().expect("a queueing thread panicked"))
                .collect()
        });
        s.synchronize().unwrap();
        for (i, op) in slots.iter().enumerate() {
            assert_eq!(op.result().map(|r| outcome(&r)), Some(Ok(PIECE)), "op {i}");
        }
        assert!(
            dst.to_vec().unwrap() == content,
            "every op's bytes in place"
        );
    });
}

/// More ops queued on one held stream than the simulator has event handles (16,384): the
/// library marks each op's place with a word the stream stores, not with an event of its own, so
/// queueing never runs out, and every op runs once the stream is let go.
#[test]
fn more_ops_than_a_runtime_has_events_queue_on_one_held_stream_and_all_run() {
    within(
        Duration::from_secs(120),
        "many ops on one held stream",
        || {
            const OPS: usize = 20_000;
            const PIECE: usize = 512;
            let rig = plain_rig();
            let driver = &rig.driver;
            let dir = scratch_dir();
            let content = pattern(41, 0, 64 * KIB);
            let (_, file) = data_file(dir.path(), "data", &content);
            let handle = driver.register_file(&file).unwrap();
            let dst = sentinel_buffer(driver, content.len());
            let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
            let s = StreamRef::of(&stream);
            let hold = StreamHold::on(&s);
            let pieces = content.len() / PIECE;
            let slots: Vec<Arc<CoreSlots>> = (0..OPS)
                .map(|i| {
                    let at = (i % pieces) * PIECE;
                    submit_core(
                        driver.core(),
                        IoOp::Read,
                        handle.id(),
                        dst.ptr() + at,
                        PIECE,
                        at as i64,
                        &s,
                    )
                    .unwrap_or_else(|e| panic!("queueing op {i}: {e}"))
                })
                .collect();
            assert!(slots[0].result().is_none(), "the stream is held");
            hold.release();
            s.synchronize().unwrap();
            for (i, op) in slots.iter().enumerate() {
                assert_eq!(op.result().map(|r| outcome(&r)), Some(Ok(PIECE)), "op {i}");
            }
            assert!(
                dst.to_vec().unwrap() == content,
                "every op's bytes in place"
            );
        },
    );
}

/// The sim under a fault script of one rule (`op` calls chosen by `trigger` fail with `code`),
/// and a driver on it serving every request (the build's backends, then a host copy).
fn scripted_rig(
    op: hipfile_testkit::faults::RuntimeOp,
    trigger: hipfile_testkit::faults::Trigger,
    code: hipfile_hip::HipErrorCode,
) -> (
    Arc<hipfile_testkit::faults::ScriptedRuntime>,
    Arc<dyn GpuRuntime>,
    Driver,
) {
    let sim: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
    let scripted =
        Arc::new(hipfile_testkit::faults::ScriptedRuntime::new(sim).rule(op, trigger, code));
    let gpu: Arc<dyn GpuRuntime> = scripted.clone();
    let driver = Driver::with_options(DriverOptions {
        backends: Some(build_and_host_copy()),
        selection: None,
        ..DriverOptions::with_runtime(Arc::clone(&gpu))
    })
    .unwrap();
    (scripted, gpu, driver)
}

/// An op whose stream wait could not be queued after its mark was: the mark still lands when
/// the stream gets there, so its word can never again tell which op a stream reached. Another
/// stream that later holds an op must not find its op "reached" by that stale mark.
#[test]
fn a_mark_left_by_a_failed_hold_never_starts_another_streams_op() {
    use hipfile_testkit::faults::{RuntimeOp, Trigger};
    within(TEST_LIMIT, "a stale mark", || {
        let (_scripted, gpu, driver) = scripted_rig(
            RuntimeOp::StreamWait,
            Trigger::Nth(2),
            hipfile_hip::HipErrorCode::OUT_OF_MEMORY,
        );
        let dir = scratch_dir();
        let content = pattern(43, 0, 64 * KIB);
        let (_, file) = data_file(dir.path(), "data", &content);
        let handle = driver.register_file(&file).unwrap();
        let dst = sentinel_buffer(&driver, 32 * KIB);
        let read = |s: &StreamRef<'_>, at: usize| {
            submit_core(
                driver.core(),
                IoOp::Read,
                handle.id(),
                dst.ptr() + at,
                4096,
                at as i64,
                s,
            )
        };
        let (a, b) = (
            OwnedStream::new_independent(Arc::clone(&gpu)).unwrap(),
            OwnedStream::new_independent(Arc::clone(&gpu)).unwrap(),
        );
        let (sa, sb) = (StreamRef::of(&a), StreamRef::of(&b));
        let hold_a = StreamHold::on(&sa);
        let first = read(&sa, 0).unwrap();
        assert_eq!(
            read(&sa, 4096).unwrap_err().kind(),
            ErrorKind::HipDriverError,
            "the second op's wait could not be queued"
        );
        hold_a.release();
        assert_eq!(outcome(&first.ended()), Ok(4096));
        sa.synchronize().unwrap();
        let hold_b = StreamHold::on(&sb);
        let held = read(&sb, 8192).unwrap();
        thread::sleep(STILL);
        assert!(
            held.result().is_none(),
            "the op of the held stream started: a stale mark stood for it"
        );
        hold_b.release();
        assert_eq!(outcome(&held.ended()), Ok(4096));
        sb.synchronize().unwrap();
        assert_eq!(
            device_bytes(&gpu, dst.ptr() + 8192, 4096),
            content[8192..12288]
        );
    });
}

/// A device whose context broke (a kernel fault makes CUDA's context fail every call, event
/// queries included) never lets a stream reach an op queued on it: the op ends with the
/// device's error after a short while instead of waiting for ever, and its memory is free again.
#[test]
fn an_op_waiting_on_a_device_whose_context_broke_ends_with_the_error() {
    use hipfile_testkit::faults::{RuntimeOp, Trigger};
    within(TEST_LIMIT, "a broken device under a held op", || {
        let (scripted, gpu, driver) = scripted_rig(
            RuntimeOp::EventWait,
            Trigger::From(1),
            hipfile_hip::HipErrorCode::ILLEGAL_ADDRESS,
        );
        let dir = scratch_dir();
        let (_, file) = data_file(dir.path(), "data", &pattern(42, 0, 64 * KIB));
        let handle = driver.register_file(&file).unwrap();
        let dst = sentinel_buffer(&driver, 16 * KIB);
        let stream = OwnedStream::new_independent(Arc::clone(&gpu)).unwrap();
        let s = StreamRef::of(&stream);
        let hold = StreamHold::on(&s);
        let op = submit_core(
            driver.core(),
            IoOp::Read,
            handle.id(),
            dst.ptr(),
            16 * KIB,
            0,
            &s,
        )
        .unwrap();
        let result = op.ended();
        assert_eq!(
            outcome(&result),
            Err(ErrorKind::HipDriverError),
            "{result:?}"
        );
        assert!(
            scripted
                .fired()
                .iter()
                .any(|f| f.op == RuntimeOp::EventWait),
            "the device's probe answered the failure"
        );
        assert_eq!(
            device_bytes(&gpu, dst.ptr(), 16),
            vec![SENTINEL; 16],
            "no byte moved"
        );
        hold.release();
        s.synchronize().unwrap();
    });
}

// ---------------------------------------------------------------------------------------------
// Late binding and stream flags

#[test]
fn a_smaller_size_and_another_offset_set_before_the_stream_reaches_the_op_are_honoured() {
    within(TEST_LIMIT, "late binding", || {
        let rig = plain_rig();
        let driver = &rig.driver;
        let dir = scratch_dir();
        let content = pattern(13, 0, 64 * KIB);
        let (_, file) = data_file(dir.path(), "data", &content);
        let handle = driver.register_file(&file).unwrap();
        let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        let s = StreamRef::of(&stream);
        let mut dst = sentinel_buffer(driver, 16 * KIB);
        let hold = StreamHold::on(&s);
        let result = driver.on_stream(&s, |io| {
            let op = io.read(&handle, &mut dst, 0).unwrap();
            op.set_size(5000);
            op.set_file_offset(12_289).unwrap();
            hold.release();
            outcome(&ended(&op))
        });
        assert_eq!(result, Ok(5000));
        let got = dst.to_vec().unwrap();
        assert_eq!(got[..5000], content[12_289..12_289 + 5000]);
        assert!(got[5000..].iter().all(|&x| x == SENTINEL));
    });
}

#[test]
fn a_size_grown_after_submission_fails_the_op_with_invalid_value() {
    within(TEST_LIMIT, "size grown", || {
        let rig = plain_rig();
        let driver = &rig.driver;
        let dir = scratch_dir();
        let content = pattern(14, 0, 64 * KIB);
        let (_, file) = data_file(dir.path(), "data", &content);
        let handle = driver.register_file(&file).unwrap();
        let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        let s = StreamRef::of(&stream);
        let mut dst = sentinel_buffer(driver, 16 * KIB);
        let mut slice = dst.slice_mut(..8 * KIB).unwrap();
        let hold = StreamHold::on(&s);
        let result = driver.on_stream(&s, |io| {
            let op = io.read(&handle, &mut slice, 0).unwrap();
            op.set_size(16 * KIB);
            hold.release();
            outcome(&ended(&op))
        });
        assert_eq!(result, Err(ErrorKind::InvalidValue));
        assert!(dst.to_vec().unwrap().iter().all(|&x| x == SENTINEL));
    });
}

#[test]
fn a_stream_registered_with_fixed_size_and_offset_ignores_later_changes() {
    within(TEST_LIMIT, "fixed flags", || {
        let rig = plain_rig();
        let driver = &rig.driver;
        let dir = scratch_dir();
        let content = pattern(15, 0, 64 * KIB);
        let (_, file) = data_file(dir.path(), "data", &content);
        let handle = driver.register_file(&file).unwrap();
        let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        let s = StreamRef::of(&stream);
        driver
            .register_stream(&s, FIXED_FILE_SIZE | FIXED_FILE_OFFSET)
            .unwrap();
        let mut shrunk = sentinel_buffer(driver, 8 * KIB);
        let mut grown = sentinel_buffer(driver, 8 * KIB);
        let hold = StreamHold::on(&s);
        let results = driver.on_stream(&s, |io| {
            let shrunk = io.read(&handle, &mut shrunk, 4096).unwrap();
            shrunk.set_size(100);
            shrunk.set_file_offset(0).unwrap();
            let grown = io.read(&handle, &mut grown, 20_000).unwrap();
            grown.set_size(16 * KIB);
            grown.set_file_offset(1).unwrap();
            hold.release();
            [outcome(&ended(&shrunk)), outcome(&ended(&grown))]
        });
        assert_eq!(results, [Ok(8 * KIB), Ok(8 * KIB)]);
        assert_eq!(shrunk.to_vec().unwrap(), content[4096..4096 + 8 * KIB]);
        assert_eq!(grown.to_vec().unwrap(), content[20_000..20_000 + 8 * KIB]);
        driver.deregister_stream(&s).unwrap();
    });
}

#[test]
fn a_stream_that_promises_page_aligned_inputs_refuses_unaligned_ones() {
    within(TEST_LIMIT, "page aligned", || {
        let rig = plain_rig();
        let driver = &rig.driver;
        let dir = scratch_dir();
        let content = pattern(16, 0, 64 * KIB);
        let (_, file) = data_file(dir.path(), "data", &content);
        let handle = driver.register_file(&file).unwrap();
        let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        let s = StreamRef::of(&stream);
        driver.register_stream(&s, PAGE_ALIGNED_INPUTS).unwrap();
        let mut dst = sentinel_buffer(driver, 24 * KIB);
        let (first, mut unaligned_offset, mut rest) = {
            let mut chunks = dst.as_device_mut().chunks_mut(8 * KIB);
            (
                chunks.next().unwrap(),
                chunks.next().unwrap(),
                chunks.next().unwrap(),
            )
        };
        let mut unaligned_size = first.get_mut(..5000).unwrap();
        let hold = StreamHold::on(&s);
        let (refusals, late) = driver.on_stream(&s, |io| {
            let refusals = [
                io.read(&handle, &mut unaligned_size, 0).map(|_| ()),
                io.read(&handle, &mut unaligned_offset, 100).map(|_| ()),
            ]
            .map(|r| r.map_err(|e| e.kind()));
            let aligned = io.read(&handle, &mut rest, 8192).unwrap();
            // Unaligned once bound: refused when the stream reaches it.
            aligned.set_size(4000);
            hold.release();
            (refusals, outcome(&ended(&aligned)))
        });
        assert_eq!(
            refusals,
            [Err(ErrorKind::InvalidValue), Err(ErrorKind::InvalidValue)],
            "unaligned size, unaligned file offset"
        );
        assert_eq!(late, Err(ErrorKind::InvalidValue));
        assert!(dst.to_vec().unwrap().iter().all(|&x| x == SENTINEL));
        let mut aligned = sentinel_buffer(driver, 8 * KIB);
        let result = driver.on_stream(&s, |io| {
            outcome(&ended(&io.read(&handle, &mut aligned, 4096).unwrap()))
        });
        assert_eq!(result, Ok(8 * KIB));
        assert_eq!(aligned.to_vec().unwrap(), content[4096..4096 + 8 * KIB]);
    });
}

// ---------------------------------------------------------------------------------------------
// Failover

/// ENODEV from the direct path moves a stream-ordered op to the staged engine, which completes
/// it byte-exact; the counters say the staged engine served it.
#[cfg(all(feature = "fastpath", feature = "fallback"))]
#[test]
fn enodev_from_the_direct_path_moves_a_stream_ordered_op_to_the_staged_engine() {
    within(TEST_LIMIT, "failover", || {
        let rig = rig(SimConfig::default(), hipfile::backends(), |_| {});
        let driver = &rig.driver;
        let dir = scratch_dir();
        let content = pattern(17, 0, 256 * KIB);
        let (path, file) = data_file(dir.path(), "data", &content);
        let handle = driver.register_file(&file).unwrap();
        let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        let s = StreamRef::of(&stream);
        let mut direct = sentinel_buffer(driver, 64 * KIB);
        let mut failed_over = sentinel_buffer(driver, 64 * KIB);
        let source = filled(driver, &pattern(18, 0, 64 * KIB));

        let r = driver.on_stream(&s, |io| {
            outcome(&ended(&io.read(&handle, &mut direct, 0).unwrap()))
        });
        assert_eq!(r, Ok(64 * KIB));
        assert_eq!(
            (ops_by(driver, "fastpath"), ops_by(driver, "fallback")),
            (1, 0),
            "the direct path serves an aligned op"
        );

        let calls = rig.sim.p2p_faults().calls();
        rig.sim.p2p_faults().fail_call(1, libc::ENODEV);
        let r = driver.on_stream(&s, |io| {
            outcome(&ended(
                &io.read(&handle, &mut failed_over, 64 * KIB as u64).unwrap(),
            ))
        });
        assert_eq!(r, Ok(64 * KIB));
        assert_eq!(failed_over.to_vec().unwrap(), content[64 * KIB..128 * KIB]);
        assert_eq!(
            rig.sim.p2p_faults().calls() - calls,
            1,
            "the direct path was tried"
        );
        assert_eq!(
            (ops_by(driver, "fastpath"), ops_by(driver, "fallback")),
            (1, 1)
        );

        rig.sim.p2p_faults().fail_call(1, libc::ENODEV);
        let r = driver.on_stream(&s, |io| {
            outcome(&ended(
                &io.write(&handle, &source, 128 * KIB as u64).unwrap(),
            ))
        });
        assert_eq!(r, Ok(64 * KIB));
        assert_eq!(
            (ops_by(driver, "fastpath"), ops_by(driver, "fallback")),
            (1, 2)
        );
        let mut expected = content.clone();
        expected[128 * KIB..192 * KIB].copy_from_slice(&pattern(18, 0, 64 * KIB));
        assert!(
            std::fs::read(&path).unwrap() == expected,
            "the file's bytes"
        );
        assert_eq!(direct.to_vec().unwrap(), content[..64 * KIB]);
    });
}

// ---------------------------------------------------------------------------------------------
// Streams without stream memory operations

#[test]
fn without_stream_memory_operations_ops_keep_stream_order() {
    within(TEST_LIMIT, "no memops", || {
        let rig = rig(
            SimConfig {
                memops: false,
                ..SimConfig::default()
            },
            build_and_host_copy(),
            |_| {},
        );
        check_stream_order(&rig);
        let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        round_trip(&rig, &StreamRef::of(&stream), 21);
    });
}

#[test]
fn with_the_stream_memops_bypass_set_ops_keep_stream_order() {
    within(TEST_LIMIT, "memops bypass", || {
        let rig = rig(SimConfig::default(), build_and_host_copy(), |s| {
            s.stream_memops_bypass = true;
        });
        check_stream_order(&rig);
        let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        round_trip(&rig, &StreamRef::of(&stream), 23);
    });
}

// ---------------------------------------------------------------------------------------------
// The legacy default stream

/// The staged engine alone serves (compat mode forced), with statistics on.
#[cfg(feature = "fallback")]
fn staged_rig() -> Rig {
    rig(SimConfig::default(), hipfile::backends(), |s| {
        s.force_compat_mode = Some(true);
    })
}

/// The null stream is held while its op runs: the staged engine's own copies must not wait
/// for it.
#[cfg(feature = "fallback")]
#[test]
fn a_read_on_the_null_stream_through_the_staged_engine_completes() {
    within(TEST_LIMIT, "null stream staged", || {
        let rig = staged_rig();
        let driver = &rig.driver;
        let dir = scratch_dir();
        let content = pattern(24, 0, 256 * KIB);
        let (_, file) = data_file(dir.path(), "data", &content);
        let handle = driver.register_file(&file).unwrap();
        let null = StreamRef::null(&rig.gpu);
        let mut dst = sentinel_buffer(driver, 192 * KIB);
        let mut odd = sentinel_buffer(driver, 10_000);
        let results = driver.on_stream(&null, |io| {
            let ops = [
                io.read(&handle, &mut dst, 4096).unwrap(),
                io.read(&handle, &mut odd, 77).unwrap(),
            ];
            ops.map(|op| outcome(&ended(&op)))
        });
        assert_eq!(results, [Ok(192 * KIB), Ok(10_000)]);
        assert_eq!(dst.to_vec().unwrap(), content[4096..4096 + 192 * KIB]);
        assert_eq!(odd.to_vec().unwrap(), content[77..10_077]);
        assert_eq!(ops_by(driver, "fastpath"), 0);
        assert_eq!(ops_by(driver, "fallback"), 2, "the staged engine served");
    });
}

/// An op held on a blocking stream, then work on the null stream (which waits for the blocking
/// stream) and a synchronous read from another thread: once the stream is let go, the op, the
/// null stream's work and the read all complete.
#[cfg(feature = "fallback")]
#[test]
fn null_stream_work_behind_a_held_op_on_a_blocking_stream_completes_once_released() {
    within(TEST_LIMIT, "blocking and null", || {
        let rig = staged_rig();
        let driver = &rig.driver;
        let dir = scratch_dir();
        let content = pattern(25, 0, 256 * KIB);
        let (_, file) = data_file(dir.path(), "data", &content);
        let handle = driver.register_file(&file).unwrap();
        let blocking = OwnedStream::new(Arc::clone(&rig.gpu)).unwrap();
        let s = StreamRef::of(&blocking);
        let null = StreamRef::null(&rig.gpu);
        let mut dst = sentinel_buffer(driver, 64 * KIB);
        let mut sync_dst = sentinel_buffer(driver, 64 * KIB);
        let null_ran = Arc::new(AtomicBool::new(false));

        let hold = StreamHold::on(&s);
        let (result, sync_result) = driver.on_stream(&s, |io| {
            let op = io.read(&handle, &mut dst, 0).unwrap();
            hold.wait_reached();
            let ran = Arc::clone(&null_ran);
            null.launch_host_func(Box::new(move || ran.store(true, Ordering::Release)))
                .unwrap();
            thread::scope(|scope| {
                let reader = scope.spawn(|| handle.read(&mut sync_dst, 128 * KIB as u64));
                assert_pending(&op, "blocking stream");
                hold.release();
                let result = outcome(&ended(&op));
                let since = Instant::now();
                while !reader.is_finished() {
                    assert!(since.elapsed() < PATIENCE, "the synchronous read hangs");
                    thread::sleep(Duration::from_millis(1));
                }
                (result, outcome(&reader.join().unwrap()))
            })
        });
        assert_eq!((result, sync_result), (Ok(64 * KIB), Ok(64 * KIB)));
        null.synchronize().unwrap();
        assert!(null_ran.load(Ordering::Acquire));
        assert_eq!(dst.to_vec().unwrap(), content[..64 * KIB]);
        assert_eq!(sync_dst.to_vec().unwrap(), content[128 * KIB..192 * KIB]);
        assert_eq!(ops_by(driver, "fallback"), 2, "the staged engine served");
        assert!(!hold.gave_up());
    });
}

// ---------------------------------------------------------------------------------------------
// Closing and deregistration under a held op

#[test]
fn closing_the_driver_to_zero_under_a_held_op_lets_it_end_with_its_bytes() {
    within(TEST_LIMIT, "close under op", || {
        let rig = plain_rig();
        let driver = &rig.driver;
        let core = Arc::clone(driver.core());
        let dir = scratch_dir();
        let content = pattern(26, 0, 64 * KIB);
        let (_, file) = data_file(dir.path(), "data", &content);
        let handle = driver.register_file(&file).unwrap();
        let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        let s = StreamRef::of(&stream);
        let mut dst = sentinel_buffer(driver, 16 * KIB);
        let hold = StreamHold::on(&s);
        let result = driver.on_stream(&s, |io| {
            let op = io.read(&handle, &mut dst, 8192).unwrap();
            assert_eq!(core.use_count(), 1);
            thread::scope(|scope| {
                // A C caller closing the process's last reference under the Rust values.
                let closer = scope.spawn(|| core.close());
                assert_pending(&op, "closing");
                hold.release();
                let result = outcome(&ended(&op));
                let since = Instant::now();
                while !closer.is_finished() {
                    assert!(since.elapsed() < PATIENCE, "the close hangs");
                    thread::sleep(Duration::from_millis(1));
                }
                closer.join().unwrap().unwrap();
                result
            })
        });
        assert_eq!(result, Ok(16 * KIB));
        assert_eq!(core.use_count(), 0);
        assert_eq!(dst.to_vec().unwrap(), content[8192..8192 + 16 * KIB]);
    });
}

/// Dropping every facade value (the driver closes to zero) while an op queued through the core
/// API is held: released, the op moves its bytes, and the driver's threads and descriptors go
/// away within a few seconds. Runs in a child process of its own, where the counts are this
/// test's alone.
fn dropped_driver_child() {
    let sim = Arc::new(SimRuntime::default());
    let gpu: Arc<dyn GpuRuntime> = sim.clone();
    let stream = OwnedStream::new_independent(Arc::clone(&gpu)).unwrap();
    let s = StreamRef::of(&stream);
    let dir = scratch_dir();
    let content = pattern(27, 0, 64 * KIB);
    let (_, file) = data_file(dir.path(), "data", &content);
    // The sim's threads for this stream and the null stream, started before the counts.
    s.launch_host_func(Box::new(|| {})).unwrap();
    s.synchronize().unwrap();
    StreamRef::null(&gpu).synchronize().unwrap();
    let mut dst = DeviceBuffer::new(Arc::clone(&gpu), 16 * KIB).unwrap();
    dst.fill(SENTINEL).unwrap();
    let (fds, threads) = (crate::harness::open_fds(), crate::harness::thread_ids());

    let driver = Driver::with_options(DriverOptions {
        backends: Some(build_and_host_copy()),
        ..DriverOptions::with_runtime(Arc::clone(&gpu))
    })
    .unwrap();
    let core = Arc::clone(driver.core());
    let handle = driver.register_file(&file).unwrap();
    let hold = StreamHold::on(&s);
    let slots = submit_core(
        &core,
        IoOp::Read,
        handle.id(),
        dst.ptr(),
        16 * KIB,
        4096,
        &s,
    )
    .unwrap();
    hold.wait_reached();
    drop(handle);
    drop(driver);
    assert_eq!(core.use_count(), 0, "every reference was dropped");
    thread::sleep(STILL);
    assert!(
        slots.result().is_none(),
        "the op ended while its stream was held"
    );
    hold.release();
    assert_eq!(outcome(&slots.ended()), Ok(16 * KIB));
    s.synchronize().unwrap();
    assert_eq!(dst.to_vec().unwrap(), content[4096..4096 + 16 * KIB]);
    drop(core);
    assert_back_to(fds, &threads);
}

#[test]
fn dropping_every_driver_value_under_a_held_op_ends_it_with_its_bytes_and_leaks_nothing() {
    let name = crate::harness::test_name(
        module_path!(),
        "dropping_every_driver_value_under_a_held_op_ends_it_with_its_bytes_and_leaks_nothing",
    );
    if crate::harness::as_child(&name, dropped_driver_child) {
        return;
    }
    crate::harness::run_child(crate::harness::child_command(&name), TEST_LIMIT, &name)
        .assert_passed(&name);
}

/// `hipFileHandleDeregister` while an op on the handle is queued on a held stream: the handle
/// is forgotten at once (a new op on it is refused, the descriptor registers again), the queued
/// op runs on the registration it was queued on and moves its bytes, and that registration, its
/// descriptors with it, ends with the op. Registered memory the op uses cannot be deregistered
/// meanwhile (`InvalidValue`).
#[test]
fn deregistering_a_file_while_its_op_is_held_lets_the_op_end_then_closes_the_registration() {
    within(TEST_LIMIT, "deregister the file under op", || {
        let rig = plain_rig();
        let driver = &rig.driver;
        let core = Arc::clone(driver.core());
        let dir = scratch_dir();
        let content = pattern(29, 0, 64 * KIB);
        let (_, file) = data_file(dir.path(), "data", &content);
        let handle = driver.register_file(&file).unwrap();
        let registration = Arc::downgrade(&core.file(handle.id()).unwrap());
        let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        let s = StreamRef::of(&stream);
        let mut dst = driver
            .register_buffer(sentinel_buffer(driver, 16 * KIB))
            .unwrap();
        let dst_at = dst.ptr();
        let hold = StreamHold::on(&s);
        let result = driver.on_stream(&s, |io| {
            let op = io.read(&handle, &mut dst, 4096).unwrap();
            hold.wait_reached();
            core.handle_deregister(handle.id()).unwrap();
            assert_eq!(
                core.buf_deregister(dst_at).unwrap_err().kind(),
                ErrorKind::InvalidValue,
                "the held op's memory"
            );
            drop(driver.register_file(&file).unwrap());
            assert!(registration.upgrade().is_some(), "the op holds it");
            assert_pending(&op, "deregistered");
            hold.release();
            outcome(&ended(&op))
        });
        assert_eq!(result, Ok(16 * KIB));
        assert_eq!(dst.to_vec().unwrap(), content[4096..4096 + 16 * KIB]);
        assert!(
            registration.upgrade().is_none(),
            "the registration ended with its op"
        );
    });
}

#[test]
fn deregistering_a_stream_while_its_op_is_held_leaves_the_op_its_flags() {
    within(TEST_LIMIT, "deregister under op", || {
        let rig = plain_rig();
        let driver = &rig.driver;
        let dir = scratch_dir();
        let content = pattern(28, 0, 64 * KIB);
        let (_, file) = data_file(dir.path(), "data", &content);
        let handle = driver.register_file(&file).unwrap();
        let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        let s = StreamRef::of(&stream);
        driver.register_stream(&s, FIXED_FILE_SIZE).unwrap();
        let mut dst = sentinel_buffer(driver, 16 * KIB);
        let hold = StreamHold::on(&s);
        let result = driver.on_stream(&s, |io| {
            let op = io.read(&handle, &mut dst, 0).unwrap();
            hold.wait_reached();
            driver.deregister_stream(&s).unwrap();
            // The op keeps the flags it was queued with: the size stays fixed.
            op.set_size(100);
            assert_pending(&op, "deregistered");
            hold.release();
            outcome(&ended(&op))
        });
        assert_eq!(result, Ok(16 * KIB));
        assert_eq!(dst.to_vec().unwrap(), content[..16 * KIB]);
        assert_eq!(
            driver.deregister_stream(&s).unwrap_err().kind(),
            ErrorKind::InvalidValue,
            "deregistered once"
        );
    });
}

// ---------------------------------------------------------------------------------------------
// Errors

#[test]
fn a_stream_handle_the_runtime_does_not_know_is_a_hip_driver_error() {
    within(TEST_LIMIT, "bogus stream", || {
        let rig = plain_rig();
        let driver = &rig.driver;
        let dir = scratch_dir();
        let (_, file) = data_file(dir.path(), "data", &pattern(29, 0, 16 * KIB));
        let handle = driver.register_file(&file).unwrap();
        let mut dst = sentinel_buffer(driver, 4 * KIB);
        // SAFETY: the handle is no stream, which breaks `from_raw`'s contract for a GPU
        // runtime; the simulator checks every handle it is given and refuses unknown ones.
        let bogus = unsafe { StreamRef::from_raw(&rig.gpu, 0xdead_beef) };
        let read = driver.on_stream(&bogus, |io| {
            io.read(&handle, &mut dst, 0)
                .map(|_| ())
                .map_err(|e| e.kind())
        });
        assert_eq!(read, Err(ErrorKind::HipDriverError));
        assert_eq!(
            driver.register_stream(&bogus, 0).unwrap_err().kind(),
            ErrorKind::HipDriverError
        );
        assert!(dst.to_vec().unwrap().iter().all(|&x| x == SENTINEL));
    });
}

/// A sim of two devices, every request served (the build's backends, then a host copy).
fn two_device_rig() -> Rig {
    rig(
        SimConfig {
            devices: 2,
            ..SimConfig::default()
        },
        build_and_host_copy(),
        |_| {},
    )
}

#[test]
fn a_buffer_on_another_device_than_the_stream_is_an_invalid_value() {
    within(TEST_LIMIT, "other device", || {
        let rig = two_device_rig();
        let driver = &rig.driver;
        let dir = scratch_dir();
        let (_, file) = data_file(dir.path(), "data", &pattern(30, 0, 16 * KIB));
        let handle = driver.register_file(&file).unwrap();
        rig.gpu.set_device(1).unwrap();
        let mut on_one = sentinel_buffer(driver, 4 * KIB);
        let source_on_one = filled(driver, &[7u8; 4096]);
        rig.gpu.set_device(0).unwrap();
        let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        let s = StreamRef::of(&stream);
        assert_eq!(s.device().unwrap(), 0);
        let (read, write) = driver.on_stream(&s, |io| {
            (
                io.read(&handle, &mut on_one, 0)
                    .map(|_| ())
                    .map_err(|e| e.kind()),
                io.write(&handle, &source_on_one, 0)
                    .map(|_| ())
                    .map_err(|e| e.kind()),
            )
        });
        assert_eq!(read, Err(ErrorKind::InvalidValue));
        assert_eq!(write, Err(ErrorKind::InvalidValue));
        assert!(on_one.to_vec().unwrap().iter().all(|&x| x == SENTINEL));
        assert!(
            std::fs::read(dir.path().join("data")).unwrap() == pattern(30, 0, 16 * KIB),
            "the refused write moved nothing"
        );
    });
}

#[test]
fn a_file_handle_no_longer_registered_is_refused() {
    within(TEST_LIMIT, "unregistered handle", || {
        let rig = plain_rig();
        let driver = &rig.driver;
        let dir = scratch_dir();
        let (_, file) = data_file(dir.path(), "data", &pattern(31, 0, 16 * KIB));
        let handle = driver.register_file(&file).unwrap();
        driver.core().handle_deregister(handle.id()).unwrap();
        let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        let mut dst = sentinel_buffer(driver, 4 * KIB);
        let read = driver.on_stream(&StreamRef::of(&stream), |io| {
            io.read(&handle, &mut dst, 0)
                .map(|_| ())
                .map_err(|e| e.kind())
        });
        assert_eq!(read, Err(ErrorKind::HandleNotRegistered));
    });
}

#[test]
fn stream_registration_refuses_twice_unknown_flags_and_unknown_streams() {
    within(TEST_LIMIT, "registration", || {
        let rig = plain_rig();
        let driver = &rig.driver;
        let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        let other = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        let (s, other) = (StreamRef::of(&stream), StreamRef::of(&other));
        let kind = |r: hipfile::Result<()>| r.map_err(|e| e.kind());
        assert_eq!(
            kind(driver.register_stream(&s, 1 << 4)),
            Err(ErrorKind::InvalidValue),
            "unknown flags"
        );
        assert_eq!(kind(driver.register_stream(&s, FIXED_FILE_OFFSET)), Ok(()));
        assert_eq!(
            kind(driver.register_stream(&s, 0)),
            Err(ErrorKind::InvalidValue),
            "registered twice"
        );
        assert_eq!(driver.core().stream_flags(s.raw()), FIXED_FILE_OFFSET);
        assert_eq!(
            kind(driver.deregister_stream(&other)),
            Err(ErrorKind::InvalidValue),
            "never registered"
        );
        assert_eq!(kind(driver.deregister_stream(&s)), Ok(()));
        assert_eq!(
            kind(driver.deregister_stream(&s)),
            Err(ErrorKind::InvalidValue),
            "deregistered already"
        );
        assert_eq!(driver.core().stream_flags(s.raw()), 0);
    });
}

#[test]
fn a_file_and_buffer_deregister_as_soon_as_the_stream_passed_their_op() {
    within(TEST_LIMIT, "deregistering after a stream op", || {
        let rig = plain_rig();
        let driver = &rig.driver;
        let core = driver.core();
        let dir = scratch_dir();
        let content = pattern(32, 0, 4 * KIB);
        let (_, file) = data_file(dir.path(), "data", &content);
        let stream = OwnedStream::new_independent(Arc::clone(&rig.gpu)).unwrap();
        let s = StreamRef::of(&stream);
        let dst = sentinel_buffer(driver, 4 * KIB);
        for round in 0..300 {
            let handle = driver.register_file(&file).unwrap();
            core.buf_register(dst.ptr(), dst.len(), 0).unwrap();
            let slots = submit_core(core, IoOp::Read, handle.id(), dst.ptr(), 4 * KIB, 0, &s)
                .expect("queueing a read");
            s.synchronize().unwrap();
            // The stream passed the op: neither the file nor the buffer is in flight any more.
            core.buf_deregister(dst.ptr())
                .unwrap_or_else(|e| panic!("round {round}: deregistering the buffer: {e}"));
            core.handle_deregister(handle.id())
                .unwrap_or_else(|e| panic!("round {round}: deregistering the file: {e}"));
            assert_eq!(slots.result().map(|r| outcome(&r)), Some(Ok(4 * KIB)));
        }
        assert!(dst.to_vec().unwrap() == content, "the bytes read");
    });
}

/// A sim of two devices with a file of `content` (kept open) registered on its driver, and a 4 KiB
/// sentinel buffer on device 1 and one on device 0 (the current device afterwards). Only where
/// an engine is built in: the rig's host-copy backend alone copies synchronously, in order with
/// the null stream of the runner thread's current device (device 0's, which the tests hold).
#[cfg(any(feature = "fallback", feature = "fastpath"))]
struct TwoDevices {
    rig: Rig,
    _dir: tempfile::TempDir,
    _file: File,
    handle: hipfile::FileHandle,
    on_one: DeviceBuffer,
    on_zero: DeviceBuffer,
}

#[cfg(any(feature = "fallback", feature = "fastpath"))]
fn two_devices(content: &[u8]) -> TwoDevices {
    let rig = two_device_rig();
    let dir = scratch_dir();
    let (_, file) = data_file(dir.path(), "data", content);
    let handle = rig.driver.register_file(&file).unwrap();
    rig.gpu.set_device(1).unwrap();
    let on_one = sentinel_buffer(&rig.driver, 4 * KIB);
    rig.gpu.set_device(0).unwrap();
    let on_zero = sentinel_buffer(&rig.driver, 4 * KIB);
    TwoDevices {
        rig,
        _dir: dir,
        _file: file,
        handle,
        on_one,
        on_zero,
    }
}

/// The null stream is one per device (handle 0 on each): an op on device 1's null stream must
/// not wait for an op held on device 0's null stream, as ops on two streams run side by side.
#[cfg(any(feature = "fallback", feature = "fastpath"))]
#[test]
fn the_null_streams_of_two_devices_are_two_streams() {
    within(TEST_LIMIT, "two null streams", || {
        let content = pattern(31, 0, 16 * KIB);
        let mut two = two_devices(&content);
        let (rig, handle) = (&two.rig, &two.handle);
        let driver = &rig.driver;
        let null = StreamRef::null(&rig.gpu);
        let hold = StreamHold::on(&null);
        let (a, b, b_while_held) = driver.on_stream(&null, |io_zero| {
            let a = io_zero.read(handle, &mut two.on_zero, 0).unwrap();
            hold.wait_reached();
            rig.gpu.set_device(1).unwrap();
            let (b, b_while_held) = driver.on_stream(&null, |io_one| {
                let b = io_one.read(handle, &mut two.on_one, 4096).unwrap();
                let since = Instant::now();
                while b.result().is_none() && since.elapsed() < Duration::from_secs(2) {
                    thread::sleep(Duration::from_millis(1));
                }
                let while_held = b.result().map(|r| outcome(&r));
                // Let device 0's null stream go whatever happened, so the scopes can end.
                hold.release();
                (outcome(&ended(&b)), while_held)
            });
            rig.gpu.set_device(0).unwrap();
            (outcome(&ended(&a)), b, b_while_held)
        });
        assert_eq!((a, b), (Ok(4 * KIB), Ok(4 * KIB)));
        assert_eq!(
            b_while_held,
            Some(Ok(4 * KIB)),
            "the op on device 1's null stream waited for the op held on device 0's"
        );
        assert_eq!(two.on_one.to_vec().unwrap(), content[4 * KIB..8 * KIB]);
    });
}

/// Ops on the null streams of two devices must never leave either stream waiting forever: each
/// stream's flag word may only grow while a stream waits on it. Were the two null streams (both
/// handle 0) to share a word and its values, the op on device 1 (the later value) could end
/// first and the op on device 0 store its smaller value right after, and device 1's null stream
/// miss the larger one and wait for ever. Tried a number of times, since which op ends last is
/// up to the scheduler.
#[cfg(any(feature = "fallback", feature = "fastpath"))]
#[test]
fn the_null_streams_of_two_devices_never_wait_for_ever() {
    let hung = within(Duration::from_secs(120), "null stream hang", || {
        let content = pattern(32, 0, 8 * KIB);
        let mut two = two_devices(&content);
        let (rig, handle) = (&two.rig, &two.handle);
        let driver = &rig.driver;
        let mut hung = None;
        for attempt in 0..30 {
            let null = StreamRef::null(&rig.gpu);
            let hold = StreamHold::on(&null);
            driver.on_stream(&null, |io_zero| {
                let _a = io_zero.read(handle, &mut two.on_zero, 0).unwrap();
                hold.wait_reached();
                rig.gpu.set_device(1).unwrap();
                driver.on_stream(&null, |io_one| {
                    let _b = io_one.read(handle, &mut two.on_one, 4096).unwrap();
                    hold.release();
                });
                rig.gpu.set_device(0).unwrap();
            });
            // Both ops ended: device 1's null stream must drain.
            let (tx, rx) = mpsc::channel();
            let gpu = Arc::clone(&rig.gpu);
            thread::spawn(move || {
                gpu.set_device(1).unwrap();
                let _ = tx.send(StreamRef::null(&gpu).synchronize());
            });
            if rx.recv_timeout(Duration::from_secs(5)).is_err() {
                hung = Some(attempt);
                break;
            }
        }
        if hung.is_some() {
            // The stuck stream would hang their teardown (freeing synchronizes the device).
            std::mem::forget(two);
        }
        hung
    });
    assert_eq!(
        hung, None,
        "device 1's null stream waited for ever on its flag word after attempt {hung:?}"
    );
}

/// Ops queued without a scope ([`Driver::read_on_stream`], [`Driver::write_on_stream`]) are queued
/// on the calling thread: the per-thread default stream (2) is its own on its current device, the
/// legacy handle (1) its current device's null stream. The op owns its file and memory, and
/// dropping it waits until it ended.
#[cfg(any(feature = "fallback", feature = "fastpath"))]
#[test]
fn owned_ops_are_queued_on_the_calling_threads_streams_and_dropping_one_waits_for_it() {
    within(TEST_LIMIT, "owned ops", || {
        let content = pattern(34, 0, 8 * KIB);
        let rig = two_device_rig();
        let driver = &rig.driver;
        let dir = scratch_dir();
        let (path, file) = data_file(dir.path(), "data", &content);
        let handle = Arc::new(driver.register_file(&file).unwrap());
        // Memory is made (and filled, on the null stream) before any stream is held: a
        // synchronous fill waits for the held blocking stream, and so does a free.
        let on_zero = sentinel_buffer(driver, 4 * KIB);
        rig.gpu.set_device(1).unwrap();
        let (first, second) = (
            sentinel_buffer(driver, 4 * KIB),
            sentinel_buffer(driver, 4 * KIB),
        );
        let mine = filled(driver, b"mine");
        // SAFETY: the special handles name streams every runtime has.
        let (legacy, per_thread) = unsafe {
            (
                StreamRef::from_raw(&rig.gpu, 1),
                StreamRef::from_raw(&rig.gpu, 2),
            )
        };
        let hold = StreamHold::on(&per_thread);
        hold.wait_reached();
        let held = driver
            .read_on_stream(&per_thread, Arc::clone(&handle), first, 0)
            .unwrap();
        let elsewhere = thread::scope(|scope| {
            scope
                .spawn(|| {
                    rig.gpu.set_device(1).unwrap();
                    // SAFETY: as above.
                    let theirs = unsafe { StreamRef::from_raw(&rig.gpu, 2) };
                    let op = driver
                        .write_on_stream(&theirs, Arc::clone(&handle), mine, 0)
                        .unwrap();
                    // Kept (not dropped, which frees `mine`) until the hold is released: a
                    // free waits for every stream.
                    (ended(op.op()), op)
                })
                .join()
                .unwrap()
        });
        assert_eq!(
            outcome(&elsewhere.0),
            Ok(4),
            "another thread's per-thread stream is another stream, not held"
        );
        assert_pending(held.op(), "this thread's per-thread stream");
        let behind = driver
            .read_on_stream(&legacy, Arc::clone(&handle), second, 4096)
            .unwrap();
        assert_pending(
            behind.op(),
            "the null stream behind earlier work of the blocking per-thread stream",
        );
        rig.gpu.set_device(0).unwrap();
        let other_device = driver
            .read_on_stream(&legacy, Arc::clone(&handle), on_zero, 0)
            .unwrap();
        assert_eq!(
            outcome(&ended(other_device.op())),
            Ok(4 * KIB),
            "device 0's null stream is another stream, not held"
        );
        hold.release();
        let (first, second) = (held.op().clone(), behind.op().clone());
        drop(held);
        assert_eq!(first.result().map(|r| outcome(&r)), Some(Ok(4 * KIB)));
        drop(behind);
        assert_eq!(second.result().map(|r| outcome(&r)), Some(Ok(4 * KIB)));
        assert!(!hold.gave_up());
        let mut expected = content.clone();
        expected[..4].copy_from_slice(b"mine");
        assert_eq!(std::fs::read(path).unwrap(), expected);
    });
}
