//! The NVIDIA platform: HIP semantics over the CUDA runtime (`libcudart.so`) and driver
//! (`libcuda.so.1`), both loaded with `libloading` at run time.
//!
//! Nothing links CUDA. [`open`] loads the runtime named by `HIPFILE_CUDART_LIBRARY`, else the first
//! of `libcudart.so.13` and `libcudart.so.12` that the dynamic loader accepts, and the driver named
//! by `HIPFILE_CUDA_LIBRARY`, else `libcuda.so.1`; [`open_libraries`] loads explicit paths or
//! sonames. Every symbol is resolved at load into tables of function pointers, so a library that
//! lacks one is refused with [`HipError::MissingSymbol`] at open, never mid-IO and never by a panic.
//!
//! HIP-on-NVIDIA semantics:
//! - Errors are HIP's: every `cudaError_t` and `CUresult` goes through one table, [`hip_code`].
//!   The numbers mostly coincide; a CUDA code with no HIP twin becomes `hipErrorUnknown`, and the
//!   CUDA number and name stay in the error's detail text.
//! - Streams and events are CUDA's handles; pinned memory is `cudaHostAlloc(Portable)`, so a
//!   staging buffer serves every device.
//! - The caller's current device is never changed behind its back: work on memory of another device
//!   switches to that device for the call and switches back ([`DeviceGuard`]).
//! - Device memory of another CUDA context in the process (a PyTorch or CuPy allocation) works:
//!   `cudaPointerGetAttributes` answers for any context under UVA, and the driver calls that need a
//!   context (`cuMemGetAddressRange_v2`) run with the owning device's primary context made current
//!   for the call and the caller's context restored afterwards ([`ContextGuard`]).
//!
//! ABI notes (CUDA 11 and later): `cudaPointerAttributes` is `{ int type; int device;
//! void* devicePointer; void* hostPointer; }`, 24 bytes; `cudaMemoryType` is Unregistered=0,
//! Host=1, Device=2, Managed=3, decoded with a `match` (an unknown value is
//! [`HipError::Unexpected`]); CUDA 11+ answers success with `Unregistered` for pageable memory.
//!
//! Both libraries are opened `RTLD_NODELETE`: the CUDA runtime runs threads and exit handlers that
//! outlive any handle, so its code stays mapped for the life of the process.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CStr};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use libloading::Library;

use crate::error::{HipError, HipErrorCode, HipResult};
use crate::runtime::{
    EventHandle, GpuRuntime, HostFn, MemoryKind, Platform, PointerInfo, RuntimeInfo, StreamHandle,
};

/// The environment variable naming the CUDA runtime library to load instead of the defaults.
pub const RUNTIME_LIBRARY_ENV: &str = "HIPFILE_CUDART_LIBRARY";
/// The environment variable naming the CUDA driver library to load instead of the default.
pub const DRIVER_LIBRARY_ENV: &str = "HIPFILE_CUDA_LIBRARY";
/// The CUDA runtime sonames tried, in order, when [`RUNTIME_LIBRARY_ENV`] is not set.
pub const DEFAULT_RUNTIME_LIBRARIES: [&str; 2] = ["libcudart.so.13", "libcudart.so.12"];
/// The CUDA driver soname loaded when [`DRIVER_LIBRARY_ENV`] is not set.
pub const DEFAULT_DRIVER_LIBRARY: &str = "libcuda.so.1";

/// `cudaStreamDefault`: our streams stay ordered with the legacy default stream, so a staged
/// copy waits for the application's earlier work there (a kernel still writing the buffer), as
/// upstream hipFile's synchronous copies do.
const STREAM_ORDERED_WITH_NULL: u32 = 0;
/// `cudaEventDisableTiming`: our events only order work, they never time it.
const EVENT_DISABLE_TIMING: u32 = 2;
/// `cudaHostAllocPortable`: pinned staging memory usable from every device's context.
const HOST_ALLOC_PORTABLE: u32 = 1;
/// `cudaMemAttachGlobal`.
const MEM_ATTACH_GLOBAL: u32 = 1;
/// `cudaErrorNotReady` (and `CUDA_ERROR_NOT_READY`).
const CUDA_NOT_READY: i32 = 600;
/// `cudaErrorInvalidValue` (and `CUDA_ERROR_INVALID_VALUE`).
const CUDA_INVALID_VALUE: i32 = 1;
/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`: a `CUmemorytype` (`unsigned int`).
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: i32 = 2;
/// `CU_POINTER_ATTRIBUTE_IS_MANAGED`: an `int` (boolean).
pub const CU_POINTER_ATTRIBUTE_IS_MANAGED: i32 = 8;
/// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`: an `int`.
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: i32 = 9;

/// `cudaMemcpyKind` values.
#[derive(Clone, Copy)]
#[repr(i32)]
enum CopyKind {
    HostToDevice = 1,
    DeviceToHost = 2,
}

/// `cudaPointerAttributes` of CUDA 11 and later; `memory_type` is a plain integer, decoded by
/// [`decode_memory_type`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct RawPointerAttributes {
    memory_type: i32,
    device: i32,
    device_pointer: *mut c_void,
    host_pointer: *mut c_void,
}

const _: () = assert!(std::mem::size_of::<RawPointerAttributes>() == 24);

/// The out-buffer handed to `cudaPointerGetAttributes`: the 24-byte struct followed by spare room,
/// so a runtime whose struct grew at the end (as `cudaDeviceProp` has, release after release)
/// writes into the spare bytes instead of past our stack slot.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct PointerAttributesSlot {
    attr: RawPointerAttributes,
    _spare: [u64; 8],
}

impl Default for RawPointerAttributes {
    fn default() -> Self {
        RawPointerAttributes {
            memory_type: 0,
            device: -1,
            device_pointer: std::ptr::null_mut(),
            host_pointer: std::ptr::null_mut(),
        }
    }
}

type RawStream = *mut c_void;
type RawEvent = *mut c_void;
type RawContext = *mut c_void;
type DevicePtr = u64;
type HostCallback = unsafe extern "C" fn(user_data: *mut c_void);

/// Every CUDA runtime entry point the platform calls, resolved at load.
#[derive(Clone, Copy)]
struct RuntimeApi {
    runtime_get_version: unsafe extern "C" fn(*mut i32) -> i32,
    driver_get_version: unsafe extern "C" fn(*mut i32) -> i32,
    get_device_count: unsafe extern "C" fn(*mut i32) -> i32,
    get_device: unsafe extern "C" fn(*mut i32) -> i32,
    set_device: unsafe extern "C" fn(i32) -> i32,
    pointer_get_attributes: unsafe extern "C" fn(*mut RawPointerAttributes, *const c_void) -> i32,
    malloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> i32,
    malloc_managed: unsafe extern "C" fn(*mut *mut c_void, usize, u32) -> i32,
    free: unsafe extern "C" fn(*mut c_void) -> i32,
    host_alloc: unsafe extern "C" fn(*mut *mut c_void, usize, u32) -> i32,
    free_host: unsafe extern "C" fn(*mut c_void) -> i32,
    memcpy: unsafe extern "C" fn(*mut c_void, *const c_void, usize, i32) -> i32,
    memcpy_async: unsafe extern "C" fn(*mut c_void, *const c_void, usize, i32, RawStream) -> i32,
    memset: unsafe extern "C" fn(*mut c_void, i32, usize) -> i32,
    stream_create_with_flags: unsafe extern "C" fn(*mut RawStream, u32) -> i32,
    stream_destroy: unsafe extern "C" fn(RawStream) -> i32,
    stream_synchronize: unsafe extern "C" fn(RawStream) -> i32,
    event_create_with_flags: unsafe extern "C" fn(*mut RawEvent, u32) -> i32,
    event_record: unsafe extern "C" fn(RawEvent, RawStream) -> i32,
    event_synchronize: unsafe extern "C" fn(RawEvent) -> i32,
    event_query: unsafe extern "C" fn(RawEvent) -> i32,
    event_destroy: unsafe extern "C" fn(RawEvent) -> i32,
    launch_host_func: unsafe extern "C" fn(RawStream, Option<HostCallback>, *mut c_void) -> i32,
    get_error_string: unsafe extern "C" fn(i32) -> *const c_char,
    get_error_name: unsafe extern "C" fn(i32) -> *const c_char,
}

/// Every CUDA driver entry point the platform calls, resolved at load.
#[derive(Clone, Copy)]
struct DriverApi {
    init: unsafe extern "C" fn(u32) -> i32,
    driver_get_version: unsafe extern "C" fn(*mut i32) -> i32,
    mem_get_address_range: unsafe extern "C" fn(*mut DevicePtr, *mut usize, DevicePtr) -> i32,
    pointer_get_attribute: unsafe extern "C" fn(*mut c_void, i32, DevicePtr) -> i32,
    primary_ctx_retain: unsafe extern "C" fn(*mut RawContext, i32) -> i32,
    primary_ctx_release: unsafe extern "C" fn(i32) -> i32,
    ctx_get_current: unsafe extern "C" fn(*mut RawContext) -> i32,
    ctx_set_current: unsafe extern "C" fn(RawContext) -> i32,
    device_get: unsafe extern "C" fn(*mut i32, i32) -> i32,
}

/// Resolve `name` in `lib` as a value of type `T`.
///
/// # Safety
/// `T` must be the function-pointer type matching the C declaration of `name`.
unsafe fn symbol<T: Copy>(lib: &Library, library: &str, name: &'static str) -> HipResult<T> {
    // SAFETY: the caller guarantees that `T` matches the symbol's C type.
    match unsafe { lib.get::<T>(name.as_bytes()) } {
        Ok(sym) => Ok(*sym),
        Err(_) => Err(HipError::MissingSymbol {
            library: library.to_string(),
            symbol: name,
        }),
    }
}

impl RuntimeApi {
    /// Resolve every entry point; the first missing one is the error.
    fn resolve(lib: &Library, library: &str) -> HipResult<Self> {
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the field this initialises is declared with the C signature of $name as
                // published in cuda_runtime_api.h.
                unsafe { symbol(lib, library, $name)? }
            };
        }
        Ok(RuntimeApi {
            runtime_get_version: sym!("cudaRuntimeGetVersion"),
            driver_get_version: sym!("cudaDriverGetVersion"),
            get_device_count: sym!("cudaGetDeviceCount"),
            get_device: sym!("cudaGetDevice"),
            set_device: sym!("cudaSetDevice"),
            pointer_get_attributes: sym!("cudaPointerGetAttributes"),
            malloc: sym!("cudaMalloc"),
            malloc_managed: sym!("cudaMallocManaged"),
            free: sym!("cudaFree"),
            host_alloc: sym!("cudaHostAlloc"),
            free_host: sym!("cudaFreeHost"),
            memcpy: sym!("cudaMemcpy"),
            memcpy_async: sym!("cudaMemcpyAsync"),
            memset: sym!("cudaMemset"),
            stream_create_with_flags: sym!("cudaStreamCreateWithFlags"),
            stream_destroy: sym!("cudaStreamDestroy"),
            stream_synchronize: sym!("cudaStreamSynchronize"),
            event_create_with_flags: sym!("cudaEventCreateWithFlags"),
            event_record: sym!("cudaEventRecord"),
            event_synchronize: sym!("cudaEventSynchronize"),
            event_query: sym!("cudaEventQuery"),
            event_destroy: sym!("cudaEventDestroy"),
            launch_host_func: sym!("cudaLaunchHostFunc"),
            get_error_string: sym!("cudaGetErrorString"),
            get_error_name: sym!("cudaGetErrorName"),
        })
    }
}

impl DriverApi {
    /// Resolve every entry point; the first missing one is the error.
    fn resolve(lib: &Library, library: &str) -> HipResult<Self> {
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

/// The HIP error number for a CUDA runtime (`cudaError_t`) or driver (`CUresult`) code.
///
/// The one table of the NVIDIA platform. HIP numbered its errors after CUDA's, so most codes map to
/// themselves; the few CUDA-only codes map to the HIP error of the same meaning, and anything else
/// is `hipErrorUnknown` (the caller keeps the CUDA number in the error's detail text).
pub fn hip_code(cuda: i32) -> HipErrorCode {
    let hip = match cuda {
        // cudaSuccess / CUDA_SUCCESS.
        0 => 0,
        // InvalidValue, MemoryAllocation / OUT_OF_MEMORY, InitializationError / NOT_INITIALIZED,
        // CudartUnloading / DEINITIALIZED.
        1..=4 => cuda,
        // Profiler codes (runtime 5, driver 5-8).
        5..=8 => cuda,
        // cudaErrorInvalidConfiguration, InvalidPitchValue, InvalidSymbol.
        9 | 12 | 13 => cuda,
        // cudaErrorInvalidHostPointer: HIP has no twin; it is an invalid argument.
        16 => 1,
        // cudaErrorInvalidDevicePointer, cudaErrorInvalidMemcpyDirection.
        17 | 21 => cuda,
        // cudaErrorStubLibrary, cudaErrorInsufficientDriver, cudaErrorCallRequiresNewerDriver:
        // the driver cannot serve this runtime.
        34..=36 => 35,
        // cudaErrorMissingConfiguration, cudaErrorInvalidDeviceFunction.
        52 | 98 => cuda,
        // NoDevice, InvalidDevice.
        100 | 101 => cuda,
        // InvalidKernelImage / INVALID_IMAGE; DeviceUninitialized / INVALID_CONTEXT (both are
        // hipErrorInvalidContext); CONTEXT_ALREADY_CURRENT; mapping, ECC, limit, peer and PTX codes.
        200..=202 | 205..=219 => cuda,
        // InvalidSource, FileNotFound, SharedObjectSymbolNotFound, SharedObjectInitFailed,
        // OperatingSystem.
        300..=304 => cuda,
        // InvalidResourceHandle / INVALID_HANDLE, IllegalState.
        400 | 401 => cuda,
        // cudaErrorSymbolNotFound / CUDA_ERROR_NOT_FOUND: hipErrorNotFound.
        500 => cuda,
        // NotReady.
        600 => cuda,
        // IllegalAddress, LaunchOutOfResources, LaunchTimeout, PeerAccessAlreadyEnabled,
        // PeerAccessNotEnabled, SetOnActiveProcess / PRIMARY_CONTEXT_ACTIVE, ContextIsDestroyed,
        // Assert, HostMemoryAlreadyRegistered, HostMemoryNotRegistered.
        700..=702 | 704 | 705 | 708..=710 | 712 | 713 => cuda,
        // LaunchFailure, CooperativeLaunchTooLarge.
        719 | 720 => cuda,
        // NotSupported.
        801 => cuda,
        // Unknown.
        999 => cuda,
        _ => 999,
    };
    HipErrorCode(hip)
}

/// Decode a `cudaMemoryType` (CUDA 11+ numbering).
pub fn decode_memory_type(memory_type: i32) -> HipResult<MemoryKind> {
    match memory_type {
        0 => Ok(MemoryKind::Unregistered),
        1 => Ok(MemoryKind::Host),
        2 => Ok(MemoryKind::Device),
        3 => Ok(MemoryKind::Managed),
        other => Err(HipError::Unexpected {
            call: "cudaPointerGetAttributes",
            detail: format!("type {other} is not a cudaMemoryType"),
        }),
    }
}

/// Decode a driver `CUmemorytype` (Host=1, Device=2, Array=3, Unified=4).
pub fn decode_driver_memory_type(memory_type: u32) -> HipResult<MemoryKind> {
    match memory_type {
        1 => Ok(MemoryKind::Host),
        2 => Ok(MemoryKind::Device),
        3 => Ok(MemoryKind::Array),
        4 => Ok(MemoryKind::Managed),
        other => Err(HipError::Unexpected {
            call: "cuPointerGetAttribute",
            detail: format!("{other} is not a CUmemorytype"),
        }),
    }
}

/// The CUDA runtime and driver of an NVIDIA GPU, loaded at run time.
pub struct NvidiaRuntime {
    rt: RuntimeApi,
    drv: DriverApi,
    version: i32,
    runtime_library: String,
    driver_library: String,
    /// `cuInit(0)`'s answer, asked once before the first driver call.
    driver_init: OnceLock<i32>,
    /// The device count, asked once: a process's set of CUDA devices never changes.
    devices: OnceLock<i32>,
    /// Primary contexts this runtime retained (device -> `CUcontext`), released on drop.
    primary_contexts: Mutex<HashMap<i32, usize>>,
    // Keep the code behind every pointer in `rt` and `drv` mapped; never used after load.
    _runtime_lib: Library,
    _driver_lib: Library,
}

impl fmt::Debug for NvidiaRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NvidiaRuntime")
            .field("runtime", &self.runtime_library)
            .field("driver", &self.driver_library)
            .field("version", &self.version)
            .finish()
    }
}

/// The CUDA runtime and driver the environment names, else the default sonames.
pub fn open() -> HipResult<Arc<dyn GpuRuntime>> {
    Ok(Arc::new(NvidiaRuntime::open()?))
}

/// The CUDA runtime at `cudart` and the driver at `cuda` (paths or sonames; they may name the same
/// library, as the simulated CUDA library does).
pub fn open_libraries(cudart: &str, cuda: &str) -> HipResult<Arc<dyn GpuRuntime>> {
    Ok(Arc::new(NvidiaRuntime::load(cudart, cuda)?))
}

impl NvidiaRuntime {
    /// Load the runtime named by [`RUNTIME_LIBRARY_ENV`], else the first of
    /// [`DEFAULT_RUNTIME_LIBRARIES`] that loads, and the driver named by [`DRIVER_LIBRARY_ENV`],
    /// else [`DEFAULT_DRIVER_LIBRARY`]. A library that loads but lacks a symbol is an error; the
    /// next name is not tried, because a broken install should be reported, not papered over.
    pub fn open() -> HipResult<Self> {
        let (runtime_lib, runtime_name) = match std::env::var_os(RUNTIME_LIBRARY_ENV) {
            Some(path) => {
                let name = path.to_string_lossy().into_owned();
                (dlopen(&name)?, name)
            }
            None => {
                let mut refusals = Vec::new();
                let mut found = None;
                for name in DEFAULT_RUNTIME_LIBRARIES {
                    match dlopen(name) {
                        Ok(lib) => {
                            found = Some((lib, name.to_string()));
                            break;
                        }
                        Err(e) => refusals.push(e.to_string()),
                    }
                }
                found.ok_or_else(|| HipError::Load {
                    library: DEFAULT_RUNTIME_LIBRARIES.join(", "),
                    reason: refusals.join("; "),
                })?
            }
        };
        let driver_name = std::env::var_os(DRIVER_LIBRARY_ENV)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|| DEFAULT_DRIVER_LIBRARY.to_string());
        let driver_lib = dlopen(&driver_name)?;
        Self::from_libraries(runtime_lib, &runtime_name, driver_lib, &driver_name)
    }

    /// Load the CUDA runtime at `cudart` and the driver at `cuda`.
    pub fn load(cudart: &str, cuda: &str) -> HipResult<Self> {
        let runtime_lib = dlopen(cudart)?;
        let driver_lib = dlopen(cuda)?;
        Self::from_libraries(runtime_lib, cudart, driver_lib, cuda)
    }

    fn from_libraries(
        runtime_lib: Library,
        runtime_name: &str,
        driver_lib: Library,
        driver_name: &str,
    ) -> HipResult<Self> {
        let rt = RuntimeApi::resolve(&runtime_lib, runtime_name)?;
        let drv = DriverApi::resolve(&driver_lib, driver_name)?;
        let mut version = 0i32;
        // SAFETY: `version` is a valid out-pointer for the duration of the call.
        let rc = unsafe { (rt.runtime_get_version)(&mut version) };
        let runtime = NvidiaRuntime {
            rt,
            drv,
            version,
            runtime_library: runtime_name.to_string(),
            driver_library: driver_name.to_string(),
            driver_init: OnceLock::new(),
            devices: OnceLock::new(),
            primary_contexts: Mutex::new(HashMap::new()),
            _runtime_lib: runtime_lib,
            _driver_lib: driver_lib,
        };
        runtime.check("cudaRuntimeGetVersion", rc)?;
        Ok(runtime)
    }

    /// The CUDA runtime version (`cudaRuntimeGetVersion`, e.g. 13000 for CUDA 13.0).
    pub fn runtime_version(&self) -> i32 {
        self.version
    }

    /// The CUDA version the installed driver supports (`cudaDriverGetVersion`; 0 without a driver).
    pub fn driver_version(&self) -> HipResult<i32> {
        let mut v = 0i32;
        // SAFETY: `v` is a valid out-pointer.
        let rc = unsafe { (self.rt.driver_get_version)(&mut v) };
        self.check("cudaDriverGetVersion", rc)?;
        Ok(v)
    }

    /// The driver API's own version answer (`cuDriverGetVersion`).
    pub fn driver_api_version(&self) -> HipResult<i32> {
        let mut v = 0i32;
        // SAFETY: `v` is a valid out-pointer.
        let rc = unsafe { (self.drv.driver_get_version)(&mut v) };
        self.check_driver("cuDriverGetVersion", rc)?;
        Ok(v)
    }

    /// A runtime-API failure of `call`, with the CUDA name and text in the detail.
    fn check(&self, call: &'static str, rc: i32) -> HipResult<()> {
        if rc == 0 {
            return Ok(());
        }
        let name = c_text(
            // SAFETY: cudaGetErrorName takes any integer and returns a static string or NULL.
            unsafe { (self.rt.get_error_name)(rc) },
        )
        .unwrap_or_else(|| "cudaError_t".to_string());
        let text = c_text(
            // SAFETY: as for cudaGetErrorName.
            unsafe { (self.rt.get_error_string)(rc) },
        );
        let detail = match text {
            Some(text) => format!("{name} (CUDA error {rc}): {text}"),
            None => format!("{name} (CUDA error {rc})"),
        };
        Err(HipError::Call {
            call,
            code: hip_code(rc),
            detail: Some(detail),
        })
    }

    /// A driver-API failure of `call` (the driver's own strings are not part of our symbol set).
    fn check_driver(&self, call: &'static str, rc: i32) -> HipResult<()> {
        if rc == 0 {
            return Ok(());
        }
        Err(HipError::Call {
            call,
            code: hip_code(rc),
            detail: Some(format!("CUresult {rc}")),
        })
    }

    /// `cuInit(0)`, once per runtime, before any other driver call.
    fn driver(&self) -> HipResult<&DriverApi> {
        let rc = *self.driver_init.get_or_init(|| {
            // SAFETY: cuInit takes a plain flags word, which must be 0.
            unsafe { (self.drv.init)(0) }
        });
        self.check_driver("cuInit", rc)?;
        Ok(&self.drv)
    }

    /// The device count, asked of the runtime once.
    fn cached_device_count(&self) -> HipResult<i32> {
        if let Some(n) = self.devices.get() {
            return Ok(*n);
        }
        let n = self.device_count()?;
        Ok(*self.devices.get_or_init(|| n))
    }

    /// The primary context of `device`, retained on first use and kept until this runtime drops.
    fn primary_context(&self, device: i32) -> HipResult<RawContext> {
        let drv = self.driver()?;
        let mut contexts = self
            .primary_contexts
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(ctx) = contexts.get(&device) {
            return Ok(*ctx as RawContext);
        }
        let mut handle = 0i32;
        // SAFETY: `handle` is a valid out-pointer; the driver validates the ordinal.
        let rc = unsafe { (drv.device_get)(&mut handle, device) };
        self.check_driver("cuDeviceGet", rc)?;
        let mut ctx: RawContext = std::ptr::null_mut();
        // SAFETY: `ctx` is a valid out-pointer and `handle` a device the driver just handed out.
        let rc = unsafe { (drv.primary_ctx_retain)(&mut ctx, handle) };
        self.check_driver("cuDevicePrimaryCtxRetain", rc)?;
        contexts.insert(device, ctx as usize);
        Ok(ctx)
    }

    /// Make the primary context of `device` current until the guard drops, unless it already is.
    fn enter_context(&self, device: i32) -> HipResult<ContextGuard<'_>> {
        let target = self.primary_context(device)?;
        let drv = self.driver()?;
        let mut previous: RawContext = std::ptr::null_mut();
        // SAFETY: `previous` is a valid out-pointer.
        let rc = unsafe { (drv.ctx_get_current)(&mut previous) };
        self.check_driver("cuCtxGetCurrent", rc)?;
        if previous == target {
            return Ok(ContextGuard {
                drv,
                previous: None,
            });
        }
        // SAFETY: `target` is a primary context this runtime retained and still holds.
        let rc = unsafe { (drv.ctx_set_current)(target) };
        self.check_driver("cuCtxSetCurrent", rc)?;
        Ok(ContextGuard {
            drv,
            previous: Some(previous),
        })
    }

    /// Make `device` the caller's current device until the guard drops, unless it already is.
    fn enter_device(&self, device: i32) -> HipResult<DeviceGuard<'_>> {
        let current = self.current_device()?;
        if current == device {
            return Ok(DeviceGuard {
                rt: &self.rt,
                previous: None,
            });
        }
        self.set_device(device)?;
        Ok(DeviceGuard {
            rt: &self.rt,
            previous: Some(current),
        })
    }

    /// Restore the caller's current device when the guard drops, if something changed it.
    fn keep_device(&self) -> HipResult<DeviceKeeper<'_>> {
        Ok(DeviceKeeper {
            runtime: self,
            device: self.current_device()?,
        })
    }

    /// Switch to the device owning `ptr` for the length of the guard. With one device there is
    /// nothing to switch to, and the pointer is not even looked up.
    fn enter_device_of(&self, ptr: usize) -> HipResult<DeviceGuard<'_>> {
        let idle = DeviceGuard {
            rt: &self.rt,
            previous: None,
        };
        if self.cached_device_count()? <= 1 {
            return Ok(idle);
        }
        let attr = self.raw_attributes(ptr)?;
        match attr {
            Some(a) if a.device >= 0 && matches!(a.memory_type, 2 | 3) => {
                self.enter_device(a.device)
            }
            _ => Ok(idle),
        }
    }

    /// `cudaPointerGetAttributes`; `None` when the runtime refuses the pointer as an invalid value
    /// (what CUDA before 11 said of pageable memory).
    fn raw_attributes(&self, ptr: usize) -> HipResult<Option<RawPointerAttributes>> {
        let mut slot = PointerAttributesSlot::default();
        // SAFETY: `slot` starts with the out-struct and is larger than it; `ptr` is only looked up.
        let rc = unsafe { (self.rt.pointer_get_attributes)(&mut slot.attr, ptr as *const c_void) };
        if rc == CUDA_INVALID_VALUE {
            return Ok(None);
        }
        self.check("cudaPointerGetAttributes", rc)?;
        Ok(Some(slot.attr))
    }

    /// Kind and device of `ptr` asked of the driver, for pointers the runtime would not describe.
    fn driver_kind(&self, ptr: usize) -> HipResult<(MemoryKind, i32)> {
        let drv = self.driver()?;
        let mut memory_type = 0u32;
        // SAFETY: MEMORY_TYPE writes one `unsigned int` into `memory_type`.
        let rc = unsafe {
            (drv.pointer_get_attribute)(
                (&mut memory_type as *mut u32).cast(),
                CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                ptr as DevicePtr,
            )
        };
        if rc == CUDA_INVALID_VALUE {
            return Ok((MemoryKind::Unregistered, -1));
        }
        self.check_driver("cuPointerGetAttribute", rc)?;
        let mut kind = decode_driver_memory_type(memory_type)?;
        if kind == MemoryKind::Device {
            let mut managed = 0i32;
            // SAFETY: IS_MANAGED writes one `int` into `managed`.
            let rc = unsafe {
                (drv.pointer_get_attribute)(
                    (&mut managed as *mut i32).cast(),
                    CU_POINTER_ATTRIBUTE_IS_MANAGED,
                    ptr as DevicePtr,
                )
            };
            self.check_driver("cuPointerGetAttribute", rc)?;
            if managed != 0 {
                kind = MemoryKind::Managed;
            }
        }
        let mut device = -1i32;
        // SAFETY: DEVICE_ORDINAL writes one `int` into `device`.
        let rc = unsafe {
            (drv.pointer_get_attribute)(
                (&mut device as *mut i32).cast(),
                CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                ptr as DevicePtr,
            )
        };
        self.check_driver("cuPointerGetAttribute", rc)?;
        Ok((kind, device))
    }

    /// Base and length of the allocation holding `ptr`, asked with `device`'s primary context
    /// current (the caller's context is restored before returning).
    fn address_range(&self, ptr: usize, device: i32) -> HipResult<(usize, usize)> {
        // Switching driver contexts moves the runtime's current device with them, and restoring a
        // NULL context does not move it back: the device is restored on its own, after the context.
        let _device = self.keep_device()?;
        let _context = self.enter_context(device.max(0))?;
        let mut base: DevicePtr = 0;
        let mut len = 0usize;
        // SAFETY: both out-pointers are valid; the driver only looks `ptr` up.
        let rc = unsafe { (self.drv.mem_get_address_range)(&mut base, &mut len, ptr as DevicePtr) };
        self.check_driver("cuMemGetAddressRange_v2", rc)?;
        Ok((base as usize, len))
    }
}

impl Drop for NvidiaRuntime {
    fn drop(&mut self) {
        let contexts = std::mem::take(
            self.primary_contexts
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for device in contexts.into_keys() {
            // SAFETY: this runtime retained the primary context of `device` exactly once. A failure
            // cannot be reported from drop; the context then stays retained, which is harmless.
            let _ = unsafe { (self.drv.primary_ctx_release)(device) };
        }
    }
}

/// `dlopen` with `RTLD_NODELETE`: the CUDA runtime runs threads and registers exit handlers, so
/// unmapping it when the last handle drops could pull code from under them.
fn dlopen(name: &str) -> HipResult<Library> {
    let flags =
        libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL | libc::RTLD_NODELETE;
    // SAFETY: loading runs the library's initialisers; those of a CUDA runtime or driver are sound
    // to run in any process, which is the contract of naming the library in the environment.
    unsafe { libloading::os::unix::Library::open(Some(name), flags) }
        .map(Library::from)
        .map_err(|e| HipError::Load {
            library: name.to_string(),
            reason: e.to_string(),
        })
}

/// A C string the runtime returned, owned; `None` for NULL.
fn c_text(text: *const c_char) -> Option<String> {
    if text.is_null() {
        return None;
    }
    // SAFETY: non-null answers of cudaGetErrorName/String are NUL-terminated static strings.
    Some(
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// Restores the caller's current device on drop.
struct DeviceGuard<'a> {
    rt: &'a RuntimeApi,
    previous: Option<i32>,
}

impl Drop for DeviceGuard<'_> {
    fn drop(&mut self) {
        if let Some(device) = self.previous {
            // SAFETY: plain integer argument, a device that was current a moment ago. A failure
            // cannot be reported from drop.
            let _ = unsafe { (self.rt.set_device)(device) };
        }
    }
}

/// Puts `device` back as the current device on drop, if it no longer is.
struct DeviceKeeper<'a> {
    runtime: &'a NvidiaRuntime,
    device: i32,
}

impl Drop for DeviceKeeper<'_> {
    fn drop(&mut self) {
        if self.runtime.current_device().ok() != Some(self.device) {
            // A failure cannot be reported from drop.
            let _ = self.runtime.set_device(self.device);
        }
    }
}

/// Restores the caller's current driver context on drop.
struct ContextGuard<'a> {
    drv: &'a DriverApi,
    previous: Option<RawContext>,
}

impl Drop for ContextGuard<'_> {
    fn drop(&mut self) {
        if let Some(ctx) = self.previous {
            // SAFETY: `ctx` was the caller's current context (or NULL) a moment ago. A failure
            // cannot be reported from drop.
            let _ = unsafe { (self.drv.ctx_set_current)(ctx) };
        }
    }
}

/// The C side of [`GpuRuntime::launch_host_func`]: runs the boxed closure exactly once.
extern "C" fn host_fn_trampoline(user_data: *mut c_void) {
    if user_data.is_null() {
        return;
    }
    // SAFETY: `user_data` is the `Box<HostFn>` leaked by `launch_host_func`, handed to the runtime
    // for exactly one call; ownership comes back here.
    let f = unsafe { Box::from_raw(user_data.cast::<HostFn>()) };
    // A panic must not unwind into the runtime's thread; the closure's owner sees its side effects
    // missing, which is all a host function can report anyway.
    let _ = catch_unwind(AssertUnwindSafe(*f));
}

impl GpuRuntime for NvidiaRuntime {
    /// GPUDirect Storage through cuFile, only where the nvidia-fs driver is loaded (see
    /// [`crate::p2p::cufile`]): without it cuFile is one more staged engine, and ours is faster.
    fn p2p(&self) -> Option<Arc<dyn crate::P2pDriver>> {
        crate::p2p::cufile::cufile_driver()
    }

    fn info(&self) -> RuntimeInfo {
        RuntimeInfo {
            platform: Platform::Nvidia,
            runtime_version: self.version,
            library: if self.runtime_library == self.driver_library {
                self.runtime_library.clone()
            } else {
                format!("{}, {}", self.runtime_library, self.driver_library)
            },
        }
    }

    fn device_count(&self) -> HipResult<i32> {
        let mut n = 0;
        // SAFETY: `n` is a valid out-pointer.
        let rc = unsafe { (self.rt.get_device_count)(&mut n) };
        self.check("cudaGetDeviceCount", rc)?;
        Ok(n)
    }

    fn current_device(&self) -> HipResult<i32> {
        let mut d = 0;
        // SAFETY: `d` is a valid out-pointer.
        let rc = unsafe { (self.rt.get_device)(&mut d) };
        self.check("cudaGetDevice", rc)?;
        Ok(d)
    }

    fn set_device(&self, device: i32) -> HipResult<()> {
        // SAFETY: plain integer argument; the runtime validates it.
        let rc = unsafe { (self.rt.set_device)(device) };
        self.check("cudaSetDevice", rc)
    }

    fn pointer_info(&self, ptr: usize) -> HipResult<PointerInfo> {
        let unregistered = PointerInfo {
            kind: MemoryKind::Unregistered,
            device: -1,
            base: 0,
            len: 0,
        };
        let (kind, device) = match self.raw_attributes(ptr)? {
            Some(attr) => (decode_memory_type(attr.memory_type)?, attr.device),
            None => self.driver_kind(ptr)?,
        };
        let (base, len) = match kind {
            MemoryKind::Unregistered => return Ok(unregistered),
            MemoryKind::Host => self.address_range(ptr, device).unwrap_or((ptr, 0)),
            MemoryKind::Device | MemoryKind::Managed | MemoryKind::Array => {
                self.address_range(ptr, device)?
            }
        };
        Ok(PointerInfo {
            kind,
            device,
            base,
            len,
        })
    }

    fn device_alloc(&self, len: usize) -> HipResult<usize> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer.
        let rc = unsafe { (self.rt.malloc)(&mut p, len) };
        self.check("cudaMalloc", rc)?;
        Ok(p as usize)
    }

    fn managed_alloc(&self, len: usize) -> HipResult<usize> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer.
        let rc = unsafe { (self.rt.malloc_managed)(&mut p, len, MEM_ATTACH_GLOBAL) };
        self.check("cudaMallocManaged", rc)?;
        Ok(p as usize)
    }

    unsafe fn device_free(&self, ptr: usize) -> HipResult<()> {
        // cudaFree synchronises with the device that owns the memory: make it current.
        let _device = self.enter_device_of(ptr)?;
        // SAFETY: the caller guarantees `ptr` is this runtime's device or managed allocation with
        // no copy in flight.
        let rc = unsafe { (self.rt.free)(ptr as *mut c_void) };
        self.check("cudaFree", rc)
    }

    fn host_alloc(&self, len: usize) -> HipResult<NonNull<u8>> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer.
        let rc = unsafe { (self.rt.host_alloc)(&mut p, len, HOST_ALLOC_PORTABLE) };
        self.check("cudaHostAlloc", rc)?;
        NonNull::new(p.cast::<u8>())
            .ok_or_else(|| HipError::call("cudaHostAlloc", HipErrorCode::OUT_OF_MEMORY))
    }

    unsafe fn host_free(&self, ptr: NonNull<u8>) -> HipResult<()> {
        // SAFETY: the caller guarantees `ptr` came from `host_alloc` and is no longer used.
        let rc = unsafe { (self.rt.free_host)(ptr.as_ptr().cast()) };
        self.check("cudaFreeHost", rc)
    }

    unsafe fn copy_to_device(&self, dst: usize, src: &[u8]) -> HipResult<()> {
        let _device = self.enter_device_of(dst)?;
        // SAFETY: the caller guarantees the device range; `src` is a valid slice.
        let rc = unsafe {
            (self.rt.memcpy)(
                dst as *mut c_void,
                src.as_ptr().cast(),
                src.len(),
                CopyKind::HostToDevice as i32,
            )
        };
        self.check("cudaMemcpy", rc)
    }

    unsafe fn copy_from_device(&self, dst: &mut [u8], src: usize) -> HipResult<()> {
        let _device = self.enter_device_of(src)?;
        // SAFETY: the caller guarantees the device range; `dst` is a valid, exclusive slice.
        let rc = unsafe {
            (self.rt.memcpy)(
                dst.as_mut_ptr().cast(),
                src as *const c_void,
                dst.len(),
                CopyKind::DeviceToHost as i32,
            )
        };
        self.check("cudaMemcpy", rc)
    }

    unsafe fn memset_device(&self, dst: usize, value: u8, len: usize) -> HipResult<()> {
        let _device = self.enter_device_of(dst)?;
        // SAFETY: the caller guarantees the device range and exclusive access.
        let rc = unsafe { (self.rt.memset)(dst as *mut c_void, i32::from(value), len) };
        self.check("cudaMemset", rc)
    }

    unsafe fn copy_to_device_async(
        &self,
        dst: usize,
        src: *const u8,
        len: usize,
        stream: StreamHandle,
    ) -> HipResult<()> {
        let _device = self.enter_device_of(dst)?;
        // SAFETY: the caller guarantees both ranges stay valid until the copy completes and that
        // `stream` is a live stream of this runtime.
        let rc = unsafe {
            (self.rt.memcpy_async)(
                dst as *mut c_void,
                src.cast(),
                len,
                CopyKind::HostToDevice as i32,
                stream.as_raw() as RawStream,
            )
        };
        self.check("cudaMemcpyAsync", rc)
    }

    unsafe fn copy_from_device_async(
        &self,
        dst: *mut u8,
        src: usize,
        len: usize,
        stream: StreamHandle,
    ) -> HipResult<()> {
        let _device = self.enter_device_of(src)?;
        // SAFETY: the caller guarantees both ranges stay valid until the copy completes and that
        // `stream` is a live stream of this runtime.
        let rc = unsafe {
            (self.rt.memcpy_async)(
                dst.cast(),
                src as *const c_void,
                len,
                CopyKind::DeviceToHost as i32,
                stream.as_raw() as RawStream,
            )
        };
        self.check("cudaMemcpyAsync", rc)
    }

    fn stream_create(&self) -> HipResult<StreamHandle> {
        let mut s: RawStream = std::ptr::null_mut();
        // SAFETY: `s` is a valid out-pointer.
        let rc = unsafe { (self.rt.stream_create_with_flags)(&mut s, STREAM_ORDERED_WITH_NULL) };
        self.check("cudaStreamCreateWithFlags", rc)?;
        // SAFETY: the runtime just created `s`; nothing has destroyed it.
        Ok(unsafe { StreamHandle::from_raw(s as usize) })
    }

    unsafe fn stream_destroy(&self, stream: StreamHandle) -> HipResult<()> {
        // SAFETY: the caller guarantees `stream` is a live stream of this runtime.
        let rc = unsafe { (self.rt.stream_destroy)(stream.as_raw() as RawStream) };
        self.check("cudaStreamDestroy", rc)
    }

    unsafe fn stream_synchronize(&self, stream: StreamHandle) -> HipResult<()> {
        // SAFETY: the caller guarantees `stream` is a live stream of this runtime.
        let rc = unsafe { (self.rt.stream_synchronize)(stream.as_raw() as RawStream) };
        self.check("cudaStreamSynchronize", rc)
    }

    fn event_create(&self) -> HipResult<EventHandle> {
        let mut e: RawEvent = std::ptr::null_mut();
        // SAFETY: `e` is a valid out-pointer.
        let rc = unsafe { (self.rt.event_create_with_flags)(&mut e, EVENT_DISABLE_TIMING) };
        self.check("cudaEventCreateWithFlags", rc)?;
        // SAFETY: the runtime just created `e`; nothing has destroyed it.
        Ok(unsafe { EventHandle::from_raw(e as usize) })
    }

    unsafe fn event_record(&self, event: EventHandle, stream: StreamHandle) -> HipResult<()> {
        // SAFETY: the caller guarantees both handles are live handles of this runtime.
        let rc = unsafe {
            (self.rt.event_record)(event.as_raw() as RawEvent, stream.as_raw() as RawStream)
        };
        self.check("cudaEventRecord", rc)
    }

    unsafe fn event_synchronize(&self, event: EventHandle) -> HipResult<()> {
        // SAFETY: the caller guarantees `event` is a live event of this runtime.
        let rc = unsafe { (self.rt.event_synchronize)(event.as_raw() as RawEvent) };
        self.check("cudaEventSynchronize", rc)
    }

    unsafe fn event_query(&self, event: EventHandle) -> HipResult<bool> {
        // SAFETY: the caller guarantees `event` is a live event of this runtime.
        let rc = unsafe { (self.rt.event_query)(event.as_raw() as RawEvent) };
        if rc == CUDA_NOT_READY {
            return Ok(false);
        }
        self.check("cudaEventQuery", rc)?;
        Ok(true)
    }

    unsafe fn event_destroy(&self, event: EventHandle) -> HipResult<()> {
        // SAFETY: the caller guarantees `event` is a live event of this runtime.
        let rc = unsafe { (self.rt.event_destroy)(event.as_raw() as RawEvent) };
        self.check("cudaEventDestroy", rc)
    }

    unsafe fn launch_host_func(&self, stream: StreamHandle, f: HostFn) -> HipResult<()> {
        let user_data = Box::into_raw(Box::new(f)).cast::<c_void>();
        // SAFETY: the caller guarantees `stream` is a live stream of this runtime; the trampoline
        // matches cudaHostFn_t and takes ownership of `user_data` when the runtime calls it, which
        // it does exactly once if the launch succeeds.
        let rc = unsafe {
            (self.rt.launch_host_func)(
                stream.as_raw() as RawStream,
                Some(host_fn_trampoline),
                user_data,
            )
        };
        if rc != 0 {
            // SAFETY: the launch failed, so the runtime never took `user_data`; it is still ours.
            drop(unsafe { Box::from_raw(user_data.cast::<HostFn>()) });
        }
        self.check("cudaLaunchHostFunc", rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_codes_with_a_hip_twin_keep_their_number() {
        for code in [
            0, 1, 2, 3, 4, 17, 21, 35, 100, 101, 201, 302, 400, 500, 600, 700, 712, 713, 719, 801,
            999,
        ] {
            assert_eq!(hip_code(code), HipErrorCode(code), "CUDA {code}");
        }
        assert_eq!(hip_code(2), HipErrorCode::OUT_OF_MEMORY);
        assert_eq!(hip_code(201), HipErrorCode::INVALID_CONTEXT);
        assert_eq!(hip_code(400), HipErrorCode::INVALID_HANDLE);
        assert_eq!(hip_code(500), HipErrorCode::NOT_FOUND);
        assert_eq!(hip_code(600), HipErrorCode::NOT_READY);
    }

    #[test]
    fn cuda_only_codes_map_by_meaning_and_the_rest_are_unknown() {
        assert_eq!(hip_code(16), HipErrorCode::INVALID_VALUE);
        assert_eq!(hip_code(34), HipErrorCode::INSUFFICIENT_DRIVER);
        assert_eq!(hip_code(36), HipErrorCode::INSUFFICIENT_DRIVER);
        for code in [-1, 10, 46, 800, 802, 900, 1000, i32::MAX] {
            assert_eq!(hip_code(code), HipErrorCode::UNKNOWN, "CUDA {code}");
        }
    }

    #[test]
    fn memory_types_decode_by_match() {
        assert_eq!(decode_memory_type(0).unwrap(), MemoryKind::Unregistered);
        assert_eq!(decode_memory_type(1).unwrap(), MemoryKind::Host);
        assert_eq!(decode_memory_type(2).unwrap(), MemoryKind::Device);
        assert_eq!(decode_memory_type(3).unwrap(), MemoryKind::Managed);
        for bad in [-1, 4, 10] {
            assert!(matches!(
                decode_memory_type(bad),
                Err(HipError::Unexpected { .. })
            ));
        }
        assert_eq!(decode_driver_memory_type(1).unwrap(), MemoryKind::Host);
        assert_eq!(decode_driver_memory_type(2).unwrap(), MemoryKind::Device);
        assert_eq!(decode_driver_memory_type(3).unwrap(), MemoryKind::Array);
        assert_eq!(decode_driver_memory_type(4).unwrap(), MemoryKind::Managed);
        assert!(decode_driver_memory_type(0).is_err());
    }

    #[test]
    fn libraries_that_are_not_there_are_load_errors() {
        assert!(matches!(
            NvidiaRuntime::load("/nonexistent/libcudart.so.13", "/nonexistent/libcuda.so.1"),
            Err(HipError::Load { .. })
        ));
    }
}
