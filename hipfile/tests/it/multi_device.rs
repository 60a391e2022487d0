//! Several GPUs in one process, on a simulated machine with two devices: buffers on a device
//! other than the caller's current one, threads on different devices at once, registrations kept
//! apart per device.

use std::fs::OpenOptions;
use std::sync::Arc;
use std::thread;

use hipfile::{Driver, DriverOptions, ErrorKind};
use hipfile_hip::sim::{SimConfig, SimRuntime};
use hipfile_hip::{DeviceBuffer, GpuRuntime};
use hipfile_testkit::conformance::pattern;

fn two_gpus() -> (Arc<dyn GpuRuntime>, Driver, tempfile::TempDir) {
    let gpu: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::new(SimConfig {
        devices: 2,
        ..SimConfig::default()
    }));
    let driver = Driver::with_options(DriverOptions {
        selection: None,
        ..DriverOptions::with_runtime(gpu.clone())
    })
    .unwrap();
    (gpu, driver, tempfile::tempdir().unwrap())
}

fn alloc_on(gpu: &Arc<dyn GpuRuntime>, device: i32, len: usize) -> DeviceBuffer {
    let previous = gpu.current_device().unwrap();
    gpu.set_device(device).unwrap();
    let buf = DeviceBuffer::new(gpu.clone(), len).unwrap();
    gpu.set_device(previous).unwrap();
    buf
}

#[test]
fn io_lands_on_the_buffers_device_and_leaves_the_current_device_alone() {
    let (gpu, driver, dir) = two_gpus();
    let size = (3 << 20) + 777;
    for (current, owner) in [(0, 1), (1, 0)] {
        let path = dir.path().join(format!("d{owner}"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let handle = driver.register_file(&file).unwrap();
        let data = pattern(owner as u64, 0, size);
        let mut src = alloc_on(&gpu, owner, size);
        src.write_at(0, &data).unwrap();
        let mut dst = alloc_on(&gpu, owner, size);
        assert_eq!(gpu.pointer_info(dst.ptr()).unwrap().device, owner);
        gpu.set_device(current).unwrap();
        let registered = driver.register_buffer(&src).unwrap();
        assert_eq!(handle.write(&registered, 0).unwrap(), size);
        assert_eq!(
            gpu.current_device().unwrap(),
            current,
            "a write changed the current device"
        );
        assert_eq!(handle.read(&mut dst, 0).unwrap(), size);
        assert_eq!(
            gpu.current_device().unwrap(),
            current,
            "a read changed the current device"
        );
        assert!(
            dst.to_vec().unwrap() == data,
            "device {owner}: bytes differ"
        );
        assert!(
            std::fs::read(&path).unwrap() == data,
            "device {owner}: file differs"
        );
    }
}

#[test]
fn threads_on_different_devices_read_at_the_same_time() {
    let (gpu, driver, dir) = two_gpus();
    let size = 8 << 20;
    let data = pattern(21, 0, size);
    let path = dir.path().join("shared");
    std::fs::write(&path, &data).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let handle = driver.register_file(&file).unwrap();
    thread::scope(|s| {
        for device in 0..2 {
            let (gpu, handle, data) = (&gpu, &handle, &data);
            s.spawn(move || {
                gpu.set_device(device).unwrap();
                let mut dst = DeviceBuffer::new(gpu.clone(), size).unwrap();
                for _ in 0..4 {
                    assert_eq!(handle.read(&mut dst, 0).unwrap(), size);
                }
                assert_eq!(gpu.pointer_info(dst.ptr()).unwrap().device, device);
                assert!(
                    dst.to_vec().unwrap() == *data,
                    "device {device}: bytes differ"
                );
                assert_eq!(gpu.current_device().unwrap(), device);
            });
        }
    });
}

#[test]
fn registrations_on_one_device_never_touch_the_other() {
    let (gpu, driver, _dir) = two_gpus();
    let on0 = alloc_on(&gpu, 0, 1 << 16);
    let on1 = alloc_on(&gpu, 1, 1 << 16);
    let r0 = driver.register_buffer(&on0).unwrap();
    let r1 = driver.register_buffer(&on1).unwrap();
    drop(r1);
    assert_eq!(
        driver.register_buffer(&on0).unwrap_err().kind(),
        ErrorKind::MemoryAlreadyRegistered,
        "deregistering device 1's buffer left device 0's registered"
    );
    let again = driver.register_buffer(&on1).unwrap();
    drop((r0, again));
}
