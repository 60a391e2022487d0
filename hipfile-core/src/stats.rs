//! Counters of an open driver: requests, bytes and errors per direction, and which backend ran.
//!
//! Counting is on when `HIPFILE_STATS_LEVEL=true`; the counters are plain relaxed atomics.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::IoOp;
use crate::error::Result;
use crate::registry::Dispatched;

/// A snapshot of the counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Reads that succeeded.
    pub reads: u64,
    /// Writes that succeeded.
    pub writes: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Reads that failed.
    pub read_errors: u64,
    /// Writes that failed.
    pub write_errors: u64,
    /// Requests run by the fallback.
    pub fallback_ops: u64,
    /// Requests run by another backend.
    pub other_backend_ops: u64,
}

/// Live counters.
#[derive(Debug, Default)]
pub struct Stats {
    enabled: bool,
    reads: AtomicU64,
    writes: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    read_errors: AtomicU64,
    write_errors: AtomicU64,
    fallback_ops: AtomicU64,
    other_backend_ops: AtomicU64,
}

impl Stats {
    /// Counters, counting only when `enabled`.
    pub fn new(enabled: bool) -> Self {
        Stats {
            enabled,
            ..Stats::default()
        }
    }

    /// Whether counting is on.
    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Count one finished request.
    pub fn record(&self, op: IoOp, outcome: &Result<Dispatched>) {
        if !self.enabled {
            return;
        }
        match outcome {
            Err(_) => {
                let errors = match op {
                    IoOp::Read => &self.read_errors,
                    IoOp::Write => &self.write_errors,
                };
                errors.fetch_add(1, Ordering::Relaxed);
            }
            Ok(d) => {
                let (count, bytes) = match op {
                    IoOp::Read => (&self.reads, &self.bytes_read),
                    IoOp::Write => (&self.writes, &self.bytes_written),
                };
                count.fetch_add(1, Ordering::Relaxed);
                bytes.fetch_add(d.bytes as u64, Ordering::Relaxed);
                let by = if d.backend == "fallback" {
                    &self.fallback_ops
                } else {
                    &self.other_backend_ops
                };
                by.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The counters now.
    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        StatsSnapshot {
            reads: get(&self.reads),
            writes: get(&self.writes),
            bytes_read: get(&self.bytes_read),
            bytes_written: get(&self.bytes_written),
            read_errors: get(&self.read_errors),
            write_errors: get(&self.write_errors),
            fallback_ops: get(&self.fallback_ops),
            other_backend_ops: get(&self.other_backend_ops),
        }
    }
}
