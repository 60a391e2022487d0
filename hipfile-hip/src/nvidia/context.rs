//! CUDA driver contexts of the NVIDIA platform. Device memory of another CUDA context in the
//! process (a PyTorch or CuPy allocation) works: the driver calls that need a context
//! (`cuMemGetAddressRange_v2`) run with the owning device's primary context made current for the
//! call and the caller's context restored afterwards ([`ContextGuard`]). The primary contexts this
//! runtime retains are released when it drops; `cuInit(0)` runs once, before the first driver
//! call.

use super::errors::driver_failed;
use super::NvidiaRuntime;
use crate::error::HipResult;
use crate::ffi::cuda::{ContextGuard, DriverApi};
use crate::ffi::runtime_api::{LiveContext, RetiredContext};
use crate::runtime::ContextHandle;

impl NvidiaRuntime {
    /// `cuInit(0)`, once per runtime, before any other driver call.
    pub(super) fn driver(&self) -> HipResult<&DriverApi> {
        let rc = *self.driver_init.get_or_init(|| self.drv.init());
        self.check_driver("cuInit", rc)?;
        Ok(&self.drv)
    }

    /// Make the primary context of `device` (retained on first use, kept until this runtime
    /// drops) current until the guard drops, unless it already is.
    pub(super) fn enter_context(&self, device: i32) -> HipResult<ContextGuard<'_>> {
        let drv = self.driver()?;
        let target = self.primary_contexts.get(device).map_err(driver_failed)?;
        drv.enter(target).map_err(driver_failed)
    }

    /// Make `target` current until the guard drops, unless it already is.
    pub(super) fn enter_live_context<'a>(
        &'a self,
        target: LiveContext<'a>,
    ) -> HipResult<ContextGuard<'a>> {
        self.driver()?.enter(target).map_err(driver_failed)
    }

    /// A context of the library's own on `device`, left not current. `None` where the driver
    /// lacks the calls.
    pub(super) fn create_own_context(&self, device: i32) -> HipResult<Option<ContextHandle>> {
        let drv = self.driver()?;
        if !drv.offers_own_contexts() {
            return Ok(None);
        }
        let handle = drv.device(device).map_err(driver_failed)?;
        drv.create_context(handle)
            .transpose()
            .map_err(driver_failed)
    }

    /// Destroy a context made by [`NvidiaRuntime::create_own_context`].
    pub(super) fn destroy_own_context(&self, ctx: RetiredContext) -> HipResult<()> {
        self.driver()?.destroy_context(ctx).map_err(driver_failed)
    }
}
