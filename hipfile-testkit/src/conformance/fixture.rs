//! The world one conformance case runs in: a simulated GPU, a driver holding only the backend
//! under test, and a temporary directory of files.

use std::fmt;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use hipfile_core::{
    BackendDescriptor, Dispatched, Driver, DriverOptions, EnvConfig, FileHandleId, FileIo, IoCall,
    IoOp, OwnedRequest, RegisteredFile, RegistryBuilder, Session, Settings, Submit, Submitted,
};
use hipfile_hip::sim::SimRuntime;
use hipfile_hip::{
    DeviceBuffer, GpuRuntime, HipError, HipErrorCode, HipResult, IoMemory, PinnedBuffer,
};
use tempfile::TempDir;

use super::{CaseMemoryKind, ConformanceConfig};
use crate::faults::LeakSnapshot;

/// The byte device buffers are filled with before an operation: any byte still holding it after
/// the operation was not written, any other byte outside the target range was written wrongly.
pub const SENTINEL: u8 = 0xA5;

/// `len` bytes of a deterministic pattern that differs with `seed` and with the position
/// `start + i` (never periodic at page or chunk sizes, so a misplaced block shows).
pub fn pattern(seed: u64, start: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| {
            let mut x = (start + i).wrapping_add(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            x ^= x >> 31;
            x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x ^= x >> 29;
            x as u8
        })
        .collect()
}

/// Compare `actual` with `expected`; on a difference, say where and how many bytes differ.
pub(crate) fn same_bytes(what: &str, expected: &[u8], actual: &[u8]) -> Result<(), String> {
    if expected.len() != actual.len() {
        return Err(format!(
            "{what}: length {} where {} was expected",
            actual.len(),
            expected.len()
        ));
    }
    if expected == actual {
        return Ok(());
    }
    let mut diffs = expected
        .iter()
        .zip(actual)
        .enumerate()
        .filter(|(_, (e, a))| e != a);
    match diffs.next() {
        None => Ok(()),
        Some((first, (e, a))) => {
            let rest = diffs.count();
            Err(format!(
                "{what}: byte {first} is {a:#04x}, expected {e:#04x} ({} bytes differ)",
                rest + 1
            ))
        }
    }
}

/// A test file: the descriptor the application holds, its path and its registration.
#[derive(Debug)]
pub struct TestFile {
    /// The application's descriptor (read-write).
    pub file: File,
    /// Where it lives.
    pub path: PathBuf,
    /// Its registration with the fixture's driver.
    pub handle: FileHandleId,
}

impl TestFile {
    /// The whole file, read with plain std IO (the oracle).
    pub fn contents(&self) -> Result<Vec<u8>, String> {
        std::fs::read(&self.path).map_err(|e| format!("reading {}: {e}", self.path.display()))
    }

    /// Replace the whole file with `bytes`, with plain std IO.
    pub fn reset(&self, bytes: &[u8]) -> Result<(), String> {
        self.file
            .set_len(bytes.len() as u64)
            .and_then(|()| self.file.write_all_at(bytes, 0))
            .map_err(|e| format!("resetting {}: {e}", self.path.display()))
    }
}

/// What requests on one registered file, submitted straight to the open driver's registry,
/// borrow: the session, the file, the settings and the environment switches in force. Built by
/// [`Fixture::requests`]; [`FileRequests::request`] makes an [`OwnedRequest`] as the driver's own
/// `io` would (no buffer registration, no append), [`FileRequests::submit`] queues it.
#[derive(Debug)]
pub struct FileRequests {
    session: Arc<Session>,
    file: Arc<RegisteredFile>,
    settings: Arc<Settings>,
    env: EnvConfig,
}

impl FileRequests {
    /// A request to move the bytes of `memory` at `file_offset`.
    pub fn request(&self, op: IoOp, memory: &IoMemory, file_offset: u64) -> OwnedRequest {
        OwnedRequest {
            op,
            file: Arc::clone(&self.file),
            memory: memory.clone(),
            file_offset,
            append: false,
            registered_buffer: false,
            settings: Arc::clone(&self.settings),
            compat: self.settings.compat_mode(&self.env),
            env: self.env,
            doorbell: None,
            stream_ordered: false,
            file_stamp: None,
        }
    }

    /// Submit `req` with [`Submit::Queue`] through the session's registry.
    pub fn submit(&self, req: &OwnedRequest) -> Result<Submitted, String> {
        self.session
            .registry()
            .submit(&req.request(), Submit::Queue)
            .map_err(|e| format!("{}: submitting failed: {e}", describe(req)))
    }

    /// Finish `submitted`, the submission of `req` ([`Submitted::finish`]).
    pub fn finish(&self, submitted: Submitted, req: &OwnedRequest) -> Result<Dispatched, String> {
        submitted
            .finish(self.session.registry(), &req.request())
            .map_err(|e| format!("{}: failed: {e}", describe(req)))
    }
}

/// `Read of N bytes at file offset F, device P`: how a failure names a request.
pub(crate) fn describe(req: &OwnedRequest) -> String {
    format!(
        "queued {:?} of {} bytes at file offset {}, device {:#x}",
        req.op,
        req.size(),
        req.file_offset,
        req.memory.ptr()
    )
}

/// A read or write that failed: the driver's error, and which request it was (what `Display`
/// and the conversion to `String`, for `?` in a case, give).
#[derive(Debug)]
pub struct IoFailure {
    /// The driver's error.
    pub error: hipfile_core::Error,
    explanation: String,
}

impl fmt::Display for IoFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.explanation)
    }
}

impl From<IoFailure> for String {
    fn from(failure: IoFailure) -> String {
        failure.explanation
    }
}

/// The memory a case reads into and writes from: device memory, or pinned host memory where
/// the suite runs on host memory ([`crate::conformance::CaseMemoryKind::PinnedHost`]). The same
/// operations either way, so each case is written once.
#[derive(Debug)]
pub enum CaseMemory {
    /// Device memory.
    Device(DeviceBuffer),
    /// Pinned host memory.
    Pinned(PinnedBuffer),
}

impl CaseMemory {
    /// First address.
    pub fn ptr(&self) -> usize {
        match self {
            CaseMemory::Device(b) => b.ptr(),
            CaseMemory::Pinned(b) => b.as_ptr() as usize,
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        match self {
            CaseMemory::Device(b) => b.len(),
            CaseMemory::Pinned(b) => b.len(),
        }
    }

    /// Whether the memory is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `len` bytes at `offset` as slice bounds, or `INVALID_VALUE` past the end.
    fn bounds(&self, offset: usize, len: usize) -> HipResult<std::ops::Range<usize>> {
        offset
            .checked_add(len)
            .filter(|&end| end <= self.len())
            .map(|end| offset..end)
            .ok_or_else(|| HipError::call("CaseMemory: past the end", HipErrorCode::INVALID_VALUE))
    }

    /// Copy `src` to `offset`.
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> HipResult<()> {
        let at = self.bounds(offset, src.len())?;
        match self {
            CaseMemory::Device(b) => b.write_at(offset, src),
            CaseMemory::Pinned(b) => {
                b.as_mut_slice()[at].copy_from_slice(src);
                Ok(())
            }
        }
    }

    /// Copy `dst.len()` bytes at `offset` into `dst`.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> HipResult<()> {
        match self {
            CaseMemory::Device(b) => b.read_at(offset, dst),
            CaseMemory::Pinned(b) => {
                let at = self.bounds(offset, dst.len())?;
                dst.copy_from_slice(&b.as_slice()[at]);
                Ok(())
            }
        }
    }

    /// Every byte `value`.
    pub fn fill(&mut self, value: u8) -> HipResult<()> {
        match self {
            CaseMemory::Device(b) => b.fill(value),
            CaseMemory::Pinned(b) => {
                b.as_mut_slice().fill(value);
                Ok(())
            }
        }
    }

    /// A copy of the whole memory.
    pub fn to_vec(&self) -> HipResult<Vec<u8>> {
        match self {
            CaseMemory::Device(b) => b.to_vec(),
            CaseMemory::Pinned(b) => Ok(b.as_slice().to_vec()),
        }
    }
}

/// One case's world. Public so backend crates can write cases of their own with the same tools.
#[derive(Debug)]
pub struct Fixture {
    sim: Option<Arc<SimRuntime>>,
    runtime: Arc<dyn GpuRuntime>,
    driver: Driver,
    backend: BackendDescriptor,
    cfg: ConformanceConfig,
    dir: TempDir,
    paths: Mutex<Vec<PathBuf>>,
    baseline: Option<LeakSnapshot>,
}

impl Fixture {
    /// The runtime under test (a fresh simulated GPU, or the real one with
    /// `HIPFILE_GPU_TESTS=1`; see [`crate::target`]) and an open driver whose registry holds only
    /// `backend`.
    pub fn new(backend: BackendDescriptor, cfg: &ConformanceConfig) -> Result<Self, String> {
        Fixture::with_io(backend, cfg, cfg.io.clone())
    }

    /// As [`Fixture::new`], with the driver's file IO primitives replaced by `io` (`None`:
    /// `pread`/`pwrite`).
    pub fn with_io(
        backend: BackendDescriptor,
        cfg: &ConformanceConfig,
        io: Option<Arc<dyn FileIo>>,
    ) -> Result<Self, String> {
        let crate::target::RuntimeUnderTest { runtime, sim } = crate::target::runtime_under_test()
            .map_err(|e| format!("opening the GPU runtime: {e}"))?;
        let mut backends = RegistryBuilder::new();
        backends
            .add(backend)
            .map_err(|e| format!("registering the backend: {e}"))?;
        let mut options = DriverOptions {
            backends: Some(backends),
            selection: None,
            env: EnvConfig {
                stats_level: Some(3),
                ..EnvConfig::cached()
            },
            ..DriverOptions::with_runtime(runtime.clone())
        };
        if let Some(io) = io {
            options.io = io;
        }
        let baseline = sim
            .as_deref()
            .map(|sim| LeakSnapshot::take(sim, &[]))
            .transpose()
            .map_err(|e| format!("counting resources: {e}"))?;
        let driver = Driver::new(options);
        let kb = cfg.max_direct_io_size_kb;
        let host_memory = cfg.memory == CaseMemoryKind::PinnedHost;
        driver
            .stage_settings(|s| {
                s.max_direct_io_size_kb = kb;
                s.allow_system_memory |= host_memory;
                if let Some(tune) = &cfg.tune {
                    tune(s);
                }
            })
            .map_err(|e| format!("staging settings: {e}"))?;
        driver
            .open()
            .map_err(|e| format!("opening the driver: {e}"))?;
        let opened = driver
            .session()
            .map(|s| s.registry().names())
            .unwrap_or_default();
        if opened != [backend.name] {
            return Err(format!(
                "the driver opened with backends {opened:?}, not [{:?}]",
                backend.name,
            ));
        }
        let dir = match &cfg.dir {
            Some(d) => tempfile::tempdir_in(d),
            None => tempfile::tempdir(),
        }
        .map_err(|e| format!("creating a temporary directory: {e}"))?;
        Ok(Fixture {
            sim,
            runtime,
            driver,
            backend,
            cfg: cfg.clone(),
            dir,
            paths: Mutex::new(Vec::new()),
            baseline,
        })
    }

    /// The driver.
    pub fn driver(&self) -> &Driver {
        &self.driver
    }

    /// The runtime (the simulated GPU).
    pub fn runtime(&self) -> &Arc<dyn GpuRuntime> {
        &self.runtime
    }

    /// The simulated GPU itself, for leak counts.
    pub fn sim(&self) -> Option<&SimRuntime> {
        self.sim.as_deref()
    }

    /// The backend under test.
    pub fn backend(&self) -> BackendDescriptor {
        self.backend
    }

    /// The configuration the suite runs with.
    pub fn config(&self) -> &ConformanceConfig {
        &self.cfg
    }

    /// The largest single transfer a backend issues under this fixture's settings.
    pub fn chunk(&self) -> usize {
        self.driver.settings().max_direct_io_bytes()
    }

    /// Whether the backend is asked to handle a request at file offset `file_offset` of `size`
    /// bytes at device offset `device_offset` from a page-aligned allocation.
    pub fn allowed(&self, file_offset: u64, size: usize, device_offset: usize) -> bool {
        let a = self.cfg.alignment.max(1);
        !self.cfg.aligned_only
            || (file_offset % a as u64 == 0 && size % a == 0 && device_offset % a == 0)
    }

    /// A new file holding `contents`, opened read-write and registered.
    pub fn file(&self, name: &str, contents: &[u8]) -> Result<TestFile, String> {
        let path = self.dir.path().join(name);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| format!("creating {}: {e}", path.display()))?;
        file.write_all_at(contents, 0)
            .map_err(|e| format!("filling {}: {e}", path.display()))?;
        let handle = self
            .driver
            .handle_register(file.as_raw_fd())
            .map_err(|e| format!("registering {}: {e}", path.display()))?;
        self.paths
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(path.clone());
        Ok(TestFile { file, path, handle })
    }

    /// Memory of `len` bytes of the kind the suite runs on (device memory unless
    /// [`ConformanceConfig::memory`] says otherwise), every byte [`SENTINEL`].
    pub fn device(&self, len: usize) -> Result<CaseMemory, String> {
        let mut buf = match self.cfg.memory {
            CaseMemoryKind::Device => DeviceBuffer::new(Arc::clone(&self.runtime), len)
                .map(CaseMemory::Device)
                .map_err(|e| format!("allocating {len} bytes of device memory: {e}"))?,
            CaseMemoryKind::PinnedHost => PinnedBuffer::new(Arc::clone(&self.runtime), len)
                .map(CaseMemory::Pinned)
                .map_err(|e| format!("allocating {len} bytes of pinned host memory: {e}"))?,
        };
        buf.fill(SENTINEL)
            .map_err(|e| format!("filling the memory: {e}"))?;
        Ok(buf)
    }

    /// `len` bytes at `offset` of `buffer`, checked by the runtime's pointer query as
    /// validation checks them (what a request moves).
    pub fn range(
        &self,
        buffer: &CaseMemory,
        offset: usize,
        len: usize,
    ) -> Result<IoMemory, String> {
        IoMemory::check(&self.runtime, buffer.ptr() + offset, len).map_err(|e| {
            format!(
                "querying {len} bytes at {:#x}+{offset}: {e:?}",
                buffer.ptr()
            )
        })
    }

    /// What requests on the registered file `handle` need to go straight to the open driver's
    /// registry ([`FileRequests`]).
    pub fn requests(&self, handle: FileHandleId) -> Result<FileRequests, String> {
        let session = self
            .driver
            .session()
            .ok_or_else(|| "the driver is not open".to_string())?;
        let file = self
            .driver
            .file(handle)
            .map_err(|e| format!("looking up the registered file: {e}"))?;
        Ok(FileRequests {
            settings: session.settings(),
            env: *session.env(),
            session,
            file,
        })
    }

    /// One read or write through the driver; a failure keeps the driver's error and says
    /// which request failed.
    pub fn io(
        &self,
        op: IoOp,
        handle: FileHandleId,
        buffer: usize,
        size: usize,
        file_offset: u64,
        buffer_offset: usize,
    ) -> Result<usize, IoFailure> {
        let call = IoCall {
            op,
            handle,
            buffer,
            size,
            file_offset: file_offset as i64,
            buffer_offset: buffer_offset as i64,
        };
        self.driver.io(call).map_err(|error| IoFailure {
            explanation: format!(
                "{op:?} of {size} bytes at file offset {file_offset}, buffer \
                 {buffer:#x}+{buffer_offset} failed: {error}"
            ),
            error,
        })
    }

    /// Close the driver and check that the backend let go of everything: no descriptor on any of
    /// the case's files, no pinned buffer, no stream, no device memory.
    pub fn finish(self) -> Result<(), String> {
        while self.driver.use_count() > 0 {
            self.driver
                .close()
                .map_err(|e| format!("closing the driver: {e}"))?;
        }
        let paths = std::mem::take(&mut *self.paths.lock().unwrap_or_else(PoisonError::into_inner));
        for p in &paths {
            let n =
                crate::faults::open_fds_for(p).map_err(|e| format!("counting descriptors: {e}"))?;
            if n != 0 {
                return Err(format!(
                    "after the driver closed, {n} descriptors are still open on {}",
                    p.display()
                ));
            }
        }
        match (&self.baseline, &self.sim) {
            (Some(baseline), Some(sim)) => baseline
                .compare_now(sim)
                .map_err(|e| format!("after the driver closed: {e}")),
            // A real GPU runtime cannot list its allocations; descriptors were checked above.
            _ => Ok(()),
        }
    }

    /// The case's directory.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}
