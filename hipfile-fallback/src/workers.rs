//! The IO workers: threads that join large transfers.
//!
//! A transfer cut into several chunks is offered to up to N workers; each that picks it up takes
//! a staging lane and pulls chunks until none are left, exactly as the calling thread does (the
//! caller always works on its own request, so a request progresses even when every worker is busy
//! with others). Workers never wait for a lane: one that finds the pool exhausted leaves the
//! transfer to the threads already on it.
//!
//! A worker that finished a transfer keeps looking for the next one for [`STAY_AWAKE`] before
//! it sleeps: requests issued back to back (a loader reading one sample after another) then find
//! their helpers awake, instead of paying a wake-up each, which costs tens of microseconds on a
//! virtual machine. An idle library spends no CPU: the window starts only after work.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use crate::engine::Transfer;

/// A fixed set of worker threads, started when the driver opens and joined when it closes.
#[derive(Debug)]
pub struct IoWorkers {
    jobs: Option<Sender<Arc<Transfer>>>,
    threads: Vec<JoinHandle<()>>,
}

impl IoWorkers {
    /// Start `count` workers.
    pub fn start(count: usize) -> std::io::Result<Self> {
        let (tx, rx) = crossbeam_channel::unbounded::<Arc<Transfer>>();
        let mut threads = Vec::with_capacity(count);
        for i in 0..count {
            let rx: Receiver<Arc<Transfer>> = rx.clone();
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

    /// Offer `transfer` to `helpers` workers (at most all of them).
    pub fn offer(&self, transfer: &Arc<Transfer>, helpers: usize) {
        if let Some(tx) = &self.jobs {
            for _ in 0..helpers.min(self.threads.len()) {
                // Sending fails only when every worker has exited, which happens only in drop.
                let _ = tx.send(Arc::clone(transfer));
            }
        }
    }
}

/// How long a worker that finished a transfer looks for the next one before it sleeps: about
/// the time a 1 MiB request takes, so a caller reading one after another keeps its helpers.
pub const STAY_AWAKE: Duration = Duration::from_micros(100);

/// A worker's life: join transfers until the channel closes.
fn serve(rx: &Receiver<Arc<Transfer>>) {
    while let Ok(mut transfer) = rx.recv() {
        loop {
            transfer.join_as_worker();
            match next_soon(rx) {
                Some(next) => transfer = next,
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

impl Drop for IoWorkers {
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
