//! The driver: its open/closed state, the tables of registered files and buffers, and the walk
//! of one read or write from validation to dispatch.
//!
//! State as data: the driver is `Closed { staged settings }` or `Open { session, refcount }`.
//! Lock order: the state mutex first, then a session's file table, then its buffer table; IO holds
//! no lock while bytes move (it holds `Arc`s and in-flight guards).
//!
//! Semantics follow upstream hipFile: `handle_register` opens the driver implicitly (0 -> 1) only
//! after its own checks pass; `buf_register` opens it before its checks, so a failed buffer
//! registration still leaves the driver open; IO on a closed driver is `EINVAL` and opens nothing;
//! closing to zero forgets every file and buffer.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock};

use hipfile_hip::{DeviceRange, GpuRuntime, HipErrorCode, MemoryKind, Refusal};
use rustix::io::Errno;

use crate::backend::{BackendContext, IoOp, IoRequest, LiveSettings, OwnedRequest};
use crate::batch::{self, BatchTable};
use crate::config::{EnvConfig, Environment, Settings};
use crate::error::{Error, ErrorKind, Result};
use crate::file::{FileInFlight, RegisteredFile};
use crate::io::{FileIo, PosixIo};
use crate::registry::{Dispatched, Registry, RegistryBuilder};
use crate::stats::{ApiOp, Channel, Finished, Stats};
use crate::stats_server::{StatsServer, StatsService};
use crate::stream::{StreamEngine, StreamTable};

/// Largest transfer of one call, as Linux caps `read(2)`/`write(2)` (`MAX_RW_COUNT`).
pub const MAX_RW_COUNT: usize = 0x7fff_f000;

/// Opaque identity of a registered file (what C callers see as `hipFileHandle_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileHandleId(pub u64);

/// Where the GPU runtime comes from when the driver opens.
pub type RuntimeSource = Arc<dyn Fn() -> Result<Arc<dyn GpuRuntime>> + Send + Sync>;

/// How a driver is built. The facade builds the process-wide driver from the defaults, which come
/// from the process environment ([`Environment::process`]); tests build their own with a
/// simulated runtime, scripted IO and an explicit registry, or from an [`Environment`] read
/// through a lookup closure ([`DriverOptions::from_environment`]).
#[derive(Clone)]
pub struct DriverOptions {
    /// Opens the GPU runtime (default: the platform the environment's [`Environment::platform`]
    /// names, else auto-detected).
    pub runtime: RuntimeSource,
    /// File IO primitives (default: pread/pwrite).
    pub io: Arc<dyn FileIo>,
    /// Environment switches (default: the environment's [`Environment::switches`]).
    pub env: EnvConfig,
    /// The backends (default: what `inventory` collected).
    pub backends: Option<RegistryBuilder>,
    /// Backend selection and order (default: the environment's `HIPFILE_BACKENDS`).
    pub selection: Option<String>,
    /// The settings a new driver starts from, before the parameter API changes them (default:
    /// the environment's [`Environment::settings`], so the `HIPFILE_*` engine knobs apply).
    pub settings: Settings,
}

impl std::fmt::Debug for DriverOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverOptions")
            .field("io", &self.io)
            .field("env", &self.env)
            .field("backends", &self.backends)
            .field("selection", &self.selection)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Default for DriverOptions {
    /// [`DriverOptions::from_environment`] of the process environment.
    fn default() -> Self {
        DriverOptions::from_environment(Environment::process())
    }
}

impl DriverOptions {
    /// Everything `environment` says: its platform opens the runtime, its switches, backend
    /// selection and settings are the driver's; IO is pread/pwrite and the backends are what
    /// `inventory` collected.
    pub fn from_environment(environment: &Environment) -> Self {
        let platform = environment.platform.clone();
        DriverOptions {
            runtime: Arc::new(move || {
                hipfile_hip::open_default(&platform).map_err(|e| {
                    let err = Error::hip(&e, "no GPU platform");
                    Error::new(ErrorKind::DeviceNotFound, err.context().to_string())
                })
            }),
            io: Arc::new(PosixIo),
            env: environment.switches,
            backends: None,
            selection: environment.backends.clone(),
            settings: environment.settings.clone(),
        }
    }

    /// Defaults, with a fixed runtime.
    pub fn with_runtime(runtime: Arc<dyn GpuRuntime>) -> Self {
        DriverOptions {
            runtime: Arc::new(move || Ok(Arc::clone(&runtime))),
            ..DriverOptions::default()
        }
    }
}

/// A buffer registered with the driver.
#[derive(Debug)]
pub struct RegisteredBuffer {
    range: DeviceRange,
    flags: i32,
    in_flight: AtomicUsize,
}

impl RegisteredBuffer {
    /// Device address.
    pub fn ptr(&self) -> usize {
        self.range.ptr()
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.range.len()
    }
    /// Whether the length is zero (never true for a registered buffer).
    pub fn is_empty(&self) -> bool {
        self.range.is_empty()
    }
    /// Owning device.
    pub fn device(&self) -> i32 {
        self.range.device()
    }
    /// The registered memory, as checked at registration.
    pub fn range(&self) -> &DeviceRange {
        &self.range
    }
    /// Flags given at registration.
    pub fn flags(&self) -> i32 {
        self.flags
    }
}

/// Hashes the integer keys of the driver's tables (file handle ids, buffer addresses): one
/// multiplication by the golden ratio, its high half folded into the low one so that addresses
/// aligned to pages still spread over the buckets. Every request looks up its file and its buffer;
/// the standard library's SipHash is made to withstand keys chosen by an attacker, which handle
/// ids the driver issues and addresses the runtime allocated are not, and costs more than the
/// table's probe itself.
#[derive(Clone, Copy, Debug, Default)]
struct IntegerKeys;

impl BuildHasher for IntegerKeys {
    type Hasher = IntegerHasher;

    fn build_hasher(&self) -> IntegerHasher {
        IntegerHasher(0)
    }
}

/// The hasher of [`IntegerKeys`].
struct IntegerHasher(u64);

impl IntegerHasher {
    const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;
}

impl Hasher for IntegerHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(Self::GOLDEN);
    }

    fn write_usize(&mut self, n: usize) {
        self.write_u64(n as u64);
    }

    fn finish(&self) -> u64 {
        self.0 ^ (self.0 >> 32)
    }
}

#[derive(Debug, Default)]
struct FileTable {
    by_id: HashMap<u64, Arc<RegisteredFile>, IntegerKeys>,
    by_fd: HashMap<RawFd, u64>,
}

/// Everything an open driver owns.
#[derive(Debug)]
pub struct Session {
    runtime: Arc<dyn GpuRuntime>,
    registry: Registry,
    settings: Arc<LiveSettings>,
    env: EnvConfig,
    files: RwLock<FileTable>,
    buffers: RwLock<HashMap<usize, Arc<RegisteredBuffer>, IntegerKeys>>,
    stats: Stats,
    /// The stream engine, made by the first stream-ordered op.
    streams: Mutex<Option<Arc<StreamEngine>>>,
    /// The statistics socket's listener ([`crate::stats_server`]), while statistics are on.
    stats_server: Mutex<Option<StatsServer>>,
    /// Where the statistics are served, set as the session starts.
    stats_service: OnceLock<StatsService>,
}

impl Session {
    fn stats_server_slot(&self) -> MutexGuard<'_, Option<StatsServer>> {
        self.stats_server
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Stop serving the statistics socket (the driver closed).
    fn stop_stats_server(&self) {
        if let Some(server) = self.stats_server_slot().take() {
            server.stop();
        }
    }

    /// Whether this session serves the statistics socket ([`crate::stats_server`]).
    pub fn serves_stats(&self) -> bool {
        self.stats_server_slot().is_some()
    }

    /// Where this session serves its counters to `hipfile stats`, or why it does not
    /// ([`crate::stats_server`]).
    pub fn stats_service(&self) -> StatsService {
        self.stats_service
            .get()
            .cloned()
            .unwrap_or(StatsService::Off)
    }

    /// The stream engine, made on first use.
    pub(crate) fn stream_engine(&self) -> Result<Arc<StreamEngine>> {
        let mut slot = self.streams.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(engine) = slot.as_ref() {
            return Ok(Arc::clone(engine));
        }
        let engine = Arc::new(StreamEngine::new(Arc::clone(&self.runtime))?);
        *slot = Some(Arc::clone(&engine));
        Ok(engine)
    }

    /// The GPU runtime.
    pub fn runtime(&self) -> &Arc<dyn GpuRuntime> {
        &self.runtime
    }
    /// The backends.
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
    /// Settings in force.
    pub fn settings(&self) -> Arc<Settings> {
        self.settings.current()
    }
    /// Environment switches in force (what requests carry as [`IoRequest::env`]).
    pub fn env(&self) -> &EnvConfig {
        &self.env
    }
    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    /// The counters now, with each backend's mechanism and own counters.
    pub fn stats_snapshot(&self) -> crate::StatsSnapshot {
        self.stats.snapshot_with(&self.registry)
    }
    /// Count a request that reached the backends (`outcome`) or failed before (`Err` with no
    /// request: its memory and alignment unknown), started at `start_us` ([`Stats::now_us`]).
    pub(crate) fn count_io(
        &self,
        op: IoOp,
        channel: Channel,
        req: Option<&IoRequest<'_>>,
        start_us: u64,
        outcome: &Result<Dispatched>,
    ) {
        if !self.stats.enabled() {
            return;
        }
        const PAGE: u64 = 4096;
        self.stats.record(Finished {
            op,
            channel,
            device: req.map(IoRequest::device),
            size: req.map_or(0, IoRequest::size),
            unaligned: req.is_some_and(|r| {
                (r.file_offset | r.size() as u64 | r.memory.ptr() as u64) % PAGE != 0
            }),
            start_us,
            end_us: self.stats.now_us(),
            outcome,
        });
    }

    /// The registered file behind `handle`.
    pub fn file(&self, handle: FileHandleId) -> Result<Arc<RegisteredFile>> {
        let files = self.files.read().unwrap_or_else(PoisonError::into_inner);
        files.by_id.get(&handle.0).cloned().ok_or_else(|| {
            Error::new(
                ErrorKind::HandleNotRegistered,
                "the file handle is not registered",
            )
        })
    }
}

#[derive(Debug)]
enum State {
    Closed {
        staged: Settings,
    },
    Open {
        session: Arc<Session>,
        refcount: usize,
        staged: Settings,
    },
}

/// The driver. One per process behind the C ABI; tests make as many as they like.
#[derive(Debug)]
pub struct Driver {
    options: DriverOptions,
    state: Mutex<State>,
    next_handle: AtomicU64,
    batches: Mutex<BatchTable>,
    streams: Mutex<StreamTable>,
}

/// One read or write as the caller states it, before validation.
#[derive(Clone, Copy, Debug)]
pub struct IoCall {
    /// Direction.
    pub op: IoOp,
    /// The registered file.
    pub handle: FileHandleId,
    /// Buffer base: a registered buffer, or any device pointer.
    pub buffer: usize,
    /// Bytes to move.
    pub size: usize,
    /// File offset (negative is `EINVAL`).
    pub file_offset: i64,
    /// Offset into the buffer (negative is `EINVAL`).
    pub buffer_offset: i64,
}

impl Driver {
    /// A closed driver built from `options`.
    pub fn new(options: DriverOptions) -> Self {
        let staged = options.settings.clone();
        Driver {
            options,
            state: Mutex::new(State::Closed { staged }),
            next_handle: AtomicU64::new(1),
            batches: Mutex::new(BatchTable::default()),
            streams: Mutex::new(StreamTable::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The registered streams.
    pub(crate) fn stream_table(&self) -> MutexGuard<'_, StreamTable> {
        self.streams.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Open the driver if it is closed, without adding a reference if it is open (the implicit
    /// open of upstream's calls).
    pub(crate) fn open_implicitly(&self) -> Result<Arc<Session>> {
        self.open_with(&mut self.lock(), false)
    }

    /// The batches (lock order: after the state).
    pub(crate) fn batch_table(&self) -> MutexGuard<'_, BatchTable> {
        self.batches.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn start_session(&self, staged: &Settings) -> Result<Arc<Session>> {
        let runtime = (self.options.runtime)()?;
        match runtime.device_count() {
            Ok(n) if n > 0 => {}
            Ok(_) => {
                return Err(Error::new(
                    ErrorKind::DeviceNotFound,
                    "the platform reports no device",
                ))
            }
            Err(e) => return Err(Error::hip(&e, "counting devices")),
        }
        let settings = Arc::new(LiveSettings::new(staged.clone()));
        let ctx = BackendContext {
            runtime: Arc::clone(&runtime),
            io: Arc::clone(&self.options.io),
            settings: Arc::clone(&settings),
            env: self.options.env,
        };
        let builder = match &self.options.backends {
            Some(b) => b.clone(),
            None => RegistryBuilder::from_inventory()?,
        };
        let registry = builder.build(&ctx, self.options.selection.as_deref())?;
        let devices = runtime
            .device_count()
            .ok()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0);
        let stats = Stats::new(
            staged.effective_stats_level(&self.options.env),
            &registry.paths(),
            Arc::clone(registry.routes()),
            devices,
        );
        let serve = stats.enabled();
        let session = Arc::new(Session {
            runtime,
            registry,
            settings,
            env: self.options.env,
            files: RwLock::new(FileTable::default()),
            buffers: RwLock::new(HashMap::default()),
            stats,
            streams: Mutex::new(None),
            stats_server: Mutex::new(None),
            stats_service: OnceLock::new(),
        });
        if serve {
            let (server, service) = StatsServer::start(Arc::downgrade(&session));
            *session.stats_server_slot() = server;
            let _ = session.stats_service.set(service);
        }
        Ok(session)
    }

    /// Open the session if closed (refcount 1); returns it either way. `bump` adds a reference
    /// when already open (an explicit `hipFileDriverOpen`); implicit opens do not.
    fn open_with(&self, state: &mut State, bump: bool) -> Result<Arc<Session>> {
        match state {
            State::Open {
                session, refcount, ..
            } => {
                if bump {
                    *refcount += 1;
                }
                Ok(Arc::clone(session))
            }
            State::Closed { staged } => {
                crate::logging::configure(staged.logging_level, &staged.log_file_path);
                let session = self.start_session(staged).inspect_err(|e| {
                    log::warn!("the driver failed to open: {e}");
                })?;
                log_open(&session, &self.options.env);
                *state = State::Open {
                    session: Arc::clone(&session),
                    refcount: 1,
                    staged: staged.clone(),
                };
                Ok(session)
            }
        }
    }

    /// `hipFileDriverOpen`: open, or add a reference to the open driver.
    pub fn open(&self) -> Result<()> {
        self.open_with(&mut self.lock(), true).map(|_| ())
    }

    /// `hipFileDriverClose`: drop a reference; at zero, forget every file and buffer and
    /// destroy every batch (cancelling what has not started, waiting for the rest).
    pub fn close(&self) -> Result<()> {
        let mut state = self.lock();
        let (batches, session) = match &mut *state {
            State::Closed { .. } => {
                return Err(Error::new(
                    ErrorKind::DriverNotInitialized,
                    "the driver is not open",
                ))
            }
            State::Open {
                refcount,
                staged,
                session,
            } => {
                *refcount -= 1;
                if *refcount > 0 {
                    log::debug!("driver reference dropped, {refcount} left open");
                    return Ok(());
                }
                log::info!("driver closed");
                let session = Arc::clone(session);
                let staged = std::mem::take(staged);
                *state = State::Closed { staged };
                (self.batch_table().take_all(), session)
            }
        };
        drop(state);
        session.stop_stats_server();
        batch::shut_down(batches);
        crate::stats_server::report_final(&session);
        Ok(())
    }

    /// `hipFileUseCount`: references held on the open driver (0 when closed).
    pub fn use_count(&self) -> usize {
        match &*self.lock() {
            State::Closed { .. } => 0,
            State::Open { refcount, .. } => *refcount,
        }
    }

    /// The open session, if any.
    pub fn session(&self) -> Option<Arc<Session>> {
        match &*self.lock() {
            State::Closed { .. } => None,
            State::Open { session, .. } => Some(Arc::clone(session)),
        }
    }

    /// Change a parameter: allowed only while closed (`hipFileSetParameter*`); applied at open.
    pub fn stage_settings(&self, change: impl FnOnce(&mut Settings)) -> Result<()> {
        match &mut *self.lock() {
            State::Closed { staged } => {
                let mut next = staged.clone();
                change(&mut next);
                next.check()?;
                *staged = next;
                Ok(())
            }
            State::Open { .. } => Err(Error::new(
                ErrorKind::DriverAlreadyOpen,
                "parameters can only be set while the driver is closed",
            )),
        }
    }

    /// Change a setting of the open driver (`hipFileDriverSet*`); not allowed while closed.
    pub fn update_live_settings(&self, change: impl FnOnce(&mut Settings)) -> Result<()> {
        match &*self.lock() {
            State::Open { session, .. } => {
                let mut next = (*session.settings.current()).clone();
                change(&mut next);
                next.check()?;
                session.settings.update(|s| *s = next);
                Ok(())
            }
            State::Closed { .. } => Err(Error::new(
                ErrorKind::DriverNotInitialized,
                "the driver is not open",
            )),
        }
    }

    /// The settings in force: the open driver's, else the staged ones.
    pub fn settings(&self) -> Settings {
        match &*self.lock() {
            State::Closed { staged } => staged.clone(),
            State::Open { session, .. } => (*session.settings.current()).clone(),
        }
    }

    /// `hipFileHandleRegister`: checks the descriptor, then opens the driver if needed.
    pub fn handle_register(&self, fd: RawFd) -> Result<FileHandleId> {
        self.counted(ApiOp::HandleRegister, self.handle_register_counted(fd))
            .inspect_err(|e| {
                log::warn!("registering descriptor {fd} failed: {e}");
            })
    }

    /// Count API call `op` and its `result` with the open driver's counters (none when it is
    /// closed); the result passes through.
    pub(crate) fn counted<T>(&self, op: ApiOp, result: Result<T>) -> Result<T> {
        if let Some(session) = self.session() {
            session.stats.api(op, result.is_ok());
        }
        result
    }

    fn handle_register_counted(&self, fd: RawFd) -> Result<FileHandleId> {
        let file = RegisteredFile::open(fd)?;
        let mut state = self.lock();
        let session = self.open_with(&mut state, false)?;
        let mut files = session
            .files
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if files.by_fd.contains_key(&fd) {
            return Err(Error::new(
                ErrorKind::HandleAlreadyRegistered,
                format!("descriptor {fd} is already registered"),
            ));
        }
        let id = self.next_handle.fetch_add(1, Ordering::Relaxed);
        files.by_fd.insert(fd, id);
        files.by_id.insert(id, Arc::new(file));
        Ok(FileHandleId(id))
    }

    /// `hipFileHandleDeregister`: forget a file handle. Requests already in flight on it finish
    /// on the registration, whose descriptors close when the last of them ends.
    pub fn handle_deregister(&self, handle: FileHandleId) -> Result<()> {
        self.counted(
            ApiOp::HandleDeregister,
            self.handle_deregister_counted(handle),
        )
    }

    fn handle_deregister_counted(&self, handle: FileHandleId) -> Result<()> {
        let session = self
            .session()
            .ok_or_else(|| Error::new(ErrorKind::DriverNotInitialized, "the driver is not open"))?;
        let mut files = session
            .files
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let file = files.by_id.get(&handle.0).ok_or_else(|| {
            Error::new(
                ErrorKind::HandleNotRegistered,
                "the file handle is not registered",
            )
        })?;
        // The handle is forgotten at once: later requests on it are `HandleNotRegistered` and
        // the descriptor may be registered again. Requests already in flight (another thread's
        // read, batch entries, stream-ordered ops queued on a stream) hold the registration
        // itself and finish on it; its descriptors and pins go when the last of them ends.
        let in_flight = file.in_flight();
        if in_flight > 0 {
            log::info!(
                "file handle of descriptor {} deregistered with {in_flight} request(s) in flight: \
                 they run to their end, then its descriptors are closed",
                file.user_fd()
            );
        }
        let fd = file.user_fd();
        files.by_id.remove(&handle.0);
        files.by_fd.remove(&fd);
        Ok(())
    }

    /// The registered file behind `handle`.
    pub fn file(&self, handle: FileHandleId) -> Result<Arc<RegisteredFile>> {
        self.session()
            .ok_or_else(|| Error::new(ErrorKind::DriverNotInitialized, "the driver is not open"))?
            .file(handle)
    }

    /// `hipFileBufRegister`: opens the driver first (even if the checks then fail), then checks
    /// that `[ptr, ptr + len)` is device memory inside one allocation and not yet registered.
    pub fn buf_register(&self, ptr: usize, len: usize, flags: i32) -> Result<()> {
        let mut device = None;
        let result = self.buf_register_counted(ptr, len, flags, &mut device);
        if let Some(session) = self.session() {
            session.stats.buf_registered(device, len, result.is_ok());
        }
        result.inspect_err(|e| {
            log::warn!("registering buffer {ptr:#x} of {len} bytes failed: {e}");
        })
    }

    fn buf_register_counted(
        &self,
        ptr: usize,
        len: usize,
        flags: i32,
        device: &mut Option<i32>,
    ) -> Result<()> {
        let session = {
            let mut state = self.lock();
            self.open_with(&mut state, false)?
        };
        if ptr == 0 || len == 0 {
            return Err(Error::new(
                ErrorKind::InvalidValue,
                "buffer pointer and length must be non-zero",
            ));
        }
        let range =
            DeviceRange::check(&session.runtime, ptr, len).map_err(|refusal| match refusal {
                Refusal::Query(e) if e.code() == HipErrorCode::INVALID_VALUE => Error::new(
                    ErrorKind::InvalidValue,
                    format!("the runtime does not know {ptr:#x}: {e}"),
                ),
                Refusal::Query(e) => Error::hip(&e, format!("querying pointer {ptr:#x}")),
                Refusal::NotDevice(kind) | Refusal::PastEnd(kind @ MemoryKind::Managed) => {
                    not_device_memory(ptr, kind)
                }
                Refusal::PastEnd(_) => Error::new(
                    ErrorKind::HipPointerRangeError,
                    format!("{len} bytes at {ptr:#x} run past the end of the allocation"),
                ),
            })?;
        if range.kind() != MemoryKind::Device {
            return Err(not_device_memory(ptr, range.kind()));
        }
        *device = Some(range.device());
        let mut buffers = session
            .buffers
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if buffers.contains_key(&ptr) {
            return Err(Error::new(
                ErrorKind::MemoryAlreadyRegistered,
                format!("{ptr:#x} is already registered"),
            ));
        }
        buffers.insert(
            ptr,
            Arc::new(RegisteredBuffer {
                range,
                flags,
                in_flight: AtomicUsize::new(0),
            }),
        );
        Ok(())
    }

    /// Whether `ptr` is the base of a buffer registered with the open driver.
    pub fn buffer_registered(&self, ptr: usize) -> bool {
        self.session().is_some_and(|s| {
            s.buffers
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .contains_key(&ptr)
        })
    }

    /// `hipFileBufDeregister`.
    pub fn buf_deregister(&self, ptr: usize) -> Result<()> {
        let mut freed = None;
        let result = self.buf_deregister_counted(ptr, &mut freed);
        if let Some(session) = self.session() {
            let (device, len) = freed.unzip();
            session
                .stats
                .buf_deregistered(device, len.unwrap_or(0), result.is_ok());
        }
        result
    }

    fn buf_deregister_counted(&self, ptr: usize, freed: &mut Option<(i32, usize)>) -> Result<()> {
        let session = self
            .session()
            .ok_or_else(|| Error::new(ErrorKind::DriverClosing, "the driver is not open"))?;
        let busy = |session: &Session| {
            session
                .buffers
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&ptr)
                .is_some_and(|b| b.in_flight.load(Ordering::Acquire) > 0)
        };
        if busy(&session) {
            // Batch entries reported as timed out hold their memory until they are looked at
            // again: look now, before the buffers' lock (a submission takes the two the other
            // way round).
            let batches = self.batch_table().batches();
            crate::batch::release_finished(batches);
        }
        let mut buffers = session
            .buffers
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        match buffers.get(&ptr) {
            None => Err(Error::new(
                ErrorKind::MemoryNotRegistered,
                format!("{ptr:#x} is not registered"),
            )),
            // cuFile's answer to a deregistration it cannot make (upstream hipFile's
            // InternalError says "library bug"): the memory is still being read or written by
            // a request, batch entry or stream-ordered op; deregister it once they ended.
            Some(b) if b.in_flight.load(Ordering::Acquire) > 0 => Err(Error::new(
                ErrorKind::InvalidValue,
                format!(
                    "{ptr:#x} is in use by {} request(s) in flight; deregister it once they end",
                    b.in_flight.load(Ordering::Acquire)
                ),
            )),
            Some(b) => {
                *freed = Some((b.device(), b.len()));
                buffers.remove(&ptr);
                Ok(())
            }
        }
    }

    /// `hipFileRead` / `hipFileWrite`: validate, build the request, dispatch.
    pub fn io(&self, call: IoCall) -> Result<usize> {
        self.run_io(&call).inspect_err(|e| {
            log::warn!(
                "{} of {} bytes at file offset {} failed: {e}",
                op_name(call.op),
                call.size,
                call.file_offset
            );
        })
    }

    fn run_io(&self, call: &IoCall) -> Result<usize> {
        let session = self
            .session()
            .ok_or_else(|| Error::os(Errno::INVAL.raw_os_error(), "the driver is not open"))?;
        let start = session.stats.now_us();
        let prepared = match self.prepare(&session, call) {
            Ok(prepared) => prepared,
            Err(e) => {
                session.count_io(call.op, Channel::Sync, None, start, &Err(e.clone()));
                return Err(e);
            }
        };
        if let Some(answer) = prepared.answer {
            if let Err(e) = &answer {
                session.count_io(call.op, Channel::Sync, None, start, &Err(e.clone()));
            }
            return answer;
        }
        let request = prepared.request.request();
        let outcome = session.registry.dispatch(&request);
        session.count_io(call.op, Channel::Sync, Some(&request), start, &outcome);
        outcome.map(|d| d.bytes)
    }

    /// Validate `call` against `session` and resolve what it refers to. Argument errors fail;
    /// a request whose answer is known without moving bytes (size 0, a read at or past the end
    /// of the file, a descriptor that no longer allows the direction) carries that answer.
    pub(crate) fn prepare(&self, session: &Session, call: &IoCall) -> Result<Prepared> {
        self.prepare_in(session, call, false)
    }

    /// [`Driver::prepare`]; with `first_byte_inside`, a request of 0 bytes must still start
    /// inside its buffer (batch entries, as upstream checks them).
    pub(crate) fn prepare_in(
        &self,
        session: &Session,
        call: &IoCall,
        first_byte_inside: bool,
    ) -> Result<Prepared> {
        session.prepare(call, first_byte_inside)
    }
}

impl Session {
    /// [`Driver::prepare_in`], with what it needs: the session's tables and runtime. Stream-ordered
    /// ops bind their arguments when the stream reaches them, possibly after the driver closed,
    /// and validate them here against the session they were submitted to.
    pub(crate) fn prepare(&self, call: &IoCall, first_byte_inside: bool) -> Result<Prepared> {
        let file = {
            let files = self.files.read().unwrap_or_else(PoisonError::into_inner);
            files.by_id.get(&call.handle.0).cloned().ok_or_else(|| {
                Error::new(
                    ErrorKind::HandleNotRegistered,
                    "the file handle is not registered",
                )
            })?
        };
        self.prepare_on(file, call, first_byte_inside)
    }

    /// [`Session::prepare`] on a registration already found: a stream-ordered op runs on the
    /// registration it was queued on, even where its handle was deregistered since (the
    /// deregistration forgot the handle; the registration ends with its last op).
    pub(crate) fn prepare_on(
        &self,
        file: Arc<RegisteredFile>,
        call: &IoCall,
        first_byte_inside: bool,
    ) -> Result<Prepared> {
        let session = self;
        let file_guard = file.begin_io();
        if call.file_offset < 0 || call.buffer_offset < 0 {
            return Err(Error::os(
                Errno::INVAL.raw_os_error(),
                "negative file or buffer offset",
            ));
        }
        let size = call.size.min(MAX_RW_COUNT);
        // As pread(2): a range that ends past the largest file offset is EINVAL.
        if (call.file_offset as u64).saturating_add(size as u64) > i64::MAX as u64 {
            return Err(Error::os(
                Errno::INVAL.raw_os_error(),
                "the file range ends past the largest file offset",
            ));
        }
        if call.buffer == 0 {
            return Err(Error::new(ErrorKind::InvalidValue, "the buffer is NULL"));
        }
        let buffer_offset = usize::try_from(call.buffer_offset)
            .map_err(|_| Error::os(Errno::INVAL.raw_os_error(), "buffer offset out of range"))?;
        let probe = if first_byte_inside { size.max(1) } else { size };
        let (mut memory, registered, buffer_guard) =
            self.buffer_view(call.buffer, buffer_offset, probe)?;
        if probe > size {
            memory = memory
                .slice(0, size)
                .expect("an empty range lies inside any range");
        }
        let settings = session.settings.current();
        let mut prepared = Prepared {
            request: OwnedRequest {
                op: call.op,
                file,
                memory,
                file_offset: call.file_offset as u64,
                append: false,
                registered_buffer: registered,
                compat: settings.compat_mode(&session.env),
                settings,
                env: session.env,
                doorbell: None,
                stream_ordered: false,
                file_stamp: None,
            },
            _file_guard: file_guard,
            _buffer_guard: buffer_guard,
            answer: None,
        };
        let req = &mut prepared.request;
        // The application's descriptor decides, at this moment: closed, reused for another file
        // or not open for this direction is EBADF, as `pread`/`pwrite` on it would answer.
        let caller = match req.file.check_caller(call.op) {
            Ok(caller) => caller,
            Err(e) => {
                prepared.answer = Some(Err(e));
                return Ok(prepared);
            }
        };
        req.append = call.op == IoOp::Write && caller.append;
        req.file_stamp = Some(caller.stamp);
        if size == 0 {
            prepared.answer = Some(Ok(0));
            return Ok(prepared);
        }
        // A read that starts at or past the end of a regular file reads nothing, whatever its
        // alignment: no backend is asked (a direct-only driver would otherwise refuse an
        // unaligned offset at end of file, which readers that step by bytes read reach).
        // Otherwise nothing past the end of the file's last block is asked for: the kernel's
        // O_DIRECT read zero-fills the caller's buffer for the blocks past the end of file
        // beyond the bytes it reports. Clipped here, the buffer past the bytes read keeps what
        // it held, except that the direct path may zero the rest of the file's last block.
        // A size of 0 says nothing (procfs and sysfs files report 0 and have content): such
        // reads go to the backends whole.
        if let (IoOp::Read, Some(len @ 1..)) = (call.op, caller.size) {
            let offset = call.file_offset as u64;
            if offset >= len {
                prepared.answer = Some(Ok(0));
                return Ok(prepared);
            }
            let align = u64::from(req.file.dio_align().offset.max(1));
            let room = (len - offset).div_ceil(align).saturating_mul(align);
            let room = usize::try_from(room).unwrap_or(usize::MAX);
            if room < req.memory.len() {
                req.memory = req
                    .memory
                    .slice(0, room)
                    .expect("a clipped size lies inside the checked range");
            }
        }
        Ok(prepared)
    }

    /// Resolve the device range of a request: a registered buffer (exact base), else a temporary
    /// view from the runtime's pointer query, which also serves interior pointers. Answers the
    /// range, whether it is registered, and the registered buffer's in-flight guard.
    fn buffer_view(
        &self,
        base: usize,
        offset: usize,
        size: usize,
    ) -> Result<(DeviceRange, bool, Option<BufferGuard>)> {
        let past_end = || {
            Error::new(
                ErrorKind::InvalidValue,
                "the request runs past the end of the buffer",
            )
        };
        let end = offset.checked_add(size).ok_or_else(past_end)?;
        // Counted under the table's lock, as files are in `io`.
        let registered = self
            .buffers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&base)
            .map(|buf| {
                buf.in_flight.fetch_add(1, Ordering::AcqRel);
                BufferGuard(Arc::clone(buf))
            });
        if let Some(guard) = registered {
            let range = guard.0.range.slice(offset, size).ok_or_else(past_end)?;
            return Ok((range, true, Some(guard)));
        }
        let whole =
            DeviceRange::check(&self.runtime, base, end).map_err(|refusal| match refusal {
                Refusal::Query(e) => Error::hip(&e, format!("querying pointer {base:#x}")),
                Refusal::NotDevice(kind) | Refusal::PastEnd(kind @ MemoryKind::Managed) => {
                    not_device_memory(base, kind)
                }
                Refusal::PastEnd(_) => past_end(),
            })?;
        if whole.kind() != MemoryKind::Device {
            return Err(not_device_memory(base, whole.kind()));
        }
        let range = whole
            .slice(offset, size)
            .expect("offset + size is the checked length");
        Ok((range, false, None))
    }
}

/// `read` or `write`, as log lines name an operation.
pub(crate) fn op_name(op: IoOp) -> &'static str {
    match op {
        IoOp::Read => "read",
        IoOp::Write => "write",
    }
}

/// The INFO line of an opened driver: platform, backends in offer order, the settings in force.
fn log_open(session: &Session, env: &EnvConfig) {
    if !log::log_enabled!(log::Level::Info) {
        return;
    }
    let info = session.runtime.info();
    let backends: Vec<String> = session
        .registry
        .paths()
        .iter()
        .map(|(name, path)| format!("{name} ({})", path.name()))
        .collect();
    let s = session.settings.current();
    let compat = s.compat_mode(env);
    log::info!(
        "driver open: platform {:?} (runtime version {}, {}), backends in offer order: {}; \
         compat mode allowed {} forced {}, io threads {}, chunk {} KiB, inline up to {} KiB, \
         pinned bound {} KiB, largest transfer {} KiB, direct IO {:?}, event wait {:?}, \
         queue depth {}, stats {}, log level {}",
        info.platform,
        info.runtime_version,
        info.library,
        if backends.is_empty() {
            "none".to_string()
        } else {
            backends.join(", ")
        },
        compat.allowed,
        compat.forced,
        s.io_threads(),
        s.chunk_bytes() / 1024,
        s.min_io_threshold_kb,
        s.max_pinned_mem_size_kb,
        s.max_direct_io_size_kb,
        s.direct_io,
        s.event_wait,
        s.io_queue_depth,
        session.stats.enabled(),
        s.logging_level,
    );
}

fn not_device_memory(ptr: usize, kind: MemoryKind) -> Error {
    Error::new(
        ErrorKind::HipMemoryTypeInvalid,
        format!("{ptr:#x} is {kind:?} memory, not device memory"),
    )
}

/// Keeps a registered buffer counted as in flight for the length of a request.
#[derive(Debug)]
pub(crate) struct BufferGuard(Arc<RegisteredBuffer>);

/// A validated request that owns what it refers to: the file and buffer stay counted as in
/// flight (so neither can be deregistered) until it is dropped. The synchronous path builds one
/// per call; a batch keeps one per entry until the entry is reaped.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// The request to offer the backends.
    pub(crate) request: OwnedRequest,
    _file_guard: FileInFlight,
    _buffer_guard: Option<BufferGuard>,
    /// The answer, when it is known without moving bytes.
    pub(crate) answer: Option<Result<usize>>,
}

impl Drop for BufferGuard {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipfile_hip::Platform;

    #[test]
    fn integer_keys_spread_page_aligned_addresses_and_sequential_ids_over_buckets() {
        let hash = |n: u64| IntegerKeys.hash_one(n);
        // hashbrown picks the bucket from the low bits and a tag from the top 7.
        for keys in [
            (0..1024u64)
                .map(|i| 0x7f00_0000_0000 + i * 4096)
                .collect::<Vec<_>>(),
            (0..1024u64)
                .map(|i| 0x7f00_0000_0000 + i * (2 << 20))
                .collect(),
            (1..=1024u64).collect(),
        ] {
            let buckets: std::collections::HashSet<u64> =
                keys.iter().map(|&k| hash(k) & 1023).collect();
            let tags: std::collections::HashSet<u64> =
                keys.iter().map(|&k| hash(k) >> 57).collect();
            assert!(buckets.len() >= 600, "{} buckets of 1024", buckets.len());
            assert_eq!(tags.len(), 128, "every tag is used");
        }
        let mut table: HashMap<usize, usize, IntegerKeys> = HashMap::default();
        for i in 0..10_000usize {
            table.insert(i * 4096, i);
        }
        assert!((0..10_000usize).all(|i| table.get(&(i * 4096)) == Some(&i)));
        assert_eq!(table.get(&1), None);
    }

    #[test]
    fn driver_options_take_every_default_from_one_environment() {
        let pairs = [
            ("HIPFILE_PLATFORM", "sim"),
            ("HIPFILE_SIM_DEVICES", "3"),
            ("HIPFILE_BACKENDS", " b ,a"),
            ("HIPFILE_STATS_LEVEL", "true"),
            ("HIPFILE_IO_THREADS", "3"),
        ];
        let environment = Environment::from_lookup(|name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        });
        let options = DriverOptions::from_environment(&environment);
        assert_eq!(options.selection.as_deref(), Some(" b ,a"));
        assert_eq!(options.env.stats_level, Some(1));
        assert_eq!(options.settings.max_io_threads, 3);
        assert!(options.backends.is_none());
        let runtime = (options.runtime)().expect("the simulated platform opens");
        assert_eq!(runtime.info().platform, Platform::Sim);
        assert_eq!(runtime.device_count().unwrap(), 3);

        let unknown = Environment::from_lookup(|name| {
            (name == "HIPFILE_PLATFORM").then(|| "quantum".to_string())
        });
        let e = (DriverOptions::from_environment(&unknown).runtime)().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DeviceNotFound);
        assert!(e.context().contains("quantum"), "{e}");
    }
}
