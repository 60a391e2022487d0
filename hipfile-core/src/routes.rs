//! Declines, failures and failovers per backend: counted by the registry as it offers requests,
//! turned on and read by the statistics ([`crate::Stats`]).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::decline::{Decline, DeclineReason};

fn add(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

/// Declines, failures and failovers, counted by the registry as it offers requests.
#[derive(Debug)]
pub struct RouteCounters {
    enabled: AtomicBool,
    backends: Vec<RouteRow>,
    /// Requests that failed because their file handle's policy is direct only
    /// ([`crate::IoPolicy::DirectOnly`]) and no direct backend ran them.
    refused_by_policy: AtomicU64,
}

#[derive(Debug)]
struct RouteRow {
    declines: [AtomicU64; DeclineReason::ALL.len()],
    errors: AtomicU64,
    failovers_to: Vec<AtomicU64>,
}

impl RouteCounters {
    /// Counters for `backends` backends, off until a [`crate::Stats`] turns them on.
    pub fn new(backends: usize) -> Self {
        RouteCounters {
            enabled: AtomicBool::new(false),
            backends: (0..backends)
                .map(|_| RouteRow {
                    declines: std::array::from_fn(|_| AtomicU64::new(0)),
                    errors: AtomicU64::new(0),
                    failovers_to: (0..backends).map(|_| AtomicU64::new(0)).collect(),
                })
                .collect(),
            refused_by_policy: AtomicU64::new(0),
        }
    }

    fn on(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// Count from now on, or not (the statistics level says).
    pub(crate) fn enable(&self, on: bool) {
        self.enabled.store(on, Ordering::Relaxed);
    }

    /// Requests backend `index` failed.
    pub(crate) fn errors(&self, index: usize) -> u64 {
        self.backends.get(index).map_or(0, |r| get(&r.errors))
    }

    /// Declines of backend `index` by reason, the reasons with none left out, in
    /// [`DeclineReason::ALL`] order.
    pub(crate) fn declines(&self, index: usize) -> Vec<(DeclineReason, u64)> {
        self.backends.get(index).map_or_else(Vec::new, |r| {
            DeclineReason::ALL
                .iter()
                .map(|&reason| (reason, get(&r.declines[reason.index()])))
                .filter(|(_, n)| *n > 0)
                .collect()
        })
    }

    /// Failovers from backend `index`, by position of the backend that took over.
    pub(crate) fn failovers(&self, index: usize) -> impl Iterator<Item = u64> + '_ {
        self.backends
            .get(index)
            .into_iter()
            .flat_map(|r| r.failovers_to.iter().map(get))
    }

    /// Requests refused by a direct-only policy so far.
    pub(crate) fn policy_refusals(&self) -> u64 {
        get(&self.refused_by_policy)
    }

    /// A request failed closed: its handle's policy is direct only and no direct backend ran it.
    pub fn refused_by_policy(&self) {
        if self.on() {
            add(&self.refused_by_policy, 1);
        }
    }

    /// Backend `index` declined a request.
    pub fn declined(&self, index: usize, decline: &Decline) {
        if let Some(row) = self.backends.get(index).filter(|_| self.on()) {
            add(&row.declines[decline.reason().index()], 1);
        }
    }

    /// Backend `index` failed a request it accepted.
    pub fn failed(&self, index: usize) {
        if let Some(row) = self.backends.get(index).filter(|_| self.on()) {
            add(&row.errors, 1);
        }
    }

    /// Backend `to` took over a request backend `from` failed.
    pub fn failed_over(&self, from: usize, to: usize) {
        if let Some(n) = self
            .backends
            .get(from)
            .and_then(|row| row.failovers_to.get(to))
            .filter(|_| self.on())
        {
            add(n, 1);
        }
    }
}
