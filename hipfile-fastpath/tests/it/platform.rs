//! The fastpath against the runtime under test: the simulator by default, the machine's real GPU
//! runtime with `HIPFILE_GPU_TESTS=1` (the GPU bundle). What it decides from the platform — is
//! there a P2P driver, what kind of memory is this pointer — is checked on that platform, and
//! every request is byte-checked whichever backend serves it.

use std::os::fd::AsRawFd;
use std::sync::Arc;

use hipfile_core::{
    CompatMode, Decline, Driver, DriverOptions, IoCall, IoOp, RegistryBuilder, Settings,
};
use hipfile_fastpath::{verdict, Facts};
use hipfile_hip::{DeviceBuffer, GpuRuntime, MemoryKind, PinnedBuffer};
use hipfile_testkit::target::runtime_under_test;

use crate::support::{build_fs_dir, env, open_rw, pattern};

fn driver_on(gpu: &Arc<dyn GpuRuntime>) -> Driver {
    let mut backends = RegistryBuilder::new();
    hipfile_fastpath::register(&mut backends).unwrap();
    hipfile_fallback::register(&mut backends).unwrap();
    let driver = Driver::new(DriverOptions {
        backends: Some(backends),
        selection: None,
        env: env(),
        ..DriverOptions::with_runtime(Arc::clone(gpu))
    });
    driver.stage_settings(|s| *s = Settings::default()).unwrap();
    driver.open().unwrap();
    driver
}

/// Aligned IO goes to the fastpath when the platform has a P2P driver and to the fallback when
/// it has none (the H200 without nvidia-fs), byte-exact either way.
#[test]
fn aligned_io_goes_direct_only_where_the_platform_has_a_p2p_driver() {
    let gpu = runtime_under_test().unwrap().runtime;
    let driver = driver_on(&gpu);
    let dir = build_fs_dir();
    let file = open_rw(&dir.path().join("data"));
    let handle = driver.handle_register(file.as_raw_fd()).unwrap();
    let registered = driver.file(handle).unwrap();
    let direct_possible = gpu.p2p().is_some()
        && registered.direct_fd().is_some()
        && hipfile_fastpath::filesystem_verdict(&registered.fs().kind, &env()).is_ok();
    let want = if direct_possible {
        "fastpath"
    } else {
        "fallback"
    };
    println!(
        "platform {:?}, P2P driver {:?}: aligned IO should go to the {want}",
        gpu.info().platform,
        gpu.p2p().map(|d| d.name())
    );

    let size = 1 << 20;
    let data = pattern(size, 21);
    let mut src = DeviceBuffer::new(Arc::clone(&gpu), size).unwrap();
    src.write_at(0, &data).unwrap();
    let mut dst = DeviceBuffer::new(Arc::clone(&gpu), size).unwrap();
    dst.fill(0xee).unwrap();
    let session = driver.session().unwrap();
    let call = |op, buffer| IoCall {
        op,
        handle,
        buffer,
        size,
        file_offset: 0,
        buffer_offset: 0,
    };
    for (op, buffer) in [(IoOp::Write, src.ptr()), (IoOp::Read, dst.ptr())] {
        let before = session.stats().snapshot();
        assert_eq!(driver.io(call(op, buffer)).unwrap(), size, "{op:?}");
        let after = session.stats().snapshot();
        let ops = |name| {
            let count = |s: &hipfile_core::StatsSnapshot| s.backend(name).map_or(0, |b| b.ops);
            count(&after) - count(&before)
        };
        let by = match (ops("fallback"), ops("fastpath")) {
            (1, 0) => "fallback",
            (0, 1) => "fastpath",
            counts => panic!("{op:?}: one backend should have served it, counts {counts:?}"),
        };
        assert_eq!(by, want, "{op:?} was served by the {by}");
    }
    assert!(dst.to_vec().unwrap() == data, "bytes read back differ");
    assert!(std::fs::read(dir.path().join("data")).unwrap() == data);
    driver.handle_deregister(handle).unwrap();
}

/// The platform's pointer query feeds the fastpath's memory rule: device memory passes it;
/// managed and pinned host memory are declined as not device memory.
#[test]
fn the_platforms_memory_kinds_decide_the_memory_rule() {
    let gpu = runtime_under_test().unwrap().runtime;
    let e = env();
    let kind_of = |ptr: usize| gpu.pointer_info(ptr).unwrap().kind;
    let facts = |memory| Facts {
        has_p2p_driver: true,
        has_direct_fd: true,
        memory,
        align: hipfile_core::DioAlign {
            memory: 512,
            offset: 4096,
        },
        fs: &hipfile_core::FsKind::Xfs,
        file_offset: 0,
        size: 4096,
        device_address: 0,
        compat: CompatMode {
            allowed: true,
            forced: false,
        },
        env: &e,
    };
    let dev = DeviceBuffer::new(Arc::clone(&gpu), 4096).unwrap();
    assert_eq!(kind_of(dev.ptr()), MemoryKind::Device);
    assert_eq!(verdict(&facts(kind_of(dev.ptr()))), Ok(()));
    let managed = DeviceBuffer::new_managed(Arc::clone(&gpu), 4096).unwrap();
    assert_eq!(
        verdict(&facts(kind_of(managed.ptr()))),
        Err(Decline::NotDeviceMemory)
    );
    let pinned = PinnedBuffer::new(Arc::clone(&gpu), 4096).unwrap();
    assert_eq!(
        verdict(&facts(kind_of(pinned.as_ptr() as usize))),
        Err(Decline::HostMemory)
    );
}

/// Through the driver, memory that is not device memory is refused before any backend runs, on
/// the platform under test too.
#[test]
fn host_and_managed_memory_are_refused_by_the_driver() {
    let gpu = runtime_under_test().unwrap().runtime;
    let driver = driver_on(&gpu);
    let dir = build_fs_dir();
    let file = open_rw(&dir.path().join("data"));
    file.set_len(8192).unwrap();
    let handle = driver.handle_register(file.as_raw_fd()).unwrap();
    let managed = DeviceBuffer::new_managed(Arc::clone(&gpu), 4096).unwrap();
    let pinned = PinnedBuffer::new(Arc::clone(&gpu), 4096).unwrap();
    for ptr in [managed.ptr(), pinned.as_ptr() as usize] {
        let err = driver
            .io(IoCall {
                op: IoOp::Read,
                handle,
                buffer: ptr,
                size: 4096,
                file_offset: 0,
                buffer_offset: 0,
            })
            .unwrap_err();
        assert_eq!(
            err.kind(),
            hipfile_core::ErrorKind::HipMemoryTypeInvalid,
            "{err}"
        );
    }
    driver.handle_deregister(handle).unwrap();
}
