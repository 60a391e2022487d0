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
//! - Accepts every validated request of device memory while compat mode is allowed
//!   (`HIPFILE_ALLOW_COMPAT_MODE`, or forced), and declines with
//!   [`Decline::CompatModeDisallowed`] otherwise. Host memory (admitted by the setting
//!   `allow_system_memory`) is declined ([`Decline::HostMemory`]): the crate's second backend,
//!   [`host`] (named `host`, [`hipfile_core::priority::HOST`]), moves it with `pread`/`pwrite`
//!   straight between the file and that memory, no staging.
//! - Reads return the bytes read, fewer than asked only at end of file; writes return the full
//!   size or fail. A failure on any chunk fails the call; the bytes already moved are reported to
//!   the dispatcher (which never fails such a request over), never as success.
//! - Writes have `pwrite` semantics: the data is in the page cache on return; durability is the
//!   caller's `fsync`.
//! - Pinned memory is bounded by the `max_pinned_mem_size_kb` setting; one transfer is at most
//!   `max_direct_io_size_kb`. Stream-ordered requests
//!   ([`hipfile_core::OwnedRequest::stream_ordered`]) stage through lanes of their own, on streams
//!   not ordered with the legacy default stream (the application's stream waits for them), in a
//!   second pool with the same bound: such a request never waits for a lane held by a synchronous
//!   request that waits behind that stream.
//!
//! - A synchronous request ([`Submit::Wait`]) runs inside `submit` on the calling thread, with IO
//!   workers joining large ones; a queued request ([`Submit::Queue`]) runs on the workers and
//!   its waiter joins in when it waits. Queued requests start workers as they need them, up to
//!   the queue depth (`io_queue_depth`), the staging lanes the pinned bound holds and the cores
//!   ([`queued_workers`]), so a batch of small requests keeps that many in flight. Appending
//!   writes run inside `submit` either way, whole, under the file's append lock.
//!
//! - Reads of cached, settled ranges of registered files are copied straight out of the page
//!   cache where it is pinned ([`pins`]): no CPU copy, the device reads the page cache's pages.
//!
//! Which module owns what, read top to bottom:
//! - [`plan`]: how a request is cut into pieces and how many threads share them.
//! - [`engine`]: one transfer: its pieces shared out among the threads working on it, each
//!   pipelining through its staging lane; for each piece of a read it asks the pins first
//!   and stages what they do not serve. `claims` holds which pieces are taken: from the front
//!   to stage, from the back for a tail the pins serve.
//! - [`pins`]: the pinned page cache: each registered file's windows, the budget and the
//!   pinning thread, and [`pins::TransferPins`], one transfer's piece source ("serve this
//!   range from pinned page cache, else stage it").
//! - [`piece_io`]: how a staged piece reaches the file: the O_DIRECT policy, through the page
//!   cache or around it. (The direct path, file to device memory, is `hipfile-fastpath`.)
//! - [`staging`]: the bounded pool of pinned staging lanes.
//!
//! The IO threads are [`hipfile_core::workers`]. The crate has no `unsafe`: the asynchronous
//! copies live in `hipfile-hip`'s [`hipfile_hip::StagingLane`], and device memory arrives as a
//! checked [`hipfile_hip::DeviceRange`]; host memory, in the `host` engine, a
//! [`hipfile_hip::HostRange`] whose bytes only the kernel moves.
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

#![forbid(unsafe_code)]

mod claims;
pub mod engine;
pub mod host;
pub mod piece_io;
pub mod pins;
pub mod plan;
pub mod staging;

use std::sync::Arc;

use hipfile_core::{
    priority, Backend, BackendContext, BackendReport, Completion, Decline, Error, ErrorKind,
    IoFailure, IoPath, IoRequest, ReportWhen, Resources, Result, Settings, Submit,
};

use crate::engine::{EngineParts, Transfer};
use crate::pins::PagePins;
use crate::staging::StagingPool;
use hipfile_core::workers::IoWorkers;
use hipfile_hip::StreamOrder;

hipfile_core::register_backend! {
    name: "fallback",
    priority: priority::FALLBACK,
    path: IoPath::Staged,
    init: |ctx| Ok(Arc::new(Fallback::new(ctx)?)),
}

/// The staged engine.
#[derive(Debug)]
pub struct Fallback {
    parts: EngineParts,
    workers: IoWorkers<Transfer>,
}

impl Fallback {
    /// The engine for an opening driver: starts the IO workers and makes (and touches) one lane
    /// per thread that can work on a request, on the current device, within the pinned bound.
    pub fn new(ctx: &BackendContext) -> Result<Self> {
        let settings = ctx.settings.current();
        let workers = IoWorkers::start(settings.io_threads(), queued_workers(&settings))
            .map_err(|e| Error::from_io(&e, "starting the IO workers"))?;
        let pool = Arc::new(StagingPool::new(
            Arc::clone(&ctx.runtime),
            settings.event_wait,
            StreamOrder::WithDefaultStream,
        ));
        let stream_pool = Arc::new(StagingPool::new(
            Arc::clone(&ctx.runtime),
            settings.event_wait,
            StreamOrder::Independent,
        ));
        let device = ctx
            .runtime
            .current_device()
            .map_err(|e| Error::hip(&e, "reading the current device"))?;
        pool.prefill(
            device,
            settings.chunk_bytes(),
            settings.max_pinned_bytes(),
            workers.count() + 1,
        )?;
        if settings.compat_mode(&ctx.env).allowed {
            log::info!(
                "fallback started: {} IO workers, {} KiB staging chunks on device {device}",
                workers.count(),
                settings.chunk_bytes() / 1024
            );
        } else {
            log::info!(
                "fallback started but declines every request: {}",
                Decline::CompatModeDisallowed
            );
        }
        let pins = PagePins::new(Arc::clone(&ctx.runtime), Arc::clone(&ctx.io))
            .map_err(|e| Error::from_io(&e, "starting the page-cache pinning thread"))?;
        Ok(Fallback {
            parts: EngineParts {
                io: Arc::clone(&ctx.io),
                pool,
                stream_pool,
                file_paths: Arc::default(),
                pins: Arc::new(pins),
            },
            workers,
        })
    }

    /// Bytes of pinned memory held by the staging pools.
    pub fn pinned_bytes(&self) -> usize {
        self.parts.pool.held_bytes() + self.parts.stream_pool.held_bytes()
    }

    /// Number of IO worker threads.
    pub fn io_threads(&self) -> usize {
        self.workers.count()
    }
}

/// The most workers queued requests (batch entries) start: one each, up to the queue depth, no
/// more than the staging lanes the pinned bound holds (a worker without a lane only waits), and
/// no more than the cores. A worker waits for its copies by polling, so workers beyond the cores
/// only take turns: on the H200 host (16 cores) a batch of 32 hot 4 KiB reads ran at 130 K IOPS
/// on 32 workers and 261 K on 16, and 32 cold ones at 0.62 and 0.78 of the O_DIRECT ceiling.
pub fn queued_workers(settings: &Settings) -> usize {
    let lanes = settings.max_pinned_bytes() / settings.chunk_bytes().saturating_mul(2).max(1);
    let depth = usize::try_from(settings.io_queue_depth).unwrap_or(usize::MAX);
    let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
    depth.min(lanes).min(cores)
}

impl Backend for Fallback {
    fn name(&self) -> &'static str {
        NAME
    }

    fn accepts(&self, req: &IoRequest<'_>) -> Result<(), Decline> {
        if req.memory.device_range().is_none() {
            return Err(Decline::HostMemory);
        }
        if req.compat.allowed {
            Ok(())
        } else {
            Err(Decline::CompatModeDisallowed)
        }
    }

    fn submit(&self, req: &IoRequest<'_>, how: Submit) -> Completion {
        let threads = match req.settings.max_request_parallelism {
            0 => self.workers.count() + 1,
            n => usize::try_from(n)
                .unwrap_or(usize::MAX)
                .min(self.workers.count() + 1),
        };
        let Some(memory) = req.memory.device_range() else {
            let e = Error::new(
                ErrorKind::HipMemoryTypeInvalid,
                "the staged engine serves device memory only",
            );
            return Completion::ready(Err(IoFailure::new(e, 0)));
        };
        let transfer = Transfer::new(req, memory, &self.parts, threads);
        if req.append {
            // Appending requests to one file run one after the other, each whole.
            let _appending = req.file.append_lock();
            return Completion::ready(transfer.run(&self.workers));
        }
        match how {
            // With no IO workers there is no thread to make progress for a queued request: it
            // runs here, before `submit` returns.
            Submit::Queue if self.workers.count() > 0 => {
                Completion::pending(transfer.queue(&self.workers))
            }
            _ => Completion::ready(transfer.run(&self.workers)),
        }
    }

    fn report(&self, when: ReportWhen) -> BackendReport {
        if when == ReportWhen::Settled {
            self.parts.pins.settle();
        }
        let mut counters = self.parts.file_paths.counters();
        counters.extend(self.parts.pins.counters());
        let resources = if when == ReportWhen::Statistics {
            Resources::default()
        } else {
            Resources {
                pinned_bytes: self.pinned_bytes(),
                io_threads: self.io_threads(),
                page_cache_pinned_bytes: self.parts.pins.pinned_bytes(),
                own_contexts: self.parts.pins.own_contexts(),
            }
        };
        BackendReport {
            mechanism: None,
            counters,
            resources,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queued_workers_stop_at_the_depth_the_lanes_and_the_cores() {
        let cores = std::thread::available_parallelism().map_or(4, |n| n.get());
        let defaults = Settings::default();
        // 256 MiB of pinned memory holds 32 lanes of two 4 MiB halves.
        assert_eq!(queued_workers(&defaults), cores.min(32));
        let shallow = Settings {
            io_queue_depth: 1,
            ..Settings::default()
        };
        assert_eq!(queued_workers(&shallow), 1);
        let two_lanes = Settings {
            max_pinned_mem_size_kb: 16 * 1024,
            ..Settings::default()
        };
        assert_eq!(queued_workers(&two_lanes), cores.min(2));
    }
}
