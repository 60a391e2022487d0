//! How a submitted request finishes: its [`Completion`] (ready, or [`PendingIo`] a backend's
//! threads finish), the [`Submit`] mode that says how its submitter waits, its [`IoOutcome`], and
//! the [`Doorbell`] a queued request rings for a submitter that waits for any of several.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::error::Error;

/// How long a thread that waits for short work polls, yielding the core, before it sleeps:
/// about the time a 1 MiB request takes. A waiter on a [`Doorbell`] and an IO worker between
/// jobs ([`crate::workers`]) both stay awake this long, so a request that finishes within it
/// costs no wake-up.
pub const STAY_AWAKE: Duration = Duration::from_micros(100);

/// A failed execution: the error and how many bytes had already moved (the failover rule needs
/// to know whether the request can be rerun whole).
#[derive(Debug)]
pub struct IoFailure {
    /// What went wrong.
    pub error: Error,
    /// Bytes already transferred when it went wrong.
    pub bytes_moved: usize,
}

impl IoFailure {
    /// A failure after `bytes_moved` bytes.
    pub fn new(error: Error, bytes_moved: usize) -> Self {
        IoFailure { error, bytes_moved }
    }
}

/// How the submitter of a request will wait for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Submit {
    /// The submitting thread waits for the completion at once (synchronous IO): the backend
    /// may do the work on that thread, inside [`crate::Backend::submit`] or inside
    /// [`Completion::wait`], with no hand-off to another thread.
    Wait,
    /// The submitter goes on with other work (batches, stream-ordered IO) and collects the
    /// completion later: the backend's own threads make progress without it, and a waiter may
    /// still join in when it finally waits.
    Queue,
}

/// The outcome of a request: bytes moved, or the failure with the bytes moved before it.
pub type IoOutcome = std::result::Result<usize, IoFailure>;

/// Work a backend finishes after [`crate::Backend::submit`] returned.
pub trait PendingIo: Send + fmt::Debug {
    /// Wait for the request to finish; the waiting thread may do some of its work.
    fn wait(self: Box<Self>) -> IoOutcome;
    /// Whether the request has finished (a following `wait` returns at once). Never blocks.
    fn is_finished(&self) -> bool;
    /// Withdraw the request if no byte of it has been touched yet: answers true when it was
    /// withdrawn (it then never starts, counts as finished, and `wait` answers `Ok(0)`), false
    /// when it already started or finished (it then runs to its end as usual). The default
    /// withdraws nothing.
    fn cancel(&self) -> bool {
        false
    }
}

/// A wake-up shared by requests in flight and the thread that waits for any of them.
///
/// A submitter that waits for several queued requests at once (a batch) puts a doorbell on each
/// request ([`crate::OwnedRequest::doorbell`]); a backend that answered a pending completion for such a
/// request rings it once the request has finished (after `is_finished` turns true). Each
/// request's doorbell carries a token ([`Doorbell::tagged`]) that the ring hands to the waiter
/// ([`Doorbell::take_rung`]), so the waiter looks only at the requests that finished, however
/// many are in flight. The waiter reads [`Doorbell::rung`] before it checks its requests and
/// then waits past that count, so a ring between the check and the wait is never lost. Cloning
/// shares the doorbell and keeps the token.
#[derive(Clone, Debug, Default)]
pub struct Doorbell {
    bell: Arc<Bell>,
    token: u64,
}

#[derive(Debug, Default)]
struct Bell {
    count: AtomicU64,
    /// Tokens rung and not yet taken.
    rung: Mutex<Vec<u64>>,
    rang: Condvar,
}

impl Doorbell {
    /// A doorbell never rung, with token 0.
    pub fn new() -> Self {
        Doorbell::default()
    }

    /// The same doorbell, ringing with `token`.
    pub fn tagged(&self, token: u64) -> Doorbell {
        Doorbell {
            bell: Arc::clone(&self.bell),
            token,
        }
    }

    /// Count a finished request, hand its token to the waiter and wake every waiter.
    pub fn ring(&self) {
        let bell = &*self.bell;
        // Under the lock, so a waiter between its check and its wait cannot miss the wake-up.
        let mut rung = bell.rung.lock().unwrap_or_else(PoisonError::into_inner);
        rung.push(self.token);
        bell.count.fetch_add(1, Ordering::AcqRel);
        drop(rung);
        bell.rang.notify_all();
    }

    /// How many times the doorbell has rung.
    pub fn rung(&self) -> u64 {
        self.bell.count.load(Ordering::Acquire)
    }

    /// The tokens rung since the last call, in the order they rang (a request may ring more
    /// than once).
    pub fn take_rung(&self) -> Vec<u64> {
        std::mem::take(
            &mut *self
                .bell
                .rung
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// Wait until the doorbell has rung more than `seen` times, or until `deadline` (`None`:
    /// no deadline). Answers whether it rang. The waiter polls for [`STAY_AWAKE`]
    /// (yielding the core) before it sleeps: a small request finishes within that window, and a
    /// sleeping waiter would add a wake-up to its latency.
    pub fn wait_past(&self, seen: u64, deadline: Option<Instant>) -> bool {
        let bell = &*self.bell;
        let since = Instant::now();
        while since.elapsed() < STAY_AWAKE {
            if self.rung() > seen {
                return true;
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return false;
            }
            std::thread::yield_now();
        }
        let mut held = bell.rung.lock().unwrap_or_else(PoisonError::into_inner);
        while self.rung() <= seen {
            match deadline {
                None => held = bell.rang.wait(held).unwrap_or_else(PoisonError::into_inner),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return false;
                    }
                    held = bell
                        .rang
                        .wait_timeout(held, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
            }
        }
        true
    }
}

/// A submitted request, finished or pending. Wait for it with [`Completion::wait`] or poll it
/// with [`Completion::poll`]; dropping an unfinished one waits for it.
#[derive(Debug)]
pub struct Completion(Option<State>);

#[derive(Debug)]
enum State {
    Ready(IoOutcome),
    Pending(Box<dyn PendingIo>),
}

impl Completion {
    /// A request that finished inside `submit`.
    pub fn ready(outcome: IoOutcome) -> Self {
        Completion(Some(State::Ready(outcome)))
    }

    /// A request the backend finishes later.
    pub fn pending(work: Box<dyn PendingIo>) -> Self {
        Completion(Some(State::Pending(work)))
    }

    /// Wait for the outcome.
    pub fn wait(mut self) -> IoOutcome {
        match self.0.take() {
            Some(State::Ready(outcome)) => outcome,
            Some(State::Pending(work)) => work.wait(),
            None => unreachable!("a completion holds its state until it is consumed"),
        }
    }

    /// Whether the request has finished (waiting for it then returns at once). Never blocks.
    pub fn is_finished(&self) -> bool {
        match &self.0 {
            Some(State::Pending(work)) => work.is_finished(),
            _ => true,
        }
    }

    /// Withdraw the request if it has not started ([`PendingIo::cancel`]); a request that
    /// finished inside `submit` cannot be withdrawn.
    pub fn cancel(&self) -> bool {
        match &self.0 {
            Some(State::Pending(work)) => work.cancel(),
            _ => false,
        }
    }

    /// The outcome if the request has finished, else the completion back, unchanged.
    pub fn poll(self) -> std::result::Result<IoOutcome, Completion> {
        if self.is_finished() {
            Ok(self.wait())
        } else {
            Err(self)
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        if let Some(State::Pending(work)) = self.0.take() {
            // The request's memory and file may be released right after this: let the backend
            // finish with them first.
            let _ = work.wait();
        }
    }
}
