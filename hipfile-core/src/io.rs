//! The file IO primitives backends use, behind a trait so tests can script their failures, and
//! the direction of a request ([`IoOp`]).

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;

pub use hipfile_hip::os::PageCount;

/// Direction of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoOp {
    /// File to GPU memory.
    Read,
    /// GPU memory to file.
    Write,
}

impl IoOp {
    /// `read` or `write`, as log lines name an operation.
    pub fn name(self) -> &'static str {
        match self {
            IoOp::Read => "read",
            IoOp::Write => "write",
        }
    }
}

/// Positional reads and writes on a descriptor. The default, [`PosixIo`], is `pread`/`pwrite`;
/// `hipfile-testkit` wraps it to inject scripted failures (EIO on the 3rd read, short transfers,
/// EINTR, ENOSPC).
pub trait FileIo: Send + Sync + fmt::Debug {
    /// Read into `buf` at `offset`; may return fewer bytes than asked (0 at end of file).
    fn pread(&self, fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize>;
    /// Write `buf` at `offset`; may write fewer bytes than asked.
    fn pwrite(&self, fd: BorrowedFd<'_>, buf: &[u8], offset: u64) -> io::Result<usize>;
    /// Write `buf` at the end of the file, whatever the descriptor's flags (`pwritev2` with
    /// `RWF_APPEND`, Linux 4.16 and later); may write fewer bytes than asked.
    fn pwrite_append(&self, fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
        Ok(rustix::io::pwritev2(
            fd,
            &[io::IoSlice::new(buf)],
            0,
            rustix::io::ReadWriteFlags::APPEND,
        )?)
    }
    /// Read only what the page cache holds (`preadv2` with `RWF_NOWAIT`): `WouldBlock` when the
    /// first byte is not cached, else the cached bytes read. The default has no such probe and
    /// always answers `WouldBlock`.
    fn pread_cached(&self, fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let _ = (fd, buf, offset);
        Err(io::ErrorKind::WouldBlock.into())
    }
    /// How many of the pages of `[offset, offset + len)` are in the page cache, asked without
    /// reading them and without starting readahead (`cachestat(2)`, Linux 6.5 and later):
    /// `None` where the kernel cannot say (older kernels, or a kernel that refuses the question
    /// for this file). The default cannot say.
    fn cached_pages(&self, fd: BorrowedFd<'_>, offset: u64, len: u64) -> Option<PageCount> {
        let _ = (fd, offset, len);
        None
    }
}

/// `pread(2)` and `pwrite(2)`.
#[derive(Clone, Copy, Debug, Default)]
pub struct PosixIo;

impl FileIo for PosixIo {
    fn pread(&self, fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        Ok(rustix::io::pread(fd, buf, offset)?)
    }

    fn pwrite(&self, fd: BorrowedFd<'_>, buf: &[u8], offset: u64) -> io::Result<usize> {
        Ok(rustix::io::pwrite(fd, buf, offset)?)
    }

    fn pread_cached(&self, fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        let mut bufs = [io::IoSliceMut::new(buf)];
        Ok(rustix::io::preadv2(
            fd,
            &mut bufs,
            offset,
            rustix::io::ReadWriteFlags::NOWAIT,
        )?)
    }

    fn cached_pages(&self, fd: BorrowedFd<'_>, offset: u64, len: u64) -> Option<PageCount> {
        hipfile_hip::os::cached_pages(fd, offset, len)
    }
}

/// Read until `buf` is full or the file ends: EINTR is retried, short reads are continued.
/// Returns the bytes read (fewer than `buf.len()` only at end of file).
pub fn pread_full(
    io: &dyn FileIo,
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    offset: u64,
) -> io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match io.pread(fd, &mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

/// Write all of `buf`: EINTR is retried, short writes are continued; a write that makes no
/// progress is an error (ENOSPC), never a silent short count.
pub fn pwrite_full(io: &dyn FileIo, fd: BorrowedFd<'_>, buf: &[u8], offset: u64) -> io::Result<()> {
    write_all_by(buf, |rest, done| io.pwrite(fd, rest, offset + done as u64))
}

/// Append all of `buf` to the end of the file, in order: EINTR is retried, short writes are
/// continued; a write that makes no progress is an error (ENOSPC), never a silent short count.
pub fn pwrite_append_full(io: &dyn FileIo, fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<()> {
    write_all_by(buf, |rest, _| io.pwrite_append(fd, rest))
}

/// Calls `write(rest, done)` with what is left of `buf` and how much was written before it,
/// until all of `buf` is written.
fn write_all_by(
    buf: &[u8],
    mut write: impl FnMut(&[u8], usize) -> io::Result<usize>,
) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match write(&buf[done..], done) {
            Ok(0) => {
                return Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::NOSPC.raw_os_error(),
                ))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn posix_io_asks_the_kernel_what_is_cached() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let page = rustix::param::page_size() as u64;
        // Kernels before 6.5 cannot say; this one must answer consistently when it does.
        if let Some(count) = PosixIo.cached_pages(file.as_fd(), page / 2, 1 << 20) {
            assert_eq!(count.total, (1 << 20) / page + 1);
            // Just written: every page of the file is in the cache, the page past its end is not.
            assert_eq!(count.cached, count.total - 1, "{count:?}");
            assert!(count.mostly_cached());
        }
        assert_eq!(PosixIo.cached_pages(file.as_fd(), 0, 0), None);
    }
}
