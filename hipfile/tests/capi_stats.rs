//! `hipFileGetStatsL1`/`L2`/`L3` through the C ABI after a known workload: every counter the
//! workload touches reads exactly what it did.
//!
//! The C ABI has one process-wide driver, so this is a test binary of its own with one test.
//! As `capi_model.rs`, the driver and the test share one simulated GPU: the simulated HIP runtime
//! library (`libamdhip64.so` of `hipfile-simhip`) is the platform the driver loads and where the
//! test allocates. With `HIPFILE_GPU_TESTS=1` both use the machine's GPU instead.
#![cfg(all(feature = "fallback", feature = "fastpath"))]

#[path = "support/capi_handle.rs"]
mod capi_handle;

use std::ffi::c_void;
use std::os::fd::AsRawFd;
use std::ptr;

use hipfile::capi::{
    hipFileBatch, hipFileBatchHandle_t, hipFileBatchIODestroy, hipFileBatchIOGetStatus,
    hipFileBatchIOSetUp, hipFileBatchIOSubmit, hipFileBatchRead, hipFileBufDeregister,
    hipFileBufRegister, hipFileDriverClose, hipFileDriverOpen, hipFileGetStatsL1,
    hipFileGetStatsL2, hipFileGetStatsL3, hipFileHandleDeregister, hipFileIOEvents_t,
    hipFileIOParams_batch_t, hipFileIOParams_t, hipFileIOParams_u, hipFileOpCounter_t, hipFileRead,
    hipFileStatsLevel1_t, hipFileStatsLevel2_t, hipFileStatsLevel3_t, hipFileSuccess,
};
use hipfile_hip::DeviceBuffer;

fn ok(ok: u64) -> hipFileOpCounter_t {
    hipFileOpCounter_t { ok, err: 0 }
}

#[test]
fn every_level_counts_a_known_workload() {
    for name in [
        "HIPFILE_ALLOW_COMPAT_MODE",
        "HIPFILE_FORCE_COMPAT_MODE",
        "HIPFILE_BACKENDS",
        "HIPFILE_SIM_DEVICES",
        "HIPFILE_SIM_P2P",
    ] {
        std::env::remove_var(name);
    }
    std::env::set_var("HIPFILE_STATS_LEVEL", "3");
    let on_gpu = hipfile_testkit::target::real_gpu_requested();
    let runtime = hipfile_testkit::target::c_abi_runtime().expect("the runtime under test opens");
    const LEN: usize = 64 << 10;
    let buffer = DeviceBuffer::new(runtime, LEN).expect("hipMalloc");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    std::fs::write(&path, vec![7u8; LEN]).unwrap();
    let file = std::fs::File::open(&path).unwrap();

    assert_eq!(hipFileDriverOpen().err, hipFileSuccess);
    let (fh, registered) = capi_handle::register_fd(file.as_raw_fd());
    assert_eq!(registered.err, hipFileSuccess);
    let base = buffer.ptr() as *mut c_void;
    assert_eq!(
        // SAFETY: `base` is `buffer`'s live device memory, deregistered before `buffer` is freed.
        unsafe { hipFileBufRegister(base, LEN, 0) }.err,
        hipFileSuccess
    );
    // Three aligned 4 KiB reads, two unaligned reads of 1000 bytes, one read of a bad handle.
    for i in 0..3 {
        // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the
        // call.
        assert_eq!(unsafe { hipFileRead(fh, base, 4096, i * 4096, 0) }, 4096);
    }
    for i in 0..2 {
        assert_eq!(
            // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during
            // the call.
            unsafe { hipFileRead(fh, base, 1000, 1 + i * 1000, 0) },
            1000
        );
    }
    // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the call.
    assert!(unsafe { hipFileRead(ptr::null_mut(), base, 4096, 0, 0) } < 0);
    // One batch of two 8 KiB reads.
    let mut batch: hipFileBatchHandle_t = ptr::null_mut();
    // SAFETY: `batch` is a live local; the entries point at the registered buffer and file.
    unsafe {
        assert_eq!(hipFileBatchIOSetUp(&mut batch, 2).err, hipFileSuccess);
        let entry = |offset: i64, cookie: usize| hipFileIOParams_t {
            mode: hipFileBatch,
            u: hipFileIOParams_u {
                batch: hipFileIOParams_batch_t {
                    devPtr_base: base,
                    file_offset: offset,
                    devPtr_offset: offset,
                    size: 8192,
                },
            },
            fh,
            opcode: hipFileBatchRead,
            cookie: cookie as *mut c_void,
        };
        let mut entries = [entry(0, 1), entry(8192, 2)];
        assert_eq!(
            hipFileBatchIOSubmit(batch, 2, entries.as_mut_ptr(), 0).err,
            hipFileSuccess
        );
        let mut events: [hipFileIOEvents_t; 2] = std::mem::zeroed();
        let mut got: u32 = 2;
        assert_eq!(
            hipFileBatchIOGetStatus(batch, 2, &mut got, events.as_mut_ptr(), ptr::null_mut()).err,
            hipFileSuccess
        );
        assert_eq!(got, 2);
        hipFileBatchIODestroy(batch);
    }

    let mut l1 = hipFileStatsLevel1_t::default();
    let mut l2 = hipFileStatsLevel2_t::default();
    let mut l3 = hipFileStatsLevel3_t::default();
    // SAFETY: each pointer is a live local of the right type.
    unsafe {
        assert_eq!(hipFileGetStatsL1(&mut l1).err, hipFileSuccess);
        assert_eq!(hipFileGetStatsL2(&mut l2).err, hipFileSuccess);
        assert_eq!(hipFileGetStatsL3(&mut l3).err, hipFileSuccess);
    }
    assert_eq!(l1.read_ops, hipFileOpCounter_t { ok: 5, err: 1 });
    assert_eq!(l1.read_bytes, 3 * 4096 + 2000);
    assert_eq!((l1.write_ops, l1.write_bytes), (ok(0), 0));
    assert!(l1.read_lat_sum_us >= l1.read_lat_avg_us * 5);
    assert_eq!(l1.hdl_register_ops, ok(1));
    assert_eq!(l1.buf_register_ops, ok(1));
    assert_eq!(l1.batch_setup_ops, ok(1));
    assert_eq!(l1.batch_submit_ops, ok(1));
    assert_eq!(l1.batch_total_submit_ops, ok(1));
    assert_eq!(l1.batch_complete_ops, ok(1));
    assert_eq!(l1.batch_destroy_ops, ok(1));
    assert_eq!(l1.batch_enqueued_ops, ok(2));
    assert_eq!(l1.batch_processed_ops, ok(2));
    assert_eq!(l1.batch_read_bytes, 16384);
    assert_eq!(l1.last_batch_read_bytes, 16384);
    assert_eq!(l2.basic, l1);
    assert_eq!(l2.read_size_kb_hist[0], 2, "1000-byte reads");
    assert_eq!(l2.read_size_kb_hist[2], 3, "4 KiB reads");
    assert_eq!(l2.read_size_kb_hist[3], 2, "8 KiB batch reads");
    assert_eq!(l2.read_size_kb_hist.iter().sum::<u64>(), 7);
    assert_eq!(l3.detailed, l2);
    assert!(l3.num_gpus >= 1);
    let gpu = &l3.per_gpu_stats[0];
    // The bad handle's read failed before its memory was known: it has no GPU.
    assert_eq!((gpu.n_total_reads, gpu.n_reads_err), (7, 0));
    assert_eq!(gpu.read_bytes, 3 * 4096 + 2000 + 16384);
    assert_eq!(gpu.n_unaligned_reads, 2);
    if on_gpu {
        // Whether the machine's GPU has a P2P path decides where aligned reads go; unaligned
        // ones are staged either way.
        assert_eq!(gpu.n_p2p_reads + gpu.n_posix_reads, 7);
        assert!(gpu.n_posix_reads >= 2, "{gpu:?}");
    } else {
        assert_eq!(
            (gpu.n_p2p_reads, gpu.n_posix_reads),
            (5, 2),
            "aligned reads take the direct path, unaligned ones the staged path"
        );
    }
    assert_eq!(
        (gpu.n_mmap, gpu.n_mmap_ok, gpu.reg_bytes),
        (1, 1, LEN as u64)
    );

    // SAFETY: `base` is registered, `fh` is a registered handle.
    unsafe {
        assert_eq!(hipFileBufDeregister(base).err, hipFileSuccess);
        hipFileHandleDeregister(fh);
        assert_eq!(hipFileGetStatsL3(&mut l3).err, hipFileSuccess);
    }
    let gpu = &l3.per_gpu_stats[0];
    assert_eq!((gpu.n_mmap_free, gpu.reg_bytes), (1, 0));
    assert_eq!(l3.detailed.basic.buf_deregister_ops, ok(1));
    assert_eq!(l3.detailed.basic.hdl_deregister_ops, ok(1));
    assert_eq!(hipFileDriverClose().err, hipFileSuccess);
}
