//! `sim::capi`: what the simulated C runtime libraries share.
//!
//! `hipfile-simhip` (the HIP ABI) and `hipfile-simcuda` (the CUDA ABI) export C functions built on
//! one process-wide [`SimRuntime`]. What they do alike lives here, once: the argument checks of
//! copies and fills, the dispatch of a copy by its direction, C host functions, allocation range
//! queries, stream and event calls on C handles, and out-pointer writes, and the exports whose
//! C signature and behaviour the two ABIs share, written once in
//! [`sim_c_exports!`](crate::sim_c_exports) and named by each library. The libraries keep only
//! their ABI: exported names, the calls whose signature or checks differ, their error numbering
//! (everything here fails with HIP codes, which simcuda maps onto CUDA's), their memory-type
//! numbering, and the `catch_unwind` guard around every export.

use std::ffi::{c_void, CStr};
use std::ptr::NonNull;
use std::sync::Arc;

use super::streams::StreamKind;
use super::SimRuntime;
use crate::error::{HipError, HipErrorCode, HipResult};
use crate::runtime::{GpuRuntime, MemoryKind};

/// A C host function (`hipHostFn_t`, `cudaHostFn_t`); `None` is a NULL pointer.
pub type CHostFn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

/// The direction of a copy, onto which each C ABI maps its memcpy kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyDirection {
    /// Host to host.
    HostToHost,
    /// Host to device: the device range is checked, the host side trusted.
    HostToDevice,
    /// Device to host: the device range is checked, the host side trusted.
    DeviceToHost,
    /// Device to device: both sides must lie inside simulated allocations.
    DeviceToDevice,
    /// Inferred from the pointers (`hipMemcpyDefault`, `cudaMemcpyDefault`).
    Default,
}

impl CopyDirection {
    /// The direction of a `hipMemcpyKind` or `cudaMemcpyKind`, which number their kinds alike
    /// (0 to 4); `None` for any other number.
    pub fn from_memcpy_kind(kind: i32) -> Option<Self> {
        match kind {
            0 => Some(CopyDirection::HostToHost),
            1 => Some(CopyDirection::HostToDevice),
            2 => Some(CopyDirection::DeviceToHost),
            3 => Some(CopyDirection::DeviceToDevice),
            4 => Some(CopyDirection::Default),
            _ => None,
        }
    }
}

fn invalid(call: &'static str) -> HipError {
    HipError::call(call, HipErrorCode::INVALID_VALUE)
}

/// Write `value` through a C out-pointer; NULL is `hipErrorInvalidValue`.
///
/// # Safety
/// `out` is NULL or valid for writing one `T`.
pub unsafe fn put<T>(out: *mut T, value: T) -> HipResult<()> {
    if out.is_null() {
        return Err(invalid("out-pointer"));
    }
    // SAFETY: non-null, and the caller guarantees it is writable.
    unsafe { out.write(value) };
    Ok(())
}

/// Write what `make` gives through a C out-pointer; a NULL `out` is `hipErrorInvalidValue` and
/// calls nothing, so no allocation or handle is made for a caller that cannot receive it.
///
/// # Safety
/// `out` is NULL or valid for writing one `T`.
pub unsafe fn put_new<T>(out: *mut T, make: impl FnOnce() -> HipResult<T>) -> HipResult<()> {
    if out.is_null() {
        return Err(invalid("out-pointer"));
    }
    let value = make()?;
    // SAFETY: the caller's contract.
    unsafe { put(out, value) }
}

/// A C stream handle (`hipStream_t`, `cudaStream_t`): the simulator's stream number as a
/// pointer; NULL is the null stream (the legacy default stream of the current device).
pub type CStream = *mut c_void;

/// `hipStreamNonBlocking` / `cudaStreamNonBlocking`: a stream not ordered with the null stream.
pub const STREAM_NON_BLOCKING: u32 = 1;

/// `hipHostRegisterReadOnly` / `cudaHostRegisterReadOnly`: memory the process may only read.
pub const HOST_REGISTER_READ_ONLY: u32 = 0x8;

/// A C event handle (`hipEvent_t`, `cudaEvent_t`): the simulator's event number as a pointer.
pub type CEvent = *mut c_void;

/// What the simulated libraries call an error code they report: each ABI's name and message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorText {
    /// HIP's name and message (`hipGetErrorName`, `hipGetErrorString`).
    pub hip: (&'static CStr, &'static CStr),
    /// CUDA's name and message (`cudaGetErrorName`, `cudaGetErrorString`).
    pub cuda: (&'static CStr, &'static CStr),
}

/// Names that differ over one message.
fn alike(hip: &'static CStr, cuda: &'static CStr, message: &'static CStr) -> ErrorText {
    ErrorText {
        hip: (hip, message),
        cuda: (cuda, message),
    }
}

/// The names and messages of `code` (HIP numbered its errors after CUDA's) for the codes the
/// simulated libraries report; `None` for any other, which each library answers as unknown.
pub fn error_text(code: i32) -> Option<ErrorText> {
    Some(match code {
        0 => alike(c"hipSuccess", c"cudaSuccess", c"no error"),
        1 => alike(
            c"hipErrorInvalidValue",
            c"cudaErrorInvalidValue",
            c"invalid argument",
        ),
        2 => alike(
            c"hipErrorOutOfMemory",
            c"cudaErrorMemoryAllocation",
            c"out of memory",
        ),
        3 => alike(
            c"hipErrorNotInitialized",
            c"cudaErrorInitializationError",
            c"initialization error",
        ),
        17 => alike(
            c"hipErrorInvalidDevicePointer",
            c"cudaErrorInvalidDevicePointer",
            c"invalid device pointer",
        ),
        21 => alike(
            c"hipErrorInvalidMemcpyDirection",
            c"cudaErrorInvalidMemcpyDirection",
            c"invalid copy direction for memcpy",
        ),
        101 => alike(
            c"hipErrorInvalidDevice",
            c"cudaErrorInvalidDevice",
            c"invalid device ordinal",
        ),
        201 => alike(
            c"hipErrorInvalidContext",
            c"cudaErrorDeviceUninitialized",
            c"invalid device context",
        ),
        400 => alike(
            c"hipErrorInvalidHandle",
            c"cudaErrorInvalidResourceHandle",
            c"invalid resource handle",
        ),
        500 => alike(
            c"hipErrorNotFound",
            c"cudaErrorSymbolNotFound",
            c"named symbol not found",
        ),
        600 => alike(
            c"hipErrorNotReady",
            c"cudaErrorNotReady",
            c"device not ready",
        ),
        700 => alike(
            c"hipErrorIllegalAddress",
            c"cudaErrorIllegalAddress",
            c"an illegal memory access was encountered",
        ),
        712 => alike(
            c"hipErrorHostMemoryAlreadyRegistered",
            c"cudaErrorHostMemoryAlreadyRegistered",
            c"part or all of the requested memory range is already mapped",
        ),
        713 => alike(
            c"hipErrorHostMemoryNotRegistered",
            c"cudaErrorHostMemoryNotRegistered",
            c"pointer does not correspond to a registered memory region",
        ),
        801 => alike(
            c"hipErrorNotSupported",
            c"cudaErrorNotSupported",
            c"operation not supported",
        ),
        35 => ErrorText {
            hip: (
                c"hipErrorInsufficientDriver",
                c"driver version is insufficient for runtime version",
            ),
            cuda: (
                c"cudaErrorInsufficientDriver",
                c"CUDA driver version is insufficient for CUDA runtime version",
            ),
        },
        100 => ErrorText {
            hip: (c"hipErrorNoDevice", c"no ROCm-capable device is detected"),
            cuda: (c"cudaErrorNoDevice", c"no CUDA-capable device is detected"),
        },
        _ => return None,
    })
}

/// Copy `size` bytes; the caller has checked the ranges.
///
/// # Safety
/// `[src, src + size)` is readable and `[dst, dst + size)` writable.
unsafe fn raw_copy(dst: usize, src: usize, size: usize) {
    // SAFETY: guaranteed by the caller; `copy` tolerates overlap.
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, size) };
}

impl SimRuntime {
    /// A C library's `malloc` of device memory on the current device: NULL (0) for zero bytes.
    pub fn device_alloc_or_null(&self, size: usize) -> HipResult<*mut c_void> {
        if size == 0 {
            return Ok(std::ptr::null_mut());
        }
        Ok(self.device_alloc(size)? as *mut c_void)
    }

    /// A C library's allocation of pinned host memory: NULL for zero bytes.
    pub fn host_alloc_or_null(&self, size: usize) -> HipResult<*mut c_void> {
        if size == 0 {
            return Ok(std::ptr::null_mut());
        }
        Ok(self.host_alloc(size)?.as_ptr().cast::<c_void>())
    }

    /// Free pinned host memory; NULL is a no-op.
    ///
    /// # Safety
    /// `ptr` is NULL or came from [`SimRuntime::host_alloc_or_null`] and is no longer used.
    pub unsafe fn host_free_or_null(&self, ptr: *mut c_void) -> HipResult<()> {
        match NonNull::new(ptr.cast::<u8>()) {
            None => Ok(()),
            // SAFETY: the caller's contract; the simulator refuses pointers it did not hand out.
            Some(p) => unsafe { self.host_free(p) },
        }
    }

    /// Pin caller-owned host memory (`hipHostRegister`, `cudaHostRegister`): NULL is
    /// `hipErrorInvalidValue`; [`HOST_REGISTER_READ_ONLY`] in `flags` registers it read-only.
    pub fn register_c_host(&self, ptr: *mut c_void, size: usize, flags: u32) -> HipResult<()> {
        if ptr.is_null() {
            return Err(invalid("host register"));
        }
        self.register_host(ptr as usize, size, flags & HOST_REGISTER_READ_ONLY != 0)
    }

    /// Base and length of the allocation holding `ptr`; memory the simulator does not track is
    /// `hipErrorNotFound`.
    pub fn allocation_range(&self, ptr: usize) -> HipResult<(usize, usize)> {
        let info = self.pointer_info(ptr)?;
        if info.kind == MemoryKind::Unregistered {
            return Err(HipError::call("address range", HipErrorCode::NOT_FOUND));
        }
        Ok((info.base, info.len))
    }

    /// Copy `size` bytes from `src` to `dst` as the C runtimes' memcpy does. Zero bytes succeed
    /// whatever the pointers; a NULL side is `hipErrorInvalidValue`. Host-to-device and
    /// device-to-host copies check the device range. Other directions check every side the
    /// simulator tracks, and device-to-device also demands that both are tracked; a `None`
    /// direction (a memcpy kind the ABI does not know) is `hipErrorInvalidMemcpyDirection`. With a
    /// stream the copy is queued on it; without, it runs on the null stream and is waited for.
    ///
    /// # Safety
    /// The host sides of the copy are valid for `size` bytes until the copy completes.
    pub unsafe fn copy(
        &self,
        dst: usize,
        src: usize,
        size: usize,
        direction: Option<CopyDirection>,
        stream: Option<CStream>,
    ) -> HipResult<()> {
        if size == 0 {
            return Ok(());
        }
        if dst == 0 || src == 0 {
            return Err(invalid("memcpy"));
        }
        match (direction, stream) {
            (Some(CopyDirection::HostToDevice), None) => {
                // SAFETY: the caller guarantees the host source is readable for `size` bytes.
                let host = unsafe { std::slice::from_raw_parts(src as *const u8, size) };
                // SAFETY: the simulator checks the device range before writing.
                unsafe { self.copy_to_device(dst, host) }
            }
            (Some(CopyDirection::DeviceToHost), None) => {
                // SAFETY: the caller guarantees the host destination is writable for `size` bytes.
                let host = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, size) };
                // SAFETY: the simulator checks the device range before reading.
                unsafe { self.copy_from_device(host, src) }
            }
            (Some(CopyDirection::HostToDevice), Some(stream)) => {
                // SAFETY: the simulator checks the device range; the caller keeps the host side.
                unsafe { self.copy_async(dst, src, size, dst, stream as usize) }
            }
            (Some(CopyDirection::DeviceToHost), Some(stream)) => {
                // SAFETY: as above.
                unsafe { self.copy_async(dst, src, size, src, stream as usize) }
            }
            (direction, None) => {
                self.check_generic_copy(dst, src, size, direction)?;
                self.run_on_null(Box::new(move || {
                    // SAFETY: tracked sides were checked above, the caller vouches for the
                    // others; `run_on_null` runs the copy before returning, while the caller
                    // keeps both sides.
                    unsafe { raw_copy(dst, src, size) };
                    Ok(())
                }))
            }
            (direction, Some(stream)) => {
                self.check_generic_copy(dst, src, size, direction)?;
                self.queue_host_fn(
                    stream as usize,
                    Box::new(move || {
                        // SAFETY: checked at enqueue; the caller keeps both sides valid until the
                        // copy completes, which is when this runs.
                        unsafe { raw_copy(dst, src, size) }
                    }),
                )
            }
        }
    }

    /// Fill `size` bytes at `dst` with `value` as the C runtimes' memset does. Synchronous (no
    /// stream; it runs on the null stream and is waited for): a NULL `dst` is
    /// `hipErrorInvalidValue` and the range must lie inside one allocation. Queued on a stream:
    /// zero bytes succeed whatever `dst`, otherwise the range must lie inside one allocation when
    /// queued; it is checked again when the fill runs, which then does nothing if the memory is
    /// gone.
    ///
    /// # Safety
    /// Nothing else accesses the range until the fill completes.
    pub unsafe fn memset(
        &self,
        dst: usize,
        value: u8,
        size: usize,
        stream: Option<CStream>,
    ) -> HipResult<()> {
        let Some(stream) = stream else {
            if dst == 0 {
                return Err(invalid("memset"));
            }
            // SAFETY: the simulator checks the range; the caller guarantees exclusive access.
            return unsafe { self.memset_device(dst, value, size) };
        };
        if size == 0 {
            return Ok(());
        }
        self.check_side(dst, size, true)?;
        let allocations = Arc::clone(&self.allocations);
        self.queue_host_fn(
            stream as usize,
            Box::new(move || {
                let _gone = Self::with_range(&allocations, dst, size, "memset", || {
                    // SAFETY: the range lies inside a live allocation (held by `with_range`) and
                    // the caller guarantees exclusive access until the fill completes.
                    unsafe { std::ptr::write_bytes(dst as *mut u8, value, size) }
                });
            }),
        )
    }

    /// Queue the C host function `f(user_data)` on `stream`, to run once the work queued before it
    /// is done; a NULL `f` is `hipErrorInvalidValue`.
    ///
    /// # Safety
    /// `f` is safe to call once with `user_data` from another thread.
    pub unsafe fn launch_c_host_func(
        &self,
        stream: CStream,
        f: CHostFn,
        user_data: *mut c_void,
    ) -> HipResult<()> {
        let f = f.ok_or_else(|| invalid("launch host function"))?;
        let user_data = user_data as usize;
        self.queue_host_fn(
            stream as usize,
            Box::new(move || {
                // SAFETY: the caller's contract.
                unsafe { f(user_data as *mut c_void) }
            }),
        )
    }

    // Stream and event calls on C handles. The simulator looks every handle up in its tables,
    // so these are safe for any value: a NULL, destroyed or made-up handle is
    // `hipErrorInvalidHandle` (NULL is the null stream where a stream is asked for), as the C
    // libraries promise.

    /// A new stream (`hipStreamCreate`, `cudaStreamCreate`), ordered with the null stream.
    pub fn create_c_stream(&self) -> HipResult<CStream> {
        self.create_c_stream_with_flags(0)
    }

    /// A new stream (`hipStreamCreateWithFlags`, `cudaStreamCreateWithFlags`): flags 0
    /// (`hipStreamDefault`) orders it with the null stream, [`STREAM_NON_BLOCKING`] does not;
    /// other flags are `hipErrorInvalidValue`.
    pub fn create_c_stream_with_flags(&self, flags: u32) -> HipResult<CStream> {
        let kind = match flags {
            0 => StreamKind::Blocking,
            STREAM_NON_BLOCKING => StreamKind::Independent,
            _ => return Err(invalid("stream flags")),
        };
        Ok(self.create_stream(kind)? as CStream)
    }

    /// The device of `stream` (`hipStreamGetDevice`, `cudaStreamGetDevice`); the current device
    /// for the NULL stream.
    pub fn c_stream_device(&self, stream: CStream) -> HipResult<i32> {
        self.device_of_stream(stream as usize)
    }

    /// `Ok` once all work queued on `stream` has run, `hipErrorNotReady` before
    /// (`hipStreamQuery`, `cudaStreamQuery`).
    pub fn stream_status(&self, stream: CStream) -> HipResult<()> {
        match self.stream_idle(stream as usize)? {
            true => Ok(()),
            false => Err(HipError::call("stream query", HipErrorCode::NOT_READY)),
        }
    }

    /// Queue on `stream` a wait until the `u32` at `ptr` passes the test `flags` names, with
    /// HIP's `hipStreamWaitValue*` numbering (CUDA's `CU_STREAM_WAIT_VALUE_*` is the same):
    /// 0 `(*ptr & mask) >= value`, 1 `(*ptr & mask) == value`, 2 `(*ptr & mask) & value != 0`,
    /// 3 `!((*ptr & mask) | (value & mask)) != 0`. Other flags are `hipErrorInvalidValue`; so is
    /// a word that is not 4-byte aligned or not inside memory the simulator tracks. Without
    /// stream memory operations it is `hipErrorNotSupported`.
    pub fn wait_c_value(
        &self,
        stream: CStream,
        ptr: *mut c_void,
        value: u32,
        flags: u32,
        mask: u32,
    ) -> HipResult<()> {
        let test: fn(u32, u32) -> bool = match flags {
            0 => |word, value| word >= value,
            1 => |word, value| word == value,
            2 => |word, value| word & value != 0,
            3 => |word, value| !(word | value) != 0,
            _ => return Err(invalid("wait value flags")),
        };
        let value = if flags == 3 { value & mask } else { value };
        self.queue_value_wait(stream as usize, ptr as usize, move |word| {
            test(word & mask, value)
        })
    }

    /// Queue on `stream` a store of `value` into the `u32` at `ptr`, made once the stream's
    /// earlier work has run (`hipStreamWriteValue32`, `cuStreamWriteValue32_v2`). `flags` must be
    /// 0 (the default write); the word must be 4-byte aligned memory the simulator tracks, else
    /// `hipErrorInvalidValue`. Without stream memory operations it is `hipErrorNotSupported`.
    pub fn write_c_value(
        &self,
        stream: CStream,
        ptr: *mut c_void,
        value: u32,
        flags: u32,
    ) -> HipResult<()> {
        if flags != 0 {
            return Err(invalid("write value flags"));
        }
        self.queue_value_write(stream as usize, ptr as usize, value)
    }

    /// The device address of pinned host memory at `host` (`hipHostGetDevicePointer`,
    /// `cudaHostGetDevicePointer`): the simulated devices see host memory at its host address.
    /// `flags` must be 0; memory that is not pinned by the simulator is `hipErrorInvalidValue`.
    pub fn host_c_device_pointer(&self, host: *mut c_void, flags: u32) -> HipResult<*mut c_void> {
        if flags != 0 || host.is_null() {
            return Err(invalid("host device pointer"));
        }
        match self.pointer_info(host as usize)?.kind {
            MemoryKind::Host => Ok(host),
            _ => Err(invalid("host device pointer")),
        }
    }

    /// Destroy `stream`; its queued work still completes.
    pub fn destroy_c_stream(&self, stream: CStream) -> HipResult<()> {
        self.destroy_stream(stream as usize)
    }

    /// Wait for the work queued on `stream`; the first failure of that work.
    pub fn synchronize_c_stream(&self, stream: CStream) -> HipResult<()> {
        self.synchronize_stream(stream as usize)
    }

    /// A new event (`hipEventCreate`, `cudaEventCreate`).
    pub fn create_c_event(&self) -> HipResult<CEvent> {
        Ok(self.create_event()? as CEvent)
    }

    /// Record `event` on `stream`.
    pub fn record_c_event(&self, event: CEvent, stream: CStream) -> HipResult<()> {
        self.record_event(event as usize, stream as usize)
    }

    /// Wait until every recording of `event` so far has completed.
    pub fn synchronize_c_event(&self, event: CEvent) -> HipResult<()> {
        self.synchronize_event(event as usize)
    }

    /// `Ok` once all recorded work of `event` completed, `hipErrorNotReady` before.
    pub fn event_status(&self, event: CEvent) -> HipResult<()> {
        match self.query_event(event as usize)? {
            true => Ok(()),
            false => Err(HipError::call("event query", HipErrorCode::NOT_READY)),
        }
    }

    /// Destroy `event`.
    pub fn destroy_c_event(&self, event: CEvent) -> HipResult<()> {
        self.destroy_event(event as usize)
    }

    /// Check one side of a copy: memory the simulator tracks must hold `[ptr, ptr + len)`;
    /// untracked memory is host memory, acceptable unless `device` demands a tracked allocation.
    fn check_side(&self, ptr: usize, len: usize, device: bool) -> HipResult<()> {
        if ptr == 0 {
            return Err(invalid("memory range"));
        }
        let info = self.pointer_info(ptr)?;
        if info.kind == MemoryKind::Unregistered {
            return if device {
                Err(invalid("memory range"))
            } else {
                Ok(())
            };
        }
        match info.remaining_from(ptr) {
            Some(left) if left >= len => Ok(()),
            _ => Err(invalid("memory range")),
        }
    }

    /// Check both sides of a copy that is neither host-to-device nor device-to-host.
    fn check_generic_copy(
        &self,
        dst: usize,
        src: usize,
        size: usize,
        direction: Option<CopyDirection>,
    ) -> HipResult<()> {
        let device = match direction {
            Some(CopyDirection::DeviceToDevice) => true,
            Some(CopyDirection::HostToHost | CopyDirection::Default) => false,
            _ => {
                return Err(HipError::call(
                    "memcpy",
                    HipErrorCode::INVALID_MEMCPY_DIRECTION,
                ))
            }
        };
        self.check_side(dst, size, device)?;
        self.check_side(src, size, device)
    }
}

/// The C exports whose signature and behaviour the HIP and CUDA ABIs share, each generated under
/// the name a simulated library gives it. `runtime` names the library's function answering its
/// process-wide `&'static SimRuntime`, `boundary` its panic guard (`fn(impl FnOnce() -> Result<(),
/// S>) -> c_int`, where `S: From<HipError>` turns the simulator's HIP codes into the ABI's
/// numbering); then one `kind => name;` per export:
///
/// - `device_count`, `current_device`: `hipGetDeviceCount`, `hipGetDevice`; `cudaGet...`;
/// - `malloc`, `free`: `hipMalloc`, `hipFree`; `cudaMalloc`, `cudaFree`;
/// - `host_free`, `host_register`, `host_device_pointer`: `hipHostFree`, `hipHostRegister`,
///   `hipHostGetDevicePointer`; `cudaFreeHost`, `cudaHostRegister`, `cudaHostGetDevicePointer`;
/// - `memcpy`, `memcpy_async`, `memset`, `memset_async`: `hipMemcpy`, ...; `cudaMemcpy`, ...;
/// - `stream_create_with_flags`, `stream_get_device`, `stream_query`, `stream_destroy`,
///   `stream_synchronize`: `hipStreamCreateWithFlags`, ...; `cudaStreamCreateWithFlags`, ...;
/// - `event_record`, `event_synchronize`, `event_query`, `event_destroy`: `hipEventRecord`, ...;
///   `cudaEventRecord`, ...;
/// - `launch_host_func`: `hipLaunchHostFunc`; `cudaLaunchHostFunc`.
///
/// Every export answers NULL out-pointers with the ABI's invalid-value error and never unwinds
/// into C (the boundary catches panics).
#[macro_export]
macro_rules! sim_c_exports {
    (runtime: $sim:ident, boundary: $run:ident; $($kind:ident => $name:ident;)*) => {
        $( $crate::sim_c_exports!(@ $kind $name, $sim, $run); )*
    };

    // Exports that write what the simulator makes through an out-pointer (`capi::put_new`).
    (@ device_count $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@put $name, $run, "the number of simulated devices.";
            (count: *mut ::std::ffi::c_int) into count
                => $crate::GpuRuntime::device_count($sim()));
    };
    (@ current_device $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@put $name, $run, "the calling thread's current device.";
            (device: *mut ::std::ffi::c_int) into device
                => $crate::GpuRuntime::current_device($sim()));
    };
    (@ malloc $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@put $name, $run,
            "device memory on the current device; size 0 gives NULL.";
            (ptr: *mut *mut ::std::ffi::c_void, size: usize) into ptr
                => $sim().device_alloc_or_null(size));
    };
    (@ host_device_pointer $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@put $name, $run,
            "the device address of pinned host memory, which is its host address in the \
             simulator. `flags` must be 0; memory the simulator did not pin is an invalid value.";
            (dev_ptr: *mut *mut ::std::ffi::c_void, host_ptr: *mut ::std::ffi::c_void,
                flags: ::std::ffi::c_uint) into dev_ptr
                => $sim().host_c_device_pointer(host_ptr, flags));
    };
    (@ stream_create_with_flags $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@put $name, $run,
            "flags 0 (Default) make a stream ordered with the NULL stream, 1 (NonBlocking) one \
             that is not; other flags are an invalid value.";
            (out: *mut $crate::sim::capi::CStream, flags: ::std::ffi::c_uint) into out
                => $sim().create_c_stream_with_flags(flags));
    };
    (@ stream_get_device $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@put $name, $run,
            "the device the stream was made on; the current device for NULL.";
            (stream: $crate::sim::capi::CStream, device: *mut ::std::ffi::c_int) into device
                => $sim().c_stream_device(stream));
    };
    (@put $name:ident, $run:ident, $doc:literal;
        ($($arg:ident: $ty:ty),*) into $out:ident => $make:expr) => {
        #[doc = concat!("`", stringify!($name), "`: ", $doc)]
        ///
        /// # Safety
        /// The out-pointer is NULL or valid for writing one value of its type.
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> ::std::ffi::c_int {
            // SAFETY: the caller's contract.
            $run(|| Ok(unsafe { $crate::sim::capi::put_new($out, || $make) }?))
        }
    };

    // Exports that hand C pointers on to a simulator call with its own `# Safety` contract,
    // which is the export's.
    (@ free $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@trusting $name, $run,
            "device or managed memory; NULL is a no-op.",
            "`ptr` is NULL or came from the library's device or managed allocation and no \
             queued work uses it.";
            (ptr: *mut ::std::ffi::c_void)
                => $crate::GpuRuntime::device_free($sim(), ptr as usize));
    };
    (@ host_free $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@trusting $name, $run,
            "pinned host memory; NULL is a no-op.",
            "`ptr` is NULL or came from the library's pinned host allocation and is no longer \
             used.";
            (ptr: *mut ::std::ffi::c_void) => $sim().host_free_or_null(ptr));
    };
    (@ memcpy $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@trusting $name, $run,
            "synchronous.",
            "The host sides of the copy are valid for `size` bytes (device sides are checked).";
            (dst: *mut ::std::ffi::c_void, src: *const ::std::ffi::c_void, size: usize,
                kind: ::std::ffi::c_int)
                => $sim().copy(dst as usize, src as usize, size,
                    $crate::sim::capi::CopyDirection::from_memcpy_kind(kind), None));
    };
    (@ memcpy_async $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@trusting $name, $run,
            "queued on `stream`.",
            "The host sides of the copy stay valid for `size` bytes until the copy completes.";
            (dst: *mut ::std::ffi::c_void, src: *const ::std::ffi::c_void, size: usize,
                kind: ::std::ffi::c_int, stream: $crate::sim::capi::CStream)
                => $sim().copy(dst as usize, src as usize, size,
                    $crate::sim::capi::CopyDirection::from_memcpy_kind(kind), Some(stream)));
    };
    (@ memset $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@trusting $name, $run,
            "fills device memory with the low byte of `value`.",
            "Nothing else accesses the range meanwhile (the range itself is checked).";
            (dst: *mut ::std::ffi::c_void, value: ::std::ffi::c_int, size: usize)
                => $sim().memset(dst as usize, value as u8, size, None));
    };
    (@ memset_async $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@trusting $name, $run,
            "queued on `stream`.",
            "Nothing else accesses the range until the fill completes (the range itself is \
             checked).";
            (dst: *mut ::std::ffi::c_void, value: ::std::ffi::c_int, size: usize,
                stream: $crate::sim::capi::CStream)
                => $sim().memset(dst as usize, value as u8, size, Some(stream)));
    };
    (@ launch_host_func $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@trusting $name, $run,
            "`f(user_data)` runs once the work queued before it is done.",
            "`f` is safe to call once with `user_data` from another thread.";
            (stream: $crate::sim::capi::CStream, f: $crate::sim::capi::CHostFn,
                user_data: *mut ::std::ffi::c_void)
                => $sim().launch_c_host_func(stream, f, user_data));
    };
    (@ host_register $name:ident, $sim:ident, $run:ident) => {
        #[doc = concat!(
            "`", stringify!($name), "`: track caller-owned host memory as pinned; the read-only ",
            "flag (0x08) marks memory the process may only read."
        )]
        ///
        /// # Safety
        /// `[ptr, ptr + size)` is host memory that stays mapped until it is unregistered: later
        /// copies trust it.
        #[no_mangle]
        pub unsafe extern "C" fn $name(
            ptr: *mut ::std::ffi::c_void,
            size: usize,
            flags: ::std::ffi::c_uint,
        ) -> ::std::ffi::c_int {
            $run(|| Ok($sim().register_c_host(ptr, size, flags)?))
        }
    };
    (@trusting $name:ident, $run:ident, $doc:literal, $safety:literal;
        ($($arg:ident: $ty:ty),*) => $call:expr) => {
        #[doc = concat!("`", stringify!($name), "`: ", $doc)]
        ///
        /// # Safety
        #[doc = $safety]
        #[no_mangle]
        pub unsafe extern "C" fn $name($($arg: $ty),*) -> ::std::ffi::c_int {
            // SAFETY: the caller's contract, which is the simulator call's; the simulator checks
            // every side it tracks.
            $run(|| Ok(unsafe { $call }?))
        }
    };

    // Exports that take no pointer the simulator must trust: safe to call with any value.
    (@ stream_query $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@checked $name, $run,
            "success when the stream's queued work has run, not ready otherwise.";
            (stream: $crate::sim::capi::CStream) => $sim().stream_status(stream));
    };
    (@ stream_destroy $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@checked $name, $run, "queued work still completes.";
            (stream: $crate::sim::capi::CStream) => $sim().destroy_c_stream(stream));
    };
    (@ stream_synchronize $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@checked $name, $run, "waits for the stream's queued work.";
            (stream: $crate::sim::capi::CStream) => $sim().synchronize_c_stream(stream));
    };
    (@ event_record $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@checked $name, $run, "records the event on the stream.";
            (event: $crate::sim::capi::CEvent, stream: $crate::sim::capi::CStream)
                => $sim().record_c_event(event, stream));
    };
    (@ event_synchronize $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@checked $name, $run, "waits for the event.";
            (event: $crate::sim::capi::CEvent) => $sim().synchronize_c_event(event));
    };
    (@ event_query $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@checked $name, $run, "success when complete, not ready otherwise.";
            (event: $crate::sim::capi::CEvent) => $sim().event_status(event));
    };
    (@ event_destroy $name:ident, $sim:ident, $run:ident) => {
        $crate::sim_c_exports!(@checked $name, $run, "destroys the event.";
            (event: $crate::sim::capi::CEvent) => $sim().destroy_c_event(event));
    };
    (@checked $name:ident, $run:ident, $doc:literal;
        ($($arg:ident: $ty:ty),*) => $call:expr) => {
        #[doc = concat!("`", stringify!($name), "`: ", $doc)]
        #[no_mangle]
        pub extern "C" fn $name($($arg: $ty),*) -> ::std::ffi::c_int {
            $run(|| Ok($call?))
        }
    };
}
