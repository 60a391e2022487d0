//! IO worker threads: the threads backends run requests on when their submitter does not.
//!
//! A backend offers a job to the workers; each worker that takes it works on it until nothing is
//! left for that thread ([`Job::join`]). Two kinds of offers:
//!
//! - a *helper* offer (`must_work` false) asks a worker to join work that already has a thread
//!   on it (a synchronous caller spreading a large request): a helper that finds no free
//!   resources leaves at once;
//! - a *must-work* offer asks a worker to make progress on a job nobody else works on (a queued
//!   request: a batch entry). Its worker waits for what it needs.
//!
//! The pool is elastic so that queued requests get real concurrency: it starts `permanent`
//! workers, and when a must-work offer finds no idle worker to take it, it starts another, up to
//! `limit` in all (the backend's queue depth: a batch of cold 4 KiB reads keeps that many reads
//! at the disk, where a fixed set of a few workers would serialise them). Workers beyond the
//! permanent ones leave after [`LINGER`] without work, so an idle process keeps only the
//! permanent ones.
//!
//! A worker that finished a job keeps looking for the next one for [`STAY_AWAKE`] before it
//! sleeps: requests issued back to back (a loader reading one sample after another) then find
//! their helpers awake, instead of paying a wake-up each, which costs tens of microseconds on a
//! virtual machine. An idle library spends no CPU: the window starts only after work.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use crate::completion::{Completion, Doorbell, IoOutcome, PendingIo};

/// Work the IO workers can join.
pub trait Job: Send + Sync + 'static {
    /// Work on the job until nothing is left for this thread. `must_work` says this worker was
    /// offered the job to make progress without its submitter: it waits for the resources it
    /// needs; other workers help only if those are free right away.
    fn join(&self, must_work: bool);
}

/// A job on offer, and whether the worker that takes it must make progress on it.
type Offer<J> = (Arc<J>, bool);

/// How long a worker that finished a job looks for the next one before it sleeps, so a caller
/// reading one request after another keeps its helpers (the window a doorbell's waiter polls
/// too).
pub use crate::completion::STAY_AWAKE;

/// How long a worker started beyond the permanent ones waits for work before it leaves.
pub const LINGER: Duration = Duration::from_secs(5);

/// What the workers share with the pool.
#[derive(Debug)]
struct Shared<J: ?Sized> {
    rx: Receiver<Offer<J>>,
    /// Workers waiting for an offer (polling or asleep).
    idle: AtomicUsize,
    /// Offers sent and not yet taken.
    waiting: AtomicUsize,
    /// Workers alive.
    live: AtomicUsize,
}

/// An elastic set of worker threads, started when a backend starts and joined when it is dropped.
#[derive(Debug)]
pub struct IoWorkers<J: Job + ?Sized> {
    jobs: Option<Sender<Offer<J>>>,
    shared: Arc<Shared<J>>,
    permanent: usize,
    limit: usize,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl<J: Job + ?Sized> IoWorkers<J> {
    /// Start `permanent` workers; must-work offers may start more, up to `limit` in all.
    pub fn start(permanent: usize, limit: usize) -> std::io::Result<Self> {
        let (tx, rx) = crossbeam_channel::unbounded::<Offer<J>>();
        let workers = IoWorkers {
            jobs: Some(tx),
            shared: Arc::new(Shared {
                rx,
                idle: AtomicUsize::new(0),
                waiting: AtomicUsize::new(0),
                live: AtomicUsize::new(0),
            }),
            permanent,
            limit: limit.max(permanent),
            threads: Mutex::new(Vec::with_capacity(permanent)),
        };
        for _ in 0..permanent {
            workers.spawn(true)?;
        }
        Ok(workers)
    }

    fn spawn(&self, permanent: bool) -> std::io::Result<()> {
        let shared = Arc::clone(&self.shared);
        let n = shared.live.fetch_add(1, Ordering::AcqRel);
        let spawned = std::thread::Builder::new()
            .name(format!("hipfile-io-{n}"))
            .spawn(move || serve(&shared, permanent));
        let mut threads = self.threads.lock().unwrap_or_else(PoisonError::into_inner);
        threads.retain(|t| !t.is_finished());
        match spawned {
            Ok(handle) => {
                threads.push(handle);
                Ok(())
            }
            Err(e) => {
                self.shared.live.fetch_sub(1, Ordering::AcqRel);
                Err(e)
            }
        }
    }

    /// The workers that never leave (the helpers a synchronous request can count on).
    pub fn count(&self) -> usize {
        self.permanent
    }

    /// The most workers the pool runs at once.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Workers alive now.
    pub fn live(&self) -> usize {
        self.shared.live.load(Ordering::Acquire)
    }

    /// Offer `job` to `helpers` workers (at most the permanent ones, and at least one when
    /// `first_must_work`); with `first_must_work`, the first of them must make progress on it
    /// (the submitter is not working on it), and a worker is started for it when none is idle
    /// and the pool is below its limit. Answers whether any worker is alive to take the offer
    /// (false only for a pool with no permanent worker that could not start one).
    pub fn offer(&self, job: &Arc<J>, helpers: usize, first_must_work: bool) -> bool {
        let Some(tx) = &self.jobs else { return false };
        let mut count = helpers.min(self.permanent.max(1));
        if first_must_work {
            count = count.max(1);
            let s = &self.shared;
            let waiting = s.waiting.load(Ordering::Acquire);
            if waiting >= s.idle.load(Ordering::Acquire) && self.live() < self.limit {
                // A worker that cannot be started leaves the job to the ones alive, which take
                // every offer in turn.
                let _ = self.spawn(false);
            }
        }
        for i in 0..count {
            self.shared.waiting.fetch_add(1, Ordering::AcqRel);
            // Sending fails only when every worker has exited, which happens only in drop.
            if tx
                .send((Arc::clone(job), first_must_work && i == 0))
                .is_err()
            {
                self.shared.waiting.fetch_sub(1, Ordering::AcqRel);
            }
        }
        self.live() > 0
    }
}

/// A worker's life: join jobs until the channel closes, or, for a worker beyond the permanent
/// ones, until no job came for [`LINGER`].
fn serve<J: Job + ?Sized>(shared: &Shared<J>, permanent: bool) {
    loop {
        shared.idle.fetch_add(1, Ordering::AcqRel);
        let offer = next_soon(&shared.rx).or_else(|| {
            if permanent {
                shared.rx.recv().ok()
            } else {
                shared.rx.recv_timeout(LINGER).ok()
            }
        });
        shared.idle.fetch_sub(1, Ordering::AcqRel);
        let Some((job, must_work)) = offer else { break };
        shared.waiting.fetch_sub(1, Ordering::AcqRel);
        job.join(must_work);
    }
    shared.live.fetch_sub(1, Ordering::AcqRel);
}

/// The next offer within [`STAY_AWAKE`], polling and yielding the core meanwhile.
fn next_soon<T>(rx: &Receiver<T>) -> Option<T> {
    let since = Instant::now();
    loop {
        match rx.try_recv() {
            Ok(t) => return Some(t),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if since.elapsed() >= STAY_AWAKE => return None,
            Err(TryRecvError::Empty) => std::thread::yield_now(),
        }
    }
}

impl<J: Job + ?Sized> Drop for IoWorkers<J> {
    fn drop(&mut self) {
        self.jobs = None;
        let threads =
            std::mem::take(&mut *self.threads.lock().unwrap_or_else(PoisonError::into_inner));
        for t in threads {
            // A worker that panicked has nothing left to clean up; the join result says only that.
            let _ = t.join();
        }
    }
}

/// A request one thread runs whole, queued on the workers: what a backend whose work blocks
/// (a P2P DMA) answers for [`crate::Submit::Queue`]. Whoever comes first runs it: a worker, or
/// the waiter, which then needs no worker at all.
pub struct Deferred {
    work: Mutex<DeferredState>,
    done: std::sync::Condvar,
    doorbell: Option<Doorbell>,
}

type Work = Box<dyn FnOnce() -> IoOutcome + Send>;

enum DeferredState {
    Waiting(Work),
    Running,
    Finished(IoOutcome),
    Collected,
}

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deferred").finish_non_exhaustive()
    }
}

impl Deferred {
    fn lock(&self) -> std::sync::MutexGuard<'_, DeferredState> {
        self.work.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Run the work if nobody has taken it yet.
    fn run(&self) {
        let work = {
            let mut state = self.lock();
            match std::mem::replace(&mut *state, DeferredState::Running) {
                DeferredState::Waiting(work) => work,
                other => {
                    *state = other;
                    return;
                }
            }
        };
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).unwrap_or_else(|_| {
                Err(crate::IoFailure::new(
                    crate::Error::new(crate::ErrorKind::InternalError, "an IO worker panicked"),
                    0,
                ))
            });
        self.finish(outcome);
    }

    fn finish(&self, outcome: IoOutcome) {
        *self.lock() = DeferredState::Finished(outcome);
        self.done.notify_all();
        if let Some(doorbell) = &self.doorbell {
            doorbell.ring();
        }
    }
}

impl Job for Deferred {
    fn join(&self, _must_work: bool) {
        self.run();
    }
}

/// The completion of a [`Deferred`] request.
#[derive(Debug)]
struct DeferredCompletion(Arc<Deferred>);

impl PendingIo for DeferredCompletion {
    fn wait(self: Box<Self>) -> IoOutcome {
        // Not started yet: the waiter runs it, instead of waiting for a worker to get to it.
        self.0.run();
        let mut state = self.0.lock();
        loop {
            match std::mem::replace(&mut *state, DeferredState::Collected) {
                DeferredState::Finished(outcome) => return outcome,
                other => {
                    *state = other;
                    state = self
                        .0
                        .done
                        .wait(state)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
    }

    fn is_finished(&self) -> bool {
        matches!(*self.0.lock(), DeferredState::Finished(_))
    }

    fn cancel(&self) -> bool {
        let mut state = self.0.lock();
        if !matches!(*state, DeferredState::Waiting(_)) {
            return false;
        }
        *state = DeferredState::Running;
        drop(state);
        self.0.finish(Ok(0));
        true
    }
}

impl IoWorkers<Deferred> {
    /// Queue `work` for one worker and answer its pending completion; with no worker alive to
    /// take it, `work` runs here and the completion is ready.
    pub fn defer(
        &self,
        doorbell: Option<&Doorbell>,
        work: impl FnOnce() -> IoOutcome + Send + 'static,
    ) -> Completion {
        let job = Arc::new(Deferred {
            work: Mutex::new(DeferredState::Waiting(Box::new(work))),
            done: std::sync::Condvar::new(),
            doorbell: doorbell.cloned(),
        });
        if self.offer(&job, 1, true) {
            Completion::pending(Box::new(DeferredCompletion(job)))
        } else {
            let completion = DeferredCompletion(Arc::clone(&job));
            Completion::ready(Box::new(completion).wait())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Barrier, Condvar};

    #[test]
    fn a_job_offered_meanwhile_is_taken_before_sleeping() {
        let (tx, rx) = crossbeam_channel::unbounded();
        tx.send(7).unwrap();
        tx.send(8).unwrap();
        assert_eq!(next_soon(&rx), Some(7));
        assert_eq!(next_soon(&rx), Some(8));
    }

    #[test]
    fn an_idle_worker_goes_to_sleep_after_the_window() {
        let (tx, rx) = crossbeam_channel::unbounded::<u32>();
        let since = Instant::now();
        assert_eq!(next_soon(&rx), None);
        assert!(since.elapsed() >= STAY_AWAKE);
        drop(tx);
        assert_eq!(
            next_soon(&rx),
            None,
            "a closed channel ends the wait at once"
        );
    }

    /// Blocks every worker that joins until `n` of them are inside at once.
    struct Rendezvous {
        barrier: Barrier,
        joined: Mutex<usize>,
        all: Condvar,
    }

    impl Job for Rendezvous {
        fn join(&self, _must_work: bool) {
            *self.joined.lock().unwrap() += 1;
            self.all.notify_all();
            self.barrier.wait();
        }
    }

    #[test]
    fn must_work_offers_start_workers_up_to_the_limit() {
        let pool = IoWorkers::<Rendezvous>::start(1, 4).unwrap();
        assert_eq!((pool.count(), pool.limit()), (1, 4));
        // Four jobs that each hold their worker until all four run at once: only four
        // concurrent workers can finish them.
        let job = Arc::new(Rendezvous {
            barrier: Barrier::new(4),
            joined: Mutex::new(0),
            all: Condvar::new(),
        });
        for _ in 0..4 {
            pool.offer(&job, 0, true);
        }
        let mut joined = job.joined.lock().unwrap();
        while *joined < 4 {
            joined = job.all.wait(joined).unwrap();
        }
        drop(joined);
        assert!(pool.live() <= 4, "{} workers", pool.live());
    }

    #[test]
    fn helper_offers_never_start_workers() {
        let pool = IoWorkers::<Rendezvous>::start(2, 8).unwrap();
        let job = Arc::new(Rendezvous {
            barrier: Barrier::new(1),
            joined: Mutex::new(0),
            all: Condvar::new(),
        });
        pool.offer(&job, 16, false);
        let mut joined = job.joined.lock().unwrap();
        while *joined < 2 {
            joined = job.all.wait(joined).unwrap();
        }
        drop(joined);
        assert_eq!(pool.live(), 2);
    }

    #[test]
    fn deferred_work_runs_on_a_worker_and_rings() {
        let pool = IoWorkers::<Deferred>::start(0, 2).unwrap();
        let bell = Doorbell::new();
        let completion = pool.defer(Some(&bell), || Ok(42));
        assert!(bell.wait_past(0, None), "the worker rang when it finished");
        assert!(completion.is_finished());
        assert_eq!(completion.wait().unwrap(), 42);
    }

    #[test]
    fn deferred_work_not_started_can_be_withdrawn() {
        // One worker, held by the first job until released: the second waits in the channel.
        let pool = IoWorkers::<Deferred>::start(1, 1).unwrap();
        let (release, hold) = crossbeam_channel::bounded::<()>(0);
        let first = pool.defer(None, move || {
            hold.recv().unwrap();
            Ok(1)
        });
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&ran);
        let bell = Doorbell::new();
        let second = pool.defer(Some(&bell), move || {
            flag.store(true, Ordering::SeqCst);
            Ok(2)
        });
        assert!(second.cancel(), "nobody started it");
        assert!(!second.cancel(), "withdrawn once");
        assert!(bell.rung() > 0, "a withdrawn request counts as finished");
        assert_eq!(second.wait().unwrap(), 0);
        release.send(()).unwrap();
        assert_eq!(first.wait().unwrap(), 1);
        drop(pool);
        assert!(!ran.load(Ordering::SeqCst), "withdrawn work never runs");
    }
}
