//! Batches in the C API model: `hipFileBatchIO{SetUp,Submit,GetStatus,Cancel,Destroy}`.
//!
//! Rules, in the order the entry points check them:
//! - `hipFileBatchIOSetUp`: a NULL out-pointer, `max_nr` 0 or above [`MAX_BATCH`] (the
//!   `max_batch_io_count` property) are `InvalidValue`. It works on a closed driver and changes
//!   no use count.
//! - `hipFileBatchIOSubmit`: `nr` 0 or a NULL array is `InvalidValue`; then an unknown (or
//!   destroyed) batch is `InvalidValue`; then more entries than the batch has room for (entries
//!   not yet collected count, finished or not) are `BatchFull`, before any entry is read (on a
//!   closed driver too); then an entry whose mode is not `hipFileBatch` or whose opcode is
//!   neither read nor write is `InvalidValue`; then a closed driver is `DriverNotInitialized`.
//!   Then each entry in turn, the first bad one failing the whole call with nothing queued: a
//!   handle not registered is `HandleNotRegistered`; a negative file or buffer offset, a file
//!   range past the largest file offset, a NULL buffer, an entry whose first byte (even for
//!   zero bytes) or last byte lies past its memory (a registered buffer's registered length,
//!   else the allocation) are `InvalidValue`; memory that is not device memory is
//!   `HipMemoryTypeInvalid`.
//! - An accepted entry ends on its own: through a descriptor that does not allow its direction
//!   it fails with `-EBADF`, zero bytes complete with 0, a read at or past the end of a
//!   non-empty file completes with 0; all of these are over when the submission returns. Every
//!   other entry runs as `hipFileRead`/`hipFileWrite` would and completes with their count and
//!   bytes, unless a `hipFileBatchIOCancel` of its batch withdrew it before it started: then it
//!   is canceled, with 0 and no byte moved.
//! - `hipFileBatchIOGetStatus`: NULL `nr` or events, `*nr` 0, `min_nr > *nr`, a timespec with a
//!   negative second or nanoseconds outside a second are `InvalidValue`, then an unknown batch.
//!   It returns at most `*nr` ended entries, in submission order, each once, and forgets them:
//!   the first ones that have ended (one that is known to have ended is never passed over). With
//!   no timeout it waits for `min_nr` of them (for all there are, when fewer are in flight).
//! - `hipFileBatchIOCancel` of an unknown batch is `InvalidValue`; it returns once no entry of
//!   the batch runs. `hipFileBatchIODestroy` cancels, waits and forgets (an unknown batch is
//!   ignored); closing the driver to zero destroys every batch.
//! - An entry in flight holds its registered buffer (deregistering it is `InvalidValue` until the
//!   entry has ended and been looked at) and its file's registration (deregistering the handle
//!   forgets it at once; the entry finishes on the registration). The model cannot time when an
//!   entry ends, so neither deregistration is run while one may be in flight
//!   ([`ApiModel::runnable`]).
//!
//! The model does not know how far an entry has come, so it keeps each accepted entry that runs
//! as what it would move, and where, to apply once an event says it completed, and judges the
//! events against what each entry may do. Sequences keep entries in flight clear of each other
//! and of every other IO (no two touch the same bytes where one of them writes), so the order
//! in which they run changes nothing.

use std::ops::Range;

use hipfile_core::{ErrorKind, IoOp, MAX_RW_COUNT};
use rustix::io::Errno;

use super::io::Effect;
use super::{ApiExpected, ApiModel, ApiOp, Failure, HandleRef, IoArgs, Memory, DESCRIPTORS};
use crate::model::Answer;

/// Slots a sequence keeps batch handles in.
pub const BATCH_SLOTS: usize = 2;

/// The most entries a batch holds (the `max_batch_io_count` property's default).
pub const MAX_BATCH: u32 = 128;

/// The batch an operation names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BatchRef {
    /// The latest batch set up in this slot (a value no driver issued if none was).
    Current(usize),
    /// The one set up there before it.
    Previous(usize),
    /// NULL.
    Null,
    /// A value no driver issues.
    Bogus,
}

/// One entry of a `hipFileBatchIOSubmit` parameter array (mode `hipFileBatch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntrySpec {
    /// What it reads or writes, and where.
    pub io: IoArgs,
    /// The cookie.
    pub cookie: u64,
}

/// How a `hipFileBatchIOSubmit` call's arguments are broken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SubmitFlaw {
    /// They are not.
    None,
    /// `nr` is 0 (the array is there).
    ZeroCount,
    /// The array is NULL.
    NullParams,
    /// This entry's mode is not `hipFileBatch`.
    BadMode(usize),
    /// This entry's opcode is neither read nor write.
    BadOpcode(usize),
}

/// The timeout of a `hipFileBatchIOGetStatus` call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timeout {
    /// NULL: wait for `min_nr`.
    Forever,
    /// Zero: look and return.
    Zero,
    /// Some milliseconds.
    Millis(u32),
    /// A negative `tv_sec`.
    NegativeSeconds,
    /// `tv_nsec` of a second or more.
    NanosOutOfRange,
}

/// How a `hipFileBatchIOGetStatus` call's arguments are broken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatusFlaw {
    /// They are not.
    None,
    /// `nr` is NULL.
    NullCount,
    /// The events array is NULL.
    NullEvents,
}

/// How an entry ended, as an event reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventStatus {
    /// `hipFileComplete`.
    Complete,
    /// `hipFileFailed`.
    Failed,
    /// `hipFileCanceled`.
    Canceled,
    /// `hipFileTimeout`.
    Timeout,
    /// Any other status value.
    Other(i32),
}

/// One `hipFileIOEvents_t`: the cookie, the status, and `ret` read as signed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Event {
    /// The cookie.
    pub cookie: u64,
    /// The status.
    pub status: EventStatus,
    /// Bytes moved, or the negative error.
    pub ret: i64,
}

/// What a request in flight may change: bytes of a file and of an allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Footprint {
    file: usize,
    file_range: Range<u64>,
    file_write: bool,
    allocation: usize,
    device: Range<usize>,
    device_write: bool,
}

fn overlap<T: PartialOrd>(a: &Range<T>, b: &Range<T>) -> bool {
    a.start < b.end && b.start < a.end
}

impl Footprint {
    /// Whether the two may see each other's bytes: they share bytes and one of them writes them.
    pub(super) fn meets(&self, other: &Footprint) -> bool {
        let files = self.file == other.file
            && (self.file_write || other.file_write)
            && overlap(&self.file_range, &other.file_range);
        let memory = self.allocation == other.allocation
            && (self.device_write || other.device_write)
            && overlap(&self.device, &other.device);
        files || memory
    }
}

/// How an accepted entry ends.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Fate {
    /// Over before the submission returned.
    Answered(Result<usize, Failure>),
    /// Handed to a backend: completes with `effect`, or is canceled when `canceled` says a
    /// cancel came after it (which also means it no longer runs).
    Runs {
        effect: Effect,
        footprint: Footprint,
        canceled: bool,
    },
}

/// An entry not yet collected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ModelEntry {
    cookie: u64,
    fate: Fate,
    /// The file and allocation it names, compared once it is collected.
    file: Option<usize>,
    allocation: Option<usize>,
}

/// A live batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BatchState {
    capacity: usize,
    entries: Vec<ModelEntry>,
}

impl BatchState {
    /// Entries not yet collected, ended or not.
    pub(super) fn in_flight(&self) -> usize {
        self.entries.len()
    }

    /// Entries a submission may add: what is not yet collected takes room.
    pub(super) fn room(&self) -> usize {
        self.capacity - self.in_flight()
    }
}

/// A `hipFileBatchIOGetStatus` the model accepted, waiting for the events it returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct StatusCall {
    serial: u64,
    min: usize,
    max: usize,
    forever: bool,
}

/// What an entry that passed its checks does.
enum Classified {
    Answered(Result<usize, Failure>),
    Runs(Effect),
}

fn invalid() -> Failure {
    Failure::of(ErrorKind::InvalidValue)
}

/// The event an entry that ended at submission reports.
fn answered_event(result: &Result<usize, Failure>) -> (EventStatus, i64) {
    match result {
        Ok(n) => (EventStatus::Complete, *n as i64),
        Err(f) => (EventStatus::Failed, f.negative_code()),
    }
}

impl ApiModel {
    /// The serial number of the live batch `batch` names.
    pub(super) fn serial(&self, batch: BatchRef) -> Option<u64> {
        let serial = match batch {
            BatchRef::Current(slot) => self.batch_slots.get(slot)?[0],
            BatchRef::Previous(slot) => self.batch_slots.get(slot)?[1],
            BatchRef::Null | BatchRef::Bogus => None,
        }?;
        self.batches.contains_key(&serial).then_some(serial)
    }

    /// The live batch `batch` names.
    pub(super) fn live(&self, batch: BatchRef) -> Option<&BatchState> {
        self.serial(batch).map(|serial| &self.batches[&serial])
    }

    /// Entries handed to a backend and not yet collected, of every batch: their effect,
    /// footprint, and whether a cancel came after them.
    fn running(&self) -> impl Iterator<Item = (&Effect, &Footprint, bool)> {
        self.batches
            .values()
            .flat_map(|b| &b.entries)
            .filter_map(|e| match &e.fate {
                Fate::Runs {
                    effect,
                    footprint,
                    canceled,
                } => Some((effect, footprint, *canceled)),
                Fate::Answered(_) => None,
            })
    }

    /// The requests whose bytes the model cannot know yet (entries that may have run).
    pub(crate) fn busy(&self) -> Vec<&Effect> {
        self.running().map(|(e, _, _)| e).collect()
    }

    /// Where `effect` may change bytes while it is in flight. A write reaches from the end of
    /// the file (zeroes fill a hole) or, appending, anywhere.
    pub(super) fn footprint(&self, effect: &Effect) -> Footprint {
        let len = self.files[effect.file].len() as u64;
        let at = effect.file_offset as u64;
        let file_range = match (effect.op, effect.append) {
            (IoOp::Read, _) => at..at.saturating_add(effect.size as u64),
            (IoOp::Write, true) => 0..u64::MAX,
            (IoOp::Write, false) => at.min(len)..at + effect.size as u64,
        };
        Footprint {
            file: effect.file,
            file_range,
            file_write: effect.op == IoOp::Write,
            allocation: effect.allocation,
            device: effect.start..effect.start + effect.size,
            device_write: effect.op == IoOp::Read,
        }
    }

    /// Whether a request with `footprint` would meet an entry in flight.
    pub(super) fn conflicts(&self, footprint: &Footprint) -> bool {
        self.running().any(|(_, f, _)| f.meets(footprint))
    }

    /// Check an entry as the submission does: its error, or what it does.
    fn classify(&self, e: &EntrySpec) -> Result<Classified, Failure> {
        let io = &e.io;
        let Some(d) = self.handle_file(io.handle) else {
            return Err(Failure::of(ErrorKind::HandleNotRegistered));
        };
        if io.file_offset < 0 || io.buffer_offset < 0 {
            return Err(invalid());
        }
        if (io.file_offset as u64).saturating_add(io.size as u64) > i64::MAX as u64 {
            return Err(invalid());
        }
        // The first byte must be inside the memory even for an entry of no bytes.
        self.check_memory(io.memory, io.buffer_offset, io.size.clamp(1, MAX_RW_COUNT))?;
        if !self.allows(d, io.op) {
            return Ok(Classified::Answered(Err(Failure::os(Errno::BADF))));
        }
        if io.size == 0 {
            return Ok(Classified::Answered(Ok(0)));
        }
        let len = self.files[DESCRIPTORS[d].file].len() as u64;
        if io.op == IoOp::Read && len > 0 && io.file_offset as u64 >= len {
            return Ok(Classified::Answered(Ok(0)));
        }
        let size = io.size.min(MAX_RW_COUNT);
        Ok(Classified::Runs(self.effect(io, d, size)))
    }

    /// The request an entry makes if it passes its checks and asks for bytes (reads at the end
    /// of the file included: what is there depends on the writes around it).
    pub(super) fn would_move(&self, e: &EntrySpec) -> Option<Effect> {
        match self.classify(e).ok()? {
            Classified::Runs(effect) => Some(effect),
            Classified::Answered(Ok(0)) if e.io.size > 0 => {
                let d = self.handle_file(e.io.handle)?;
                Some(self.effect(&e.io, d, e.io.size.min(MAX_RW_COUNT)))
            }
            Classified::Answered(_) => None,
        }
    }

    pub(super) fn batch_setup(&mut self, slot: usize, max_nr: u32, null_out: bool) -> ApiExpected {
        if null_out || max_nr == 0 || max_nr > MAX_BATCH {
            return Err(invalid());
        }
        let serial = self.next_batch;
        self.next_batch += 1;
        self.batches.insert(
            serial,
            BatchState {
                capacity: max_nr as usize,
                entries: Vec::new(),
            },
        );
        let slots = &mut self.batch_slots[slot];
        *slots = [Some(serial), slots[0]];
        Ok(Answer::Done)
    }

    pub(super) fn batch_submit(
        &mut self,
        batch: BatchRef,
        entries: &[EntrySpec],
        flaw: SubmitFlaw,
    ) -> ApiExpected {
        if let Some(last) = entries.iter().map(|e| e.cookie).max() {
            self.next_cookie = self.next_cookie.max(last + 1);
        }
        if matches!(flaw, SubmitFlaw::ZeroCount | SubmitFlaw::NullParams) || entries.is_empty() {
            return Err(invalid());
        }
        let serial = self.serial(batch).ok_or_else(invalid)?;
        let state = &self.batches[&serial];
        if entries.len() > state.room() {
            return Err(Failure::of(ErrorKind::BatchFull));
        }
        if flaw != SubmitFlaw::None {
            return Err(invalid());
        }
        if !self.refs.is_open() {
            return Err(Failure::of(ErrorKind::DriverNotInitialized));
        }
        let classified = entries
            .iter()
            .map(|e| self.classify(e))
            .collect::<Result<Vec<_>, _>>()?;
        let accepted: Vec<ModelEntry> = entries
            .iter()
            .zip(classified)
            .map(|(e, c)| ModelEntry {
                cookie: e.cookie,
                fate: match c {
                    Classified::Answered(result) => Fate::Answered(result),
                    Classified::Runs(effect) => Fate::Runs {
                        footprint: self.footprint(&effect),
                        effect,
                        canceled: false,
                    },
                },
                file: match e.io.handle {
                    HandleRef::Current(d) | HandleRef::Previous(d) => Some(DESCRIPTORS[d].file),
                    _ => None,
                },
                allocation: match e.io.memory {
                    Memory::Device { allocation, .. } => Some(allocation),
                    _ => None,
                },
            })
            .collect();
        self.batches
            .get_mut(&serial)
            .expect("looked up above")
            .entries
            .extend(accepted);
        Ok(Answer::Done)
    }

    pub(super) fn batch_status(
        &mut self,
        batch: BatchRef,
        min_nr: u32,
        nr: u32,
        timeout: Timeout,
        flaw: StatusFlaw,
    ) -> ApiExpected {
        if flaw != StatusFlaw::None
            || nr == 0
            || min_nr > nr
            || matches!(timeout, Timeout::NegativeSeconds | Timeout::NanosOutOfRange)
        {
            return Err(invalid());
        }
        let serial = self.serial(batch).ok_or_else(invalid)?;
        self.awaiting = Some(StatusCall {
            serial,
            min: min_nr as usize,
            max: nr as usize,
            forever: timeout == Timeout::Forever,
        });
        Ok(Answer::Done)
    }

    pub(super) fn batch_cancel(&mut self, batch: BatchRef) -> ApiExpected {
        let serial = self.serial(batch).ok_or_else(invalid)?;
        for entry in &mut self.batches.get_mut(&serial).expect("live").entries {
            if let Fate::Runs { canceled, .. } = &mut entry.fate {
                *canceled = true;
            }
        }
        Ok(Answer::Done)
    }

    pub(super) fn batch_destroy(&mut self, batch: BatchRef) {
        if let Some(serial) = self.serial(batch) {
            let state = self.batches.remove(&serial).expect("live");
            self.forget(state);
        }
    }

    /// Closing to zero: every batch goes.
    pub(super) fn destroy_all_batches(&mut self) {
        for (_, state) in std::mem::take(&mut self.batches) {
            self.forget(state);
        }
    }

    /// A batch destroyed with entries not collected: those that may have run are undetermined.
    fn forget(&mut self, state: BatchState) {
        for entry in state.entries {
            self.touch_entry(&entry);
            if let Fate::Runs { effect, .. } = entry.fate {
                self.undetermined.push(effect);
            }
        }
    }

    fn touch_entry(&mut self, entry: &ModelEntry) {
        self.dirty_files.extend(entry.file);
        self.dirty_allocations.extend(entry.allocation);
    }

    /// Judge the events the `hipFileBatchIOGetStatus` just applied returned, and take the
    /// entries they report (applying what completed). Answers what disagrees with the rules.
    pub fn reap(&mut self, events: &[Event]) -> Vec<String> {
        let Some(call) = self.awaiting.take() else {
            return vec!["events came back from a call the model did not accept".into()];
        };
        let state = &self.batches[&call.serial];
        let in_flight = state.entries.len();
        let mut problems = Vec::new();
        if events.len() > call.max.min(in_flight) {
            problems.push(format!(
                "{} events with room for {} and {in_flight} entries in flight",
                events.len(),
                call.max
            ));
        }
        if call.forever && events.len() < call.min.min(in_flight) {
            problems.push(format!(
                "{} events where the call waits for {} of {in_flight}",
                events.len(),
                call.min
            ));
        }
        // Events name entries in submission order, each once.
        let mut matched: Vec<(usize, Event)> = Vec::new();
        let mut from = 0;
        for event in events {
            match state.entries[from..]
                .iter()
                .position(|e| e.cookie == event.cookie)
            {
                Some(k) => {
                    matched.push((from + k, *event));
                    from += k + 1;
                }
                None => problems.push(format!(
                    "{event:?}: no entry in flight has that cookie after the ones before it"
                )),
            }
        }
        // An entry known to have ended is never passed over.
        let last = matched.last().map(|(j, _)| *j);
        for (j, entry) in state.entries.iter().enumerate() {
            let ended = matches!(
                entry.fate,
                Fate::Answered(_) | Fate::Runs { canceled: true, .. }
            );
            let reported = matched.iter().any(|(k, _)| *k == j);
            if ended && !reported && (events.len() < call.max || last.is_some_and(|l| l > j)) {
                problems.push(format!(
                    "entry {:#x} had ended and was not reported",
                    entry.cookie
                ));
            }
        }
        let state = self.batches.get_mut(&call.serial).expect("live");
        let mut taken: Vec<(ModelEntry, Event)> = matched
            .iter()
            .rev()
            .map(|(j, event)| (state.entries.remove(*j), *event))
            .collect();
        taken.reverse();
        for (entry, event) in taken {
            self.touch_entry(&entry);
            if let Some(problem) = self.judge(entry, event) {
                problems.push(problem);
            }
        }
        problems
    }

    /// Judge one event against its entry; a completed entry's bytes move in the model.
    fn judge(&mut self, entry: ModelEntry, event: Event) -> Option<String> {
        let seen = (event.status, event.ret);
        match entry.fate {
            Fate::Answered(result) => {
                let expected = answered_event(&result);
                (seen != expected).then(|| {
                    format!(
                        "entry {:#x}: {seen:?}, the model {expected:?}",
                        entry.cookie
                    )
                })
            }
            Fate::Runs {
                effect, canceled, ..
            } => match event.status {
                EventStatus::Complete => {
                    let n = self.apply_effect(&effect) as i64;
                    (event.ret != n).then(|| {
                        format!(
                            "entry {:#x} completed with {}, the model {n}",
                            entry.cookie, event.ret
                        )
                    })
                }
                EventStatus::Canceled if canceled && event.ret == 0 => None,
                _ => Some(format!(
                    "entry {:#x} ({:?} of {} bytes{}): {seen:?}",
                    entry.cookie,
                    effect.op,
                    effect.size,
                    if canceled {
                        ", cancelled"
                    } else {
                        ", never cancelled"
                    }
                )),
            },
        }
    }

    /// Whether entries of destroyed batches wait for [`ApiModel::resolve`].
    pub fn has_undetermined(&self) -> bool {
        !self.undetermined.is_empty()
    }

    /// Learn from the world's bytes whether each entry of a destroyed batch ran: it did when its
    /// bytes are where it would have put them. Answers how many ran and how many did not; the
    /// comparison of the files and allocations they name judges the rest.
    pub fn resolve(&mut self, files: &[Vec<u8>], device: &[Vec<u8>]) -> (usize, usize) {
        let mut counts = (0, 0);
        for effect in std::mem::take(&mut self.undetermined) {
            let ran = match effect.op {
                IoOp::Read => {
                    let file = &self.files[effect.file];
                    let from = effect.file_offset;
                    let n = file.len().saturating_sub(from).min(effect.size);
                    n > 0
                        && device[effect.allocation][effect.start..effect.start + n]
                            == file[from..from + n]
                }
                IoOp::Write => {
                    let at = if effect.append {
                        self.files[effect.file].len()
                    } else {
                        effect.file_offset
                    };
                    let source =
                        &self.device[effect.allocation][effect.start..effect.start + effect.size];
                    let world = &files[effect.file];
                    world.len() >= at + effect.size && world[at..at + effect.size] == *source
                }
            };
            self.dirty_files.insert(effect.file);
            self.dirty_allocations.insert(effect.allocation);
            if ran {
                self.apply_effect(&effect);
                counts.0 += 1;
            } else {
                counts.1 += 1;
            }
        }
        counts
    }

    /// Without a world to ask (generating sequences): every status call reports the first
    /// entries it may, all completed, and every entry of a destroyed batch ran.
    pub fn assume_completed(&mut self) {
        if let Some(call) = self.awaiting.take() {
            let state = self.batches.get_mut(&call.serial).expect("live");
            let take = call.max.min(state.entries.len());
            let taken: Vec<ModelEntry> = state.entries.drain(..take).collect();
            for entry in taken {
                self.touch_entry(&entry);
                if let Fate::Runs { effect, .. } = entry.fate {
                    self.apply_effect(&effect);
                }
            }
        }
        for effect in std::mem::take(&mut self.undetermined) {
            self.apply_effect(&effect);
        }
    }

    /// Whether `op` has one outcome whatever the entries in flight are doing: not an IO that
    /// touches their bytes, not a deregistration of what a running entry holds, not a wait
    /// without a timeout for more entries than there are.
    pub fn runnable(&self, op: &ApiOp) -> bool {
        match *op {
            ApiOp::Io(ref io) => match self.check_io(io) {
                Ok(Some(effect)) => !self.conflicts(&self.footprint(&effect)),
                _ => true,
            },
            ApiOp::BatchSubmit {
                batch,
                ref entries,
                flaw,
            } => self.submission_runnable(batch, entries, flaw),
            ApiOp::HandleDeregister { handle } => match self.handle_file(handle) {
                Some(d) => !self
                    .running()
                    .any(|(e, _, canceled)| !canceled && e.descriptor == d),
                None => true,
            },
            ApiOp::BufDeregister {
                memory: Memory::Device { allocation, offset },
            } => {
                let key = (allocation, offset);
                !self.refs.is_open()
                    || !self.buffers.contains_key(&key)
                    || !self
                        .running()
                        .any(|(e, _, canceled)| !canceled && e.registered == Some(key))
            }
            ApiOp::BatchGetStatus {
                batch,
                min_nr,
                nr,
                timeout: Timeout::Forever,
                flaw: StatusFlaw::None,
            } if nr > 0 && min_nr <= nr => match self.live(batch) {
                Some(state) => state.in_flight() == 0 || min_nr as usize <= state.in_flight(),
                None => true,
            },
            _ => true,
        }
    }

    /// A submission that fails moves nothing; one that succeeds must keep its entries clear of
    /// each other and of those in flight.
    fn submission_runnable(
        &self,
        batch: BatchRef,
        entries: &[EntrySpec],
        flaw: SubmitFlaw,
    ) -> bool {
        let Some(state) = self.live(batch) else {
            return true;
        };
        if flaw != SubmitFlaw::None
            || entries.is_empty()
            || !self.refs.is_open()
            || entries.len() > state.room()
            || entries.iter().any(|e| self.classify(e).is_err())
        {
            return true;
        }
        let mut claimed: Vec<Footprint> = Vec::new();
        for effect in entries.iter().filter_map(|e| self.would_move(e)) {
            let footprint = self.footprint(&effect);
            if self.conflicts(&footprint) || claimed.iter().any(|c| c.meets(&footprint)) {
                return false;
            }
            claimed.push(footprint);
        }
        true
    }
}
