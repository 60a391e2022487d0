//! [`ScriptedIo`]: a [`FileIo`] decorator that fails or shortens chosen calls.

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use hipfile_core::{FileIo, PosixIo};
use rustix::io::Errno;

use super::Trigger;

/// Which positional call a rule is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileOp {
    /// `pread`.
    Pread,
    /// `pwrite`.
    Pwrite,
}

/// What a scripted call does instead of (or on top of) the real one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoFault {
    /// Return this errno without transferring anything (`Errno::INTR` simulates a signal).
    Fail(Errno),
    /// Transfer at most this many bytes (a short read or write); the call itself is real.
    Short(usize),
}

/// One fault that fired: which call, its 1-based number among calls of its kind, what happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FiredIoFault {
    /// The kind of call.
    pub op: FileOp,
    /// Its number among calls of that kind on this [`ScriptedIo`], counting from 1.
    pub call: u64,
    /// The fault applied.
    pub fault: IoFault,
}

#[derive(Clone, Copy, Debug)]
struct Rule {
    op: FileOp,
    trigger: Trigger,
    fault: IoFault,
}

/// A [`FileIo`] that runs a script of faults over another one (by default [`PosixIo`]).
///
/// Calls are numbered per kind from 1, across every thread and descriptor using this value; the
/// first rule matching a call's kind and number applies. Counters are atomic, so the script is
/// deterministic for a single-threaded caller and still exact in its counts for many.
///
/// ```
/// use hipfile_core::FileIo;
/// use hipfile_testkit::faults::{Errno, FileOp, IoFault, ScriptedIo};
/// use std::os::fd::AsFd;
///
/// let file = tempfile::tempfile()?;
/// let io = ScriptedIo::new().fail_pwrite(2, Errno::NOSPC).short_pwrite(3, 2);
/// assert_eq!(io.pwrite(file.as_fd(), b"abcd", 0)?, 4);
/// assert_eq!(io.pwrite(file.as_fd(), b"abcd", 0).unwrap_err().raw_os_error(), Some(Errno::NOSPC.raw_os_error()));
/// assert_eq!(io.pwrite(file.as_fd(), b"abcd", 0)?, 2);
/// assert_eq!(io.calls(FileOp::Pwrite), 3);
/// assert_eq!(io.fired().len(), 2);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct ScriptedIo {
    inner: Arc<dyn FileIo>,
    rules: Vec<Rule>,
    preads: AtomicU64,
    pwrites: AtomicU64,
    fired: Mutex<Vec<FiredIoFault>>,
}

impl Default for ScriptedIo {
    fn default() -> Self {
        ScriptedIo::new()
    }
}

impl fmt::Debug for ScriptedIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedIo")
            .field("inner", &self.inner)
            .field("rules", &self.rules)
            .field("preads", &self.preads)
            .field("pwrites", &self.pwrites)
            .finish_non_exhaustive()
    }
}

impl ScriptedIo {
    /// An empty script over `pread(2)`/`pwrite(2)`.
    pub fn new() -> Self {
        ScriptedIo::wrapping(Arc::new(PosixIo))
    }

    /// An empty script over `inner`.
    pub fn wrapping(inner: Arc<dyn FileIo>) -> Self {
        ScriptedIo {
            inner,
            rules: Vec::new(),
            preads: AtomicU64::new(0),
            pwrites: AtomicU64::new(0),
            fired: Mutex::new(Vec::new()),
        }
    }

    /// Add a rule: calls of kind `op` selected by `trigger` suffer `fault`. Earlier rules win.
    pub fn rule(mut self, op: FileOp, trigger: Trigger, fault: IoFault) -> Self {
        self.rules.push(Rule { op, trigger, fault });
        self
    }

    /// The `n`th pread (1-based) fails with `errno`.
    pub fn fail_pread(self, n: u64, errno: Errno) -> Self {
        self.rule(FileOp::Pread, Trigger::Nth(n), IoFault::Fail(errno))
    }

    /// The `n`th pwrite (1-based) fails with `errno`.
    pub fn fail_pwrite(self, n: u64, errno: Errno) -> Self {
        self.rule(FileOp::Pwrite, Trigger::Nth(n), IoFault::Fail(errno))
    }

    /// Every pread from the `n`th on fails with `errno`.
    pub fn fail_preads_from(self, n: u64, errno: Errno) -> Self {
        self.rule(FileOp::Pread, Trigger::From(n), IoFault::Fail(errno))
    }

    /// Every pwrite from the `n`th on fails with `errno`.
    pub fn fail_pwrites_from(self, n: u64, errno: Errno) -> Self {
        self.rule(FileOp::Pwrite, Trigger::From(n), IoFault::Fail(errno))
    }

    /// The `n`th pread transfers at most `max` bytes.
    pub fn short_pread(self, n: u64, max: usize) -> Self {
        self.rule(FileOp::Pread, Trigger::Nth(n), IoFault::Short(max))
    }

    /// The `n`th pwrite transfers at most `max` bytes.
    pub fn short_pwrite(self, n: u64, max: usize) -> Self {
        self.rule(FileOp::Pwrite, Trigger::Nth(n), IoFault::Short(max))
    }

    /// Every pread from the `n`th on transfers at most `max` bytes.
    pub fn short_preads_from(self, n: u64, max: usize) -> Self {
        self.rule(FileOp::Pread, Trigger::From(n), IoFault::Short(max))
    }

    /// Every pwrite from the `n`th on transfers at most `max` bytes.
    pub fn short_pwrites_from(self, n: u64, max: usize) -> Self {
        self.rule(FileOp::Pwrite, Trigger::From(n), IoFault::Short(max))
    }

    /// The `n`th pread is interrupted (EINTR) before transferring anything.
    pub fn interrupt_pread(self, n: u64) -> Self {
        self.fail_pread(n, Errno::INTR)
    }

    /// The `n`th pwrite is interrupted (EINTR) before transferring anything.
    pub fn interrupt_pwrite(self, n: u64) -> Self {
        self.fail_pwrite(n, Errno::INTR)
    }

    /// Calls of kind `op` made so far (faulted ones included).
    pub fn calls(&self, op: FileOp) -> u64 {
        self.counter(op).load(Ordering::Acquire)
    }

    /// The faults that fired, in the order they fired.
    pub fn fired(&self) -> Vec<FiredIoFault> {
        self.fired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn counter(&self, op: FileOp) -> &AtomicU64 {
        match op {
            FileOp::Pread => &self.preads,
            FileOp::Pwrite => &self.pwrites,
        }
    }

    /// Number this call and find the fault it suffers, logging it.
    fn next_call(&self, op: FileOp) -> Option<IoFault> {
        let call = self.counter(op).fetch_add(1, Ordering::AcqRel) + 1;
        let fault = self
            .rules
            .iter()
            .find(|r| r.op == op && r.trigger.matches(call))?
            .fault;
        self.fired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(FiredIoFault { op, call, fault });
        Some(fault)
    }
}

fn errno_error(errno: Errno) -> io::Error {
    io::Error::from_raw_os_error(errno.raw_os_error())
}

impl FileIo for ScriptedIo {
    fn pread(&self, fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        match self.next_call(FileOp::Pread) {
            None => self.inner.pread(fd, buf, offset),
            Some(IoFault::Fail(errno)) => Err(errno_error(errno)),
            Some(IoFault::Short(max)) => {
                let len = short_len(fd, buf.len(), max);
                self.inner.pread(fd, &mut buf[..len], offset)
            }
        }
    }

    fn pwrite(&self, fd: BorrowedFd<'_>, buf: &[u8], offset: u64) -> io::Result<usize> {
        match self.next_call(FileOp::Pwrite) {
            None => self.inner.pwrite(fd, buf, offset),
            Some(IoFault::Fail(errno)) => Err(errno_error(errno)),
            Some(IoFault::Short(max)) => {
                let len = short_len(fd, buf.len(), max);
                self.inner.pwrite(fd, &buf[..len], offset)
            }
        }
    }

    /// Appending writes are writes: they are numbered with the pwrites and suffer their faults.
    fn pwrite_append(&self, fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
        match self.next_call(FileOp::Pwrite) {
            None => self.inner.pwrite_append(fd, buf),
            Some(IoFault::Fail(errno)) => Err(errno_error(errno)),
            Some(IoFault::Short(max)) => {
                let len = short_len(fd, buf.len(), max);
                self.inner.pwrite_append(fd, &buf[..len])
            }
        }
    }
}

/// Block size a short transfer keeps on an O_DIRECT descriptor.
const DIRECT_BLOCK: usize = 4096;

/// The length of a scripted short transfer of `len` bytes capped at `max`. On an O_DIRECT
/// descriptor the kernel only ever transfers whole blocks short of the end of the file (and an
/// unaligned length would be refused with EINVAL), so there the cap is rounded down to whole
/// 4 KiB blocks, keeping at least one.
fn short_len(fd: BorrowedFd<'_>, len: usize, max: usize) -> usize {
    let direct = rustix::fs::fcntl_getfl(fd).is_ok_and(|f| f.contains(rustix::fs::OFlags::DIRECT));
    if direct && len >= DIRECT_BLOCK {
        len.min((max / DIRECT_BLOCK).max(1) * DIRECT_BLOCK)
    } else {
        len.min(max)
    }
}
