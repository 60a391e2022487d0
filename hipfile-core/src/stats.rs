//! Counters of an open driver: requests, bytes and errors per direction, and which backend ran
//! each request (by its position in the registry, with its path: direct or staged).
//!
//! Counting is on when `HIPFILE_STATS_LEVEL=true`; the counters are plain relaxed atomics.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::backend::{IoOp, IoPath};
use crate::error::Result;
use crate::registry::Dispatched;

/// Requests and bytes one backend ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackendCounts {
    /// The backend's name.
    pub name: &'static str,
    /// How it moves bytes.
    pub path: IoPath,
    /// Requests it completed.
    pub ops: u64,
    /// Bytes those requests moved.
    pub bytes: u64,
}

/// A snapshot of the counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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
    /// Per backend, in the registry's offer order.
    pub backends: Vec<BackendCounts>,
}

impl StatsSnapshot {
    /// Requests completed by backends of `path`.
    pub fn ops_by(&self, path: IoPath) -> u64 {
        self.backends
            .iter()
            .filter(|b| b.path == path)
            .map(|b| b.ops)
            .sum()
    }

    /// The counts of the backend named `name`.
    pub fn backend(&self, name: &str) -> Option<&BackendCounts> {
        self.backends.iter().find(|b| b.name == name)
    }
}

#[derive(Debug)]
struct BackendCounters {
    name: &'static str,
    path: IoPath,
    ops: AtomicU64,
    bytes: AtomicU64,
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
    backends: Vec<BackendCounters>,
}

impl Stats {
    /// Counters for the backends `backends` (name and path, in the registry's order), counting
    /// only when `enabled`.
    pub fn new(enabled: bool, backends: &[(&'static str, IoPath)]) -> Self {
        Stats {
            enabled,
            backends: backends
                .iter()
                .map(|&(name, path)| BackendCounters {
                    name,
                    path,
                    ops: AtomicU64::new(0),
                    bytes: AtomicU64::new(0),
                })
                .collect(),
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
                if let Some(b) = self.backends.get(d.backend_index) {
                    b.ops.fetch_add(1, Ordering::Relaxed);
                    b.bytes.fetch_add(d.bytes as u64, Ordering::Relaxed);
                }
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
            backends: self
                .backends
                .iter()
                .map(|b| BackendCounts {
                    name: b.name,
                    path: b.path,
                    ops: get(&b.ops),
                    bytes: get(&b.bytes),
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{Error, ErrorKind};

    #[test]
    fn requests_are_counted_per_backend_and_path() {
        let stats = Stats::new(
            true,
            &[
                ("direct-one", IoPath::Direct),
                ("staged-one", IoPath::Staged),
            ],
        );
        let ran = |backend_index, bytes| {
            Ok(Dispatched {
                bytes,
                backend: "",
                backend_index,
                path: IoPath::Staged,
            })
        };
        stats.record(IoOp::Read, &ran(0, 4096));
        stats.record(IoOp::Write, &ran(1, 100));
        stats.record(IoOp::Read, &ran(1, 7));
        stats.record(IoOp::Read, &Err(Error::new(ErrorKind::InternalError, "x")));
        let s = stats.snapshot();
        assert_eq!((s.reads, s.writes, s.read_errors), (2, 1, 1));
        assert_eq!((s.bytes_read, s.bytes_written), (4103, 100));
        assert_eq!((s.ops_by(IoPath::Direct), s.ops_by(IoPath::Staged)), (1, 2));
        assert_eq!(s.backend("staged-one").unwrap().bytes, 107);
        assert_eq!(s.backend("direct-one").unwrap().ops, 1);
        let off = Stats::new(false, &[("a", IoPath::Staged)]);
        off.record(IoOp::Read, &ran(0, 1));
        assert_eq!(off.snapshot().backend("a").unwrap().ops, 0);
    }
}
