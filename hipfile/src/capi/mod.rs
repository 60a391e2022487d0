//! The C ABI of `libhipfile.so`: upstream hipFile's functions, names and return conventions.
//!
//! Each function converts its C arguments, calls the process-wide core driver and converts the
//! answer back; nothing else happens here. Conventions, one place each:
//! - `hipFileError_t` pairs: [`pair`];
//! - `ssize_t` IO results: bytes, `-1` with `errno` for OS failures (and for IO on a closed
//!   driver, as cuFile), `-hipError_t` for GPU runtime failures, else `-hipFileOpError_t`: [`ssize`];
//! - the kind-to-code table: [`op_code`], exhaustive.
//!
//! Every entry point runs inside [`catch_unwind`]: a panic never crosses into C; it becomes
//! `hipFileInternalError` (or `-hipFileInternalError`, or nothing for `void` functions).
//!
//! Batch, async and stream IO are not part of this build: their functions exist so every
//! upstream program links, and answer exactly what upstream documents for "not supported"
//! (`hipFileIONotSupported` for batch IO, `hipFileAsyncNotSupported` for async and stream IO;
//! upstream's Python bindings probe `hipFileStreamRegister` for the latter).

#![allow(non_snake_case, non_upper_case_globals)] // the exported names and constants are upstream's
#![allow(clippy::missing_safety_doc)] // the C header documents the contract of every function

mod types;

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr;

use hipfile_core::{DirectIoPolicy, Error, ErrorKind, FileHandleId, IoCall, IoOp, Settings};

pub use types::*;

fn driver() -> &'static hipfile_core::Driver {
    crate::global()
}

/// Run `f`, turning a panic into `on_panic`.
fn guarded<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// The `hipFileOpError_t` value of an error kind, from hipfile-core's table of error codes.
pub fn op_code(kind: ErrorKind) -> hipFileOpError_t {
    // The pair convention has no errno: an OS failure outside IO is an internal error.
    kind.code().unwrap_or(hipFileInternalError)
}

/// An error as a `hipFileError_t` pair.
pub fn pair(e: &Error) -> hipFileError_t {
    match (e.kind(), e.hip_code()) {
        (ErrorKind::HipDriverError, Some(code)) => hipFileError_t::hip(code.0),
        (kind, _) => hipFileError_t::op(op_code(kind)),
    }
}

fn result_pair(r: hipfile_core::Result<()>) -> hipFileError_t {
    match r {
        Ok(()) => hipFileError_t::SUCCESS,
        Err(e) => pair(&e),
    }
}

fn set_errno(value: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, valid for the thread's
    // life.
    unsafe { *libc::__errno_location() = value };
}

/// An IO result in the `ssize_t` convention.
pub fn ssize(r: hipfile_core::Result<usize>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => match (e.kind(), e.errno(), e.hip_code()) {
            (ErrorKind::Os, Some(errno), _) => {
                set_errno(errno);
                -1
            }
            (ErrorKind::HipDriverError, _, Some(code)) if code.0 != 0 => -(code.0 as ssize_t),
            (kind, _, _) => -(op_code(kind) as ssize_t),
        },
    }
}

fn handle_id(fh: hipFileHandle_t) -> FileHandleId {
    FileHandleId(fh as usize as u64)
}

/// Text for every `hipFileOpError_t`.
#[no_mangle]
pub extern "C" fn hipFileGetOpErrorString(status: hipFileOpError_t) -> *const c_char {
    guarded(c"hipFile: internal error".as_ptr(), || {
        error_text(status).as_ptr()
    })
}

/// `error_text`: the text of every `hipFileOpError_t`, from hipfile-core's table of error codes.
macro_rules! op_error_text {
    ($($kind:ident = $code:literal => $c_name:ident, $text:literal;)*) => {
        fn error_text(status: hipFileOpError_t) -> &'static CStr {
            match status {
                hipFileSuccess => c"hipFile operation completed successfully",
                $($code => const { c_text(concat!($text, "\0")) },)*
                _ => c"unknown hipFile error",
            }
        }
    };
}

hipfile_core::op_error_table!(op_error_text);

/// `text`, which ends in its only NUL, as a C string (evaluated at compile time).
const fn c_text(text: &'static str) -> &'static CStr {
    match CStr::from_bytes_with_nul(text.as_bytes()) {
        Ok(c) => c,
        Err(_) => panic!("an error description must end in its only NUL"),
    }
}

/// Register a file descriptor.
#[no_mangle]
pub unsafe extern "C" fn hipFileHandleRegister(
    fh: *mut hipFileHandle_t,
    descr: *mut hipFileDescr_t,
) -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        if fh.is_null() || descr.is_null() {
            return hipFileError_t::op(hipFileInvalidValue);
        }
        // SAFETY: `descr` is non-null and points to a caller's hipFileDescr_t. Only `type` and,
        // for descriptors, `handle.fd` are read, field by field: real programs leave `fs_ops`
        // and the rest of the union uninitialised.
        let kind = unsafe { ptr::addr_of!((*descr).type_).read() };
        if kind != hipFileHandleTypeOpaqueFD {
            return hipFileError_t::op(hipFileIONotSupported);
        }
        // SAFETY: as above; for an OpaqueFD handle the caller wrote `handle.fd`.
        let fd = unsafe { ptr::addr_of!((*descr).handle.fd).read() };
        match driver().handle_register(fd) {
            Ok(id) => {
                // SAFETY: `fh` is non-null and points to the caller's handle slot.
                unsafe { fh.write(id.0 as usize as hipFileHandle_t) };
                hipFileError_t::SUCCESS
            }
            Err(e) => pair(&e),
        }
    })
}

/// Forget a registered file.
#[no_mangle]
pub extern "C" fn hipFileHandleDeregister(fh: hipFileHandle_t) {
    guarded((), || {
        if !fh.is_null() {
            // `void` in C: an unknown handle or a busy file has no way to report back.
            let _ = driver().handle_deregister(handle_id(fh));
        }
    })
}

/// Register device memory.
#[no_mangle]
pub extern "C" fn hipFileBufRegister(
    buffer_base: *const c_void,
    length: usize,
    flags: c_int,
) -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        result_pair(driver().buf_register(buffer_base as usize, length, flags))
    })
}

/// Forget registered device memory.
#[no_mangle]
pub extern "C" fn hipFileBufDeregister(buffer_base: *const c_void) -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        result_pair(driver().buf_deregister(buffer_base as usize))
    })
}

fn io(
    op: IoOp,
    fh: hipFileHandle_t,
    buffer: usize,
    size: usize,
    file_offset: hoff_t,
    buffer_offset: hoff_t,
) -> ssize_t {
    guarded(-(hipFileInternalError as ssize_t), || {
        ssize(driver().io(IoCall {
            op,
            handle: handle_id(fh),
            buffer,
            size,
            file_offset,
            buffer_offset,
        }))
    })
}

/// Read from a registered file into GPU memory.
#[no_mangle]
pub extern "C" fn hipFileRead(
    fh: hipFileHandle_t,
    buffer_base: *mut c_void,
    size: usize,
    file_offset: hoff_t,
    buffer_offset: hoff_t,
) -> ssize_t {
    io(
        IoOp::Read,
        fh,
        buffer_base as usize,
        size,
        file_offset,
        buffer_offset,
    )
}

/// Write GPU memory to a registered file.
#[no_mangle]
pub extern "C" fn hipFileWrite(
    fh: hipFileHandle_t,
    buffer_base: *const c_void,
    size: usize,
    file_offset: hoff_t,
    buffer_offset: hoff_t,
) -> ssize_t {
    io(
        IoOp::Write,
        fh,
        buffer_base as usize,
        size,
        file_offset,
        buffer_offset,
    )
}

/// Open the driver or add a reference.
#[no_mangle]
pub extern "C" fn hipFileDriverOpen() -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        result_pair(driver().open())
    })
}

/// Drop a reference to the driver.
#[no_mangle]
pub extern "C" fn hipFileDriverClose() -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        result_pair(driver().close())
    })
}

/// References held on the driver.
#[no_mangle]
pub extern "C" fn hipFileUseCount() -> i64 {
    guarded(-1, || driver().use_count() as i64)
}

/// The library version. Any of the three pointers may be NULL: that part is not written (as
/// upstream).
#[no_mangle]
pub unsafe extern "C" fn hipFileGetVersion(
    major: *mut c_uint,
    minor: *mut c_uint,
    patch: *mut c_uint,
) -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        for (out, value) in [
            (major, HIPFILE_VERSION_MAJOR),
            (minor, HIPFILE_VERSION_MINOR),
            (patch, HIPFILE_VERSION_PATCH),
        ] {
            if !out.is_null() {
                // SAFETY: a non-null pointer to the caller's integer.
                unsafe { out.write(value) };
            }
        }
        hipFileError_t::SUCCESS
    })
}

fn bit(flag: c_int) -> c_uint {
    1u32 << flag
}

/// Whether the open driver serves requests by direct IO: the fastpath is compiled in and
/// registered, and the platform offers a P2P driver. A closed driver has no platform yet: false.
fn direct_io_available() -> bool {
    cfg!(feature = "fastpath")
        && driver().session().is_some_and(|s| {
            s.runtime().p2p().is_some() && s.registry().names().contains(&"fastpath")
        })
}

/// The driver's properties: the settings in force (the open driver's, else the staged ones).
/// `direct_io` says whether the fastpath can serve local storage (NVMe and other block devices
/// under ext4, xfs or raw), which is what `driver_status_flags` reports.
pub fn driver_props(s: &Settings, compat_allowed: bool, direct_io: bool) -> hipFileDriverProps_t {
    let mut control = 0;
    if s.poll_mode {
        control |= bit(hipFileUsePollMode);
    }
    if compat_allowed {
        control |= bit(hipFileAllowCompatMode);
    }
    hipFileDriverProps_t {
        nvfs: hipFileDriverProps_nvfs_t {
            major_version: HIPFILE_VERSION_MAJOR,
            minor_version: HIPFILE_VERSION_MINOR,
            poll_thresh_size: s.poll_thresh_size_kb,
            max_direct_io_size: s.max_direct_io_size_kb,
            driver_status_flags: if direct_io {
                bit(hipFileNVMeSupported)
            } else {
                0
            },
            driver_control_flags: control,
        },
        // Batch, stream and parallel IO are not in this build.
        feature_flags: 0,
        max_device_cache_size: s.max_device_cache_size_kb,
        per_buffer_cache_size: s.per_buffer_cache_size_kb,
        max_device_pinned_mem_size: s.max_pinned_mem_size_kb,
        max_batch_io_count: c_uint::try_from(s.max_batch_io_size).unwrap_or(c_uint::MAX),
        max_batch_io_timeout_msecs: c_uint::try_from(s.batch_io_timeout_ms).unwrap_or(c_uint::MAX),
    }
}

/// Fill `props` with the driver's properties.
#[no_mangle]
pub unsafe extern "C" fn hipFileDriverGetProperties(
    props: *mut hipFileDriverProps_t,
) -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        if props.is_null() {
            return hipFileError_t::op(hipFileInvalidValue);
        }
        let settings = driver().settings();
        let compat = settings.compat_mode(&hipfile_core::EnvConfig::cached());
        let direct_io = direct_io_available();
        // SAFETY: `props` is non-null and points to the caller's struct.
        unsafe { props.write(driver_props(&settings, compat.allowed, direct_io)) };
        hipFileError_t::SUCCESS
    })
}

fn live(change: impl FnOnce(&mut Settings)) -> hipFileError_t {
    result_pair(driver().update_live_settings(change))
}

fn kib(value: usize) -> u64 {
    value as u64
}

/// Poll mode and threshold (KiB) of the open driver.
#[no_mangle]
pub extern "C" fn hipFileDriverSetPollMode(
    poll: bool,
    poll_threshold_size: usize,
) -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        live(|s| {
            s.poll_mode = poll;
            s.poll_thresh_size_kb = kib(poll_threshold_size);
        })
    })
}

/// Largest single transfer (KiB) of the open driver.
#[no_mangle]
pub extern "C" fn hipFileDriverSetMaxDirectIOSize(max_direct_io_size: usize) -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        if max_direct_io_size == 0 {
            return hipFileError_t::op(hipFileInvalidValue);
        }
        live(|s| s.max_direct_io_size_kb = kib(max_direct_io_size))
    })
}

/// GPU bounce-buffer budget (KiB) of the open driver.
#[no_mangle]
pub extern "C" fn hipFileDriverSetMaxCacheSize(max_cache_size: usize) -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        live(|s| s.max_device_cache_size_kb = kib(max_cache_size))
    })
}

/// Pinned memory bound (KiB) of the open driver.
#[no_mangle]
pub extern "C" fn hipFileDriverSetMaxPinnedMemSize(max_pinned_size: usize) -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        if max_pinned_size == 0 {
            return hipFileError_t::op(hipFileInvalidValue);
        }
        live(|s| s.max_pinned_mem_size_kb = kib(max_pinned_size))
    })
}

/// The field of `Settings` behind a size_t parameter.
fn size_param(s: &mut Settings, param: hipFileSizeTConfigParameter_t) -> Option<&mut u64> {
    Some(match param {
        hipFileParamProfileStats => &mut s.stats_level,
        hipFileParamExecutionMaxIOQueueDepth => &mut s.io_queue_depth,
        hipFileParamExecutionMaxIOThreads => &mut s.max_io_threads,
        hipFileParamExecutionMinIOThresholdSizeKB => &mut s.min_io_threshold_kb,
        hipFileParamExecutionMaxRequestParallelism => &mut s.max_request_parallelism,
        hipFileParamPropertiesMaxDirectIOSizeKB => &mut s.max_direct_io_size_kb,
        hipFileParamPropertiesMaxDeviceCacheSizeKB => &mut s.max_device_cache_size_kb,
        hipFileParamPropertiesPerBufferCacheSizeKB => &mut s.per_buffer_cache_size_kb,
        hipFileParamPropertiesMaxDevicePinnedMemSizeKB => &mut s.max_pinned_mem_size_kb,
        hipFileParamPropertiesIOBatchsize => &mut s.max_batch_io_size,
        hipFileParamPollthresholdSizeKB => &mut s.poll_thresh_size_kb,
        hipFileParamPropertiesBatchIOTimeoutMs => &mut s.batch_io_timeout_ms,
        _ => return None,
    })
}

/// A bool parameter: read it from `s`, or write `value` into `s`.
fn bool_param(
    s: &mut Settings,
    param: hipFileBoolConfigParameter_t,
    value: Option<bool>,
) -> Option<bool> {
    let env = hipfile_core::EnvConfig::cached();
    match param {
        hipFileParamPropertiesAllowCompatMode => {
            if let Some(v) = value {
                s.allow_compat_mode = Some(v);
            }
            return Some(s.compat_mode(&env).allowed);
        }
        hipFileParamForceCompatMode => {
            if let Some(v) = value {
                s.force_compat_mode = Some(v);
            }
            return Some(s.compat_mode(&env).forced);
        }
        _ => {}
    }
    if param == hipFileParamForceOdirectMode {
        if let Some(v) = value {
            s.direct_io = if v {
                DirectIoPolicy::Always
            } else {
                DirectIoPolicy::Auto
            };
        }
        return Some(s.direct_io == DirectIoPolicy::Always);
    }
    let field = match param {
        hipFileParamPropertiesUsePollMode => &mut s.poll_mode,
        hipFileParamFsMiscApiCheckAggressive => &mut s.api_check_aggressive,
        hipFileParamExecutionParallelIO => &mut s.parallel_io,
        hipFileParamProfileNvtx => &mut s.nvtx,
        hipFileParamPropertiesAllowSystemMemory => &mut s.allow_system_memory,
        hipFileParamUsePcip2pdma => &mut s.use_pci_p2pdma,
        hipFileParamPreferIOUring => &mut s.prefer_io_uring,
        hipFileParamSkipTopologyDetection => &mut s.skip_topology_detection,
        hipFileParamStreamMemopsBypass => &mut s.stream_memops_bypass,
        _ => return None,
    };
    if let Some(v) = value {
        *field = v;
    }
    Some(*field)
}

fn string_param(s: &mut Settings, param: hipFileStringConfigParameter_t) -> Option<&mut String> {
    Some(match param {
        hipFileParamLoggingLevel => &mut s.logging_level,
        hipFileParamEnvLogfilePath => &mut s.log_file_path,
        hipFileParamLogDir => &mut s.log_dir,
        _ => return None,
    })
}

/// Stage a change; `Err(code)` when the parameter is unknown.
fn stage(change: impl FnOnce(&mut Settings) -> bool) -> hipFileError_t {
    let mut known = true;
    let r = driver().stage_settings(|s| known = change(s));
    match r {
        Err(e) => pair(&e),
        Ok(()) if !known => hipFileError_t::op(hipFileInvalidValue),
        Ok(()) => hipFileError_t::SUCCESS,
    }
}

/// Read a size_t parameter (the value in force).
#[no_mangle]
pub unsafe extern "C" fn hipFileGetParameterSizeT(
    param: hipFileSizeTConfigParameter_t,
    value: *mut usize,
) -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        let mut s = driver().settings();
        match (value.is_null(), size_param(&mut s, param)) {
            (false, Some(v)) => {
                // SAFETY: `value` is non-null and points to the caller's size_t.
                unsafe { value.write(usize::try_from(*v).unwrap_or(usize::MAX)) };
                hipFileError_t::SUCCESS
            }
            _ => hipFileError_t::op(hipFileInvalidValue),
        }
    })
}

/// Read a bool parameter (the value in force).
#[no_mangle]
pub unsafe extern "C" fn hipFileGetParameterBool(
    param: hipFileBoolConfigParameter_t,
    value: *mut bool,
) -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        let mut s = driver().settings();
        match (value.is_null(), bool_param(&mut s, param, None)) {
            (false, Some(v)) => {
                // SAFETY: `value` is non-null and points to the caller's bool.
                unsafe { value.write(v) };
                hipFileError_t::SUCCESS
            }
            _ => hipFileError_t::op(hipFileInvalidValue),
        }
    })
}

/// Read a string parameter into `desc_str` (`len` bytes, NUL included).
#[no_mangle]
pub unsafe extern "C" fn hipFileGetParameterString(
    param: hipFileStringConfigParameter_t,
    desc_str: *mut c_char,
    len: c_int,
) -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        let mut s = driver().settings();
        let Some(text) = string_param(&mut s, param) else {
            return hipFileError_t::op(hipFileInvalidValue);
        };
        let room = usize::try_from(len).unwrap_or(0);
        if desc_str.is_null() || room < text.len() + 1 {
            return hipFileError_t::op(hipFileInvalidValue);
        }
        // SAFETY: `desc_str` is non-null with room for `len` >= text + NUL bytes.
        unsafe {
            ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), desc_str, text.len());
            desc_str.add(text.len()).write(0);
        }
        hipFileError_t::SUCCESS
    })
}

/// Stage a size_t parameter (driver closed only).
#[no_mangle]
pub extern "C" fn hipFileSetParameterSizeT(
    param: hipFileSizeTConfigParameter_t,
    value: usize,
) -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        stage(|s| match size_param(s, param) {
            Some(field) => {
                *field = value as u64;
                true
            }
            None => false,
        })
    })
}

/// Stage a bool parameter (driver closed only).
#[no_mangle]
pub extern "C" fn hipFileSetParameterBool(
    param: hipFileBoolConfigParameter_t,
    value: bool,
) -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        stage(|s| bool_param(s, param, Some(value)).is_some())
    })
}

/// Stage a string parameter (driver closed only).
#[no_mangle]
pub unsafe extern "C" fn hipFileSetParameterString(
    param: hipFileStringConfigParameter_t,
    desc_str: *const c_char,
) -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        if desc_str.is_null() {
            return hipFileError_t::op(hipFileInvalidValue);
        }
        // SAFETY: `desc_str` is a non-null, NUL-terminated string of the caller.
        let text = unsafe { CStr::from_ptr(desc_str) }
            .to_string_lossy()
            .into_owned();
        stage(|s| match string_param(s, param) {
            Some(field) => {
                *field = text;
                true
            }
            None => false,
        })
    })
}

const IO_NOT_SUPPORTED: hipFileError_t = hipFileError_t::op(hipFileIONotSupported);
const ASYNC_NOT_SUPPORTED: hipFileError_t = hipFileError_t::op(hipFileAsyncNotSupported);

/// Batch IO is not part of this build.
#[no_mangle]
pub extern "C" fn hipFileBatchIOSetUp(
    _batch_idp: *mut hipFileBatchHandle_t,
    _max_nr: c_uint,
) -> hipFileError_t {
    guarded(IO_NOT_SUPPORTED, || IO_NOT_SUPPORTED)
}

/// Batch IO is not part of this build.
#[no_mangle]
pub extern "C" fn hipFileBatchIOSubmit(
    _batch_idp: hipFileBatchHandle_t,
    _nr: c_uint,
    _iocbp: *mut hipFileIOParams_t,
    _flags: c_uint,
) -> hipFileError_t {
    guarded(IO_NOT_SUPPORTED, || IO_NOT_SUPPORTED)
}

/// Batch IO is not part of this build.
#[no_mangle]
pub extern "C" fn hipFileBatchIOGetStatus(
    _batch_idp: hipFileBatchHandle_t,
    _min_nr: c_uint,
    _nr: *mut c_uint,
    _iocbp: *mut hipFileIOEvents_t,
    _timeout: *mut libc::timespec,
) -> hipFileError_t {
    guarded(IO_NOT_SUPPORTED, || IO_NOT_SUPPORTED)
}

/// Batch IO is not part of this build.
#[no_mangle]
pub extern "C" fn hipFileBatchIOCancel(_batch_idp: hipFileBatchHandle_t) -> hipFileError_t {
    guarded(IO_NOT_SUPPORTED, || IO_NOT_SUPPORTED)
}

/// Batch IO is not part of this build: no batch can exist, so there is nothing to destroy.
#[no_mangle]
pub extern "C" fn hipFileBatchIODestroy(_batch_idp: hipFileBatchHandle_t) {
    guarded((), || ())
}

/// Async IO is not part of this build.
#[no_mangle]
pub extern "C" fn hipFileReadAsync(
    _fh: hipFileHandle_t,
    _buffer_base: *mut c_void,
    _size_p: *mut usize,
    _file_offset_p: *mut hoff_t,
    _buffer_offset_p: *mut hoff_t,
    _bytes_read_p: *mut ssize_t,
    _stream: hipStream_t,
) -> hipFileError_t {
    guarded(ASYNC_NOT_SUPPORTED, || ASYNC_NOT_SUPPORTED)
}

/// Async IO is not part of this build.
#[no_mangle]
pub extern "C" fn hipFileWriteAsync(
    _fh: hipFileHandle_t,
    _buffer_base: *mut c_void,
    _size_p: *mut usize,
    _file_offset_p: *mut hoff_t,
    _buffer_offset_p: *mut hoff_t,
    _bytes_written_p: *mut ssize_t,
    _stream: hipStream_t,
) -> hipFileError_t {
    guarded(ASYNC_NOT_SUPPORTED, || ASYNC_NOT_SUPPORTED)
}

/// Stream IO is not part of this build.
#[no_mangle]
pub extern "C" fn hipFileStreamRegister(_stream: hipStream_t, _flags: c_uint) -> hipFileError_t {
    guarded(ASYNC_NOT_SUPPORTED, || ASYNC_NOT_SUPPORTED)
}

/// Stream IO is not part of this build.
#[no_mangle]
pub extern "C" fn hipFileStreamDeregister(_stream: hipStream_t) -> hipFileError_t {
    guarded(ASYNC_NOT_SUPPORTED, || ASYNC_NOT_SUPPORTED)
}

fn counter(ok: u64, err: u64) -> hipFileOpCounter_t {
    hipFileOpCounter_t { ok, err }
}

/// Level 1 statistics from the open driver's counters (zeroes for what is not tracked).
fn stats_l1() -> Result<hipFileStatsLevel1_t, hipFileError_t> {
    let session = driver()
        .session()
        .ok_or(hipFileError_t::op(hipFileDriverNotInitialized))?;
    let snap = session.stats().snapshot();
    // SAFETY: hipFileStatsLevel1_t is plain integers; all-zero is a valid value.
    let mut l1: hipFileStatsLevel1_t = unsafe { std::mem::zeroed() };
    l1.read_ops = counter(snap.reads, snap.read_errors);
    l1.write_ops = counter(snap.writes, snap.write_errors);
    l1.read_bytes = snap.bytes_read;
    l1.write_bytes = snap.bytes_written;
    Ok(l1)
}

/// Fill the caller's statistics struct at `out` with `build` applied to the level-1 counters.
///
/// # Safety
/// `out` is NULL or valid for writing a `T`.
unsafe fn write_stats<T>(
    out: *mut T,
    build: impl FnOnce(hipFileStatsLevel1_t) -> T,
) -> hipFileError_t {
    guarded(hipFileError_t::op(hipFileInternalError), || {
        if out.is_null() {
            return hipFileError_t::op(hipFileInvalidValue);
        }
        match stats_l1() {
            Ok(l1) => {
                let stats = build(l1);
                // SAFETY: `out` is non-null and points to the caller's struct.
                unsafe { out.write(stats) };
                hipFileError_t::SUCCESS
            }
            Err(e) => e,
        }
    })
}

/// Level 1 statistics.
#[no_mangle]
pub unsafe extern "C" fn hipFileGetStatsL1(stats: *mut hipFileStatsLevel1_t) -> hipFileError_t {
    // SAFETY: the caller's contract.
    unsafe { write_stats(stats, |l1| l1) }
}

/// Level 2 statistics (no size histograms are kept: they read 0).
#[no_mangle]
pub unsafe extern "C" fn hipFileGetStatsL2(stats: *mut hipFileStatsLevel2_t) -> hipFileError_t {
    // SAFETY: the caller's contract.
    unsafe {
        write_stats(stats, |l1| {
            // SAFETY: plain integers; all-zero is valid.
            let mut l2: hipFileStatsLevel2_t = std::mem::zeroed();
            l2.basic = l1;
            l2
        })
    }
}

/// Level 3 statistics (no per-GPU counters are kept: `num_gpus` is 0).
#[no_mangle]
pub unsafe extern "C" fn hipFileGetStatsL3(stats: *mut hipFileStatsLevel3_t) -> hipFileError_t {
    // SAFETY: the caller's contract.
    unsafe {
        write_stats(stats, |l1| {
            // SAFETY: plain integers and bytes; all-zero is valid.
            let mut l3: hipFileStatsLevel3_t = std::mem::zeroed();
            l3.detailed.basic = l1;
            l3
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every kind maps to its own code and back; only an OS failure borrows
    /// `hipFileInternalError`.
    #[test]
    fn op_code_round_trips_every_kind() {
        for kind in ErrorKind::ALL {
            let code = op_code(kind);
            if kind == ErrorKind::Os {
                assert_eq!(code, hipFileInternalError);
            } else {
                assert_eq!(ErrorKind::from_code(code), Some(kind), "{kind:?}");
                assert!(HIPFILE_OP_ERRORS.contains(&code), "{kind:?}");
            }
        }
        assert_eq!(op_code(ErrorKind::InvalidValue), hipFileInvalidValue);
        assert_eq!(
            op_code(ErrorKind::AsyncNotSupported),
            hipFileAsyncNotSupported
        );
    }

    #[test]
    fn error_text_is_the_tables_description() {
        for kind in ErrorKind::ALL.into_iter().filter(|k| *k != ErrorKind::Os) {
            let text = error_text(op_code(kind)).to_str();
            assert_eq!(text, Ok(kind.description()), "{kind:?}");
        }
        assert_eq!(
            error_text(hipFileSuccess),
            c"hipFile operation completed successfully"
        );
        for unknown in [
            -1,
            1,
            HIPFILE_BASE_ERR,
            5021,
            5032,
            hipFileIOMaxError,
            i32::MIN,
        ] {
            assert_eq!(error_text(unknown), c"unknown hipFile error", "{unknown}");
        }
    }
}
