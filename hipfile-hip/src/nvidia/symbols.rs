//! The CUDA entry points the NVIDIA platform calls, resolved at load: the runtime's (those it
//! shares with HIP through [`CommonApi`], spelled by [`CUDA`], and its own) and the driver's.

use std::ffi::{c_char, c_void};

use libloading::Library;

use super::memory::RawPointerAttributes;
use crate::error::HipResult;
use crate::loaded::{symbol, CommonApi, Dialect, RawStream};

/// `CUcontext`.
pub(super) type RawContext = *mut c_void;
/// `CUdeviceptr`.
pub(super) type DevicePtr = u64;

/// `cudaErrorNotReady` (and `CUDA_ERROR_NOT_READY`).
const CUDA_NOT_READY: i32 = 600;

/// The CUDA runtime spelling of the calls HIP shares with CUDA.
static CUDA: Dialect = Dialect {
    runtime_get_version: "cudaRuntimeGetVersion",
    get_device_count: "cudaGetDeviceCount",
    get_device: "cudaGetDevice",
    set_device: "cudaSetDevice",
    malloc: "cudaMalloc",
    malloc_managed: "cudaMallocManaged",
    free: "cudaFree",
    host_alloc: "cudaHostAlloc",
    host_free: "cudaFreeHost",
    host_register: "cudaHostRegister",
    host_unregister: "cudaHostUnregister",
    memcpy: "cudaMemcpy",
    memcpy_async: "cudaMemcpyAsync",
    memset: "cudaMemset",
    memset_async: "cudaMemsetAsync",
    host_get_device_pointer: "cudaHostGetDevicePointer",
    stream_create_with_flags: "cudaStreamCreateWithFlags",
    stream_destroy: "cudaStreamDestroy",
    stream_synchronize: "cudaStreamSynchronize",
    event_create_with_flags: "cudaEventCreateWithFlags",
    event_create_fallback: None,
    event_create_call: "cudaEventCreateWithFlags",
    event_record: "cudaEventRecord",
    event_synchronize: "cudaEventSynchronize",
    event_query: "cudaEventQuery",
    event_destroy: "cudaEventDestroy",
    launch_host_func: "cudaLaunchHostFunc",
    get_error_string: "cudaGetErrorString",
    // `cudaHostAllocPortable`: pinned staging memory usable from every device's context.
    host_alloc_flags: 1,
    // `cudaHostAllocPortable | cudaHostAllocMapped`.
    host_alloc_mapped_flags: 0x1 | 0x2,
    // Portable; ReadOnly.
    host_register_flags: 0x1,
    host_register_read_only: 0x8,
    not_ready: CUDA_NOT_READY,
};

/// Every CUDA runtime entry point the platform calls, resolved at load.
#[derive(Clone, Copy)]
pub(super) struct RuntimeApi {
    pub common: CommonApi,
    pub driver_get_version: unsafe extern "C" fn(*mut i32) -> i32,
    pub pointer_get_attributes:
        unsafe extern "C" fn(*mut RawPointerAttributes, *const c_void) -> i32,
    pub get_error_name: unsafe extern "C" fn(i32) -> *const c_char,
    /// `cudaStreamGetDevice`, exported from CUDA 12.8 on.
    pub stream_get_device: Option<unsafe extern "C" fn(RawStream, *mut i32) -> i32>,
}

/// A stream memory operation the driver offers (the wait, or the write of the same signature).
#[derive(Clone, Copy)]
pub(super) struct StreamWaitValue {
    /// `cuStreamWaitValue32_v2`, else `cuStreamWaitValue32`:
    /// `(CUstream, CUdeviceptr, cuuint32_t value, unsigned flags)`.
    pub call: unsafe extern "C" fn(RawStream, DevicePtr, u32, u32) -> i32,
    /// The symbol resolved (the call name its errors carry).
    pub name: &'static str,
    /// Whether it is the legacy entry point, usable only where the device attribute
    /// `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1` says so; the `_v2` one is available on
    /// every device.
    pub legacy: bool,
}

/// Every CUDA driver entry point the platform calls, resolved at load.
#[derive(Clone, Copy)]
pub(super) struct DriverApi {
    pub init: unsafe extern "C" fn(u32) -> i32,
    pub driver_get_version: unsafe extern "C" fn(*mut i32) -> i32,
    pub mem_get_address_range: unsafe extern "C" fn(*mut DevicePtr, *mut usize, DevicePtr) -> i32,
    pub pointer_get_attribute: unsafe extern "C" fn(*mut c_void, i32, DevicePtr) -> i32,
    pub primary_ctx_retain: unsafe extern "C" fn(*mut RawContext, i32) -> i32,
    pub primary_ctx_release: unsafe extern "C" fn(i32) -> i32,
    pub ctx_get_current: unsafe extern "C" fn(*mut RawContext) -> i32,
    pub ctx_set_current: unsafe extern "C" fn(RawContext) -> i32,
    pub device_get: unsafe extern "C" fn(*mut i32, i32) -> i32,
    /// Optional: a driver without it has no stream memory operations.
    pub stream_wait_value: Option<StreamWaitValue>,
    /// The stream memory write, `cuStreamWriteValue32_v2` else `cuStreamWriteValue32` (same
    /// signature and availability as the wait): optional as the wait.
    pub stream_write_value: Option<StreamWaitValue>,
    /// `cuStreamGetCtx`, `cuCtxGetDevice` and `cuDeviceGetAttribute`: optional, the device of a
    /// stream through the driver, and the legacy stream memory operations check.
    pub stream_get_ctx: Option<unsafe extern "C" fn(RawStream, *mut RawContext) -> i32>,
    pub ctx_get_device: Option<unsafe extern "C" fn(*mut i32) -> i32>,
    pub device_get_attribute: Option<unsafe extern "C" fn(*mut i32, i32, i32) -> i32>,
    /// `cuCtxCreate_v2` and `cuCtxDestroy_v2`: optional, contexts of the library's own
    /// ([`crate::GpuRuntime::context_create`]).
    pub ctx_create: Option<unsafe extern "C" fn(*mut RawContext, u32, i32) -> i32>,
    pub ctx_destroy: Option<unsafe extern "C" fn(RawContext) -> i32>,
    /// `cuCtxPopCurrent_v2`: optional, takes a just-made context off the thread's stack.
    pub ctx_pop_current: Option<unsafe extern "C" fn(*mut RawContext) -> i32>,
}

impl RuntimeApi {
    /// Resolve every entry point; the first missing one is the error.
    pub(super) fn resolve(lib: &Library, library: &str) -> HipResult<Self> {
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the field this initialises is declared with the C signature of $name as
                // published in cuda_runtime_api.h.
                unsafe { symbol(lib, library, $name)? }
            };
        }
        Ok(RuntimeApi {
            common: CommonApi::resolve(lib, library, &CUDA)?,
            driver_get_version: sym!("cudaDriverGetVersion"),
            pointer_get_attributes: sym!("cudaPointerGetAttributes"),
            get_error_name: sym!("cudaGetErrorName"),
            // SAFETY: declared with its cuda_runtime_api.h signature (CUDA 12.8+).
            stream_get_device: unsafe { symbol(lib, library, "cudaStreamGetDevice") }.ok(),
        })
    }
}

impl DriverApi {
    /// Resolve every entry point; the first missing one is the error.
    pub(super) fn resolve(lib: &Library, library: &str) -> HipResult<Self> {
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the field this initialises is declared with the C signature of $name as
                // published in cuda.h.
                unsafe { symbol(lib, library, $name)? }
            };
        }
        Ok(DriverApi {
            init: sym!("cuInit"),
            driver_get_version: sym!("cuDriverGetVersion"),
            mem_get_address_range: sym!("cuMemGetAddressRange_v2"),
            pointer_get_attribute: sym!("cuPointerGetAttribute"),
            primary_ctx_retain: sym!("cuDevicePrimaryCtxRetain"),
            // cuda.h maps the name to the `_v2` entry point since CUDA 11; older drivers export
            // only the plain one, with the same signature.
            // SAFETY: both candidates have the signature `CUresult (CUdevice)`.
            primary_ctx_release: match unsafe {
                symbol(lib, library, "cuDevicePrimaryCtxRelease_v2")
            } {
                Ok(f) => f,
                Err(_) => sym!("cuDevicePrimaryCtxRelease"),
            },
            ctx_get_current: sym!("cuCtxGetCurrent"),
            ctx_set_current: sym!("cuCtxSetCurrent"),
            device_get: sym!("cuDeviceGet"),
            stream_wait_value: resolve_stream_wait_value(lib, library),
            stream_write_value: resolve_stream_write_value(lib, library),
            // SAFETY: declared with its cuda.h signature.
            stream_get_ctx: unsafe { symbol(lib, library, "cuStreamGetCtx") }.ok(),
            // SAFETY: declared with its cuda.h signature.
            ctx_get_device: unsafe { symbol(lib, library, "cuCtxGetDevice") }.ok(),
            // SAFETY: declared with its cuda.h signature.
            device_get_attribute: unsafe { symbol(lib, library, "cuDeviceGetAttribute") }.ok(),
            // SAFETY: declared with its cuda.h signature.
            ctx_create: unsafe { symbol(lib, library, "cuCtxCreate_v2") }.ok(),
            // SAFETY: declared with its cuda.h signature.
            ctx_destroy: unsafe { symbol(lib, library, "cuCtxDestroy_v2") }.ok(),
            // SAFETY: declared with its cuda.h signature.
            ctx_pop_current: unsafe { symbol(lib, library, "cuCtxPopCurrent_v2") }.ok(),
        })
    }
}

/// `cuStreamWriteValue32_v2`, else the legacy `cuStreamWriteValue32` (same signature), else none.
fn resolve_stream_write_value(lib: &Library, library: &str) -> Option<StreamWaitValue> {
    for (name, legacy) in [
        ("cuStreamWriteValue32_v2", false),
        ("cuStreamWriteValue32", true),
    ] {
        // SAFETY: both are declared in cuda.h as
        // `CUresult (CUstream, CUdeviceptr, cuuint32_t, unsigned int)`.
        if let Ok(call) = unsafe { symbol(lib, library, name) } {
            return Some(StreamWaitValue { call, name, legacy });
        }
    }
    None
}

/// `cuStreamWaitValue32_v2`, else the legacy `cuStreamWaitValue32` (same signature), else none.
fn resolve_stream_wait_value(lib: &Library, library: &str) -> Option<StreamWaitValue> {
    for (name, legacy) in [
        ("cuStreamWaitValue32_v2", false),
        ("cuStreamWaitValue32", true),
    ] {
        // SAFETY: both are declared in cuda.h as
        // `CUresult (CUstream, CUdeviceptr, cuuint32_t, unsigned int)`.
        if let Ok(call) = unsafe { symbol(lib, library, name) } {
            return Some(StreamWaitValue { call, name, legacy });
        }
    }
    None
}
