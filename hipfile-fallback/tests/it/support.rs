//! File IO for tests that need to act on the engine's reads: `pread`/`pwrite` as usual, with the
//! test's hook run before every `pread`, optionally `RWF_NOWAIT` refusing chosen offsets, and
//! the page cache's answer to `cachestat` scripted (or withheld, as on kernels before 6.5); and
//! the driver the tests open on the sim.

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;

use std::sync::atomic::{AtomicU64, Ordering};

use std::sync::Arc;

use hipfile_core::{
    Driver, DriverOptions, FileHandleId, FileIo, IoCall, IoOp, PageCount, PosixIo, RegistryBuilder,
    Settings,
};
use hipfile_hip::sim::SimRuntime;
use hipfile_hip::GpuRuntime;

type PreadHook = Box<dyn Fn(BorrowedFd<'_>) + Send + Sync>;

/// [`PosixIo`] with a hook in front of `pread`.
pub struct HookedIo {
    before_pread: PreadHook,
    /// `RWF_NOWAIT` reads at offsets that are multiples of this refuse with `WouldBlock`, as
    /// Linux refuses the cached page that carries a readahead mark.
    refuse_cached_every: Option<u64>,
    /// What `cached_pages` answers.
    cachestat: Cachestat,
    /// `RWF_NOWAIT` reads made.
    probes: AtomicU64,
}

/// What [`HookedIo::cached_pages`] answers.
#[derive(Clone, Copy, Debug)]
pub enum Cachestat {
    /// The kernel's answer.
    Kernel,
    /// No answer (a kernel without `cachestat`).
    Missing,
    /// Nothing is cached.
    Cold,
    /// Nothing of the file with this inode number is cached; the kernel's answer for others.
    ColdFile(u64),
}

impl HookedIo {
    /// Run `hook` before every `pread`.
    pub fn before_pread(hook: impl Fn(BorrowedFd<'_>) + Send + Sync + 'static) -> Self {
        HookedIo {
            before_pread: Box::new(hook),
            refuse_cached_every: None,
            cachestat: Cachestat::Kernel,
            probes: AtomicU64::new(0),
        }
    }

    /// Answer `cached_pages` this way.
    pub fn with_cachestat(mut self, cachestat: Cachestat) -> Self {
        self.cachestat = cachestat;
        self
    }

    /// `RWF_NOWAIT` reads made so far.
    pub fn probes(&self) -> u64 {
        self.probes.load(Ordering::Relaxed)
    }

    /// Also refuse `RWF_NOWAIT` reads at every multiple of `every` bytes.
    pub fn refusing_cached_every(mut self, every: u64) -> Self {
        self.refuse_cached_every = Some(every);
        self
    }
}

impl fmt::Debug for HookedIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HookedIo")
            .field("refuse_cached_every", &self.refuse_cached_every)
            .field("cachestat", &self.cachestat)
            .finish_non_exhaustive()
    }
}

impl FileIo for HookedIo {
    fn pread(&self, fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        (self.before_pread)(fd);
        PosixIo.pread(fd, buf, offset)
    }

    fn pwrite(&self, fd: BorrowedFd<'_>, buf: &[u8], offset: u64) -> io::Result<usize> {
        PosixIo.pwrite(fd, buf, offset)
    }

    fn pread_cached(&self, fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.probes.fetch_add(1, Ordering::Relaxed);
        if self
            .refuse_cached_every
            .is_some_and(|every| offset % every == 0)
        {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        PosixIo.pread_cached(fd, buf, offset)
    }

    fn cached_pages(&self, fd: BorrowedFd<'_>, offset: u64, len: u64) -> Option<PageCount> {
        let cold = match self.cachestat {
            Cachestat::Kernel => false,
            Cachestat::Missing => return None,
            Cachestat::Cold => true,
            Cachestat::ColdFile(ino) => rustix::fs::fstat(fd).is_ok_and(|st| st.st_ino == ino),
        };
        if cold {
            Some(PageCount {
                cached: 0,
                total: len.div_ceil(4096),
            })
        } else {
            PosixIo.cached_pages(fd, offset, len)
        }
    }
}

/// A driver on `sim` with the staged engine alone, reading through `io` (default: the
/// system's calls), its settings changed by `tune` before it opens.
pub fn driver(
    sim: &Arc<SimRuntime>,
    io: Option<Arc<dyn hipfile_core::FileIo>>,
    tune: impl FnOnce(&mut Settings),
) -> Driver {
    driver_on(sim.clone(), io, tune)
}

/// [`driver`] on any runtime (a scripted one over the sim, say).
pub fn driver_on(
    rt: Arc<dyn GpuRuntime>,
    io: Option<Arc<dyn hipfile_core::FileIo>>,
    tune: impl FnOnce(&mut Settings),
) -> Driver {
    let d = Driver::new(options(rt, io));
    d.stage_settings(tune).unwrap();
    d.open().unwrap();
    d
}

/// A call that moves `size` bytes between the device memory at `buffer` and the file at
/// `file_offset`.
pub fn call(
    op: IoOp,
    handle: FileHandleId,
    buffer: usize,
    size: usize,
    file_offset: i64,
) -> IoCall {
    IoCall {
        op,
        handle,
        buffer,
        size,
        file_offset,
        buffer_offset: 0,
        loan: None,
    }
}

/// Options for a driver with the fallback alone on `rt`, its file IO `io` where one is given.
pub fn options(rt: Arc<dyn GpuRuntime>, io: Option<Arc<dyn FileIo>>) -> DriverOptions {
    let mut backends = RegistryBuilder::new();
    hipfile_fallback::register(&mut backends).unwrap();
    let mut options = DriverOptions {
        backends: Some(backends),
        selection: None,
        ..DriverOptions::with_runtime(rt)
    };
    if let Some(io) = io {
        options.io = io;
    }
    options
}
