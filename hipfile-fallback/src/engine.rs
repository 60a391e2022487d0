//! One staged transfer: a request cut into pieces that the caller and the IO workers pull until
//! none are left, each thread pipelining through the two halves of its staging lane.
//!
//! Reads, per thread: wait for the half's previous copy (its event), read the next piece into
//! it, queue the host-to-device copy on the lane's stream and record the half's event; the next
//! piece goes to the other half, so reading piece k+1 overlaps copying piece k. Writes run the
//! mirror image: queue the device-to-host copy of piece k+1, then wait for piece k's copy and
//! write it. Each thread ends with a synchronisation of its own stream (never the device).
//!
//! Correctness rules: EINTR is retried and short transfers are continued (`pread_full`,
//! `pwrite_full`); a read that comes up short marks end of file and the request returns the
//! bytes before it, and pieces past a known end of file copy nothing. Against a file truncated
//! and extended while one request runs, the pieces are not one atomic read: the count is always
//! an exact prefix of the file as read, but a piece past the final count that was copied before
//! another piece found the end of file leaves its bytes in the buffer past the count; the first failure stops every thread from taking new pieces and fails the
//! request with the bytes already moved reported, never a success.
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
//! tails) always use the buffered descriptor.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use hipfile_core::{
    pread_full, pwrite_append_full, pwrite_full, DioAlign, DirectIoPolicy, Error, ErrorKind,
    FileIo, IoFailure, IoOp, IoRequest,
};
use hipfile_hip::GpuRuntime;

use crate::staging::{Lane, StagingPool};
use crate::workers::IoWorkers;

/// How a request is cut and who works on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Bytes per piece (the last may be shorter).
    pub piece: usize,
    /// Number of pieces.
    pub pieces: usize,
    /// Workers offered the transfer besides the caller.
    pub helpers: usize,
}

impl Plan {
    /// Cut `size` bytes: requests up to `inline` bytes, or when only one thread may work, run on
    /// the caller alone in pieces of `chunk`; larger ones are spread over up to `threads` threads
    /// (caller included) in pieces between `min_piece` and `chunk`.
    pub fn new(size: usize, chunk: usize, min_piece: usize, inline: usize, threads: usize) -> Plan {
        let chunk = chunk.max(4096);
        let min_piece = min_piece.clamp(4096, chunk);
        let piece = if size <= inline || threads <= 1 {
            size.min(chunk)
        } else {
            let share = size.div_ceil(threads).next_multiple_of(min_piece);
            share.clamp(min_piece, chunk)
        }
        .max(1);
        let pieces = size.div_ceil(piece);
        let helpers = if size <= inline {
            0
        } else {
            pieces.min(threads).saturating_sub(1)
        };
        Plan {
            piece,
            pieces,
            helpers,
        }
    }

    /// The request-relative bytes of piece `k` of a plan for `size` bytes (`k < pieces`): the
    /// pieces tile `[0, size)` in order, all `piece` bytes long but the last.
    pub fn piece_range(&self, size: usize, k: usize) -> std::ops::Range<usize> {
        let start = k * self.piece;
        start..start + self.piece.min(size - start)
    }
}

/// Whether `len` bytes at file `offset` through host `address` meet the file's direct IO
/// alignment, so O_DIRECT may move them (the same rule as the direct path's).
pub fn direct_aligned(offset: u64, len: usize, address: usize, align: DioAlign) -> bool {
    let offset_align = u64::from(align.offset.max(1));
    offset % offset_align == 0
        && len as u64 % offset_align == 0
        && address % align.memory.max(1) as usize == 0
}

/// A request in flight, shared by the threads working on it.
pub struct Transfer {
    op: IoOp,
    device: i32,
    device_ptr: usize,
    size: usize,
    file_offset: u64,
    append: bool,
    plan: Plan,
    lane_chunk: usize,
    pinned_bound: usize,
    buffered: RawFd,
    direct: Option<RawFd>,
    offset_align: u64,
    align: DioAlign,
    policy: DirectIoPolicy,
    runtime: Arc<dyn GpuRuntime>,
    io: Arc<dyn FileIo>,
    pool: Arc<StagingPool>,
    next: AtomicUsize,
    failed: AtomicBool,
    failure: Mutex<Option<Error>>,
    moved: AtomicUsize,
    eof_at: AtomicU64,
    active: Mutex<usize>,
    idle: Condvar,
}

impl std::fmt::Debug for Transfer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transfer")
            .field("op", &self.op)
            .field("size", &self.size)
            .field("file_offset", &self.file_offset)
            .field("plan", &self.plan)
            .finish_non_exhaustive()
    }
}

/// What the staged engine needs besides the request.
#[derive(Clone, Debug)]
pub struct EngineParts {
    /// GPU runtime.
    pub runtime: Arc<dyn GpuRuntime>,
    /// File IO primitives.
    pub io: Arc<dyn FileIo>,
    /// Staging lanes.
    pub pool: Arc<StagingPool>,
}

impl Transfer {
    /// Plan `req` for at most `threads` threads. An appending write runs on the caller alone,
    /// piece after piece, so its bytes reach the end of the file in order.
    pub fn new(req: &IoRequest<'_>, parts: &EngineParts, threads: usize) -> Arc<Transfer> {
        let threads = if req.append { 1 } else { threads };
        let s = req.settings;
        let chunk = s.chunk_bytes();
        let plan = Plan::new(
            req.size,
            chunk,
            s.min_piece_bytes(),
            s.inline_bytes(),
            threads,
        );
        let align = req.file.dio_align();
        Arc::new(Transfer {
            op: req.op,
            device: req.device,
            device_ptr: req.device_ptr,
            size: req.size,
            file_offset: req.file_offset,
            append: req.append,
            plan,
            lane_chunk: chunk,
            pinned_bound: s.max_pinned_bytes(),
            buffered: req.file.buffered_fd().as_raw_fd(),
            direct: req.file.direct_fd().map(|fd| fd.as_raw_fd()),
            offset_align: u64::from(align.offset.max(1)),
            align,
            policy: s.direct_io,
            runtime: Arc::clone(&parts.runtime),
            io: Arc::clone(&parts.io),
            pool: Arc::clone(&parts.pool),
            next: AtomicUsize::new(0),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
            moved: AtomicUsize::new(0),
            eof_at: AtomicU64::new(u64::MAX),
            active: Mutex::new(0),
            idle: Condvar::new(),
        })
    }

    /// The plan.
    pub fn plan(&self) -> Plan {
        self.plan
    }

    /// Run the transfer on the calling thread and the offered workers; returns when every thread
    /// that took part has finished with the request's memory and descriptors.
    ///
    /// The caller must keep the registered file and the device memory of the request alive until
    /// this returns (the dispatcher does: it holds them for the whole call).
    pub fn run(self: &Arc<Self>, workers: &IoWorkers) -> Result<usize, IoFailure> {
        workers.offer(self, self.plan.helpers);
        self.participate(true);
        self.wait_for_helpers();
        let moved = self.moved.load(Ordering::Acquire);
        if let Some(error) = self
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            return Err(IoFailure::new(error, moved));
        }
        Ok(match self.op {
            IoOp::Write => self.size,
            IoOp::Read => match self.eof_at.load(Ordering::Acquire) {
                u64::MAX => self.size,
                eof => self.size.min(eof as usize),
            },
        })
    }

    /// Wait until every thread that joined has left: polling for [`crate::workers::STAY_AWAKE`]
    /// (the helpers of a small request finish within it, and a sleeping caller would add a
    /// wake-up to its latency), then sleeping.
    fn wait_for_helpers(&self) {
        let since = std::time::Instant::now();
        loop {
            let active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
            if *active == 0 {
                return;
            }
            if since.elapsed() >= crate::workers::STAY_AWAKE {
                let mut active = active;
                while *active > 0 {
                    active = self
                        .idle
                        .wait(active)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                return;
            }
            drop(active);
            std::thread::yield_now();
        }
    }

    /// Take part as a worker: only if a lane is free right away.
    pub fn join_as_worker(&self) {
        self.participate(false);
    }

    fn participate(&self, wait_for_lane: bool) {
        *self.active.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        // A panic must still count this thread out, or the caller would wait forever; the lane's
        // lease drains its stream while unwinding.
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.work(wait_for_lane)));
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => self.fail(e),
            Err(_) => self.fail(Error::new(
                ErrorKind::InternalError,
                "a staging thread panicked",
            )),
        }
        let mut active = self.active.lock().unwrap_or_else(PoisonError::into_inner);
        *active -= 1;
        if *active == 0 {
            self.idle.notify_all();
        }
    }

    fn fail(&self, e: Error) {
        let mut slot = self.failure.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(e);
        }
        self.failed.store(true, Ordering::Release);
    }

    /// The next piece to work on, if any is left and nothing failed.
    fn claim(&self) -> Option<usize> {
        if self.failed.load(Ordering::Acquire) {
            return None;
        }
        let k = self.next.fetch_add(1, Ordering::AcqRel);
        (k < self.plan.pieces && !self.failed.load(Ordering::Acquire)).then_some(k)
    }

    /// Request-relative offset and length of piece `k`.
    fn piece(&self, k: usize) -> (usize, usize) {
        let range = self.plan.piece_range(self.size, k);
        (range.start, range.len())
    }

    fn work(&self, wait_for_lane: bool) -> Result<(), Error> {
        // Nothing left: do not even take a lane (late workers, finished or failed transfers).
        if self.failed.load(Ordering::Acquire)
            || self.next.load(Ordering::Acquire) >= self.plan.pieces
        {
            return Ok(());
        }
        let Some(mut lane) = self.pool.take(
            self.device,
            self.lane_chunk,
            self.pinned_bound,
            wait_for_lane,
        )?
        else {
            return Ok(());
        };
        let result = match self.op {
            IoOp::Read => self.read_pieces(&mut lane),
            IoOp::Write => self.write_pieces(&mut lane),
        };
        // Copies may still be queued on an error path: the halves stay in use until they finish.
        // Waiting on the events first keeps the wait polite; the stream synchronisation then
        // returns at once and reports any failure of the queued work.
        let _ = (wait_for(lane.event(0)), wait_for(lane.event(1)));
        let drained = lane
            .stream()
            .synchronize()
            .map_err(|e| Error::hip(&e, "finishing staged copies"));
        result.and(drained)
    }

    fn read_pieces(&self, lane: &mut Lane) -> Result<(), Error> {
        let mut pending = [false; 2];
        let mut slot = 0;
        while let Some(k) = self.claim() {
            if pending[slot] {
                wait_for(lane.event(slot))?;
                pending[slot] = false;
            }
            let (start, len) = self.piece(k);
            let half = &mut lane.half_mut(slot)[..len];
            let got = self.read_piece(half, self.file_offset + start as u64)?;
            let src = half.as_ptr();
            if got < len {
                self.eof_at
                    .fetch_min(start as u64 + got as u64, Ordering::AcqRel);
            }
            // A piece that starts at or past an end of file another piece found moves nothing:
            // its bytes (the file grew again meanwhile) lie past the count the request returns.
            let got = if start as u64 >= self.eof_at.load(Ordering::Acquire) {
                0
            } else {
                got
            };
            if got > 0 {
                // SAFETY: the dispatcher validated [device_ptr, device_ptr + size) as device memory
                // of one allocation, and this piece lies inside it; the staging half stays untouched
                // until the half's event (recorded next) has completed. The lane's stream is a live
                // stream of this runtime: the pool that made it shares the engine's runtime.
                unsafe {
                    self.runtime.copy_to_device_async(
                        self.device_ptr + start,
                        src,
                        got,
                        lane.stream().handle(),
                    )
                }
                .map_err(|e| Error::hip(&e, "queuing a copy to the device"))?;
                lane.event(slot)
                    .record(lane.stream())
                    .map_err(|e| Error::hip(&e, "recording a copy event"))?;
                pending[slot] = true;
            }
            self.moved.fetch_add(got, Ordering::AcqRel);
            slot ^= 1;
        }
        Ok(())
    }

    fn write_pieces(&self, lane: &mut Lane) -> Result<(), Error> {
        let mut queued: Option<(usize, usize, usize)> = None;
        let mut slot = 0;
        while let Some(k) = self.claim() {
            let (start, len) = self.piece(k);
            let dst = lane.half_mut(slot).as_mut_ptr();
            // SAFETY: the device range was validated by the dispatcher; the half is free (its
            // previous piece was written out before this one was claimed) and is not read until
            // its event has completed. The lane's stream is a live stream of this runtime, as
            // above.
            unsafe {
                self.runtime.copy_from_device_async(
                    dst,
                    self.device_ptr + start,
                    len,
                    lane.stream().handle(),
                )
            }
            .map_err(|e| Error::hip(&e, "queuing a copy from the device"))?;
            lane.event(slot)
                .record(lane.stream())
                .map_err(|e| Error::hip(&e, "recording a copy event"))?;
            if let Some(previous) = queued.take() {
                self.write_out(lane, previous)?;
            }
            queued = Some((slot, start, len));
            slot ^= 1;
        }
        match queued {
            Some(last) => self.write_out(lane, last),
            None => Ok(()),
        }
    }

    fn write_out(
        &self,
        lane: &mut Lane,
        (slot, start, len): (usize, usize, usize),
    ) -> Result<(), Error> {
        wait_for(lane.event(slot))?;
        let half = &lane.half_mut(slot)[..len];
        self.write_piece(half, self.file_offset + start as u64)?;
        self.moved.fetch_add(len, Ordering::AcqRel);
        Ok(())
    }

    fn direct_fd_for(&self, offset: u64, buf: &[u8]) -> Option<BorrowedFd<'_>> {
        let fd = self.direct?;
        let aligned = direct_aligned(offset, buf.len(), buf.as_ptr() as usize, self.align);
        // SAFETY: the registered file owns this descriptor and outlives the transfer (see `run`).
        aligned.then(|| unsafe { BorrowedFd::borrow_raw(fd) })
    }

    fn buffered_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the registered file owns this descriptor and outlives the transfer (see `run`).
        unsafe { BorrowedFd::borrow_raw(self.buffered) }
    }

    fn read_piece(&self, buf: &mut [u8], offset: u64) -> Result<usize, Error> {
        let io = &*self.io;
        let len = buf.len();
        let context =
            |e: io::Error| Error::from_io(&e, format!("reading {len} bytes at offset {offset}"));
        let direct = match self.policy {
            DirectIoPolicy::Never => None,
            _ => self.direct_fd_for(offset, buf),
        };
        let Some(direct) = direct else {
            return pread_full(io, self.buffered_fd(), buf, offset).map_err(&context);
        };
        if self.policy == DirectIoPolicy::Auto {
            let buffered = match io.cached_pages(self.buffered_fd(), offset, len as u64) {
                Some(pages) => pages.mostly_cached(),
                None => match self.probe_cached(buf, offset) {
                    Probe::Read(n) => return Ok(n),
                    Probe::Failed(e) => return Err(context(e)),
                    Probe::Cached => true,
                    Probe::Cold => false,
                },
            };
            if buffered {
                return pread_full(io, self.buffered_fd(), buf, offset).map_err(&context);
            }
        }
        read_direct(
            io,
            direct,
            self.buffered_fd(),
            buf,
            offset,
            self.offset_align,
        )
        .map_err(context)
    }

    /// Where `cachestat` cannot say, find out with `RWF_NOWAIT` reads whether `buf`'s range is
    /// cached, reading it when it is.
    fn probe_cached(&self, buf: &mut [u8], offset: u64) -> Probe {
        let io = &*self.io;
        match io.pread_cached(self.buffered_fd(), buf, offset) {
            Ok(n) if n == buf.len() || n == 0 => Probe::Read(n),
            Ok(n) => match pread_full(io, self.buffered_fd(), &mut buf[n..], offset + n as u64) {
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
        matches!(self.io.pread_cached(self.buffered_fd(), &mut buf[PAGE..end], offset + PAGE as u64), Ok(n) if n > 0)
    }

    fn write_piece(&self, buf: &[u8], offset: u64) -> Result<(), Error> {
        let io = &*self.io;
        if self.append {
            return pwrite_append_full(io, self.buffered_fd(), buf)
                .map_err(|e| Error::from_io(&e, format!("appending {} bytes", buf.len())));
        }
        let direct = match self.policy {
            DirectIoPolicy::Always => self.direct_fd_for(offset, buf),
            _ => None,
        };
        match direct {
            Some(fd) => write_direct(io, fd, self.buffered_fd(), buf, offset, self.offset_align),
            None => pwrite_full(io, self.buffered_fd(), buf, offset),
        }
        .map_err(|e| {
            Error::from_io(
                &e,
                format!("writing {} bytes at offset {offset}", buf.len()),
            )
        })
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

/// Wait for a staged copy by polling its event and yielding the core between polls, unless
/// `HIPFILE_EVENT_WAIT=sync` asks for the runtime's own wait. GPU runtimes spin in their wait
/// calls; with as many IO threads as cores, a spinning waiter takes the core a reader needs.
fn wait_for(event: &hipfile_hip::OwnedEvent) -> Result<(), Error> {
    static RUNTIME_WAIT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let runtime_wait = *RUNTIME_WAIT
        .get_or_init(|| std::env::var("HIPFILE_EVENT_WAIT").is_ok_and(|v| v == "sync"));
    let failed = |e: hipfile_hip::HipError| Error::hip(&e, "waiting for a staged copy");
    if runtime_wait {
        return event.synchronize().map_err(failed);
    }
    while !event.query().map_err(failed)? {
        std::thread::yield_now();
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_requests_stay_on_the_caller() {
        let p = Plan::new(4096, 4 << 20, 64 << 10, 64 << 10, 16);
        assert_eq!(
            p,
            Plan {
                piece: 4096,
                pieces: 1,
                helpers: 0
            }
        );
        let p = Plan::new(10 << 20, 4 << 20, 64 << 10, 64 << 10, 1);
        assert_eq!(
            p,
            Plan {
                piece: 4 << 20,
                pieces: 3,
                helpers: 0
            }
        );
    }

    #[test]
    fn mid_sized_requests_are_spread_in_small_pieces() {
        let p = Plan::new(1 << 20, 4 << 20, 64 << 10, 64 << 10, 16);
        assert_eq!(
            p,
            Plan {
                piece: 64 << 10,
                pieces: 16,
                helpers: 15
            }
        );
        let p = Plan::new(1 << 20, 4 << 20, 64 << 10, 64 << 10, 4);
        assert_eq!(
            p,
            Plan {
                piece: 256 << 10,
                pieces: 4,
                helpers: 3
            }
        );
    }

    #[test]
    fn large_requests_use_whole_chunks_on_every_thread() {
        let p = Plan::new(8 << 30, 4 << 20, 64 << 10, 64 << 10, 17);
        assert_eq!(p.piece, 4 << 20);
        assert_eq!(p.pieces, 2048);
        assert_eq!(p.helpers, 16);
        let odd = Plan::new((4 << 20) + 1, 4 << 20, 64 << 10, 64 << 10, 2);
        assert_eq!(odd.pieces, 2);
        assert_eq!(odd.helpers, 1);
    }

    #[test]
    fn the_smallest_piece_bounds_how_thin_a_request_is_spread() {
        let p = Plan::new(1 << 20, 4 << 20, 256 << 10, 64 << 10, 16);
        assert_eq!(
            p,
            Plan {
                piece: 256 << 10,
                pieces: 4,
                helpers: 3
            }
        );
    }
}
