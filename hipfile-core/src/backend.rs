//! The contract between the dispatcher and the engines that move bytes.
//!
//! A backend is offered every request through [`Backend::accepts`] (cheap, pure: it looks only at
//! the request and answers yes or a typed [`Decline`]); the highest-priority backend that accepts
//! runs it with [`Backend::execute`]. Backends register a [`BackendDescriptor`] with
//! `inventory::submit!` and also export a plain `register(&mut RegistryBuilder)`, because the
//! linker drops inventory entries of crates nothing names.

use std::fmt;
use std::sync::{Arc, PoisonError, RwLock};

use hipfile_hip::GpuRuntime;

use crate::config::{CompatMode, EnvConfig, Settings};
use crate::error::{Error, Result};
use crate::file::RegisteredFile;
use crate::io::FileIo;

/// Named priorities; higher runs first.
pub mod priority {
    /// The direct path: storage <-> GPU DMA through the platform's P2P driver.
    pub const FASTPATH: i32 = 200;
    /// The staged engine through pinned host memory.
    pub const FALLBACK: i32 = 100;
}

/// Direction of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOp {
    /// File to GPU memory.
    Read,
    /// GPU memory to file.
    Write,
}

/// One validated request: the target range of device memory lies inside one allocation, the
/// offsets are non-negative, and `size` is at most [`crate::MAX_RW_COUNT`].
#[derive(Debug)]
pub struct IoRequest<'a> {
    /// Direction.
    pub op: IoOp,
    /// The registered file.
    pub file: &'a RegisteredFile,
    /// First byte of device memory to read into or write from (buffer base + buffer offset).
    pub device_ptr: usize,
    /// The device that owns that memory.
    pub device: i32,
    /// Bytes to move.
    pub size: usize,
    /// File offset.
    pub file_offset: u64,
    /// A write whose bytes go to the end of the file, wherever `file_offset` points: the
    /// application's descriptor has `O_APPEND`, and Linux `pwrite(2)` on such a descriptor
    /// appends. A backend that runs it appends the bytes in order and never writes at
    /// `file_offset`.
    pub append: bool,
    /// Whether the buffer was registered (rather than a temporary view of an allocation).
    pub registered_buffer: bool,
    /// Settings in force for this request.
    pub settings: &'a Settings,
    /// Compat mode in force for this request.
    pub compat: CompatMode,
    /// Environment switches in force.
    pub env: &'a EnvConfig,
}

/// Why a backend will not run a request.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decline {
    /// Compat mode is disallowed (`HIPFILE_ALLOW_COMPAT_MODE=false` or the parameter).
    CompatModeDisallowed,
    /// Compat mode is forced: only the staged engine runs.
    CompatModeForced,
    /// The platform has no P2P driver.
    NoP2pDriver,
    /// The file has no O_DIRECT descriptor.
    NoDirectIo,
    /// The memory is not device memory.
    NotDeviceMemory,
    /// Offset, size or address misses the file's direct IO alignment.
    Misaligned {
        /// The alignment required.
        required: u32,
    },
    /// The filesystem is not one the direct path supports.
    UnsupportedFilesystem(String),
    /// A write that appends (`O_APPEND` descriptor): direct IO writes at an offset.
    Append,
    /// A write that runs past the process's file size limit (`RLIMIT_FSIZE`): the staged path
    /// writes up to the limit and fails with the kernel's `EFBIG`, where an O_DIRECT write cut at
    /// an unaligned limit would fail with `EINVAL` instead.
    FileSizeLimit {
        /// The limit in bytes.
        limit: u64,
    },
    /// Something else, explained.
    Other(String),
}

impl fmt::Display for Decline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decline::CompatModeDisallowed => f.write_str("compat mode is disallowed"),
            Decline::CompatModeForced => f.write_str("compat mode is forced"),
            Decline::NoP2pDriver => f.write_str("the platform has no P2P driver"),
            Decline::NoDirectIo => f.write_str("the file has no O_DIRECT descriptor"),
            Decline::NotDeviceMemory => f.write_str("the buffer is not device memory"),
            Decline::Misaligned { required } => {
                write!(f, "offset, size or address not aligned to {required} bytes")
            }
            Decline::UnsupportedFilesystem(fs) => write!(f, "filesystem {fs} is not supported"),
            Decline::Append => f.write_str("the write appends (O_APPEND descriptor)"),
            Decline::FileSizeLimit { limit } => {
                write!(f, "the write runs past the file size limit ({limit} bytes)")
            }
            Decline::Other(why) => f.write_str(why),
        }
    }
}

/// A failed execution: the error and how many bytes had already moved (the failover rule needs
/// to know whether the request can be rerun whole).
#[derive(Debug)]
pub struct IoFailure {
    /// What went wrong.
    pub error: Error,
    /// Bytes already transferred when it went wrong.
    pub bytes_moved: usize,
}

impl IoFailure {
    /// A failure after `bytes_moved` bytes.
    pub fn new(error: Error, bytes_moved: usize) -> Self {
        IoFailure { error, bytes_moved }
    }
}

/// An engine that moves bytes between files and GPU memory.
pub trait Backend: Send + Sync + fmt::Debug {
    /// The name (`fallback`, `fastpath`, ...), unique in a registry.
    fn name(&self) -> &'static str;
    /// Whether this backend will run `req`. Cheap and free of side effects.
    fn accepts(&self, req: &IoRequest<'_>) -> Result<(), Decline>;
    /// Run `req`: returns the bytes moved, fewer than `req.size` only for a read at end of file.
    fn execute(&self, req: &IoRequest<'_>) -> Result<usize, IoFailure>;
    /// What the backend holds while the driver is open (default: nothing).
    fn resources(&self) -> Resources {
        Resources::default()
    }
}

/// Host resources a backend holds while the driver is open, for tools and users who budget
/// memory and cores (`hipfile bench` prints them).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    /// Bytes of pinned (page-locked) host memory.
    pub pinned_bytes: usize,
    /// Threads started for IO.
    pub io_threads: usize,
}

/// Settings that may change while the driver is open (`hipFileDriverSet*`). Requests take a
/// snapshot at their start.
#[derive(Debug, Default)]
pub struct LiveSettings(RwLock<Arc<Settings>>);

impl LiveSettings {
    /// Start with `settings`.
    pub fn new(settings: Settings) -> Self {
        LiveSettings(RwLock::new(Arc::new(settings)))
    }

    /// The settings in force now.
    pub fn current(&self) -> Arc<Settings> {
        Arc::clone(&self.0.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Change the settings for requests that start from now on.
    pub fn update(&self, change: impl FnOnce(&mut Settings)) {
        let mut guard = self.0.write().unwrap_or_else(PoisonError::into_inner);
        let mut next = (**guard).clone();
        change(&mut next);
        *guard = Arc::new(next);
    }
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

/// A backend's entry in the registry: name, priority and constructor.
#[derive(Clone, Copy, Debug)]
pub struct BackendDescriptor {
    /// Unique name.
    pub name: &'static str,
    /// Priority; see [`priority`].
    pub priority: i32,
    /// Build the backend for an opening driver.
    pub init: fn(&BackendContext) -> Result<Arc<dyn Backend>>,
}

inventory::collect!(BackendDescriptor);
