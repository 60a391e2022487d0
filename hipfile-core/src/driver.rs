//! The driver: its state machine (closed with staged settings, or open with a [`Session`] and a
//! use count) and the front of every call, which it counts and hands to the module that owns
//! the work: registration to the session's tables ([`crate::session`]), reads and writes through
//! validation ([`crate::validate`]) to the registry, batches to [`crate::batch`], stream-ordered
//! ops to [`crate::stream`].
//!
//! Lock order: the state mutex first, then a session's file table, then its buffer table; IO
//! holds no lock while bytes move (it holds `Arc`s and in-flight guards).
//!
//! Semantics follow upstream hipFile: `handle_register` opens the driver implicitly (0 -> 1) only
//! after its own checks pass; `buf_register` opens it before its checks, so a failed buffer
//! registration still leaves the driver open; IO on a closed driver is `EINVAL` and opens nothing;
//! closing to zero forgets every file and buffer.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use hipfile_hip::{is_host, HipErrorCode, IoMemory, MemoryKind, Refusal};
use rustix::io::Errno;

use crate::batch::{self, BatchEntry, BatchEvent, BatchId, Batches};
use crate::config::{EnvConfig, Settings};
use crate::cufile_config;
use crate::error::{Error, ErrorKind, Result};
use crate::file::RegisteredFile;
use crate::options::DriverOptions;
use crate::policy::{IoPolicy, P2pMechanisms};
use crate::session::{FileHandleId, Session};
use crate::snapshot::ApiOp;
use crate::stats::Channel;
use crate::stats_server;
use crate::stream::{self, AsyncCall, StreamTable};
use crate::validate::{self, not_device_memory, IoCall};

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
    batches: Batches,
    streams: StreamTable,
    /// Why every open fails: cuFile's configuration file could not be used.
    refusal: Option<Error>,
}

impl Driver {
    /// A closed driver built from `options`.
    pub fn new(options: DriverOptions) -> Self {
        let (staged, refusal) = match &options.cufile_json {
            Some(source) => cufile_config::starting_settings(source, &options.settings),
            None => (options.settings.clone(), None),
        };
        Driver {
            options,
            state: Mutex::new(State::Closed { staged }),
            next_handle: AtomicU64::new(1),
            batches: Batches::default(),
            streams: StreamTable::default(),
            refusal,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
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
                if let Some(e) = &self.refusal {
                    log::warn!("the driver failed to open: {e}");
                    return Err(e.clone());
                }
                let session = Session::start(&self.options, staged).inspect_err(|e| {
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
                (self.batches.take_all(), session)
            }
        };
        drop(state);
        session.stop_stats_server();
        batch::shut_down(batches);
        stats_server::report_final(&*session, session.stats_service());
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
                let mut next = (*session.settings()).clone();
                change(&mut next);
                next.check()?;
                session.live_settings().update(|s| *s = next);
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
            State::Open { session, .. } => (*session.settings()).clone(),
        }
    }

    /// `hipFileHandleRegister`: checks the descriptor, then opens the driver if needed. The
    /// handle starts with the settings' [`Settings::default_io_policy`].
    pub fn handle_register(&self, fd: RawFd) -> Result<FileHandleId> {
        self.handle_register_with_policy(fd, None)
    }

    /// [`Driver::handle_register`] with the handle's [`IoPolicy`] (`None`: the settings'
    /// default).
    pub fn handle_register_with_policy(
        &self,
        fd: RawFd,
        policy: Option<IoPolicy>,
    ) -> Result<FileHandleId> {
        self.counted(
            ApiOp::HandleRegister,
            self.handle_register_counted(fd, policy),
        )
        .inspect_err(|e| {
            log::warn!("registering descriptor {fd} failed: {e}");
        })
    }

    /// Set the [`IoPolicy`] of a registered file handle; requests submitted from now on are
    /// served under it. An unknown handle is `HandleNotRegistered`, a closed driver
    /// `DriverNotInitialized`.
    pub fn handle_set_policy(&self, handle: FileHandleId, policy: IoPolicy) -> Result<()> {
        self.file(handle)?.set_io_policy(policy);
        Ok(())
    }

    /// The [`IoPolicy`] of a registered file handle.
    pub fn handle_policy(&self, handle: FileHandleId) -> Result<IoPolicy> {
        Ok(self.file(handle)?.io_policy())
    }

    /// Set the direct (P2P) mechanisms the driver may use ([`Settings::p2p_mechanisms`]): on
    /// the open driver for requests validated from now on, on a closed one for its next open.
    /// (cuFile's `cuFileDriverSetP2PFlags` converts its flags with
    /// [`P2pMechanisms::from_cufile_flags`].)
    pub fn set_p2p_mechanisms(&self, mechanisms: P2pMechanisms) {
        let change = |s: &mut Settings| s.p2p_mechanisms = mechanisms;
        match &mut *self.lock() {
            State::Closed { staged } => change(staged),
            State::Open { session, .. } => session.live_settings().update(change),
        }
        log::info!("direct mechanisms allowed: {mechanisms}");
    }

    /// The direct (P2P) mechanisms the driver may use now.
    pub fn p2p_mechanisms(&self) -> P2pMechanisms {
        self.settings().p2p_mechanisms
    }

    /// Count API call `op` and its `result` with the open driver's counters (none when it is
    /// closed); the result passes through.
    pub(crate) fn counted<T>(&self, op: ApiOp, result: Result<T>) -> Result<T> {
        if let Some(session) = self.session() {
            session.stats().api(op, result.is_ok());
        }
        result
    }

    fn handle_register_counted(&self, fd: RawFd, policy: Option<IoPolicy>) -> Result<FileHandleId> {
        let file = RegisteredFile::open(fd)?;
        file.set_io_policy(policy.unwrap_or_else(|| self.settings().default_io_policy));
        let mut state = self.lock();
        let session = self.open_with(&mut state, false)?;
        session.add_file(fd, file, || {
            self.next_handle.fetch_add(1, Ordering::Relaxed)
        })
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
        let (fd, in_flight) = session.remove_file(handle)?;
        if in_flight > 0 {
            log::info!(
                "file handle of descriptor {fd} deregistered with {in_flight} request(s) in \
                 flight: they run to their end, then its descriptors are closed"
            );
        }
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
            session.stats().buf_registered(device, len, result.is_ok());
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
        // Host memory (pinned, registered or pageable) registers only where the settings allow
        // it, as cuFile registers it; the length of pageable memory is the caller's word.
        let allow_host = session.settings().allow_system_memory;
        let refused = |kind| is_host(kind) && !allow_host;
        let range =
            IoMemory::check(session.runtime(), ptr, len).map_err(|refusal| match refusal {
                Refusal::Query(e) if e.code() == HipErrorCode::INVALID_VALUE => Error::new(
                    ErrorKind::InvalidValue,
                    format!("the runtime does not know {ptr:#x}: {e}"),
                ),
                Refusal::Query(e) => Error::hip(&e, format!("querying pointer {ptr:#x}")),
                Refusal::NotDevice(kind) | Refusal::NotHost(kind) => not_device_memory(ptr, kind),
                Refusal::PastEnd(kind) if kind == MemoryKind::Managed || refused(kind) => {
                    not_device_memory(ptr, kind)
                }
                Refusal::PastEnd(_) => Error::new(
                    ErrorKind::HipPointerRangeError,
                    format!("{len} bytes at {ptr:#x} run past the end of the allocation"),
                ),
            })?;
        if range.kind() == MemoryKind::Managed || refused(range.kind()) {
            return Err(not_device_memory(ptr, range.kind()));
        }
        *device = Some(range.device());
        session.add_buffer(ptr, range, flags)
    }

    /// Whether `ptr` is the base of a buffer registered with the open driver.
    pub fn buffer_registered(&self, ptr: usize) -> bool {
        self.session().is_some_and(|s| s.has_buffer(ptr))
    }

    /// `hipFileBufDeregister`.
    pub fn buf_deregister(&self, ptr: usize) -> Result<()> {
        let mut freed = None;
        let result = self.buf_deregister_counted(ptr, &mut freed);
        if let Some(session) = self.session() {
            let (device, len) = freed.unzip();
            session
                .stats()
                .buf_deregistered(device, len.unwrap_or(0), result.is_ok());
        }
        result
    }

    fn buf_deregister_counted(&self, ptr: usize, freed: &mut Option<(i32, usize)>) -> Result<()> {
        let session = self
            .session()
            .ok_or_else(|| Error::new(ErrorKind::DriverClosing, "the driver is not open"))?;
        if session.buffer_busy(ptr) {
            // Batch entries reported as timed out hold their memory until they are looked at
            // again: look now, before the buffers' lock (a submission takes the two the other
            // way round).
            self.batches.release_finished();
        }
        *freed = Some(session.remove_buffer(ptr)?);
        Ok(())
    }

    /// `hipFileRead` / `hipFileWrite`: validate, build the request, dispatch.
    pub fn io(&self, call: IoCall) -> Result<usize> {
        self.run_io(&call).inspect_err(|e| {
            log::warn!(
                "{} of {} bytes at file offset {} failed: {e}",
                call.op.name(),
                call.size,
                call.file_offset
            );
        })
    }

    fn run_io(&self, call: &IoCall) -> Result<usize> {
        let session = self
            .session()
            .ok_or_else(|| Error::os(Errno::INVAL.raw_os_error(), "the driver is not open"))?;
        let start = session.stats().now_us();
        let prepared = match validate::prepare(&session, call) {
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
        let outcome = session.registry().dispatch(&request);
        session.count_io(call.op, Channel::Sync, Some(&request), start, &outcome);
        outcome.map(|d| d.bytes)
    }
    /// `hipFileBatchIOSetUp`: a batch for up to `capacity` entries (at most the settings'
    /// `max_batch_io_size`). Needs no open driver and changes no use count.
    pub fn batch_setup(&self, capacity: usize) -> Result<BatchId> {
        let limit = self.settings().max_batch_io_size;
        self.counted(ApiOp::BatchSetup, self.batches.setup(capacity, limit))
    }

    /// `hipFileBatchIOSubmit`: validate every entry, then queue them all. A submission that does
    /// not fit in what the batch has room for is `BatchFull`; an invalid entry is
    /// `InvalidValue` (an unregistered file handle `HandleNotRegistered`) and nothing is queued.
    pub fn batch_submit(&self, id: BatchId, entries: &[BatchEntry]) -> Result<()> {
        self.batches.submit(id, self.session().as_ref(), entries)
    }

    /// `hipFileBatchIOGetStatus`: wait until at least `min` entries are terminal (all of them,
    /// when fewer are outstanding), or until `timeout` passes (`None`: no limit), then answer up
    /// to `max` terminal entries, in submission order, and forget them. With no entry
    /// outstanding it answers none at once.
    pub fn batch_status(
        &self,
        id: BatchId,
        min: usize,
        max: usize,
        timeout: Option<Duration>,
    ) -> Result<Vec<BatchEvent>> {
        let result = self.batches.status(id, min, max, timeout);
        self.counted(ApiOp::BatchStatus, result)
    }

    /// `hipFileBatchIOCancel`: withdraw the entries no thread has started (they report
    /// canceled) and wait until no entry of the batch runs.
    pub fn batch_cancel(&self, id: BatchId) -> Result<()> {
        let result = self.batches.cancel(id);
        self.counted(ApiOp::BatchCancel, result)
    }

    /// `hipFileBatchIODestroy`: cancel, wait, forget. An unknown batch is `InvalidValue` (the
    /// C function ignores it).
    pub fn batch_destroy(&self, id: BatchId) -> Result<()> {
        // The table's lock goes before the count takes the driver's.
        let removed = self.batches.remove(id);
        self.counted(ApiOp::BatchDestroy, removed)?.cancel();
        Ok(())
    }

    /// How many more entries `id` has room for now.
    pub fn batch_room(&self, id: BatchId) -> Result<usize> {
        self.batches.room(id)
    }

    /// Batches set up now.
    pub fn batch_count(&self) -> usize {
        self.batches.count()
    }

    /// `hipFileStreamRegister`: remember `flags` for the stream whose raw handle is `stream`.
    /// Flags outside [`stream::FLAGS_MASK`] and a stream already registered are invalid values.
    pub fn stream_register(&self, stream: usize, flags: u32) -> Result<()> {
        self.counted(ApiOp::StreamRegister, self.streams.register(stream, flags))
    }

    /// `hipFileStreamDeregister`: forget the stream. Ops already queued on it keep the flags
    /// they were submitted with. An unknown stream is an invalid value.
    pub fn stream_deregister(&self, stream: usize) -> Result<()> {
        let result = self.streams.deregister(stream);
        self.counted(ApiOp::StreamDeregister, result)
    }

    /// The flags of a stream: its registration's, or 0 for a stream never registered (upstream
    /// treats it as registered with no flags).
    pub fn stream_flags(&self, stream: usize) -> u32 {
        self.streams.flags(stream)
    }

    /// The open session for an async op. A closed driver is opened (its use count becomes 1) and
    /// the op refused as an invalid value: cuFile's behaviour, which upstream mimics.
    pub fn async_session(&self) -> Result<Arc<Session>> {
        match self.session() {
            Some(session) => Ok(session),
            None => {
                self.open_with(&mut self.lock(), false)?;
                Err(stream::refused_while_closed())
            }
        }
    }

    /// `hipFileReadAsync` / `hipFileWriteAsync` on an open `session`: validate with the values
    /// the caller's slots hold now, write 0 as the result, and queue the op on its stream. An
    /// op of 0 bytes queues nothing. Returns once the op is queued; see [`crate::stream`].
    pub fn submit_async(&self, session: &Arc<Session>, call: AsyncCall<'_>) -> Result<()> {
        let flags = self.stream_flags(call.stream.raw());
        stream::submit(session, flags, call)
    }
}

/// The INFO line of an opened driver: platform, backends in offer order, the settings in force.
fn log_open(session: &Session, env: &EnvConfig) {
    if !log::log_enabled!(log::Level::Info) {
        return;
    }
    let info = session.runtime().info();
    let backends: Vec<String> = session
        .registry()
        .paths()
        .iter()
        .map(|(name, path)| format!("{name} ({})", path.name()))
        .collect();
    let s = session.settings();
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
        session.stats().enabled(),
        s.logging_level,
    );
}
