//! The IO workers: threads that join large transfers.
//!
//! A transfer cut into several chunks is offered to up to N workers; each that picks it up takes
//! a staging lane and pulls chunks until none are left, exactly as the calling thread does (a
//! synchronous caller works on its own request, so it progresses even when every worker is busy
//! with others). Helpers never wait for a lane: one that finds the pool exhausted leaves the
//! transfer to the threads already on it. A transfer whose submitter does not work on it (a
//! queued request) is offered to one worker that must: it waits for a lane.
//!
//! The workers know jobs only through the [`Job`] trait; the pipeline ([`crate::engine`])
//! implements it, so this module does not depend on the pipeline.
//!
//! A worker that finished a transfer keeps looking for the next one for [`STAY_AWAKE`] before
//! it sleeps: requests issued back to back (a loader reading one sample after another) then find
//! their helpers awake, instead of paying a wake-up each, which costs tens of microseconds on a
//! virtual machine. An idle library spends no CPU: the window starts only after work.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

/// Work the IO workers can join: a staged transfer.
pub trait Job: Send + Sync + 'static {
    /// Work on the job until nothing is left for this thread. `must_work` says this worker was
    /// offered the job to make progress without its submitter: it waits for the resources it
    /// needs; other workers help only if those are free right away.
    fn join(&self, must_work: bool);
}

/// A job on offer, and whether the worker that takes it must make progress on it.
type Offer<J> = (Arc<J>, bool);

/// A fixed set of worker threads, started when the driver opens and joined when it closes.
#[derive(Debug)]
pub struct IoWorkers<J: Job> {
    jobs: Option<Sender<Offer<J>>>,
    threads: Vec<JoinHandle<()>>,
}

impl<J: Job> IoWorkers<J> {
    /// Start `count` workers.
    pub fn start(count: usize) -> std::io::Result<Self> {
        let (tx, rx) = crossbeam_channel::unbounded::<Offer<J>>();
        let mut threads = Vec::with_capacity(count);
        for i in 0..count {
            let rx: Receiver<Offer<J>> = rx.clone();
            threads.push(
                std::thread::Builder::new()
                    .name(format!("hipfile-io-{i}"))
                    .spawn(move || serve(&rx))?,
            );
        }
        Ok(IoWorkers {
            jobs: Some(tx),
            threads,
        })
    }

    /// Number of workers.
    pub fn count(&self) -> usize {
        self.threads.len()
    }

    /// Offer `job` to `helpers` workers (at most all of them); with `first_must_work`, the first
    /// of them must make progress on it (the submitter is not working on it).
    pub fn offer(&self, job: &Arc<J>, helpers: usize, first_must_work: bool) {
        if let Some(tx) = &self.jobs {
            for i in 0..helpers.min(self.threads.len()) {
                // Sending fails only when every worker has exited, which happens only in drop.
                let _ = tx.send((Arc::clone(job), first_must_work && i == 0));
            }
        }
    }
}

/// How long a worker that finished a transfer looks for the next one before it sleeps: about
/// the time a 1 MiB request takes, so a caller reading one after another keeps its helpers.
pub const STAY_AWAKE: Duration = Duration::from_micros(100);

/// A worker's life: join jobs until the channel closes.
fn serve<J: Job>(rx: &Receiver<Offer<J>>) {
    while let Ok(mut offer) = rx.recv() {
        loop {
            offer.0.join(offer.1);
            match next_soon(rx) {
                Some(next) => offer = next,
                None => break,
            }
        }
    }
}

/// The next transfer offered within [`STAY_AWAKE`], polling and yielding the core meanwhile.
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

impl<J: Job> Drop for IoWorkers<J> {
    fn drop(&mut self) {
        self.jobs = None;
        for t in self.threads.drain(..) {
            // A worker that panicked has nothing left to clean up; the join result says only that.
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
