//! One staged transfer: a request cut into pieces that the threads working on it pull until none
//! are left, each thread pipelining through the two halves of its staging lane.
//!
//! Reads, per thread: read the next piece into a free half, queue the host-to-device copy of
//! that half (the lane waits for a half's previous copy before handing it out again); the next
//! piece goes to the other half, so reading piece k+1 overlaps copying piece k. Writes run the
//! mirror image: queue the device-to-host copy of piece k+1, then wait for piece k's copy and
//! write it. Each thread ends by draining its own lane (never the device).
//!
//! Who works: a synchronous request runs on its caller, with up to `helpers` IO workers
//! ([`hipfile_core::workers`]) joining; a queued request runs on the workers alone until its submitter
//! waits, and then the waiter joins in.
//!
//! Correctness rules: a read that comes up short marks end of file and the request returns the
//! bytes before it, and pieces past a known end of file copy nothing. Against a file truncated
//! and extended while one request runs, the pieces are not one atomic read: the count is always
//! an exact prefix of the file as read, but a piece past the final count that was copied before
//! another piece found the end of file leaves its bytes in the buffer past the count. The first
//! failure stops every thread from taking new pieces and fails the request with the bytes
//! already moved reported, never a success. How each piece reaches the file is
//! [`crate::direct`]'s.
//!
//! Why a lane per thread and not one staging area the threads share: a request's first copy waits
//! for one round of piece reads, and its copies are as large as its pieces, so a shared ring of
//! 4 MiB slots that several threads fill in parts (one copy per slot, all on one stream, the
//! first one queued after ~0.2 ms instead of ~0.3) looked like it would speed up mid-sized
//! requests. Measured on the H200 (8 GiB hot file, 10 threads), it did not: 64 MiB requests ran
//! at 30-32 GB/s against 33-34 with lanes, 1 GiB requests at 48-50 against 50; with its parts of
//! 512 KiB each thread read at ~4.6 GB/s and the slots' copies trailed the reads by ~0.5 ms at
//! the end of each 64 MiB request. The host's memory bandwidth, shared by the reads into staging
//! and the copies out of it, bounds both layouts alike.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};

use hipfile_core::workers::{IoWorkers, Job, STAY_AWAKE};
use hipfile_core::{
    Doorbell, Error, ErrorKind, FileIo, IoFailure, IoOp, IoOutcome, IoRequest, PendingIo, Settings,
};
use hipfile_hip::{DeviceRange, StagingLane};

use crate::direct::{FilePaths, PieceIo};
use crate::pins::{LivePins, PagePins, PinView, Running};
use crate::plan::Plan;
use crate::staging::StagingPool;

/// What the staged engine needs besides the request.
#[derive(Clone, Debug)]
pub struct EngineParts {
    /// File IO primitives.
    pub io: Arc<dyn FileIo>,
    /// Staging lanes whose streams are ordered with the legacy default stream (synchronous and
    /// batch requests: their copies wait for the application's earlier work there, as
    /// upstream's synchronous copies do).
    pub pool: Arc<StagingPool>,
    /// Staging lanes on independent streams, for stream-ordered requests
    /// ([`IoRequest::stream_ordered`]): the application's stream waits for them, so their
    /// copies must never wait for it. A pool of its own, with its own bound, so a stream-ordered
    /// request never waits for a lane held by a synchronous request that waits behind the
    /// application's stream.
    ///
    /// [`IoRequest::stream_ordered`]: hipfile_core::OwnedRequest::stream_ordered
    pub stream_pool: Arc<StagingPool>,
    /// Bytes moved through the page cache and with O_DIRECT (counted for requests whose
    /// statistics level is 1 or more).
    pub file_paths: Arc<FilePaths>,
    /// The page cache pinned for copies straight out of it ([`crate::pins`]).
    pub pins: Arc<PagePins>,
}

/// The lanes a transfer's threads take from the pool.
#[derive(Debug)]
struct LaneSpec {
    pool: Arc<StagingPool>,
    device: i32,
    chunk: usize,
    pinned_bound: usize,
}

/// The pieces of a transfer not claimed yet, `front..back`, in one word: threads take pieces to
/// stage from the front; a thread that finds the last ones held by windows pinned while the
/// transfer runs takes those from the back ([`Transfer::claim_pinned_tail`]). One word, so no
/// piece is ever claimed twice.
#[derive(Debug, Default)]
struct Claims(AtomicU64);

/// The front of a transfer withdrawn before any piece was claimed.
const WITHDRAWN: u32 = u32::MAX;

impl Claims {
    /// `0..pieces` (fewer than [`crate::plan::MAX_PIECES`]).
    fn new(pieces: usize) -> Claims {
        Claims(AtomicU64::new(Self::pack(0, pieces)))
    }

    fn pack(front: usize, back: usize) -> u64 {
        (front as u64 & 0xffff_ffff) | ((back as u64) << 32)
    }

    /// `(front, back)`.
    fn get(&self) -> (usize, usize) {
        let v = self.0.load(Ordering::Acquire);
        ((v & 0xffff_ffff) as usize, (v >> 32) as usize)
    }

    /// Whether the transfer was withdrawn before any piece was claimed.
    fn withdrawn(&self) -> bool {
        self.get().0 == WITHDRAWN as usize
    }

    /// Whether every piece was claimed (or the transfer withdrawn).
    fn exhausted(&self) -> bool {
        let (front, back) = self.get();
        front >= back
    }

    /// The next piece from the front, if any is left.
    fn front(&self) -> Option<usize> {
        let v = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                let (front, back) = (v & 0xffff_ffff, v >> 32);
                (front < back).then_some(v + 1)
            })
            .ok()?;
        Some((v & 0xffff_ffff) as usize)
    }

    /// The pieces from `from` to the back, if the back is still `back` and the front has not
    /// passed them all: those from the front on.
    fn tail(&self, from: usize, back: usize) -> Option<Range<usize>> {
        let mut claimed = None;
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| {
                let (front, now) = ((v & 0xffff_ffff) as usize, (v >> 32) as usize);
                let start = from.max(front);
                if now != back || start >= back {
                    return None;
                }
                claimed = Some(start..back);
                Some(Self::pack(front, start))
            })
            .ok()?;
        claimed
    }

    /// Withdraw the transfer if no piece was claimed.
    fn withdraw(&self, pieces: usize) -> bool {
        self.0
            .compare_exchange(
                Self::pack(0, pieces),
                Self::pack(WITHDRAWN as usize, pieces),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
            .is_ok()
    }
}

/// How far a transfer has come, shared by its threads.
#[derive(Debug, Default)]
struct Progress {
    /// The pieces not claimed yet.
    claims: Claims,
    /// Set by the first failure: no thread claims another piece.
    failed: AtomicBool,
    failure: Mutex<Option<Error>>,
    /// Bytes moved so far.
    moved: AtomicUsize,
    /// The request-relative end of file a short read found (`u64::MAX`: none).
    eof_at: AtomicU64,
    /// The threads working on the transfer now, and the file they work on.
    crew: Mutex<Crew>,
    idle: Condvar,
}

/// Who works on a transfer, and what they need of the file.
#[derive(Debug, Default)]
struct Crew {
    /// Threads working on the transfer now.
    active: usize,
    /// Waiters asleep on `idle` until `active` is 0: the last thread out wakes them only when
    /// there are some (a wake-up is a system call even when nobody waits).
    sleeping: usize,
    /// The file side, for as long as a piece may still move. The last thread out of a finished
    /// transfer lets it go under the lock the waiter reads `active` under, so once a waiter
    /// sees the transfer finished, no thread of the engine holds the file's descriptors: a
    /// worker that still holds the transfer (a late helper, an offer not taken yet) holds only
    /// what is left of it. Deregistering the file, or closing the driver, closes them at once.
    file: Option<Arc<PieceIo>>,
}

/// A request in flight, shared by the threads working on it.
#[derive(Debug)]
pub struct Transfer {
    /// Direction.
    op: IoOp,
    /// The device memory of the request, exactly its bytes.
    memory: DeviceRange,
    /// Where in the file the request starts.
    file_offset: u64,
    plan: Plan,
    lanes: LaneSpec,
    progress: Progress,
    /// Rung when a queued transfer finishes.
    doorbell: Option<Doorbell>,
    /// The pinned page-cache windows a read's pieces are copied out of; let go of when the
    /// transfer finished (its submitter may hold it long after).
    pinned: RwLock<PinView>,
    /// For a read some of whose windows wait to be pinned: the windows pinned while it runs.
    live: Option<Arc<LivePins>>,
    /// Marks the transfer at work for the pinning thread until it finished or was withdrawn.
    running: Mutex<Option<Running>>,
    /// Where bytes copied out of pinned windows are counted (statistics on).
    pins: Option<Arc<PagePins>>,
}

impl Transfer {
    /// Plan `req` for at most `threads` threads. An appending write runs on one thread, piece
    /// after piece, so its bytes reach the end of the file in order; so does a read that pinned
    /// page-cache windows hold whole (its copies need no thread but the one queuing them).
    pub fn new(req: &IoRequest<'_>, parts: &EngineParts, threads: usize) -> Arc<Transfer> {
        let mut pinned = parts.pins.view(req);
        let live = pinned.take_live();
        // Every byte, those past the end of the file too (the page that holds the last byte):
        // a piece the windows do not hold is staged, and a staged piece is at most a chunk.
        let end = req.file_offset.saturating_add(req.size() as u64);
        let all_pinned = !pinned.is_empty() && pinned.covers_all(req.file_offset..end);
        let threads = if req.append || all_pinned {
            1
        } else if live.is_some() {
            live_threads(threads)
        } else {
            threads
        };
        let s: &Settings = &req.settings;
        let chunk = s.chunk_bytes();
        // Copies out of pinned windows are queued one per window the piece lies in: a read
        // they cover whole is one piece.
        let plan = Plan::new(
            req.size(),
            if all_pinned {
                req.size().max(chunk)
            } else {
                chunk
            },
            s.min_piece_bytes(),
            s.inline_bytes(),
            threads,
        );
        Arc::new(Transfer {
            op: req.op,
            memory: req.memory.clone(),
            file_offset: req.file_offset,
            plan,
            lanes: LaneSpec {
                pool: Arc::clone(if req.stream_ordered {
                    &parts.stream_pool
                } else {
                    &parts.pool
                }),
                device: req.device(),
                chunk,
                pinned_bound: s.max_pinned_bytes(),
            },
            progress: Progress {
                claims: Claims::new(plan.pieces),
                eof_at: AtomicU64::new(u64::MAX),
                crew: Mutex::new(Crew {
                    active: 0,
                    sleeping: 0,
                    file: Some(Arc::new({
                        let file = PieceIo::new(
                            Arc::clone(&parts.io),
                            Arc::clone(&req.file),
                            s.direct_io,
                            req.append,
                        );
                        if req.stats_level() >= 1 {
                            file.counted_in(Arc::clone(&parts.file_paths))
                        } else {
                            file
                        }
                    })),
                }),
                ..Progress::default()
            },
            doorbell: req.doorbell.clone(),
            pinned: RwLock::new(pinned),
            live,
            running: Mutex::new(Some(parts.pins.running())),
            pins: (req.stats_level() >= 1).then(|| Arc::clone(&parts.pins)),
        })
    }

    /// The plan.
    pub fn plan(&self) -> Plan {
        self.plan
    }

    /// Run the transfer on the calling thread and the offered workers; returns when every thread
    /// that took part has finished with the request's memory and descriptors.
    pub fn run(self: &Arc<Self>, workers: &IoWorkers<Transfer>) -> IoOutcome {
        workers.offer(self, self.plan.helpers, false);
        self.participate(true);
        self.wait_for_helpers();
        self.outcome()
    }

    /// Hand the transfer to the workers alone (one of them must work on it, the others help),
    /// for a submitter that goes on with other work: the answer is its pending completion.
    pub fn queue(self: &Arc<Self>, workers: &IoWorkers<Transfer>) -> Box<dyn PendingIo> {
        workers.offer(self, self.plan.helpers + 1, true);
        Box::new(Queued(Arc::clone(self)))
    }

    /// The outcome, once no thread works on the transfer any more.
    fn outcome(&self) -> IoOutcome {
        let p = &self.progress;
        if p.claims.withdrawn() {
            return Ok(0);
        }
        let moved = p.moved.load(Ordering::Acquire);
        if let Some(error) = p
            .failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            return Err(IoFailure::new(error, moved));
        }
        let size = self.memory.len();
        Ok(match self.op {
            IoOp::Write => size,
            IoOp::Read => match p.eof_at.load(Ordering::Acquire) {
                u64::MAX => size,
                eof => size.min(eof as usize),
            },
        })
    }

    /// Whether every piece is done (or the transfer failed) and no thread works on it.
    fn is_finished(&self) -> bool {
        self.crew().active == 0 && self.nothing_left()
    }

    /// Whether no piece is left to claim: all were claimed, one failed, or the transfer was
    /// withdrawn.
    fn nothing_left(&self) -> bool {
        let p = &self.progress;
        p.failed.load(Ordering::Acquire) || p.claims.exhausted()
    }

    fn crew(&self) -> std::sync::MutexGuard<'_, Crew> {
        self.progress
            .crew
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Wait until every thread that joined has left: polling for [`STAY_AWAKE`] (the helpers of
    /// a small request finish within it, and a sleeping caller would add a wake-up to its
    /// latency), then sleeping.
    fn wait_for_helpers(&self) {
        let since = std::time::Instant::now();
        loop {
            let crew = self.crew();
            if crew.active == 0 {
                return;
            }
            if since.elapsed() >= STAY_AWAKE {
                let mut crew = crew;
                crew.sleeping += 1;
                while crew.active > 0 {
                    crew = self
                        .progress
                        .idle
                        .wait(crew)
                        .unwrap_or_else(PoisonError::into_inner);
                }
                crew.sleeping -= 1;
                return;
            }
            drop(crew);
            std::thread::yield_now();
        }
    }

    fn participate(&self, wait_for_lane: bool) {
        let file = {
            let mut crew = self.crew();
            // The transfer has finished and let the file go: nothing is left to do.
            let Some(file) = crew.file.clone() else {
                return;
            };
            crew.active += 1;
            file
        };
        // A panic must still count this thread out, or the waiter would wait forever; the
        // lane's lease drains its stream while unwinding.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.work(&file, wait_for_lane)
        }));
        drop(file);
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(e)) => self.fail(e),
            Err(_) => self.fail(Error::new(
                ErrorKind::InternalError,
                "a staging thread panicked",
            )),
        }
        let mut crew = self.crew();
        crew.active -= 1;
        if crew.active == 0 {
            let finished = self.nothing_left();
            if finished {
                crew.file = None;
            }
            if crew.sleeping > 0 {
                self.progress.idle.notify_all();
            }
            drop(crew);
            if finished {
                self.stop_running();
                self.ring();
            }
        }
    }

    /// The transfer no longer works: the pinning thread need not wait for it any more (its
    /// submitter may hold it long after).
    fn stop_running(&self) {
        // No copy out of the windows is in flight any more: every lane of the transfer drained.
        *self.pinned.write().unwrap_or_else(PoisonError::into_inner) = PinView::default();
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }

    fn ring(&self) {
        if let Some(doorbell) = &self.doorbell {
            doorbell.ring();
        }
    }

    /// Withdraw the transfer if no thread has claimed a piece of it.
    fn withdraw(&self) -> bool {
        let withdrawn = self.progress.claims.withdraw(self.plan.pieces);
        if !withdrawn {
            return false;
        }
        // With threads at work, the last one out lets the file go and rings.
        let mut crew = self.crew();
        if crew.active == 0 {
            crew.file = None;
            drop(crew);
            self.stop_running();
            self.ring();
        }
        true
    }

    fn fail(&self, e: Error) {
        let p = &self.progress;
        let mut slot = p.failure.lock().unwrap_or_else(PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(e);
        }
        p.failed.store(true, Ordering::Release);
    }

    /// The next piece to work on, if any is left, nothing failed and the transfer was not
    /// withdrawn.
    fn claim(&self) -> Option<usize> {
        let p = &self.progress;
        if p.failed.load(Ordering::Acquire) {
            return None;
        }
        let k = p.claims.front()?;
        (!p.failed.load(Ordering::Acquire)).then_some(k)
    }

    /// Request-relative offset and length of piece `k`.
    fn piece(&self, k: usize) -> (usize, usize) {
        let range = self.plan.piece_range(self.memory.len(), k);
        (range.start, range.len())
    }

    /// The device memory of `len` bytes at request-relative `start`.
    fn device_piece(&self, start: usize, len: usize) -> Result<DeviceRange, Error> {
        self.memory.slice(start, len).ok_or_else(|| {
            Error::new(
                ErrorKind::InternalError,
                "a staged piece outside the request",
            )
        })
    }

    fn work(&self, file: &PieceIo, wait_for_lane: bool) -> Result<(), Error> {
        let p = &self.progress;
        // Nothing left: do not even take a lane (late workers, finished or failed transfers).
        if p.failed.load(Ordering::Acquire) || p.claims.exhausted() {
            return Ok(());
        }
        let spec = &self.lanes;
        let Some(mut lane) =
            spec.pool
                .take(spec.device, spec.chunk, spec.pinned_bound, wait_for_lane)?
        else {
            return Ok(());
        };
        let result = match self.op {
            IoOp::Read => self.read_pieces(&mut lane, file),
            IoOp::Write => self.write_pieces(&mut lane, file),
        };
        // Copies may still be queued on an error path: the halves stay in use until they finish.
        let drained = lane
            .finish()
            .map_err(|e| Error::hip(&e, "finishing staged copies"));
        result.and(drained)
    }

    fn read_pieces(&self, lane: &mut StagingLane, file: &PieceIo) -> Result<(), Error> {
        let eof_at = &self.progress.eof_at;
        let mut slot = 0;
        loop {
            if let Some(live) = &self.live {
                if live.news() {
                    self.claim_pinned_tail(lane, live)?;
                }
            }
            let Some(k) = self.claim() else {
                break;
            };
            let (start, len) = self.piece(k);
            let at = self.file_offset + start as u64;
            if self.upload_pinned(lane, start, len)? {
                // Inside the file as the request found it: no end of file to look for.
                self.progress.moved.fetch_add(len, Ordering::AcqRel);
                if let Some(pins) = &self.pins {
                    pins.served(len);
                }
                continue;
            }
            let half = lane
                .half_mut(slot)
                .map_err(|e| Error::hip(&e, "waiting for a staged copy"))?;
            let half = half.get_mut(..len).ok_or_else(|| {
                Error::new(
                    ErrorKind::InternalError,
                    "a staged piece larger than a staging half",
                )
            })?;
            let got = file.read(half, at)?;
            if got < len {
                eof_at.fetch_min(start as u64 + got as u64, Ordering::AcqRel);
            }
            // A piece that starts at or past an end of file another piece found moves nothing:
            // its bytes (the file grew again meanwhile) lie past the count the request returns.
            let got = if start as u64 >= eof_at.load(Ordering::Acquire) {
                0
            } else {
                got
            };
            if got > 0 {
                lane.upload(slot, &self.device_piece(start, got)?)
                    .map_err(|e| Error::hip(&e, "queuing a copy to the device"))?;
            }
            self.progress.moved.fetch_add(got, Ordering::AcqRel);
            slot ^= 1;
        }
        Ok(())
    }

    /// Take the pieces at the back of the transfer that windows pinned since it began hold
    /// whole, and queue their copies out of the windows: the pinning thread pins a read's
    /// windows last to first beside its staging threads, which take pieces first to last, until
    /// the two meet.
    fn claim_pinned_tail(&self, lane: &mut StagingLane, live: &LivePins) -> Result<(), Error> {
        let p = &self.progress;
        if p.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        let (front, back) = p.claims.get();
        if front >= back {
            return Ok(());
        }
        let size = self.memory.len();
        // The file bytes of the pieces not claimed yet.
        let unclaimed_at = self.file_offset + self.plan.piece_range(size, front).start as u64;
        let end = self.file_offset + self.plan.piece_range(size, back - 1).end as u64;
        let Some((covered, windows)) = live.tail(unclaimed_at, end) else {
            return Ok(());
        };
        let from = usize::try_from(covered - self.file_offset)
            .unwrap_or(usize::MAX)
            .div_ceil(self.plan.piece);
        let Some(pieces) = p.claims.tail(from, back) else {
            return Ok(());
        };
        self.pinned
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .add(windows);
        let start = self.plan.piece_range(size, pieces.start).start;
        let len = self.plan.piece_range(size, pieces.end - 1).end - start;
        if !self.upload_pinned(lane, start, len)? {
            return Err(Error::new(
                ErrorKind::InternalError,
                "pinned windows of a claimed tail went missing",
            ));
        }
        p.moved.fetch_add(len, Ordering::AcqRel);
        if let Some(pins) = &self.pins {
            pins.served(len);
        }
        Ok(())
    }

    /// Queue the copies of the `len` bytes at request-relative `start` straight out of the
    /// pinned windows, one per window they lie in; false (nothing queued) unless pinned windows
    /// hold them all.
    fn upload_pinned(
        &self,
        lane: &mut StagingLane,
        start: usize,
        len: usize,
    ) -> Result<bool, Error> {
        let at = self.file_offset + start as u64;
        let pinned = self.pinned.read().unwrap_or_else(PoisonError::into_inner);
        if pinned.is_empty() || !pinned.covers_all(at..at + len as u64) {
            return Ok(false);
        }
        let mut done = 0;
        while done < len {
            let here = at + done as u64;
            let window = pinned.covering(here, 1).ok_or_else(|| {
                Error::new(ErrorKind::InternalError, "a pinned window went missing")
            })?;
            let n = usize::try_from(window.end() - here)
                .unwrap_or(usize::MAX)
                .min(len - done);
            lane.upload_pinned(window, here, &self.device_piece(start + done, n)?)
                .map_err(|e| Error::hip(&e, "queuing a copy out of the page cache"))?;
            done += n;
        }
        Ok(true)
    }

    fn write_pieces(&self, lane: &mut StagingLane, file: &PieceIo) -> Result<(), Error> {
        let mut queued: Option<(usize, usize, usize)> = None;
        let mut slot = 0;
        while let Some(k) = self.claim() {
            let (start, len) = self.piece(k);
            lane.download(slot, &self.device_piece(start, len)?)
                .map_err(|e| Error::hip(&e, "queuing a copy from the device"))?;
            if let Some(previous) = queued.take() {
                self.write_out(lane, file, previous)?;
            }
            queued = Some((slot, start, len));
            slot ^= 1;
        }
        match queued {
            Some(last) => self.write_out(lane, file, last),
            None => Ok(()),
        }
    }

    fn write_out(
        &self,
        lane: &mut StagingLane,
        file: &PieceIo,
        (slot, start, len): (usize, usize, usize),
    ) -> Result<(), Error> {
        let half = lane
            .half(slot)
            .map_err(|e| Error::hip(&e, "waiting for a staged copy"))?;
        file.write(&half[..len], self.file_offset + start as u64)?;
        self.progress.moved.fetch_add(len, Ordering::AcqRel);
        Ok(())
    }
}

/// Threads that stage a read some of whose windows are being pinned beside it: four in five of
/// those a read gets otherwise (at least one). The pinning thread's windows carry the rest of
/// its bytes at no CPU, so the same throughput needs fewer staging threads. Measured on the H200
/// host (8 GiB hot file, first read of a fresh registration, 10 threads otherwise, medians of 3
/// in one run): 8 threads 50.87 GB/s on 8.71 cores, all 10 50.89 on 10.64, 6 threads 50.32 on
/// 6.85 (49.11 on 6.87 in a later run), 4 threads 47.86 on 4.94; without pinning beside the
/// read 51.05 on 9.73. Eight keep the first read's throughput at less CPU; fewer give up some.
fn live_threads(threads: usize) -> usize {
    (threads * 4 / 5).max(1)
}

impl Job for Transfer {
    fn join(&self, must_work: bool) {
        self.participate(must_work);
    }
}

/// A queued transfer's completion: waiting joins the work, then waits for the workers.
#[derive(Debug)]
struct Queued(Arc<Transfer>);

impl PendingIo for Queued {
    fn wait(self: Box<Self>) -> IoOutcome {
        self.0.participate(true);
        self.0.wait_for_helpers();
        self.0.outcome()
    }

    fn is_finished(&self) -> bool {
        self.0.is_finished()
    }

    fn cancel(&self) -> bool {
        self.0.withdraw()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_from_both_ends_take_every_piece_once() {
        let pieces = 10_000;
        let claims = Claims::new(pieces);
        let taken: Vec<AtomicUsize> = (0..pieces).map(|_| AtomicUsize::new(0)).collect();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    while let Some(k) = claims.front() {
                        taken[k].fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            s.spawn(|| loop {
                let (front, back) = claims.get();
                if front >= back {
                    break;
                }
                // A tail of up to 7 pieces, as windows pinned at the back would give.
                if let Some(r) = claims.tail(back.saturating_sub(7), back) {
                    for k in r {
                        taken[k].fetch_add(1, Ordering::Relaxed);
                    }
                }
            });
        });
        assert!(taken.iter().all(|t| t.load(Ordering::Relaxed) == 1));
        assert!(claims.exhausted());
    }

    #[test]
    fn a_read_pinned_beside_stages_on_four_threads_in_five() {
        assert_eq!(live_threads(10), 8);
        assert_eq!(live_threads(2), 1);
        assert_eq!(live_threads(1), 1);
    }

    #[test]
    fn a_tail_is_taken_only_while_the_back_is_where_it_was_seen() {
        let claims = Claims::new(10);
        assert_eq!(claims.front(), Some(0));
        assert_eq!(claims.tail(6, 10), Some(6..10));
        assert_eq!(claims.tail(4, 10), None, "the back moved");
        assert_eq!(claims.tail(0, 6), Some(1..6), "not past the front");
        assert_eq!(claims.front(), None);
        assert!(!claims.withdrawn());
        let fresh = Claims::new(3);
        assert!(fresh.withdraw(3));
        assert!(fresh.withdrawn() && fresh.exhausted());
        assert_eq!(fresh.front(), None);
        let started = Claims::new(3);
        started.front();
        assert!(!started.withdraw(3));
    }
}
