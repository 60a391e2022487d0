//! Scripted failures: the request fails, never reports bytes it did not move, and leaks nothing.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::sync::Arc;

use hipfile_core::{Driver, DriverOptions, ErrorKind, IoOp, RegistryBuilder};
use hipfile_hip::sim::SimRuntime;
use hipfile_hip::{DeviceBuffer, GpuRuntime, HipErrorCode};
use hipfile_testkit::conformance::pattern;
use hipfile_testkit::faults::{Errno, LeakSnapshot, ScriptedIo, ScriptedRuntime};

use crate::support::{self, call, HookedIo};

struct Setup {
    sim: Arc<SimRuntime>,
    driver: Driver,
    dir: tempfile::TempDir,
}

fn setup(
    io: Option<ScriptedIo>,
    runtime: Option<fn(Arc<dyn GpuRuntime>) -> ScriptedRuntime>,
) -> Setup {
    let sim = Arc::new(SimRuntime::default());
    let base: Arc<dyn GpuRuntime> = sim.clone();
    let rt: Arc<dyn GpuRuntime> = match runtime {
        Some(wrap) => Arc::new(wrap(base)),
        None => base,
    };
    let io = io.map(|io| Arc::new(io) as Arc<dyn hipfile_core::FileIo>);
    let driver = Driver::new(support::options(rt, io));
    // Small pieces: a 1 MiB request is many preads and copies, spread over the workers.
    driver
        .stage_settings(|s| s.per_buffer_cache_size_kb = 64)
        .unwrap();
    Setup {
        sim,
        driver,
        dir: tempfile::tempdir().unwrap(),
    }
}

const SIZE: usize = 1 << 20;

fn run(
    setup: &Setup,
    op: IoOp,
    device: &DeviceBuffer,
    file: &std::fs::File,
) -> Result<usize, hipfile_core::Error> {
    let handle = setup.driver.handle_register(file.as_raw_fd())?;
    let result = setup.driver.io(call(op, handle, device.ptr(), SIZE, 0));
    setup.driver.handle_deregister(handle)?;
    result
}

#[test]
fn a_failed_read_is_an_error_and_leaks_nothing() {
    let s = setup(Some(ScriptedIo::new().fail_pread(3, Errno::IO)), None);
    let path = s.dir.path().join("data");
    std::fs::write(&path, pattern(1, 0, SIZE)).unwrap();
    let before = LeakSnapshot::take(&s.sim, &[&path]).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let dev = DeviceBuffer::new(s.sim.clone(), SIZE).unwrap();
    let err = run(&s, IoOp::Read, &dev, &file).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Os);
    assert_eq!(err.errno(), Some(Errno::IO.raw_os_error()));
    drop((dev, file));
    s.driver.close().unwrap();
    before.compare_now(&s.sim).unwrap();
}

#[test]
fn a_failed_write_is_an_error_never_a_short_success() {
    let s = setup(Some(ScriptedIo::new().fail_pwrite(5, Errno::NOSPC)), None);
    let path = s.dir.path().join("out");
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)
        .unwrap();
    let mut dev = DeviceBuffer::new(s.sim.clone(), SIZE).unwrap();
    dev.write_at(0, &pattern(2, 0, SIZE)).unwrap();
    let err = run(&s, IoOp::Write, &dev, &file).unwrap_err();
    assert_eq!(err.errno(), Some(Errno::NOSPC.raw_os_error()));
}

#[test]
fn a_failed_device_copy_is_a_gpu_error() {
    let s = setup(
        None,
        Some(|rt| ScriptedRuntime::new(rt).fail_copy_to_device(4, HipErrorCode::ILLEGAL_ADDRESS)),
    );
    let path = s.dir.path().join("data");
    std::fs::write(&path, pattern(3, 0, SIZE)).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let dev = DeviceBuffer::new(s.sim.clone(), SIZE).unwrap();
    let err = run(&s, IoOp::Read, &dev, &file).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::HipDriverError);
    assert_eq!(err.hip_code(), Some(HipErrorCode::ILLEGAL_ADDRESS));
}

#[test]
fn short_and_interrupted_transfers_lose_no_byte() {
    let io = ScriptedIo::new()
        .short_preads_from(2, 4097)
        .interrupt_pread(1)
        .short_pwrites_from(1, 5000)
        .interrupt_pwrite(7);
    let s = setup(Some(io), None);
    let path = s.dir.path().join("rt");
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let data = pattern(4, 0, SIZE);
    let mut src = DeviceBuffer::new(s.sim.clone(), SIZE).unwrap();
    src.write_at(0, &data).unwrap();
    assert_eq!(run(&s, IoOp::Write, &src, &file).unwrap(), SIZE);
    assert_eq!(std::fs::read(&path).unwrap(), data);
    let dst = DeviceBuffer::new(s.sim.clone(), SIZE).unwrap();
    assert_eq!(run(&s, IoOp::Read, &dst, &file).unwrap(), SIZE);
    assert_eq!(dst.to_vec().unwrap(), data);
}

#[test]
fn a_panic_in_a_staging_thread_fails_the_request_and_the_next_one_works() {
    let sim = Arc::new(SimRuntime::default());
    let rt: Arc<dyn GpuRuntime> = sim.clone();
    let mut backends = RegistryBuilder::new();
    hipfile_fallback::register(&mut backends).unwrap();
    // A bug in file IO code (a panic from the 3rd pread on) must fail the request, not hang its
    // caller or recycle a lane with copies in flight.
    let calls = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let counter = Arc::clone(&calls);
    let io = Arc::new(HookedIo::before_pread(move |_| {
        if counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed) >= 2 {
            panic!("scripted panic in pread");
        }
    }));
    let driver = Driver::new(DriverOptions {
        backends: Some(backends),
        selection: None,
        io: io.clone(),
        ..DriverOptions::with_runtime(rt)
    });
    driver
        .stage_settings(|s| {
            s.per_buffer_cache_size_kb = 64;
            s.direct_io = hipfile_core::DirectIoPolicy::Never;
        })
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p");
    std::fs::write(&path, pattern(8, 0, SIZE)).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let dev = DeviceBuffer::new(sim.clone(), SIZE).unwrap();
    let s = Setup {
        sim: sim.clone(),
        driver,
        dir,
    };
    let err = run(&s, IoOp::Read, &dev, &file).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InternalError);
    calls.store(0, std::sync::atomic::Ordering::Relaxed);
    // Reset to two good reads, then panics again: a small read fits in one piece and works.
    let handle = s.driver.handle_register(file.as_raw_fd()).unwrap();
    let n = s
        .driver
        .io(call(IoOp::Read, handle, dev.ptr(), 4096, 0))
        .unwrap();
    assert_eq!(n, 4096);
    let mut head = vec![0u8; 4096];
    dev.read_at(0, &mut head).unwrap();
    assert_eq!(head, pattern(8, 0, 4096));
}
