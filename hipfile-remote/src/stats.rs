//! The remote path's counters: requests, bytes, retries, errors.

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters of the remote path, shared by every object of one driver.
#[derive(Debug, Default)]
pub struct RemoteCounters {
    requests: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    retries: AtomicU64,
    errors: AtomicU64,
}

/// The remote path's counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteCounts {
    /// HTTP requests made, every attempt counted.
    pub requests: u64,
    /// Bytes of object data received.
    pub bytes_read: u64,
    /// Bytes of object data sent (and acknowledged).
    pub bytes_written: u64,
    /// Attempts repeated after a failure worth repeating.
    pub retries: u64,
    /// Requests that failed for good.
    pub errors: u64,
}

/// The counters' names, in [`RemoteCounts`] order, as statistics show them.
pub const COUNTER_NAMES: [&str; 5] = [
    "requests",
    "bytes_read",
    "bytes_written",
    "retries",
    "errors",
];

fn add(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

impl RemoteCounters {
    pub(crate) fn request(&self) {
        add(&self.requests, 1);
    }
    pub(crate) fn read_bytes(&self, n: usize) {
        add(&self.bytes_read, n as u64);
    }
    pub(crate) fn written_bytes(&self, n: usize) {
        add(&self.bytes_written, n as u64);
    }
    pub(crate) fn retry(&self) {
        add(&self.retries, 1);
    }
    pub(crate) fn error(&self) {
        add(&self.errors, 1);
    }

    /// The counts now.
    pub fn snapshot(&self) -> RemoteCounts {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RemoteCounts {
            requests: get(&self.requests),
            bytes_read: get(&self.bytes_read),
            bytes_written: get(&self.bytes_written),
            retries: get(&self.retries),
            errors: get(&self.errors),
        }
    }
}
