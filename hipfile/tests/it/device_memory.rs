//! Device memory as users hand it to hipFile: registered buffers, interior pointers, the memory
//! kinds that are refused, IO from fresh threads and from many threads at once. On the simulated
//! GPU by default; on the machine's GPU with `HIPFILE_GPU_TESTS=1` (the GPU bundle does that).

use std::fs::OpenOptions;
use std::sync::Arc;
use std::thread;

use hipfile::{
    AsDeviceMut, DeviceSlice, DeviceSliceMut, Driver, DriverOptions, ErrorKind, FileHandle,
};
use hipfile_hip::{DeviceBuffer, DeviceRange, GpuRuntime, PinnedBuffer};
use hipfile_testkit::conformance::pattern;
use hipfile_testkit::target::runtime_under_test;

struct Setup {
    gpu: Arc<dyn GpuRuntime>,
    driver: Driver,
    dir: tempfile::TempDir,
}

fn setup() -> Setup {
    let gpu = runtime_under_test().unwrap().runtime;
    let driver = Driver::with_options(DriverOptions {
        selection: None,
        ..DriverOptions::with_runtime(gpu.clone())
    })
    .unwrap();
    Setup {
        gpu,
        driver,
        dir: tempfile::tempdir().unwrap(),
    }
}

impl Setup {
    fn file_with(&self, name: &str, data: &[u8]) -> (std::fs::File, FileHandle) {
        let path = self.dir.path().join(name);
        std::fs::write(&path, data).unwrap();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let handle = self.driver.register_file(&file).unwrap();
        (file, handle)
    }
}

#[test]
fn allocator_memory_registers_and_interior_pointers_work_unregistered() {
    let s = setup();
    let size = (1 << 20) + 4096;
    let data = pattern(11, 0, size);
    let (_file, handle) = s.file_with("data", &data);
    let dev = DeviceBuffer::new(s.gpu.clone(), size).unwrap();
    let mut registered = s.driver.register_buffer(dev).unwrap();
    assert_eq!(handle.read(&mut registered, 0).unwrap(), size);
    assert_eq!(registered.to_vec().unwrap(), data);
    drop(registered);

    let mut other = DeviceBuffer::new(s.gpu.clone(), size).unwrap();
    let n = 100_000;
    let interior = other.slice_mut(4096 + 512..4096 + 512 + n).unwrap();
    assert_eq!(handle.read(interior, 777).unwrap(), n);
    let mut back = vec![0u8; n];
    other.read_at(4096 + 512, &mut back).unwrap();
    assert_eq!(back, data[777..777 + n]);
}

#[test]
fn memory_from_elsewhere_enters_through_raw_parts() {
    let s = setup();
    let size = 1 << 20;
    let data = pattern(15, 0, size);
    let (_file, handle) = s.file_with("raw", &data);
    // Stands for memory a framework allocated: only its address and length reach hipfile.
    let tensor = DeviceBuffer::new(s.gpu.clone(), size).unwrap();
    let (ptr, n) = (tensor.ptr() + 4096, 100_000);
    {
        // SAFETY: `tensor` outlives the slice and nothing else touches its bytes meanwhile.
        let raw = unsafe { DeviceSliceMut::from_raw_parts(ptr, n) };
        assert_eq!(handle.read(raw, 333).unwrap(), n);
    }
    let mut back = vec![0u8; n];
    tensor.read_at(4096, &mut back).unwrap();
    assert_eq!(back, data[333..333 + n]);
    // SAFETY: as above, registered and shared: nothing writes the bytes while it lives.
    let registered = s
        .driver
        .register_buffer(unsafe { DeviceSlice::from_raw_parts(ptr, n) })
        .unwrap();
    assert_eq!(registered.ptr(), ptr);
    assert_eq!(handle.write(&registered, 0).unwrap(), n);
}

#[test]
fn managed_and_pinned_host_memory_are_not_device_memory() {
    let s = setup();
    let managed = DeviceBuffer::new_managed(s.gpu.clone(), 1 << 16).unwrap();
    let pinned = PinnedBuffer::new(s.gpu.clone(), 1 << 16).unwrap();
    for (what, ptr) in [
        ("managed", managed.ptr()),
        ("pinned host", pinned.as_ptr() as usize),
    ] {
        // SAFETY: both allocations outlive the slice, which is only registered (and refused).
        let memory = unsafe { DeviceSlice::from_raw_parts(ptr, 1 << 16) };
        let err = s.driver.register_buffer(memory).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::HipMemoryTypeInvalid, "{what} memory");
    }
    let err = s.driver.register_buffer(managed).unwrap_err();
    assert_eq!(
        err.kind(),
        ErrorKind::HipMemoryTypeInvalid,
        "a managed DeviceBuffer"
    );
}

#[test]
fn a_read_from_a_freshly_spawned_thread_lands() {
    let s = setup();
    let data = pattern(12, 0, 3 << 20);
    let (_file, handle) = s.file_with("fresh", &data);
    let mut dev = DeviceBuffer::new(s.gpu.clone(), data.len()).unwrap();
    let n = thread::scope(|sc| {
        sc.spawn(|| handle.read(&mut dev, 0).unwrap())
            .join()
            .unwrap()
    });
    assert_eq!(n, data.len());
    assert_eq!(dev.to_vec().unwrap(), data);
}

#[test]
fn sixteen_threads_read_into_distinct_buffers_byte_exact() {
    let s = setup();
    let size = 8 << 20;
    let data = pattern(13, 0, size);
    let (_file, handle) = s.file_with("shared", &data);
    let mut buffers: Vec<DeviceBuffer> = (0..16)
        .map(|_| DeviceBuffer::new(s.gpu.clone(), size).unwrap())
        .collect();
    thread::scope(|sc| {
        for (t, dev) in buffers.iter_mut().enumerate() {
            let (handle, data) = (&handle, &data);
            sc.spawn(move || {
                // Each thread reads a different window, so a misplaced byte cannot hide.
                let offset = (t * 65_537) % (size / 2);
                let len = size - offset;
                let whole = dev.slice_mut(..len).unwrap();
                assert_eq!(handle.read(whole, offset as u64).unwrap(), len);
                let mut back = vec![0u8; len];
                dev.read_at(0, &mut back).unwrap();
                assert!(back == data[offset..], "thread {t}: bytes differ");
            });
        }
    });
}

#[test]
fn the_callers_current_device_is_unchanged_by_io() {
    let s = setup();
    if s.gpu.device_count().unwrap() < 2 {
        // With one device there is no other device to switch to: this cannot fail. The
        // simulated two-GPU tests (multi_device.rs) check it where it can.
        hipfile_testkit::ledger::skip("one device: the current device cannot change");
        return;
    }
    let before = s.gpu.current_device().unwrap();
    let data = pattern(14, 0, 1 << 20);
    let (_file, handle) = s.file_with("dev", &data);
    let mut dev = DeviceBuffer::new(s.gpu.clone(), data.len()).unwrap();
    handle.read(&mut dev, 0).unwrap();
    assert_eq!(s.gpu.current_device().unwrap(), before);
}

/// The address just past an allocation: on CUDA it is unmapped (the pointer query succeeds,
/// "unregistered") or the first byte of the next allocation (vouched for as that one, with its
/// own base and size). Either way no range reaching past an allocation's end is vouched for as
/// part of it; a range at the address past it is vouched for only as an allocation starting
/// there, and writing through it touches that allocation alone.
#[test]
fn the_bytes_past_an_allocation_are_never_vouched_for_as_part_of_it() {
    let gpu = runtime_under_test().unwrap().runtime;
    const SENTINEL: u8 = 0x3C;
    let sizes = [4096, 1 << 20, (1 << 20) + 1, 2 << 20, 64 << 20];
    let bufs: Vec<DeviceBuffer> = sizes
        .iter()
        .chain(sizes.iter())
        .map(|&len| {
            let mut buf = DeviceBuffer::new(gpu.clone(), len).unwrap();
            buf.fill(SENTINEL).unwrap();
            buf
        })
        .collect();
    let (mut unknown, mut neighbours) = (0, 0);
    for buf in &bufs {
        let (ptr, len) = (buf.ptr(), buf.len());
        let past = ptr + len;
        assert!(DeviceRange::query(&gpu, ptr, len).is_ok(), "{len} bytes");
        assert!(
            DeviceRange::query(&gpu, ptr, len + 1).is_err(),
            "{len} bytes and one past"
        );
        assert!(
            DeviceRange::query(&gpu, past - 1, 2).is_err(),
            "the last byte of {len} and the one past"
        );
        let Ok(range) = DeviceRange::query(&gpu, past, 1) else {
            unknown += 1;
            continue;
        };
        neighbours += 1;
        let info = gpu.pointer_info(past).unwrap();
        assert_eq!(
            info.base, past,
            "past {len} bytes the runtime vouched for an allocation that does not start there: \
             {info:?}"
        );
        if let Some(next) = bufs.iter().find(|b| b.ptr() == past) {
            range.copy_from_host(&[0xA5]).unwrap();
            let mut first = [0u8; 1];
            next.read_at(0, &mut first).unwrap();
            assert_eq!(first[0], 0xA5, "the byte landed in the next allocation");
            let mut last = [0u8; 1];
            buf.read_at(len - 1, &mut last).unwrap();
            assert_eq!(last[0], SENTINEL, "and not in the one before it");
            range.copy_from_host(&[SENTINEL]).unwrap();
        }
    }
    println!(
        "past the end of {} allocations: {unknown} addresses vouched for by nothing, \
         {neighbours} the first byte of another allocation",
        bufs.len()
    );
}
