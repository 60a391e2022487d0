//! What hipfile-rs asks of the kernel beyond `rustix` (which lacks these calls, or offers them in
//! a form that cannot hold every answer: its `SO_PEERCRED` types a process id as non-zero), so
//! that `hipfile-core` stays free of `unsafe`; and the fork hook that makes a forked child give
//! up a listening socket ([`ForkReleased`]). The calls themselves, and their `unsafe`, are the
//! crate's raw layer's (`ffi::os`); this module decides what to ask and what the answers mean.

mod peer;
pub use crate::ffi::os::{ForkReleased, FORK_RELEASED_SLOTS};
pub use peer::{peer_credentials, PeerCredentials};

use std::io;
use std::os::fd::{BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// What the page cache holds of a file range (see [`cached_pages`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PageCount {
    /// Pages of the range in the page cache.
    pub cached: u64,
    /// Pages the range covers.
    pub total: u64,
}

impl PageCount {
    /// Whether reading the range through the page cache would mostly hit it: at least half of
    /// its pages are cached.
    pub fn mostly_cached(&self) -> bool {
        self.cached.saturating_mul(2) >= self.total
    }
}

/// How many pages of `[offset, offset + len)` of `fd`'s file are in the page cache, asked with
/// `cachestat(2)` (Linux 6.5 and later), which neither reads them nor starts readahead. `None`
/// where the kernel cannot say: a kernel without the call (remembered, so later calls cost
/// nothing), one that refuses it for this file, or an empty range.
pub fn cached_pages(fd: BorrowedFd<'_>, offset: u64, len: u64) -> Option<PageCount> {
    static MISSING: AtomicBool = AtomicBool::new(false);
    if len == 0 || MISSING.load(Ordering::Relaxed) {
        return None;
    }
    let stat = match crate::ffi::os::cachestat(fd, offset, len) {
        Ok(stat) => stat,
        Err(e) => {
            if e.raw_os_error() == Some(libc::ENOSYS) {
                MISSING.store(true, Ordering::Relaxed);
            }
            return None;
        }
    };
    let page = crate::ffi::os::page_size() as u64;
    let first = offset / page;
    let end = offset.saturating_add(len).div_ceil(page);
    Some(PageCount {
        cached: stat.nr_cache,
        total: end - first,
    })
}

/// What an application's descriptor allows at this moment, and which file it names: the
/// answer of `fcntl(F_GETFL)` and `fstat(2)` on a descriptor hipfile-rs does not own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescriptorState {
    /// Opened for reading (`O_RDONLY` or `O_RDWR`, and not `O_PATH`).
    pub readable: bool,
    /// Opened for writing (`O_WRONLY` or `O_RDWR`, and not `O_PATH`).
    pub writable: bool,
    /// `O_APPEND`: every write goes to the end of the file.
    pub append: bool,
    /// `O_PATH`: the descriptor names a file but allows no IO.
    pub path_only: bool,
    /// `O_DIRECT`: IO through the descriptor bypasses the page cache (and must be aligned).
    pub direct: bool,
    /// Device of the file (`st_dev`).
    pub dev: u64,
    /// Inode of the file (`st_ino`).
    pub ino: u64,
    /// File type bits of `st_mode` (`S_IFMT`).
    pub file_type: u32,
    /// The file's size (`st_size`; 0 for block devices) and change times: what changes when the
    /// file's contents or size do.
    pub stamp: FileStamp,
}

/// What changes when a file's contents do: its size and its modification and change times
/// (seconds, nanoseconds). A write, a truncation or a punched hole sets both times to the
/// current time, in the filesystem's granularity (coarse clock ticks on kernels before 6.13,
/// finer ones once a stamp was read on later kernels).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct FileStamp {
    /// `st_size`.
    pub size: u64,
    /// `st_mtime`, `st_mtime_nsec`.
    pub modified: (i64, i64),
    /// `st_ctime`, `st_ctime_nsec`.
    pub changed: (i64, i64),
}

/// Ask the kernel what the descriptor number `fd` of this process allows and which file it
/// names. The number is only looked up, never closed or kept: a number that names nothing
/// answers `EBADF`, as the calls themselves do.
pub fn descriptor_state(fd: RawFd) -> io::Result<DescriptorState> {
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    let flags = crate::ffi::os::status_flags(fd)?;
    let st = crate::ffi::os::fstat(fd)?;
    let path_only = flags & libc::O_PATH != 0;
    let mode = flags & libc::O_ACCMODE;
    Ok(DescriptorState {
        readable: !path_only && (mode == libc::O_RDONLY || mode == libc::O_RDWR),
        writable: !path_only && (mode == libc::O_WRONLY || mode == libc::O_RDWR),
        append: flags & libc::O_APPEND != 0,
        path_only,
        direct: flags & libc::O_DIRECT != 0,
        dev: st.st_dev,
        ino: st.st_ino,
        file_type: st.st_mode & libc::S_IFMT,
        stamp: FileStamp {
            size: u64::try_from(st.st_size).unwrap_or(0),
            modified: (st.st_mtime, st.st_mtime_nsec),
            changed: (st.st_ctime, st.st_ctime_nsec),
        },
    })
}

/// Whether signal `sig` is ignored in this process (`SIG_IGN`, as `nohup` leaves SIGHUP for the
/// programs it starts): a program that handles ending signals itself leaves such a signal
/// ignored. `false` for a number that names no signal.
pub fn signal_ignored(sig: i32) -> bool {
    crate::ffi::os::signal_is_ignored(sig)
}

/// A descriptor of this process's own for the open file the application's number `fd` names
/// (`fcntl(F_DUPFD_CLOEXEC)`): the same open file description, so the same access, status flags
/// (`O_APPEND`, `O_DIRECT`) and offset as the application's, never more. For a file whose mode
/// refuses a fresh open with the access the application holds (a file it created read-only and
/// opened read-write), this is the only way to act with that access. The number is only looked
/// up: one that names nothing answers `EBADF`.
pub fn duplicate_descriptor(fd: RawFd) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::from_raw_os_error(libc::EBADF));
    }
    crate::ffi::os::duplicate(fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::{AsFd, AsRawFd};

    #[test]
    fn a_file_just_written_is_counted_as_cached() {
        let dir = std::env::temp_dir().join(format!("hipfile-os-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let page = crate::ffi::os::page_size() as u64;
        // Kernels before 6.5 cannot say; a kernel that answers must count the range exactly:
        // every page of the file just written is in the cache, the page past its end is not.
        if let Some(count) = cached_pages(file.as_fd(), page / 2, 1 << 20) {
            assert_eq!(count.total, (1 << 20) / page + 1);
            assert_eq!(count.cached, count.total - 1, "{count:?}");
            assert!(count.mostly_cached());
        }
        assert_eq!(cached_pages(file.as_fd(), 0, 0), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn half_cached_counts_as_mostly_cached() {
        assert!(PageCount {
            cached: 2,
            total: 4
        }
        .mostly_cached());
        assert!(!PageCount {
            cached: 1,
            total: 4
        }
        .mostly_cached());
        assert!(!PageCount {
            cached: 0,
            total: 1
        }
        .mostly_cached());
    }

    #[test]
    fn descriptor_state_reports_access_append_and_identity() {
        use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, [1u8; 100]).unwrap();
        let open = |o: &mut std::fs::OpenOptions| o.open(&path).unwrap();
        let ro = open(std::fs::OpenOptions::new().read(true));
        let wo = open(std::fs::OpenOptions::new().write(true));
        let ap = open(std::fs::OpenOptions::new().append(true));
        let op = open(
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_PATH),
        );
        let meta = std::fs::metadata(&path).unwrap();
        let r = descriptor_state(ro.as_raw_fd()).unwrap();
        assert!(r.readable && !r.writable && !r.append && !r.path_only);
        assert_eq!((r.dev, r.ino, r.stamp.size), (meta.dev(), meta.ino(), 100));
        assert_eq!(r.file_type, libc::S_IFREG);
        let w = descriptor_state(wo.as_raw_fd()).unwrap();
        assert!(!w.readable && w.writable && !w.append);
        let a = descriptor_state(ap.as_raw_fd()).unwrap();
        assert!(a.writable && a.append);
        let p = descriptor_state(op.as_raw_fd()).unwrap();
        assert!(p.path_only && !p.readable && !p.writable);
        assert_eq!((p.dev, p.ino), (meta.dev(), meta.ino()));
        let closed = ro.as_raw_fd();
        drop(ro);
        // The number may be taken again by another thread's open; only an unused one is EBADF.
        if let Err(e) = descriptor_state(closed) {
            assert_eq!(e.raw_os_error(), Some(libc::EBADF));
        }
        assert_eq!(
            descriptor_state(-1).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
    }
}

/// Whether `len` bytes at address `addr` of this process are mapped and readable, asked of the
/// kernel (`process_vm_readv(2)` on the process itself), which answers `EFAULT` for an unmapped
/// range instead of faulting. For handles an application passes in that the runtime would
/// dereference: an integer that is no pointer at all is refused before it can crash the process.
/// A readable address says nothing more than that.
pub fn readable(addr: usize, len: usize) -> bool {
    if addr == 0 || len == 0 {
        return false;
    }
    crate::ffi::os::copies_from_self(addr, len)
}

#[cfg(test)]
mod readable_tests {
    use super::readable;

    #[test]
    fn mapped_memory_is_readable_and_made_up_addresses_are_not() {
        let word = 42u64;
        assert!(readable(&word as *const u64 as usize, 8));
        assert!(!readable(0, 8));
        assert!(!readable(0xdead_beef, 8));
        assert!(!readable(usize::MAX - 16, 8));
    }
}
