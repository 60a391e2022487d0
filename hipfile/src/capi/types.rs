//! `#[repr(C)]` mirrors of the types in `include/hipfile.h`.
//!
//! Names are the C names, so a reader can go from a header line to its Rust
//! twin with one search. C enums are not Rust enums here: they cross the ABI
//! as `c_int`, a caller can pass any integer, and turning an out-of-range
//! integer into a Rust enum is undefined behaviour. Each C enum is therefore
//! a `c_int` type alias plus one `pub const` per enumerator; code matching on
//! them must keep a catch-all arm.
//!
//! Reading caller memory: [`hipFileDescr_t::fs_ops`] is left uninitialised
//! by ordinary programs when `type` is [`hipFileHandleTypeOpaqueFD`], and only
//! the `fd` half of its handle union is written. Copying a whole
//! `hipFileDescr_t` out of caller memory would read uninitialised bytes as a
//! pointer, which is undefined behaviour in Rust; read `type_` and
//! `handle.fd` field by field through raw pointers instead.
//!
//! The layout tests at the bottom compile a C program against our header
//! (and HIP's) and compare every size, alignment, field offset and constant.

// C spellings on purpose; and this is a complete mirror of the header, so
// items the facade does not (yet) use are expected, not dead.
#![allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code
)]

use core::ffi::{c_char, c_int, c_uint, c_void};

// ---------------------------------------------------------------------------
// Portable and HIP types
// ---------------------------------------------------------------------------

/// `hoff_t`: the C `off_t`, 64 bits on every supported (64-bit Linux) target.
pub type hoff_t = i64;

/// `ssize_t` as returned by `hipFileRead`/`hipFileWrite`.
pub type ssize_t = isize;

/// HIP's `hipError_t`: an int-sized C enum, received as a plain integer.
pub type hipError_t = c_int;

/// HIP's `hipStream_t`: an opaque stream pointer (the CUDA stream on NVIDIA).
pub type hipStream_t = *mut c_void;

/// `hipSuccess`, the `hipError_t` that means no HIP error.
pub const hipSuccess: hipError_t = 0;

// ---------------------------------------------------------------------------
// Version and flag macros
// ---------------------------------------------------------------------------

/// `HIPFILE_VERSION_MAJOR`: API major version the header describes.
pub const HIPFILE_VERSION_MAJOR: c_uint = 0;
/// `HIPFILE_VERSION_MINOR`: API minor version the header describes.
pub const HIPFILE_VERSION_MINOR: c_uint = 2;
/// `HIPFILE_VERSION_PATCH`: API patch version the header describes.
pub const HIPFILE_VERSION_PATCH: c_uint = 0;

/// `HIPFILE_RDMA_REGISTER`: RDMA memory is registered.
pub const HIPFILE_RDMA_REGISTER: c_int = 1;
/// `HIPFILE_RDMA_RELAXED_ORDERING`: RDMA may use relaxed ordering.
pub const HIPFILE_RDMA_RELAXED_ORDERING: c_int = 1 << 1;

/// `HIPFILE_STREAM_FIXED_BUF_OFFSET`: buffer offset known at submission.
pub const HIPFILE_STREAM_FIXED_BUF_OFFSET: c_uint = 1;
/// `HIPFILE_STREAM_FIXED_FILE_OFFSET`: file offset known at submission.
pub const HIPFILE_STREAM_FIXED_FILE_OFFSET: c_uint = 1 << 1;
/// `HIPFILE_STREAM_FIXED_FILE_SIZE`: size known at submission.
pub const HIPFILE_STREAM_FIXED_FILE_SIZE: c_uint = 1 << 2;
/// `HIPFILE_STREAM_PAGE_ALIGNED_INPUTS`: offsets and size are 4 KiB aligned.
pub const HIPFILE_STREAM_PAGE_ALIGNED_INPUTS: c_uint = 1 << 3;
/// `HIPFILE_STREAM_FLAGS_MASK`: every valid stream flag bit.
pub const HIPFILE_STREAM_FLAGS_MASK: c_uint = 0xf;

/// `HIPFILE_MAX_GPUS`: entries in [`hipFileStatsLevel3_t::per_gpu_stats`].
pub const HIPFILE_MAX_GPUS: usize = 16;
/// `HIPFILE_GPU_UUID_LEN`: bytes in [`hipFilePerGpuStats_t::uuid`].
pub const HIPFILE_GPU_UUID_LEN: usize = 16;

// ---------------------------------------------------------------------------
// hipFileOpError_t
// ---------------------------------------------------------------------------

/// `hipFileOpError_t`: a library status code (C enum, received as `c_int`).
pub type hipFileOpError_t = c_int;

/// `HIPFILE_BASE_ERR`: every error code is this plus a small number.
pub const HIPFILE_BASE_ERR: hipFileOpError_t = 5000;

/// Success.
pub const hipFileSuccess: hipFileOpError_t = 0;
/// One past the largest code; not an error anyone returns.
pub const hipFileIOMaxError: hipFileOpError_t = HIPFILE_BASE_ERR + 39;

/// One `pub const` per row of hipfile-core's table of error codes, named and valued as upstream's
/// enumerator, and [`HIPFILE_OP_ERRORS`].
macro_rules! op_error_constants {
    ($($kind:ident = $code:literal => $c_name:ident, $text:literal;)*) => {
        $(
            #[doc = concat!(
                "`", stringify!($code), "`: ", $text,
                " ([`ErrorKind::", stringify!($kind), "`](hipfile_core::ErrorKind::",
                stringify!($kind), "))."
            )]
            pub const $c_name: hipFileOpError_t = $code;
        )*

        /// Every assigned `hipFileOpError_t` value, success first, in numeric order
        /// (excludes the `hipFileIOMaxError` marker).
        pub const HIPFILE_OP_ERRORS: [hipFileOpError_t; 1 + [$($code),*].len()] =
            [hipFileSuccess, $($c_name,)*];
    };
}

hipfile_core::op_error_table!(op_error_constants);

/// `hipFileError_t`: the status most calls return by value.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct hipFileError_t {
    /// Library status (a `hipFileOpError_t` value).
    pub err: hipFileOpError_t,
    /// HIP runtime status; meaningful when `err` is [`hipFileHipDriverError`].
    pub hip_drv_err: hipError_t,
}

impl hipFileError_t {
    /// The success status.
    pub const SUCCESS: Self = Self {
        err: hipFileSuccess,
        hip_drv_err: hipSuccess,
    };

    /// A library status with no HIP error.
    pub const fn op(err: hipFileOpError_t) -> Self {
        Self {
            err,
            hip_drv_err: hipSuccess,
        }
    }

    /// A HIP runtime failure: `hipFileHipDriverError` carrying `hip_err`.
    pub const fn hip(hip_err: hipError_t) -> Self {
        Self {
            err: hipFileHipDriverError,
            hip_drv_err: hip_err,
        }
    }
}

// ---------------------------------------------------------------------------
// Driver properties
// ---------------------------------------------------------------------------

/// `hipFileDriverStatusFlags_t`: bit positions in `driver_status_flags`.
pub type hipFileDriverStatusFlags_t = c_int;
/// Lustre supported.
pub const hipFileLustreSupported: hipFileDriverStatusFlags_t = 0;
/// WekaFS supported.
pub const hipFileWekaFSSupported: hipFileDriverStatusFlags_t = 1;
/// NFS supported.
pub const hipFileNFSSupported: hipFileDriverStatusFlags_t = 2;
/// GPFS / Storage Scale supported.
pub const hipFileGPFSSupported: hipFileDriverStatusFlags_t = 3;
/// Local NVMe supported.
pub const hipFileNVMeSupported: hipFileDriverStatusFlags_t = 4;
/// NVMe over fabrics supported.
pub const hipFileNVMeoFSupported: hipFileDriverStatusFlags_t = 5;
/// SCSI supported.
pub const hipFileSCSISupported: hipFileDriverStatusFlags_t = 6;
/// ScaleFlux CSD supported.
pub const hipFileScaleFluxCSDSupported: hipFileDriverStatusFlags_t = 7;
/// NVMesh supported.
pub const hipFileNVMeshSupported: hipFileDriverStatusFlags_t = 8;
/// BeeGFS supported.
pub const hipFileBeeGFSSupported: hipFileDriverStatusFlags_t = 9;
/// NVMe P2P supported (10 is reserved).
pub const hipFileNVMeP2PSupported: hipFileDriverStatusFlags_t = 11;
/// ScateFS supported.
pub const hipFileScatefsSupported: hipFileDriverStatusFlags_t = 12;

/// `hipFileDriverControlFlags_t`: bit positions in `driver_control_flags`.
pub type hipFileDriverControlFlags_t = c_int;
/// Poll for completion.
pub const hipFileUsePollMode: hipFileDriverControlFlags_t = 0;
/// The staged (compat) path is allowed.
pub const hipFileAllowCompatMode: hipFileDriverControlFlags_t = 1;

/// `hipFileFeatureFlags_t`: bit positions in `feature_flags`.
pub type hipFileFeatureFlags_t = c_int;
/// Dynamic routing supported.
pub const hipFileDynRoutingSupported: hipFileFeatureFlags_t = 0;
/// Batch API supported.
pub const hipFileBatchIOSupported: hipFileFeatureFlags_t = 1;
/// Stream (async) API supported.
pub const hipFileStreamsSupported: hipFileFeatureFlags_t = 2;
/// Parallel IO supported.
pub const hipFileParallelIOSupported: hipFileFeatureFlags_t = 3;

/// The anonymous `nvfs` struct inside [`hipFileDriverProps_t`]. Sizes in KiB.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hipFileDriverProps_nvfs_t {
    /// Storage driver major version.
    pub major_version: c_uint,
    /// Storage driver minor version.
    pub minor_version: c_uint,
    /// Largest IO (KiB) that polls when poll mode is on.
    pub poll_thresh_size: u64,
    /// Largest single IO chunk (KiB).
    pub max_direct_io_size: u64,
    /// Bits indexed by `hipFileDriverStatusFlags_t`.
    pub driver_status_flags: c_uint,
    /// Bits indexed by `hipFileDriverControlFlags_t`.
    pub driver_control_flags: c_uint,
}

/// `hipFileDriverProps_t`: what `hipFileDriverGetProperties` fills. Sizes in KiB.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hipFileDriverProps_t {
    /// Storage driver settings.
    pub nvfs: hipFileDriverProps_nvfs_t,
    /// Bits indexed by `hipFileFeatureFlags_t`.
    pub feature_flags: c_uint,
    /// GPU memory for bounce buffers (KiB).
    pub max_device_cache_size: u64,
    /// One bounce buffer (KiB).
    pub per_buffer_cache_size: u64,
    /// Pinnable GPU memory (KiB).
    pub max_device_pinned_mem_size: u64,
    /// Most requests in one batch.
    pub max_batch_io_count: c_uint,
    /// Batch timeout (ms).
    pub max_batch_io_timeout_msecs: c_uint,
}

// ---------------------------------------------------------------------------
// Userspace RDMA and file handles
// ---------------------------------------------------------------------------

/// `struct sockaddr`, only ever seen behind a pointer here.
#[repr(C)]
pub struct sockaddr {
    _opaque: [u8; 0],
}

/// `hipFileRDMAInfo_t`: RDMA description passed to `hipFileFSOps_t` callbacks.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hipFileRDMAInfo_t {
    /// RDMA API version.
    pub version: c_int,
    /// Length of `desc_str`.
    pub desc_len: c_int,
    /// Description of the RDMA setup.
    pub desc_str: *const c_char,
}

/// `hipFileFSOps_t`: callbacks of a userspace filesystem (`hipFileHandleTypeUserspaceFS`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hipFileFSOps_t {
    /// Filesystem type name; NULL means discover it.
    pub fs_type: Option<unsafe extern "C" fn(handle: *mut c_void) -> *const c_char>,
    /// Host RDMA addresses; NULL means any.
    pub getRDMADeviceList:
        Option<unsafe extern "C" fn(handle: *mut c_void, hostaddrs: *mut *mut sockaddr) -> c_int>,
    /// Priority of an RDMA device; -1 means no preference.
    pub getRDMADevicePriority: Option<
        unsafe extern "C" fn(
            handle: *mut c_void,
            buf: *mut c_char,
            size: usize,
            offset: hoff_t,
            hostaddr: *mut sockaddr,
        ) -> c_int,
    >,
    /// Read callback; NULL means the kernel VFS.
    pub read: Option<
        unsafe extern "C" fn(
            handle: *mut c_void,
            buf: *mut c_char,
            size: usize,
            offset: hoff_t,
            rdma: *mut hipFileRDMAInfo_t,
        ) -> ssize_t,
    >,
    /// Write callback; NULL means the kernel VFS.
    pub write: Option<
        unsafe extern "C" fn(
            handle: *mut c_void,
            buf: *const c_char,
            size: usize,
            offset: hoff_t,
            rdma: *mut hipFileRDMAInfo_t,
        ) -> ssize_t,
    >,
}

/// `hipFileIoPolicy_t` (hipfile-rs extension): how the requests of a file handle are served.
pub type hipFileIoPolicy_t = c_int;
/// The direct path where it can, the staged engine where it cannot (the default).
pub const hipFileIoPolicyFallback: hipFileIoPolicy_t = 0;
/// The direct path or `hipFileIONotSupported`, with no byte moved.
pub const hipFileIoPolicyDirectOnly: hipFileIoPolicy_t = 1;

/// Bits of the direct (P2P) mechanisms (hipfile-rs extension): AMD's KFD direct IO.
pub const hipFileP2PMechanismAmdKfd: c_uint = 1;
/// NVIDIA GPUDirect Storage through nvidia-fs.
pub const hipFileP2PMechanismNvidiaFs: c_uint = 1 << 1;
/// The simulated GPU's P2P driver.
pub const hipFileP2PMechanismSim: c_uint = 1 << 2;
/// Every mechanism (the default).
pub const hipFileP2PMechanismAll: c_uint = 0b111;

/// `hipFileFileHandleType_t`: which OS handle a `hipFileDescr_t` carries.
pub type hipFileFileHandleType_t = c_int;
/// POSIX fd in `handle.fd`.
pub const hipFileHandleTypeOpaqueFD: hipFileFileHandleType_t = 1;
/// Windows HANDLE in `handle.hFile`.
pub const hipFileHandleTypeOpaqueWin32: hipFileFileHandleType_t = 2;
/// fd plus `fs_ops` callbacks.
pub const hipFileHandleTypeUserspaceFS: hipFileFileHandleType_t = 3;

/// The `handle` union of [`hipFileDescr_t`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union hipFileDescr_handle_t {
    /// POSIX file descriptor (the only half written for `hipFileHandleTypeOpaqueFD`).
    pub fd: c_int,
    /// Windows HANDLE.
    pub hFile: *mut c_void,
}

/// `hipFileDescr_t`: the file description given to `hipFileHandleRegister`.
///
/// Read it field by field (see the module docs): `fs_ops` and half of
/// `handle` are commonly uninitialised.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct hipFileDescr_t {
    /// `type` in C: a `hipFileFileHandleType_t` value.
    pub type_: hipFileFileHandleType_t,
    /// The OS handle.
    pub handle: hipFileDescr_handle_t,
    /// Userspace filesystem callbacks; only meaningful for `hipFileHandleTypeUserspaceFS`.
    pub fs_ops: *const hipFileFSOps_t,
}

/// `hipFileHandle_t`: opaque handle of a registered file.
pub type hipFileHandle_t = *mut c_void;

// ---------------------------------------------------------------------------
// Batch IO
// ---------------------------------------------------------------------------

/// `hipFileOpcode_t`: direction of a batch request.
pub type hipFileOpcode_t = c_int;
/// File to GPU.
pub const hipFileBatchRead: hipFileOpcode_t = 0;
/// GPU to file.
pub const hipFileBatchWrite: hipFileOpcode_t = 1;

/// `hipFileStatus_t`: state of a batch request (single bits).
pub type hipFileStatus_t = c_int;
/// Not yet accepted.
pub const hipFileWaiting: hipFileStatus_t = 1 << 0;
/// Queued.
pub const hipFilePending: hipFileStatus_t = 1 << 1;
/// Rejected.
pub const hipFileInvalid: hipFileStatus_t = 1 << 2;
/// Canceled.
pub const hipFileCanceled: hipFileStatus_t = 1 << 3;
/// Done.
pub const hipFileComplete: hipFileStatus_t = 1 << 4;
/// Timed out.
pub const hipFileTimeout: hipFileStatus_t = 1 << 5;
/// Failed.
pub const hipFileFailed: hipFileStatus_t = 1 << 6;

/// `hipFileBatchMode_t`: kind of batch request.
pub type hipFileBatchMode_t = c_int;
/// Plain read/write request.
pub const hipFileBatch: hipFileBatchMode_t = 1;

/// The `batch` struct inside [`hipFileIOParams_u`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hipFileIOParams_batch_t {
    /// GPU buffer base.
    pub devPtr_base: *mut c_void,
    /// Offset in the file.
    pub file_offset: i64,
    /// Offset in the buffer.
    pub devPtr_offset: i64,
    /// Bytes to move.
    pub size: usize,
}

/// The `u` union of [`hipFileIOParams_t`].
#[repr(C)]
#[derive(Clone, Copy)]
pub union hipFileIOParams_u {
    /// Read/write arguments (mode `hipFileBatch`).
    pub batch: hipFileIOParams_batch_t,
}

/// `hipFileIOParams_t`: one batch request.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct hipFileIOParams_t {
    /// A `hipFileBatchMode_t` value.
    pub mode: hipFileBatchMode_t,
    /// Arguments by mode.
    pub u: hipFileIOParams_u,
    /// Registered file.
    pub fh: hipFileHandle_t,
    /// A `hipFileOpcode_t` value.
    pub opcode: hipFileOpcode_t,
    /// Caller's tag, echoed in [`hipFileIOEvents_t::cookie`].
    pub cookie: *mut c_void,
}

/// `hipFileIOEvents_t`: completion record of one batch request.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct hipFileIOEvents_t {
    /// The request's cookie.
    pub cookie: *mut c_void,
    /// A `hipFileStatus_t` value.
    pub status: hipFileStatus_t,
    /// Bytes moved, or a negative error cast to `size_t`.
    pub ret: usize,
}

/// `hipFileBatchHandle_t`: opaque batch handle.
pub type hipFileBatchHandle_t = *mut c_void;

// ---------------------------------------------------------------------------
// Parameters
// ---------------------------------------------------------------------------

/// `hipFileSizeTConfigParameter_t`: size_t-valued parameters.
pub type hipFileSizeTConfigParameter_t = c_int;
/// Stats level.
pub const hipFileParamProfileStats: hipFileSizeTConfigParameter_t = 0;
/// IO queue depth.
pub const hipFileParamExecutionMaxIOQueueDepth: hipFileSizeTConfigParameter_t = 1;
/// IO threads.
pub const hipFileParamExecutionMaxIOThreads: hipFileSizeTConfigParameter_t = 2;
/// Smallest IO split across threads (KiB).
pub const hipFileParamExecutionMinIOThresholdSizeKB: hipFileSizeTConfigParameter_t = 3;
/// Parallel pieces per request.
pub const hipFileParamExecutionMaxRequestParallelism: hipFileSizeTConfigParameter_t = 4;
/// Largest IO chunk (KiB).
pub const hipFileParamPropertiesMaxDirectIOSizeKB: hipFileSizeTConfigParameter_t = 5;
/// Bounce buffer memory (KiB).
pub const hipFileParamPropertiesMaxDeviceCacheSizeKB: hipFileSizeTConfigParameter_t = 6;
/// One bounce buffer (KiB).
pub const hipFileParamPropertiesPerBufferCacheSizeKB: hipFileSizeTConfigParameter_t = 7;
/// Pinnable memory (KiB).
pub const hipFileParamPropertiesMaxDevicePinnedMemSizeKB: hipFileSizeTConfigParameter_t = 8;
/// Batch size.
pub const hipFileParamPropertiesIOBatchsize: hipFileSizeTConfigParameter_t = 9;
/// Poll threshold (KiB).
pub const hipFileParamPollthresholdSizeKB: hipFileSizeTConfigParameter_t = 10;
/// Batch timeout (ms).
pub const hipFileParamPropertiesBatchIOTimeoutMs: hipFileSizeTConfigParameter_t = 11;

/// `hipFileBoolConfigParameter_t`: bool-valued parameters.
pub type hipFileBoolConfigParameter_t = c_int;
/// Poll mode.
pub const hipFileParamPropertiesUsePollMode: hipFileBoolConfigParameter_t = 0;
/// Allow compat (staged) mode.
pub const hipFileParamPropertiesAllowCompatMode: hipFileBoolConfigParameter_t = 1;
/// Force compat mode.
pub const hipFileParamForceCompatMode: hipFileBoolConfigParameter_t = 2;
/// Extra argument checks.
pub const hipFileParamFsMiscApiCheckAggressive: hipFileBoolConfigParameter_t = 3;
/// Parallel IO.
pub const hipFileParamExecutionParallelIO: hipFileBoolConfigParameter_t = 4;
/// NVTX ranges.
pub const hipFileParamProfileNvtx: hipFileBoolConfigParameter_t = 5;
/// Allow host memory buffers.
pub const hipFileParamPropertiesAllowSystemMemory: hipFileBoolConfigParameter_t = 6;
/// PCI P2P DMA.
pub const hipFileParamUsePcip2pdma: hipFileBoolConfigParameter_t = 7;
/// Prefer io_uring.
pub const hipFileParamPreferIOUring: hipFileBoolConfigParameter_t = 8;
/// Force O_DIRECT.
pub const hipFileParamForceOdirectMode: hipFileBoolConfigParameter_t = 9;
/// Skip topology probing.
pub const hipFileParamSkipTopologyDetection: hipFileBoolConfigParameter_t = 10;
/// Bypass stream memops.
pub const hipFileParamStreamMemopsBypass: hipFileBoolConfigParameter_t = 11;

/// `hipFileStringConfigParameter_t`: string-valued parameters.
pub type hipFileStringConfigParameter_t = c_int;
/// Log level.
pub const hipFileParamLoggingLevel: hipFileStringConfigParameter_t = 0;
/// Log file path.
pub const hipFileParamEnvLogfilePath: hipFileStringConfigParameter_t = 1;
/// Log directory.
pub const hipFileParamLogDir: hipFileStringConfigParameter_t = 2;

// ---------------------------------------------------------------------------
// Statistics
// ---------------------------------------------------------------------------

/// `hipFileOpCounter_t`: success and failure counts of one operation.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hipFileOpCounter_t {
    /// Successes.
    pub ok: u64,
    /// Failures.
    pub err: u64,
}

/// `hipFileStatsLevel1_t`: operation counters, bytes and latency. `capi::statistics` says how
/// each field is counted and why the few that cannot apply stay 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hipFileStatsLevel1_t {
    /// Reads.
    pub read_ops: hipFileOpCounter_t,
    /// Writes.
    pub write_ops: hipFileOpCounter_t,
    /// File registrations.
    pub hdl_register_ops: hipFileOpCounter_t,
    /// File deregistrations.
    pub hdl_deregister_ops: hipFileOpCounter_t,
    /// Buffer registrations.
    pub buf_register_ops: hipFileOpCounter_t,
    /// Buffer deregistrations.
    pub buf_deregister_ops: hipFileOpCounter_t,
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Read bandwidth (bytes/s).
    pub read_bw_bytes_per_sec: u64,
    /// Write bandwidth (bytes/s).
    pub write_bw_bytes_per_sec: u64,
    /// Mean read latency (us).
    pub read_lat_avg_us: u64,
    /// Mean write latency (us).
    pub write_lat_avg_us: u64,
    /// Read rate (ops/s).
    pub read_ops_per_sec: u64,
    /// Write rate (ops/s).
    pub write_ops_per_sec: u64,
    /// Total read latency (us).
    pub read_lat_sum_us: u64,
    /// Total write latency (us).
    pub write_lat_sum_us: u64,
    /// Batch submits.
    pub batch_submit_ops: hipFileOpCounter_t,
    /// Batch completions.
    pub batch_complete_ops: hipFileOpCounter_t,
    /// Batch setups.
    pub batch_setup_ops: hipFileOpCounter_t,
    /// Batch cancels.
    pub batch_cancel_ops: hipFileOpCounter_t,
    /// Batch destroys.
    pub batch_destroy_ops: hipFileOpCounter_t,
    /// Batch requests enqueued.
    pub batch_enqueued_ops: hipFileOpCounter_t,
    /// Batch requests enqueued on the POSIX path.
    pub batch_posix_enqueued_ops: hipFileOpCounter_t,
    /// Batch requests processed.
    pub batch_processed_ops: hipFileOpCounter_t,
    /// Batch requests processed on the POSIX path.
    pub batch_posix_processed_ops: hipFileOpCounter_t,
    /// Batch submits to the storage driver.
    pub batch_nvfs_submit_ops: hipFileOpCounter_t,
    /// Batch submits by P2P.
    pub batch_p2p_submit_ops: hipFileOpCounter_t,
    /// Batch submits by AIO.
    pub batch_aio_submit_ops: hipFileOpCounter_t,
    /// Batch submits by io_uring.
    pub batch_iouring_submit_ops: hipFileOpCounter_t,
    /// Batch submits on mixed paths.
    pub batch_mixed_io_submit_ops: hipFileOpCounter_t,
    /// Batch submits, all paths.
    pub batch_total_submit_ops: hipFileOpCounter_t,
    /// Batch bytes read.
    pub batch_read_bytes: u64,
    /// Batch bytes written.
    pub batch_write_bytes: u64,
    /// Batch read bandwidth.
    pub batch_read_bw_bytes: u64,
    /// Batch write bandwidth.
    pub batch_write_bw_bytes: u64,
    /// Mean batch submit latency (us).
    pub batch_submit_lat_avg_us: u64,
    /// Mean batch completion latency (us).
    pub batch_completion_lat_avg_us: u64,
    /// Batch submit rate.
    pub batch_submit_ops_per_sec: u64,
    /// Batch completion rate.
    pub batch_complete_ops_per_sec: u64,
    /// Total batch submit latency (us).
    pub batch_submit_lat_sum_us: u64,
    /// Total batch completion latency (us).
    pub batch_completion_lat_sum_us: u64,
    /// Bytes read by the last batch.
    pub last_batch_read_bytes: u64,
    /// Bytes written by the last batch.
    pub last_batch_write_bytes: u64,
}

/// `hipFileStatsLevel2_t`: level 1 plus IO size histograms.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hipFileStatsLevel2_t {
    /// Level 1.
    pub basic: hipFileStatsLevel1_t,
    /// Read sizes in KiB buckets.
    pub read_size_kb_hist: [u64; 32],
    /// Write sizes in KiB buckets.
    pub write_size_kb_hist: [u64; 32],
}

/// `hipFilePerGpuStats_t`: per-GPU counters of level 3 statistics.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hipFilePerGpuStats_t {
    /// GPU UUID: zeros, the runtime boundary has no UUID query (the entry's index is the
    /// device ordinal).
    pub uuid: [c_char; HIPFILE_GPU_UUID_LEN],
    /// Bytes read.
    pub read_bytes: u64,
    /// Read bandwidth (bytes/s).
    pub read_bw_bytes_per_sec: u64,
    /// Read utilisation (%).
    pub read_utilization: u64,
    /// Time reading (us).
    pub read_duration_us: u64,
    /// Reads, all paths.
    pub n_total_reads: u64,
    /// Reads by the direct path (P2P DMA: the fastpath).
    pub n_p2p_reads: u64,
    /// Reads through the nvidia-fs kernel module: 0, there is no such path (the direct path is
    /// counted in `n_p2p_reads`).
    pub n_nvfs_reads: u64,
    /// Reads by the staged path (fallback).
    pub n_posix_reads: u64,
    /// Unaligned reads.
    pub n_unaligned_reads: u64,
    /// Dynamic-routing reads: 0, no request is routed through another GPU.
    pub n_dr_reads: u64,
    /// Sparse regions.
    pub n_sparse_regions: u64,
    /// Inline regions.
    pub n_inline_regions: u64,
    /// Failed reads.
    pub n_reads_err: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Write bandwidth (bytes/s).
    pub write_bw_bytes_per_sec: u64,
    /// Write utilisation (%).
    pub write_utilization: u64,
    /// Time writing (us).
    pub write_duration_us: u64,
    /// Writes, all paths.
    pub n_total_writes: u64,
    /// Writes by the direct path (P2P DMA: the fastpath).
    pub n_p2p_writes: u64,
    /// Writes through the nvidia-fs kernel module: 0, there is no such path (the direct path is
    /// counted in `n_p2p_writes`).
    pub n_nvfs_writes: u64,
    /// Writes by the staged path (fallback).
    pub n_posix_writes: u64,
    /// Unaligned writes.
    pub n_unaligned_writes: u64,
    /// Dynamic-routing writes: 0, no request is routed through another GPU.
    pub n_dr_writes: u64,
    /// Failed writes.
    pub n_writes_err: u64,
    /// Buffer registrations.
    pub n_mmap: u64,
    /// Successful buffer registrations.
    pub n_mmap_ok: u64,
    /// Failed buffer registrations.
    pub n_mmap_err: u64,
    /// Buffer deregistrations.
    pub n_mmap_free: u64,
    /// Bytes registered.
    pub reg_bytes: u64,
}

/// `hipFileStatsLevel3_t`: level 2 plus per-GPU counters.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct hipFileStatsLevel3_t {
    /// Level 2.
    pub detailed: hipFileStatsLevel2_t,
    /// Valid entries in `per_gpu_stats`.
    pub num_gpus: u32,
    /// Per-GPU counters.
    pub per_gpu_stats: [hipFilePerGpuStats_t; HIPFILE_MAX_GPUS],
}

#[cfg(test)]
mod tests {
    //! Layout and value checks against the C compiler's view of `hipfile.h`.
    //!
    //! One list of facts drives both sides: each fact is a key, a C
    //! expression, and the Rust value. The test writes a C program that
    //! prints every C expression, compiles it with the system `cc` against
    //! our header, runs it, and compares.

    use super::*;
    use core::mem::{align_of, offset_of, size_of};
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::process::Command;

    struct Fact {
        key: String,
        c_expr: String,
        rust: i128,
    }

    impl Fact {
        fn new(key: String, c_expr: String, rust: i128) -> Self {
            Self { key, c_expr, rust }
        }
    }

    /// The C spelling of a Rust field name (`type_` is `type` in C).
    macro_rules! c_field {
        ($f:ident) => {
            stringify!($f)
        };
        ($f:ident = $c:literal) => {
            $c
        };
    }

    /// Size, alignment and field offsets of a C type, or of a member of one
    /// (`"T" . "member.path"`) whose type has no name in C.
    macro_rules! layout {
        ($out:ident, $c:literal => $rs:ty { $($f:ident $(= $cf:literal)?),* $(,)? }) => {{
            $out.push(Fact::new(format!("{} size", $c), format!("sizeof({})", $c), size_of::<$rs>() as i128));
            $out.push(Fact::new(format!("{} align", $c), format!("_Alignof({})", $c), align_of::<$rs>() as i128));
            $(
                let f = c_field!($f $(= $cf)?);
                $out.push(Fact::new(
                    format!("{}.{}", $c, f),
                    format!("offsetof({}, {})", $c, f),
                    offset_of!($rs, $f) as i128,
                ));
            )*
        }};
        ($out:ident, $c:literal . $m:literal => $rs:ty { $($f:ident),* $(,)? }) => {{
            $out.push(Fact::new(
                format!("{}.{} size", $c, $m),
                format!("sizeof((({}*)0)->{})", $c, $m),
                size_of::<$rs>() as i128,
            ));
            $out.push(Fact::new(
                format!("{}.{} align", $c, $m),
                format!("__alignof__((({}*)0)->{})", $c, $m),
                align_of::<$rs>() as i128,
            ));
            $(
                let f = stringify!($f);
                $out.push(Fact::new(
                    format!("{}.{}.{}", $c, $m, f),
                    format!("offsetof({c}, {m}.{f}) - offsetof({c}, {m})", c = $c, m = $m, f = f),
                    offset_of!($rs, $f) as i128,
                ));
            )*
        }};
    }

    /// Size and alignment of scalar typedefs (including every C enum type).
    macro_rules! scalars {
        ($out:ident, [$($c:ident),* $(,)?]) => {{
            $(
                $out.push(Fact::new(
                    format!("{} size", stringify!($c)),
                    format!("sizeof({})", stringify!($c)),
                    size_of::<$c>() as i128,
                ));
                $out.push(Fact::new(
                    format!("{} align", stringify!($c)),
                    format!("_Alignof({})", stringify!($c)),
                    align_of::<$c>() as i128,
                ));
            )*
        }};
    }

    /// Values of enumerators and macros with the same name on both sides.
    macro_rules! values {
        ($out:ident, [$($c:ident),* $(,)?]) => {{
            $(
                $out.push(Fact::new(
                    format!("value {}", stringify!($c)),
                    format!("{}", stringify!($c)),
                    $c as i128,
                ));
            )*
        }};
    }

    fn facts() -> Vec<Fact> {
        let mut out = Vec::new();
        scalars!(
            out,
            [
                hoff_t,
                ssize_t,
                hipError_t,
                hipStream_t,
                hipFileHandle_t,
                hipFileBatchHandle_t,
                hipFileOpError_t,
                hipFileDriverStatusFlags_t,
                hipFileDriverControlFlags_t,
                hipFileFeatureFlags_t,
                hipFileFileHandleType_t,
                hipFileOpcode_t,
                hipFileStatus_t,
                hipFileBatchMode_t,
                hipFileSizeTConfigParameter_t,
                hipFileBoolConfigParameter_t,
                hipFileStringConfigParameter_t,
            ]
        );
        layout!(out, "hipFileError_t" => hipFileError_t { err, hip_drv_err });
        layout!(out, "hipFileDriverProps_t" => hipFileDriverProps_t {
            nvfs, feature_flags, max_device_cache_size, per_buffer_cache_size,
            max_device_pinned_mem_size, max_batch_io_count, max_batch_io_timeout_msecs,
        });
        layout!(out, "hipFileDriverProps_t" . "nvfs" => hipFileDriverProps_nvfs_t {
            major_version, minor_version, poll_thresh_size, max_direct_io_size,
            driver_status_flags, driver_control_flags,
        });
        layout!(out, "hipFileRDMAInfo_t" => hipFileRDMAInfo_t { version, desc_len, desc_str });
        layout!(out, "hipFileFSOps_t" => hipFileFSOps_t {
            fs_type, getRDMADeviceList, getRDMADevicePriority, read, write,
        });
        layout!(out, "hipFileDescr_t" => hipFileDescr_t { type_ = "type", handle, fs_ops });
        layout!(out, "hipFileDescr_t" . "handle" => hipFileDescr_handle_t { fd, hFile });
        layout!(out, "hipFileIOParams_t" => hipFileIOParams_t { mode, u, fh, opcode, cookie });
        layout!(out, "hipFileIOParams_t" . "u" => hipFileIOParams_u { batch });
        layout!(out, "hipFileIOParams_t" . "u.batch" => hipFileIOParams_batch_t {
            devPtr_base, file_offset, devPtr_offset, size,
        });
        layout!(out, "hipFileIOEvents_t" => hipFileIOEvents_t { cookie, status, ret });
        layout!(out, "hipFileOpCounter_t" => hipFileOpCounter_t { ok, err });
        layout!(out, "hipFileStatsLevel1_t" => hipFileStatsLevel1_t {
            read_ops, write_ops, hdl_register_ops, hdl_deregister_ops, buf_register_ops,
            buf_deregister_ops, read_bytes, write_bytes, read_bw_bytes_per_sec,
            write_bw_bytes_per_sec, read_lat_avg_us, write_lat_avg_us, read_ops_per_sec,
            write_ops_per_sec, read_lat_sum_us, write_lat_sum_us, batch_submit_ops,
            batch_complete_ops, batch_setup_ops, batch_cancel_ops, batch_destroy_ops,
            batch_enqueued_ops, batch_posix_enqueued_ops, batch_processed_ops,
            batch_posix_processed_ops, batch_nvfs_submit_ops, batch_p2p_submit_ops,
            batch_aio_submit_ops, batch_iouring_submit_ops, batch_mixed_io_submit_ops,
            batch_total_submit_ops, batch_read_bytes, batch_write_bytes, batch_read_bw_bytes,
            batch_write_bw_bytes, batch_submit_lat_avg_us, batch_completion_lat_avg_us,
            batch_submit_ops_per_sec, batch_complete_ops_per_sec, batch_submit_lat_sum_us,
            batch_completion_lat_sum_us, last_batch_read_bytes, last_batch_write_bytes,
        });
        layout!(out, "hipFileStatsLevel2_t" => hipFileStatsLevel2_t {
            basic, read_size_kb_hist, write_size_kb_hist,
        });
        layout!(out, "hipFilePerGpuStats_t" => hipFilePerGpuStats_t {
            uuid, read_bytes, read_bw_bytes_per_sec, read_utilization, read_duration_us,
            n_total_reads, n_p2p_reads, n_nvfs_reads, n_posix_reads, n_unaligned_reads,
            n_dr_reads, n_sparse_regions, n_inline_regions, n_reads_err, write_bytes,
            write_bw_bytes_per_sec, write_utilization, write_duration_us, n_total_writes,
            n_p2p_writes, n_nvfs_writes, n_posix_writes, n_unaligned_writes, n_dr_writes,
            n_writes_err, n_mmap, n_mmap_ok, n_mmap_err, n_mmap_free, reg_bytes,
        });
        layout!(out, "hipFileStatsLevel3_t" => hipFileStatsLevel3_t {
            detailed, num_gpus, per_gpu_stats,
        });
        values!(
            out,
            [
                HIPFILE_VERSION_MAJOR,
                HIPFILE_VERSION_MINOR,
                HIPFILE_VERSION_PATCH,
                HIPFILE_RDMA_REGISTER,
                HIPFILE_RDMA_RELAXED_ORDERING,
                HIPFILE_STREAM_FIXED_BUF_OFFSET,
                HIPFILE_STREAM_FIXED_FILE_OFFSET,
                HIPFILE_STREAM_FIXED_FILE_SIZE,
                HIPFILE_STREAM_PAGE_ALIGNED_INPUTS,
                HIPFILE_STREAM_FLAGS_MASK,
                HIPFILE_MAX_GPUS,
                HIPFILE_GPU_UUID_LEN,
                HIPFILE_BASE_ERR,
                hipFileSuccess,
                hipFileIOMaxError,
                hipFileLustreSupported,
                hipFileWekaFSSupported,
                hipFileNFSSupported,
                hipFileGPFSSupported,
                hipFileNVMeSupported,
                hipFileNVMeoFSupported,
                hipFileSCSISupported,
                hipFileScaleFluxCSDSupported,
                hipFileNVMeshSupported,
                hipFileBeeGFSSupported,
                hipFileNVMeP2PSupported,
                hipFileScatefsSupported,
                hipFileUsePollMode,
                hipFileAllowCompatMode,
                hipFileDynRoutingSupported,
                hipFileBatchIOSupported,
                hipFileStreamsSupported,
                hipFileParallelIOSupported,
                hipFileHandleTypeOpaqueFD,
                hipFileHandleTypeOpaqueWin32,
                hipFileHandleTypeUserspaceFS,
                hipFileBatchRead,
                hipFileBatchWrite,
                hipFileWaiting,
                hipFilePending,
                hipFileInvalid,
                hipFileCanceled,
                hipFileComplete,
                hipFileTimeout,
                hipFileFailed,
                hipFileBatch,
                hipFileParamProfileStats,
                hipFileParamExecutionMaxIOQueueDepth,
                hipFileParamExecutionMaxIOThreads,
                hipFileParamExecutionMinIOThresholdSizeKB,
                hipFileParamExecutionMaxRequestParallelism,
                hipFileParamPropertiesMaxDirectIOSizeKB,
                hipFileParamPropertiesMaxDeviceCacheSizeKB,
                hipFileParamPropertiesPerBufferCacheSizeKB,
                hipFileParamPropertiesMaxDevicePinnedMemSizeKB,
                hipFileParamPropertiesIOBatchsize,
                hipFileParamPollthresholdSizeKB,
                hipFileParamPropertiesBatchIOTimeoutMs,
                hipFileParamPropertiesUsePollMode,
                hipFileParamPropertiesAllowCompatMode,
                hipFileParamForceCompatMode,
                hipFileParamFsMiscApiCheckAggressive,
                hipFileParamExecutionParallelIO,
                hipFileParamProfileNvtx,
                hipFileParamPropertiesAllowSystemMemory,
                hipFileParamUsePcip2pdma,
                hipFileParamPreferIOUring,
                hipFileParamForceOdirectMode,
                hipFileParamSkipTopologyDetection,
                hipFileParamStreamMemopsBypass,
                hipFileParamLoggingLevel,
                hipFileParamEnvLogfilePath,
                hipFileParamLogDir,
            ]
        );
        op_error_facts(&mut out);
        out
    }

    /// The value of every error code in hipfile-core's table, checked by the C compiler against
    /// the header's enumerator of the same name.
    fn op_error_facts(out: &mut Vec<Fact>) {
        for kind in hipfile_core::ErrorKind::ALL {
            let (Some(name), Some(code)) = (kind.c_name(), kind.code()) else {
                continue;
            };
            out.push(Fact::new(
                format!("value {name}"),
                name.to_owned(),
                i128::from(code),
            ));
        }
    }

    /// The enumerators of `typedef enum hipFileOpError { ... } hipFileOpError_t;` in the header,
    /// in header order.
    fn header_op_error_names() -> Vec<String> {
        let header = std::fs::read_to_string(our_include_dir().join("hipfile.h"))
            .expect("read include/hipfile.h");
        let body = header
            .split_once("typedef enum hipFileOpError {")
            .and_then(|(_, rest)| rest.split_once("} hipFileOpError_t;"))
            .map(|(body, _)| body)
            .expect("hipfile.h declares `typedef enum hipFileOpError { ... } hipFileOpError_t;`");
        body.lines()
            .map(|line| line.split("/*").next().unwrap_or("").trim())
            .filter(|code| !code.is_empty())
            .map(|code| {
                let name = code.split(['=', ',']).next().unwrap_or("").trim();
                assert!(
                    !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_'),
                    "unexpected line in hipFileOpError: {code}"
                );
                name.to_owned()
            })
            .collect()
    }

    /// The header's enumerators are exactly success, the table's rows in order, and the marker:
    /// a code added on either side alone fails here, and the layout tests compare the values.
    #[test]
    fn header_op_errors_are_the_table() {
        let mut from_table = vec!["hipFileSuccess".to_owned()];
        from_table.extend(
            hipfile_core::ErrorKind::ALL
                .iter()
                .filter_map(|kind| kind.c_name())
                .map(str::to_owned),
        );
        from_table.push("hipFileIOMaxError".to_owned());
        assert_eq!(header_op_error_names(), from_table);
    }

    /// A directory under the system temp dir, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Self {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0);
            let dir = std::env::temp_dir().join(format!(
                "hipfile-types-{tag}-{}-{nanos}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).expect("create scratch dir");
            Self(dir)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn our_include_dir() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("include")
    }

    fn has_hip_headers(dir: &Path) -> bool {
        dir.join("hip/hip_runtime_api.h").is_file()
    }

    /// HIP headers: `$HIPFILE_HIP_INCLUDE`, else `/usr/include` or
    /// `/opt/rocm/include`, else Debian's `libamdhip64-dev` unpacked into
    /// `scratch`. None when all of those fail.
    fn hip_include_dir(scratch: &Path) -> Option<PathBuf> {
        if let Some(dir) = std::env::var_os("HIPFILE_HIP_INCLUDE") {
            return Some(PathBuf::from(dir));
        }
        for dir in ["/usr/include", "/opt/rocm/include"] {
            if has_hip_headers(Path::new(dir)) {
                return Some(PathBuf::from(dir));
            }
        }
        fetch_hip_headers(scratch)
    }

    fn fetch_hip_headers(scratch: &Path) -> Option<PathBuf> {
        let download = scratch.join("deb");
        std::fs::create_dir_all(&download).ok()?;
        let fetched = Command::new("apt-get")
            .args(["download", "libamdhip64-dev"])
            .current_dir(&download)
            .output()
            .ok()?;
        if !fetched.status.success() {
            return None;
        }
        let deb = std::fs::read_dir(&download)
            .ok()?
            .filter_map(Result::ok)
            .map(|entry| entry.path())
            .find(|path| path.extension().is_some_and(|ext| ext == "deb"))?;
        let root = scratch.join("hiphdr");
        let unpacked = Command::new("dpkg")
            .arg("-x")
            .arg(&deb)
            .arg(&root)
            .output()
            .ok()?;
        let include = root.join("usr/include");
        (unpacked.status.success() && has_hip_headers(&include)).then_some(include)
    }

    fn probe_source(facts: &[Fact]) -> String {
        let mut src = String::from(
            "#include <stddef.h>\n#include <stdio.h>\n#include <hipfile.h>\n\nint main(void)\n{\n",
        );
        for fact in facts {
            src.push_str(&format!(
                "    printf(\"%s\\t%lld\\n\", \"{}\", (long long)({}));\n",
                fact.key, fact.c_expr
            ));
        }
        src.push_str("    return 0;\n}\n");
        src
    }

    /// Compile and run the probe; returns what C says for every key.
    fn c_answers(
        scratch: &Path,
        facts: &[Fact],
        hip_include: Option<&Path>,
    ) -> BTreeMap<String, i128> {
        let src = scratch.join("probe.c");
        let exe = scratch.join("probe");
        std::fs::write(&src, probe_source(facts)).expect("write probe.c");
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_owned());
        let mut cmd = Command::new(&cc);
        cmd.args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-o"])
            .arg(&exe)
            .arg(&src);
        cmd.arg("-I").arg(our_include_dir());
        match hip_include {
            Some(dir) => {
                cmd.arg("-D__HIP_PLATFORM_AMD__").arg("-I").arg(dir);
            }
            None => {
                cmd.arg("-DHIPFILE_NO_HIP_HEADERS");
            }
        }
        let built = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run `{cc}`: {e}"));
        assert!(
            built.status.success(),
            "probe failed to compile ({cmd:?}):\n{}",
            String::from_utf8_lossy(&built.stderr)
        );
        let ran = Command::new(&exe).output().expect("run probe");
        assert!(ran.status.success(), "probe exited with {}", ran.status);
        String::from_utf8_lossy(&ran.stdout)
            .lines()
            .filter_map(|line| {
                let (key, value) = line.split_once('\t')?;
                Some((key.to_owned(), value.trim().parse().ok()?))
            })
            .collect()
    }

    fn assert_rust_matches_c(hip_include: Option<&Path>, scratch: &Path) {
        let facts = facts();
        let c = c_answers(scratch, &facts, hip_include);
        let mismatches: Vec<String> = facts
            .iter()
            .filter(|fact| c.get(&fact.key) != Some(&fact.rust))
            .map(|fact| format!("{}: C {:?}, Rust {}", fact.key, c.get(&fact.key), fact.rust))
            .collect();
        assert!(
            mismatches.is_empty(),
            "layout mismatches:\n{}",
            mismatches.join("\n")
        );
    }

    #[test]
    fn layout_matches_c_with_hip_headers() {
        let scratch = Scratch::new("hip");
        match hip_include_dir(&scratch.0) {
            Some(dir) => assert_rust_matches_c(Some(&dir), &scratch.0),
            None => hipfile_testkit::ledger::skip(
                "no HIP headers (set HIPFILE_HIP_INCLUDE; apt-get download libamdhip64-dev \
                 failed); the HIPFILE_NO_HIP_HEADERS test still ran",
            ),
        }
    }

    #[test]
    fn layout_matches_c_without_hip_headers() {
        let scratch = Scratch::new("nohip");
        assert_rust_matches_c(None, &scratch.0);
    }

    #[test]
    fn op_error_list_is_complete_and_ordered() {
        assert_eq!(HIPFILE_OP_ERRORS[0], hipFileSuccess);
        assert!(HIPFILE_OP_ERRORS.windows(2).all(|w| w[0] < w[1]));
        let unassigned = [HIPFILE_BASE_ERR + 21, HIPFILE_BASE_ERR + 32];
        let expected: Vec<_> = core::iter::once(hipFileSuccess)
            .chain((HIPFILE_BASE_ERR + 1..hipFileIOMaxError).filter(|c| !unassigned.contains(c)))
            .collect();
        assert_eq!(HIPFILE_OP_ERRORS.to_vec(), expected);
    }

    #[test]
    fn error_constructors() {
        assert_eq!(
            hipFileError_t::SUCCESS,
            hipFileError_t {
                err: 0,
                hip_drv_err: 0
            }
        );
        assert_eq!(
            hipFileError_t::op(hipFileInvalidValue).err,
            hipFileInvalidValue
        );
        let hip = hipFileError_t::hip(2);
        assert_eq!((hip.err, hip.hip_drv_err), (hipFileHipDriverError, 2));
    }
}
