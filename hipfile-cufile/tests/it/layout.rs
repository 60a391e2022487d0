//! The structs laid out as CUDA 13.0's cufile.h lays them out (x86-64 Linux): sizes and field
//! offsets worked out from the header's declarations.

use std::mem::{offset_of, size_of};

use cufile::*;

#[test]
fn error_pair_and_descriptor() {
    assert_eq!(size_of::<CUfileError_t>(), 8);
    assert_eq!(offset_of!(CUfileError_t, cu_err), 4);
    assert_eq!(size_of::<CUfileDescr_t>(), 24);
    assert_eq!(offset_of!(CUfileDescr_t, type_), 0);
    assert_eq!(offset_of!(CUfileDescr_t, handle), 8);
    assert_eq!(offset_of!(CUfileDescr_t, fs_ops), 16);
}

#[test]
fn driver_properties() {
    assert_eq!(size_of::<CUfileDrvProps_nvfs_t>(), 32);
    assert_eq!(offset_of!(CUfileDrvProps_nvfs_t, poll_thresh_size), 8);
    assert_eq!(offset_of!(CUfileDrvProps_nvfs_t, max_direct_io_size), 16);
    assert_eq!(offset_of!(CUfileDrvProps_nvfs_t, dstatusflags), 24);
    assert_eq!(offset_of!(CUfileDrvProps_nvfs_t, dcontrolflags), 28);
    assert_eq!(size_of::<CUfileDrvProps_t>(), 56);
    assert_eq!(offset_of!(CUfileDrvProps_t, fflags), 32);
    assert_eq!(offset_of!(CUfileDrvProps_t, max_device_cache_size), 36);
    assert_eq!(offset_of!(CUfileDrvProps_t, per_buffer_cache_size), 40);
    assert_eq!(offset_of!(CUfileDrvProps_t, max_device_pinned_mem_size), 44);
    assert_eq!(offset_of!(CUfileDrvProps_t, max_batch_io_size), 48);
    assert_eq!(offset_of!(CUfileDrvProps_t, max_batch_io_timeout_msecs), 52);
}

#[test]
fn batch_params_and_events() {
    use hipfile::capi::hipFileIOParams_batch_t as Batch;
    assert_eq!(size_of::<CUfileIOParams_t>(), 64);
    assert_eq!(offset_of!(CUfileIOParams_t, mode), 0);
    assert_eq!(offset_of!(CUfileIOParams_t, u), 8);
    assert_eq!(offset_of!(CUfileIOParams_t, fh), 40);
    assert_eq!(offset_of!(CUfileIOParams_t, opcode), 48);
    assert_eq!(offset_of!(CUfileIOParams_t, cookie), 56);
    assert_eq!(size_of::<Batch>(), 32);
    assert_eq!(offset_of!(Batch, file_offset), 8);
    assert_eq!(offset_of!(Batch, devPtr_offset), 16);
    assert_eq!(offset_of!(Batch, size), 24);
    assert_eq!(size_of::<CUfileIOEvents_t>(), 24);
    assert_eq!(offset_of!(CUfileIOEvents_t, status), 8);
    assert_eq!(offset_of!(CUfileIOEvents_t, ret), 16);
}

#[test]
fn statistics() {
    assert_eq!(size_of::<CUfileOpCounter_t>(), 16);
    assert_eq!(size_of::<CUfileStatsLevel1_t>(), 512);
    assert_eq!(offset_of!(CUfileStatsLevel1_t, read_bytes), 96);
    assert_eq!(offset_of!(CUfileStatsLevel1_t, batch_submit_ops), 176);
    assert_eq!(offset_of!(CUfileStatsLevel1_t, batch_read_bytes), 416);
    assert_eq!(offset_of!(CUfileStatsLevel1_t, last_batch_write_bytes), 504);
    assert_eq!(size_of::<CUfileStatsLevel2_t>(), 1024);
    assert_eq!(offset_of!(CUfileStatsLevel2_t, read_size_kb_hist), 512);
    assert_eq!(offset_of!(CUfileStatsLevel2_t, write_size_kb_hist), 768);
    assert_eq!(size_of::<CUfilePerGpuStats_t>(), 248);
    assert_eq!(offset_of!(CUfilePerGpuStats_t, read_bytes), 16);
    // cuFile's `writes_bytes`.
    assert_eq!(offset_of!(CUfilePerGpuStats_t, write_bytes), 16 + 13 * 8);
    assert_eq!(offset_of!(CUfilePerGpuStats_t, reg_bytes), 240);
    assert_eq!(size_of::<CUfileStatsLevel3_t>(), 5000);
    assert_eq!(offset_of!(CUfileStatsLevel3_t, num_gpus), 1024);
    assert_eq!(offset_of!(CUfileStatsLevel3_t, per_gpu_stats), 1032);
}

/// cuFile's enumerators of the parameter, flag and status enums are hipFile's, value for value:
/// what lets the two doors share the facade's tables.
#[test]
fn shared_enumerators_have_cufiles_values() {
    use hipfile::capi as h;
    assert_eq!(
        (CUFILE_READ, CUFILE_WRITE, CUFILE_BATCH),
        (h::hipFileBatchRead, h::hipFileBatchWrite, h::hipFileBatch)
    );
    assert_eq!(
        (CUFILE_COMPLETE, CUFILE_FAILED),
        (h::hipFileComplete, h::hipFileFailed)
    );
    assert_eq!(
        [
            CU_FILE_STREAM_FIXED_BUF_OFFSET,
            CU_FILE_STREAM_FIXED_FILE_OFFSET,
            CU_FILE_STREAM_FIXED_FILE_SIZE,
            CU_FILE_STREAM_PAGE_ALIGNED_INPUTS
        ],
        [
            h::HIPFILE_STREAM_FIXED_BUF_OFFSET,
            h::HIPFILE_STREAM_FIXED_FILE_OFFSET,
            h::HIPFILE_STREAM_FIXED_FILE_SIZE,
            h::HIPFILE_STREAM_PAGE_ALIGNED_INPUTS
        ]
    );
    assert_eq!(
        (
            CU_FILE_NVME_SUPPORTED,
            CU_FILE_USE_POLL_MODE,
            CU_FILE_ALLOW_COMPAT_MODE
        ),
        (
            h::hipFileNVMeSupported,
            h::hipFileUsePollMode,
            h::hipFileAllowCompatMode
        )
    );
    assert_eq!(
        (CU_FILE_BATCH_IO_SUPPORTED, CU_FILE_STREAMS_SUPPORTED),
        (h::hipFileBatchIOSupported, h::hipFileStreamsSupported)
    );
    // cuFile's size_t parameters run 0 (PROFILE_STATS) to 11 (BATCH_IO_TIMEOUT_MS), bools 0 to
    // 11, strings 0 to 2, in the header's order, which is hipFile's.
    assert_eq!(CUFILE_PARAM_PROFILE_STATS, 0);
    assert_eq!(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, 5);
    assert_eq!(CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS, 11);
    assert_eq!(CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE, 1);
    assert_eq!(CUFILE_PARAM_PROPERTIES_ALLOW_SYSTEM_MEMORY, 6);
    assert_eq!(h::hipFileParamStreamMemopsBypass, 11);
    assert_eq!(CUFILE_PARAM_LOGGING_LEVEL, 0);
    assert_eq!(h::hipFileParamLogDir, 2);
    // The op error codes: cuFile's constants are the core's table's numbers.
    use hipfile_core::ErrorKind as K;
    for (kind, code) in [
        (K::DriverNotInitialized, CU_FILE_DRIVER_NOT_INITIALIZED),
        (K::PlatformNotSupported, CU_FILE_PLATFORM_NOT_SUPPORTED),
        (K::IoNotSupported, CU_FILE_IO_NOT_SUPPORTED),
        (K::HipDriverError, CU_FILE_CUDA_DRIVER_ERROR),
        (K::InvalidValue, CU_FILE_INVALID_VALUE),
        (K::DriverAlreadyOpen, CU_FILE_DRIVER_ALREADY_OPEN),
        (K::InternalError, CU_FILE_INTERNAL_ERROR),
    ] {
        assert_eq!(kind.code(), Some(code), "{kind:?}");
    }
}
