//! # hipfile-simcuda: the simulated GPU as a CUDA runtime and driver library
//!
//! This crate builds `libsimcuda.so`: one shared library exporting the CUDA runtime entry points
//! (`cudaMalloc`, `cudaMemcpyAsync`, `cudaPointerGetAttributes`, `cudaLaunchHostFunc`, ... — see
//! [`RUNTIME_SYMBOLS`]) and the CUDA driver entry points hipfile-rs uses (`cuInit`,
//! `cuMemGetAddressRange_v2`, `cuPointerGetAttribute`, the primary-context calls — see
//! [`DRIVER_SYMBOLS`]) with the real CUDA ABI, implemented by one process-wide
//! [`hipfile_hip::sim::SimRuntime`]. Loaded in place of `libcudart.so` and `libcuda.so.1`, it lets
//! hipfile-rs's NVIDIA platform (`hipfile_hip::nvidia`) run for real on a machine without a GPU.
//! It is what `simhip` is to the AMD platform.
//!
//! ## Using it
//!
//! `cargo build -p hipfile-simcuda` leaves `target/<profile>/libsimcuda.so`; point both variables
//! at it: `HIPFILE_CUDART_LIBRARY=$PWD/target/debug/libsimcuda.so` and
//! `HIPFILE_CUDA_LIBRARY=$PWD/target/debug/libsimcuda.so`, or call
//! `hipfile_hip::nvidia::open_libraries(path, path)`. Both names resolve to the one loaded copy,
//! so the runtime and the driver see the same simulated GPU. The library is linked `-z nodelete`:
//! its stream workers run its code, so it is never unmapped.
//!
//! ## Configuration
//!
//! Read once, at the first call: `HIPFILE_SIM_DEVICES` (device count, default 1). Versions report
//! CUDA 13.0 (`13000`).
//!
//! ## Contract
//!
//! Every entry point returns a `cudaError_t` or `CUresult` (`int`, CUDA numbering), never unwinds
//! into C (a panic becomes `cudaErrorUnknown`) and answers NULL out-pointers with
//! `cudaErrorInvalidValue` — except `cuMemGetAddressRange_v2`, whose two out-pointers are optional
//! as in CUDA. As in CUDA 11+, `cudaPointerGetAttributes` succeeds with
//! `cudaMemoryTypeUnregistered` for memory it does not know; `cudaFree(NULL)`,
//! `cudaFreeHost(NULL)` and copies of zero bytes succeed. Copies that touch simulated device memory
//! are checked against its allocations and fail with `cudaErrorInvalidValue` where a GPU would
//! fault; host pointers the simulator does not know are trusted, as CUDA trusts them.
//!
//! Driver contexts: `cuDevicePrimaryCtxRetain` hands out `device + 1` as the `CUcontext` of a
//! device; the current context is per thread. `cudaSetDevice` makes the device's primary context
//! current and `cuCtxSetCurrent` makes its device the runtime's current device, as in CUDA. The
//! simulator is stricter than CUDA in two ways that catch caller bugs: driver calls before
//! `cuInit(0)` fail with `CUDA_ERROR_NOT_INITIALIZED` (the runtime API does not initialise the
//! driver API for its caller), and `cuMemGetAddressRange_v2` without a current context fails with
//! `CUDA_ERROR_INVALID_CONTEXT` (no runtime call binds a context implicitly, only `cudaSetDevice`).
//!
//! The exports whose C signature and behaviour the CUDA and HIP ABIs share (memory, copies,
//! streams, events, host functions) are written once, in `hipfile_hip::sim_c_exports!`, and
//! named here; this file writes the rest, whose signature, checks or numbering are CUDA's own.
#![allow(non_snake_case)]

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use hipfile_hip::sim::capi;
use hipfile_hip::sim::SimRuntime;
use hipfile_hip::{GpuRuntime, HipError, MemoryKind, PlatformOptions};

/// `cudaStream_t`.
pub type CudaStream = *mut c_void;
/// `cudaEvent_t`.
pub type CudaEvent = *mut c_void;
/// `CUcontext`.
pub type CuContext = *mut c_void;
/// `CUdeviceptr`.
pub type CuDevicePtr = u64;
/// `cudaHostFn_t`.
pub type CudaHostFn = capi::CHostFn;

/// `cudaPointerAttributes` of CUDA 11 and later (24 bytes).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CudaPointerAttributes {
    /// `cudaMemoryType`: Unregistered=0, Host=1, Device=2, Managed=3.
    pub memory_type: c_int,
    /// The owning device.
    pub device: c_int,
    /// The device-side address (NULL for memory the device cannot reach).
    pub device_pointer: *mut c_void,
    /// The host-side address (NULL for device-only memory).
    pub host_pointer: *mut c_void,
}

const _: () = assert!(std::mem::size_of::<CudaPointerAttributes>() == 24);

/// The version every version query reports: CUDA 13.0.
pub const CUDA_VERSION: c_int = 13_000;

/// `CU_POINTER_ATTRIBUTE_MEMORY_TYPE`: a `CUmemorytype` (`unsigned int`).
pub const CU_POINTER_ATTRIBUTE_MEMORY_TYPE: c_int = 2;
/// `CU_POINTER_ATTRIBUTE_IS_MANAGED`: an `int` (boolean).
pub const CU_POINTER_ATTRIBUTE_IS_MANAGED: c_int = 8;
/// `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`: an `int`.
pub const CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: c_int = 9;

/// CUDA error numbers the simulator produces (runtime and driver agree on these).
mod code {
    pub const SUCCESS: i32 = 0;
    pub const INVALID_VALUE: i32 = 1;
    pub const NOT_INITIALIZED: i32 = 3;
    pub const INVALID_DEVICE: i32 = 101;
    pub const INVALID_CONTEXT: i32 = 201;
    pub const UNKNOWN: i32 = 999;
}

static SIM: OnceLock<SimRuntime> = OnceLock::new();
static DRIVER_READY: AtomicBool = AtomicBool::new(false);
/// Primary-context retain counts, one per device.
static RETAINS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

thread_local! {
    /// The calling thread's current `CUcontext` (0: none).
    static CURRENT_CONTEXT: Cell<usize> = const { Cell::new(0) };
}

/// The process-wide simulator, built from the environment at first use. Stream memory
/// operations are always on: `cuStreamWaitValue32_v2` works on every device of a CUDA 12 driver,
/// so `HIPFILE_SIM_MEMOPS` does not apply here.
fn sim() -> &'static SimRuntime {
    SIM.get_or_init(|| {
        let mut config = PlatformOptions::from_env().sim;
        config.memops = true;
        SimRuntime::new(config)
    })
}

/// A failure on its way to becoming a CUDA error number.
struct Status(i32);

impl From<HipError> for Status {
    fn from(e: HipError) -> Self {
        Status(cuda_code(e.code().0))
    }
}

/// The CUDA number for a HIP error the simulator raised. HIP numbered its errors after CUDA's;
/// the simulator raises only codes both share, and anything else is `cudaErrorUnknown`.
fn cuda_code(hip: i32) -> i32 {
    match hip {
        1 | 2 | 3 | 17 | 21 | 100 | 101 | 201 | 400 | 500 | 600 | 700 | 712 | 713 | 801 => hip,
        _ => code::UNKNOWN,
    }
}

type Ffi = Result<(), Status>;

fn fail(code: i32) -> Status {
    Status(code)
}

/// The boundary every entry point goes through: catches panics.
fn run(body: impl FnOnce() -> Ffi) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(())) => code::SUCCESS,
        Ok(Err(Status(code))) => code,
        Err(_) => code::UNKNOWN,
    }
}

/// Write `value` through a C out-pointer; NULL is `cudaErrorInvalidValue`.
///
/// # Safety
/// `out` is NULL or valid for writing one `T`.
unsafe fn put<T>(out: *mut T, value: T) -> Ffi {
    // SAFETY: the caller's contract.
    Ok(unsafe { capi::put(out, value) }?)
}

/// Driver calls need `cuInit(0)` first.
fn driver_ready() -> Ffi {
    if DRIVER_READY.load(Ordering::Acquire) {
        Ok(())
    } else {
        Err(fail(code::NOT_INITIALIZED))
    }
}

/// The device a `CUcontext` handle stands for, if it is one.
fn context_device(ctx: usize) -> Option<i32> {
    let device = i32::try_from(ctx.checked_sub(1)?).ok()?;
    (device < sim().config().devices).then_some(device)
}

fn set_current_context(ctx: usize) {
    let _ = CURRENT_CONTEXT.try_with(|c| c.set(ctx));
}

fn current_context() -> usize {
    CURRENT_CONTEXT.try_with(Cell::get).unwrap_or(0)
}

// ---------------------------------------------------------------------------------------------
// Runtime API: versions, devices, errors.

/// `cudaRuntimeGetVersion`.
///
/// # Safety
/// `version` is NULL or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn cudaRuntimeGetVersion(version: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    run(|| unsafe { put(version, CUDA_VERSION) })
}

/// `cudaDriverGetVersion`.
///
/// # Safety
/// `version` is NULL or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn cudaDriverGetVersion(version: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    run(|| unsafe { put(version, CUDA_VERSION) })
}

hipfile_hip::sim_c_exports! {
    runtime: sim, boundary: run;
    device_count => cudaGetDeviceCount;
    current_device => cudaGetDevice;
}

/// `cudaSetDevice`: also makes the device's primary context current, as CUDA 12+ does.
#[no_mangle]
pub extern "C" fn cudaSetDevice(device: c_int) -> c_int {
    run(|| {
        sim().set_device(device)?;
        set_current_context(device as usize + 1);
        Ok(())
    })
}

/// CUDA's name and message for `code`; CUDA tells its own unknown error (999) from codes it
/// does not know.
fn error_text(code: c_int) -> (&'static CStr, &'static CStr) {
    match code {
        999 => (c"cudaErrorUnknown", c"unknown error"),
        _ => capi::error_text(code)
            .map_or((c"cudaErrorUnknown", c"unrecognized error code"), |t| {
                t.cuda
            }),
    }
}

/// `cudaGetErrorName`: a static string, never NULL.
#[no_mangle]
pub extern "C" fn cudaGetErrorName(error: c_int) -> *const c_char {
    catch_unwind(|| error_text(error).0.as_ptr()).unwrap_or(c"cudaErrorUnknown".as_ptr())
}

/// `cudaGetErrorString`: a static string, never NULL.
#[no_mangle]
pub extern "C" fn cudaGetErrorString(error: c_int) -> *const c_char {
    catch_unwind(|| error_text(error).1.as_ptr()).unwrap_or(c"unknown error".as_ptr())
}

// ---------------------------------------------------------------------------------------------
// Runtime API: memory.

/// `cudaPointerGetAttributes`, CUDA 11+ semantics: unknown memory is `Unregistered`, not an error.
///
/// # Safety
/// `attributes` is NULL or valid for writing a `cudaPointerAttributes`.
#[no_mangle]
pub unsafe extern "C" fn cudaPointerGetAttributes(
    attributes: *mut CudaPointerAttributes,
    ptr: *const c_void,
) -> c_int {
    run(|| {
        if attributes.is_null() {
            return Err(fail(code::INVALID_VALUE));
        }
        let info = sim().pointer_info(ptr as usize)?;
        let p = ptr.cast_mut();
        let (memory_type, device_pointer, host_pointer) = match info.kind {
            MemoryKind::Unregistered => (0, std::ptr::null_mut(), p),
            MemoryKind::Host => (1, p, p),
            MemoryKind::Device | MemoryKind::Array => (2, p, std::ptr::null_mut()),
            MemoryKind::Managed => (3, p, p),
        };
        let attr = CudaPointerAttributes {
            memory_type,
            device: info.device,
            device_pointer,
            host_pointer,
        };
        // SAFETY: the caller's contract.
        unsafe { put(attributes, attr) }
    })
}

hipfile_hip::sim_c_exports! {
    runtime: sim, boundary: run;
    malloc => cudaMalloc;
    free => cudaFree;
}

/// `cudaMallocManaged`: `flags` must be `cudaMemAttachGlobal` (1) or `cudaMemAttachHost` (2).
///
/// # Safety
/// `ptr` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn cudaMallocManaged(
    ptr: *mut *mut c_void,
    size: usize,
    flags: c_uint,
) -> c_int {
    run(|| {
        if size == 0 || !matches!(flags, 1 | 2) {
            return Err(fail(code::INVALID_VALUE));
        }
        // SAFETY: the caller's contract.
        Ok(unsafe { capi::put_new(ptr, || Ok(sim().managed_alloc(size)? as *mut c_void)) }?)
    })
}

/// `cudaHostAlloc`: pinned host memory; `flags` is a set of Portable (1), Mapped (2) and
/// WriteCombined (4); size 0 gives NULL.
///
/// # Safety
/// `ptr` is NULL or valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn cudaHostAlloc(ptr: *mut *mut c_void, size: usize, flags: c_uint) -> c_int {
    run(|| {
        if flags > 7 {
            return Err(fail(code::INVALID_VALUE));
        }
        // SAFETY: the caller's contract.
        Ok(unsafe { capi::put_new(ptr, || sim().host_alloc_or_null(size)) }?)
    })
}

hipfile_hip::sim_c_exports! {
    runtime: sim, boundary: run;
    host_device_pointer => cudaHostGetDevicePointer;
    host_register => cudaHostRegister;
}

/// `cudaHostUnregister`.
///
/// # Safety
/// `ptr` was registered with `cudaHostRegister` and no queued work uses it.
#[no_mangle]
pub unsafe extern "C" fn cudaHostUnregister(ptr: *mut c_void) -> c_int {
    run(|| Ok(sim().host_unregister(ptr as usize)?))
}

hipfile_hip::sim_c_exports! {
    runtime: sim, boundary: run;
    host_free => cudaFreeHost;
    memcpy => cudaMemcpy;
    memcpy_async => cudaMemcpyAsync;
    memset => cudaMemset;
    memset_async => cudaMemsetAsync;
}

// ---------------------------------------------------------------------------------------------
// Runtime API: streams, events, host functions.

hipfile_hip::sim_c_exports! {
    runtime: sim, boundary: run;
    stream_create_with_flags => cudaStreamCreateWithFlags;
    stream_get_device => cudaStreamGetDevice;
    stream_query => cudaStreamQuery;
    stream_destroy => cudaStreamDestroy;
    stream_synchronize => cudaStreamSynchronize;
}

/// `cudaEventCreateWithFlags`: `flags` is a set of BlockingSync (1), DisableTiming (2) and
/// Interprocess (4); they change nothing in the simulator.
///
/// # Safety
/// `out` is NULL or valid for writing a `cudaEvent_t`.
#[no_mangle]
pub unsafe extern "C" fn cudaEventCreateWithFlags(out: *mut CudaEvent, flags: c_uint) -> c_int {
    run(|| {
        if flags > 7 {
            return Err(fail(code::INVALID_VALUE));
        }
        // SAFETY: the caller's contract.
        Ok(unsafe { capi::put_new(out, || sim().create_c_event()) }?)
    })
}

hipfile_hip::sim_c_exports! {
    runtime: sim, boundary: run;
    event_record => cudaEventRecord;
    event_synchronize => cudaEventSynchronize;
    event_query => cudaEventQuery;
    event_destroy => cudaEventDestroy;
    launch_host_func => cudaLaunchHostFunc;
}

// ---------------------------------------------------------------------------------------------
// Driver API.

/// `cuInit`: `flags` must be 0.
#[no_mangle]
pub extern "C" fn cuInit(flags: c_uint) -> c_int {
    run(|| {
        if flags != 0 {
            return Err(fail(code::INVALID_VALUE));
        }
        sim();
        DRIVER_READY.store(true, Ordering::Release);
        Ok(())
    })
}

/// `cuDriverGetVersion` (needs no `cuInit`, as in CUDA).
///
/// # Safety
/// `version` is NULL or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> c_int {
    // SAFETY: the caller's contract.
    run(|| unsafe { put(version, CUDA_VERSION) })
}

/// `cuDeviceGet`: the `CUdevice` of an ordinal is the ordinal.
///
/// # Safety
/// `device` is NULL or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut c_int, ordinal: c_int) -> c_int {
    run(|| {
        driver_ready()?;
        if ordinal < 0 || ordinal >= sim().config().devices {
            return Err(fail(code::INVALID_DEVICE));
        }
        // SAFETY: the caller's contract.
        unsafe { put(device, ordinal) }
    })
}

/// `cuDevicePrimaryCtxRetain`: the primary context of `device` is `device + 1`.
///
/// # Safety
/// `ctx` is NULL or valid for writing a `CUcontext`.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(ctx: *mut CuContext, device: c_int) -> c_int {
    run(|| {
        driver_ready()?;
        if ctx.is_null() {
            return Err(fail(code::INVALID_VALUE));
        }
        let devices = sim().config().devices;
        let index = usize::try_from(device)
            .ok()
            .filter(|_| device < devices)
            .ok_or_else(|| fail(code::INVALID_DEVICE))?;
        {
            let mut retains = RETAINS.lock().unwrap_or_else(PoisonError::into_inner);
            if retains.len() < devices as usize {
                retains.resize(devices as usize, 0);
            }
            retains[index] += 1;
        }
        // SAFETY: the caller's contract.
        unsafe { put(ctx, (index + 1) as CuContext) }
    })
}

fn primary_ctx_release(device: c_int) -> c_int {
    run(|| {
        driver_ready()?;
        let index = usize::try_from(device)
            .ok()
            .filter(|_| device < sim().config().devices)
            .ok_or_else(|| fail(code::INVALID_DEVICE))?;
        let mut retains = RETAINS.lock().unwrap_or_else(PoisonError::into_inner);
        match retains.get_mut(index) {
            Some(n) if *n > 0 => {
                *n -= 1;
                Ok(())
            }
            _ => Err(fail(code::INVALID_CONTEXT)),
        }
    })
}

/// `cuDevicePrimaryCtxRelease`: releasing more often than retained is
/// `CUDA_ERROR_INVALID_CONTEXT`.
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease(device: c_int) -> c_int {
    primary_ctx_release(device)
}

/// `cuDevicePrimaryCtxRelease_v2`, what `cuda.h` maps the plain name to since CUDA 11.
#[no_mangle]
pub extern "C" fn cuDevicePrimaryCtxRelease_v2(device: c_int) -> c_int {
    primary_ctx_release(device)
}

/// `cuCtxGetCurrent`: the calling thread's context, NULL when none.
///
/// # Safety
/// `ctx` is NULL or valid for writing a `CUcontext`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut CuContext) -> c_int {
    run(|| {
        driver_ready()?;
        // SAFETY: the caller's contract.
        unsafe { put(ctx, current_context() as CuContext) }
    })
}

/// `cuCtxSetCurrent`: NULL unbinds; a context makes its device the runtime's current device.
#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(ctx: CuContext) -> c_int {
    run(|| {
        driver_ready()?;
        let handle = ctx as usize;
        if handle != 0 {
            let device = context_device(handle).ok_or_else(|| fail(code::INVALID_CONTEXT))?;
            sim().set_device(device)?;
        }
        set_current_context(handle);
        Ok(())
    })
}

/// `cuMemGetAddressRange_v2`: base and size of the allocation holding `dptr`. Either out-pointer
/// may be NULL, as in CUDA; memory the simulator does not track is `CUDA_ERROR_NOT_FOUND`.
///
/// # Safety
/// `base` and `size` are NULL or valid for writing.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(
    base: *mut CuDevicePtr,
    size: *mut usize,
    dptr: CuDevicePtr,
) -> c_int {
    run(|| {
        driver_ready()?;
        if current_context() == 0 {
            return Err(fail(code::INVALID_CONTEXT));
        }
        let ptr = usize::try_from(dptr).map_err(|_| fail(code::INVALID_VALUE))?;
        let (start, len) = sim().allocation_range(ptr)?;
        // SAFETY: the caller's contract; NULL out-pointers are skipped.
        unsafe {
            if !base.is_null() {
                base.write(start as CuDevicePtr);
            }
            if !size.is_null() {
                size.write(len);
            }
        }
        Ok(())
    })
}

/// `cuPointerGetAttribute` for `CU_POINTER_ATTRIBUTE_MEMORY_TYPE` (a `CUmemorytype`: Host=1,
/// Device=2; managed memory is Device with `IS_MANAGED` set), `CU_POINTER_ATTRIBUTE_IS_MANAGED`
/// and `CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL`. Memory the simulator does not track, and any other
/// attribute, is `CUDA_ERROR_INVALID_VALUE`.
///
/// # Safety
/// `data` is NULL or valid for writing the attribute's type (`unsigned int` or `int`).
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(
    data: *mut c_void,
    attribute: c_int,
    ptr: CuDevicePtr,
) -> c_int {
    run(|| {
        driver_ready()?;
        if data.is_null() {
            return Err(fail(code::INVALID_VALUE));
        }
        let ptr = usize::try_from(ptr).map_err(|_| fail(code::INVALID_VALUE))?;
        let info = sim().pointer_info(ptr)?;
        if info.kind == MemoryKind::Unregistered {
            return Err(fail(code::INVALID_VALUE));
        }
        match attribute {
            CU_POINTER_ATTRIBUTE_MEMORY_TYPE => {
                let memory_type: c_uint = match info.kind {
                    MemoryKind::Host => 1,
                    _ => 2,
                };
                // SAFETY: the caller's contract for this attribute: an `unsigned int`.
                unsafe { put(data.cast::<c_uint>(), memory_type) }
            }
            CU_POINTER_ATTRIBUTE_IS_MANAGED => {
                let managed = c_int::from(info.kind == MemoryKind::Managed);
                // SAFETY: the caller's contract for this attribute: an `int`.
                unsafe { put(data.cast::<c_int>(), managed) }
            }
            CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL => {
                // SAFETY: the caller's contract for this attribute: an `int`.
                unsafe { put(data.cast::<c_int>(), info.device) }
            }
            _ => Err(fail(code::INVALID_VALUE)),
        }
    })
}

/// A driver stream memory operation on the word at device address `addr`.
fn on_word(addr: CuDevicePtr, op: impl FnOnce(*mut c_void) -> Result<(), HipError>) -> c_int {
    run(|| {
        driver_ready()?;
        let ptr = usize::try_from(addr).map_err(|_| fail(code::INVALID_VALUE))?;
        Ok(op(ptr as *mut c_void)?)
    })
}

/// `cuStreamWaitValue32_v2`: later work on `stream` waits until the word at `addr` passes the
/// test `flags` names (`CU_STREAM_WAIT_VALUE_GEQ` 0, `EQ` 1, `AND` 2, `NOR` 3). The simulator
/// compares `GEQ` plainly, where CUDA compares cyclically; the two agree for values that only
/// grow by less than 2^31. The word must be 4-byte aligned memory the simulator tracks, else
/// `CUDA_ERROR_INVALID_VALUE`, as are other flags.
#[no_mangle]
pub extern "C" fn cuStreamWaitValue32_v2(
    s: CudaStream,
    addr: CuDevicePtr,
    value: u32,
    flags: c_uint,
) -> c_int {
    on_word(addr, |ptr| {
        sim().wait_c_value(s, ptr, value, flags, u32::MAX)
    })
}

/// `cuStreamWriteValue32_v2`: `value` is stored into the word at `addr` once the work queued on
/// `stream` before it has run. `flags` must be 0 (`CU_STREAM_WRITE_VALUE_DEFAULT`); the word must
/// be 4-byte aligned memory the simulator tracks, else `CUDA_ERROR_INVALID_VALUE`.
#[no_mangle]
pub extern "C" fn cuStreamWriteValue32_v2(
    s: CudaStream,
    addr: CuDevicePtr,
    value: u32,
    flags: c_uint,
) -> c_int {
    on_word(addr, |ptr| sim().write_c_value(s, ptr, value, flags))
}

/// `cuStreamGetCtx`: the primary context of the stream's device; for the NULL stream, the
/// current context (`CUDA_ERROR_INVALID_CONTEXT` when there is none).
///
/// # Safety
/// `ctx` is NULL or valid for writing a `CUcontext`.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx(s: CudaStream, ctx: *mut CuContext) -> c_int {
    run(|| {
        driver_ready()?;
        let handle = if s.is_null() {
            match current_context() {
                0 => return Err(fail(code::INVALID_CONTEXT)),
                current => current,
            }
        } else {
            sim().c_stream_device(s)? as usize + 1
        };
        // SAFETY: the caller's contract.
        unsafe { put(ctx, handle as CuContext) }
    })
}

/// `cuCtxGetDevice`: the device of the current context (`CUDA_ERROR_INVALID_CONTEXT` without one).
///
/// # Safety
/// `device` is NULL or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut c_int) -> c_int {
    run(|| {
        driver_ready()?;
        let d = context_device(current_context()).ok_or_else(|| fail(code::INVALID_CONTEXT))?;
        // SAFETY: the caller's contract.
        unsafe { put(device, d) }
    })
}

/// `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1`.
pub const CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1: c_int = 92;

/// `cuDeviceGetAttribute`: only `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1`, which answers 0
/// as on a CUDA 12 driver without `NVreg_EnableStreamMemOPs=1` (the `_v2` waits need no
/// attribute); any other attribute is `CUDA_ERROR_INVALID_VALUE`.
///
/// # Safety
/// `value` is NULL or valid for writing an `int`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(
    value: *mut c_int,
    attribute: c_int,
    device: c_int,
) -> c_int {
    run(|| {
        driver_ready()?;
        if device < 0 || device >= sim().config().devices {
            return Err(fail(code::INVALID_DEVICE));
        }
        match attribute {
            // SAFETY: the caller's contract.
            CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 => unsafe { put(value, 0) },
            _ => Err(fail(code::INVALID_VALUE)),
        }
    })
}

/// Every CUDA runtime entry point this library exports.
pub const RUNTIME_SYMBOLS: &[&str] = &[
    "cudaRuntimeGetVersion",
    "cudaDriverGetVersion",
    "cudaGetDeviceCount",
    "cudaGetDevice",
    "cudaSetDevice",
    "cudaPointerGetAttributes",
    "cudaMalloc",
    "cudaMallocManaged",
    "cudaFree",
    "cudaHostAlloc",
    "cudaFreeHost",
    "cudaMemcpy",
    "cudaMemcpyAsync",
    "cudaMemset",
    "cudaMemsetAsync",
    "cudaHostGetDevicePointer",
    "cudaStreamCreateWithFlags",
    "cudaStreamDestroy",
    "cudaStreamSynchronize",
    "cudaStreamGetDevice",
    "cudaStreamQuery",
    "cudaEventCreateWithFlags",
    "cudaEventRecord",
    "cudaEventSynchronize",
    "cudaEventQuery",
    "cudaEventDestroy",
    "cudaLaunchHostFunc",
    "cudaGetErrorString",
    "cudaGetErrorName",
];

/// Every CUDA driver entry point this library exports.
pub const DRIVER_SYMBOLS: &[&str] = &[
    "cuInit",
    "cuDriverGetVersion",
    "cuMemGetAddressRange_v2",
    "cuPointerGetAttribute",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSetCurrent",
    "cuDeviceGet",
    "cuDeviceGetAttribute",
    "cuStreamWaitValue32_v2",
    "cuStreamWriteValue32_v2",
    "cuStreamGetCtx",
    "cuCtxGetDevice",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_strings_are_never_null() {
        for code in [0, 1, 500, 600, 12345, -1] {
            assert!(!cudaGetErrorName(code).is_null());
            assert!(!cudaGetErrorString(code).is_null());
        }
    }

    #[test]
    fn hip_errors_of_the_simulator_keep_their_cuda_number() {
        assert_eq!(cuda_code(1), 1);
        assert_eq!(cuda_code(101), 101);
        assert_eq!(cuda_code(400), 400);
        assert_eq!(cuda_code(302), code::UNKNOWN);
    }

    #[test]
    fn context_handles_name_devices() {
        assert_eq!(context_device(0), None);
        assert_eq!(context_device(1), Some(0));
        assert_eq!(context_device(usize::MAX), None);
    }
}
