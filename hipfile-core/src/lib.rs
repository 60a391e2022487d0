//! # hipfile-core: the policy of hipfile-rs
//!
//! hipfile-rs moves bytes between files and GPU memory. This crate decides *how*. It names no
//! backend crate and contains no GPU FFI: the runtime comes from `hipfile-hip` behind a trait,
//! the backends from whoever registers a [`BackendDescriptor`].
//!
//! ## Map: which module owns what
//!
//! | module | owns |
//! |---|---|
//! | `driver` | [`Driver`]: the state machine (closed with staged settings, or open with a session and a use count) and the front of every call, which it counts and hands to the module below that does the work. Nothing else imports it. |
//! | `options` | [`DriverOptions`]: where a driver's runtime, file IO, backends and settings come from. |
//! | `session` | [`Session`]: what an open driver owns: the registered files ([`FileHandleId`]) and buffers ([`RegisteredBuffer`]), the runtime, the registry, the live settings, the counters, the stream engine and the statistics socket. |
//! | `validate` | a call as the caller states it ([`IoCall`]) becoming a prepared request, its file and buffer held in flight: for the synchronous path, batch entries and stream-ordered ops. |
//! | `request` | the one request type, [`OwnedRequest`], and the view backends are offered, [`IoRequest`]. |
//! | `registry` | [`RegistryBuilder`] and [`Registry`]: ranking, the dispatch rule, failover ([`Submitted`], [`Dispatched`]), and [`register_backend!`], the one way a backend crate registers. |
//! | `backend` | the [`Backend`] trait, [`BackendDescriptor`], [`priority`], [`IoPath`], [`BackendContext`], and a backend's own report ([`BackendReport`], [`Resources`]). |
//! | `decline` | why a backend will not run a request ([`Decline`], [`DeclineReason`]). |
//! | `policy` | which paths a request may take: a file handle's [`IoPolicy`] (fall back, or direct only), the driver-wide [`P2pMechanisms`] and their mapping from cuFile's P2P flags ([`cufile_p2p`]). |
//! | `completion` | how a submitted request finishes: [`Completion`], [`PendingIo`], [`Submit`], [`IoFailure`], and the [`Doorbell`] batches sleep on. |
//! | [`workers`] | the IO worker pool backends take threads from. |
//! | `batch` | batches: [`BatchId`], [`BatchEntry`], [`BatchEvent`], their table and reaping. |
//! | [`stream`] | stream-ordered IO: [`AsyncCall`], [`AsyncSlots`], the stream table, an op's binding and run; `stream_engine`: the flag and mark words, the watcher and the runner threads. |
//! | `stats`, `snapshot`, `routes` | the live counters ([`Stats`]), what they say at one moment ([`StatsSnapshot`]) and its JSON document, and the declines, failures and failovers the registry counts ([`RouteCounters`]). |
//! | [`stats_server`] | the statistics socket `hipfile stats` reads, and its client side. |
//! | `config` | configuration: [`Environment`] (the one reader of the process environment), [`EnvConfig`], [`Settings`], [`LiveSettings`], [`limits`], [`MAX_RW_COUNT`]. |
//! | [`cufile_config`] | cuFile's configuration file (`cufile.json`) for the cuFile door: where it is, its keys onto [`Settings`], between the defaults and the environment. |
//! | `file`, `io` | registered files ([`RegisteredFile`], filesystem facts), the file IO primitives ([`FileIo`], [`pread_full`], ...) and the direction of a request ([`IoOp`]). |
//! | `error` | [`Error`] and [`ErrorKind`], one to one with upstream's `hipFileOpError_t`. |
//! | [`logging`] | the log sink and levels. |
//!
//! Imports point one way: the driver down to batch and stream, those to validation and the
//! session, the session to the registry and the counters, the registry to the backend contract,
//! and everything to configuration, files and errors: no two modules import each other, through
//! any path.
//!
//! ## Contract
//!
//! - [`Driver::io`] validates everything a backend relies on: the driver is open, the handle is
//!   registered, offsets are non-negative, the device range lies inside one allocation (a
//!   registered buffer, or a temporary view from the runtime's pointer query), the size is capped
//!   at [`MAX_RW_COUNT`]. Backends trust an [`IoRequest`] and check only their own preferences.
//! - Everything is thread-safe. Registration tables sit behind `RwLock`s; IO holds `Arc`s and
//!   in-flight counters, never a table lock, while bytes move, and deregistration refuses a file
//!   or buffer with IO in flight.
//! - Batches ([`Driver::batch_setup`] and the other `batch_*` methods, module `batch`): each
//!   entry is a request validated as a synchronous one and submitted with [`Submit::Queue`], so
//!   all entries of a submission are in flight at once; they are reaped as they finish.
//! - Failover: a backend failure that moved no bytes and is eligible
//!   ([`Error::is_failover_eligible`]: ENODEV, EREMOTEIO) reruns the whole request on the next
//!   accepting backend; every other failure is the caller's.
//! - IO policy: a file handle registered or set [`IoPolicy::DirectOnly`]
//!   ([`Driver::handle_set_policy`]) has its requests (synchronous, batch entries,
//!   stream-ordered ops) offered only to backends of [`IoPath::Direct`], failover included; when
//!   none runs one it fails with [`ErrorKind::IoNotSupported`], having moved nothing. The
//!   registry's dispatch enforces it, so no caller can bypass it. The direct mechanisms the
//!   driver may use ([`Settings::p2p_mechanisms`], [`Driver::set_p2p_mechanisms`]) are the
//!   direct backend's to honour: it declines with [`Decline::P2pMechanismMasked`].
//! - Logging ([`logging`]): silent unless `HIPFILE_LOG_LEVEL` or the logging parameter asks;
//!   the driver installs a small stderr/file sink when it opens, unless the application has its
//!   own `log` logger, which then receives the records.
//!
//! ## Example
//!
//! A driver on the simulated GPU, with a backend registered explicitly (the facade registers the
//! real ones):
//!
//! ```
//! use std::sync::Arc;
//! use hipfile_core::*;
//! use hipfile_hip::sim::SimRuntime;
//!
//! #[derive(Debug)]
//! struct Refuses;
//! impl Backend for Refuses {
//!     fn name(&self) -> &'static str { "refuses" }
//!     fn accepts(&self, _: &IoRequest<'_>) -> Result<(), Decline> {
//!         Err(Decline::Other("never".into()))
//!     }
//!     fn submit(&self, _: &IoRequest<'_>, _: Submit) -> Completion { unreachable!() }
//! }
//!
//! let mut backends = RegistryBuilder::new();
//! backends.add(BackendDescriptor {
//!     name: "refuses",
//!     priority: 1,
//!     path: IoPath::Staged,
//!     init: |_| Ok(Arc::new(Refuses)),
//! })?;
//! let driver = Driver::new(DriverOptions {
//!     backends: Some(backends),
//!     selection: None,
//!     ..DriverOptions::with_runtime(Arc::new(SimRuntime::default()))
//! });
//! driver.open()?;
//! assert_eq!(driver.use_count(), 1);
//! assert_eq!(driver.session().unwrap().registry().names(), ["refuses"]);
//! driver.close()?;
//! assert_eq!(driver.close().unwrap_err().kind(), ErrorKind::DriverNotInitialized);
//! # Ok::<(), Error>(())
//! ```
//!
//! ## Writing a backend
//!
//! A backend is a crate of its own, on this crate and `hipfile-hip` only. The example crate
//! `hipfile-backend-bounce` (`examples/backend-bounce/` in the repository) is a complete one, with
//! its tests; this section walks through the pieces.
//!
//! **The trait.** A backend implements [`Backend`], whose docs hold the contract: `name`,
//! `accepts`, `submit`, and optionally `resources` (pinned memory and threads it holds, for tools).
//!
//! **`accepts`, then `submit`.** The [`Registry`] offers each request, an [`IoRequest`], to the
//! backends in rank order; the first whose [`Backend::accepts`] says yes runs it through
//! [`Backend::submit`]. `accepts` is cheap and pure: it looks at the request (direction, the
//! memory's kind and address, the file's facts and alignment, offsets, settings, compat mode) and
//! answers `Ok(())` or a typed [`Decline`]; when every backend declines, the caller's error names
//! each reason. It trusts what the driver validated (the memory range, non-negative offsets, the
//! size capped at [`MAX_RW_COUNT`], a descriptor that allows the direction). `submit` does the
//! work and reports it: the bytes moved, fewer than the size only for a read at end of file, or an
//! [`IoFailure`] carrying the error and the bytes that had moved before it. A backend never
//! reports bytes it did not move. A failure that moved nothing and is eligible
//! ([`Error::is_failover_eligible`]) reruns the request on the next accepting backend; failover
//! and statistics are the registry's, not the backend's.
//!
//! **Ready or pending.** `submit` answers a [`Completion`]. [`Completion::ready`] carries an
//! outcome finished inside `submit`: the simplest backend, and the right one for work that blocks
//! anyway. [`Completion::pending`] carries a [`PendingIo`] that the backend's own threads finish:
//! its `wait` may let the waiting thread help, `is_finished` never blocks. The [`Submit`] mode
//! says how the caller waits: under [`Submit::Wait`] the backend may work on the calling thread;
//! under [`Submit::Queue`] the caller goes on with other work (a batch), so pending work must
//! progress without it. Dropping an unfinished completion waits for it. A pending completion of
//! a queued request rings the request's [`OwnedRequest::doorbell`] when it finishes (a batch sleeps
//! on it), and may be withdrawn before it starts ([`PendingIo::cancel`]). A backend that needs
//! threads for queued work takes them from [`workers::IoWorkers`], which starts them on demand up
//! to a limit; its [`workers::Deferred`] jobs (from [`workers::IoWorkers::defer`]) run one request
//! whole on one worker and do the ringing and withdrawing themselves, and
//! [`IoRequest::to_owned`] keeps the request alive past `submit`.
//!
//! **Moving bytes, without `unsafe`.** The request's memory is a [`hipfile_hip::IoMemory`]: a
//! [`hipfile_hip::DeviceRange`] that the GPU runtime checked or, only where the setting
//! [`Settings::allow_system_memory`] admits host memory and the call carries the application's
//! loan of it ([`IoCall::loan`], a [`hipfile_hip::HostLoan`]), a [`hipfile_hip::HostRange`] (the
//! `host` backend serves it with `read_from`/`write_to`, `pread`/`pwrite` on its address; an
//! engine of device memory declines it with [`Decline::HostMemory`] and takes its range with
//! [`hipfile_hip::IoMemory::device_range`]). A device range: cut it with `slice`, move bytes with `copy_from_host`,
//! `copy_to_host` and `fill`, or hand it to the platform's direct path with `p2p_read` and
//! `p2p_write`; [`hipfile_hip::StagingLane`] does asynchronous copies through pinned memory.
//! None of these needs `unsafe`, and a backend crate can `#![forbid(unsafe_code)]`. File bytes go
//! through [`BackendContext::io`], the driver's [`FileIo`] (so tests can script faults under the
//! backend), with [`pread_full`], [`pwrite_full`] and [`pwrite_append_full`], which retry EINTR,
//! continue short transfers and turn a write without progress into ENOSPC. The descriptors are
//! [`RegisteredFile::buffered_fd`] and, where the filesystem has O_DIRECT,
//! [`RegisteredFile::direct_fd`]. A write with [`OwnedRequest::append`] set must land at the end of
//! the file, whole: either write it with [`pwrite_append_full`] while holding
//! [`RegisteredFile::append_lock`], or decline it with [`Decline::Append`].
//!
//! **Registering.** A [`BackendDescriptor`] names the backend, gives its priority and its
//! [`IoPath`], and builds it for an opening driver from a [`BackendContext`]. Every backend crate,
//! the built-in ones included, registers with one macro, [`register_backend!`]:
//!
//! ```text
//! hipfile_core::register_backend! {
//!     name: "my-backend",
//!     priority: priority::FALLBACK - 1,
//!     path: IoPath::Staged,
//!     init: |ctx| Ok(Arc::new(MyBackend::new(ctx))),
//! }
//! ```
//!
//! It declares the crate's `NAME`, `DESCRIPTOR` and `register(&mut RegistryBuilder)`, and submits
//! the descriptor with the re-exported [`inventory`] (so the versions match). The `hipfile` facade
//! registers its built-in backends explicitly and adds every other one `inventory` collected
//! ([`RegistryBuilder::add_inventory`]). But the linker leaves out a crate that nothing in the
//! program names, and its `inventory` entry with it: a program gets a third-party backend by
//! naming its crate once (`use my_backend as _;`), or by calling its `register`.
//!
//! **Priorities.** Higher runs first; ties go by name. The built-in ones are
//! [`priority::FASTPATH`] (the direct path) and [`priority::FALLBACK`] (the staged engine). Above
//! the fastpath, a backend takes every request it accepts before the direct path; between the two,
//! before the staged engine; below the fallback, it serves only what both decline, or what builds
//! without them send it. `HIPFILE_BACKENDS=name,other` (or [`DriverOptions::selection`]) keeps
//! only the backends named, in that order; an unknown name fails the open.
//!
//! **Conformance.** With `hipfile-testkit` as a dev-dependency, one test runs the suite every
//! backend passes, on a simulated GPU, checking bytes, sentinels around every range, EOF, holes,
//! concurrency, EINTR and short transfers, EIO and ENOSPC, and leaks:
//!
//! ```text
//! #[test]
//! fn conformance() {
//!     hipfile_testkit::conformance::run_all(my_backend::DESCRIPTOR, &Default::default())
//!         .assert_passed();
//! }
//! ```
//!
//! `ConformanceConfig` says what to leave out: `aligned_only` for an engine that serves only
//! aligned requests, `file_io_faults: false` for one that does not move bytes through the
//! driver's [`FileIo`].
//!
//! A backend that only reads, through one host buffer, registered explicitly and driven on the
//! simulated GPU (a real one bounds its buffer and writes too, as the example crate does):
//!
//! ```
//! use std::sync::Arc;
//! use hipfile_core::*;
//! use hipfile_hip::{sim::SimRuntime, DeviceBuffer, GpuRuntime};
//!
//! #[derive(Debug)]
//! struct VecReader {
//!     io: Arc<dyn FileIo>,
//! }
//!
//! impl Backend for VecReader {
//!     fn name(&self) -> &'static str { "vec-reader" }
//!
//!     fn accepts(&self, req: &IoRequest<'_>) -> Result<(), Decline> {
//!         if req.memory.device_range().is_none() {
//!             return Err(Decline::HostMemory);
//!         }
//!         match req.op {
//!             IoOp::Read => Ok(()),
//!             IoOp::Write => Err(Decline::Other("vec-reader only reads".into())),
//!         }
//!     }
//!
//!     fn submit(&self, req: &IoRequest<'_>, _how: Submit) -> Completion {
//!         let mut buf = vec![0u8; req.size()];
//!         let outcome = pread_full(&*self.io, req.file.buffered_fd(), &mut buf, req.file_offset)
//!             .map_err(|e| IoFailure::new(Error::from_io(&e, "reading the file"), 0))
//!             .and_then(|n| {
//!                 // Short only at the end of the file: copy what was read, report exactly that.
//!                 req.memory
//!                     .expect_device("vec-reader serves device memory")
//!                     .and_then(|memory| memory.copy_from_host(&buf[..n]))
//!                     .map(|()| n)
//!                     .map_err(|e| IoFailure::new(Error::hip(&e, "copying to the GPU"), 0))
//!             });
//!         Completion::ready(outcome)
//!     }
//! }
//!
//! let mut backends = RegistryBuilder::new();
//! backends.add(BackendDescriptor {
//!     name: "vec-reader",
//!     priority: priority::FALLBACK - 1,
//!     path: IoPath::Staged,
//!     init: |ctx| Ok(Arc::new(VecReader { io: Arc::clone(&ctx.io) })),
//! })?;
//! let gpu: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
//! let driver = Driver::new(DriverOptions {
//!     backends: Some(backends),
//!     selection: None,
//!     ..DriverOptions::with_runtime(Arc::clone(&gpu))
//! });
//! driver.open()?;
//!
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(dir.path().join("data"), b"bytes for the GPU").unwrap();
//! let file = std::fs::OpenOptions::new().read(true).write(true)
//!     .open(dir.path().join("data")).unwrap();
//! let handle = driver.handle_register(std::os::fd::AsRawFd::as_raw_fd(&file))?;
//! let buf = DeviceBuffer::new(gpu, 64).unwrap();
//! let call = |op| IoCall {
//!     op, handle, buffer: buf.ptr(), size: 64, file_offset: 10, buffer_offset: 0, loan: None,
//! };
//!
//! assert_eq!(driver.io(call(IoOp::Read))?, 7, "short at the end of the file");
//! assert_eq!(buf.to_vec().unwrap()[..7], *b"the GPU");
//! // No backend takes the write: the error names each one's reason.
//! let refused = driver.io(call(IoOp::Write)).unwrap_err();
//! assert_eq!(refused.kind(), ErrorKind::InternalError);
//! assert!(refused.context().contains("vec-reader: vec-reader only reads"), "{refused}");
//!
//! driver.handle_deregister(handle)?;
//! driver.close()?;
//! # Ok::<(), Error>(())
//! ```

#![forbid(unsafe_code)]

mod backend;
mod batch;
mod completion;
mod config;
pub mod cufile_config;
mod decline;
mod driver;
mod error;
mod file;
mod io;
pub mod logging;
mod options;
mod policy;
mod registry;
mod request;
mod routes;
mod session;
mod snapshot;
mod stats;
pub mod stats_server;
pub mod stream;
mod stream_engine;
mod validate;
pub mod workers;

pub use backend::{
    priority, Backend, BackendContext, BackendDescriptor, BackendReport, IoPath, ReportWhen,
    Resources,
};
pub use batch::{BatchEntry, BatchEvent, BatchId, BatchStatus};
pub use completion::{Completion, Doorbell, IoFailure, IoOutcome, PendingIo, Submit};
pub use config::{
    limits, parse_stats_level, parse_switch, CompatMode, DirectIoPolicy, EnvConfig, Environment,
    EventWait, LiveSettings, Settings, BACKENDS_ENV, DEFAULT_MAX_IO_WORKERS, MAX_RW_COUNT,
};
pub use decline::{Decline, DeclineReason};
pub use driver::Driver;
pub use error::{Error, ErrorKind, Result};
pub use file::{
    mount_table, parse_mountinfo, Access, CallerView, DioAlign, FileInFlight, FsFacts, FsKind,
    RegisteredFile, DEFAULT_DIO_ALIGN,
};
/// The loan of host memory an [`IoCall`] carries (see [`IoCall::loan`]).
pub use hipfile_hip::HostLoan;
pub use io::{pread_full, pwrite_append_full, pwrite_full, FileIo, IoOp, PageCount, PosixIo};
pub use logging::LogLevel;
pub use options::{DriverOptions, RuntimeSource};
pub use policy::{cufile_p2p, IoPolicy, P2pMechanism, P2pMechanisms};
pub use registry::{Dispatched, Registry, RegistryBuilder, Submitted};
pub use request::{IoRequest, OwnedRequest};
pub use routes::RouteCounters;
pub use session::{FileHandleId, RegisteredBuffer, Session};
pub use snapshot::{
    per_sec, size_bucket, ApiOp, BackendCounts, BatchCounts, DirectionCounts, GpuCounts, OpCount,
    SidePathCounts, StatsSnapshot, SIZE_BUCKETS,
};
pub use stats::{Channel, Finished, SidePath, Stats};
pub use stream::{AsyncCall, AsyncSlots};
pub use validate::IoCall;

/// Re-exported so backend crates submit descriptors with the same `inventory` version.
pub use inventory;
