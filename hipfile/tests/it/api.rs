//! The Rust API on the simulated GPU.

use std::fs::OpenOptions;
use std::sync::Arc;

use hipfile::{Driver, DriverOptions, ErrorKind};
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
    let buf = DeviceBuffer::new(gpu, 4096).unwrap();
    {
        let _h = driver.register_file(&file).unwrap();
        let _b = driver.register_buffer(buf.ptr(), 4096).unwrap();
        assert_eq!(
            driver.register_file(&file).unwrap_err().kind(),
            ErrorKind::HandleAlreadyRegistered
        );
        assert_eq!(
            driver.register_buffer(buf.ptr(), 4096).unwrap_err().kind(),
            ErrorKind::MemoryAlreadyRegistered
        );
    }
    let h = driver.register_file(&file).unwrap();
    let _b = driver.register_buffer(buf.ptr(), 4096).unwrap();
    assert_eq!(h.write(buf.ptr(), 4096, 0, 0).unwrap(), 4096);
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
    assert_eq!(h.write(src.ptr(), 8192, 0, 0).unwrap(), 8192);
    let dst = DeviceBuffer::new(gpu, 8192).unwrap();
    assert_eq!(h.read(dst.ptr(), 8192, 0, 0).unwrap(), 8192);
    assert_eq!(dst.to_vec().unwrap(), vec![3u8; 8192]);
    assert_eq!(
        h.read(dst.ptr(), 100, 1, 0).unwrap_err().kind(),
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
        h.write(buf.ptr(), 4096, 0, 0).unwrap_err().kind(),
        ErrorKind::InternalError
    );
}
