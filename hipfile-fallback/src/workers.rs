//! The IO workers: threads that join large transfers.
//!
//! A transfer cut into several chunks is offered to up to N workers; each that picks it up takes
//! a staging lane and pulls chunks until none are left, exactly as the calling thread does (the
//! caller always works on its own request, so a request progresses even when every worker is busy
//! with others). Workers never wait for a lane: one that finds the pool exhausted leaves the
//! transfer to the threads already on it.

use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

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
                    .spawn(move || {
                        for transfer in rx {
                            transfer.join_as_worker();
                        }
                    })?,
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

impl Drop for IoWorkers {
    fn drop(&mut self) {
        self.jobs = None;
        for t in self.threads.drain(..) {
            // A worker that panicked has nothing left to clean up; the join result says only that.
            let _ = t.join();
        }
    }
}
