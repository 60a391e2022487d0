//! What the batch tests share: a staged test backend that serves every request in every feature
//! row ([`HostCopy`]), a [`FileIo`] that holds every call at a gate until the test lets it pass
//! ([`Gate`]), a backend wrapper that counts how its requests were cancelled ([`Watch`]), and
//! drivers built from them on the simulated GPU.
//!
//! With one IO worker (`io_queue_depth` 1) and a closed gate, the first entry of a batch starts
//! and stops at its first file call while every later one waits in the worker's queue: which
//! entries have started is then known exactly, and [`Watch`] says when a cancel has withdrawn
//! the others, so the gate opens only after that.

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use hipfile::{Driver, DriverOptions, Settings};
use hipfile_core::workers::{Deferred, IoWorkers};
use hipfile_core::{
    pread_full, priority, pwrite_append_full, pwrite_full, Backend, BackendContext,
    BackendDescriptor, Completion, Decline, EnvConfig, Error, FileIo, IoFailure, IoOp, IoOutcome,
    IoPath, IoRequest, PageCount, PendingIo, PosixIo, RegisteredFile, RegistryBuilder, Submit,
};
use hipfile_hip::sim::SimRuntime;
use hipfile_hip::{DeviceRange, GpuRuntime};

/// How long a test waits for something that takes microseconds before it calls it a hang.
pub const PATIENCE: Duration = Duration::from_secs(20);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

// ---------------------------------------------------------------------------------------------
// The host-copy backend

/// Name of [`HostCopy`].
pub const HOST_COPY: &str = "host-copy";

/// A staged backend through a plain host buffer and the driver's [`FileIo`]: it takes every
/// request, and runs queued ones on an elastic pool of up to `io_queue_depth` workers, from
/// which requests not yet started can be withdrawn. Registered below the built-in backends, it
/// serves what they decline (everything in a build without them).
#[derive(Debug)]
pub struct HostCopy {
    io: Arc<dyn FileIo>,
    workers: IoWorkers<Deferred>,
}

impl HostCopy {
    fn new(ctx: &BackendContext) -> hipfile_core::Result<Self> {
        let depth = usize::try_from(ctx.settings.current().io_queue_depth).unwrap_or(usize::MAX);
        Ok(HostCopy {
            io: Arc::clone(&ctx.io),
            workers: IoWorkers::start(0, depth.max(1))
                .map_err(|e| Error::from_io(&e, "starting the host-copy workers"))?,
        })
    }
}

/// One request of [`HostCopy`], owning what it needs to run on any thread.
struct CopyJob {
    op: IoOp,
    file: Arc<RegisteredFile>,
    memory: DeviceRange,
    file_offset: u64,
    append: bool,
    io: Arc<dyn FileIo>,
}

impl CopyJob {
    fn run(&self) -> IoOutcome {
        let fail = |e: io::Error, what: &str| IoFailure::new(Error::from_io(&e, what), 0);
        let copy = |e: hipfile_hip::HipError| IoFailure::new(Error::hip(&e, "copying"), 0);
        let mut host = vec![0u8; self.memory.len()];
        let fd = self.file.buffered_fd();
        match self.op {
            IoOp::Read => {
                let n = pread_full(&*self.io, fd, &mut host, self.file_offset)
                    .map_err(|e| fail(e, "reading the file"))?;
                let dst = self
                    .memory
                    .slice(0, n)
                    .expect("a read returns at most its size");
                dst.copy_from_host(&host[..n]).map_err(copy)?;
                Ok(n)
            }
            IoOp::Write => {
                self.memory.copy_to_host(&mut host).map_err(copy)?;
                if self.append {
                    pwrite_append_full(&*self.io, fd, &host)
                } else {
                    pwrite_full(&*self.io, fd, &host, self.file_offset)
                }
                .map_err(|e| fail(e, "writing the file"))?;
                Ok(host.len())
            }
        }
    }
}

impl Backend for HostCopy {
    fn name(&self) -> &'static str {
        HOST_COPY
    }

    fn accepts(&self, req: &IoRequest<'_>) -> Result<(), Decline> {
        match req.memory.device_range() {
            Some(_) => Ok(()),
            None => Err(Decline::HostMemory),
        }
    }

    fn submit(&self, req: &IoRequest<'_>, how: Submit) -> Completion {
        let Some(memory) = req.memory.device_range() else {
            let e = hipfile_core::Error::new(
                hipfile_core::ErrorKind::HipMemoryTypeInvalid,
                "host memory",
            );
            return Completion::ready(Err(hipfile_core::IoFailure::new(e, 0)));
        };
        let job = CopyJob {
            op: req.op,
            file: Arc::clone(&req.file),
            memory: memory.clone(),
            file_offset: req.file_offset,
            append: req.append,
            io: Arc::clone(&self.io),
        };
        match how {
            Submit::Wait => Completion::ready(job.run()),
            Submit::Queue => self.workers.defer(req.doorbell.as_ref(), move || job.run()),
        }
    }
}

fn host_copy(ctx: &BackendContext) -> hipfile_core::Result<Arc<dyn Backend>> {
    Ok(Arc::new(HostCopy::new(ctx)?))
}

/// The backends of this build, then [`HostCopy`] below them all: every request finds a
/// backend in every feature row, and the built-in ones serve whatever they accept.
pub fn build_and_host_copy() -> RegistryBuilder {
    let mut builder = hipfile::backends();
    builder
        .add(BackendDescriptor {
            name: HOST_COPY,
            priority: priority::FALLBACK - 1,
            path: IoPath::Staged,
            init: host_copy,
        })
        .expect("no built-in backend is called host-copy");
    builder
}

// ---------------------------------------------------------------------------------------------
// Watching cancellations

/// What a [`Watch`] saw of the cancellations of its requests.
#[derive(Debug, Default)]
pub struct Watched {
    /// Cancels that withdrew a request before it started.
    pub withdrawn: AtomicUsize,
    /// Cancels of a request that had started or finished (it runs to its end).
    pub refused: AtomicUsize,
}

impl Watched {
    /// Wait until `n` requests were withdrawn.
    pub fn wait_withdrawn(&self, n: usize) {
        let since = Instant::now();
        while self.withdrawn.load(Ordering::Acquire) < n {
            assert!(
                since.elapsed() < PATIENCE,
                "only {} of {n} requests were withdrawn",
                self.withdrawn.load(Ordering::Acquire)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

/// Watch slots, one per test that watches (a backend's `init` is a plain function, so a test
/// names its slot as a constant).
pub static WATCHED: [Watched; 8] = [const {
    Watched {
        withdrawn: AtomicUsize::new(0),
        refused: AtomicUsize::new(0),
    }
}; 8];

/// Name of [`Watch`].
pub const WATCH: &str = "watch";

/// A backend that hands every request to `inner` and counts, in its [`Watched`] slot, what
/// cancelling its pending completions did.
#[derive(Debug)]
pub struct Watch {
    inner: Arc<dyn Backend>,
    slot: &'static Watched,
}

#[derive(Debug)]
struct WatchedIo {
    inner: Completion,
    slot: &'static Watched,
}

impl PendingIo for WatchedIo {
    fn wait(self: Box<Self>) -> IoOutcome {
        self.inner.wait()
    }

    fn is_finished(&self) -> bool {
        self.inner.is_finished()
    }

    fn cancel(&self) -> bool {
        let withdrawn = self.inner.cancel();
        let counter = if withdrawn {
            &self.slot.withdrawn
        } else {
            &self.slot.refused
        };
        counter.fetch_add(1, Ordering::AcqRel);
        withdrawn
    }
}

impl Backend for Watch {
    fn name(&self) -> &'static str {
        WATCH
    }

    fn accepts(&self, req: &IoRequest<'_>) -> Result<(), Decline> {
        self.inner.accepts(req)
    }

    fn submit(&self, req: &IoRequest<'_>, how: Submit) -> Completion {
        Completion::pending(Box::new(WatchedIo {
            inner: self.inner.submit(req, how),
            slot: self.slot,
        }))
    }
}

fn watch_host_copy<const SLOT: usize>(
    ctx: &BackendContext,
) -> hipfile_core::Result<Arc<dyn Backend>> {
    Ok(Arc::new(Watch {
        inner: host_copy(ctx)?,
        slot: &WATCHED[SLOT],
    }))
}

#[cfg(feature = "fallback")]
fn watch_fallback<const SLOT: usize>(
    ctx: &BackendContext,
) -> hipfile_core::Result<Arc<dyn Backend>> {
    Ok(Arc::new(Watch {
        inner: Arc::new(hipfile_fallback::Fallback::new(ctx)?),
        slot: &WATCHED[SLOT],
    }))
}

fn only(init: fn(&BackendContext) -> hipfile_core::Result<Arc<dyn Backend>>) -> RegistryBuilder {
    let mut builder = RegistryBuilder::new();
    builder
        .add(BackendDescriptor {
            name: WATCH,
            priority: 0,
            path: IoPath::Staged,
            init,
        })
        .expect("an empty builder takes any name");
    builder
}

/// [`HostCopy`] alone, watched in slot `SLOT`.
pub fn watched_host_copy<const SLOT: usize>() -> RegistryBuilder {
    only(watch_host_copy::<SLOT>)
}

/// The staged engine of `hipfile-fallback` alone, watched in slot `SLOT`.
#[cfg(feature = "fallback")]
pub fn watched_fallback<const SLOT: usize>() -> RegistryBuilder {
    only(watch_fallback::<SLOT>)
}

// ---------------------------------------------------------------------------------------------
// The gate

#[derive(Debug, Default)]
struct GateState {
    closed: bool,
    /// Calls waiting at the closed gate now.
    held: usize,
    /// Calls that went through, or are held.
    calls: u64,
}

/// A [`FileIo`] over `pread(2)`/`pwrite(2)` whose calls wait while the gate is closed.
#[derive(Default)]
pub struct Gate {
    state: Mutex<GateState>,
    changed: Condvar,
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Gate").field("state", &self.state).finish()
    }
}

impl Gate {
    /// A gate that holds every call until [`Gate::open`].
    pub fn closed() -> Arc<Gate> {
        let gate = Gate::default();
        lock(&gate.state).closed = true;
        Arc::new(gate)
    }

    /// Let every call through, those held now included.
    pub fn open(&self) {
        lock(&self.state).closed = false;
        self.changed.notify_all();
    }

    /// A guard that opens the gate when dropped: a test that fails while calls are held
    /// unwinds through it (made inside the batch's closure) and lets them go, so the batch's
    /// end does not wait for them forever.
    pub fn open_on_drop(self: &Arc<Self>) -> OpenOnDrop {
        OpenOnDrop(Arc::clone(self))
    }

    /// File calls made so far (held ones included).
    pub fn calls(&self) -> u64 {
        lock(&self.state).calls
    }

    /// Wait until `n` calls are held at the gate.
    pub fn wait_held(&self, n: usize) {
        let mut state = lock(&self.state);
        let since = Instant::now();
        while state.held < n {
            assert!(
                since.elapsed() < PATIENCE,
                "{} of {n} calls reached the gate",
                state.held
            );
            state = self
                .changed
                .wait_timeout(state, Duration::from_millis(10))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    fn pass(&self) {
        let mut state = lock(&self.state);
        state.calls += 1;
        if state.closed {
            state.held += 1;
            self.changed.notify_all();
            while state.closed {
                state = self
                    .changed
                    .wait(state)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            state.held -= 1;
        }
    }
}

/// Opens its [`Gate`] when dropped (see [`Gate::open_on_drop`]).
#[derive(Debug)]
pub struct OpenOnDrop(Arc<Gate>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.open();
    }
}

impl FileIo for Gate {
    fn pread(&self, fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.pass();
        PosixIo.pread(fd, buf, offset)
    }

    fn pwrite(&self, fd: BorrowedFd<'_>, buf: &[u8], offset: u64) -> io::Result<usize> {
        self.pass();
        PosixIo.pwrite(fd, buf, offset)
    }

    fn pwrite_append(&self, fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
        self.pass();
        PosixIo.pwrite_append(fd, buf)
    }

    fn pread_cached(&self, fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.pass();
        PosixIo.pread_cached(fd, buf, offset)
    }

    fn cached_pages(&self, fd: BorrowedFd<'_>, offset: u64, len: u64) -> Option<PageCount> {
        PosixIo.cached_pages(fd, offset, len)
    }
}

// ---------------------------------------------------------------------------------------------
// Drivers

/// A simulated GPU and a driver of its own on it: `backends`, file IO through `io`, statistics
/// on, the environment's settings changed by `tune`.
pub fn sim_driver(
    backends: RegistryBuilder,
    io: Arc<dyn FileIo>,
    tune: impl FnOnce(&mut Settings),
) -> (Arc<SimRuntime>, Driver) {
    let sim = Arc::new(SimRuntime::default());
    let gpu: Arc<dyn GpuRuntime> = sim.clone();
    let mut options = DriverOptions {
        backends: Some(backends),
        selection: None,
        io,
        env: EnvConfig {
            stats_level: Some(1),
            ..EnvConfig::default()
        },
        ..DriverOptions::with_runtime(gpu)
    };
    tune(&mut options.settings);
    let driver = Driver::with_options(options).expect("opening a driver on the sim");
    (sim, driver)
}

/// Settings where one worker runs queued requests, one at a time.
pub fn one_worker(s: &mut Settings) {
    s.io_queue_depth = 1;
    s.max_io_threads = 1;
}
