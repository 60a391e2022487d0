//! The tables of an open driver ([`Session`]): its runtime, backends, live settings and
//! counters, the registered files and buffers, the stream engine and the statistics socket. The
//! driver opens and closes sessions; validation, batches and stream-ordered ops work on one.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, RwLock, Weak};

use hipfile_hip::{GpuRuntime, IoMemory};

use crate::backend::BackendContext;
use crate::config::{EnvConfig, LiveSettings, Settings};
use crate::error::{Error, ErrorKind, Result};
use crate::file::RegisteredFile;
use crate::io::IoOp;
use crate::options::DriverOptions;
use crate::registry::{Dispatched, Registry, RegistryBuilder};
use crate::request::IoRequest;
use crate::snapshot::StatsSnapshot;
use crate::stats::{Channel, Finished, Stats};
use crate::stats_server::{CounterSource, StatsServer, StatsService};
use crate::stream_engine::StreamEngine;

/// Opaque identity of a registered file (what C callers see as `hipFileHandle_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileHandleId(pub u64);

/// A buffer registered with the driver.
#[derive(Debug)]
pub struct RegisteredBuffer {
    range: IoMemory,
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
    pub fn range(&self) -> &IoMemory {
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
    /// Start the session of a driver built from `options` opening with `staged` settings: the
    /// runtime, the backends, the counters and, while statistics are on, their socket.
    pub(crate) fn start(options: &DriverOptions, staged: &Settings) -> Result<Arc<Session>> {
        let runtime = (options.runtime)()?;
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
            io: Arc::clone(&options.io),
            settings: Arc::clone(&settings),
            env: options.env,
        };
        let builder = match &options.backends {
            Some(b) => b.clone(),
            None => RegistryBuilder::from_inventory()?,
        };
        let registry = builder.build(&ctx, options.selection.as_deref())?;
        let devices = runtime
            .device_count()
            .ok()
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(0);
        let stats = Stats::new(
            staged.effective_stats_level(&options.env),
            &registry.paths(),
            Arc::clone(registry.routes()),
            devices,
        );
        let serve = stats.enabled();
        let session = Arc::new(Session {
            runtime,
            registry,
            settings,
            env: options.env,
            files: RwLock::new(FileTable::default()),
            buffers: RwLock::new(HashMap::default()),
            stats,
            streams: Mutex::new(None),
            stats_server: Mutex::new(None),
            stats_service: OnceLock::new(),
        });
        if serve {
            let source: Weak<dyn CounterSource> = Arc::downgrade(&session) as Weak<Session>;
            let (server, service) = StatsServer::start(source);
            *session.stats_server_slot() = server;
            let _ = session.stats_service.set(service);
        }
        Ok(session)
    }

    /// The settings requests start from, changeable while the session is open.
    pub(crate) fn live_settings(&self) -> &LiveSettings {
        &self.settings
    }

    fn stats_server_slot(&self) -> MutexGuard<'_, Option<StatsServer>> {
        self.stats_server
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Stop serving the statistics socket (the driver closed).
    pub(crate) fn stop_stats_server(&self) {
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
    /// Environment switches in force (what requests carry as [`crate::OwnedRequest::env`]).
    pub fn env(&self) -> &EnvConfig {
        &self.env
    }
    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
    /// The counters now, with each backend's mechanism and own counters.
    pub fn stats_snapshot(&self) -> StatsSnapshot {
        let mut snap = self.stats.snapshot_with(&self.registry);
        snap.p2p_mechanisms = self.settings().p2p_mechanisms.names();
        snap
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
            device: req.map(|r| r.device()),
            size: req.map_or(0, |r| r.size()),
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

    /// Add `file`, registered for the application's descriptor `fd`, under the id `next_id`
    /// issues; a descriptor already registered is refused.
    pub(crate) fn add_file(
        &self,
        fd: RawFd,
        file: RegisteredFile,
        next_id: impl FnOnce() -> u64,
    ) -> Result<FileHandleId> {
        let mut files = self.files.write().unwrap_or_else(PoisonError::into_inner);
        if files.by_fd.contains_key(&fd) {
            return Err(Error::new(
                ErrorKind::HandleAlreadyRegistered,
                format!("descriptor {fd} is already registered"),
            ));
        }
        let id = next_id();
        files.by_fd.insert(fd, id);
        files.by_id.insert(id, Arc::new(file));
        Ok(FileHandleId(id))
    }

    /// Forget the file handle `handle`, answering the application's descriptor it was registered
    /// for and how many requests are in flight on it. Those finish on the registration, whose
    /// descriptors close when the last of them ends.
    pub(crate) fn remove_file(&self, handle: FileHandleId) -> Result<(RawFd, usize)> {
        let mut files = self.files.write().unwrap_or_else(PoisonError::into_inner);
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
        let fd = file.user_fd();
        files.by_id.remove(&handle.0);
        files.by_fd.remove(&fd);
        Ok((fd, in_flight))
    }

    /// Add the device memory `range` at `ptr`, checked by the caller, as a registered buffer;
    /// a base already registered is refused.
    pub(crate) fn add_buffer(&self, ptr: usize, range: IoMemory, flags: i32) -> Result<()> {
        let mut buffers = self.buffers.write().unwrap_or_else(PoisonError::into_inner);
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

    /// Whether `ptr` is the base of a registered buffer.
    pub(crate) fn has_buffer(&self, ptr: usize) -> bool {
        self.buffers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(&ptr)
    }

    /// Whether the buffer registered at `ptr` has requests in flight.
    pub(crate) fn buffer_busy(&self, ptr: usize) -> bool {
        self.buffers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&ptr)
            .is_some_and(|b| b.in_flight.load(Ordering::Acquire) > 0)
    }

    /// Forget the buffer registered at `ptr`, answering its device and length; one with
    /// requests in flight stays.
    pub(crate) fn remove_buffer(&self, ptr: usize) -> Result<(i32, usize)> {
        let mut buffers = self.buffers.write().unwrap_or_else(PoisonError::into_inner);
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
                let freed = (b.device(), b.len());
                buffers.remove(&ptr);
                Ok(freed)
            }
        }
    }

    /// The buffer registered at exactly `base`, counted as in flight until the guard drops
    /// (counted under the table's lock, so a deregistration sees it).
    pub(crate) fn claim_buffer(&self, base: usize) -> Option<BufferGuard> {
        self.buffers
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&base)
            .map(|buf| {
                buf.in_flight.fetch_add(1, Ordering::AcqRel);
                BufferGuard(Arc::clone(buf))
            })
    }
}

impl CounterSource for Session {
    fn snapshot(&self) -> StatsSnapshot {
        self.stats_snapshot()
    }
}

/// Keeps a registered buffer counted as in flight for the length of a request.
#[derive(Debug)]
pub(crate) struct BufferGuard(Arc<RegisteredBuffer>);

impl BufferGuard {
    /// The registered memory.
    pub(crate) fn range(&self) -> &IoMemory {
        &self.0.range
    }
}

impl Drop for BufferGuard {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
