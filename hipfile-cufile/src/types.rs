//! The types and constants of cuFile's `cufile.h` (CUDA 13.0, cuFile 1.15.1), in Rust.
//!
//! Where cuFile's layout is hipFile's, the type is the facade's under cuFile's name: the two
//! headers lay out `CUfileDescr_t`, `CUfileIOParams_t`, `CUfileIOEvents_t` and the statistics
//! structs alike (one field name differs: `CUfilePerGpuStats_t::writes_bytes` is the facade's
//! `write_bytes`), so one conversion serves both doors. `CUfileError_t` is a type of its own
//! (the pair the entry points return) and `CUfileDrvProps_t` differs in layout: cuFile keeps the
//! cache and pinned sizes and batch limits in `unsigned int`, hipFile in 64 bits.
//!
//! C enums cross the ABI as `c_int` with one `pub const` per enumerator, as in the facade: a
//! caller may pass any integer.

#![allow(non_camel_case_types, non_upper_case_globals)]

use std::ffi::{c_int, c_uint};

use hipfile::capi::{self, StatusPair};

/// `CUresult`: the CUDA driver's status, received as a plain integer.
pub type CUresult = c_int;

/// `CUstream`: an opaque stream pointer of the CUDA driver.
pub type CUstream = *mut std::ffi::c_void;

/// `CUfileOpError`: the library's status (C enum, received as `c_int`).
pub type CUfileOpError = c_int;

/// `CUFILEOP_BASE_ERR`: every error code is this plus a small number.
pub const CUFILEOP_BASE_ERR: CUfileOpError = 5000;

/// `CU_FILE_CUDA_DRIVER_ERROR`: a CUDA failure; `cu_err` carries the `CUresult`.
pub const CU_FILE_CUDA_DRIVER_ERROR: CUfileOpError = 5011;
/// `CU_FILE_INVALID_VALUE`: invalid arguments.
pub const CU_FILE_INVALID_VALUE: CUfileOpError = 5022;
/// `CU_FILE_INTERNAL_ERROR`.
pub const CU_FILE_INTERNAL_ERROR: CUfileOpError = 5030;
/// `CU_FILE_IO_NOT_SUPPORTED`: GPUDirect Storage is not supported on this file.
pub const CU_FILE_IO_NOT_SUPPORTED: CUfileOpError = 5008;
/// `CU_FILE_DRIVER_NOT_INITIALIZED`.
pub const CU_FILE_DRIVER_NOT_INITIALIZED: CUfileOpError = 5001;
/// `CU_FILE_PLATFORM_NOT_SUPPORTED`.
pub const CU_FILE_PLATFORM_NOT_SUPPORTED: CUfileOpError = 5007;
/// `CU_FILE_DRIVER_ALREADY_OPEN`.
pub const CU_FILE_DRIVER_ALREADY_OPEN: CUfileOpError = 5026;
/// `CU_FILE_IO_MAX_ERROR`: one past cuFile's largest code.
pub const CU_FILE_IO_MAX_ERROR: CUfileOpError = 5050;

/// `CUfileError_t`: the status most calls return by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CUfileError_t {
    /// Library status (a `CUfileOpError` value).
    pub err: CUfileOpError,
    /// The GPU runtime's status when `err` is [`CU_FILE_CUDA_DRIVER_ERROR`]. The runtime's
    /// number: on NVIDIA hipfile-hip's errors carry HIP's number, which is CUDA's for every code
    /// the two share (hipfile-hip's `nvidia::errors::hip_code` table); a CUDA-only code reads
    /// 999, `CUDA_ERROR_UNKNOWN`.
    pub cu_err: CUresult,
}

impl StatusPair for CUfileError_t {
    const SUCCESS: Self = CUfileError_t { err: 0, cu_err: 0 };

    fn op(code: c_int) -> Self {
        CUfileError_t {
            err: code,
            cu_err: 0,
        }
    }

    fn gpu(code: c_int) -> Self {
        CUfileError_t {
            err: CU_FILE_CUDA_DRIVER_ERROR,
            cu_err: code,
        }
    }
}

/// `CUfileDescr_t` (layout of the facade's `hipFileDescr_t`).
pub type CUfileDescr_t = capi::hipFileDescr_t;
/// `CUfileHandle_t`: opaque handle of a registered file.
pub type CUfileHandle_t = capi::hipFileHandle_t;
/// `CUfileIOParams_t`: one batch request.
pub type CUfileIOParams_t = capi::hipFileIOParams_t;
/// `CUfileIOEvents_t`: completion record of one batch request.
pub type CUfileIOEvents_t = capi::hipFileIOEvents_t;
/// `CUfileBatchHandle_t`: opaque batch handle.
pub type CUfileBatchHandle_t = capi::hipFileBatchHandle_t;
/// `CUfileOpCounter_t`.
pub type CUfileOpCounter_t = capi::hipFileOpCounter_t;
/// `CUfileStatsLevel1_t`.
pub type CUfileStatsLevel1_t = capi::hipFileStatsLevel1_t;
/// `CUfileStatsLevel2_t`.
pub type CUfileStatsLevel2_t = capi::hipFileStatsLevel2_t;
/// `CUfileStatsLevel3_t`.
pub type CUfileStatsLevel3_t = capi::hipFileStatsLevel3_t;
/// `CUfilePerGpuStats_t`.
pub type CUfilePerGpuStats_t = capi::hipFilePerGpuStats_t;

/// `CU_FILE_HANDLE_TYPE_OPAQUE_FD`.
pub const CU_FILE_HANDLE_TYPE_OPAQUE_FD: c_int = 1;
/// `CU_FILE_HANDLE_TYPE_OPAQUE_WIN32`.
pub const CU_FILE_HANDLE_TYPE_OPAQUE_WIN32: c_int = 2;
/// `CU_FILE_HANDLE_TYPE_USERSPACE_FS`.
pub const CU_FILE_HANDLE_TYPE_USERSPACE_FS: c_int = 3;

/// `CUFILE_READ`.
pub const CUFILE_READ: c_int = 0;
/// `CUFILE_WRITE`.
pub const CUFILE_WRITE: c_int = 1;
/// `CUFILE_BATCH`.
pub const CUFILE_BATCH: c_int = 1;
/// `CUFILE_COMPLETE`.
pub const CUFILE_COMPLETE: c_int = 0x10;
/// `CUFILE_FAILED`.
pub const CUFILE_FAILED: c_int = 0x40;

/// `CU_FILE_STREAM_FIXED_BUF_OFFSET`.
pub const CU_FILE_STREAM_FIXED_BUF_OFFSET: c_uint = 1;
/// `CU_FILE_STREAM_FIXED_FILE_OFFSET`.
pub const CU_FILE_STREAM_FIXED_FILE_OFFSET: c_uint = 2;
/// `CU_FILE_STREAM_FIXED_FILE_SIZE`.
pub const CU_FILE_STREAM_FIXED_FILE_SIZE: c_uint = 4;
/// `CU_FILE_STREAM_PAGE_ALIGNED_INPUTS`.
pub const CU_FILE_STREAM_PAGE_ALIGNED_INPUTS: c_uint = 8;

/// `CU_FILE_LUSTRE_SUPPORTED`: bit of `dstatusflags` (and a P2P flags target).
pub const CU_FILE_LUSTRE_SUPPORTED: c_int = 0;
/// `CU_FILE_NVME_SUPPORTED`: bit of `dstatusflags`.
pub const CU_FILE_NVME_SUPPORTED: c_int = 4;
/// `CU_FILE_NVMEOF_SUPPORTED`.
pub const CU_FILE_NVMEOF_SUPPORTED: c_int = 5;
/// `CU_FILE_SCSI_SUPPORTED`.
pub const CU_FILE_SCSI_SUPPORTED: c_int = 6;
/// `CU_FILE_NVME_P2P_SUPPORTED`.
pub const CU_FILE_NVME_P2P_SUPPORTED: c_int = 11;
/// `CU_FILE_USE_POLL_MODE`: bit of `dcontrolflags`.
pub const CU_FILE_USE_POLL_MODE: c_int = 0;
/// `CU_FILE_ALLOW_COMPAT_MODE`: bit of `dcontrolflags`.
pub const CU_FILE_ALLOW_COMPAT_MODE: c_int = 1;
/// `CU_FILE_BATCH_IO_SUPPORTED`: bit of `fflags`.
pub const CU_FILE_BATCH_IO_SUPPORTED: c_int = 1;
/// `CU_FILE_STREAMS_SUPPORTED`: bit of `fflags`.
pub const CU_FILE_STREAMS_SUPPORTED: c_int = 2;

/// `CUFileSizeTConfigParameter_t`: the same enumerators, in the same order, as hipFile's.
pub type CUFileSizeTConfigParameter_t = c_int;
/// `CUFILE_PARAM_PROFILE_STATS`.
pub const CUFILE_PARAM_PROFILE_STATS: c_int = capi::hipFileParamProfileStats;
/// `CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB`.
pub const CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB: c_int =
    capi::hipFileParamPropertiesMaxDirectIOSizeKB;
/// `CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS`, the last size_t parameter.
pub const CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS: c_int =
    capi::hipFileParamPropertiesBatchIOTimeoutMs;
/// `CUFileBoolConfigParameter_t`.
pub type CUFileBoolConfigParameter_t = c_int;
/// `CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE`.
pub const CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE: c_int =
    capi::hipFileParamPropertiesAllowCompatMode;
/// `CUFILE_PARAM_PROPERTIES_ALLOW_SYSTEM_MEMORY`.
pub const CUFILE_PARAM_PROPERTIES_ALLOW_SYSTEM_MEMORY: c_int =
    capi::hipFileParamPropertiesAllowSystemMemory;
/// `CUFileStringConfigParameter_t`.
pub type CUFileStringConfigParameter_t = c_int;
/// `CUFILE_PARAM_LOGGING_LEVEL`.
pub const CUFILE_PARAM_LOGGING_LEVEL: c_int = capi::hipFileParamLoggingLevel;
/// `CUFileArrayConfigParameter_t`.
pub type CUFileArrayConfigParameter_t = c_int;
/// `CUFILE_PARAM_POSIX_POOL_SLAB_SIZE_KB`.
pub const CUFILE_PARAM_POSIX_POOL_SLAB_SIZE_KB: c_int = 0;
/// `CUFILE_PARAM_POSIX_POOL_SLAB_COUNT`.
pub const CUFILE_PARAM_POSIX_POOL_SLAB_COUNT: c_int = 1;

/// The anonymous `nvfs` struct of [`CUfileDrvProps_t`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUfileDrvProps_nvfs_t {
    /// Storage driver major version.
    pub major_version: c_uint,
    /// Storage driver minor version.
    pub minor_version: c_uint,
    /// Largest IO (KiB) that polls when poll mode is on.
    pub poll_thresh_size: usize,
    /// Largest single IO (KiB).
    pub max_direct_io_size: usize,
    /// Bits indexed by `CUfileDriverStatusFlags_t`.
    pub dstatusflags: c_uint,
    /// Bits indexed by `CUfileDriverControlFlags_t`.
    pub dcontrolflags: c_uint,
}

/// `CUfileDrvProps_t`: what `cuFileDriverGetProperties` fills. Sizes in KiB.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CUfileDrvProps_t {
    /// Storage driver settings.
    pub nvfs: CUfileDrvProps_nvfs_t,
    /// Bits indexed by `CUfileFeatureFlags_t`.
    pub fflags: c_uint,
    /// GPU memory for bounce buffers (KiB).
    pub max_device_cache_size: c_uint,
    /// One bounce buffer (KiB).
    pub per_buffer_cache_size: c_uint,
    /// Pinnable GPU memory (KiB).
    pub max_device_pinned_mem_size: c_uint,
    /// Most requests in one batch.
    pub max_batch_io_size: c_uint,
    /// Batch timeout (ms).
    pub max_batch_io_timeout_msecs: c_uint,
}

fn saturating_uint(value: u64) -> c_uint {
    c_uint::try_from(value).unwrap_or(c_uint::MAX)
}

impl From<capi::hipFileDriverProps_t> for CUfileDrvProps_t {
    /// The one conversion between the two layouts: sizes cuFile keeps in `unsigned int` saturate.
    fn from(p: capi::hipFileDriverProps_t) -> Self {
        CUfileDrvProps_t {
            nvfs: CUfileDrvProps_nvfs_t {
                major_version: p.nvfs.major_version,
                minor_version: p.nvfs.minor_version,
                poll_thresh_size: usize::try_from(p.nvfs.poll_thresh_size).unwrap_or(usize::MAX),
                max_direct_io_size: usize::try_from(p.nvfs.max_direct_io_size)
                    .unwrap_or(usize::MAX),
                dstatusflags: p.nvfs.driver_status_flags,
                dcontrolflags: p.nvfs.driver_control_flags,
            },
            fflags: p.feature_flags,
            max_device_cache_size: saturating_uint(p.max_device_cache_size),
            per_buffer_cache_size: saturating_uint(p.per_buffer_cache_size),
            max_device_pinned_mem_size: saturating_uint(p.max_device_pinned_mem_size),
            max_batch_io_size: p.max_batch_io_count,
            max_batch_io_timeout_msecs: p.max_batch_io_timeout_msecs,
        }
    }
}
