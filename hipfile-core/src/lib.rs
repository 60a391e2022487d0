//! # hipfile-core: the policy of hipfile-rs
//!
//! hipfile-rs moves bytes between files and GPU memory. This crate decides *how*: it owns the
//! errors ([`Error`], [`ErrorKind`], one to one with upstream's `hipFileOpError_t`), the
//! configuration ([`Environment`], the one reader of the process environment, with
//! [`EnvConfig`] and [`Settings`]), the registration state machine ([`Driver`]), the [`Backend`]
//! trait with the [`Registry`] that ranks backends, and the dispatch of each request.
//! It names no backend crate and contains no GPU FFI: the runtime comes from `hipfile-hip` behind
//! a trait, the backends from whoever registers a [`BackendDescriptor`].
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
//! - Failover: a backend failure that moved no bytes and is eligible
//!   ([`Error::is_failover_eligible`]: ENODEV, EREMOTEIO) reruns the whole request on the next
//!   accepting backend; every other failure is the caller's.
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

#![forbid(unsafe_code)]

mod backend;
mod config;
mod driver;
mod error;
mod file;
mod io;
mod registry;
mod stats;

pub use backend::{
    priority, Backend, BackendContext, BackendDescriptor, Completion, Decline, IoFailure, IoOp,
    IoOutcome, IoPath, IoRequest, LiveSettings, PendingIo, Resources, Submit,
};
pub use config::{
    limits, parse_switch, CompatMode, DirectIoPolicy, EnvConfig, Environment, EventWait, Settings,
    BACKENDS_ENV, DEFAULT_MAX_IO_WORKERS,
};
pub use driver::{
    Driver, DriverOptions, FileHandleId, IoCall, RegisteredBuffer, RuntimeSource, Session,
    MAX_RW_COUNT,
};
pub use error::{Error, ErrorKind, Result};
pub use file::{
    mount_table, parse_mountinfo, Access, CallerView, DioAlign, FileInFlight, FsFacts, FsKind,
    RegisteredFile, DEFAULT_DIO_ALIGN,
};
pub use io::{pread_full, pwrite_append_full, pwrite_full, FileIo, PageCount, PosixIo};
pub use registry::{Dispatched, Registry, RegistryBuilder, Submitted};
pub use stats::{BackendCounts, Stats, StatsSnapshot};

/// Re-exported so backend crates submit descriptors with the same `inventory` version.
pub use inventory;
