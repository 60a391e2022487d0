//! CUDA driver contexts of the NVIDIA platform. Device memory of another CUDA context in the
//! process (a PyTorch or CuPy allocation) works: the driver calls that need a context
//! (`cuMemGetAddressRange_v2`) run with the owning device's primary context made current for the
//! call and the caller's context restored afterwards ([`ContextGuard`]). The primary contexts this
//! runtime retains are released when it drops; `cuInit(0)` runs once, before the first driver
//! call.

use std::sync::PoisonError;

use super::symbols::{DriverApi, RawContext};
use super::NvidiaRuntime;
use crate::error::HipResult;

impl NvidiaRuntime {
    /// `cuInit(0)`, once per runtime, before any other driver call.
    pub(super) fn driver(&self) -> HipResult<&DriverApi> {
        let rc = *self.driver_init.get_or_init(|| {
            // SAFETY: cuInit takes a plain flags word, which must be 0.
            unsafe { (self.drv.init)(0) }
        });
        self.check_driver("cuInit", rc)?;
        Ok(&self.drv)
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
    pub(super) fn enter_context(&self, device: i32) -> HipResult<ContextGuard<'_>> {
        let target = self.primary_context(device)?;
        self.enter_raw_context(target)
    }

    /// Make `target` current until the guard drops, unless it already is.
    ///
    /// `target` is a context that stays alive meanwhile (a primary context this runtime retained,
    /// or the context of a live stream).
    pub(super) fn enter_raw_context(&self, target: RawContext) -> HipResult<ContextGuard<'_>> {
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
        // SAFETY: `target` is alive for the guard's length (the caller's contract).
        let rc = unsafe { (drv.ctx_set_current)(target) };
        self.check_driver("cuCtxSetCurrent", rc)?;
        Ok(ContextGuard {
            drv,
            previous: Some(previous),
        })
    }
}

impl NvidiaRuntime {
    /// A context of the library's own on `device` (`cuCtxCreate_v2`), left not current: the
    /// new context, which the driver pushed on the thread's stack, is popped off it again, so the
    /// caller's is current as before. `None` where the driver lacks the calls.
    pub(super) fn create_own_context(&self, device: i32) -> HipResult<Option<RawContext>> {
        let drv = self.driver()?;
        let (Some(create), Some(_), Some(pop)) =
            (drv.ctx_create, drv.ctx_destroy, drv.ctx_pop_current)
        else {
            return Ok(None);
        };
        let mut handle = 0i32;
        // SAFETY: `handle` is a valid out-pointer; the driver validates the ordinal.
        let rc = unsafe { (drv.device_get)(&mut handle, device) };
        self.check_driver("cuDeviceGet", rc)?;
        let mut ctx: RawContext = std::ptr::null_mut();
        // SAFETY: `ctx` is a valid out-pointer, `handle` a device the driver just handed out;
        // flags 0 (the default scheduling).
        let rc = unsafe { create(&mut ctx, 0, handle) };
        self.check_driver("cuCtxCreate_v2", rc)?;
        let mut popped: RawContext = std::ptr::null_mut();
        // SAFETY: `popped` is a valid out-pointer; the new context is the top of the stack.
        let rc = unsafe { pop(&mut popped) };
        if let Err(e) = self.check_driver("cuCtxPopCurrent_v2", rc) {
            // SAFETY: made just above and used by nothing yet.
            let _ = unsafe { self.destroy_own_context(ctx) };
            return Err(e);
        }
        Ok(Some(ctx))
    }

    /// Destroy a context made by [`NvidiaRuntime::create_own_context`].
    ///
    /// # Safety
    /// `ctx` came from `create_own_context` and nothing uses it any more.
    pub(super) unsafe fn destroy_own_context(&self, ctx: RawContext) -> HipResult<()> {
        let drv = self.driver()?;
        let Some(destroy) = drv.ctx_destroy else {
            return Ok(());
        };
        // SAFETY: the caller's contract.
        let rc = unsafe { destroy(ctx) };
        self.check_driver("cuCtxDestroy_v2", rc)
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

/// Restores the caller's current driver context on drop.
pub(super) struct ContextGuard<'a> {
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
