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

use super::errors::driver_failed;
use super::NvidiaRuntime;
use crate::error::{HipError, HipErrorCode, HipResult};
use crate::ffi::cuda::StreamWaitValue;
use crate::ffi::runtime_api::{device_of_stream, LiveStream, MappedWord};
use crate::runtime::DeviceGuard;

/// A stream memory operation of the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StreamMemop {
    /// `cuStreamWaitValue32`: later work waits until a word is at least a value.
    Wait,
    /// `cuStreamWriteValue32`: the stream stores a value into a word.
    Write,
}

/// `CU_STREAM_WAIT_VALUE_GEQ`.
const CU_STREAM_WAIT_VALUE_GEQ: u32 = 0x0;
/// `CU_STREAM_WRITE_VALUE_DEFAULT`: the store waits for the stream's earlier work.
const CU_STREAM_WRITE_VALUE_DEFAULT: u32 = 0x0;
/// `CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1` (`..._CAN_USE_STREAM_MEM_OPS` before CUDA 12).
const CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1: i32 = 92;

impl NvidiaRuntime {
    /// The device of a live stream other than the null stream (see the module docs).
    pub(super) fn stream_device_of(&self, stream: LiveStream<'_>) -> HipResult<i32> {
        if let Some((rc, device)) = self.rt.stream_get_device(stream) {
            self.check("cudaStreamGetDevice", rc)?;
            return Ok(device);
        }
        self.device_through_driver(stream)
    }

    /// [`NvidiaRuntime::stream_device_through_driver`] of a stream vouched live.
    pub(crate) fn device_through_driver(&self, stream: LiveStream<'_>) -> HipResult<i32> {
        let drv = self.driver()?;
        let lacking = || HipError::Call {
            call: "cuStreamGetCtx",
            code: HipErrorCode::NOT_SUPPORTED,
            detail: Some(format!(
                "{} lacks cuStreamGetCtx or cuCtxGetDevice",
                self.driver_library
            )),
        };
        // Both calls are asked for before the first is made.
        if !drv.knows_stream_devices() {
            return Err(lacking());
        }
        let ctx = drv.stream_context(stream).ok_or_else(lacking)?;
        let handle = {
            let ctx = ctx.map_err(driver_failed)?;
            // Switching contexts moves the runtime's current device: it is restored on its own.
            let _device = DeviceGuard::keep(self)?;
            let _context = self.enter_live_context(ctx)?;
            drv.current_context_device()
                .ok_or_else(lacking)?
                .map_err(driver_failed)?
        };
        self.ordinal_of(handle)
    }

    /// The ordinal of the `CUdevice` `handle`: the one whose `cuDeviceGet` gives it.
    fn ordinal_of(&self, handle: i32) -> HipResult<i32> {
        let drv = self.driver()?;
        for ordinal in 0..self.cached_device_count()? {
            if drv.device(ordinal).map_err(driver_failed)? == handle {
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
        if !drv.knows_device_attributes() {
            return false;
        }
        let Ok(handle) = drv.device(device) else {
            return false;
        };
        drv.device_attribute(CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, handle)
            .is_some_and(|(rc, can)| rc == 0 && can != 0)
    }

    /// Queue stream memory operation `op` on `stream` for `word`: the wait (until the word is at
    /// least `value`; the driver only reads it), or the write of `value` once the stream's earlier
    /// work is done (see the module docs).
    pub(super) fn queue_stream_memop(
        &self,
        op: StreamMemop,
        stream: LiveStream<'_>,
        word: MappedWord<'_>,
        value: u32,
    ) -> HipResult<()> {
        let drv = self.driver()?;
        let (entry, wanted, flags) = match op {
            StreamMemop::Wait => (
                drv.stream_wait_value,
                "cuStreamWaitValue32_v2",
                CU_STREAM_WAIT_VALUE_GEQ,
            ),
            StreamMemop::Write => (
                drv.stream_write_value,
                "cuStreamWriteValue32_v2",
                CU_STREAM_WRITE_VALUE_DEFAULT,
            ),
        };
        self.queue_memop(entry, wanted, stream, word, value, flags)
    }

    /// Queue stream memory operation `op` (a wait or a write) on `stream`, with the stream's
    /// context current (the current device's primary context for the null stream).
    fn queue_memop(
        &self,
        op: Option<StreamWaitValue>,
        wanted: &'static str,
        stream: LiveStream<'_>,
        word: MappedWord<'_>,
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
        let stream_context = if stream.is_null() {
            None
        } else {
            drv.stream_context(stream)
        };
        let _context = match stream_context {
            None => {
                let device = device_of_stream(self, stream)?;
                self.enter_context(device)?
            }
            Some(ctx) => self.enter_live_context(ctx.map_err(driver_failed)?)?,
        };
        let rc = op.queue(stream, word, value, flags);
        self.check_driver(op.name, rc)
    }
}
