//! The kernel calls `rustix` does not offer (or offers in a form that cannot hold every answer),
//! as typed operations: what [`crate::os`] and the file pins ([`crate::FileMapping`]) ask of the
//! kernel, and nothing more.

use std::fmt;
use std::io;
use std::ops::Deref;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::OnceLock;

/// The size of a page of this process, which mappings are made of.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// What `cachestat(2)` counts of a file range (`struct cachestat`).
#[repr(C)]
#[derive(Default)]
pub(crate) struct CacheStat {
    pub nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// `cachestat(2)` of `[offset, offset + len)` of `fd`'s file (Linux 6.5 and later).
pub(crate) fn cachestat(fd: BorrowedFd<'_>, offset: u64, len: u64) -> io::Result<CacheStat> {
    /// The same number on every architecture (the call came after the tables were unified).
    const SYS_CACHESTAT: libc::c_long = 451;
    /// `struct cachestat_range`.
    #[repr(C)]
    struct Range {
        off: u64,
        len: u64,
    }
    let range = Range { off: offset, len };
    let mut stat = CacheStat::default();
    // SAFETY: both structs have the kernel's layout and live for the call; `stat` is writable;
    // the flags must be 0.
    let rc = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            fd.as_raw_fd(),
            &range as *const Range,
            &mut stat as *mut CacheStat,
            0 as libc::c_uint,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat)
}

/// `fstat(2)` of the descriptor number `fd`, as the kernel's own `fstat` call where the
/// architecture has one. glibc (2.33 on) implements `fstat` as `fstatat(fd, "", AT_EMPTY_PATH)`,
/// which copies and checks the empty path before it reaches the same answer: 410 ns against 367
/// on a 6.18 kernel, more on kernels without the empty-path shortcut. Every request asks once
/// ([`crate::os::descriptor_state`]).
pub(crate) fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    // SAFETY: `st` is a writable `struct stat` for the duration of the call, which is what the
    // kernel's fstat of these architectures writes (libc's `stat` is the kernel's layout there);
    // fstat on any number only reads the descriptor table.
    let rc = unsafe { libc::syscall(libc::SYS_fstat, fd, st.as_mut_ptr()) };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    // SAFETY: `st` is a writable stat buffer for the duration of the call; fstat on any number
    // only reads the descriptor table.
    let rc = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the call succeeded, so it filled the buffer (which started zeroed anyway).
    Ok(unsafe { st.assume_init() })
}

/// `fcntl(F_GETFL)` of the descriptor number `fd`: its access mode and status flags.
pub(crate) fn status_flags(fd: RawFd) -> io::Result<i32> {
    // SAFETY: F_GETFL takes no third argument and only reads the descriptor table; any number
    // is acceptable (an unused one fails with EBADF).
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(flags)
}

/// `fcntl(F_DUPFD_CLOEXEC)` of the descriptor number `fd`: a descriptor of our own for the same
/// open file description.
pub(crate) fn duplicate(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: F_DUPFD_CLOEXEC takes an int (the lowest number to use) and only reads the
    // descriptor table; any number is acceptable (an unused one fails with EBADF).
    let dup = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if dup < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the call succeeded, so `dup` is a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(dup) })
}

/// Whether the disposition of signal `sig` is `SIG_IGN`; `false` for a number that names no
/// signal.
pub(crate) fn signal_is_ignored(sig: i32) -> bool {
    let mut old = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: a NULL new action only reads the current one into `old`, a writable sigaction.
    let rc = unsafe { libc::sigaction(sig, std::ptr::null(), old.as_mut_ptr()) };
    // SAFETY: the call succeeded, so it filled `old` (which started zeroed anyway).
    rc == 0 && unsafe { old.assume_init() }.sa_sigaction == libc::SIG_IGN
}

/// Whether `process_vm_readv(2)` on this process copies `len` bytes from `addr`: the kernel
/// reads the range itself and answers `EFAULT` for an unmapped one, so nothing here can fault.
pub(crate) fn copies_from_self(addr: usize, len: usize) -> bool {
    let mut sink = vec![0u8; len];
    let local = libc::iovec {
        iov_base: sink.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` describes `sink`, writable for `len` bytes; the kernel reads the remote
    // range itself and reports an unmapped one as EFAULT, so no access of ours can fault.
    let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
    usize::try_from(n).is_ok_and(|n| n == len)
}

/// `pread(2)` of up to `len` bytes at file `offset` into the raw address `addr`: the bytes read
/// (0 at end of file). The kernel checks the destination itself: an unmapped or read-only page is
/// `EFAULT` (or a short count up to it), so no access of ours can fault.
///
/// # Safety
///
/// No Rust reference may cover any of `[addr, addr + len)` while the call runs: the kernel writes
/// there behind the compiler's back.
pub(crate) unsafe fn pread_raw(
    fd: BorrowedFd<'_>,
    addr: usize,
    len: usize,
    offset: u64,
) -> io::Result<usize> {
    let offset =
        libc::off_t::try_from(offset).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: the kernel validates the destination range (EFAULT); the caller keeps Rust
    // references off it for the call (this function's contract).
    let n = unsafe { libc::pread(fd.as_raw_fd(), addr as *mut libc::c_void, len, offset) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// `pwrite(2)` of up to `len` bytes from the raw address `addr` at file `offset`, or with
/// `offset` `None` at the end of the file (`pwritev2` with `RWF_APPEND`, whatever the
/// descriptor's flags): the bytes written. The kernel reads the source itself: an unmapped page
/// is `EFAULT` (or a short count up to it), so no access of ours can fault. Reading memory is
/// sound whoever else reads it; this only reads.
pub(crate) fn pwrite_raw(
    fd: BorrowedFd<'_>,
    addr: usize,
    len: usize,
    offset: Option<u64>,
) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: len,
    };
    let (offset, flags) = match offset {
        Some(at) => (
            libc::off_t::try_from(at).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?,
            0,
        ),
        None => (-1, libc::RWF_APPEND),
    };
    // SAFETY: `iov` describes the source range, which only the kernel reads and validates
    // (EFAULT); the iovec array is one element on our stack.
    let n = unsafe { libc::pwritev2(fd.as_raw_fd(), &iov, 1, offset, flags) };
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
}

/// `getsockopt(SO_PEERCRED)` on `fd`: the credentials and the length the kernel wrote.
pub(crate) fn peer_credentials(fd: BorrowedFd<'_>) -> io::Result<(libc::ucred, usize)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: `cred` is a writable `struct ucred` of `len` bytes for the call, the layout
    // SO_PEERCRED writes; any integer values are valid for its fields.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((cred, len as usize))
}

/// An unbound Unix stream socket, close-on-exec.
pub(crate) fn unbound_socket() -> Option<OwnedFd> {
    // SAFETY: socket(2) takes no pointers.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    // SAFETY: a non-negative answer is a new descriptor that nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `dup3(spare, fd, O_CLOEXEC)`, again while interrupted; async-signal-safe, for a fork's child
/// hook. Both numbers are open: `fd` then names `spare`'s file, atomically, so it never dangles.
///
/// # Safety
///
/// `fd` is a descriptor whose file the caller may replace: one registered in the fork table by
/// a [`ForkReleased`] that owns it, in the child of a fork (so no other owner acts on it).
unsafe fn replace_descriptor(spare: RawFd, fd: RawFd) {
    loop {
        // SAFETY: dup3 takes no pointers; onto an open number it closes the old file and opens
        // the copy atomically. Closing `fd`'s file is what the caller asks for: whoever owns the
        // number keeps a valid descriptor of another file.
        let rc = unsafe { libc::dup3(spare, fd, libc::O_CLOEXEC) };
        if rc >= 0 || io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            break;
        }
    }
}

/// `pthread_atfork` with the three hooks; whether the C library took them.
///
/// # Safety
///
/// `child` makes only async-signal-safe calls: it runs in a forked child of a process that may
/// have had other threads, before `fork` returns there.
unsafe fn register_fork_hooks(
    prepare: extern "C" fn(),
    parent: extern "C" fn(),
    child: extern "C" fn(),
) -> bool {
    // SAFETY: the hooks are `extern "C"` functions that take no arguments and live as long as
    // the code of this library (`extern "C" fn` items, never unloaded).
    unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) == 0 }
}

/// `len` bytes of a file at a page-aligned offset, mapped read-only (`PROT_READ`,
/// `MAP_SHARED`) and not read by anyone yet: what [`crate::PinnedFileRange::register`] pins. The
/// mapping keeps the file open in the kernel (no descriptor) until it is dropped.
pub struct FileMapping {
    map: NonNull<u8>,
    /// Bytes mapped: `len` rounded up to whole pages.
    map_len: usize,
    offset: u64,
    len: usize,
}

// SAFETY: the mapping is never read or written through `map` by the CPU; the pointer is only
// handed to the kernel (`mincore`, `munmap`) and to a runtime to register and copy out of.
unsafe impl Send for FileMapping {}
// SAFETY: as above; every method takes `&self` and reads nothing through the pointer.
unsafe impl Sync for FileMapping {}

impl FileMapping {
    /// Map `len` bytes of the file open on `fd` at `offset`. `offset` must be a multiple of
    /// the page size and `len` at least 1; `fd` must allow reading (a write-only or `O_PATH`
    /// descriptor fails to map). Mapping past the end of the file succeeds; pinning such a
    /// range fails, as the kernel has no page for it.
    pub fn map(fd: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<Self> {
        let page = page_size();
        let invalid = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, why);
        if len == 0 || offset % page as u64 != 0 {
            return Err(invalid(
                "a file range to pin starts on a page and is not empty",
            ));
        }
        let map_len = len
            .checked_next_multiple_of(page)
            .ok_or_else(|| invalid("range too large"))?;
        let file_offset =
            libc::off_t::try_from(offset).map_err(|_| invalid("offset past the largest file"))?;
        // SAFETY: a new shared read-only mapping of the file; nothing else in the process is
        // at the address the kernel picks. The descriptor is only used for the call.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                file_offset,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let map = NonNull::new(addr.cast::<u8>()).ok_or_else(|| invalid("mapped at 0"))?;
        Ok(FileMapping {
            map,
            map_len,
            offset,
            len,
        })
    }

    /// Bytes mapped (before rounding up to pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the range is empty (never: [`FileMapping::map`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file offset the mapping starts at.
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// Where the mapping starts.
    pub(crate) fn ptr(&self) -> NonNull<u8> {
        self.map
    }

    /// Whether every page of the range is in the page cache (`mincore(2)`, which asks the page
    /// cache for a shared file mapping and reads nothing). `false` where the kernel cannot say.
    pub fn all_cached(&self) -> bool {
        let pages = self.map_len / page_size();
        let mut vec = vec![0u8; pages];
        // SAFETY: `[map, map + map_len)` is this mapping; `vec` holds one byte per page.
        let rc = unsafe { libc::mincore(self.map.as_ptr().cast(), self.map_len, vec.as_mut_ptr()) };
        rc == 0 && vec.iter().all(|v| v & 1 == 1)
    }
}

impl fmt::Debug for FileMapping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileMapping")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for FileMapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, of `map_len` bytes; whoever pinned it unpinned it
        // first (`PinnedFileRange`'s drop), and nothing reads it.
        unsafe { libc::munmap(self.map.as_ptr().cast(), self.map_len) };
    }
}

// ---------------------------------------------------------------------------------------------
// Descriptors a forked child gives up: ForkReleased.
//
// A child made by `fork(2)` without `exec` (a server's worker, Python's `multiprocessing`)
// inherits every descriptor, close-on-exec or not. For a listening socket that means the child
// keeps the socket's name bound after its parent closed its own descriptor: nobody accepts
// there, and the parent cannot bind the name again until the child exits. A `pthread_atfork`
// child hook swaps each registered descriptor for an unbound socket as the child starts, so the
// number stays valid for whatever owns it there, and names nothing.
//
// The registry is a fixed table guarded by a spin lock that the fork's prepare hook takes: a
// descriptor is either registered and open, or unregistered and closed, in every child, because
// [`ForkReleased`]'s drop clears the slot and closes the descriptor under the same lock.
//

/// How many descriptors can be registered at once: a process serves its statistics on two
/// sockets, and a few more spare.
pub const FORK_RELEASED_SLOTS: usize = 16;

/// Held while the table changes, and by a fork from its prepare hook to the end of the fork.
static LOCK: AtomicBool = AtomicBool::new(false);
/// Registered descriptors (-1: a free slot).
static HELD: [AtomicI32; FORK_RELEASED_SLOTS] = [const { AtomicI32::new(-1) }; FORK_RELEASED_SLOTS];
/// For each registered descriptor, the unbound socket a child puts in its place.
static SPARE: [AtomicI32; FORK_RELEASED_SLOTS] =
    [const { AtomicI32::new(-1) }; FORK_RELEASED_SLOTS];

fn lock() {
    while LOCK
        .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        std::thread::yield_now();
    }
}

fn unlock() {
    LOCK.store(false, Ordering::Release);
}

extern "C" fn before_fork() {
    lock();
}

extern "C" fn after_fork_in_parent() {
    unlock();
}

/// Runs in the child before `fork` returns there, so only async-signal-safe calls: `dup3`.
/// The table is emptied in the child: what it names there is released already, and the child
/// may close those numbers and reuse them for files a later fork must not touch.
extern "C" fn after_fork_in_child() {
    for (held, spare) in HELD.iter().zip(&SPARE) {
        let (fd, spare) = (
            held.swap(-1, Ordering::Relaxed),
            spare.swap(-1, Ordering::Relaxed),
        );
        if fd < 0 || spare < 0 {
            continue;
        }
        // SAFETY: both numbers are open in the child (the table and the descriptor table were
        // copied together under the lock), and `fd` is a registered descriptor its owner gave up
        // to the table until it deregisters, which a child never does.
        unsafe { replace_descriptor(spare, fd) };
    }
    unlock();
}

/// Whether the fork hooks are registered (once per process; the C library may refuse, out of
/// memory).
fn hooks_registered() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    // SAFETY: the child's hook makes only async-signal-safe calls (atomics and `dup3`).
    *REGISTERED.get_or_init(|| unsafe {
        register_fork_hooks(before_fork, after_fork_in_parent, after_fork_in_child)
    })
}

/// `value`, whose descriptor a child made by `fork(2)` gives up as it starts: there, its number
/// names an unbound Unix socket instead (an `accept` on it fails; dropping the value closes only
/// that). For a listening socket whose name only this process may answer (see the module's
/// docs). Dropped, it closes the descriptor in a way no concurrent fork can half see.
#[derive(Debug)]
pub struct ForkReleased<T: AsRawFd> {
    /// Closed (dropped) under the table's lock: after `drop` has taken it and cleared the slot,
    /// before `_unlock` lets it go.
    value: T,
    /// The table slot and the stand-in it names; `None` when the table was full or the hooks
    /// could not be registered (children then keep the descriptor).
    slot: Option<(usize, OwnedFd)>,
    /// The process whose table holds the slot: a forked child's copy of this value has none
    /// (the child's table was emptied as it started, and the slot may be another's there now).
    pid: u32,
    /// Dropped last of the fields: gives back the table's lock that `drop` takes.
    _unlock: Unlock,
}

/// Gives back the table's lock when dropped.
#[derive(Debug)]
struct Unlock;

impl Drop for Unlock {
    fn drop(&mut self) {
        unlock();
    }
}

impl<T: AsRawFd> ForkReleased<T> {
    /// Register `value`'s descriptor; see [`ForkReleased::released_in_children`] for whether it
    /// took.
    pub fn new(value: T) -> ForkReleased<T> {
        let slot = if hooks_registered() {
            unbound_socket().and_then(|spare| register(value.as_raw_fd(), spare))
        } else {
            None
        };
        ForkReleased {
            value,
            slot,
            pid: std::process::id(),
            _unlock: Unlock,
        }
    }

    /// Whether forked children give the descriptor up (false: the table was full, the C
    /// library refused the fork hooks, or this is a forked child's copy, released already).
    pub fn released_in_children(&self) -> bool {
        self.slot.is_some() && self.pid == std::process::id()
    }
}

fn register(fd: RawFd, spare: OwnedFd) -> Option<(usize, OwnedFd)> {
    lock();
    let free = HELD
        .iter()
        .position(|held| held.load(Ordering::Relaxed) < 0);
    if let Some(i) = free {
        SPARE[i].store(spare.as_raw_fd(), Ordering::Relaxed);
        HELD[i].store(fd, Ordering::Relaxed);
    }
    unlock();
    free.map(|i| (i, spare))
}

impl<T: AsRawFd> Deref for ForkReleased<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: AsRawFd> Drop for ForkReleased<T> {
    fn drop(&mut self) {
        lock();
        if let Some((i, _)) = &self.slot {
            if self.pid == std::process::id() {
                HELD[*i].store(-1, Ordering::Relaxed);
                SPARE[*i].store(-1, Ordering::Relaxed);
            }
        }
        // The fields drop next, in order: `value` (its descriptor closes), the stand-in, and last
        // `_unlock`, which gives the lock back.
    }
}

/// Fork a child that reports, in two bytes on a pipe, whether `fd` is bound to an address in it
/// and what `probe` answers there, then waits to be killed ([`kill_child`]); the child's pid and
/// the parent's end of the pipe. For the fork hook's tests.
#[cfg(test)]
pub(crate) fn fork_reporting(fd: RawFd, probe: fn() -> bool) -> (libc::pid_t, std::fs::File) {
    let mut ends = [-1; 2];
    // SAFETY: `ends` has room for the two descriptors pipe2 writes.
    let rc = unsafe { libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) };
    assert_eq!(rc, 0, "pipe2: {}", io::Error::last_os_error());
    // SAFETY: pipe2 succeeded: both numbers are new descriptors owned by nothing else.
    let (reader, writer) =
        unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
    let writer_fd = writer.as_raw_fd();
    // SAFETY: the child runs only async-signal-safe calls (prctl, getsockname, `probe`'s atomic
    // loads, write, pause) and never returns into the test harness; the parent goes on as usual.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: `address` and `len` are writable for the call; write reads two bytes of
        // `answer`; prctl and pause take no pointers. The child never leaves this block, and
        // dies with the test's thread if the test fails before it kills the child.
        unsafe {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            let mut address: libc::sockaddr_un = std::mem::zeroed();
            let mut len = std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t;
            let rc = libc::getsockname(
                fd,
                &mut address as *mut libc::sockaddr_un as *mut libc::sockaddr,
                &mut len,
            );
            let bound = rc == 0 && len as usize > std::mem::size_of::<libc::sa_family_t>();
            let answer = [u8::from(bound), u8::from(probe())];
            libc::write(writer_fd, answer.as_ptr().cast(), 2);
            loop {
                libc::pause();
            }
        }
    }
    drop(writer);
    (pid, std::fs::File::from(reader))
}

/// Kill and reap a child of [`fork_reporting`].
#[cfg(test)]
pub(crate) fn kill_child(pid: libc::pid_t) {
    // SAFETY: `pid` is our own child; waitpid reaps it so no zombie stays.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
}

/// `posix_fadvise(POSIX_FADV_DONTNEED)` of the whole file: the page cache may drop its clean
/// pages. For tests of what is cached.
#[cfg(test)]
pub(crate) fn advise_dont_need(fd: BorrowedFd<'_>) {
    // SAFETY: advice on an open descriptor; it reads and writes no memory of ours.
    unsafe { libc::posix_fadvise(fd.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::{descriptor_state, duplicate_descriptor, signal_ignored};

    #[test]
    fn an_ignored_signal_is_told_apart_from_a_handled_or_default_one() {
        // SIGWINCH: nothing else in the tests touches it.
        assert!(!signal_ignored(libc::SIGWINCH), "default at start");
        // SAFETY: SIG_IGN, then the default back: no handler code runs.
        unsafe { libc::signal(libc::SIGWINCH, libc::SIG_IGN) };
        assert!(signal_ignored(libc::SIGWINCH));
        // SAFETY: as above.
        unsafe { libc::signal(libc::SIGWINCH, libc::SIG_DFL) };
        assert!(!signal_ignored(libc::SIGWINCH));
        assert!(!signal_ignored(12345), "no such signal");
    }

    #[test]
    fn a_duplicate_is_the_same_open_file_with_the_same_access() {
        use std::os::unix::fs::OpenOptionsExt;
        assert_eq!(
            duplicate_descriptor(-1).unwrap_err().raw_os_error(),
            Some(libc::EBADF)
        );
        let dir = std::env::temp_dir().join(format!("hipfile-dup-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("f");
        std::fs::write(&path, b"abc").unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .custom_flags(libc::O_CLOEXEC)
            .open(&path)
            .unwrap();
        let dup = duplicate_descriptor(file.as_raw_fd()).unwrap();
        assert_ne!(dup.as_raw_fd(), file.as_raw_fd());
        let (mine, theirs) = (
            descriptor_state(dup.as_raw_fd()).unwrap(),
            descriptor_state(file.as_raw_fd()).unwrap(),
        );
        assert_eq!(mine, theirs, "same file, same access and flags");
        assert!(mine.readable && mine.writable && mine.append && !mine.direct);
        // SAFETY: F_GETFD on a descriptor this test owns.
        let fd_flags = unsafe { libc::fcntl(dup.as_raw_fd(), libc::F_GETFD) };
        assert_eq!(fd_flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        drop(file);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn fstat_answers_as_the_c_library_does() {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, [7u8; 5000]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let directory = std::fs::File::open(dir.path()).unwrap();
        let null = std::fs::File::open("/dev/null").unwrap();
        let path_only = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH)
            .open(&path)
            .unwrap();
        let fds = [
            file.as_raw_fd(),
            directory.as_raw_fd(),
            null.as_raw_fd(),
            path_only.as_raw_fd(),
        ];
        for fd in fds {
            let ours = fstat(fd).unwrap();
            let mut theirs = std::mem::MaybeUninit::<libc::stat>::zeroed();
            // SAFETY: `theirs` is a writable stat buffer for the duration of the call.
            assert_eq!(unsafe { libc::fstat(fd, theirs.as_mut_ptr()) }, 0);
            // SAFETY: the call succeeded and filled it.
            let theirs = unsafe { theirs.assume_init() };
            let fields = |st: &libc::stat| {
                (
                    st.st_dev,
                    st.st_ino,
                    st.st_mode,
                    st.st_nlink,
                    st.st_uid,
                    st.st_gid,
                    st.st_rdev,
                    st.st_size,
                    st.st_blksize,
                    st.st_blocks,
                )
            };
            assert_eq!(fields(&ours), fields(&theirs), "descriptor {fd}");
        }
        assert_eq!(ours_of(&file).st_size, 5000);
        assert_eq!(ours_of(&null).st_mode & libc::S_IFMT, libc::S_IFCHR);
        assert_eq!(fstat(-1).unwrap_err().raw_os_error(), Some(libc::EBADF));
    }

    fn ours_of(file: &std::fs::File) -> libc::stat {
        fstat(file.as_raw_fd()).unwrap()
    }
}

#[cfg(test)]
mod fork_tests {
    use super::*;
    use super::{fork_reporting, kill_child as kill};
    use std::io::Read;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};

    /// The tests fork and fill the table: one at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn serial() -> std::sync::MutexGuard<'static, ()> {
        SERIAL
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn name(tag: &str) -> SocketAddr {
        let name = format!("hipfile-hip-fork-test-{tag}-{}", std::process::id());
        SocketAddr::from_abstract_name(name.as_bytes()).unwrap()
    }

    /// Fork a child that reports, in two bytes on a pipe, whether `fd` is bound to an address in
    /// it and whether its table is empty, then waits to be killed; the child's pid and the
    /// parent's end of the pipe.
    fn fork_reporting_binding(fd: RawFd) -> (libc::pid_t, std::fs::File) {
        fork_reporting(fd, || {
            HELD.iter().all(|held| held.load(Ordering::Relaxed) < 0)
        })
    }

    #[test]
    fn a_forked_child_gives_a_released_listener_up_and_its_parent_can_bind_the_name_again() {
        let _serial = serial();
        let address = name("released");
        let listener = ForkReleased::new(UnixListener::bind_addr(&address).unwrap());
        assert!(listener.released_in_children());
        let (child, mut answer) = fork_reporting_binding(listener.as_raw_fd());
        let mut byte = [9u8; 2];
        let read = answer.read_exact(&mut byte);
        // The child still lives; the parent still listens on the name and is reached there.
        let reached = UnixStream::connect_addr(&address);
        drop(listener);
        let again = UnixListener::bind_addr(&address);
        kill(child);
        read.unwrap();
        assert_eq!(
            byte[0], 0,
            "in the child the number names an unbound socket"
        );
        assert_eq!(
            byte[1], 1,
            "the child's table is empty: a number it reuses is never touched by its own forks"
        );
        assert!(reached.is_ok(), "{reached:?}");
        assert!(again.is_ok(), "the name is free once the parent closed it");
    }

    #[test]
    fn a_forked_child_keeps_a_plain_listener_and_its_name() {
        let _serial = serial();
        // The behaviour the wrapper exists for, shown on a listener without it.
        let address = name("plain");
        let listener = UnixListener::bind_addr(&address).unwrap();
        let (child, mut answer) = fork_reporting_binding(listener.as_raw_fd());
        let mut byte = [9u8; 2];
        let read = answer.read_exact(&mut byte);
        drop(listener);
        let again = UnixListener::bind_addr(&address);
        kill(child);
        read.unwrap();
        assert_eq!(byte[0], 1, "the child holds the bound socket");
        assert_eq!(
            again.unwrap_err().kind(),
            std::io::ErrorKind::AddrInUse,
            "the child keeps the name after the parent closed it"
        );
    }

    #[test]
    fn slots_are_given_back_on_drop() {
        let _serial = serial();
        let taken: Vec<_> = (0..FORK_RELEASED_SLOTS)
            .map(|_| ForkReleased::new(unbound_socket().unwrap()))
            .collect();
        assert!(taken.iter().all(|t| t.released_in_children()));
        let one_more = ForkReleased::new(unbound_socket().unwrap());
        assert!(!one_more.released_in_children());
        drop(taken);
        drop(one_more);
        assert!(ForkReleased::new(unbound_socket().unwrap()).released_in_children());
    }
}
