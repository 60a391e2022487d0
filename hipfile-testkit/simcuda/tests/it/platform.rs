//! The NVIDIA platform driving the simulated CUDA library. Every test here also runs in a child
//! process configured with two devices (see `two_devices`), so nothing may assume one device.

use std::sync::Arc;

use hipfile_hip::{
    DeviceBuffer, HipError, HipErrorCode, MemoryKind, OwnedStream, PinnedBuffer, Platform,
};

use hipfile_hip::{contract, GpuRuntime, Hold};

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
    // SAFETY: both buffers outlive the synchronisation below; nothing reads `pinned` before it;
    // `stream` is a live stream of this runtime.
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
    contract::pointer_queries_decode_every_kind_of_memory(&runtime());
}

#[test]
fn synchronous_copies_round_trip_and_bad_ranges_give_the_hip_code() {
    match contract::synchronous_copies_round_trip_and_bad_ranges_fail(&runtime()) {
        HipError::Call { call, detail, .. } => {
            assert_eq!(call, "cudaMemcpy");
            assert!(detail.unwrap().contains("cudaErrorInvalidValue"));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn async_copies_streams_events_and_host_functions_run_in_order() {
    contract::async_copies_streams_events_and_host_functions_run_in_order(&runtime());
}

#[test]
fn a_panicking_host_function_does_not_unwind_into_the_runtime() {
    contract::a_panicking_host_function_does_not_unwind_into_the_runtime(&runtime());
}

#[test]
fn stale_handles_are_invalid_handle() {
    // SAFETY: the runtime drives the simulated CUDA library, which looks every handle up and
    // refuses unknown ones.
    let event = unsafe { contract::stale_handles_are_refused(&runtime()) };
    assert!(matches!(
        event,
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
    let token = Arc::new(());
    let held = Arc::clone(&token);
    // SAFETY: `s` is live until destroyed here; the launch on the destroyed stream is refused by
    // the simulated CUDA library, which looks every handle up (that refusal is under test).
    let r = unsafe {
        rt.stream_destroy(s).unwrap();
        rt.launch_host_func(s, Box::new(move || drop(held)))
    };
    assert!(r.is_err());
    assert_eq!(
        Arc::strong_count(&token),
        1,
        "the refused closure was dropped"
    );
}

#[test]
fn streams_of_both_orders_run_copies_and_know_their_device() {
    contract::streams_of_both_orders_run_copies_and_know_their_device(&runtime());
}

#[test]
fn asynchronous_fills_write_their_range() {
    contract::asynchronous_fills_write_their_range(&runtime());
}

#[test]
fn streams_are_held_by_host_functions_though_the_driver_has_value_waits() {
    let rt = runtime();
    contract::a_hold_keeps_its_stream_until_the_flag_is_stored(&rt, Hold::HostFunction).unwrap();
    // CUDA may queue unrelated work behind a value wait, so the platform never offers it for
    // holding a stream, though the driver exports it and the wait itself works.
    assert!(!rt.stream_memops(0));
    assert!(
        contract::a_hold_keeps_its_stream_until_the_flag_is_stored(&rt, Hold::Memop).is_err(),
        "the contract case reports a platform without stream memory operations"
    );
    let nvidia = hipfile_hip::nvidia::NvidiaRuntime::load(
        &sim_library_str(),
        &sim_library_str(),
        &hipfile_hip::PlatformOptions::from_env(),
    )
    .unwrap();
    assert!(nvidia.stream_memops_on(0), "the driver exports the wait");
}

#[test]
fn the_driver_names_the_same_device_of_a_stream_as_the_runtime() {
    let nvidia = hipfile_hip::nvidia::NvidiaRuntime::load(
        &sim_library_str(),
        &sim_library_str(),
        &hipfile_hip::PlatformOptions::from_env(),
    )
    .unwrap();
    let last = nvidia.device_count().unwrap() - 1;
    nvidia.set_device(last).unwrap();
    let stream = nvidia.stream_create_independent().unwrap();
    nvidia.set_device(0).unwrap();
    // SAFETY: `stream` is live until destroyed at the end.
    unsafe {
        assert_eq!(nvidia.stream_device(stream).unwrap(), last);
        assert_eq!(nvidia.stream_device_through_driver(stream).unwrap(), last);
        assert_eq!(
            nvidia.current_device().unwrap(),
            0,
            "the caller's device is kept"
        );
        nvidia.stream_destroy(stream).unwrap();
    }
}
