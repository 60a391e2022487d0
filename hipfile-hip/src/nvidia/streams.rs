//! Streams of the NVIDIA platform beyond what the CUDA runtime shares with HIP: the device a
//! stream belongs to, and the stream memory wait, which only the driver API offers.
//!
//! - The device of a stream is `cudaStreamGetDevice` where the runtime exports it (CUDA 12.8+);
//!   else the driver's `cuStreamGetCtx`, with that context made current for `cuCtxGetDevice`
//!   (and the caller's context and device restored), the `CUdevice` mapped back to its ordinal
//!   through `cuDeviceGet`.
//! - The wait is `cuStreamWaitValue32_v2` (`CU_STREAM_WAIT_VALUE_GEQ`), available on every
//!   device, else the legacy `cuStreamWaitValue32` where `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS`
//!   says so. CUDA compares cyclically (`(int32_t)(*addr - value) >= 0`), which is `>=` for values
//!   that only grow. The call is made with the stream's context current (the current device's
//!   primary context for the null stream), as driver calls need a context.

use super::symbols::{DevicePtr, RawContext, StreamWaitValue};
use super::NvidiaRuntime;
use crate::error::{HipError, HipErrorCode, HipResult};
use crate::loaded::RawStream;
use crate::runtime::{DeviceGuard, GpuRuntime, StreamHandle};

/// `CU_STREAM_WAIT_VALUE_GEQ`.
const CU_STREAM_WAIT_VALUE_GEQ: u32 = 0x0;
/// `CU_STREAM_WRITE_VALUE_DEFAULT`: the store waits for the stream's earlier work.
const CU_STREAM_WRITE_VALUE_DEFAULT: u32 = 0x0;
/// `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1` (`..._CAN_USE_STREAM_MEM_OPS` before CUDA 12).
const CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1: i32 = 92;

impl NvidiaRuntime {
    /// The device of a live stream other than the null stream (see the module docs).
    ///
    /// # Safety
    /// `stream` is a live stream of this runtime.
    pub(super) unsafe fn stream_device_of(&self, stream: StreamHandle) -> HipResult<i32> {
        if let Some(get) = self.rt.stream_get_device {
            let mut device = -1;
            // SAFETY: the caller guarantees a live stream; `device` is a valid out-pointer.
            let rc = unsafe { get(stream.as_raw() as RawStream, &mut device) };
            self.check("cudaStreamGetDevice", rc)?;
            return Ok(device);
        }
        // SAFETY: the caller's contract.
        unsafe { self.stream_device_through_driver(stream) }
    }

    /// The device of a live stream asked of the driver: `cuStreamGetCtx`, then `cuCtxGetDevice`
    /// in that context. What [`GpuRuntime::stream_device`] does where the runtime has no
    /// `cudaStreamGetDevice`; public so that both ways can be checked against each other.
    ///
    /// # Safety
    /// `stream` is a live stream of this runtime.
    pub unsafe fn stream_device_through_driver(&self, stream: StreamHandle) -> HipResult<i32> {
        let drv = self.driver()?;
        let (Some(get_ctx), Some(get_device)) = (drv.stream_get_ctx, drv.ctx_get_device) else {
            return Err(HipError::Call {
                call: "cuStreamGetCtx",
                code: HipErrorCode::NOT_SUPPORTED,
                detail: Some(format!(
                    "{} lacks cuStreamGetCtx or cuCtxGetDevice",
                    self.driver_library
                )),
            });
        };
        let ctx = self.stream_context(stream, get_ctx)?;
        let handle = {
            // Switching contexts moves the runtime's current device: it is restored on its own.
            let _device = DeviceGuard::keep(self)?;
            let _context = self.enter_raw_context(ctx)?;
            let mut handle = -1;
            // SAFETY: `handle` is a valid out-pointer; a context is current.
            let rc = unsafe { get_device(&mut handle) };
            self.check_driver("cuCtxGetDevice", rc)?;
            handle
        };
        self.ordinal_of(handle)
    }

    /// `cuStreamGetCtx` of a live stream.
    fn stream_context(
        &self,
        stream: StreamHandle,
        get_ctx: unsafe extern "C" fn(RawStream, *mut RawContext) -> i32,
    ) -> HipResult<RawContext> {
        let mut ctx: RawContext = std::ptr::null_mut();
        // SAFETY: the stream is live (the callers' contract); `ctx` is a valid out-pointer.
        let rc = unsafe { get_ctx(stream.as_raw() as RawStream, &mut ctx) };
        self.check_driver("cuStreamGetCtx", rc)?;
        Ok(ctx)
    }

    /// The ordinal of the `CUdevice` `handle`: the one whose `cuDeviceGet` gives it.
    fn ordinal_of(&self, handle: i32) -> HipResult<i32> {
        let drv = self.driver()?;
        for ordinal in 0..self.cached_device_count()? {
            let mut h = -1;
            // SAFETY: `h` is a valid out-pointer; the ordinal is in range.
            let rc = unsafe { (drv.device_get)(&mut h, ordinal) };
            self.check_driver("cuDeviceGet", rc)?;
            if h == handle {
                return Ok(ordinal);
            }
        }
        Err(HipError::Unexpected {
            call: "cuCtxGetDevice",
            detail: format!("CUdevice {handle} is no device of this process"),
        })
    }

    /// Whether the driver offers stream memory waits: `cuStreamWaitValue32_v2` is exported (or the
    /// legacy one, and the device allows it). The platform does not use them to hold streams (see
    /// its `GpuRuntime::stream_memops`).
    pub fn stream_memops_on(&self, device: i32) -> bool {
        self.driver()
            .is_ok_and(|drv| self.memop_usable(drv.stream_wait_value, device))
    }

    /// Whether the driver offers stream memory writes: `cuStreamWriteValue32_v2` is exported (or
    /// the legacy one, and the device allows it).
    pub fn stream_writes_on(&self, device: i32) -> bool {
        self.driver()
            .is_ok_and(|drv| self.memop_usable(drv.stream_write_value, device))
    }

    /// Whether stream memory operation `op` may be used on `device`: it is exported, and where it
    /// is the legacy entry point the device says it can use stream memory operations.
    fn memop_usable(&self, op: Option<StreamWaitValue>, device: i32) -> bool {
        let Ok(drv) = self.driver() else {
            return false;
        };
        let Some(op) = op else {
            return false;
        };
        if !self
            .cached_device_count()
            .is_ok_and(|n| device >= 0 && device < n)
        {
            return false;
        }
        if !op.legacy {
            return true;
        }
        let Some(attribute) = drv.device_get_attribute else {
            return false;
        };
        let mut handle = -1;
        // SAFETY: `handle` is a valid out-pointer; the ordinal is in range.
        if unsafe { (drv.device_get)(&mut handle, device) } != 0 {
            return false;
        }
        let mut can = 0;
        // SAFETY: `can` is a valid out-pointer; `handle` came from cuDeviceGet.
        let rc = unsafe {
            attribute(
                &mut can,
                CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1,
                handle,
            )
        };
        rc == 0 && can != 0
    }

    /// Queue the stream memory wait (see the module docs).
    ///
    /// # Safety
    /// The contract of [`GpuRuntime::stream_wait_value`].
    pub(super) unsafe fn queue_stream_wait(
        &self,
        stream: StreamHandle,
        addr: usize,
        value: u32,
    ) -> HipResult<()> {
        let op = self.driver()?.stream_wait_value;
        // SAFETY: the caller's contract; the driver only reads the word.
        unsafe {
            self.queue_memop(
                op,
                "cuStreamWaitValue32_v2",
                stream,
                addr,
                value,
                CU_STREAM_WAIT_VALUE_GEQ,
            )
        }
    }

    /// Queue the stream memory write: `value` stored at `addr` once the stream's earlier work is
    /// done.
    ///
    /// # Safety
    /// The contract of [`GpuRuntime::stream_write_value`].
    pub(super) unsafe fn queue_stream_write(
        &self,
        stream: StreamHandle,
        addr: usize,
        value: u32,
    ) -> HipResult<()> {
        let op = self.driver()?.stream_write_value;
        // SAFETY: the caller's contract; the host accesses the word only atomically.
        unsafe {
            self.queue_memop(
                op,
                "cuStreamWriteValue32_v2",
                stream,
                addr,
                value,
                CU_STREAM_WRITE_VALUE_DEFAULT,
            )
        }
    }

    /// Queue stream memory operation `op` (a wait or a write) on `stream`, with the stream's
    /// context current (the current device's primary context for the null stream).
    ///
    /// # Safety
    /// `stream` is live; `addr` is the device address of a live, aligned word of host-mapped
    /// memory of this runtime that stays allocated until the operation has run.
    unsafe fn queue_memop(
        &self,
        op: Option<StreamWaitValue>,
        wanted: &'static str,
        stream: StreamHandle,
        addr: usize,
        value: u32,
        flags: u32,
    ) -> HipResult<()> {
        let drv = self.driver()?;
        let Some(op) = op else {
            return Err(HipError::Call {
                call: wanted,
                code: HipErrorCode::NOT_SUPPORTED,
                detail: Some(format!(
                    "{} has no stream memory operations",
                    self.driver_library
                )),
            });
        };
        let _device = DeviceGuard::keep(self)?;
        let _context = match (stream.as_raw(), drv.stream_get_ctx) {
            (0, _) | (_, None) => {
                // SAFETY: the caller guarantees a live stream.
                let device = unsafe { self.stream_device(stream) }?;
                self.enter_context(device)?
            }
            (_, Some(get_ctx)) => self.enter_raw_context(self.stream_context(stream, get_ctx)?)?,
        };
        // SAFETY: the caller guarantees a live stream and a live, aligned word of host-mapped
        // memory at the device address `addr`.
        let rc = unsafe {
            (op.call)(
                stream.as_raw() as RawStream,
                addr as DevicePtr,
                value,
                flags,
            )
        };
        self.check_driver(op.name, rc)
    }
}
