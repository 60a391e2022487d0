//! The AMD platform driving the simulated HIP library. Every test here also runs in a child
//! process configured for ROCm 5 (see `abi`), so nothing may assume one ABI generation.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use hipfile_hip::amd::MemoryTypeAbi;
use hipfile_hip::sim::SimAbi;
use hipfile_hip::{
    DeviceBuffer, HipError, HipErrorCode, MemoryKind, OwnedEvent, OwnedStream, PinnedBuffer,
    Platform,
};

use crate::support::{amd, expected_config, runtime, sim_library_str};

#[test]
fn info_reports_the_amd_platform_the_version_and_the_library() {
    let rt = runtime();
    let info = rt.info();
    assert_eq!(info.platform, Platform::Amd);
    assert_eq!(
        info.runtime_version,
        expected_config().abi.runtime_version()
    );
    assert_eq!(
        info.library,
        format!("{} (simulated by hipfile-simhip)", sim_library_str()),
        "the simulator is named as such in every report"
    );
    let expected_abi = match expected_config().abi {
        SimAbi::Rocm5 => MemoryTypeAbi::Rocm5,
        SimAbi::Rocm6 => MemoryTypeAbi::Rocm6,
    };
    assert_eq!(amd().memory_type_abi(), expected_abi);
}

#[test]
fn devices_are_counted_and_selected_per_thread() {
    let rt = runtime();
    let n = rt.device_count().unwrap();
    assert_eq!(n, expected_config().devices);
    match rt.set_device(n) {
        Err(HipError::Call { code, detail, .. }) => {
            assert_eq!(code, HipErrorCode::INVALID_DEVICE);
            assert!(detail.is_some(), "hipGetErrorString gives the detail text");
        }
        other => panic!("selecting device {n} of {n} gave {other:?}"),
    }
    let last = n - 1;
    rt.set_device(last).unwrap();
    assert_eq!(rt.current_device().unwrap(), last);
    let buf = DeviceBuffer::new(Arc::clone(&rt), 64).unwrap();
    assert_eq!(rt.pointer_info(buf.ptr()).unwrap().device, last);
    rt.set_device(0).unwrap();
}

#[test]
fn pointer_queries_decode_every_kind_of_memory() {
    let rt = runtime();
    let dev = DeviceBuffer::new(Arc::clone(&rt), 10_000).unwrap();
    let info = rt.pointer_info(dev.ptr() + 123).unwrap();
    assert_eq!(info.kind, MemoryKind::Device);
    assert_eq!((info.base, info.len), (dev.ptr(), 10_000));
    assert_eq!(info.remaining_from(dev.ptr() + 123), Some(10_000 - 123));

    let managed = DeviceBuffer::new_managed(Arc::clone(&rt), 5000).unwrap();
    let info = rt.pointer_info(managed.ptr() + 1).unwrap();
    assert_eq!(info.kind, MemoryKind::Managed);
    assert_eq!((info.base, info.len), (managed.ptr(), 5000));

    let pinned = PinnedBuffer::new(Arc::clone(&rt), 3000).unwrap();
    let p = pinned.as_ptr() as usize;
    let info = rt.pointer_info(p + 7).unwrap();
    assert_eq!(info.kind, MemoryKind::Host);
    assert_eq!((info.base, info.len), (p, 3000));

    let pageable = vec![0u8; 256];
    let info = rt.pointer_info(pageable.as_ptr() as usize).unwrap();
    assert_eq!(info.kind, MemoryKind::Unregistered);
    assert_eq!((info.base, info.len), (0, 0));
}

#[test]
fn synchronous_copies_round_trip_and_bad_ranges_fail() {
    let rt = runtime();
    let mut dev = DeviceBuffer::new(Arc::clone(&rt), 1 << 16).unwrap();
    let data: Vec<u8> = (0..1 << 16).map(|i: u32| (i % 253) as u8).collect();
    dev.write_at(0, &data).unwrap();
    assert_eq!(dev.to_vec().unwrap(), data);
    let mut middle = vec![0u8; 1000];
    dev.read_at(5000, &mut middle).unwrap();
    assert_eq!(middle, data[5000..6000]);

    dev.fill(0xab).unwrap();
    assert!(dev.to_vec().unwrap().iter().all(|&b| b == 0xab));

    // SAFETY: the range runs past the allocation; the runtime refuses it and writes nothing.
    let r = unsafe { rt.copy_to_device(dev.ptr() + (1 << 16) - 8, &[0u8; 64]) };
    match r {
        Err(HipError::Call { call, code, .. }) => {
            assert_eq!(call, "hipMemcpy");
            assert_eq!(code, HipErrorCode::INVALID_VALUE);
        }
        other => panic!("an overrunning copy gave {other:?}"),
    }
    assert!(dev.to_vec().unwrap().iter().all(|&b| b == 0xab));
}

#[test]
fn async_copies_streams_events_and_host_functions_run_in_order() {
    let rt = runtime();
    const LEN: usize = 1 << 20;
    const CHUNK: usize = LEN / 4;
    let dev = DeviceBuffer::new(Arc::clone(&rt), LEN).unwrap();
    let mut src = PinnedBuffer::new(Arc::clone(&rt), LEN).unwrap();
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = (i % 241) as u8;
    }
    let mut back = PinnedBuffer::new(Arc::clone(&rt), LEN).unwrap();
    let stream = OwnedStream::new(Arc::clone(&rt)).unwrap();
    let event = OwnedEvent::new(Arc::clone(&rt)).unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    for i in 0..4 {
        // SAFETY: both buffers outlive the event synchronisation below.
        unsafe {
            rt.copy_to_device_async(
                dev.ptr() + i * CHUNK,
                src.as_ptr().add(i * CHUNK),
                CHUNK,
                stream.handle(),
            )
            .unwrap();
        }
        let order = Arc::clone(&order);
        rt.launch_host_func(
            stream.handle(),
            Box::new(move || order.lock().unwrap().push(i)),
        )
        .unwrap();
    }
    // SAFETY: `back` outlives the synchronisation below and nothing reads it before then.
    unsafe {
        rt.copy_from_device_async(back.as_mut_ptr(), dev.ptr(), LEN, stream.handle())
            .unwrap();
    }
    event.record(&stream).unwrap();
    event.synchronize().unwrap();
    assert!(event.query().unwrap());
    assert_eq!(*order.lock().unwrap(), vec![0, 1, 2, 3]);
    assert_eq!(back.as_slice(), src.as_slice());
    stream.synchronize().unwrap();
}

#[test]
fn a_panicking_host_function_does_not_unwind_into_the_runtime() {
    let rt = runtime();
    let stream = OwnedStream::new(Arc::clone(&rt)).unwrap();
    rt.launch_host_func(
        stream.handle(),
        Box::new(|| panic!("deliberate panic in a host function")),
    )
    .unwrap();
    let ran = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ran);
    rt.launch_host_func(
        stream.handle(),
        Box::new(move || flag.store(true, Ordering::SeqCst)),
    )
    .unwrap();
    stream.synchronize().unwrap();
    assert!(ran.load(Ordering::SeqCst));
}

#[test]
fn stale_handles_are_errors() {
    let rt = runtime();
    let s = rt.stream_create().unwrap();
    rt.stream_destroy(s).unwrap();
    assert!(matches!(
        rt.stream_synchronize(s),
        Err(HipError::Call {
            code: HipErrorCode::INVALID_HANDLE,
            ..
        })
    ));
    let e = rt.event_create().unwrap();
    rt.event_destroy(e).unwrap();
    assert!(rt.event_query(e).is_err());
}

#[test]
fn get_proc_address_reaches_exports_and_refuses_unknown_names() {
    let rt = amd();
    assert!(rt.proc_address(c"hipMalloc").is_some());
    assert!(rt.proc_address(c"hipMemcpyAsync").is_some());
    assert!(rt.proc_address(c"hipNoSuchEntryPoint").is_none());
}

#[test]
fn the_direct_io_entry_points_run_the_sims_p2p_driver_through_the_amd_platform() {
    use std::os::fd::AsFd;
    let rt = runtime();
    let p2p = rt
        .p2p()
        .expect("hipGetProcAddress offers hipAmdFileRead/Write");
    assert_eq!(p2p.name(), "amd-kfd");
    let path = crate::support::target_dir().join(format!("simhip-p2p-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let _ = std::fs::remove_file(&path);
    let mut src = DeviceBuffer::new(Arc::clone(&rt), 8192).unwrap();
    src.write_at(0, &[0xa5; 8192]).unwrap();
    let dst = DeviceBuffer::new(Arc::clone(&rt), 8192).unwrap();
    let host = [0u8; 64];
    // SAFETY: the device ranges are whole allocations of this runtime, used by nobody else; the
    // host pointer is refused by the sim before anything is written.
    unsafe {
        assert_eq!(p2p.write(file.as_fd(), src.ptr(), 8192, 0).unwrap(), 8192);
        assert_eq!(p2p.read(file.as_fd(), dst.ptr(), 8192, 0).unwrap(), 8192);
        assert_eq!(p2p.read(file.as_fd(), dst.ptr(), 4096, 8192).unwrap(), 0);
        let e = p2p
            .read(file.as_fd(), host.as_ptr() as usize, 64, 0)
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(14), "EFAULT travels through *status");
    }
    assert_eq!(dst.to_vec().unwrap(), vec![0xa5; 8192]);
}

#[test]
fn the_soname_makes_a_second_open_share_the_loaded_simulator() {
    let first = runtime();
    let dev = DeviceBuffer::new(Arc::clone(&first), 4096).unwrap();
    // No libamdhip64.so.6 is on the loader path: this succeeds only because the dynamic loader
    // matches the soname of the library already loaded in this process.
    let second = hipfile_hip::amd_open_library("libamdhip64.so.6").unwrap();
    let info = second.pointer_info(dev.ptr() + 10).unwrap();
    assert_eq!(info.kind, MemoryKind::Device);
    assert_eq!(info.base, dev.ptr());
}
