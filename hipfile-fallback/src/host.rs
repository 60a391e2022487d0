//! The `host` backend: requests whose buffer is host memory (pinned, registered, or pageable
//! memory the runtime does not know), admitted by the setting `allow_system_memory`. No GPU is
//! involved: the bytes move with `pread`/`pwrite` straight between the file and the caller's
//! memory, through the file's O_DIRECT descriptor where the buffer address, the file offset and
//! the size meet the file's direct IO alignment, else through its buffered descriptor. The raw
//! address is handed only to the kernel ([`hipfile_hip::HostRange`]): a bad address is `EFAULT`.
//!
//! Ranked below the engines of device memory ([`priority::HOST`]): they decline host memory, and
//! this one declines device memory ([`Decline::DeviceMemory`]).
//!
//! Rules, as every backend's: reads are short only at end of file (short kernel reads are
//! continued, EINTR retried); writes move everything or fail (a write that makes no progress is
//! `ENOSPC`), reporting the bytes already written with the failure, never as success; an
//! appending request ([`hipfile_core::OwnedRequest::append`]) goes to the end of the file through
//! the buffered descriptor, whole, under the file's append lock. O_DIRECT cannot continue at an
//! unaligned offset, so the rest of a transfer that stopped off the alignment goes through the
//! buffered descriptor, and so does a write that runs past the process's file size limit (cut at
//! an unaligned limit, O_DIRECT would answer `EINVAL` where `pwrite` writes up to the limit and
//! answers `EFBIG`). A direct read stops at the last whole block below the end of the file (the
//! kernel would zero the caller's bytes past the end of the file in that block); the rest is read
//! through the buffered descriptor. Requests run inside `submit` on the caller's thread (queued
//! ones too).

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hipfile_core::{
    priority, Backend, BackendReport, Completion, Decline, Error, FsKind, IoFailure, IoOp, IoPath,
    IoRequest, ReportWhen, Submit,
};
use hipfile_hip::HostRange;
use rustix::io::Errno;

use crate::piece_io::direct_aligned;

hipfile_core::register_backend! {
    name: "host",
    priority: priority::HOST,
    path: IoPath::Host,
    init: |_ctx| Ok(Arc::new(Host::default())),
}

/// The engine of host memory.
#[derive(Debug, Default)]
pub struct Host {
    page_cache_bytes: AtomicU64,
    o_direct_bytes: AtomicU64,
}

impl Backend for Host {
    fn name(&self) -> &'static str {
        NAME
    }

    fn accepts(&self, req: &IoRequest<'_>) -> Result<(), Decline> {
        match req.memory.host_range() {
            Some(_) => Ok(()),
            None => Err(Decline::DeviceMemory),
        }
    }

    fn submit(&self, req: &IoRequest<'_>, _how: Submit) -> Completion {
        Completion::ready(self.run(req))
    }

    fn report(&self, _when: ReportWhen) -> BackendReport {
        BackendReport {
            counters: vec![
                (
                    "page_cache_bytes",
                    self.page_cache_bytes.load(Ordering::Relaxed),
                ),
                (
                    "o_direct_bytes",
                    self.o_direct_bytes.load(Ordering::Relaxed),
                ),
            ],
            ..BackendReport::default()
        }
    }
}

impl Host {
    fn run(&self, req: &IoRequest<'_>) -> Result<usize, IoFailure> {
        let Some(memory) = req.memory.host_range() else {
            let e = Error::new(
                hipfile_core::ErrorKind::HipMemoryTypeInvalid,
                "the host backend serves host memory only",
            );
            return Err(IoFailure::new(e, 0));
        };
        let counted = req.stats_level() >= 1;
        let mut step = Step {
            host: self,
            req,
            memory,
            done: 0,
            counted,
        };
        match req.op {
            IoOp::Read => step.read(),
            IoOp::Write if req.append => {
                let _appending = req.file.append_lock();
                step.write(true)
            }
            IoOp::Write => step.write(false),
        }
    }
}

/// Whether writing `len` bytes at `at` runs past the process's file size limit
/// (`RLIMIT_FSIZE`), which bounds regular files, not block devices.
fn crosses_file_size_limit(req: &IoRequest<'_>, at: u64, len: usize) -> bool {
    if req.file.fs().kind == FsKind::BlockDevice {
        return false;
    }
    rustix::process::getrlimit(rustix::process::Resource::Fsize)
        .current
        .is_some_and(|limit| at.saturating_add(len as u64) > limit)
}

/// One request as it goes: how much of its memory has moved.
struct Step<'a> {
    host: &'a Host,
    req: &'a IoRequest<'a>,
    memory: &'a HostRange,
    done: usize,
    counted: bool,
}

impl Step<'_> {
    /// What to move next, and the descriptor to move it through: O_DIRECT where it starts and
    /// ends aligned (and the write does not append), else the buffered one. A direct read covers
    /// only whole blocks below the end of the file as validation found it: the kernel fills the
    /// rest of a direct read's last block past the end of the file with zeros, and the caller's
    /// bytes past the bytes read must keep what they held, as `pread` leaves them.
    fn next(&self, op: IoOp, appending: bool) -> (HostRange, BorrowedFd<'_>, bool) {
        let size = self.memory.len();
        let rest = self
            .memory
            .slice(self.done, size - self.done)
            .expect("done <= size");
        let file = &self.req.file;
        let at = self.req.file_offset + self.done as u64;
        let align = file.dio_align();
        let direct_len = match op {
            // Past the process's file size limit the kernel cuts a write at the limit: O_DIRECT
            // would then refuse the unaligned rest with EINVAL, where `pwrite` writes up to the
            // limit and answers EFBIG. Such a write goes through the buffered descriptor.
            IoOp::Write if crosses_file_size_limit(self.req, at, rest.len()) => 0,
            IoOp::Write => rest.len(),
            IoOp::Read => {
                let below_end = self
                    .req
                    .file_stamp
                    .map_or(0, |stamp| stamp.size.saturating_sub(at));
                let block = u64::from(align.offset.max(1));
                let whole_blocks = below_end / block * block;
                usize::try_from(whole_blocks).map_or(rest.len(), |n| n.min(rest.len()))
            }
        };
        let direct = (!appending && direct_len > 0)
            .then(|| file.direct_fd())
            .flatten()
            .filter(|_| direct_aligned(at, direct_len, rest.ptr(), align));
        match direct {
            Some(fd) => (
                rest.slice(0, direct_len).expect("direct_len <= rest"),
                fd,
                true,
            ),
            None => (rest, file.buffered_fd(), false),
        }
    }

    fn moved(&mut self, n: usize, direct: bool) {
        self.done += n;
        if self.counted {
            let counter = if direct {
                &self.host.o_direct_bytes
            } else {
                &self.host.page_cache_bytes
            };
            counter.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    fn failed(&self, e: &io::Error, what: &str) -> IoFailure {
        let at = self.req.file_offset + self.done as u64;
        IoFailure::new(
            Error::from_io(e, format!("{what} at file offset {at}")),
            self.done,
        )
    }

    /// Read until the memory is full or the file ends.
    fn read(&mut self) -> Result<usize, IoFailure> {
        while self.done < self.memory.len() {
            let (rest, fd, direct) = self.next(IoOp::Read, false);
            let at = self.req.file_offset + self.done as u64;
            match rest.read_from(fd, at) {
                Ok(0) => break,
                Ok(n) => self.moved(n, direct),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.failed(&e, "reading into host memory")),
            }
        }
        Ok(self.done)
    }

    /// Write all of the memory, at the request's offset or, `appending`, at the end of the file.
    fn write(&mut self, appending: bool) -> Result<usize, IoFailure> {
        while self.done < self.memory.len() {
            let (rest, fd, direct) = self.next(IoOp::Write, appending);
            let at = (!appending).then(|| self.req.file_offset + self.done as u64);
            match rest.write_to(fd, at) {
                Ok(0) => {
                    let e = io::Error::from_raw_os_error(Errno::NOSPC.raw_os_error());
                    return Err(self.failed(&e, "writing from host memory"));
                }
                Ok(n) => self.moved(n, direct),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(self.failed(&e, "writing from host memory")),
            }
        }
        Ok(self.done)
    }
}
