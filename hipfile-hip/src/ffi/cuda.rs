//! What only NVIDIA's libraries have, as typed operations: the CUDA runtime's entry points
//! beyond those it shares with HIP ([`CommonApi`], spelled by [`CUDA`]), the driver's (pointer
//! attributes, contexts, stream memory operations), and cuFile ([`CuFileDriver`]), all resolved at
//! load. Driver calls answer [`Failed`] (the call and its `CUresult`) for [`crate::nvidia`] to turn
//! into HIP errors; what the answers mean is its business.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::{Mutex, PoisonError};

use libloading::Library;

use super::runtime_api::{
    c_text, dlopen, p2p_driver_by_transfer, symbol, CommonApi, Dialect, LiveContext, LiveStream,
    MappedWord, RawStream, RetiredContext,
};
use crate::error::{HipError, HipResult};
use crate::runtime::ContextHandle;
use crate::transfer::{checked_count, errno_error, Direction, MAX_P2P_TRANSFER};

/// `CUcontext`.
type RawContext = *mut c_void;
/// `CUdeviceptr`.
type DevicePtr = u64;

/// `cudaErrorInvalidValue` (and `CUDA_ERROR_INVALID_VALUE`).
pub(crate) const CUDA_INVALID_VALUE: i32 = 1;
/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`: a `CUmemorytype` (`unsigned int`).
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: i32 = 2;
/// `CU_POINTER_ATTRIBUTE_IS_MANAGED`: an `int` (boolean).
pub const CU_POINTER_ATTRIBUTE_IS_MANAGED: i32 = 8;
/// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`: an `int`.
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: i32 = 9;

/// A driver call that failed: its name and its `CUresult`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Failed {
    pub call: &'static str,
    pub rc: i32,
}

/// `Ok` for `CUDA_SUCCESS`, else the failure of `call`.
fn succeeded(call: &'static str, rc: i32) -> Result<(), Failed> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Failed { call, rc })
    }
}

/// `cudaPointerAttributes` of CUDA 11 and later; `memory_type` is a plain integer, decoded by
/// [`crate::nvidia::decode_memory_type`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawPointerAttributes {
    pub memory_type: i32,
    pub device: i32,
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
    device_get_pci_bus_id: "cudaDeviceGetPCIBusId",
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
pub(crate) struct RuntimeApi {
    pub common: CommonApi,
    driver_get_version: unsafe extern "C" fn(*mut i32) -> i32,
    pointer_get_attributes: unsafe extern "C" fn(*mut RawPointerAttributes, *const c_void) -> i32,
    get_error_name: unsafe extern "C" fn(i32) -> *const c_char,
    /// `cudaStreamGetDevice`, exported from CUDA 12.8 on.
    stream_get_device: Option<unsafe extern "C" fn(RawStream, *mut i32) -> i32>,
}

/// A stream memory operation the driver offers (the wait, or the write of the same signature).
#[derive(Clone, Copy)]
pub(crate) struct StreamWaitValue {
    /// `cuStreamWaitValue32_v2`, else `cuStreamWaitValue32`:
    /// `(CUstream, CUdeviceptr, cuuint32_t value, unsigned flags)`.
    call: unsafe extern "C" fn(RawStream, DevicePtr, u32, u32) -> i32,
    /// The symbol resolved (the call name its errors carry).
    pub name: &'static str,
    /// Whether it is the legacy entry point, usable only where the device attribute
    /// `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1` says so; the `_v2` one is available on
    /// every device.
    pub legacy: bool,
}

/// Every CUDA driver entry point the platform calls, resolved at load.
#[derive(Clone, Copy)]
pub(crate) struct DriverApi {
    init: unsafe extern "C" fn(u32) -> i32,
    driver_get_version: unsafe extern "C" fn(*mut i32) -> i32,
    mem_get_address_range: unsafe extern "C" fn(*mut DevicePtr, *mut usize, DevicePtr) -> i32,
    pointer_get_attribute: unsafe extern "C" fn(*mut c_void, i32, DevicePtr) -> i32,
    primary_ctx_retain: unsafe extern "C" fn(*mut RawContext, i32) -> i32,
    primary_ctx_release: unsafe extern "C" fn(i32) -> i32,
    ctx_get_current: unsafe extern "C" fn(*mut RawContext) -> i32,
    ctx_set_current: unsafe extern "C" fn(RawContext) -> i32,
    device_get: unsafe extern "C" fn(*mut i32, i32) -> i32,
    /// Optional: a driver without it has no stream memory operations.
    pub stream_wait_value: Option<StreamWaitValue>,
    /// The stream memory write, `cuStreamWriteValue32_v2` else `cuStreamWriteValue32` (same
    /// signature and availability as the wait): optional as the wait.
    pub stream_write_value: Option<StreamWaitValue>,
    /// `cuStreamGetCtx`, `cuCtxGetDevice` and `cuDeviceGetAttribute`: optional, the device of a
    /// stream through the driver, and the legacy stream memory operations check.
    stream_get_ctx: Option<unsafe extern "C" fn(RawStream, *mut RawContext) -> i32>,
    ctx_get_device: Option<unsafe extern "C" fn(*mut i32) -> i32>,
    device_get_attribute: Option<unsafe extern "C" fn(*mut i32, i32, i32) -> i32>,
    /// `cuCtxCreate_v2` and `cuCtxDestroy_v2`: optional, contexts of the library's own
    /// ([`crate::GpuRuntime::context_create`]).
    ctx_create: Option<unsafe extern "C" fn(*mut RawContext, u32, i32) -> i32>,
    ctx_destroy: Option<unsafe extern "C" fn(RawContext) -> i32>,
    /// `cuCtxPopCurrent_v2`: optional, takes a just-made context off the thread's stack.
    ctx_pop_current: Option<unsafe extern "C" fn(*mut RawContext) -> i32>,
}

impl RuntimeApi {
    /// Resolve every entry point; the first missing one is the error.
    pub(crate) fn resolve(lib: &Library, library: &str) -> HipResult<Self> {
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
    pub(crate) fn resolve(lib: &Library, library: &str) -> HipResult<Self> {
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
            stream_wait_value: resolve_stream_memop(
                lib,
                library,
                ["cuStreamWaitValue32_v2", "cuStreamWaitValue32"],
            ),
            stream_write_value: resolve_stream_memop(
                lib,
                library,
                ["cuStreamWriteValue32_v2", "cuStreamWriteValue32"],
            ),
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

/// The first of `candidates` (a `_v2` entry point, then its legacy twin of the same signature)
/// that the driver exports, else none.
fn resolve_stream_memop(
    lib: &Library,
    library: &str,
    candidates: [&'static str; 2],
) -> Option<StreamWaitValue> {
    for (name, legacy) in candidates.into_iter().zip([false, true]) {
        // SAFETY: both are declared in cuda.h as
        // `CUresult (CUstream, CUdeviceptr, cuuint32_t, unsigned int)`.
        if let Ok(call) = unsafe { symbol(lib, library, name) } {
            return Some(StreamWaitValue { call, name, legacy });
        }
    }
    None
}

impl RuntimeApi {
    /// `cudaDriverGetVersion`: `(return code, version)`.
    pub(crate) fn driver_version(&self) -> (i32, i32) {
        let mut v = 0i32;
        // SAFETY: `v` is a valid out-pointer.
        let rc = unsafe { (self.driver_get_version)(&mut v) };
        (rc, v)
    }

    /// `cudaPointerGetAttributes`: `(return code, attributes)`; `ptr` is only looked up.
    pub(crate) fn pointer_attributes(&self, ptr: usize) -> (i32, RawPointerAttributes) {
        let mut slot = PointerAttributesSlot::default();
        // SAFETY: `slot` starts with the out-struct and is larger than it; `ptr` is only looked up.
        let rc = unsafe { (self.pointer_get_attributes)(&mut slot.attr, ptr as *const c_void) };
        (rc, slot.attr)
    }

    /// `cudaGetErrorName` of `rc`.
    pub(crate) fn error_name(&self, rc: i32) -> Option<String> {
        // SAFETY: cudaGetErrorName takes any integer and returns a static string or NULL, which is
        // `c_text`'s contract.
        unsafe { c_text((self.get_error_name)(rc)) }
    }

    /// `cudaStreamGetDevice`: `(return code, device)`, `None` where the runtime lacks it.
    pub(crate) fn stream_get_device(&self, stream: LiveStream<'_>) -> Option<(i32, i32)> {
        let get = self.stream_get_device?;
        let mut device = -1;
        // SAFETY: the stream is live (vouched); `device` is a valid out-pointer.
        let rc = unsafe { get(stream.raw(), &mut device) };
        Some((rc, device))
    }
}

impl StreamWaitValue {
    /// Queue the operation on `stream` for `word` (`value`, with the operation's `flags`); the
    /// driver needs the stream's context current. The return code.
    pub(crate) fn queue(
        &self,
        stream: LiveStream<'_>,
        word: MappedWord<'_>,
        value: u32,
        flags: u32,
    ) -> i32 {
        // SAFETY: a live stream and a live, aligned word of host-mapped memory at its device
        // address (both vouched), which the host accesses only atomically.
        unsafe { (self.call)(stream.raw(), word.addr() as DevicePtr, value, flags) }
    }
}

impl DriverApi {
    /// `cuInit(0)`: the return code.
    pub(crate) fn init(&self) -> i32 {
        // SAFETY: cuInit takes a plain flags word, which must be 0.
        unsafe { (self.init)(0) }
    }

    /// `cuDriverGetVersion`.
    pub(crate) fn version(&self) -> Result<i32, Failed> {
        let mut v = 0i32;
        // SAFETY: `v` is a valid out-pointer.
        let rc = unsafe { (self.driver_get_version)(&mut v) };
        succeeded("cuDriverGetVersion", rc).map(|()| v)
    }

    /// `cuDeviceGet`: the `CUdevice` of ordinal `ordinal`.
    pub(crate) fn device(&self, ordinal: i32) -> Result<i32, Failed> {
        let mut handle = -1i32;
        // SAFETY: `handle` is a valid out-pointer; the driver validates the ordinal.
        let rc = unsafe { (self.device_get)(&mut handle, ordinal) };
        succeeded("cuDeviceGet", rc).map(|()| handle)
    }

    /// `cuMemGetAddressRange_v2`: base and length of the allocation holding `ptr`, in the current
    /// context.
    pub(crate) fn address_range(&self, ptr: usize) -> Result<(usize, usize), Failed> {
        let mut base: DevicePtr = 0;
        let mut len = 0usize;
        // SAFETY: both out-pointers are valid; the driver only looks `ptr` up.
        let rc = unsafe { (self.mem_get_address_range)(&mut base, &mut len, ptr as DevicePtr) };
        succeeded("cuMemGetAddressRange_v2", rc).map(|()| (base as usize, len))
    }

    /// `cuPointerGetAttribute` of an attribute that is one 32-bit value: `(return code, value)`.
    fn pointer_attribute(&self, attribute: i32, ptr: usize) -> (i32, u32) {
        let mut value = 0u32;
        // SAFETY: every attribute asked here writes one 32-bit value (`unsigned int` or `int`)
        // into `value`; `ptr` is only looked up.
        let rc = unsafe {
            (self.pointer_get_attribute)(
                (&mut value as *mut u32).cast(),
                attribute,
                ptr as DevicePtr,
            )
        };
        (rc, value)
    }

    /// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE` of `ptr`: `(return code, CUmemorytype)`.
    pub(crate) fn pointer_memory_type(&self, ptr: usize) -> (i32, u32) {
        self.pointer_attribute(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr)
    }

    /// `CU_POINTER_ATTRIBUTE_IS_MANAGED` of `ptr`.
    pub(crate) fn pointer_is_managed(&self, ptr: usize) -> Result<bool, Failed> {
        let (rc, managed) = self.pointer_attribute(CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr);
        succeeded("cuPointerGetAttribute", rc).map(|()| managed != 0)
    }

    /// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL` of `ptr`.
    pub(crate) fn pointer_device(&self, ptr: usize) -> Result<i32, Failed> {
        let (rc, device) = self.pointer_attribute(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr);
        succeeded("cuPointerGetAttribute", rc).map(|()| device as i32)
    }

    /// Whether the driver exports `cuDeviceGetAttribute`.
    pub(crate) fn knows_device_attributes(&self) -> bool {
        self.device_get_attribute.is_some()
    }

    /// `cuDeviceGetAttribute` of the `CUdevice` `handle`: `(return code, value)`, `None` where the
    /// driver lacks the call.
    pub(crate) fn device_attribute(&self, attribute: i32, handle: i32) -> Option<(i32, i32)> {
        let get = self.device_get_attribute?;
        let mut value = 0;
        // SAFETY: `value` is a valid out-pointer; the driver validates attribute and device.
        let rc = unsafe { get(&mut value, attribute, handle) };
        Some((rc, value))
    }

    /// Make `target` current until the guard drops (the caller's context is restored then),
    /// unless it already is.
    pub(crate) fn enter<'a>(&'a self, target: LiveContext<'a>) -> Result<ContextGuard<'a>, Failed> {
        let mut previous: RawContext = std::ptr::null_mut();
        // SAFETY: `previous` is a valid out-pointer.
        let rc = unsafe { (self.ctx_get_current)(&mut previous) };
        succeeded("cuCtxGetCurrent", rc)?;
        if previous == target.raw() {
            return Ok(ContextGuard {
                drv: self,
                previous: None,
            });
        }
        // SAFETY: `target` is live for the guard's length (vouched).
        let rc = unsafe { (self.ctx_set_current)(target.raw()) };
        succeeded("cuCtxSetCurrent", rc)?;
        Ok(ContextGuard {
            drv: self,
            previous: Some(previous),
        })
    }

    /// Whether the driver offers `cuStreamGetCtx` and `cuCtxGetDevice`.
    pub(crate) fn knows_stream_devices(&self) -> bool {
        self.stream_get_ctx.is_some() && self.ctx_get_device.is_some()
    }

    /// `cuStreamGetCtx`: the context of a live stream, live as long as the stream; `None` where
    /// the driver lacks the call.
    pub(crate) fn stream_context<'s>(
        &self,
        stream: LiveStream<'s>,
    ) -> Option<Result<LiveContext<'s>, Failed>> {
        let get = self.stream_get_ctx?;
        let mut ctx: RawContext = std::ptr::null_mut();
        // SAFETY: the stream is live (vouched); `ctx` is a valid out-pointer.
        let rc = unsafe { get(stream.raw(), &mut ctx) };
        Some(succeeded("cuStreamGetCtx", rc).map(|()| {
            // SAFETY: the driver answered the context of a live stream, which lives while the
            // stream does.
            unsafe { LiveContext::vouch(ContextHandle::from_raw(ctx as usize)) }
        }))
    }

    /// `cuCtxGetDevice`: the `CUdevice` of the current context; `None` where the driver lacks it.
    pub(crate) fn current_context_device(&self) -> Option<Result<i32, Failed>> {
        let get = self.ctx_get_device?;
        let mut handle = -1;
        // SAFETY: `handle` is a valid out-pointer.
        let rc = unsafe { get(&mut handle) };
        Some(succeeded("cuCtxGetDevice", rc).map(|()| handle))
    }

    /// Whether the driver can make, pop and destroy contexts of the library's own.
    pub(crate) fn offers_own_contexts(&self) -> bool {
        self.ctx_create.is_some() && self.ctx_destroy.is_some() && self.ctx_pop_current.is_some()
    }

    /// A context of the library's own on the `CUdevice` `handle` (`cuCtxCreate_v2`), left not
    /// current: the new context, which the driver pushed on the thread's stack, is popped off it
    /// again, so the caller's is current as before. `None` where the driver lacks the calls.
    pub(crate) fn create_context(&self, handle: i32) -> Option<Result<ContextHandle, Failed>> {
        let (Some(create), Some(_), Some(pop)) =
            (self.ctx_create, self.ctx_destroy, self.ctx_pop_current)
        else {
            return None;
        };
        let mut ctx: RawContext = std::ptr::null_mut();
        // SAFETY: `ctx` is a valid out-pointer, `handle` a device the driver handed out; flags 0
        // (the default scheduling).
        let rc = unsafe { create(&mut ctx, 0, handle) };
        if let Err(e) = succeeded("cuCtxCreate_v2", rc) {
            return Some(Err(e));
        }
        // SAFETY: the driver just made `ctx`; nothing else knows it.
        let made = unsafe { ContextHandle::from_raw(ctx as usize) };
        let mut popped: RawContext = std::ptr::null_mut();
        // SAFETY: `popped` is a valid out-pointer; the new context is the top of the stack.
        let rc = unsafe { pop(&mut popped) };
        if let Err(e) = succeeded("cuCtxPopCurrent_v2", rc) {
            // SAFETY: made just above and used by nothing yet.
            let _ = self.destroy_context(unsafe { RetiredContext::vouch(made) });
            return Some(Err(e));
        }
        Some(Ok(made))
    }

    /// `cuCtxDestroy_v2` of a context of the library's own; nothing where the driver lacks it.
    pub(crate) fn destroy_context(&self, ctx: RetiredContext) -> Result<(), Failed> {
        let Some(destroy) = self.ctx_destroy else {
            return Ok(());
        };
        // SAFETY: the context came from `create_context` and nothing uses it any more (vouched).
        let rc = unsafe { destroy(ctx.raw()) };
        succeeded("cuCtxDestroy_v2", rc)
    }
}

/// Restores the caller's current driver context on drop.
pub(crate) struct ContextGuard<'a> {
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

/// The primary contexts a runtime retained (device ordinal -> `CUcontext`), each retained once,
/// on first use, and released when this drops.
pub(crate) struct PrimaryContexts {
    drv: DriverApi,
    retained: Mutex<HashMap<i32, usize>>,
}

impl PrimaryContexts {
    pub(crate) fn new(drv: DriverApi) -> Self {
        PrimaryContexts {
            drv,
            retained: Mutex::new(HashMap::new()),
        }
    }

    /// The primary context of ordinal `device`, retained on first use; live as long as `self`.
    pub(crate) fn get(&self, device: i32) -> Result<LiveContext<'_>, Failed> {
        let mut retained = self.retained.lock().unwrap_or_else(PoisonError::into_inner);
        let ctx = match retained.get(&device) {
            Some(ctx) => *ctx,
            None => {
                let handle = self.drv.device(device)?;
                let mut ctx: RawContext = std::ptr::null_mut();
                // SAFETY: `ctx` is a valid out-pointer and `handle` a device the driver just
                // handed out.
                let rc = unsafe { (self.drv.primary_ctx_retain)(&mut ctx, handle) };
                succeeded("cuDevicePrimaryCtxRetain", rc)?;
                retained.insert(device, ctx as usize);
                ctx as usize
            }
        };
        // SAFETY: retained above (or before), released only when `self` drops.
        Ok(unsafe { LiveContext::vouch(ContextHandle::from_raw(ctx)) })
    }
}

impl Drop for PrimaryContexts {
    fn drop(&mut self) {
        let retained = std::mem::take(
            self.retained
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for device in retained.into_keys() {
            // SAFETY: the primary context of `device` was retained exactly once, and no
            // `LiveContext` borrowed from `self` outlives it. A failure cannot be reported from
            // drop; the context then stays retained, which is harmless.
            let _ = unsafe { (self.drv.primary_ctx_release)(device) };
        }
    }
}

/// `CUfileError_t`: the cuFile error and the CUDA driver error.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct CuFileError {
    err: c_int,
    cu_err: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
union CuFileDescrHandle {
    fd: c_int,
    handle: *mut c_void,
}

/// `CUfileDescr_t`.
#[repr(C)]
struct CuFileDescr {
    kind: c_int,
    handle: CuFileDescrHandle,
    fs_ops: *const c_void,
}

/// `CU_FILE_HANDLE_TYPE_OPAQUE_FD`.
const HANDLE_TYPE_OPAQUE_FD: c_int = 1;

/// `CUfileOpError` values that mean the device or platform cannot do direct IO.
const NOT_INITIALIZED: c_int = 5001;
const PLATFORM_NOT_SUPPORTED: c_int = 5007;
const IO_NOT_SUPPORTED: c_int = 5008;
const DEVICE_NOT_SUPPORTED: c_int = 5009;

type CuFileHandle = *mut c_void;

#[derive(Clone, Copy)]
struct CuFileApi {
    driver_open: unsafe extern "C" fn() -> CuFileError,
    handle_register: unsafe extern "C" fn(*mut CuFileHandle, *mut CuFileDescr) -> CuFileError,
    handle_deregister: unsafe extern "C" fn(CuFileHandle),
    read: unsafe extern "C" fn(CuFileHandle, *mut c_void, usize, i64, i64) -> isize,
    write: unsafe extern "C" fn(CuFileHandle, *const c_void, usize, i64, i64) -> isize,
}

/// A registered cuFile handle and the identity of the file it was registered for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CachedHandle {
    dev: u64,
    ino: u64,
    handle: usize,
}

/// The GPUDirect Storage driver: `libcufile.so.0` loaded, `cuFileDriverOpen` called, and the
/// cuFile handle of each descriptor it served.
pub struct CuFileDriver {
    api: CuFileApi,
    handles: Mutex<HashMap<RawFd, CachedHandle>>,
    // Keeps the code behind `api` mapped.
    _library: Library,
}

impl std::fmt::Debug for CuFileDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuFileDriver")
            .field("library", &CUFILE_LIBRARY)
            .finish_non_exhaustive()
    }
}

/// The cuFile library loaded.
pub const CUFILE_LIBRARY: &str = "libcufile.so.0";

impl CuFileDriver {
    /// Load cuFile ([`CUFILE_LIBRARY`]) and open its driver; why not, in words.
    pub(crate) fn load() -> Result<Self, String> {
        Self::load_from(CUFILE_LIBRARY)
    }

    /// Load the cuFile library `library` (a soname or a path) and open its driver; why not, in
    /// words. hipfile-rs's own `libcufile.so.0` is refused before any of its functions runs
    /// ([`super::own_library`]): it is no GPUDirect Storage, and opening its driver from inside
    /// its own open would not return.
    pub fn load_from(library: &str) -> Result<Self, String> {
        let lib = dlopen(library).map_err(|e| match e {
            HipError::Load { reason, .. } => format!("cannot load {library}: {reason}"),
            other => other.to_string(),
        })?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the field this initialises is declared with the C signature of $name as
                // published in cufile.h.
                unsafe { symbol(&lib, library, $name) }
                    .map_err(|_| format!("{library} lacks {}", $name))?
            };
        }
        let api = CuFileApi {
            driver_open: sym!("cuFileDriverOpen"),
            handle_register: sym!("cuFileHandleRegister"),
            handle_deregister: sym!("cuFileHandleDeregister"),
            read: sym!("cuFileRead"),
            write: sym!("cuFileWrite"),
        };
        if let Some(why) = super::own_library::own_library(api.driver_open as *const c_void) {
            return Err(why);
        }
        // SAFETY: no arguments; the driver is reference counted by cuFile and left open for the
        // life of the process.
        let opened = unsafe { (api.driver_open)() };
        if opened.err != 0 {
            return Err(format!(
                "cuFileDriverOpen failed: cuFile error {}, CUDA error {}",
                opened.err, opened.cu_err
            ));
        }
        Ok(CuFileDriver {
            api,
            handles: Mutex::new(HashMap::new()),
            _library: lib,
        })
    }

    /// The cuFile handle of `fd`, registering it at first use.
    fn handle(&self, fd: BorrowedFd<'_>) -> io::Result<CuFileHandle> {
        let raw = fd.as_raw_fd();
        let st = super::os::fstat(raw)?;
        let (dev, ino) = (st.st_dev as u64, st.st_ino as u64);
        let mut handles = self.handles.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cached) = handles.get(&raw) {
            if cached.dev == dev && cached.ino == ino {
                return Ok(cached.handle as CuFileHandle);
            }
            // The descriptor number now names another file: its old registration is stale.
            // SAFETY: the handle came from cuFileHandleRegister and is no longer used.
            unsafe { (self.api.handle_deregister)(cached.handle as CuFileHandle) };
            handles.remove(&raw);
        }
        let mut descr = CuFileDescr {
            kind: HANDLE_TYPE_OPAQUE_FD,
            handle: CuFileDescrHandle { fd: raw },
            fs_ops: std::ptr::null(),
        };
        let mut handle: CuFileHandle = std::ptr::null_mut();
        // SAFETY: both pointers are valid for the call; `fd` is open.
        let rc = unsafe { (self.api.handle_register)(&mut handle, &mut descr) };
        if rc.err != 0 {
            return Err(errno_error(op_errno(rc.err)));
        }
        handles.insert(
            raw,
            CachedHandle {
                dev,
                ino,
                handle: handle as usize,
            },
        );
        Ok(handle)
    }
}

/// The errno standing for a `CUfileOpError`.
fn op_errno(err: c_int) -> i32 {
    match err {
        NOT_INITIALIZED | PLATFORM_NOT_SUPPORTED | IO_NOT_SUPPORTED | DEVICE_NOT_SUPPORTED => {
            libc::ENODEV
        }
        _ => libc::EIO,
    }
}

/// What a `cuFileRead/Write` answer amounts to.
fn transfer_outcome(n: isize, asked: usize) -> io::Result<usize> {
    match n {
        -1 => Err(io::Error::last_os_error()),
        n if n < -1 => Err(errno_error(op_errno(
            c_int::try_from(n.unsigned_abs()).unwrap_or(0),
        ))),
        n => checked_count(n, asked),
    }
}

impl CuFileDriver {
    /// One `cuFileRead` or `cuFileWrite`, the descriptor registered first if it was not.
    ///
    /// # Safety
    /// The contract of [`crate::P2pDriver::read`] (for a write, the device range is only read).
    unsafe fn transfer(
        &self,
        direction: Direction,
        fd: BorrowedFd<'_>,
        device_ptr: usize,
        size: usize,
        file_offset: u64,
    ) -> io::Result<usize> {
        let handle = self.handle(fd)?;
        let size = size.min(MAX_P2P_TRANSFER);
        let offset = i64::try_from(file_offset).map_err(|_| errno_error(libc::EINVAL))?;
        let n = match direction {
            // SAFETY: the caller guarantees the device range; the handle is registered.
            Direction::Read => unsafe {
                (self.api.read)(handle, device_ptr as *mut c_void, size, offset, 0)
            },
            // SAFETY: as for a read; the device range is only read.
            Direction::Write => unsafe {
                (self.api.write)(handle, device_ptr as *const c_void, size, offset, 0)
            },
        };
        transfer_outcome(n, size)
    }
}

p2p_driver_by_transfer!(CuFileDriver, "cufile");

impl Drop for CuFileDriver {
    fn drop(&mut self) {
        let handles = std::mem::take(
            self.handles
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for cached in handles.into_values() {
            // SAFETY: every cached handle came from cuFileHandleRegister and is used no more.
            unsafe { (self.api.handle_deregister)(cached.handle as CuFileHandle) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cufile_errors_that_mean_no_direct_path_fail_over() {
        assert_eq!(op_errno(DEVICE_NOT_SUPPORTED), libc::ENODEV);
        assert_eq!(op_errno(PLATFORM_NOT_SUPPORTED), libc::ENODEV);
        assert_eq!(op_errno(5011), libc::EIO);
        let errno = |r: io::Result<usize>| r.unwrap_err().raw_os_error();
        assert_eq!(errno(transfer_outcome(-5009, 8)), Some(libc::ENODEV));
        assert_eq!(errno(transfer_outcome(9, 8)), Some(libc::EIO));
        assert_eq!(transfer_outcome(4, 8).unwrap(), 4);
    }

    #[test]
    fn descriptors_match_the_c_layout() {
        assert_eq!(std::mem::size_of::<CuFileDescr>(), 24);
        assert_eq!(std::mem::size_of::<CuFileError>(), 8);
    }
}
