//! The AMD platform driving the simulated HIP library. Every test here also runs in a child
//! process configured for ROCm 5 (see `abi`), so nothing may assume one ABI generation.

use std::sync::Arc;

use hipfile_hip::amd::MemoryTypeAbi;
use hipfile_hip::sim::SimAbi;
use hipfile_hip::{DeviceBuffer, HipError, HipErrorCode, MemoryKind, Platform};

use hipfile_hip::{contract, Hold};

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
    contract::pointer_queries_decode_every_kind_of_memory(&runtime());
}

#[test]
fn synchronous_copies_round_trip_and_bad_ranges_fail() {
    match contract::synchronous_copies_round_trip_and_bad_ranges_fail(&runtime()) {
        HipError::Call { call, .. } => assert_eq!(call, "hipMemcpy"),
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
fn stale_handles_are_errors() {
    // SAFETY: the runtime drives the simulated HIP library, which looks every handle up and
    // refuses unknown ones.
    assert!(unsafe { contract::stale_handles_are_refused(&runtime()) }.is_err());
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

#[test]
fn streams_of_both_orders_run_copies_and_know_their_device() {
    contract::streams_of_both_orders_run_copies_and_know_their_device(&runtime());
}

#[test]
fn asynchronous_fills_write_their_range() {
    contract::asynchronous_fills_write_their_range(&runtime());
}

#[test]
fn both_kinds_of_hold_keep_a_stream_until_the_flag_is_stored() {
    let rt = runtime();
    contract::a_hold_keeps_its_stream_until_the_flag_is_stored(&rt, Hold::HostFunction).unwrap();
    contract::a_hold_keeps_its_stream_until_the_flag_is_stored(&rt, Hold::Memop)
        .expect("the simulated library offers stream memory operations");
}
