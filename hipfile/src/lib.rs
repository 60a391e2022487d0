//! # hipfile: GPU-direct storage IO
//!
//! Register a file and a GPU buffer, then read and write between them: hipfile-rs picks the
//! fastest path that accepts each request (the direct P2P path where the platform has one, the
//! staged engine through pinned host memory otherwise) and fails over between them. This crate is
//! the front door: an idiomatic Rust API ([`Driver`], [`FileHandle`], [`RegisteredBuffer`],
//! device memory as [`DeviceBuffer`] and its slices) and the C ABI of `libhipfile.so`,
//! source-compatible with upstream hipFile's `include/hipfile.h`.
//!
//! ## Contract
//!
//! - [`Driver::open`] joins the process-wide driver that the C ABI also uses (upstream's reference
//!   count: one more reference); [`Driver::with_options`] builds a private one (tests, tools that
//!   pick a platform). A `Driver`, and every [`FileHandle`] and [`RegisteredBuffer`] made from it,
//!   share that one reference: the driver stays open while any of them lives, and the last one to
//!   drop closes it.
//! - Device memory is typed. A read lands in memory named by [`AsDeviceMut`] (a [`DeviceBuffer`],
//!   an exclusive [`DeviceSliceMut`], a [`RegisteredBuffer`]); a write takes its bytes from memory
//!   named by [`AsDevice`] (also a shared [`DeviceSlice`]). Slices are cut with range syntax,
//!   `buf.slice_mut(4096..8192)`, and a range outside the memory is [`ErrorKind::InvalidValue`].
//!   The request's size is the memory's length. Memory allocated elsewhere enters through the
//!   `unsafe` [`DeviceSliceMut::from_raw_parts`].
//! - Registered memory is held by its [`RegisteredBuffer`], so it cannot be freed while
//!   registered; requests through it or its slices take the registered path.
//! - Host memory (`&mut [u8]`, `&[u8]`) is read and written with [`FileHandle::read_host`] and
//!   [`FileHandle::write_host`] when the setting `allow_system_memory` is on
//!   (`HIPFILE_ALLOW_SYSTEM_MEMORY=true`): the `host` backend moves it with `pread`/`pwrite`
//!   straight between the file and the slice, no GPU involved. Off (the default, as hipFile),
//!   host memory is [`ErrorKind::HipMemoryTypeInvalid`].
//! - File offsets are `u64`; one past `i64::MAX` is `EINVAL`, as `pread(2)` answers.
//! - Reads return the bytes read (short only at end of file); writes all bytes or an error.
//!   Device memory is checked against the runtime's allocation table before any byte moves.
//! - A file handle may refuse the staged path: [`FileHandle::set_policy`] with
//!   [`IoPolicy::DirectOnly`] makes its reads, writes, batch requests and stream-ordered ops run
//!   on the direct path or fail with [`ErrorKind::IoNotSupported`], moving nothing
//!   ([`IoPolicy::Fallback`], the default, stages what the direct path declines).
//!   [`Driver::set_p2p_mechanisms`] narrows the direct mechanisms the driver may use. The C ABI
//!   has both as hipfile-rs extensions (`hipFileHandleSetIoPolicy`,
//!   `hipFileDriverSetP2PMechanisms`).
//! - Everything is `Send + Sync`; registration and IO may run on any thread. A request allocates
//!   nothing in this crate: a slice is an address range.
//! - Features pick the backends compiled in: `fastpath` and `fallback` (both default; `fallback`
//!   brings the staged engine and the engine of host memory, `host`). The facade registers each
//!   enabled backend explicitly through the crate's `register` function, because the linker may
//!   drop `inventory` entries of a crate nothing calls; backends of other crates still arrive
//!   through `inventory`.
//!
//! ## Names
//!
//! [`Driver`] is this crate's driver, the one applications hold. The state machine behind it is
//! [`hipfile_core::Driver`], which this crate does not re-export: it is reached as
//! [`Driver::core`] and named by its crate path, so `hipfile::Driver` means one thing.
//! [`RegisteredBuffer`] likewise is the facade's, not `hipfile_core::RegisteredBuffer` (the core
//! driver's record of a registration).
//!
//! ## Modules
//!
//! `driver` holds [`Driver`] (opening, registration, and the entry points of batches and
//! stream-ordered IO); `file` the [`FileHandle`] and its synchronous reads and writes; `memory`
//! the device memory types; `batch` and `stream` the two asynchronous ways; `call` a request as
//! the core driver takes it, shared by the three ways of making one, so a read and a write are one
//! body given the operation; `open` the reference on the core driver that everything made from a
//! `Driver` shares, so none of them reaches back into `driver`; [`capi`] the C ABI.
//!
//! ## Example (on the simulated GPU)
//!
//! (Compiled and run in builds with the `fallback` feature.)
//!
#![cfg_attr(feature = "fallback", doc = "```")]
#![cfg_attr(not(feature = "fallback"), doc = "```text")]
//! use std::sync::Arc;
//! use hipfile::{AsDeviceMut, Driver, DriverOptions};
//! use hipfile_hip::sim::SimRuntime;
//!
//! let gpu = Arc::new(SimRuntime::default());
//! let driver = Driver::with_options(DriverOptions::with_runtime(gpu))?;
//! let dir = tempfile::tempdir().unwrap();
//! let file = std::fs::OpenOptions::new().create(true).read(true).write(true)
//!     .open(dir.path().join("data")).unwrap();
//! let handle = driver.register_file(&file)?;
//!
//! // Write from a registered buffer: the driver holds it while registered.
//! let mut src = driver.register_buffer(driver.alloc(8192)?)?;
//! src.write_at(0, &[7u8; 8192]).unwrap();
//! assert_eq!(handle.write(&src, 0)?, 8192);
//!
//! // Read into part of a plain buffer.
//! let mut dst = driver.alloc(8192)?;
//! assert_eq!(handle.read(dst.slice_mut(4096..)?, 4096)?, 4096);
//! assert_eq!(dst.to_vec().unwrap()[4096..], [7u8; 4096]);
//! # Ok::<(), hipfile::Error>(())
//! ```

mod batch;
mod call;
pub mod capi;
mod driver;
mod file;
mod memory;
mod open;
mod stream;

use std::sync::{Arc, OnceLock};

pub use batch::{Batch, BatchRequest, Completions};
pub use driver::Driver;
pub use file::FileHandle;
pub use hipfile_core::stats_server::StatsService;
pub use hipfile_core::{
    ApiOp, BackendCounts, BatchCounts, DeclineReason, DirectionCounts, GpuCounts, IoPath, OpCount,
};
pub use hipfile_core::{
    BatchEvent, BatchStatus, DriverOptions, Error, ErrorKind, FileHandleId, IoCall, IoOp, LogLevel,
    Result, Settings, StatsSnapshot,
};
pub use hipfile_core::{IoPolicy, P2pMechanism, P2pMechanisms};
pub use memory::{
    AsDevice, AsDeviceMut, DeviceBuffer, DeviceSlice, DeviceSliceMut, RegisteredBuffer,
};
pub use stream::{OwningStreamOp, StreamIo, StreamOp};

/// The process-wide core driver behind the C ABI and [`Driver::open`].
pub(crate) fn global() -> &'static Arc<hipfile_core::Driver> {
    static GLOBAL: OnceLock<Arc<hipfile_core::Driver>> = OnceLock::new();
    GLOBAL.get_or_init(|| Arc::new(hipfile_core::Driver::new(default_options())))
}

/// The process-wide core driver, shared by the C ABI and [`Driver::open`], for reading its state
/// (use count, settings, session) without taking a reference on it: what the Python binding
/// reports as `use_count()` and `driver_get_properties()`.
pub fn process_driver() -> Arc<hipfile_core::Driver> {
    Arc::clone(global())
}

/// The options of the process-wide driver: the defaults of [`DriverOptions`], with the backends
/// of [`backends`].
pub fn default_options() -> DriverOptions {
    DriverOptions {
        backends: Some(backends()),
        ..DriverOptions::default()
    }
}

/// The backends of this build: the built-in ones the enabled features name, registered
/// explicitly (the linker may drop `inventory` entries of crates nothing calls), plus any other
/// backend linked into the process through `inventory`.
pub fn backends() -> hipfile_core::RegistryBuilder {
    let mut builder = hipfile_core::RegistryBuilder::new();
    #[cfg(feature = "fastpath")]
    {
        // Registering into an empty builder cannot meet a duplicate name.
        let _ = hipfile_fastpath::register(&mut builder);
    }
    #[cfg(feature = "fallback")]
    {
        // Only the fastpath may be there already, under other names.
        let _ = hipfile_fallback::register(&mut builder);
        let _ = hipfile_fallback::host::register(&mut builder);
    }
    builder.add_inventory();
    builder
}

/// The names of the backends compiled into this build, in rank order.
pub fn compiled_backends() -> Vec<&'static str> {
    backends().ranked().into_iter().map(|d| d.name).collect()
}
