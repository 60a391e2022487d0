//! Batches: many requests in flight at once, reaped as they finish (`hipFileBatchIO*`).
//!
//! A batch holds up to its capacity of entries, each a validated request ([`Prepared`]) submitted
//! to the registry with [`Submit::Queue`], so every entry of a submission is in flight across the
//! engine at once: the backends' IO workers run them side by side (the staged engine adds
//! workers up to its queue depth), and the submitting thread returns as soon as they are queued.
//! Each request carries the batch's [`Doorbell`]; a backend rings it when a queued request
//! finishes, and [`crate::Driver::batch_status`] sleeps on it until enough entries are terminal.
//!
//! Semantics (upstream hipFile; cuFile where upstream is silent):
//!
//! - Capacity counts every entry not yet reaped, finished or not, and every entry reported as
//!   timed out that still runs. A submission that does not fit is `BatchFull`; a bad entry fails
//!   the whole submission with nothing submitted.
//! - Entries are independent: one failing never affects another; failover from one backend to
//!   the next applies per entry, exactly as for a synchronous request.
//! - [`crate::Driver::batch_status`] reports terminal entries only (complete, failed, canceled, timed
//!   out), in submission order, and forgets the ones it reports. An entry still running when the
//!   batch IO timeout of the settings passes (`batch_io_timeout_ms`, 0: none) is reported as
//!   timed out; it keeps running and keeps its place in the capacity until it finishes, and its
//!   bytes are never reported.
//! - [`crate::Driver::batch_cancel`] withdraws the entries no thread has started (they report
//!   canceled, 0 bytes) and waits for the started ones to finish.
//! - [`crate::Driver::batch_destroy`] cancels, waits and forgets the batch; closing the driver to zero
//!   destroys every batch. Nothing of a batch outlives the memory it reads into: every
//!   in-flight entry holds its buffer as in flight, so it cannot be deregistered
//!   (`InvalidValue`), and its file's registration, which a deregistration of the handle
//!   forgets at once but closes only when the last entry on it ends. An entry reported as timed
//!   out lets its place and its holds go when it finishes: the next submission, room count,
//!   status call or buffer deregistration finds it finished.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rustix::io::Errno;

use crate::backend::IoPath;
use crate::completion::{Doorbell, Submit};
use crate::error::{Error, ErrorKind, Result};
use crate::registry::Submitted;
use crate::session::Session;
use crate::stats::Channel;
use crate::validate::{self, IoCall, Prepared};

/// Opaque identity of a batch (what C callers see as `hipFileBatchHandle_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BatchId(pub u64);

/// One entry of a submission: the request and the caller's tag for it.
#[derive(Clone, Copy, Debug)]
pub struct BatchEntry {
    /// The request, as a synchronous call would state it.
    pub call: IoCall,
    /// Echoed in the entry's [`BatchEvent`].
    pub cookie: usize,
}

/// Final state of a batch entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchStatus {
    /// Done: the result holds the bytes moved (fewer than asked only for a read at end of file).
    Complete,
    /// Failed: the result holds the error.
    Failed,
    /// Withdrawn before it started: 0 bytes moved.
    Canceled,
    /// Still running when the batch IO timeout passed; the result is `ETIMEDOUT`.
    Timeout,
}

/// A terminal entry, as [`crate::Driver::batch_status`] reports it.
#[derive(Debug)]
pub struct BatchEvent {
    /// The entry's cookie.
    pub cookie: usize,
    /// How it ended.
    pub status: BatchStatus,
    /// Bytes moved, or the error.
    pub result: Result<usize>,
}

/// A batch: its capacity, its entries and the doorbell its requests ring.
#[derive(Debug)]
pub(crate) struct Batch {
    capacity: usize,
    doorbell: Doorbell,
    entries: Mutex<Entries>,
}

/// The entries of a batch, by sequence number (submission order). Reaping costs what the
/// entries that finished cost, not what the batch holds: the doorbell hands over the sequence
/// numbers of the requests that rang, and only those are looked at.
#[derive(Debug, Default)]
struct Entries {
    /// The next sequence number.
    next: u64,
    /// Entries in flight.
    running: BTreeMap<u64, Running>,
    /// Terminal entries not yet reaped.
    done: BTreeMap<u64, BatchEvent>,
    /// Entries reported as timed out that still run.
    overdue: Vec<Running>,
    /// When every running entry was last looked at.
    swept: Option<Instant>,
    /// Whether any entry was submitted with a timeout.
    timeouts: bool,
}

/// An entry in flight. Field order matters: the submission (whose drop waits for an unfinished
/// request) is dropped before the validated request that holds the memory and file in flight.
#[derive(Debug)]
struct Running {
    submitted: Submitted,
    prepared: Prepared,
    session: Arc<Session>,
    cookie: usize,
    /// When the entry times out (`None`: never).
    deadline: Option<Instant>,
    /// When it was submitted ([`crate::Stats::now_us`]).
    start_us: u64,
    /// The submission it came in ([`crate::Stats::batch_submission`]).
    submission: u64,
}

/// How long a waiter sleeps at most between looks at every entry: a backend that does not ring
/// the doorbell still has its requests reaped, only later.
const RECHECK: Duration = Duration::from_millis(10);

/// The event of an entry that ended with `result`.
fn event_of(cookie: usize, result: Result<usize>) -> BatchEvent {
    let status = match &result {
        Ok(_) => BatchStatus::Complete,
        Err(e) => {
            log::warn!("batch entry (cookie {cookie:#x}) failed: {e}");
            BatchStatus::Failed
        }
    };
    BatchEvent {
        cookie,
        status,
        result,
    }
}

/// What looking at a running entry found. Moved once per look and never stored: boxing the
/// running entry would cost an allocation per look.
#[allow(clippy::large_enum_variant)]
enum Polled {
    /// It finished (after any failover) with this result.
    Finished(Result<usize>),
    /// It still runs.
    Running(Running),
}

impl Running {
    /// The result if the request finished (after any failover), else the entry back.
    fn poll(self) -> Polled {
        let submitted = self.submitted;
        let registry = self.session.registry();
        let staged = registry.path_of(submitted.backend_index()) == Some(IoPath::Staged);
        let polled = submitted.poll(registry, &self.prepared.request.request());
        match polled {
            Ok(result) => {
                let request = self.prepared.request.request();
                let op = request.op;
                let session = &self.session;
                session.count_io(op, Channel::Batch, Some(&request), self.start_us, &result);
                match &result {
                    Ok(d) => session
                        .stats()
                        .batch_entry_bytes(self.submission, op, d.bytes),
                    Err(_) if staged => session.stats().batch_staged_failed(),
                    Err(_) => {}
                }
                Polled::Finished(result.map(|d| d.bytes))
            }
            Err(submitted) => Polled::Running(Running { submitted, ..self }),
        }
    }
}

impl Entries {
    /// Look at the entries that rang (every running entry when `sweep` says so, or when
    /// [`RECHECK`] passed since the last sweep): record the finished ones, report the overdue
    /// ones as timed out, forget timed-out ones that finished since.
    fn advance(&mut self, doorbell: &Doorbell, now: Instant, sweep: bool) {
        let sweep = sweep || self.swept.map_or(true, |at| now >= at + RECHECK);
        let rung = doorbell.take_rung();
        let mut seqs: Vec<u64> = if sweep {
            self.swept = Some(now);
            self.running.keys().copied().collect()
        } else {
            rung
        };
        if self.timeouts {
            seqs.extend(
                self.running
                    .iter()
                    .filter(|(_, r)| r.deadline.is_some_and(|d| now >= d))
                    .map(|(seq, _)| *seq),
            );
        }
        // A sequence number named twice is found the first time only.
        for seq in seqs {
            if let Some(running) = self.running.remove(&seq) {
                self.settle(seq, running, now);
            }
        }
        self.release_overdue();
    }

    /// Forget the entries reported as timed out that have finished since: their places in the
    /// capacity and their holds on file and memory end with them.
    fn release_overdue(&mut self) {
        if !self.overdue.is_empty() {
            let overdue = std::mem::take(&mut self.overdue);
            self.overdue = overdue
                .into_iter()
                .filter_map(|running| match running.poll() {
                    Polled::Finished(_) => None,
                    Polled::Running(running) => Some(running),
                })
                .collect();
        }
    }

    /// Poll one running entry and file it where it now belongs.
    fn settle(&mut self, seq: u64, running: Running, now: Instant) {
        let cookie = running.cookie;
        match running.poll() {
            Polled::Finished(result) => {
                self.done.insert(seq, event_of(cookie, result));
            }
            Polled::Running(running) if running.deadline.is_some_and(|d| now >= d) => {
                log::warn!("batch entry (cookie {cookie:#x}) ran past the batch IO timeout");
                self.overdue.push(running);
                self.done.insert(
                    seq,
                    BatchEvent {
                        cookie,
                        status: BatchStatus::Timeout,
                        result: Err(Error::os(
                            Errno::TIMEDOUT.raw_os_error(),
                            "the entry ran past the batch IO timeout",
                        )),
                    },
                );
            }
            Polled::Running(running) => {
                self.running.insert(seq, running);
            }
        }
    }

    /// Entries not yet reaped, finished or not.
    fn unreaped(&self) -> usize {
        self.running.len() + self.done.len()
    }

    /// Entries that count against the capacity.
    fn outstanding(&self) -> usize {
        self.unreaped() + self.overdue.len()
    }

    /// Whether any entry still runs, reported or not.
    fn busy(&self) -> bool {
        !self.overdue.is_empty() || !self.running.is_empty()
    }

    /// The earliest timeout of a running entry.
    fn next_deadline(&self) -> Option<Instant> {
        if !self.timeouts {
            return None;
        }
        self.running.values().filter_map(|r| r.deadline).min()
    }

    /// Remove and answer up to `max` terminal entries, in submission order.
    fn take_terminal(&mut self, max: usize) -> Vec<BatchEvent> {
        std::iter::from_fn(|| self.done.pop_first().map(|(_, event)| event))
            .take(max)
            .collect()
    }

    /// Withdraw every running entry no thread has started.
    fn cancel(&mut self) {
        let withdrawn: Vec<u64> = self
            .running
            .iter()
            .filter(|(_, r)| r.submitted.cancel())
            .map(|(seq, _)| *seq)
            .collect();
        for seq in withdrawn {
            if let Some(running) = self.running.remove(&seq) {
                // Withdrawn: its completion has finished, so dropping it does not wait.
                self.done.insert(
                    seq,
                    BatchEvent {
                        cookie: running.cookie,
                        status: BatchStatus::Canceled,
                        result: Ok(0),
                    },
                );
            }
        }
    }
}

impl Batch {
    fn new(capacity: usize) -> Self {
        Batch {
            capacity,
            doorbell: Doorbell::new(),
            entries: Mutex::new(Entries::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wait until `done` says the entries are where the caller wants them, or until `deadline`;
    /// answers the entries, locked and freshly advanced.
    fn wait_for(
        &self,
        deadline: Option<Instant>,
        done: impl Fn(&Entries) -> bool,
    ) -> MutexGuard<'_, Entries> {
        let mut rang = true;
        loop {
            let seen = self.doorbell.rung();
            let mut entries = self.lock();
            let now = Instant::now();
            // A wait that ended without a ring looks at every entry: a request of a backend
            // that does not ring is found that way.
            entries.advance(&self.doorbell, now, !rang);
            if done(&entries) || deadline.is_some_and(|d| now >= d) {
                return entries;
            }
            let wake = [deadline, entries.next_deadline(), Some(now + RECHECK)]
                .into_iter()
                .flatten()
                .min();
            drop(entries);
            rang = self.doorbell.wait_past(seen, wake);
        }
    }

    /// Withdraw what has not started and wait for the rest.
    pub(crate) fn cancel(&self) {
        self.lock().cancel();
        drop(self.wait_for(None, |entries| !entries.busy()));
    }
}

/// The batches of a driver, by id. Setting one up needs no open driver; lock order: after the
/// driver's state.
#[derive(Debug, Default)]
pub(crate) struct Batches(Mutex<BatchTable>);

#[derive(Debug, Default)]
struct BatchTable {
    next: u64,
    by_id: std::collections::HashMap<u64, Arc<Batch>>,
}

/// Cancel and wait for every batch of `batches` (a driver closing to zero).
pub(crate) fn shut_down(batches: Vec<Arc<Batch>>) {
    for batch in batches {
        batch.cancel();
    }
}

fn invalid(what: &str) -> Error {
    Error::new(ErrorKind::InvalidValue, what.to_string())
}

impl Batches {
    fn table(&self) -> MutexGuard<'_, BatchTable> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn batch(&self, id: BatchId) -> Result<Arc<Batch>> {
        self.table()
            .by_id
            .get(&id.0)
            .cloned()
            .ok_or_else(|| invalid("the batch handle is not set up"))
    }

    /// Every batch set up now (the table's lock is not held while they are looked at).
    fn all(&self) -> Vec<Arc<Batch>> {
        self.table().by_id.values().cloned().collect()
    }

    /// Forget every batch; the caller cancels and waits for them ([`shut_down`]).
    pub(crate) fn take_all(&self) -> Vec<Arc<Batch>> {
        self.table().by_id.drain().map(|(_, b)| b).collect()
    }

    /// Let entries reported as timed out that have finished since go, so that the file and
    /// memory they held are free: what a deregistration looks at. Each batch is locked in turn,
    /// with no other lock held.
    pub(crate) fn release_finished(&self) {
        for batch in self.all() {
            batch.lock().release_overdue();
        }
    }

    /// A batch for up to `capacity` entries, at most `max_entries` (the settings'
    /// `max_batch_io_size`).
    pub(crate) fn setup(&self, capacity: usize, max_entries: u64) -> Result<BatchId> {
        let limit = usize::try_from(max_entries).unwrap_or(usize::MAX);
        if capacity == 0 || capacity > limit {
            return Err(Error::new(
                ErrorKind::InvalidValue,
                format!("a batch holds 1 to {limit} entries, not {capacity}"),
            ));
        }
        let mut table = self.table();
        // Ids start high so a small integer or NULL is never a batch handle.
        table.next = table.next.max(0x1000) + 0x10;
        let id = table.next;
        table.by_id.insert(id, Arc::new(Batch::new(capacity)));
        Ok(BatchId(id))
    }

    /// Validate every entry against the open driver's `session`, then queue them all. A
    /// submission that does not fit in what the batch has room for is `BatchFull`; an invalid
    /// entry is `InvalidValue` (an unregistered file handle `HandleNotRegistered`) and nothing
    /// is queued.
    pub(crate) fn submit(
        &self,
        id: BatchId,
        session: Option<&Arc<Session>>,
        entries: &[BatchEntry],
    ) -> Result<()> {
        let Some(session) = session else {
            self.batch(id)?;
            return Err(Error::new(
                ErrorKind::DriverNotInitialized,
                "the driver is not open",
            ));
        };
        let stats = session.stats();
        let start = stats.now_us();
        let mut paths = (0, 0);
        let result = self.submit_counted(id, session, entries, &mut paths);
        let end = stats.now_us();
        stats.batch_submitted(result.is_ok(), end.saturating_sub(start), paths.0, paths.1);
        result
    }

    /// [`Batches::submit`], counting in `paths` the entries handed to direct and staged
    /// backends.
    fn submit_counted(
        &self,
        id: BatchId,
        session: &Arc<Session>,
        entries: &[BatchEntry],
        paths: &mut (usize, usize),
    ) -> Result<()> {
        let batch = self.batch(id)?;
        let mut state = batch.lock();
        // Entries that finished since the last look, timed-out ones that still held a place
        // included, give their places back before the room is counted.
        state.advance(&batch.doorbell, Instant::now(), false);
        if entries.len() > batch.capacity - state.outstanding() {
            return Err(Error::new(
                ErrorKind::BatchFull,
                format!(
                    "{} entries do not fit: the batch holds {} of {}",
                    entries.len(),
                    state.outstanding(),
                    batch.capacity
                ),
            ));
        }
        let prepared = entries
            .iter()
            .map(|entry| validate::prepare_batch_entry(session, &entry.call))
            .collect::<Result<Vec<_>>>()?;
        let timeout = Duration::from_millis(session.settings().batch_io_timeout_ms);
        let now = Instant::now();
        let stats = session.stats();
        let submission = stats.batch_submission();
        let start_us = stats.now_us();
        for (entry, mut prepared) in entries.iter().zip(prepared) {
            let seq = state.next;
            state.next += 1;
            let result = match prepared.answer.take() {
                Some(answer) => answer,
                None => {
                    prepared.request.doorbell = Some(batch.doorbell.tagged(seq));
                    match session
                        .registry()
                        .submit(&prepared.request.request(), Submit::Queue)
                    {
                        // Polled at once: a request that finished inside `submit` is recorded
                        // now, and one that failed there fails over now.
                        Ok(submitted) => match (Running {
                            session: Arc::clone(session),
                            cookie: entry.cookie,
                            deadline: (!timeout.is_zero())
                                .then(|| now.checked_add(timeout))
                                .flatten(),
                            start_us,
                            submission,
                            prepared,
                            submitted: {
                                let path = session.registry().path_of(submitted.backend_index());
                                stats.batch_enqueued(path);
                                match path {
                                    Some(IoPath::Direct) => paths.0 += 1,
                                    Some(IoPath::Staged) => paths.1 += 1,
                                    // Host memory: neither GPU path.
                                    Some(IoPath::Host) | None => {}
                                }
                                submitted
                            },
                        })
                        .poll()
                        {
                            Polled::Finished(result) => result,
                            Polled::Running(running) => {
                                state.timeouts |= running.deadline.is_some();
                                state.running.insert(seq, running);
                                continue;
                            }
                        },
                        Err(e) => {
                            stats.batch_enqueued(None);
                            let request = prepared.request.request();
                            let failed = Err(e.clone());
                            session.count_io(
                                request.op,
                                Channel::Batch,
                                Some(&request),
                                start_us,
                                &failed,
                            );
                            Err(e)
                        }
                    }
                }
            };
            state.done.insert(seq, event_of(entry.cookie, result));
        }
        Ok(())
    }

    /// Wait until at least `min` entries are terminal (all of them, when fewer are
    /// outstanding), or until `timeout` passes (`None`: no limit), then answer up to `max`
    /// terminal entries, in submission order, and forget them. With no entry outstanding it
    /// answers none at once.
    pub(crate) fn status(
        &self,
        id: BatchId,
        min: usize,
        max: usize,
        timeout: Option<Duration>,
    ) -> Result<Vec<BatchEvent>> {
        if max == 0 || min > max {
            return Err(invalid(
                "the event count must be at least 1 and at least min_nr",
            ));
        }
        let batch = self.batch(id)?;
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        // As upstream, a `min` above the entries outstanding waits for those only.
        let mut entries = batch.wait_for(deadline, |e| e.done.len() >= min.min(e.unreaped()));
        Ok(entries.take_terminal(max))
    }

    /// Withdraw the entries no thread has started (they report canceled) and wait until no
    /// entry of the batch runs.
    pub(crate) fn cancel(&self, id: BatchId) -> Result<()> {
        self.batch(id).map(|batch| batch.cancel())
    }

    /// Forget batch `id`; the caller cancels it ([`Batch::cancel`]).
    pub(crate) fn remove(&self, id: BatchId) -> Result<Arc<Batch>> {
        let removed = self.table().by_id.remove(&id.0);
        removed.ok_or_else(|| invalid("the batch handle is not set up"))
    }

    /// How many more entries `id` has room for now.
    pub(crate) fn room(&self, id: BatchId) -> Result<usize> {
        let batch = self.batch(id)?;
        let mut entries = batch.lock();
        entries.advance(&batch.doorbell, Instant::now(), false);
        Ok(batch.capacity - entries.outstanding())
    }

    /// Batches set up now.
    pub(crate) fn count(&self) -> usize {
        self.table().by_id.len()
    }
}
