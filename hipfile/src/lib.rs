//! # hipfile: GPU-direct storage IO
//!
//! Register a file and a GPU buffer, then read and write between them: hipfile-rs picks the
//! fastest path that accepts each request (the direct P2P path where the platform has one, the
//! staged engine through pinned host memory otherwise) and fails over between them. This crate is
//! the front door: an idiomatic Rust API ([`Driver`], [`FileHandle`], [`RegisteredBuffer`]) and
//! the C ABI of `libhipfile.so`, source-compatible with upstream hipFile's `include/hipfile.h`.
//!
//! ## Contract
//!
//! - [`Driver::open`] joins the process-wide driver that the C ABI also uses (upstream's reference
//!   count); [`Driver::with_options`] builds a private one (tests, tools that pick a platform).
//!   Dropping the last handle of a driver closes it.
//! - Reads return the bytes read (short only at end of file); writes all bytes or an error.
//!   Device pointers are checked against the runtime's allocation table before any byte moves.
//! - Everything is `Send + Sync`; registration and IO may run on any thread.
//! - Features pick the backends compiled in: `fastpath` and `fallback` (both default). The facade registers each
//!   enabled backend explicitly through the crate's `register` function, because the linker may
//!   drop `inventory` entries of a crate nothing calls; backends of other crates still arrive
//!   through `inventory`.
//!
//! ## Example (on the simulated GPU)
//!
//! (Compiled and run in builds with the `fallback` feature.)
//!
#![cfg_attr(feature = "fallback", doc = "```")]
#![cfg_attr(not(feature = "fallback"), doc = "```text")]
//! use std::sync::Arc;
//! use hipfile::{Driver, DriverOptions};
//! use hipfile_hip::{sim::SimRuntime, DeviceBuffer, GpuRuntime};
//!
//! let gpu: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
//! let driver = Driver::with_options(DriverOptions::with_runtime(gpu.clone()))?;
//! let dir = tempfile::tempdir().unwrap();
//! let file = std::fs::OpenOptions::new().create(true).read(true).write(true)
//!     .open(dir.path().join("data")).unwrap();
//! let handle = driver.register_file(&file)?;
//!
//! let mut src = DeviceBuffer::new(gpu.clone(), 8192).unwrap();
//! src.write_at(0, &[7u8; 8192]).unwrap();
//! let registered = driver.register_buffer(src.ptr(), src.len())?;
//! assert_eq!(handle.write(registered.ptr(), 8192, 0, 0)?, 8192);
//!
//! let dst = DeviceBuffer::new(gpu.clone(), 8192).unwrap();
//! assert_eq!(handle.read(dst.ptr(), 8192, 0, 0)?, 8192);
//! assert_eq!(dst.to_vec().unwrap(), vec![7u8; 8192]);
//! # Ok::<(), hipfile::Error>(())
//! ```

pub mod capi;

use std::os::fd::{AsRawFd, RawFd};
use std::sync::{Arc, OnceLock};

pub use hipfile_core::{
    DriverOptions, Error, ErrorKind, FileHandleId, IoCall, IoOp, Result, Settings, StatsSnapshot,
};

/// The process-wide core driver behind the C ABI and [`Driver::open`].
pub(crate) fn global() -> &'static Arc<hipfile_core::Driver> {
    static GLOBAL: OnceLock<Arc<hipfile_core::Driver>> = OnceLock::new();
    GLOBAL.get_or_init(|| Arc::new(hipfile_core::Driver::new(default_options())))
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
        // Only the fastpath may be there already, under another name.
        let _ = hipfile_fallback::register(&mut builder);
    }
    builder.add_inventory();
    builder
}

/// The names of the backends compiled into this build, in rank order.
pub fn compiled_backends() -> Vec<&'static str> {
    backends().ranked().into_iter().map(|d| d.name).collect()
}

/// A reference to an open driver; the driver closes when the last reference drops.
#[derive(Debug)]
pub struct Driver {
    core: Arc<hipfile_core::Driver>,
}

impl Driver {
    /// Open (or join) the process-wide driver, shared with C callers of `libhipfile.so`.
    pub fn open() -> Result<Driver> {
        Driver::join(Arc::clone(global()))
    }

    /// Open a private driver built from `options`; when they name no backends, the backends of
    /// this build ([`backends`]) serve it.
    pub fn with_options(mut options: DriverOptions) -> Result<Driver> {
        if options.backends.is_none() {
            options.backends = Some(backends());
        }
        Driver::join(Arc::new(hipfile_core::Driver::new(options)))
    }

    fn join(core: Arc<hipfile_core::Driver>) -> Result<Driver> {
        core.open()?;
        Ok(Driver { core })
    }

    /// The core driver (state machine, settings, session).
    pub fn core(&self) -> &Arc<hipfile_core::Driver> {
        &self.core
    }

    /// References held on the driver (`hipFileUseCount`).
    pub fn use_count(&self) -> usize {
        self.core.use_count()
    }

    /// The backends requests are offered to, in order.
    pub fn backends(&self) -> Vec<&'static str> {
        self.core
            .session()
            .map(|s| s.registry().names())
            .unwrap_or_default()
    }

    /// What each backend holds while the driver is open (pinned host memory, IO threads), in
    /// offer order; empty when the driver is not open.
    pub fn resources(&self) -> Vec<(&'static str, hipfile_core::Resources)> {
        self.core
            .session()
            .map(|s| s.registry().resources())
            .unwrap_or_default()
    }

    /// Register an open file. The file must stay open while the handle lives.
    pub fn register_file(&self, file: &impl AsRawFd) -> Result<FileHandle> {
        self.register_fd(file.as_raw_fd())
    }

    /// Register a raw descriptor.
    pub fn register_fd(&self, fd: RawFd) -> Result<FileHandle> {
        let id = self.core.handle_register(fd)?;
        Ok(FileHandle {
            core: Arc::clone(&self.core),
            id,
        })
    }

    /// Register `len` bytes of device memory at `ptr`.
    pub fn register_buffer(&self, ptr: usize, len: usize) -> Result<RegisteredBuffer> {
        self.core.buf_register(ptr, len, 0)?;
        Ok(RegisteredBuffer {
            core: Arc::clone(&self.core),
            ptr,
            len,
        })
    }

    /// Counters of the open driver (counting only with `HIPFILE_STATS_LEVEL=true`).
    pub fn stats(&self) -> Option<StatsSnapshot> {
        self.core.session().map(|s| s.stats().snapshot())
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // The reference this value holds; closing cannot fail while it is held.
        let _ = self.core.close();
    }
}

/// A registered file; deregistered on drop.
#[derive(Debug)]
pub struct FileHandle {
    core: Arc<hipfile_core::Driver>,
    id: FileHandleId,
}

impl FileHandle {
    /// The handle's identity.
    pub fn id(&self) -> FileHandleId {
        self.id
    }

    /// Read `size` bytes at `file_offset` into device memory at `buffer + buffer_offset`.
    /// `buffer` is a registered buffer's base or any device pointer. Returns the bytes read.
    pub fn read(
        &self,
        buffer: usize,
        size: usize,
        file_offset: u64,
        buffer_offset: usize,
    ) -> Result<usize> {
        self.io(IoOp::Read, buffer, size, file_offset, buffer_offset)
    }

    /// Write `size` bytes from device memory at `buffer + buffer_offset` to `file_offset`.
    pub fn write(
        &self,
        buffer: usize,
        size: usize,
        file_offset: u64,
        buffer_offset: usize,
    ) -> Result<usize> {
        self.io(IoOp::Write, buffer, size, file_offset, buffer_offset)
    }

    fn io(
        &self,
        op: IoOp,
        buffer: usize,
        size: usize,
        file_offset: u64,
        buffer_offset: usize,
    ) -> Result<usize> {
        let invalid = || {
            Error::new(
                ErrorKind::InvalidValue,
                "offset does not fit in a signed 64-bit value",
            )
        };
        self.core.io(IoCall {
            op,
            handle: self.id,
            buffer,
            size,
            file_offset: i64::try_from(file_offset).map_err(|_| invalid())?,
            buffer_offset: i64::try_from(buffer_offset).map_err(|_| invalid())?,
        })
    }

    /// The registered file's facts (alignment, filesystem, descriptors).
    pub fn file(&self) -> Result<Arc<hipfile_core::RegisteredFile>> {
        self.core.file(self.id)
    }
}

impl Drop for FileHandle {
    fn drop(&mut self) {
        // Fails only when the driver already forgot the file (closed to zero): nothing to undo.
        let _ = self.core.handle_deregister(self.id);
    }
}

/// A registered device buffer; deregistered on drop.
#[derive(Debug)]
pub struct RegisteredBuffer {
    core: Arc<hipfile_core::Driver>,
    ptr: usize,
    len: usize,
}

impl RegisteredBuffer {
    /// The device address.
    pub fn ptr(&self) -> usize {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the length is zero (never, for a registered buffer).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for RegisteredBuffer {
    fn drop(&mut self) {
        // Fails only when the driver already forgot the buffer (closed to zero): nothing to undo.
        let _ = self.core.buf_deregister(self.ptr);
    }
}
