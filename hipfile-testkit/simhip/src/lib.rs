//! # hipfile-simhip: the simulated GPU as a HIP runtime library
//!
//! This crate builds `libamdhip64.so` (soname `libamdhip64.so.6`): a shared library exporting the
//! HIP runtime entry points with the AMD ABI — `hipMalloc`, `hipMemcpy`, `hipPointerGetAttributes`,
//! `hipStreamCreate`, `hipLaunchHostFunc`, `hipGetProcAddress` and the rest listed in
//! [`EXPORTED_SYMBOLS`] — implemented by one process-wide [`hipfile_hip::sim::SimRuntime`]. Loaded
//! in place of AMD's runtime it lets
//! - hipfile-rs's AMD platform (`hipfile_hip::amd`) run for real on a machine without a GPU, and
//! - C programs compiled against the real HIP headers (with `-D__HIP_PLATFORM_AMD__`) run on it.
//!
//! ## Using it
//!
//! `cargo build -p hipfile-simhip` leaves `target/<profile>/libamdhip64.so`. Then either
//! - point hipfile-rs at it: `HIPFILE_HIP_LIBRARY=$PWD/target/debug/libamdhip64.so`, or
//! - link a C program with `-L<dir> -lamdhip64`, where `<dir>` holds `libamdhip64.so` and a
//!   `libamdhip64.so.6` symlink to it, and run it with `LD_LIBRARY_PATH=<dir>` (or an rpath).
//!
//! Because the library's soname is `libamdhip64.so.6`, a program linked against it that also uses
//! hipfile-rs gets ONE simulator: the AMD platform's `dlopen("libamdhip64.so.6")` finds the copy the
//! program already loaded, so pointers the program `hipMalloc`ed are device memory to hipfile too.
//! The library is linked `-z nodelete`: its stream workers run its code, so it is never unmapped.
//!
//! ## Direct IO
//!
//! `hipAmdFileRead` and `hipAmdFileWrite` (the AMD fastpath entry points, which real runtimes
//! offer only through `hipGetProcAddress`) are exported both ways and run the simulator's P2P
//! driver: O_DIRECT `pread`/`pwrite` between the handle's descriptor and simulated device memory.
//! So hipfile-rs's AMD P2P code runs for real on this library. With `HIPFILE_SIM_P2P=false`
//! `hipGetProcAddress` does not know them, as on a runtime without direct IO. A failed transfer
//! answers `hipErrorUnknown` with the errno in `*status`.
//!
//! ## Configuration
//!
//! Read once, at the first call: `HIPFILE_SIM_DEVICES` (device count, default 1),
//! `HIPFILE_SIM_MEMOPS` (`false` or `0`: `hipDeviceAttributeCanUseStreamWaitValue` answers 0 and
//! `hipStreamWaitValue32` fails with `hipErrorNotSupported`) and `HIPFILE_SIM_ROCM` (`5` or `6`,
//! default 6) — the ABI generation imitated. With `5`,
//! `hipRuntimeGetVersion` reports a 5.x version, `hipMemoryType` uses the ROCm 5 numbering and
//! `hipPointerGetAttributes` fails with `hipErrorInvalidValue` for memory it does not know; with
//! `6`, the ROCm 6 numbering and success with `hipMemoryTypeUnregistered`.
//!
//! ## Contract
//!
//! Every entry point returns a `hipError_t` (`int`), never unwinds into C (a panic becomes
//! `hipErrorUnknown`) and answers NULL out-pointers with `hipErrorInvalidValue`. Stream and event
//! handles are the simulator's handle numbers cast to pointers; the NULL stream is the legacy
//! default stream of the current device (asynchronous, ordered with the streams made without
//! `hipStreamNonBlocking`, and behind which `hipMemcpy` and `hipMemset` run), and a NULL or stale
//! event (like a stale stream) is `hipErrorInvalidHandle`, as in HIP. As in
//! HIP, `hipFree(NULL)`, `hipHostFree(NULL)` and copies of zero bytes succeed.
//! Copies that touch simulated device memory are checked against its allocations and fail with
//! `hipErrorInvalidValue` where a GPU would fault; host pointers the simulator does not know are
//! trusted, as a real runtime trusts them.
//!
//! The exports whose C signature and behaviour the HIP and CUDA ABIs share (memory, copies,
//! streams, events, host functions) are written once, in `hipfile_hip::sim_c_exports!`, and
//! named here; this file writes the rest, whose signature, checks or numbering are HIP's own.
#![allow(non_snake_case)]

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::os::fd::BorrowedFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

use hipfile_hip::amd::AmdFileHandle;
use hipfile_hip::sim::capi;
use hipfile_hip::sim::{SimAbi, SimRuntime};
use hipfile_hip::{GpuRuntime, HipError, HipErrorCode, MemoryKind, PlatformOptions};

/// `hipStream_t`.
pub type HipStream = *mut c_void;
/// `hipEvent_t`.
pub type HipEvent = *mut c_void;
/// `hipHostFn_t`.
pub type HipHostFn = capi::CHostFn;

/// `hipPointerAttribute_t` (32 bytes on every ROCm).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HipPointerAttribute {
    /// `hipMemoryType`, in the numbering of the configured ROCm generation.
    pub memory_type: c_int,
    /// The owning device.
    pub device: c_int,
    /// The device-side address (NULL for memory the device cannot reach).
    pub device_pointer: *mut c_void,
    /// The host-side address (NULL for device-only memory).
    pub host_pointer: *mut c_void,
    /// 1 for managed memory.
    pub is_managed: c_int,
    /// Flags given at allocation.
    pub allocation_flags: c_uint,
}

const _: () = assert!(std::mem::size_of::<HipPointerAttribute>() == 32);

/// `hipDeviceAttributeCanUseStreamWaitValue`.
pub const DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE: c_int =
    hipfile_hip::amd::DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE;

static SIM: OnceLock<SimRuntime> = OnceLock::new();

thread_local! {
    static LAST_ERROR: Cell<i32> = const { Cell::new(0) };
}

/// The process-wide simulator, built from the environment at first use.
fn sim() -> &'static SimRuntime {
    SIM.get_or_init(|| SimRuntime::new(PlatformOptions::from_env().sim))
}

/// A failure on its way to becoming a `hipError_t`.
struct Status(i32);

impl From<HipError> for Status {
    fn from(e: HipError) -> Self {
        Status(e.code().0)
    }
}

impl From<HipErrorCode> for Status {
    fn from(c: HipErrorCode) -> Self {
        Status(c.0)
    }
}

type Ffi = Result<(), Status>;

fn invalid() -> Status {
    HipErrorCode::INVALID_VALUE.into()
}

/// The boundary every entry point goes through: catches panics, records the last error.
fn run(body: impl FnOnce() -> Ffi) -> c_int {
    let rc = match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => 0,
        Ok(Err(Status(code))) => code,
        Err(_) => HipErrorCode::UNKNOWN.0,
    };
    // "Not ready" is an answer, not an error: HIP does not make it the last error either.
    if rc != 0 && rc != HipErrorCode::NOT_READY.0 {
        let _ = LAST_ERROR.try_with(|c| c.set(rc));
    }
    rc
}

/// Write `value` through a C out-pointer; NULL is `hipErrorInvalidValue`.
///
/// # Safety
/// `out` is NULL or valid for writing one `T`.
unsafe fn put<T>(out: *mut T, value: T) -> Ffi {
    // SAFETY: the caller's contract.
    Ok(unsafe { capi::put(out, value) }?)
}

/// `hipMemoryType` of `kind` in the numbering of `abi`.
fn memory_type(abi: SimAbi, kind: MemoryKind) -> c_int {
    match (abi, kind) {
        (SimAbi::Rocm5, MemoryKind::Unregistered | MemoryKind::Host) => 0,
        (SimAbi::Rocm5, MemoryKind::Device) => 1,
        (SimAbi::Rocm5, MemoryKind::Array) => 2,
        (SimAbi::Rocm5, MemoryKind::Managed) => 4,
        (SimAbi::Rocm6, MemoryKind::Unregistered) => 0,
        (SimAbi::Rocm6, MemoryKind::Host) => 1,
        (SimAbi::Rocm6, MemoryKind::Device) => 2,
        (SimAbi::Rocm6, MemoryKind::Managed) => 3,
        (SimAbi::Rocm6, MemoryKind::Array) => 10,
    }
}

// ---------------------------------------------------------------------------------------------
// Initialisation, versions, devices.

/// Present only in this simulated runtime: hipfile-rs's AMD platform looks for it so that its
/// reports (`hipfile check`, `hipfile bench`) never present the simulator as a GPU.
#[no_mangle]
pub static hipfile_simulated_runtime: u8 = 1;

/// `hipInit`: builds the simulator.
#[no_mangle]
pub extern "C" fn hipInit(_flags: c_uint) -> c_int {
    run(|| {
        sim();
        Ok(())
    })
}

/// `hipRuntimeGetVersion`.
///
/// # Safety
/// `version` is NULL or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn hipRuntimeGetVersion(version: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    run(|| unsafe { put(version, sim().config().abi.runtime_version()) })
}

/// `hipDriverGetVersion`: the simulator's driver is its runtime.
///
/// # Safety
/// `version` is NULL or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn hipDriverGetVersion(version: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    run(|| unsafe { put(version, sim().config().abi.runtime_version()) })
}

hipfile_hip::sim_c_exports! {
    runtime: sim, boundary: run;
    device_count => hipGetDeviceCount;
    current_device => hipGetDevice;
}

/// `hipSetDevice`.
#[no_mangle]
pub extern "C" fn hipSetDevice(device: c_int) -> c_int {
    run(|| Ok(sim().set_device(device)?))
}

/// `hipDeviceGetAttribute`: `hipDeviceAttributeCanUseStreamWaitValue` (1 unless
/// `HIPFILE_SIM_MEMOPS` turned stream memory operations off); any other attribute is
/// `hipErrorInvalidValue`, an unknown device `hipErrorInvalidDevice`.
///
/// # Safety
/// `value` is NULL or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn hipDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_int,
    device: c_int,
) -> c_int {
    run(|| {
        if device < 0 || device >= sim().config().devices {
            return Err(HipErrorCode::INVALID_DEVICE.into());
        }
        match attribute {
            DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE => {
                // SAFETY: the caller's contract.
                unsafe { put(value, c_int::from(sim().stream_memops(device))) }
            }
            _ => Err(invalid()),
        }
    })
}

/// `hipDeviceSynchronize`: waits for every stream.
#[no_mangle]
pub extern "C" fn hipDeviceSynchronize() -> c_int {
    run(|| Ok(sim().synchronize_all()?))
}

// ---------------------------------------------------------------------------------------------
// Errors.

/// HIP's name and message for `code`.
fn error_text(code: c_int) -> (&'static CStr, &'static CStr) {
    capi::error_text(code).map_or((c"hipErrorUnknown", c"unknown error"), |t| t.hip)
}

/// `hipGetErrorName`: a static string, never NULL.
#[no_mangle]
pub extern "C" fn hipGetErrorName(error: c_int) -> *const c_char {
    error_text(error).0.as_ptr()
}

/// `hipGetErrorString`: a static string, never NULL.
#[no_mangle]
pub extern "C" fn hipGetErrorString(error: c_int) -> *const c_char {
    error_text(error).1.as_ptr()
}

/// `hipGetLastError`: the calling thread's last error, which is reset to `hipSuccess`.
#[no_mangle]
pub extern "C" fn hipGetLastError() -> c_int {
    catch_unwind(|| LAST_ERROR.try_with(|c| c.replace(0)).unwrap_or(0))
        .unwrap_or(HipErrorCode::UNKNOWN.0)
}

/// `hipPeekAtLastError`: the calling thread's last error, left in place.
#[no_mangle]
pub extern "C" fn hipPeekAtLastError() -> c_int {
    catch_unwind(|| LAST_ERROR.try_with(Cell::get).unwrap_or(0)).unwrap_or(HipErrorCode::UNKNOWN.0)
}

// ---------------------------------------------------------------------------------------------
// Memory.

hipfile_hip::sim_c_exports! {
    runtime: sim, boundary: run;
    malloc => hipMalloc;
    free => hipFree;
    host_device_pointer => hipHostGetDevicePointer;
    host_free => hipHostFree;
    host_register => hipHostRegister;
}

/// `hipMallocManaged`: managed memory (reported with `isManaged = 1`).
///
/// # Safety
/// `ptr` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn hipMallocManaged(
    ptr: *mut *mut c_void,
    size: usize,
    _flags: c_uint,
) -> c_int {
    run(|| {
        if size == 0 {
            return Err(invalid());
        }
        // SAFETY: the caller's contract.
        Ok(unsafe { capi::put_new(ptr, || Ok(sim().managed_alloc(size)? as *mut c_void)) }?)
    })
}

/// `hipHostMalloc`: pinned host memory; size 0 gives NULL. Every simulated pinned allocation is
/// mapped into the devices' address space (`hipHostMallocMapped` is always honoured; the
/// devices see it at its host address, [`hipHostGetDevicePointer`]) and portable.
///
/// # Safety
/// `ptr` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn hipHostMalloc(
    ptr: *mut *mut c_void,
    size: usize,
    _flags: c_uint,
) -> c_int {
    // SAFETY: the caller's contract.
    run(|| Ok(unsafe { capi::put_new(ptr, || sim().host_alloc_or_null(size)) }?))
}

/// `hipHostUnregister`.
///
/// # Safety
/// `ptr` was registered with `hipHostRegister` and no queued work uses it.
#[no_mangle]
pub unsafe extern "C" fn hipHostUnregister(ptr: *mut c_void) -> c_int {
    run(|| {
        if ptr.is_null() {
            return Err(invalid());
        }
        Ok(sim().host_unregister(ptr as usize)?)
    })
}

/// `hipPointerGetAttributes`, in the numbering of the configured ROCm generation.
///
/// # Safety
/// `attributes` is NULL or valid for writing a `hipPointerAttribute_t`.
#[no_mangle]
pub unsafe extern "C" fn hipPointerGetAttributes(
    attributes: *mut HipPointerAttribute,
    ptr: *const c_void,
) -> c_int {
    run(|| {
        if attributes.is_null() || ptr.is_null() {
            return Err(invalid());
        }
        let abi = sim().config().abi;
        let info = sim().pointer_info(ptr as usize)?;
        let p = ptr.cast_mut();
        let (device_pointer, host_pointer) = match info.kind {
            MemoryKind::Unregistered if abi == SimAbi::Rocm5 => return Err(invalid()),
            MemoryKind::Unregistered => (std::ptr::null_mut(), p),
            MemoryKind::Device | MemoryKind::Array => (p, std::ptr::null_mut()),
            MemoryKind::Host | MemoryKind::Managed => (p, p),
        };
        let attr = HipPointerAttribute {
            memory_type: memory_type(abi, info.kind),
            device: info.device,
            device_pointer,
            host_pointer,
            is_managed: c_int::from(info.kind == MemoryKind::Managed),
            allocation_flags: 0,
        };
        // SAFETY: the caller's contract.
        unsafe { put(attributes, attr) }
    })
}

/// `hipMemGetAddressRange`: base and size of the allocation holding `dptr`.
///
/// # Safety
/// `base` and `size` are NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn hipMemGetAddressRange(
    base: *mut *mut c_void,
    size: *mut usize,
    dptr: *mut c_void,
) -> c_int {
    run(|| {
        if base.is_null() || size.is_null() || dptr.is_null() {
            return Err(invalid());
        }
        let (start, len) = sim().allocation_range(dptr as usize)?;
        // SAFETY: the caller's contract.
        unsafe {
            put(base, start as *mut c_void)?;
            put(size, len)
        }
    })
}

hipfile_hip::sim_c_exports! {
    runtime: sim, boundary: run;
    memcpy => hipMemcpy;
    memcpy_async => hipMemcpyAsync;
    memset => hipMemset;
    memset_async => hipMemsetAsync;
}

// ---------------------------------------------------------------------------------------------
// Streams, events, host functions.

/// `hipStreamCreate`.
///
/// # Safety
/// `out` is NULL or valid for writing a `hipStream_t`.
#[no_mangle]
pub unsafe extern "C" fn hipStreamCreate(out: *mut HipStream) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { hipStreamCreateWithFlags(out, 0) }
}

hipfile_hip::sim_c_exports! {
    runtime: sim, boundary: run;
    stream_create_with_flags => hipStreamCreateWithFlags;
    stream_get_device => hipStreamGetDevice;
    stream_query => hipStreamQuery;
}

/// `hipStreamWaitValue32`: later work on `stream` waits until the word at `ptr` passes the test
/// `flags` names (`hipStreamWaitValueGte`, `Eq`, `And`, `Nor`, with `mask`). The word must be
/// 4-byte aligned memory the simulator tracks (pinned or device memory), else
/// `hipErrorInvalidValue`; unknown flags are `hipErrorInvalidValue`; with `HIPFILE_SIM_MEMOPS`
/// off it is `hipErrorNotSupported`.
#[no_mangle]
pub extern "C" fn hipStreamWaitValue32(
    s: HipStream,
    ptr: *mut c_void,
    value: u32,
    flags: c_uint,
    mask: u32,
) -> c_int {
    run(|| Ok(sim().wait_c_value(s, ptr, value, flags, mask)?))
}

/// `hipStreamWriteValue32`: `value` is stored into the word at `ptr` once the work queued on
/// `stream` before it has run. `flags` must be 0; the word must be 4-byte aligned memory the
/// simulator tracks, else `hipErrorInvalidValue`; with `HIPFILE_SIM_MEMOPS` off it is
/// `hipErrorNotSupported`.
#[no_mangle]
pub extern "C" fn hipStreamWriteValue32(
    s: HipStream,
    ptr: *mut c_void,
    value: u32,
    flags: c_uint,
) -> c_int {
    run(|| Ok(sim().write_c_value(s, ptr, value, flags)?))
}

hipfile_hip::sim_c_exports! {
    runtime: sim, boundary: run;
    stream_destroy => hipStreamDestroy;
    stream_synchronize => hipStreamSynchronize;
}

/// `hipEventCreate`.
///
/// # Safety
/// `out` is NULL or valid for writing a `hipEvent_t`.
#[no_mangle]
pub unsafe extern "C" fn hipEventCreate(out: *mut HipEvent) -> c_int {
    // SAFETY: the caller's contract.
    unsafe { hipEventCreateWithFlags(out, 0) }
}

/// `hipEventCreateWithFlags`: flags change nothing in the simulator.
///
/// # Safety
/// `out` is NULL or valid for writing a `hipEvent_t`.
#[no_mangle]
pub unsafe extern "C" fn hipEventCreateWithFlags(out: *mut HipEvent, _flags: c_uint) -> c_int {
    // SAFETY: the caller's contract.
    run(|| Ok(unsafe { capi::put_new(out, || sim().create_c_event()) }?))
}

hipfile_hip::sim_c_exports! {
    runtime: sim, boundary: run;
    event_record => hipEventRecord;
    event_synchronize => hipEventSynchronize;
    event_query => hipEventQuery;
    event_destroy => hipEventDestroy;
    launch_host_func => hipLaunchHostFunc;
}

// ---------------------------------------------------------------------------------------------
// Direct IO (AIS): hipAmdFileRead / hipAmdFileWrite.

/// The two direct IO exports, one transfer through the simulator's P2P driver each; they differ
/// only in its direction (the driver's `read` or `write`).
macro_rules! amd_file_export {
    ($(#[$doc:meta])* $name:ident => $transfer:ident) => {
        $(#[$doc])*
        ///
        /// # Safety
        /// `handle` holds an open descriptor; `size_copied` and `status` are NULL or writable.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            handle: AmdFileHandle,
            device_ptr: *mut c_void,
            size: u64,
            file_offset: i64,
            size_copied: *mut u64,
            status: *mut i32,
        ) -> c_int {
            run(|| {
                if size_copied.is_null() || status.is_null() {
                    return Err(invalid());
                }
                // SAFETY: both are non-null and writable by the caller's contract.
                unsafe {
                    put(size_copied, 0)?;
                    put(status, 0)?;
                }
                if size == 0 {
                    return Ok(());
                }
                let p2p = sim().p2p().ok_or(Status(HipErrorCode::NOT_SUPPORTED.0))?;
                let size = usize::try_from(size).map_err(|_| invalid())?;
                let offset = u64::try_from(file_offset).map_err(|_| invalid())?;
                let fd = handle.fd();
                if fd < 0 {
                    return Err(invalid());
                }
                // SAFETY: the descriptor is open by the caller's contract; the driver checks that
                // the device range lies inside one simulated device allocation before touching it.
                let moved = unsafe {
                    let fd = BorrowedFd::borrow_raw(fd);
                    p2p.$transfer(fd, device_ptr as usize, size, offset)
                };
                match moved {
                    Ok(n) => {
                        // SAFETY: checked non-null above.
                        unsafe { put(size_copied, n as u64) }
                    }
                    Err(e) => {
                        let errno = e.raw_os_error().unwrap_or(5);
                        // SAFETY: checked non-null above.
                        unsafe { put(status, errno)? };
                        Err(HipErrorCode::UNKNOWN.into())
                    }
                }
            })
        }
    };
}

amd_file_export!(
    /// `hipAmdFileRead`: read `size` bytes at `file_offset` of the handle's descriptor into device
    /// memory; `*size_copied` gets the bytes moved, `*status` the errno of a failure.
    hipAmdFileRead => read
);

amd_file_export!(
    /// `hipAmdFileWrite`: write `size` bytes of device memory to `file_offset` of the handle's
    /// descriptor; `*size_copied` gets the bytes moved, `*status` the errno of a failure.
    hipAmdFileWrite => write
);

// ---------------------------------------------------------------------------------------------
// hipGetProcAddress.

macro_rules! exported {
    ($($name:ident),* $(,)?) => {
        /// Every entry point this library exports, as `hipGetProcAddress` knows them.
        pub const EXPORTED_SYMBOLS: &[&str] = &[$(stringify!($name)),*];

        fn export_address(symbol: &[u8]) -> Option<*mut c_void> {
            $(
                if symbol == stringify!($name).as_bytes() {
                    return Some($name as *const () as *mut c_void);
                }
            )*
            None
        }
    };
}

exported!(
    hipInit,
    hipRuntimeGetVersion,
    hipDriverGetVersion,
    hipGetDeviceCount,
    hipGetDevice,
    hipSetDevice,
    hipDeviceSynchronize,
    hipDeviceGetAttribute,
    hipGetErrorName,
    hipGetErrorString,
    hipGetLastError,
    hipPeekAtLastError,
    hipMalloc,
    hipMallocManaged,
    hipFree,
    hipHostMalloc,
    hipHostFree,
    hipHostGetDevicePointer,
    hipHostRegister,
    hipHostUnregister,
    hipPointerGetAttributes,
    hipMemGetAddressRange,
    hipMemcpy,
    hipMemcpyAsync,
    hipMemset,
    hipMemsetAsync,
    hipStreamCreate,
    hipStreamCreateWithFlags,
    hipStreamDestroy,
    hipStreamSynchronize,
    hipStreamGetDevice,
    hipStreamQuery,
    hipStreamWaitValue32,
    hipStreamWriteValue32,
    hipEventCreate,
    hipEventCreateWithFlags,
    hipEventRecord,
    hipEventSynchronize,
    hipEventQuery,
    hipEventDestroy,
    hipLaunchHostFunc,
    hipGetProcAddress,
    hipAmdFileRead,
    hipAmdFileWrite,
);

/// The direct IO entry points, known to `hipGetProcAddress` only while the P2P driver is on.
const DIRECT_IO_SYMBOLS: [&[u8]; 2] = [b"hipAmdFileRead", b"hipAmdFileWrite"];

/// `hipDriverProcAddressQueryResult` values.
const PROC_FOUND: c_int = 0;
const PROC_NOT_FOUND: c_int = 1;

/// `hipGetProcAddress` (ROCm 6 signature): the address of any entry point of this library.
/// Unknown names give `hipErrorNotFound` with `*pfn = NULL`. `symbol_status` may be NULL.
///
/// # Safety
/// `symbol` is NULL or a NUL-terminated string; `pfn` and `symbol_status` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn hipGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *mut c_void,
    _hip_version: c_int,
    _flags: u64,
    symbol_status: *mut c_int,
) -> c_int {
    run(|| {
        if symbol.is_null() || pfn.is_null() {
            return Err(invalid());
        }
        // SAFETY: non-null and NUL-terminated by the caller's contract.
        let name = unsafe { CStr::from_ptr(symbol) };
        let direct_io_off = DIRECT_IO_SYMBOLS.contains(&name.to_bytes()) && sim().p2p().is_none();
        let found = export_address(name.to_bytes()).filter(|_| !direct_io_off);
        let status = if found.is_some() {
            PROC_FOUND
        } else {
            PROC_NOT_FOUND
        };
        // SAFETY: the caller's contract; `symbol_status` is optional.
        unsafe {
            put(pfn, found.unwrap_or(std::ptr::null_mut()))?;
            if !symbol_status.is_null() {
                put(symbol_status, status)?;
            }
        }
        match found {
            Some(_) => Ok(()),
            None => Err(HipErrorCode::NOT_FOUND.into()),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_types_follow_each_generation() {
        assert_eq!(memory_type(SimAbi::Rocm5, MemoryKind::Device), 1);
        assert_eq!(memory_type(SimAbi::Rocm5, MemoryKind::Managed), 4);
        assert_eq!(memory_type(SimAbi::Rocm6, MemoryKind::Device), 2);
        assert_eq!(memory_type(SimAbi::Rocm6, MemoryKind::Array), 10);
    }

    #[test]
    fn every_export_is_found_by_name() {
        for name in EXPORTED_SYMBOLS {
            assert!(export_address(name.as_bytes()).is_some(), "{name}");
        }
        assert!(export_address(b"hipNoSuchThing").is_none());
    }

    #[test]
    fn error_strings_are_never_null() {
        for code in [0, 1, 500, 600, 12345] {
            assert!(!hipGetErrorName(code).is_null());
            assert!(!hipGetErrorString(code).is_null());
        }
    }
}
