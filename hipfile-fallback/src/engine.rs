//! One staged transfer: a request cut into pieces that the threads working on it pull until none
//! are left, each thread pipelining through the two halves of its staging lane.
//!
//! Reads, per thread: read the next piece into a free half, queue the host-to-device copy of
//! that half (the lane waits for a half's previous copy before handing it out again); the next
//! piece goes to the other half, so reading piece k+1 overlaps copying piece k. Writes run the
//! mirror image: queue the device-to-host copy of piece k+1, then wait for piece k's copy and
//! write it. Each thread ends by draining its own lane (never the device). A piece of a read
//! that the pinned page cache holds is not staged: the thread asks the transfer's piece source
//! ([`crate::pins::TransferPins`]) first, which queues its copies out of the pinned windows;
//! windows pinned while the read runs serve its far end, whose pieces the thread that notices
//! them claims from the back.
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
//! [`crate::piece_io`]'s.
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
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use hipfile_core::workers::{IoWorkers, Job, STAY_AWAKE};
use hipfile_core::{
    Doorbell, Error, ErrorKind, FileIo, IoFailure, IoOp, IoOutcome, IoRequest, PendingIo, Settings,
};
use hipfile_hip::{DeviceRange, StagingLane};

use crate::claims::Claims;
use crate::piece_io::{PathCounters, PieceIo};
use crate::pins::{Cover, PagePins, TransferPins};
use crate::plan::{piece_memory, Plan};
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
    pub file_paths: Arc<PathCounters>,
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
    /// What serves a read's pieces out of the pinned page cache before any is staged; let go
    /// of when the transfer finished.
    pins: TransferPins,
}

impl Transfer {
    /// Plan `req` for at most `threads` threads. An appending write runs on one thread, piece
    /// after piece, so its bytes reach the end of the file in order; so does a read that pinned
    /// page-cache windows hold whole (its copies need no thread but the one queuing them).
    pub fn new(
        req: &IoRequest<'_>,
        memory: &DeviceRange,
        parts: &EngineParts,
        threads: usize,
    ) -> Arc<Transfer> {
        let pins = TransferPins::new(&parts.pins, req);
        let threads = match pins.cover() {
            _ if req.append => 1,
            Cover::Whole => 1,
            Cover::Growing => live_threads(threads),
            Cover::Part => threads,
        };
        let s: &Settings = &req.settings;
        let chunk = s.chunk_bytes();
        // Copies out of pinned windows are queued one per window the piece lies in: a read
        // they cover whole is one piece. A staged piece is at most a chunk.
        let plan = Plan::new(
            req.size(),
            if pins.cover() == Cover::Whole {
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
            memory: memory.clone(),
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
            pins,
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

    /// The transfer no longer works: the pinning thread need not wait for it any more and its
    /// windows may go (its submitter may hold it long after). No copy out of the windows is in
    /// flight any more: every lane of the transfer drained.
    fn stop_running(&self) {
        self.pins.release();
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
            if self.pins.news() {
                self.serve_pinned_tail(lane)?;
            }
            let Some(k) = self.claim() else {
                break;
            };
            let (start, len) = self.piece(k);
            let at = self.file_offset + start as u64;
            if self.pins.serve(lane, &self.memory, start..start + len)? {
                // Inside the file as the request found it: no end of file to look for.
                self.progress.moved.fetch_add(len, Ordering::AcqRel);
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
                lane.upload(slot, &piece_memory(&self.memory, start, got)?)
                    .map_err(|e| Error::hip(&e, "queuing a copy to the device"))?;
            }
            self.progress.moved.fetch_add(got, Ordering::AcqRel);
            slot ^= 1;
        }
        Ok(())
    }

    /// Take the pieces at the back of the read that windows pinned since it began hold whole,
    /// and serve them out of those windows ([`TransferPins::serve_tail`]).
    fn serve_pinned_tail(&self, lane: &mut StagingLane) -> Result<(), Error> {
        let p = &self.progress;
        if p.failed.load(Ordering::Acquire) {
            return Ok(());
        }
        let (front, back) = p.claims.get();
        if front >= back {
            return Ok(());
        }
        let (plan, size) = (&self.plan, self.memory.len());
        let bytes = |pieces: Range<usize>| {
            plan.piece_range(size, pieces.start).start..plan.piece_range(size, pieces.end - 1).end
        };
        let served = self
            .pins
            .serve_tail(lane, &self.memory, bytes(front..back), |held_from| {
                p.claims
                    .tail(held_from.div_ceil(plan.piece), back)
                    .map(bytes)
            })?;
        if served > 0 {
            p.moved.fetch_add(served, Ordering::AcqRel);
        }
        Ok(())
    }

    fn write_pieces(&self, lane: &mut StagingLane, file: &PieceIo) -> Result<(), Error> {
        let mut queued: Option<(usize, usize, usize)> = None;
        let mut slot = 0;
        while let Some(k) = self.claim() {
            let (start, len) = self.piece(k);
            lane.download(slot, &piece_memory(&self.memory, start, len)?)
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
    fn a_read_pinned_beside_stages_on_four_threads_in_five() {
        assert_eq!(live_threads(10), 8);
        assert_eq!(live_threads(2), 1);
        assert_eq!(live_threads(1), 1);
    }
}
