//! File IO for tests that need to act on the engine's reads: `pread`/`pwrite` as usual, with the
//! test's hook run before every `pread`, and optionally `RWF_NOWAIT` refusing chosen offsets.

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;

use hipfile_core::{FileIo, PosixIo};

type PreadHook = Box<dyn Fn(BorrowedFd<'_>) + Send + Sync>;

/// [`PosixIo`] with a hook in front of `pread`.
pub struct HookedIo {
    before_pread: PreadHook,
    /// `RWF_NOWAIT` reads at offsets that are multiples of this refuse with `WouldBlock`, as
    /// Linux refuses the cached page that carries a readahead mark.
    refuse_cached_every: Option<u64>,
}

impl HookedIo {
    /// Run `hook` before every `pread`.
    pub fn before_pread(hook: impl Fn(BorrowedFd<'_>) + Send + Sync + 'static) -> Self {
        HookedIo {
            before_pread: Box::new(hook),
            refuse_cached_every: None,
        }
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
        if self
            .refuse_cached_every
            .is_some_and(|every| offset % every == 0)
        {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        PosixIo.pread_cached(fd, buf, offset)
    }
}
