//! The remote path's counters: requests, bytes, retries, errors.
//!
//! Kept by the remote path itself (always) and added to the open driver's statistics as the
//! path `remote` beside the backends ([`hipfile_core::SidePath`], counted from statistics
//! level 1, shown by `hipfile stats`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hipfile_core::SidePath;

/// The name of the remote path in the driver's statistics.
pub const PATH_NAME: &str = "remote";

/// The counters' names, in [`RemoteCounts`] order, as the driver's statistics show them.
pub const COUNTER_NAMES: &[&str] = &[
    "requests",
    "read_bytes",
    "written_bytes",
    "retries",
    "errors",
];

const REQUESTS: usize = 0;
const READ_BYTES: usize = 1;
const WRITTEN_BYTES: usize = 2;
const RETRIES: usize = 3;
const ERRORS: usize = 4;

/// Counters of the remote path, shared by every object of one open driver.
#[derive(Debug)]
pub struct RemoteCounters {
    values: [AtomicU64; 5],
    side: Option<Arc<SidePath>>,
}

/// The remote path's counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RemoteCounts {
    /// HTTP requests made, every attempt counted.
    pub requests: u64,
    /// Bytes of object data received.
    pub read_bytes: u64,
    /// Bytes of object data sent and acknowledged.
    pub written_bytes: u64,
    /// Attempts repeated after a failure worth repeating.
    pub retries: u64,
    /// Requests that failed for good.
    pub errors: u64,
}

impl RemoteCounters {
    /// Counters that also add to `side`, the driver's statistics of the path.
    pub(crate) fn new(side: Option<Arc<SidePath>>) -> Self {
        RemoteCounters {
            values: Default::default(),
            side,
        }
    }

    fn add(&self, index: usize, n: u64) {
        self.values[index].fetch_add(n, Ordering::Relaxed);
        if let Some(side) = &self.side {
            side.add(index, n);
        }
    }

    pub(crate) fn request(&self) {
        self.add(REQUESTS, 1);
    }
    pub(crate) fn read_bytes(&self, n: usize) {
        self.add(READ_BYTES, n as u64);
    }
    pub(crate) fn written_bytes(&self, n: usize) {
        self.add(WRITTEN_BYTES, n as u64);
    }
    pub(crate) fn retry(&self) {
        self.add(RETRIES, 1);
    }
    pub(crate) fn error(&self) {
        self.add(ERRORS, 1);
    }

    /// The counts now.
    pub fn snapshot(&self) -> RemoteCounts {
        let get = |i: usize| self.values[i].load(Ordering::Relaxed);
        RemoteCounts {
            requests: get(REQUESTS),
            read_bytes: get(READ_BYTES),
            written_bytes: get(WRITTEN_BYTES),
            retries: get(RETRIES),
            errors: get(ERRORS),
        }
    }
}
