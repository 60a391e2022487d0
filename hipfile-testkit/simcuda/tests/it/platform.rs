//! The NVIDIA platform driving the simulated CUDA library. Every test here also runs in a child
//! process configured with two devices (see `two_devices`), so nothing may assume one device.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use hipfile_hip::{
    DeviceBuffer, HipError, HipErrorCode, MemoryKind, OwnedEvent, OwnedStream, PinnedBuffer,
    Platform,
};

use crate::support::{expected_config, runtime, sim_library_str};

#[test]
fn info_reports_the_nvidia_platform_the_version_and_the_library() {
    let info = runtime().info();
    assert_eq!(info.platform, Platform::Nvidia);
    assert_eq!(info.runtime_version, 13_000);
    assert_eq!(info.library, sim_library_str());
}

#[test]
fn devices_are_counted_and_selected_per_thread_with_hip_error_numbers() {
    let rt = runtime();
    let n = rt.device_count().unwrap();
    assert_eq!(n, expected_config().devices);
    match rt.set_device(n) {
        Err(HipError::Call { code, detail, .. }) => {
            assert_eq!(code, HipErrorCode::INVALID_DEVICE);
            let detail = detail.expect("the CUDA name and text are kept");
            assert!(detail.contains("cudaErrorInvalidDevice"), "{detail}");
            assert!(detail.contains("101"), "{detail}");
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
fn work_on_memory_of_another_device_keeps_the_current_device() {
    let rt = runtime();
    let other = rt.device_count().unwrap() - 1;
    rt.set_device(other).unwrap();
    let mut buf = DeviceBuffer::new(Arc::clone(&rt), 8192).unwrap();
    let mut pinned = PinnedBuffer::new(Arc::clone(&rt), 8192).unwrap();
    rt.set_device(0).unwrap();

    buf.write_at(0, &[5u8; 8192]).unwrap();
    assert_eq!(rt.current_device().unwrap(), 0);
    assert_eq!(buf.to_vec().unwrap(), vec![5u8; 8192]);
    assert_eq!(rt.current_device().unwrap(), 0);
    buf.fill(6).unwrap();
    assert_eq!(rt.current_device().unwrap(), 0);
    let info = rt.pointer_info(buf.ptr() + 100).unwrap();
    assert_eq!((info.kind, info.device), (MemoryKind::Device, other));
    assert_eq!(rt.current_device().unwrap(), 0);

    let stream = OwnedStream::new(Arc::clone(&rt)).unwrap();
    // SAFETY: both buffers outlive the synchronisation below; nothing reads `pinned` before it.
    unsafe {
        rt.copy_from_device_async(pinned.as_mut_ptr(), buf.ptr(), 8192, stream.handle())
            .unwrap();
    }
    assert_eq!(rt.current_device().unwrap(), 0);
    stream.synchronize().unwrap();
    assert!(pinned.as_slice().iter().all(|&b| b == 6));
    drop(buf);
    assert_eq!(rt.current_device().unwrap(), 0);
}

#[test]
fn a_thread_without_a_context_can_query_and_keeps_its_device() {
    let rt = runtime();
    let other = rt.device_count().unwrap() - 1;
    rt.set_device(other).unwrap();
    let buf = DeviceBuffer::new(Arc::clone(&rt), 4096).unwrap();
    rt.set_device(0).unwrap();
    let (ptr, rt2) = (buf.ptr(), Arc::clone(&rt));
    // A fresh thread has no driver context current: the platform binds the owner's primary
    // context for the driver call and restores the thread's state afterwards.
    let (info, device_after) = std::thread::spawn(move || {
        let info = rt2.pointer_info(ptr + 1).unwrap();
        (info, rt2.current_device().unwrap())
    })
    .join()
    .unwrap();
    assert_eq!((info.kind, info.device), (MemoryKind::Device, other));
    assert_eq!((info.base, info.len), (ptr, 4096));
    assert_eq!(device_after, 0);
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
fn synchronous_copies_round_trip_and_bad_ranges_give_the_hip_code() {
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
        Err(HipError::Call {
            call, code, detail, ..
        }) => {
            assert_eq!(call, "cudaMemcpy");
            assert_eq!(code, HipErrorCode::INVALID_VALUE);
            assert!(detail.unwrap().contains("cudaErrorInvalidValue"));
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
fn stale_handles_are_invalid_handle() {
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
    assert!(matches!(
        rt.event_query(e),
        Err(HipError::Call {
            code: HipErrorCode::INVALID_HANDLE,
            ..
        })
    ));
}

#[test]
fn a_failed_host_function_launch_gives_the_closure_back_to_drop() {
    let rt = runtime();
    let s = rt.stream_create().unwrap();
    rt.stream_destroy(s).unwrap();
    let token = Arc::new(());
    let held = Arc::clone(&token);
    let r = rt.launch_host_func(s, Box::new(move || drop(held)));
    assert!(r.is_err());
    assert_eq!(
        Arc::strong_count(&token),
        1,
        "the refused closure was dropped"
    );
}
