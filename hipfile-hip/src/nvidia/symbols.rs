//! The CUDA entry points the NVIDIA platform calls, resolved at load: the runtime's (those it
//! shares with HIP through [`CommonApi`], spelled by [`CUDA`], and its own) and the driver's.

use std::ffi::{c_char, c_void};

use libloading::Library;

use super::memory::RawPointerAttributes;
use crate::error::HipResult;
use crate::loaded::{symbol, CommonApi, Dialect};

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
    memcpy: "cudaMemcpy",
    memcpy_async: "cudaMemcpyAsync",
    memset: "cudaMemset",
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
        })
    }
}
