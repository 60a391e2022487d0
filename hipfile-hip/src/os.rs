//! Kernel calls that `rustix` does not offer, kept here with the rest of hipfile-rs's `unsafe`
//! so that `hipfile-core` stays free of it.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
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
    /// The same number on every architecture (the call came after the tables were unified).
    const SYS_CACHESTAT: libc::c_long = 451;
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Stat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    static MISSING: AtomicBool = AtomicBool::new(false);
    if len == 0 || MISSING.load(Ordering::Relaxed) {
        return None;
    }
    let range = Range { off: offset, len };
    let mut stat = Stat::default();
    // SAFETY: both structs have the kernel's layout and live for the call; `stat` is writable;
    // the flags must be 0.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd.as_raw_fd(),
            &range as *const Range,
            &mut stat as *mut Stat,
            0 as libc::c_uint,
        )
    };
    if rc != 0 {
        if io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS) {
            MISSING.store(true, Ordering::Relaxed);
        }
        return None;
    }
    // SAFETY: sysconf has no preconditions.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as u64,
        _ => 4096,
    };
    let first = offset / page;
    let end = offset.saturating_add(len).div_ceil(page);
    Some(PageCount {
        cached: stat.nr_cache,
        total: end - first,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn a_file_just_written_is_counted_as_cached() {
        let dir = std::env::temp_dir().join(format!("hipfile-os-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::write(&path, vec![7u8; 1 << 20]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        // SAFETY: sysconf has no preconditions.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
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
}
