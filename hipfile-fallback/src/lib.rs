//! # hipfile-fallback: the staged backend
//!
//! When the direct path cannot serve a request (no P2P driver, an unsupported filesystem, an
//! unaligned request, compat mode forced), hipfile-rs stages it through pinned host memory: file
//! bytes are read into a page-locked buffer and copied to the GPU, or copied from the GPU and
//! written to the file. This crate is that engine, registered as the backend `fallback` with
//! [`hipfile_core::priority::FALLBACK`].
//!
//! ## Contract
//!
//! - Accepts every validated request while compat mode is allowed (`HIPFILE_ALLOW_COMPAT_MODE`,
//!   or forced), and declines with [`Decline::CompatModeDisallowed`] otherwise.
//! - Reads return the bytes read, fewer than asked only at end of file; writes return the full
//!   size or fail. A failure on any chunk fails the call; the bytes already moved are reported to
//!   the dispatcher (which never fails such a request over), never as success.
//! - Writes have `pwrite` semantics: the data is in the page cache on return; durability is the
//!   caller's `fsync`.
//! - Pinned memory is bounded by the `max_pinned_mem_size_kb` setting; one transfer is at most
//!   `max_direct_io_size_kb`.
//!
//! The pieces are separate modules: [`staging`] (the pinned pool) and [`engine`] (the transfer
//! loop).
//!
//! ```
//! use std::sync::Arc;
//! use hipfile_core::{Driver, DriverOptions, RegistryBuilder};
//! use hipfile_hip::sim::SimRuntime;
//!
//! let mut backends = RegistryBuilder::new();
//! hipfile_fallback::register(&mut backends)?;
//! let driver = Driver::new(DriverOptions {
//!     backends: Some(backends),
//!     selection: None,
//!     ..DriverOptions::with_runtime(Arc::new(SimRuntime::default()))
//! });
//! driver.open()?;
//! assert_eq!(driver.session().unwrap().registry().names(), ["fallback"]);
//! # Ok::<(), hipfile_core::Error>(())
//! ```

pub mod engine;
pub mod staging;

use std::sync::Arc;

use hipfile_core::{
    priority, Backend, BackendContext, BackendDescriptor, Decline, FileIo, IoFailure, IoRequest,
    RegistryBuilder, Result,
};
use hipfile_hip::GpuRuntime;

use crate::staging::StagingPool;

/// The backend's name.
pub const NAME: &str = "fallback";

/// The descriptor registered with `inventory` and by [`register`].
pub const DESCRIPTOR: BackendDescriptor = BackendDescriptor {
    name: NAME,
    priority: priority::FALLBACK,
    init,
};

hipfile_core::inventory::submit! { DESCRIPTOR }

/// Add the fallback to an explicitly built registry.
pub fn register(builder: &mut RegistryBuilder) -> Result<()> {
    builder.add(DESCRIPTOR).map(|_| ())
}

fn init(ctx: &BackendContext) -> Result<Arc<dyn Backend>> {
    let backend = Fallback::new(ctx);
    let settings = ctx.settings.current();
    let devices = ctx
        .runtime
        .device_count()
        .map_err(|e| hipfile_core::Error::hip(&e, "counting devices"))?;
    let chunk = settings
        .max_direct_io_bytes()
        .min(settings.max_pinned_bytes());
    for device in 0..devices {
        // Touching one staging buffer per device now keeps allocation and page faults out of the
        // first request. A pool too small for even that is not an error: requests then stage in
        // whatever the bound allows.
        if chunk >= 4096 {
            backend
                .pool
                .prefill(device, chunk, settings.max_pinned_bytes())?;
        }
    }
    Ok(Arc::new(backend))
}

/// The staged engine.
#[derive(Debug)]
pub struct Fallback {
    runtime: Arc<dyn GpuRuntime>,
    io: Arc<dyn FileIo>,
    pool: Arc<StagingPool>,
}

impl Fallback {
    /// The engine for an opening driver.
    pub fn new(ctx: &BackendContext) -> Self {
        Fallback {
            runtime: Arc::clone(&ctx.runtime),
            io: Arc::clone(&ctx.io),
            pool: Arc::new(StagingPool::new(Arc::clone(&ctx.runtime))),
        }
    }

    /// Bytes of pinned memory held by the staging pool.
    pub fn pinned_bytes(&self) -> usize {
        self.pool.held_bytes()
    }
}

impl Backend for Fallback {
    fn name(&self) -> &'static str {
        NAME
    }

    fn accepts(&self, req: &IoRequest<'_>) -> Result<(), Decline> {
        if req.compat.allowed {
            Ok(())
        } else {
            Err(Decline::CompatModeDisallowed)
        }
    }

    fn execute(&self, req: &IoRequest<'_>) -> Result<usize, IoFailure> {
        let bound = req.settings.max_pinned_bytes();
        let chunk = req
            .settings
            .max_direct_io_bytes()
            .min(bound)
            .min(req.size.max(1));
        let mut lease = self
            .pool
            .lease(req.device, chunk, bound)
            .map_err(|e| IoFailure::new(e, 0))?;
        engine::transfer(
            &*self.runtime,
            &*self.io,
            req.file.buffered_fd(),
            req,
            &mut lease,
            chunk,
        )
    }
}
