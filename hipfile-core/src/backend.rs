//! The contract between the dispatcher and the engines that move bytes.
//!
//! A backend is offered every request through [`Backend::accepts`] (cheap, pure: it looks only at
//! the request and answers yes or a typed [`Decline`]); the highest-priority backend that accepts
//! starts it with [`Backend::submit`], and the dispatcher waits for its [`Completion`]. Backends
//! register a [`BackendDescriptor`] with `inventory::submit!` and also export a plain
//! `register(&mut RegistryBuilder)`, because the linker drops inventory entries of crates nothing
//! names.

use std::fmt;
use std::sync::Arc;

use hipfile_hip::GpuRuntime;

use crate::completion::{Completion, Submit};
use crate::config::{EnvConfig, LiveSettings};
use crate::decline::Decline;
use crate::error::Result;
use crate::io::FileIo;
use crate::request::IoRequest;

/// Named priorities; higher runs first.
pub mod priority {
    /// The direct path: storage <-> GPU DMA through the platform's P2P driver.
    pub const FASTPATH: i32 = 200;
    /// The staged engine through pinned host memory.
    pub const FALLBACK: i32 = 100;
    /// Host memory served by `pread`/`pwrite` straight between the file and the caller's memory.
    /// Below the engines of device memory: they decline host memory
    /// ([`crate::Decline::HostMemory`]) and it reaches the one engine that accepts it, while
    /// device memory never reaches it where an engine of device memory accepts. Above backends
    /// linked in below the built-in ones (the bounce example's half of `FALLBACK`).
    pub const HOST: i32 = 75;
}

/// An engine that moves bytes between files and GPU memory.
///
/// ## Contract
///
/// - [`Backend::accepts`] is cheap and free of side effects: it looks only at the request (the
///   request's memory kind, alignment, file facts and settings are all there; it makes no GPU
///   runtime or kernel call) and answers yes or a typed [`Decline`]. It may assume everything
///   [`IoRequest`] promises: the memory range is checked and in bounds, offsets are
///   non-negative, the size is capped, the caller's descriptor allows the direction.
/// - [`Backend::submit`] starts the request and returns its [`Completion`]. A backend may finish
///   the work inside `submit` (answering [`Completion::ready`]) or later (a pending
///   completion). The completion carries the bytes moved, fewer than the size only for a read
///   at end of file, or an [`crate::IoFailure`] with the bytes already moved. A backend never reports
///   bytes it did not move.
/// - Ordering: requests are independent. Two requests in flight at once may run in any order
///   and overlap; a caller that needs one before the other waits for the first completion.
///   Requests that append to one file are the exception: each lands whole, in the order the
///   backend takes the file's append lock ([`crate::RegisteredFile::append_lock`]).
/// - Lifetime: the caller keeps the request's memory and registered file alive and registered
///   until the completion is finished; the backend touches neither after that. Dropping an
///   unfinished completion waits for it, so a completion is never the last thing left using
///   the request's memory.
/// - Queued requests ([`Submit::Queue`]) make progress without their submitter, on the
///   backend's own threads (a backend with none may finish them inside `submit`); a backend
///   that answers a pending completion for one rings its [`crate::OwnedRequest::doorbell`] when it
///   finishes. The shared [`crate::workers::IoWorkers`] pool is there for backends that need
///   threads.
/// - Cancellation: a pending request may be withdrawn before it starts
///   ([`crate::PendingIo::cancel`]); once started it runs to completion or failure.
/// - Failover, statistics and the C conventions are the dispatcher's ([`crate::Registry`]), not
///   the backend's: a backend fails with the error it saw.
pub trait Backend: Send + Sync + fmt::Debug {
    /// The name (`fallback`, `fastpath`, ...), unique in a registry.
    fn name(&self) -> &'static str;
    /// Whether this backend will run `req`. Cheap and free of side effects.
    fn accepts(&self, req: &IoRequest<'_>) -> Result<(), Decline>;
    /// Start `req`; see the trait's contract.
    fn submit(&self, req: &IoRequest<'_>, how: Submit) -> Completion;
    /// What the backend reports of its own, for statistics and tools, taken `when` asked.
    /// Default: nothing (no mechanism, no counters, no resources).
    fn report(&self, when: ReportWhen) -> BackendReport {
        let _ = when;
        BackendReport::default()
    }
}

/// When a backend's report ([`Backend::report`]) is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReportWhen {
    /// As things stand.
    Now,
    /// As things stand, for a statistics snapshot: the mechanism and the counters only. Snapshots
    /// are taken often and beside IO (every answer of the statistics socket), so a backend
    /// leaves its resources at their default here rather than take the locks IO takes to count
    /// them.
    Statistics,
    /// Once the work the backend does in the background for earlier requests (pinning the page
    /// cache they read) is done, so that what follows is measured or checked against its end
    /// state.
    Settled,
}

/// What a backend reports of its own: the one hook ([`Backend::report`]) through which the
/// statistics, `hipfile check`, `hipfile stats` and `hipfile bench` learn what is particular to
/// one backend.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BackendReport {
    /// What it moves bytes through, for statistics: the fastpath names its P2P driver
    /// (`amd-kfd`, `cufile`, `sim`).
    pub mechanism: Option<&'static str>,
    /// Counters of its own, by name, for statistics (the fallback: bytes it moved through the
    /// page cache and with O_DIRECT). Kept only for requests whose statistics level
    /// ([`crate::OwnedRequest::stats_level`]) is 1 or more.
    pub counters: Vec<(&'static str, u64)>,
    /// What it holds while the driver is open.
    pub resources: Resources,
}

/// Host resources a backend holds while the driver is open, for tools and users who budget
/// memory and cores (`hipfile bench` prints them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// Bytes of pinned (page-locked) host memory.
    pub pinned_bytes: usize,
    /// Threads started for IO.
    pub io_threads: usize,
    /// Bytes of the page cache pinned for copies straight out of it (the staged engine's
    /// page-cache pins); not allocated by the library, but kept from being reclaimed.
    pub page_cache_pinned_bytes: usize,
    /// GPU contexts the backend made for itself (the staged engine pins page cache in one per
    /// device), each holding device memory of its own.
    pub own_contexts: usize,
}

/// What a backend gets when the driver opens.
#[derive(Clone, Debug)]
pub struct BackendContext {
    /// The GPU runtime.
    pub runtime: Arc<dyn GpuRuntime>,
    /// The file IO primitives.
    pub io: Arc<dyn FileIo>,
    /// Settings (live).
    pub settings: Arc<LiveSettings>,
    /// Environment switches.
    pub env: EnvConfig,
}

/// How a backend moves bytes between the file and GPU memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoPath {
    /// Storage <-> GPU memory with no host copy (a P2P DMA).
    Direct,
    /// Through host memory (a bounce buffer).
    Staged,
    /// The caller's buffer is host memory: the file's bytes move straight between it and the
    /// file (`pread`/`pwrite`), no GPU copy.
    Host,
}

impl IoPath {
    /// Every path, in the order reports list them.
    pub const ALL: [IoPath; 3] = [IoPath::Direct, IoPath::Staged, IoPath::Host];

    /// `direct`, `staged` or `host`.
    pub fn name(self) -> &'static str {
        match self {
            IoPath::Direct => "direct",
            IoPath::Staged => "staged",
            IoPath::Host => "host",
        }
    }
}

/// A backend's entry in the registry: name, priority, path and constructor.
#[derive(Clone, Copy, Debug)]
pub struct BackendDescriptor {
    /// Unique name.
    pub name: &'static str,
    /// Priority; see [`priority`].
    pub priority: i32,
    /// How the backend moves bytes (statistics and tools report it).
    pub path: IoPath,
    /// Build the backend for an opening driver.
    pub init: fn(&BackendContext) -> Result<Arc<dyn Backend>>,
}

inventory::collect!(BackendDescriptor);
