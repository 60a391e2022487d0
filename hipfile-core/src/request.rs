//! The request a backend is offered. [`OwnedRequest`] is the one request type: validation
//! ([`crate::validate`]) builds it, owning what it refers to; [`IoRequest`] is the borrowed view
//! the registry offers backends (a pointer, reading the request's fields through `Deref`), and
//! [`IoRequest::to_owned`] gives a backend that keeps working after `submit` its own copy.

use std::ops::Deref;
use std::sync::Arc;

use hipfile_hip::os::FileStamp;
use hipfile_hip::{IoMemory, MemoryKind};

use crate::completion::Doorbell;
use crate::config::{CompatMode, EnvConfig, Settings};
use crate::file::RegisteredFile;
use crate::io::IoOp;

/// One validated request: the memory is device memory the runtime's pointer query checked
/// (a [`hipfile_hip::DeviceRange`] inside one allocation, of the request's size) or, where the
/// setting `allow_system_memory` admits it, host memory (a [`hipfile_hip::HostRange`]); the
/// offsets are non-negative, and the size is at most [`crate::MAX_RW_COUNT`]. Backends see it
/// through an [`IoRequest`].
#[derive(Clone, Debug)]
pub struct OwnedRequest {
    /// Direction.
    pub op: IoOp,
    /// The registered file. A backend that keeps working on the request after `submit` returns
    /// keeps a clone of the `Arc` (its descriptors stay open while it does).
    pub file: Arc<RegisteredFile>,
    /// The memory to read into or write from: exactly the bytes to move. Device memory unless
    /// the settings allow host memory ([`Settings::allow_system_memory`]).
    pub memory: IoMemory,
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
    pub settings: Arc<Settings>,
    /// Compat mode in force for this request.
    pub compat: CompatMode,
    /// Environment switches in force.
    pub env: EnvConfig,
    /// Rung when a queued request finishes, for a submitter that waits for any of several
    /// requests (a batch). See [`Doorbell`].
    pub doorbell: Option<Doorbell>,
    /// The request runs for a stream-ordered op ([`crate::stream`]) while the application's
    /// stream waits for it: whatever GPU streams a backend uses for it must not be ordered with
    /// the legacy default stream, or they would wait behind the application's waiting stream.
    pub stream_ordered: bool,
    /// The file's size and change times as this request's check of the application's
    /// descriptor found them ([`RegisteredFile::check_caller`]); `None` when nothing checked
    /// them. A backend that keeps anything of the file's contents between requests (the staged
    /// engine's pinned page cache) keeps it only while the stamp stays the same, and uses none
    /// of it for a request without one.
    pub file_stamp: Option<FileStamp>,
}

impl OwnedRequest {
    /// The request as backends are offered it.
    pub fn request(&self) -> IoRequest<'_> {
        IoRequest(self)
    }

    /// Bytes to move.
    pub fn size(&self) -> usize {
        self.memory.len()
    }

    /// The device that owns the memory ([`hipfile_hip::HOST_DEVICE`], -1, for host memory).
    pub fn device(&self) -> i32 {
        self.memory.device()
    }

    /// The statistics level in force for the request, as the driver counts
    /// ([`Settings::effective_stats_level`]).
    pub fn stats_level(&self) -> u8 {
        self.settings.effective_stats_level(&self.env)
    }

    /// The kind of memory, as the runtime reported it when the request was validated.
    pub fn memory_kind(&self) -> MemoryKind {
        self.memory.kind()
    }
}

/// A request as the registry offers it to backends: a borrowed [`OwnedRequest`], whose fields
/// and methods it reads through `Deref`.
#[derive(Clone, Copy, Debug)]
pub struct IoRequest<'a>(&'a OwnedRequest);

impl IoRequest<'_> {
    /// A copy that owns what the request borrows, for a backend that keeps working on it after
    /// `submit` returned.
    pub fn to_owned(&self) -> OwnedRequest {
        self.0.clone()
    }
}

impl Deref for IoRequest<'_> {
    type Target = OwnedRequest;

    fn deref(&self) -> &OwnedRequest {
        self.0
    }
}

impl<'a> From<&'a OwnedRequest> for IoRequest<'a> {
    fn from(request: &'a OwnedRequest) -> Self {
        IoRequest(request)
    }
}
