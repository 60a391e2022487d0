//! The contract between the dispatcher and the engines that move bytes.
//!
//! A backend is offered every request through [`Backend::accepts`] (cheap, pure: it looks only at
//! the request and answers yes or a typed [`Decline`]); the highest-priority backend that accepts
//! starts it with [`Backend::submit`], and the dispatcher waits for its [`Completion`]. Backends
//! register a [`BackendDescriptor`] with `inventory::submit!` and also export a plain
//! `register(&mut RegistryBuilder)`, because the linker drops inventory entries of crates nothing
//! names.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};
use std::time::Instant;

use hipfile_hip::os::FileStamp;
use hipfile_hip::{DeviceRange, GpuRuntime, MemoryKind};

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

/// One validated request: the device memory is a [`DeviceRange`] the runtime's pointer query
/// checked (inside one allocation, of the request's size), the offsets are non-negative, and the
/// size is at most [`crate::MAX_RW_COUNT`].
#[derive(Debug)]
pub struct IoRequest<'a> {
    /// Direction.
    pub op: IoOp,
    /// The registered file. A backend that keeps working on the request after `submit` returns
    /// keeps a clone of the `Arc` (its descriptors stay open while it does).
    pub file: &'a Arc<RegisteredFile>,
    /// The device memory to read into or write from: exactly the bytes to move.
    pub memory: &'a DeviceRange,
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
    pub settings: &'a Arc<Settings>,
    /// Compat mode in force for this request.
    pub compat: CompatMode,
    /// Environment switches in force.
    pub env: &'a EnvConfig,
    /// Rung when a queued request finishes, for a submitter that waits for any of several
    /// requests (a batch). See [`Doorbell`].
    pub doorbell: Option<&'a Doorbell>,
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

impl IoRequest<'_> {
    /// A copy that owns what the request borrows, for a backend that keeps working on it after
    /// `submit` returned.
    pub fn to_owned(&self) -> OwnedRequest {
        OwnedRequest {
            op: self.op,
            file: Arc::clone(self.file),
            memory: self.memory.clone(),
            file_offset: self.file_offset,
            append: self.append,
            registered_buffer: self.registered_buffer,
            settings: Arc::clone(self.settings),
            compat: self.compat,
            env: *self.env,
            doorbell: self.doorbell.cloned(),
            stream_ordered: self.stream_ordered,
            file_stamp: self.file_stamp,
        }
    }

    /// Bytes to move.
    pub fn size(&self) -> usize {
        self.memory.len()
    }

    /// The device that owns the memory.
    pub fn device(&self) -> i32 {
        self.memory.device()
    }

    /// The statistics level in force for the request, as the driver counts
    /// ([`Settings::effective_stats_level`]).
    pub fn stats_level(&self) -> u8 {
        self.settings.effective_stats_level(self.env)
    }

    /// The kind of memory, as the runtime reported it when the request was validated.
    pub fn memory_kind(&self) -> MemoryKind {
        self.memory.kind()
    }
}

/// An [`IoRequest`] that owns its parts ([`IoRequest::to_owned`]).
#[derive(Clone, Debug)]
pub struct OwnedRequest {
    pub(crate) op: IoOp,
    pub(crate) file: Arc<RegisteredFile>,
    pub(crate) memory: DeviceRange,
    pub(crate) file_offset: u64,
    pub(crate) append: bool,
    pub(crate) registered_buffer: bool,
    pub(crate) settings: Arc<Settings>,
    pub(crate) compat: CompatMode,
    pub(crate) env: EnvConfig,
    pub(crate) doorbell: Option<Doorbell>,
    pub(crate) stream_ordered: bool,
    pub(crate) file_stamp: Option<FileStamp>,
}

impl OwnedRequest {
    /// The request, borrowed again.
    pub fn request(&self) -> IoRequest<'_> {
        IoRequest {
            op: self.op,
            file: &self.file,
            memory: &self.memory,
            file_offset: self.file_offset,
            append: self.append,
            registered_buffer: self.registered_buffer,
            settings: &self.settings,
            compat: self.compat,
            env: &self.env,
            doorbell: self.doorbell.as_ref(),
            stream_ordered: self.stream_ordered,
            file_stamp: self.file_stamp,
        }
    }
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

/// A [`Decline`] without its details: what statistics count declines by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeclineReason {
    /// [`Decline::CompatModeDisallowed`].
    CompatModeDisallowed,
    /// [`Decline::CompatModeForced`].
    CompatModeForced,
    /// [`Decline::NoP2pDriver`].
    NoP2pDriver,
    /// [`Decline::NoDirectIo`].
    NoDirectIo,
    /// [`Decline::NotDeviceMemory`].
    NotDeviceMemory,
    /// [`Decline::Misaligned`].
    Misaligned,
    /// [`Decline::UnsupportedFilesystem`].
    UnsupportedFilesystem,
    /// [`Decline::Append`].
    Append,
    /// [`Decline::FileSizeLimit`].
    FileSizeLimit,
    /// [`Decline::Other`].
    Other,
}

impl DeclineReason {
    /// Every reason.
    pub const ALL: [DeclineReason; 10] = [
        DeclineReason::CompatModeDisallowed,
        DeclineReason::CompatModeForced,
        DeclineReason::NoP2pDriver,
        DeclineReason::NoDirectIo,
        DeclineReason::NotDeviceMemory,
        DeclineReason::Misaligned,
        DeclineReason::UnsupportedFilesystem,
        DeclineReason::Append,
        DeclineReason::FileSizeLimit,
        DeclineReason::Other,
    ];

    /// A short name for reports (`misaligned`, `compat_forced`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DeclineReason::CompatModeDisallowed => "compat_disallowed",
            DeclineReason::CompatModeForced => "compat_forced",
            DeclineReason::NoP2pDriver => "no_p2p_driver",
            DeclineReason::NoDirectIo => "no_direct_io",
            DeclineReason::NotDeviceMemory => "not_device_memory",
            DeclineReason::Misaligned => "misaligned",
            DeclineReason::UnsupportedFilesystem => "unsupported_filesystem",
            DeclineReason::Append => "append",
            DeclineReason::FileSizeLimit => "file_size_limit",
            DeclineReason::Other => "other",
        }
    }

    /// The reason named `name` ([`DeclineReason::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }

    /// Position in [`DeclineReason::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl Decline {
    /// The kind of decline.
    pub fn reason(&self) -> DeclineReason {
        match self {
            Decline::CompatModeDisallowed => DeclineReason::CompatModeDisallowed,
            Decline::CompatModeForced => DeclineReason::CompatModeForced,
            Decline::NoP2pDriver => DeclineReason::NoP2pDriver,
            Decline::NoDirectIo => DeclineReason::NoDirectIo,
            Decline::NotDeviceMemory => DeclineReason::NotDeviceMemory,
            Decline::Misaligned { .. } => DeclineReason::Misaligned,
            Decline::UnsupportedFilesystem(_) => DeclineReason::UnsupportedFilesystem,
            Decline::Append => DeclineReason::Append,
            Decline::FileSizeLimit { .. } => DeclineReason::FileSizeLimit,
            Decline::Other(_) => DeclineReason::Other,
        }
    }
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

/// How the submitter of a request will wait for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Submit {
    /// The submitting thread waits for the completion at once (synchronous IO): the backend
    /// may do the work on that thread, inside [`Backend::submit`] or inside
    /// [`Completion::wait`], with no hand-off to another thread.
    Wait,
    /// The submitter goes on with other work (batches, stream-ordered IO) and collects the
    /// completion later: the backend's own threads make progress without it, and a waiter may
    /// still join in when it finally waits.
    Queue,
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
///   at end of file, or an [`IoFailure`] with the bytes already moved. A backend never reports
///   bytes it did not move.
/// - Ordering: requests are independent. Two requests in flight at once may run in any order
///   and overlap; a caller that needs one before the other waits for the first completion.
///   Requests that append to one file are the exception: each lands whole, in the order the
///   backend takes the file's append lock ([`RegisteredFile::append_lock`]).
/// - Lifetime: the caller keeps the request's memory and registered file alive and registered
///   until the completion is finished; the backend touches neither after that. Dropping an
///   unfinished completion waits for it, so a completion is never the last thing left using
///   the request's memory.
/// - Queued requests ([`Submit::Queue`]) make progress without their submitter, on the
///   backend's own threads (a backend with none may finish them inside `submit`); a backend
///   that answers a pending completion for one rings its [`IoRequest::doorbell`] when it
///   finishes. The shared [`crate::workers::IoWorkers`] pool is there for backends that need
///   threads.
/// - Cancellation: a pending request may be withdrawn before it starts
///   ([`PendingIo::cancel`]); once started it runs to completion or failure.
/// - Failover, statistics and the C conventions are the dispatcher's ([`crate::Registry`]), not
///   the backend's: a backend fails with the error it saw.
pub trait Backend: Send + Sync + fmt::Debug {
    /// The name (`fallback`, `fastpath`, ...), unique in a registry.
    fn name(&self) -> &'static str;
    /// Whether this backend will run `req`. Cheap and free of side effects.
    fn accepts(&self, req: &IoRequest<'_>) -> Result<(), Decline>;
    /// Start `req`; see the trait's contract.
    fn submit(&self, req: &IoRequest<'_>, how: Submit) -> Completion;
    /// What the backend moves bytes through, for statistics: the fastpath names its P2P driver
    /// (`amd-kfd`, `cufile`, `sim`). Default: nothing to name.
    fn mechanism(&self) -> Option<&'static str> {
        None
    }
    /// Counters of the backend's own, by name, for statistics (the fallback: bytes it moved
    /// through the page cache and with O_DIRECT). Kept only for requests whose statistics level
    /// ([`IoRequest::stats_level`]) is 1 or more. Default: none.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// What the backend holds while the driver is open (default: nothing).
    fn resources(&self) -> Resources {
        Resources::default()
    }
    /// Wait until work the backend does in the background for earlier requests (pinning the
    /// page cache they read) is done, so that what follows is measured or checked against its
    /// end state. Default: nothing to wait for.
    fn settle(&self) {}
}

/// The outcome of a request: bytes moved, or the failure with the bytes moved before it.
pub type IoOutcome = std::result::Result<usize, IoFailure>;

/// Work a backend finishes after [`Backend::submit`] returned.
pub trait PendingIo: Send + fmt::Debug {
    /// Wait for the request to finish; the waiting thread may do some of its work.
    fn wait(self: Box<Self>) -> IoOutcome;
    /// Whether the request has finished (a following `wait` returns at once). Never blocks.
    fn is_finished(&self) -> bool;
    /// Withdraw the request if no byte of it has been touched yet: answers true when it was
    /// withdrawn (it then never starts, counts as finished, and `wait` answers `Ok(0)`), false
    /// when it already started or finished (it then runs to its end as usual). The default
    /// withdraws nothing.
    fn cancel(&self) -> bool {
        false
    }
}

/// A wake-up shared by requests in flight and the thread that waits for any of them.
///
/// A submitter that waits for several queued requests at once (a batch) puts a doorbell on each
/// request ([`IoRequest::doorbell`]); a backend that answered a pending completion for such a
/// request rings it once the request has finished (after `is_finished` turns true). Each
/// request's doorbell carries a token ([`Doorbell::tagged`]) that the ring hands to the waiter
/// ([`Doorbell::take_rung`]), so the waiter looks only at the requests that finished, however
/// many are in flight. The waiter reads [`Doorbell::rung`] before it checks its requests and
/// then waits past that count, so a ring between the check and the wait is never lost. Cloning
/// shares the doorbell and keeps the token.
#[derive(Clone, Debug, Default)]
pub struct Doorbell {
    bell: Arc<Bell>,
    token: u64,
}

#[derive(Debug, Default)]
struct Bell {
    count: AtomicU64,
    /// Tokens rung and not yet taken.
    rung: Mutex<Vec<u64>>,
    rang: Condvar,
}

impl Doorbell {
    /// A doorbell never rung, with token 0.
    pub fn new() -> Self {
        Doorbell::default()
    }

    /// The same doorbell, ringing with `token`.
    pub fn tagged(&self, token: u64) -> Doorbell {
        Doorbell {
            bell: Arc::clone(&self.bell),
            token,
        }
    }

    /// Count a finished request, hand its token to the waiter and wake every waiter.
    pub fn ring(&self) {
        let bell = &*self.bell;
        // Under the lock, so a waiter between its check and its wait cannot miss the wake-up.
        let mut rung = bell.rung.lock().unwrap_or_else(PoisonError::into_inner);
        rung.push(self.token);
        bell.count.fetch_add(1, Ordering::AcqRel);
        drop(rung);
        bell.rang.notify_all();
    }

    /// How many times the doorbell has rung.
    pub fn rung(&self) -> u64 {
        self.bell.count.load(Ordering::Acquire)
    }

    /// The tokens rung since the last call, in the order they rang (a request may ring more
    /// than once).
    pub fn take_rung(&self) -> Vec<u64> {
        std::mem::take(
            &mut *self
                .bell
                .rung
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Wait until the doorbell has rung more than `seen` times, or until `deadline` (`None`:
    /// no deadline). Answers whether it rang. The waiter polls for [`crate::workers::STAY_AWAKE`]
    /// (yielding the core) before it sleeps: a small request finishes within that window, and a
    /// sleeping waiter would add a wake-up to its latency.
    pub fn wait_past(&self, seen: u64, deadline: Option<Instant>) -> bool {
        let bell = &*self.bell;
        let since = Instant::now();
        while since.elapsed() < crate::workers::STAY_AWAKE {
            if self.rung() > seen {
                return true;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            std::thread::yield_now();
        }
        let mut held = bell.rung.lock().unwrap_or_else(PoisonError::into_inner);
        while self.rung() <= seen {
            match deadline {
                None => held = bell.rang.wait(held).unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    held = bell
                        .rang
                        .wait_timeout(held, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        }
        true
    }
}

/// A submitted request, finished or pending. Wait for it with [`Completion::wait`] or poll it
/// with [`Completion::poll`]; dropping an unfinished one waits for it.
#[derive(Debug)]
pub struct Completion(Option<State>);

#[derive(Debug)]
enum State {
    Ready(IoOutcome),
    Pending(Box<dyn PendingIo>),
}

impl Completion {
    /// A request that finished inside `submit`.
    pub fn ready(outcome: IoOutcome) -> Self {
        Completion(Some(State::Ready(outcome)))
    }

    /// A request the backend finishes later.
    pub fn pending(work: Box<dyn PendingIo>) -> Self {
        Completion(Some(State::Pending(work)))
    }

    /// Wait for the outcome.
    pub fn wait(mut self) -> IoOutcome {
        match self.0.take() {
            Some(State::Ready(outcome)) => outcome,
            Some(State::Pending(work)) => work.wait(),
            None => unreachable!("a completion holds its state until it is consumed"),
        }
    }

    /// Whether the request has finished (waiting for it then returns at once). Never blocks.
    pub fn is_finished(&self) -> bool {
        match &self.0 {
            Some(State::Pending(work)) => work.is_finished(),
            _ => true,
        }
    }

    /// Withdraw the request if it has not started ([`PendingIo::cancel`]); a request that
    /// finished inside `submit` cannot be withdrawn.
    pub fn cancel(&self) -> bool {
        match &self.0 {
            Some(State::Pending(work)) => work.cancel(),
            _ => false,
        }
    }

    /// The outcome if the request has finished, else the completion back, unchanged.
    pub fn poll(self) -> std::result::Result<IoOutcome, Completion> {
        if self.is_finished() {
            Ok(self.wait())
        } else {
            Err(self)
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let Some(State::Pending(work)) = self.0.take() {
            // The request's memory and file may be released right after this: let the backend
            // finish with them first.
            let _ = work.wait();
        }
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
    /// Bytes of the page cache pinned for copies straight out of it (the staged engine's
    /// page-cache pins); not allocated by the library, but kept from being reclaimed.
    pub page_cache_pinned_bytes: usize,
    /// GPU contexts the backend made for itself (the staged engine pins page cache in one per
    /// device), each holding device memory of its own.
    pub own_contexts: usize,
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

/// How a backend moves bytes between the file and GPU memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoPath {
    /// Storage <-> GPU memory with no host copy (a P2P DMA).
    Direct,
    /// Through host memory (a bounce buffer).
    Staged,
}

impl IoPath {
    /// `direct` or `staged`.
    pub fn name(self) -> &'static str {
        match self {
            IoPath::Direct => "direct",
            IoPath::Staged => "staged",
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
