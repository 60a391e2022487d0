//! How the pieces of a staged transfer reach the file: through the buffered descriptor, or with
//! O_DIRECT where the policy says so. Either way the bytes pass through a staging lane; the
//! direct path (file to device memory, no host copy) is another backend, `hipfile-fastpath`.
//!
//! The O_DIRECT policy ([`DirectIoPolicy`]): in `Auto`, an aligned read piece is read through
//! the page cache when at least half of its pages are cached and with O_DIRECT otherwise, so cold
//! data goes from the disk straight into the staging buffer instead of through the page cache.
//! The kernel is asked with `cachestat(2)` ([`FileIo::cached_pages`]), which has no side
//! effects: an earlier probe, a `RWF_NOWAIT` read, starts readahead on a miss, and on the H200
//! host that readahead competing with the O_DIRECT read of the same range halved the cold read
//! (0.8 against 1.6 GB/s). Kernels without `cachestat` (before 6.5) still get that probe: the
//! piece is first read with `RWF_NOWAIT`, which succeeds only from the page cache, and a
//! refused first page counts as cold only when the next page is not cached either (the kernel
//! also refuses the cached page that carries its readahead mark). Unaligned pieces (heads and
//! tails) always use the buffered descriptor. Writes use O_DIRECT only under `Always`; appending
//! writes never do.
//!
//! Correctness rules: EINTR is retried and short transfers are continued (`pread_full`,
//! `pwrite_full`); O_DIRECT cannot continue at an unaligned offset, so the rest of a transfer
//! that stopped off the alignment goes through the buffered descriptor.

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hipfile_core::{
    pread_full, pwrite_append_full, pwrite_full, DioAlign, DirectIoPolicy, Error, FileIo,
    RegisteredFile,
};

/// Whether `len` bytes at file `offset` through host `address` meet the file's direct IO
/// alignment, so O_DIRECT may move them (the same rule as the direct path's).
pub fn direct_aligned(offset: u64, len: usize, address: usize, align: DioAlign) -> bool {
    let offset_align = u64::from(align.offset.max(1));
    offset % offset_align == 0
        && len as u64 % offset_align == 0
        && address % align.memory.max(1) as usize == 0
}

/// Bytes the staged engine moved through the page cache (the buffered descriptor) and with
/// O_DIRECT, for statistics ([`hipfile_core::BackendReport::counters`]).
#[derive(Debug, Default)]
pub struct PathCounters {
    page_cache_bytes: AtomicU64,
    direct_bytes: AtomicU64,
}

impl PathCounters {
    /// The counters by name.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            (
                "page_cache_bytes",
                self.page_cache_bytes.load(Ordering::Relaxed),
            ),
            ("o_direct_bytes", self.direct_bytes.load(Ordering::Relaxed)),
        ]
    }
}

/// The file side of one transfer: the registered file's descriptors, the IO primitives and the
/// policy in force when the request started.
#[derive(Debug)]
pub struct PieceIo {
    io: Arc<dyn FileIo>,
    file: Arc<RegisteredFile>,
    policy: DirectIoPolicy,
    append: bool,
    /// Where the bytes moved are counted (`None`: statistics are off).
    counted: Option<Arc<PathCounters>>,
}

impl PieceIo {
    /// Pieces of `file` moved with `io` under `policy`; `append` writes go to the end of the
    /// file.
    pub fn new(
        io: Arc<dyn FileIo>,
        file: Arc<RegisteredFile>,
        policy: DirectIoPolicy,
        append: bool,
    ) -> Self {
        PieceIo {
            io,
            file,
            policy,
            append,
            counted: None,
        }
    }

    /// Count the bytes moved in `paths`.
    pub fn counted_in(mut self, paths: Arc<PathCounters>) -> Self {
        self.counted = Some(paths);
        self
    }

    /// Count `result`'s bytes as moved through O_DIRECT (`direct`) or the page cache.
    fn count<T>(
        &self,
        direct: bool,
        bytes: impl FnOnce(&T) -> usize,
        result: Result<T, Error>,
    ) -> Result<T, Error> {
        if let (Some(paths), Ok(value)) = (&self.counted, &result) {
            let counter = if direct {
                &paths.direct_bytes
            } else {
                &paths.page_cache_bytes
            };
            counter.fetch_add(bytes(value) as u64, Ordering::Relaxed);
        }
        result
    }

    /// Read `buf.len()` bytes at `offset` into `buf`: the bytes read, fewer only at end of file.
    pub fn read(&self, buf: &mut [u8], offset: u64) -> Result<usize, Error> {
        let io = &*self.io;
        let len = buf.len();
        let context =
            |e: io::Error| Error::from_io(&e, format!("reading {len} bytes at offset {offset}"));
        let direct = match self.policy {
            DirectIoPolicy::Never => None,
            _ => self.direct_fd_for(offset, buf),
        };
        let Some(direct) = direct else {
            let result = pread_full(io, self.buffered(), buf, offset).map_err(&context);
            return self.count(false, |n| *n, result);
        };
        if self.policy == DirectIoPolicy::Auto {
            let buffered = match io.cached_pages(self.buffered(), offset, len as u64) {
                Some(pages) => pages.mostly_cached(),
                None => match self.probe_cached(buf, offset) {
                    Probe::Read(n) => return Ok(n),
                    Probe::Failed(e) => return Err(context(e)),
                    Probe::Cached => true,
                    Probe::Cold => false,
                },
            };
            if buffered {
                let result = pread_full(io, self.buffered(), buf, offset).map_err(&context);
                return self.count(false, |n| *n, result);
            }
        }
        let result = read_direct(
            io,
            direct,
            self.buffered(),
            buf,
            offset,
            self.offset_align(),
        )
        .map_err(context);
        self.count(true, |n| *n, result)
    }

    /// Write all of `buf` at `offset` (or at the end of the file, for an appending transfer).
    pub fn write(&self, buf: &[u8], offset: u64) -> Result<(), Error> {
        let io = &*self.io;
        let len = buf.len();
        if self.append {
            let result = pwrite_append_full(io, self.buffered(), buf)
                .map_err(|e| Error::from_io(&e, format!("appending {len} bytes")));
            return self.count(false, |_| len, result);
        }
        let direct = match self.policy {
            DirectIoPolicy::Always => self.direct_fd_for(offset, buf),
            _ => None,
        };
        let is_direct = direct.is_some();
        let result = match direct {
            Some(fd) => write_direct(io, fd, self.buffered(), buf, offset, self.offset_align()),
            None => pwrite_full(io, self.buffered(), buf, offset),
        }
        .map_err(|e| Error::from_io(&e, format!("writing {len} bytes at offset {offset}")));
        self.count(is_direct, |_| len, result)
    }

    fn buffered(&self) -> BorrowedFd<'_> {
        self.file.buffered_fd()
    }

    fn offset_align(&self) -> u64 {
        u64::from(self.file.dio_align().offset.max(1))
    }

    fn direct_fd_for(&self, offset: u64, buf: &[u8]) -> Option<BorrowedFd<'_>> {
        let fd = self.file.direct_fd()?;
        direct_aligned(
            offset,
            buf.len(),
            buf.as_ptr() as usize,
            self.file.dio_align(),
        )
        .then_some(fd)
    }

    /// Where `cachestat` cannot say, find out with `RWF_NOWAIT` reads whether `buf`'s range is
    /// cached, reading it when it is.
    fn probe_cached(&self, buf: &mut [u8], offset: u64) -> Probe {
        let io = &*self.io;
        match io.pread_cached(self.buffered(), buf, offset) {
            Ok(n) if n == buf.len() || n == 0 => Probe::Read(n),
            Ok(n) => match pread_full(io, self.buffered(), &mut buf[n..], offset + n as u64) {
                Ok(m) => Probe::Read(n + m),
                Err(e) => Probe::Failed(e),
            },
            // The first page is not readable without waiting. That happens to cached data
            // too: the kernel answers EAGAIN for the page that carries the readahead mark
            // (seen on about 1% of 512 KiB pieces of a fully cached file). Only when the next
            // page is not cached either is the piece cold and worth reading with O_DIRECT.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if self.cached_after_first_page(buf, offset) {
                    Probe::Cached
                } else {
                    Probe::Cold
                }
            }
            // No RWF_NOWAIT here (EOPNOTSUPP, EINVAL): the page cache decides.
            Err(_) => Probe::Cached,
        }
    }

    /// Whether the page after the first one of `buf`'s range is in the page cache (probed
    /// with a 4 KiB `RWF_NOWAIT` read into `buf`, which the caller reads over anyway).
    fn cached_after_first_page(&self, buf: &mut [u8], offset: u64) -> bool {
        const PAGE: usize = 4096;
        if buf.len() <= PAGE {
            return false;
        }
        let end = buf.len().min(2 * PAGE);
        matches!(self.io.pread_cached(self.buffered(), &mut buf[PAGE..end], offset + PAGE as u64), Ok(n) if n > 0)
    }
}

/// What a `RWF_NOWAIT` probe found out about a piece.
enum Probe {
    /// The piece was read from the page cache: this many bytes (fewer only at end of file).
    Read(usize),
    /// Reading the cached part failed.
    Failed(io::Error),
    /// Cached, but not read yet.
    Cached,
    /// Not cached: worth reading with O_DIRECT.
    Cold,
}

/// Read with O_DIRECT until `buf` is full or the file ends. O_DIRECT cannot continue at an
/// unaligned offset, so after a transfer that is not a whole number of blocks (the end of the
/// file, or a short read) the rest is read through the buffered descriptor.
fn read_direct(
    io: &dyn FileIo,
    direct: BorrowedFd<'_>,
    buffered: BorrowedFd<'_>,
    buf: &mut [u8],
    offset: u64,
    align: u64,
) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match io.pread(direct, &mut buf[done..], offset + done as u64) {
            Ok(0) => return Ok(done),
            Ok(n) => {
                done += n;
                if n as u64 % align != 0 {
                    let rest = pread_full(io, buffered, &mut buf[done..], offset + done as u64)?;
                    return Ok(done + rest);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Write all of `buf` with O_DIRECT; after a short transfer that leaves an unaligned offset, the
/// rest goes through the buffered descriptor.
fn write_direct(
    io: &dyn FileIo,
    direct: BorrowedFd<'_>,
    buffered: BorrowedFd<'_>,
    buf: &[u8],
    offset: u64,
    align: u64,
) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match io.pwrite(direct, &buf[done..], offset + done as u64) {
            Ok(0) => {
                return Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::NOSPC.raw_os_error(),
                ))
            }
            Ok(n) => {
                done += n;
                if n as u64 % align != 0 {
                    return pwrite_full(io, buffered, &buf[done..], offset + done as u64);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
