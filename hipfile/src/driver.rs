//! The driver: what registers files and memory, and sets up batches and stream-ordered IO.
//!
//! A [`Driver`] holds one reference on a core driver's use count (one `hipFileDriverOpen`).
//! That reference is shared, through an `Arc`, with every [`FileHandle`] and
//! [`RegisteredBuffer`] made from the driver, and released (`hipFileDriverClose`) when the last of
//! them drops: dropping the `Driver` value while a handle lives closes nothing.

use std::borrow::Borrow;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use hipfile_core::stats_server::StatsService;
use hipfile_core::{DriverOptions, Error, ErrorKind, IoOp, Result, StatsSnapshot};
use hipfile_hip::StreamRef;

use crate::batch::Batch;
use crate::call::Place;
use crate::file::FileHandle;
use crate::memory::{AsDevice, AsDeviceMut, DeviceBuffer, RegisteredBuffer};
use crate::open::OpenReference;
use crate::stream::{OwningStreamOp, StreamIo};

/// An open driver: registers files and device memory, and allocates device memory on its GPU
/// runtime.
///
/// The driver stays open while this value or anything made from it (a [`FileHandle`], a
/// [`RegisteredBuffer`]) lives; the last of them to drop closes it. This is the facade's
/// driver; the state machine it drives is [`hipfile_core::Driver`], reached through
/// [`Driver::core`].
///
/// ```
/// use std::sync::Arc;
/// use hipfile::{Driver, DriverOptions};
/// use hipfile_hip::sim::SimRuntime;
///
/// let gpu = Arc::new(SimRuntime::default());
/// let driver = Driver::with_options(DriverOptions::with_runtime(gpu))?;
/// let core = Arc::clone(driver.core());
/// let dir = tempfile::tempdir().unwrap();
/// let file = std::fs::File::create(dir.path().join("data")).unwrap();
/// let handle = driver.register_file(&file)?;
///
/// drop(driver);
/// assert_eq!(core.use_count(), 1, "the handle keeps the driver open");
/// drop(handle);
/// assert_eq!(core.use_count(), 0, "the last one out closed it");
/// # Ok::<(), hipfile::Error>(())
/// ```
#[derive(Debug)]
pub struct Driver {
    reference: Arc<OpenReference>,
}

impl Driver {
    /// Open (or join) the process-wide driver, shared with C callers of `libhipfile.so`: one
    /// more reference on its use count, as `hipFileDriverOpen`.
    pub fn open() -> Result<Driver> {
        Driver::join(Arc::clone(crate::global()))
    }

    /// Open a private driver built from `options`; when they name no backends, the backends of
    /// this build ([`backends`](crate::backends)) serve it.
    pub fn with_options(mut options: DriverOptions) -> Result<Driver> {
        if options.backends.is_none() {
            options.backends = Some(crate::backends());
        }
        Driver::join(Arc::new(hipfile_core::Driver::new(options)))
    }

    fn join(core: Arc<hipfile_core::Driver>) -> Result<Driver> {
        core.open()?;
        Ok(Driver {
            reference: Arc::new(OpenReference { core }),
        })
    }

    /// The core driver (state machine, settings, session).
    pub fn core(&self) -> &Arc<hipfile_core::Driver> {
        &self.reference.core
    }

    /// References held on the driver (`hipFileUseCount`). A `Driver` and everything made from it
    /// hold one together.
    pub fn use_count(&self) -> usize {
        self.core().use_count()
    }

    /// The backends requests are offered to, in order.
    pub fn backends(&self) -> Vec<&'static str> {
        self.core()
            .session()
            .map(|s| s.registry().names())
            .unwrap_or_default()
    }

    /// Name and path (direct or staged) of each backend, in offer order; empty when the driver
    /// is not open.
    pub fn backend_paths(&self) -> Vec<(&'static str, hipfile_core::IoPath)> {
        self.core()
            .session()
            .map(|s| s.registry().paths())
            .unwrap_or_default()
    }

    /// What each backend holds while the driver is open (pinned host memory, IO threads), in
    /// offer order; empty when the driver is not open.
    pub fn resources(&self) -> Vec<(&'static str, hipfile_core::Resources)> {
        self.core()
            .session()
            .map(|s| s.registry().resources())
            .unwrap_or_default()
    }

    /// Wait until what the backends do in the background for earlier requests is done: the
    /// staged engine pins the cached windows of registered files that reads touched, and the
    /// reads after this one copy them straight out of the page cache (see
    /// [`hipfile_core::Settings::page_cache_pins_kb`]). Reads never wait for it; benchmarks and
    /// tests that measure or check the pinned path do.
    pub fn settle(&self) {
        if let Some(s) = self.core().session() {
            s.registry().settle();
        }
    }

    /// Bytes of page cache the backends keep pinned for reads copied straight out of it (see
    /// [`Driver::settle`]); 0 when the driver is not open.
    pub fn page_cache_pinned_bytes(&self) -> usize {
        self.resources()
            .iter()
            .map(|(_, r)| r.page_cache_pinned_bytes)
            .sum()
    }

    /// Allocate `len` bytes of device memory on the current device of the driver's GPU runtime.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use hipfile::{Driver, DriverOptions};
    /// use hipfile_hip::{sim::SimRuntime, GpuRuntime, MemoryKind};
    ///
    /// let gpu: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
    /// let driver = Driver::with_options(DriverOptions::with_runtime(gpu.clone()))?;
    /// let buf = driver.alloc(4096)?;
    /// assert_eq!(gpu.pointer_info(buf.ptr()).unwrap().kind, MemoryKind::Device);
    /// # Ok::<(), hipfile::Error>(())
    /// ```
    pub fn alloc(&self, len: usize) -> Result<DeviceBuffer> {
        let session = self
            .core()
            .session()
            .ok_or_else(|| Error::new(ErrorKind::DriverNotInitialized, "the driver is not open"))?;
        DeviceBuffer::new(Arc::clone(session.runtime()), len)
            .map_err(|e| Error::hip(&e, format!("allocating {len} bytes of device memory")))
    }

    /// Register an open file. The file must stay open while the handle lives.
    pub fn register_file(&self, file: &impl AsRawFd) -> Result<FileHandle> {
        self.register_fd(file.as_raw_fd())
    }

    /// Register a raw descriptor. It must stay open while the handle lives.
    pub fn register_fd(&self, fd: RawFd) -> Result<FileHandle> {
        let id = self.core().handle_register(fd)?;
        Ok(FileHandle::new(Arc::clone(&self.reference), id))
    }

    /// Register an open file whose requests are served under `policy` from the start (see
    /// [`FileHandle::set_policy`]).
    pub fn register_file_with_policy(
        &self,
        file: &impl AsRawFd,
        policy: crate::IoPolicy,
    ) -> Result<FileHandle> {
        let id = self
            .core()
            .handle_register_with_policy(file.as_raw_fd(), Some(policy))?;
        Ok(FileHandle::new(Arc::clone(&self.reference), id))
    }

    /// Allow only `mechanisms` as direct (P2P) paths, from the next request on: the fastpath
    /// declines when the platform's P2P driver is not among them, and each request then falls
    /// back or fails closed as its file handle's policy says.
    pub fn set_p2p_mechanisms(&self, mechanisms: crate::P2pMechanisms) {
        self.core().set_p2p_mechanisms(mechanisms);
    }

    /// The direct (P2P) mechanisms the driver may use now (all by default).
    pub fn p2p_mechanisms(&self) -> crate::P2pMechanisms {
        self.core().p2p_mechanisms()
    }

    /// Register device memory (`hipFileBufRegister`): an owned [`DeviceBuffer`], a
    /// `&mut DeviceBuffer`, or a [`DeviceSliceMut`](crate::DeviceSliceMut). The registration
    /// holds the memory until it is dropped or [`into_inner`](RegisteredBuffer::into_inner)
    /// gives it back. Memory the runtime does not report as device memory is
    /// [`ErrorKind::HipMemoryTypeInvalid`] (host memory registers only through the core driver's
    /// `buf_register`, and only with the setting `allow_system_memory`); memory already
    /// registered is
    /// [`ErrorKind::MemoryAlreadyRegistered`].
    pub fn register_buffer<M: AsDevice>(&self, memory: M) -> Result<RegisteredBuffer<M>> {
        RegisteredBuffer::register(Arc::clone(&self.reference), memory)
    }

    /// Set up a batch of up to `capacity` requests in flight at once (at most the settings'
    /// `max_batch_io_size`, 128 by default), lend it to `f`, and destroy it when `f` returns:
    /// requests not started are cancelled, the others waited for. The files and memory of the
    /// requests are borrowed for the whole call. See [`Batch`].
    pub fn batch<'buf, R>(
        &self,
        capacity: usize,
        f: impl FnOnce(&mut Batch<'buf>) -> R,
    ) -> Result<R> {
        Batch::scope(Arc::clone(&self.reference), capacity, f)
    }

    /// Queue reads and writes on `stream` through the [`StreamIo`] lent to `f`: each runs when
    /// the stream reaches it, and the stream's later work runs once it ended. Returns when every
    /// op queued through it has ended; the files and memory of the ops are borrowed until then.
    /// See [`StreamIo`].
    pub fn on_stream<'buf, 's, R>(
        &self,
        stream: &'s StreamRef<'s>,
        f: impl FnOnce(&mut StreamIo<'buf, 's>) -> R,
    ) -> R {
        StreamIo::scope(Arc::clone(&self.reference), stream, f)
    }

    /// Queue on `stream`, from the calling thread, a read of `file` at `file_offset` into all of
    /// `dst`, and return once it is queued: it runs when the stream reaches it, and the stream's
    /// later work runs once it ended. The answer owns `file` and `dst` until the op ended and
    /// waits for it when dropped (see [`OwningStreamOp`]): for callers whose memory is owned
    /// rather than borrowed, and who must not wait where they queue.
    pub fn read_on_stream<F, M>(
        &self,
        stream: &StreamRef<'_>,
        file: F,
        mut dst: M,
        file_offset: u64,
    ) -> Result<OwningStreamOp<F, M>>
    where
        F: Borrow<FileHandle> + 'static,
        M: AsDeviceMut + 'static,
    {
        let place = Place::of_mut(&mut dst);
        OwningStreamOp::queue(
            self.core(),
            stream,
            IoOp::Read,
            file,
            dst,
            place,
            file_offset,
        )
    }

    /// [`Driver::read_on_stream`] for a write of all of `src` to `file` at `file_offset`.
    pub fn write_on_stream<F, M>(
        &self,
        stream: &StreamRef<'_>,
        file: F,
        src: M,
        file_offset: u64,
    ) -> Result<OwningStreamOp<F, M>>
    where
        F: Borrow<FileHandle> + 'static,
        M: AsDevice + 'static,
    {
        let place = Place::of(&src);
        OwningStreamOp::queue(
            self.core(),
            stream,
            IoOp::Write,
            file,
            src,
            place,
            file_offset,
        )
    }

    /// Register `stream` with `flags` (`hipfile_core::stream::FIXED_*`,
    /// `PAGE_ALIGNED_INPUTS`): arguments its flags fix are read when an op is queued, the others
    /// when the stream reaches the op. Registering twice, or unknown flags, is `InvalidValue`.
    pub fn register_stream(&self, stream: &StreamRef<'_>, flags: u32) -> Result<()> {
        stream
            .device()
            .map_err(|e| Error::hip(&e, "asking the stream's device"))?;
        self.core().stream_register(stream.raw(), flags)
    }

    /// Forget a registered stream; ops queued on it keep the flags they were queued with.
    pub fn deregister_stream(&self, stream: &StreamRef<'_>) -> Result<()> {
        self.core().stream_deregister(stream.raw())
    }

    /// Counters of the open driver: which backend and path ran each request, declines by reason,
    /// failovers (counting from `HIPFILE_STATS_LEVEL=1`, or `hipFileParamProfileStats`; see
    /// [`hipfile_core::Stats`] for what each level adds).
    pub fn stats(&self) -> Option<StatsSnapshot> {
        self.core().session().map(|s| s.stats_snapshot())
    }

    /// Where the open driver serves its counters to `hipfile stats`, or why it does not (an
    /// address another process holds, no private runtime directory): the facts its log warns
    /// of when it opens.
    pub fn stats_service(&self) -> Option<StatsService> {
        self.core().session().map(|s| s.stats_service())
    }
}
