//! The Rust API on the simulated GPU.

use std::fs::OpenOptions;
use std::sync::{Arc, Mutex, PoisonError};

use hipfile::{AsDevice, AsDeviceMut, Driver, DriverOptions, ErrorKind};
use hipfile_core::{
    Backend, BackendDescriptor, Completion, Decline, IoOp, IoPath, IoRequest, RegistryBuilder,
    Submit,
};
use hipfile_hip::{sim::SimRuntime, DeviceBuffer, GpuRuntime};

fn sim_driver() -> (Arc<dyn GpuRuntime>, Driver) {
    let gpu: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
    let driver = Driver::with_options(DriverOptions {
        selection: None,
        ..DriverOptions::with_runtime(gpu.clone())
    })
    .unwrap();
    (gpu, driver)
}

#[cfg(feature = "fallback")]
#[test]
fn handles_deregister_on_drop_so_the_same_fd_and_buffer_register_again() {
    let (gpu, driver) = sim_driver();
    let dir = tempfile::tempdir().unwrap();
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.path().join("f"))
        .unwrap();
    let mut buf = DeviceBuffer::new(gpu, 4096).unwrap();
    {
        let _h = driver.register_file(&file).unwrap();
        let _b = driver.register_buffer(&buf).unwrap();
        assert_eq!(
            driver.register_file(&file).unwrap_err().kind(),
            ErrorKind::HandleAlreadyRegistered
        );
        assert_eq!(
            driver.register_buffer(&buf).unwrap_err().kind(),
            ErrorKind::MemoryAlreadyRegistered
        );
    }
    let h = driver.register_file(&file).unwrap();
    let b = driver.register_buffer(&mut buf).unwrap();
    assert_eq!(h.write(&b, 0).unwrap(), 4096);
    // Giving the memory back deregisters it.
    let buf = b.into_inner();
    let _b = driver.register_buffer(buf).unwrap();
}

#[test]
fn the_last_driver_reference_closes_it() {
    let (_gpu, driver) = sim_driver();
    let core = Arc::clone(driver.core());
    assert_eq!(core.use_count(), 1);
    drop(driver);
    assert_eq!(core.use_count(), 0);
}

/// With the fastpath alone, aligned IO on the build filesystem runs and what it declines fails.
#[cfg(all(feature = "fastpath", not(feature = "fallback")))]
#[test]
fn the_fastpath_alone_serves_aligned_io_and_refuses_the_rest() {
    let (gpu, driver) = sim_driver();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.path().join("f"))
        .unwrap();
    let h = driver.register_file(&file).unwrap();
    let mut src = DeviceBuffer::new(gpu.clone(), 8192).unwrap();
    src.write_at(0, &[3u8; 8192]).unwrap();
    assert_eq!(h.write(&src, 0).unwrap(), 8192);
    let mut dst = DeviceBuffer::new(gpu, 8192).unwrap();
    assert_eq!(h.read(&mut dst, 0).unwrap(), 8192);
    assert_eq!(dst.to_vec().unwrap(), vec![3u8; 8192]);
    assert_eq!(
        h.read(dst.slice_mut(..100).unwrap(), 1).unwrap_err().kind(),
        ErrorKind::InternalError
    );
}

#[cfg(not(any(feature = "fallback", feature = "fastpath")))]
#[test]
fn without_backends_every_request_is_refused_with_internal_error() {
    let (gpu, driver) = sim_driver();
    let dir = tempfile::tempdir().unwrap();
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.path().join("f"))
        .unwrap();
    let h = driver.register_file(&file).unwrap();
    let buf = DeviceBuffer::new(gpu, 4096).unwrap();
    assert_eq!(
        h.write(&buf, 0).unwrap_err().kind(),
        ErrorKind::InternalError
    );
}

fn scratch_file(dir: &tempfile::TempDir, len: usize) -> std::fs::File {
    let path = dir.path().join("f");
    std::fs::write(&path, vec![0x5a; len]).unwrap();
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap()
}

#[cfg(feature = "fallback")]
#[test]
fn a_handle_keeps_reading_after_the_driver_value_is_dropped() {
    let (gpu, driver) = sim_driver();
    let core = Arc::clone(driver.core());
    let dir = tempfile::tempdir().unwrap();
    let file = scratch_file(&dir, 8192);
    let handle = driver.register_file(&file).unwrap();
    let mut registered = driver
        .register_buffer(DeviceBuffer::new(gpu.clone(), 4096).unwrap())
        .unwrap();
    drop(driver);
    assert_eq!(
        core.use_count(),
        1,
        "the handles hold the driver's reference"
    );
    let mut plain = DeviceBuffer::new(gpu, 4096).unwrap();
    assert_eq!(handle.read(&mut plain, 4096).unwrap(), 4096);
    assert_eq!(plain.to_vec().unwrap(), vec![0x5a; 4096]);
    assert_eq!(handle.read(&mut registered, 0).unwrap(), 4096);
    assert_eq!(registered.to_vec().unwrap(), vec![0x5a; 4096]);
    drop(handle);
    assert_eq!(core.use_count(), 1, "the registered buffer still holds it");
    drop(registered);
    assert_eq!(core.use_count(), 0, "the last one out closed the driver");
}

#[test]
fn the_driver_and_what_it_made_hold_one_reference_together() {
    let (_gpu, driver) = sim_driver();
    let dir = tempfile::tempdir().unwrap();
    let file = scratch_file(&dir, 0);
    let handle = driver.register_file(&file).unwrap();
    let registered = driver.register_buffer(driver.alloc(4096).unwrap()).unwrap();
    assert_eq!(driver.use_count(), 1);
    let core = Arc::clone(driver.core());
    drop((handle, registered));
    assert_eq!(core.use_count(), 1);
    drop(driver);
    assert_eq!(core.use_count(), 0);
}

#[test]
fn ranges_outside_the_memory_are_invalid_value() {
    let (_gpu, driver) = sim_driver();
    let mut buf = driver.alloc(8192).unwrap();
    assert_eq!(
        buf.slice(..8193).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        buf.slice_mut(8192..=8192).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
    let mut half = buf.slice_mut(4096..8192).unwrap();
    assert_eq!((half.offset(), half.len()), (4096, 4096));
    assert_eq!(
        half.slice_mut(4000..4097).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        half.slice(..=usize::MAX).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
    let inner = half.slice_mut(96..).unwrap();
    assert_eq!((inner.offset(), inner.len()), (4192, 4000));
    let mut registered = driver.register_buffer(buf).unwrap();
    assert_eq!(
        registered.slice_mut(..8193).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
    assert_eq!(registered.slice(8192..).unwrap().len(), 0);
}

#[test]
fn file_offsets_past_the_largest_signed_offset_are_einval() {
    let (_gpu, driver) = sim_driver();
    let dir = tempfile::tempdir().unwrap();
    let file = scratch_file(&dir, 4096);
    let handle = driver.register_file(&file).unwrap();
    let mut buf = driver.alloc(4096).unwrap();
    for offset in [i64::MAX as u64 + 1, u64::MAX] {
        let read = handle.read(&mut buf, offset).unwrap_err();
        let write = handle.write(&buf, offset).unwrap_err();
        for err in [read, write] {
            assert_eq!(err.kind(), ErrorKind::Os, "offset {offset}");
            assert_eq!(err.errno(), Some(libc::EINVAL), "offset {offset}");
        }
    }
}

/// What the recording backend saw: `(op, first device byte, registered path)` per request.
static SEEN: Mutex<Vec<(IoOp, usize, bool)>> = Mutex::new(Vec::new());

/// Accepts every request, moves no byte and records how the driver resolved its memory.
#[derive(Debug)]
struct Recorder;

impl Backend for Recorder {
    fn name(&self) -> &'static str {
        "recorder"
    }

    fn accepts(&self, _req: &IoRequest<'_>) -> Result<(), Decline> {
        Ok(())
    }

    fn submit(&self, req: &IoRequest<'_>, _how: Submit) -> Completion {
        SEEN.lock().unwrap_or_else(PoisonError::into_inner).push((
            req.op,
            req.memory.ptr(),
            req.registered_buffer,
        ));
        Completion::ready(Ok(req.size()))
    }
}

#[test]
fn slices_of_registered_memory_take_the_registered_path() {
    let gpu: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
    let mut recorder = RegistryBuilder::new();
    recorder
        .add(BackendDescriptor {
            name: "recorder",
            priority: 0,
            path: IoPath::Staged,
            init: |_| Ok(Arc::new(Recorder)),
        })
        .unwrap();
    let driver = Driver::with_options(DriverOptions {
        backends: Some(recorder),
        selection: None,
        ..DriverOptions::with_runtime(gpu)
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = scratch_file(&dir, 1 << 16);
    let h = driver.register_file(&file).unwrap();

    let mut whole = driver
        .register_buffer(driver.alloc(16384).unwrap())
        .unwrap();
    let at = whole.ptr();
    h.read(whole.slice_mut(4096..8192).unwrap(), 0).unwrap();
    h.write(whole.slice(100..200).unwrap(), 0).unwrap();
    h.write(&whole, 0).unwrap();
    let mut plain = driver.alloc(16384).unwrap();
    let plain_at = plain.ptr();
    h.read(plain.slice_mut(4096..8192).unwrap(), 0).unwrap();
    // Part of a buffer registered on its own: its base is the part's first byte.
    let mut part = driver
        .register_buffer(plain.slice_mut(8192..).unwrap())
        .unwrap();
    assert_eq!(part.ptr(), plain_at + 8192);
    h.read(part.slice_mut(1024..2048).unwrap(), 0).unwrap();
    let seen = std::mem::take(&mut *SEEN.lock().unwrap_or_else(PoisonError::into_inner));
    assert_eq!(
        seen,
        [
            (IoOp::Read, at + 4096, true),
            (IoOp::Write, at + 100, true),
            (IoOp::Write, at, true),
            (IoOp::Read, plain_at + 4096, false),
            (IoOp::Read, plain_at + 8192 + 1024, true),
        ]
    );
}
