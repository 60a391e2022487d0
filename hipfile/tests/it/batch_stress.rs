//! 64 threads, each with batches of its own, race reads and writes of varied sizes and offsets
//! against four shared files for a bounded time, while batches are cancelled (by their owners
//! and by other threads), collected with every kind of wait, ended and destroyed with entries
//! in flight. Every entry is judged when its fate is known: a completed read holds exactly the
//! file's bytes, a completed write is in the file, a canceled entry moved nothing, an entry
//! refused for its descriptor moved nothing; an entry whose batch was destroyed before it was
//! collected either moved all its bytes or none. At the end every file holds exactly what the
//! completed writes put there. Nothing panics and nothing hangs: a watchdog in the child names
//! the stuck threads and aborts, and the parent kills a child that outlives its limit.
//!
//! Each file is cut into one stripe per thread, written only by its thread, and a tail that
//! only reads touch (reads there run across the end of the file). A thread never has two
//! entries in flight that touch the same bytes of its stripe, so every expectation is exact.
//! Most threads drive the core driver's batch calls by id (so that others can cancel their
//! batches); every eighth uses the Rust API (`Driver::batch`, `BatchRequest`, `completions`, the
//! batch's end when its closure returns).
//!
//! It runs in every feature row: `build_and_host_copy` serves what the build's backends
//! decline (everything, in a build without them). [`harness::SECONDS_VAR`] runs it longer.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hipfile::{
    AsDeviceMut, BatchEvent, BatchRequest, BatchStatus, DeviceBuffer, Driver, ErrorKind,
    FileHandle, IoCall, IoOp, RegisteredBuffer,
};
use hipfile_core::{BatchEntry, BatchId, PosixIo};
use hipfile_testkit::conformance::pattern;

use crate::batch_support::{build_and_host_copy, sim_driver};
use crate::harness::{self, figure, first_difference, Merge, Rng};

const THREADS: usize = 64;
/// Every `FACADE_EVERY`th thread uses the Rust API.
const FACADE_EVERY: usize = 8;
const FILES: usize = 4;
const STRIPE: usize = 32 * 1024;
const TAIL_AT: usize = THREADS * STRIPE;
const TAIL: usize = 64 * 1024 + 1234;
const FILE_LEN: usize = TAIL_AT + TAIL;
/// Device memory per entry: the largest entry at any offset below a page.
const SLOT_LEN: usize = 32 * 1024 + 4096;
const MAX_IO: usize = 32 * 1024;
const SLOTS: usize = 8;
const SENTINEL: u8 = 0xEE;
const HANG_AFTER: Duration = Duration::from_secs(60);

/// What a thread is doing, for the watchdog.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Doing {
    Idle,
    Submit,
    Status,
    CancelOwn,
    CancelOther,
    Destroy,
    FacadeRound,
}

const DOINGS: [Doing; 7] = [
    Doing::Idle,
    Doing::Submit,
    Doing::Status,
    Doing::CancelOwn,
    Doing::CancelOther,
    Doing::Destroy,
    Doing::FacadeRound,
];

/// The shared world.
struct World<'a> {
    driver: &'a Driver,
    /// Read-write handles, one per file.
    handles: Vec<FileHandle>,
    /// Handles of read-only descriptors of the same files: writes through them fail (EBADF).
    read_only: Vec<FileHandle>,
    /// Per file, a descriptor the checks read through.
    files: Vec<File>,
    /// The files' first contents (the tails never change).
    initial: Vec<Vec<u8>>,
    /// Per thread, the id of its current core batch (0: none).
    published: Vec<AtomicU64>,
    stop: AtomicBool,
    doing: Vec<AtomicU8>,
    done: Vec<AtomicU64>,
}

impl World<'_> {
    fn file_bytes(&self, file: usize, at: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        let mut got = 0;
        while got < len {
            match self.files[file].read_at(&mut out[got..], (at + got) as u64) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!("reading file {file}: {e}"),
            }
        }
        out.truncate(got);
        out
    }
}

/// One entry in flight, and everything needed to judge it.
#[derive(Clone, Debug)]
struct Plan {
    cookie: usize,
    op: IoOp,
    file: usize,
    file_offset: usize,
    size: usize,
    slot: usize,
    buffer_offset: usize,
    /// Through a read-only descriptor: refused with EBADF.
    refused: bool,
    /// A write's bytes, a read's expected bytes (fewer than `size` at the end of the file).
    bytes: Vec<u8>,
    /// What a write replaces.
    old: Vec<u8>,
}

/// Counts over the run.
#[derive(Default)]
struct Tally {
    events: BTreeMap<String, u64>,
    bytes_checked: u64,
    /// Entries whose batch was destroyed before they were collected: (moved, moved nothing).
    unknown_fates: (u64, u64),
    cancels_of_others: (u64, u64),
    batch_full: u64,
    destroyed_busy: u64,
}

impl Merge for Tally {
    fn merge(&mut self, other: Tally) {
        for (k, v) in other.events {
            *self.events.entry(k).or_default() += v;
        }
        self.bytes_checked += other.bytes_checked;
        self.unknown_fates.0 += other.unknown_fates.0;
        self.unknown_fates.1 += other.unknown_fates.1;
        self.cancels_of_others.0 += other.cancels_of_others.0;
        self.cancels_of_others.1 += other.cancels_of_others.1;
        self.batch_full += other.batch_full;
        self.destroyed_busy += other.destroyed_busy;
    }
}

/// A thread's knowledge: its stripes and the entries it has in flight.
struct Tracker<'w, 'a> {
    world: &'w World<'a>,
    t: usize,
    stripes: Vec<Vec<u8>>,
    pending: BTreeMap<usize, Plan>,
    next_cookie: usize,
    tally: Tally,
}

impl<'w, 'a> Tracker<'w, 'a> {
    fn new(world: &'w World<'a>, t: usize) -> Self {
        let at = t * STRIPE;
        Tracker {
            world,
            t,
            stripes: world
                .initial
                .iter()
                .map(|f| f[at..at + STRIPE].to_vec())
                .collect(),
            pending: BTreeMap::new(),
            next_cookie: (t << 32) + 1,
            tally: Tally::default(),
        }
    }

    fn stripe_at(&self) -> usize {
        self.t * STRIPE
    }

    /// Whether `range` of `file` meets an entry in flight where one of them writes.
    fn conflicts(&self, file: usize, range: &Range<usize>, write: bool) -> bool {
        self.pending.values().any(|p| {
            p.file == file
                && !p.refused
                && (write || p.op == IoOp::Write)
                && p.file_offset < range.end
                && range.start < p.file_offset + p.size.max(1)
        })
    }

    /// The next entry, into `slot`, counted in flight at once (so the next one planned never
    /// meets it): a read of the tail, a read or write of the own stripe, a write refused for its
    /// descriptor, now and then one of no bytes.
    fn plan(&mut self, rng: &mut Rng, slot: usize) -> Plan {
        let plan = self.choose(rng, slot);
        self.pending.insert(plan.cookie, plan.clone());
        plan
    }

    /// Forget entries planned but never submitted.
    fn unplan(&mut self, plans: &[Plan]) {
        for plan in plans {
            self.pending.remove(&plan.cookie);
        }
    }

    fn choose(&mut self, rng: &mut Rng, slot: usize) -> Plan {
        let cookie = self.next_cookie;
        self.next_cookie += 1;
        let aligned = rng.chance(35);
        let buffer_offset = if aligned { 0 } else { rng.size(0, 4096) };
        let mut size = if rng.chance(3) {
            0
        } else {
            rng.size(1, MAX_IO + 1)
        };
        if aligned {
            size = size / 4096 * 4096;
        }
        let kind = rng.range(0, 100);
        let mut plan = Plan {
            cookie,
            op: IoOp::Read,
            file: rng.size(0, FILES),
            file_offset: 0,
            size,
            slot,
            buffer_offset,
            refused: false,
            bytes: Vec::new(),
            old: Vec::new(),
        };
        if kind < 45 {
            let size = size.min(STRIPE);
            let mut offset = self.stripe_at() + rng.size(0, STRIPE - size + 1);
            if aligned {
                offset -= offset % 4096;
            }
            let range = offset..offset + size;
            let write = kind < 30;
            if !self.conflicts(plan.file, &range, write) {
                plan.size = size;
                plan.file_offset = offset;
                let local = offset - self.stripe_at();
                let current = self.stripes[plan.file][local..local + size].to_vec();
                if write {
                    plan.op = IoOp::Write;
                    plan.bytes = (0..size).map(|_| rng.next_u64() as u8).collect();
                    plan.old = current;
                } else {
                    plan.bytes = current;
                }
                return plan;
            }
        } else if kind < 50 {
            // Anywhere in the file: the descriptor refuses it before a byte moves.
            plan.op = IoOp::Write;
            plan.refused = true;
            plan.file_offset = rng.size(0, FILE_LEN);
            plan.bytes = vec![0x77; size];
            return plan;
        }
        let mut offset = TAIL_AT + rng.size(0, TAIL + 8192);
        if aligned {
            offset -= offset % 4096;
        }
        plan.file_offset = offset;
        let end = (offset + size).min(FILE_LEN);
        plan.bytes = self.world.initial[plan.file][offset.min(end)..end].to_vec();
        plan
    }

    fn handle(&self, plan: &Plan) -> &'w FileHandle {
        if plan.refused {
            &self.world.read_only[plan.file]
        } else {
            &self.world.handles[plan.file]
        }
    }

    fn count(&mut self, what: &str) {
        *self.tally.events.entry(what.to_string()).or_default() += 1;
    }

    /// Judge `event` of an entry in flight; `region` is its device memory now (`size` bytes).
    fn settle(&mut self, event: &BatchEvent, region: &[u8]) {
        let t = self.t;
        let plan = self.pending.remove(&event.cookie).unwrap_or_else(|| {
            panic!(
                "thread {t}: an event for cookie {:#x}, which is not in flight",
                event.cookie
            )
        });
        let what = format!("{:?} {:?}", plan.op, event.status);
        self.count(&what);
        match (event.status, &event.result) {
            (BatchStatus::Complete, Ok(n)) if !plan.refused => self.completed(&plan, *n, region),
            (BatchStatus::Canceled, Ok(0)) => self.moved_nothing(&plan, region),
            (BatchStatus::Failed, Err(e))
                if plan.refused && e.kind() == ErrorKind::Os && e.errno() == Some(libc::EBADF) =>
            {
                self.moved_nothing(&plan, region)
            }
            _ => panic!("thread {t}: {plan:?} ended as {event:?}"),
        }
    }

    fn completed(&mut self, plan: &Plan, n: usize, region: &[u8]) {
        let t = self.t;
        match plan.op {
            IoOp::Read => {
                assert_eq!(n, plan.bytes.len(), "thread {t}: {plan:?} read {n} bytes");
                if let Some(at) = first_difference(&region[..n], &plan.bytes) {
                    panic!("thread {t}: {plan:?} read bytes that differ from the file's at {at}");
                }
                // Past the end of the file's last block the memory keeps what it held.
                let block_end = n.div_ceil(4096) * 4096;
                assert!(
                    region[block_end.min(plan.size)..]
                        .iter()
                        .all(|&x| x == SENTINEL),
                    "thread {t}: {plan:?} wrote past the bytes it read"
                );
                self.tally.bytes_checked += n as u64;
            }
            IoOp::Write => {
                assert_eq!(n, plan.size, "thread {t}: {plan:?} wrote {n} bytes");
                let local = plan.file_offset - self.stripe_at();
                self.stripes[plan.file][local..local + plan.size].copy_from_slice(&plan.bytes);
                let now = self
                    .world
                    .file_bytes(plan.file, plan.file_offset, plan.size);
                if let Some(at) = first_difference(&now, &plan.bytes) {
                    panic!("thread {t}: {plan:?} completed but the file differs at {at}");
                }
                self.tally.bytes_checked += n as u64;
            }
        }
    }

    fn moved_nothing(&mut self, plan: &Plan, region: &[u8]) {
        let t = self.t;
        match plan.op {
            IoOp::Read => assert!(
                region.iter().all(|&x| x == SENTINEL),
                "thread {t}: {plan:?} moved bytes into memory but reports none"
            ),
            IoOp::Write if plan.refused => {}
            IoOp::Write => {
                let now = self
                    .world
                    .file_bytes(plan.file, plan.file_offset, plan.size);
                assert!(
                    now == plan.old,
                    "thread {t}: {plan:?} moved bytes into the file but reports none"
                );
            }
        }
    }

    /// Judge an entry whose batch ended before it was collected: all of it or nothing moved.
    fn unknown(&mut self, cookie: usize, region: &[u8]) {
        let t = self.t;
        let plan = self.pending.remove(&cookie).expect("an entry in flight");
        let moved = match plan.op {
            IoOp::Read => {
                let n = plan.bytes.len();
                if n > 0 && region[..n] == plan.bytes[..] {
                    self.completed(&plan, n, region);
                    true
                } else {
                    self.moved_nothing(&plan, region);
                    false
                }
            }
            IoOp::Write if plan.refused => false,
            IoOp::Write => {
                let now = self
                    .world
                    .file_bytes(plan.file, plan.file_offset, plan.size);
                if now == plan.bytes && plan.size > 0 {
                    self.completed(&plan, plan.size, region);
                    true
                } else {
                    assert!(
                        now == plan.old,
                        "thread {t}: {plan:?} of a destroyed batch left part of its bytes"
                    );
                    false
                }
            }
        };
        if moved {
            self.tally.unknown_fates.0 += 1;
        } else {
            self.tally.unknown_fates.1 += 1;
        }
    }
}

/// Device memory of one thread: slots, the first half registered.
struct Slots {
    registered: Vec<RegisteredBuffer>,
    plain: Vec<DeviceBuffer>,
}

impl Slots {
    fn new(driver: &Driver) -> Self {
        let make = || {
            let mut b = driver.alloc(SLOT_LEN).expect("device memory");
            b.fill(SENTINEL).expect("filling");
            b
        };
        Slots {
            registered: (0..SLOTS / 2)
                .map(|_| driver.register_buffer(make()).expect("registering"))
                .collect(),
            plain: (0..SLOTS / 2).map(|_| make()).collect(),
        }
    }

    /// The device address a request names for `slot` at `offset`: the registered base with an
    /// offset, or for plain memory sometimes an interior pointer.
    fn call_buffer(&self, slot: usize, offset: usize, interior: bool) -> (usize, usize) {
        if slot < SLOTS / 2 {
            (self.registered[slot].ptr(), offset)
        } else if interior {
            (self.plain[slot - SLOTS / 2].ptr() + offset, 0)
        } else {
            (self.plain[slot - SLOTS / 2].ptr(), offset)
        }
    }

    fn write(&mut self, slot: usize, offset: usize, bytes: &[u8]) {
        if slot < SLOTS / 2 {
            self.registered[slot].write_at(offset, bytes)
        } else {
            self.plain[slot - SLOTS / 2].write_at(offset, bytes)
        }
        .expect("writing device memory");
    }

    fn read(&self, slot: usize, offset: usize, len: usize) -> Vec<u8> {
        let mut out = vec![0u8; len];
        if slot < SLOTS / 2 {
            self.registered[slot].read_at(offset, &mut out)
        } else {
            self.plain[slot - SLOTS / 2].read_at(offset, &mut out)
        }
        .expect("reading device memory");
        out
    }

    /// Make `plan`'s memory what it starts from: its bytes for a write, sentinels for a read.
    fn prepare(&mut self, plan: &Plan) {
        if plan.op == IoOp::Write {
            self.write(plan.slot, plan.buffer_offset, &plan.bytes);
        } else {
            self.write(plan.slot, plan.buffer_offset, &vec![SENTINEL; plan.size]);
        }
    }

    fn region(&self, plan: &Plan) -> Vec<u8> {
        self.read(plan.slot, plan.buffer_offset, plan.size)
    }
}

/// A thread driving the core driver's batch calls by id.
fn core_racer(world: &World<'_>, t: usize) -> Tally {
    let core = world.driver.core();
    let mut rng = Rng::new(0xBA7C_0000 + t as u64);
    let mut tracker = Tracker::new(world, t);
    let mut slots = Slots::new(world.driver);
    let mut busy = [false; SLOTS];
    let setup = |rng: &mut Rng| -> (BatchId, usize) {
        let capacity = rng.size(1, SLOTS + 1);
        let id = core.batch_setup(capacity).expect("setting a batch up");
        world.published[t].store(id.0, Ordering::Release);
        (id, capacity)
    };
    let (mut id, mut capacity) = setup(&mut rng);
    let doing = |d: Doing| world.doing[t].store(d as u8, Ordering::Relaxed);
    // Judge events, freeing their slots.
    let settle = |tracker: &mut Tracker<'_, '_>,
                  slots: &Slots,
                  busy: &mut [bool; SLOTS],
                  events: Vec<BatchEvent>| {
        for event in events {
            let plan = tracker.pending.get(&event.cookie).cloned().unwrap_or_else(|| {
                panic!("thread {t}: an event for cookie {:#x}, never submitted or already collected", event.cookie)
            });
            tracker.settle(&event, &slots.region(&plan));
            busy[plan.slot] = false;
        }
    };
    while !world.stop.load(Ordering::Relaxed) {
        let outstanding = tracker.pending.len();
        match rng.range(0, 100) {
            0..=39 => {
                doing(Doing::Submit);
                let free: Vec<usize> = (0..SLOTS).filter(|&s| !busy[s]).collect();
                let room = capacity - outstanding;
                // Now and then one more than there is room for: refused whole.
                let over = rng.chance(10);
                let want = if over {
                    room + 1
                } else {
                    rng.size(0, room + 1)
                };
                if want == 0 || want > free.len() {
                    continue;
                }
                let plans: Vec<Plan> = free[..want]
                    .iter()
                    .map(|&slot| tracker.plan(&mut rng, slot))
                    .collect();
                for plan in &plans {
                    slots.prepare(plan);
                }
                let entries: Vec<BatchEntry> = plans
                    .iter()
                    .map(|p| {
                        let (buffer, buffer_offset) =
                            slots.call_buffer(p.slot, p.buffer_offset, rng.chance(30));
                        BatchEntry {
                            call: IoCall {
                                op: p.op,
                                handle: tracker.handle(p).id(),
                                buffer,
                                size: p.size,
                                file_offset: p.file_offset as i64,
                                buffer_offset: buffer_offset as i64,
                                loan: None,
                            },
                            cookie: p.cookie,
                        }
                    })
                    .collect();
                match core.batch_submit(id, &entries) {
                    Ok(()) => {
                        assert!(!over, "thread {t}: {want} entries fit in {room} places");
                        for plan in &plans {
                            busy[plan.slot] = true;
                        }
                    }
                    Err(e) if over && e.kind() == ErrorKind::BatchFull => {
                        tracker.unplan(&plans);
                        tracker.tally.batch_full += 1
                    }
                    Err(e) => panic!("thread {t}: submitting {want} entries: {e:?}"),
                }
            }
            40..=69 => {
                doing(Doing::Status);
                let min = rng.size(0, outstanding + 1);
                let max = rng.size(min.max(1), outstanding + 3);
                let timeout = match rng.range(0, 3) {
                    0 => None,
                    1 => Some(Duration::ZERO),
                    _ => Some(Duration::from_millis(1)),
                };
                let events = core
                    .batch_status(id, min, max, timeout)
                    .unwrap_or_else(|e| panic!("thread {t}: batch status: {e:?}"));
                assert!(events.len() <= max, "thread {t}: more events than asked");
                if timeout.is_none() {
                    assert!(
                        events.len() >= min.min(outstanding),
                        "thread {t}: {} events, at least {min} awaited",
                        events.len()
                    );
                }
                settle(&mut tracker, &slots, &mut busy, events);
            }
            70..=79 => {
                doing(Doing::CancelOwn);
                core.batch_cancel(id).expect("cancelling the own batch");
                // Every entry is terminal now: a wait for all of them returns at once.
                let all = tracker.pending.len();
                if all > 0 {
                    let events = core
                        .batch_status(id, all, all, Some(Duration::ZERO))
                        .expect("status after cancel");
                    assert_eq!(
                        events.len(),
                        all,
                        "thread {t}: entries still running after cancel"
                    );
                    settle(&mut tracker, &slots, &mut busy, events);
                }
            }
            80..=89 => {
                doing(Doing::CancelOther);
                let other = rng.size(0, THREADS);
                let other_id = world.published[other].load(Ordering::Acquire);
                if other_id == 0 || other == t {
                    continue;
                }
                match core.batch_cancel(BatchId(other_id)) {
                    Ok(()) => tracker.tally.cancels_of_others.0 += 1,
                    Err(e) if e.kind() == ErrorKind::InvalidValue => {
                        tracker.tally.cancels_of_others.1 += 1
                    }
                    Err(e) => panic!("thread {t}: cancelling thread {other}'s batch: {e:?}"),
                }
            }
            _ => {
                doing(Doing::Destroy);
                if outstanding > 0 {
                    tracker.tally.destroyed_busy += 1;
                }
                world.published[t].store(0, Ordering::Release);
                core.batch_destroy(id).expect("destroying the own batch");
                let cookies: Vec<usize> = tracker.pending.keys().copied().collect();
                for cookie in cookies {
                    let plan = tracker.pending[&cookie].clone();
                    tracker.unknown(cookie, &slots.region(&plan));
                    busy[plan.slot] = false;
                }
                (id, capacity) = setup(&mut rng);
            }
        }
        world.done[t].fetch_add(1, Ordering::Relaxed);
        doing(Doing::Idle);
    }
    world.published[t].store(0, Ordering::Release);
    core.batch_destroy(id).expect("destroying the own batch");
    let cookies: Vec<usize> = tracker.pending.keys().copied().collect();
    for cookie in cookies {
        let plan = tracker.pending[&cookie].clone();
        tracker.unknown(cookie, &slots.region(&plan));
    }
    finish(tracker)
}

/// A thread using the Rust API: a batch per round, its memory borrowed for the round; the
/// round's events are judged once `Driver::batch` has returned (the batch has ended, nothing of
/// it runs).
fn facade_racer(world: &World<'_>, t: usize) -> Tally {
    let mut rng = Rng::new(0xFACA_0000 + t as u64);
    let mut tracker = Tracker::new(world, t);
    let mut slots = Slots::new(world.driver);
    while !world.stop.load(Ordering::Relaxed) {
        world.doing[t].store(Doing::FacadeRound as u8, Ordering::Relaxed);
        let capacity = rng.size(1, SLOTS + 1);
        let count = rng.size(1, SLOTS + 1);
        let plans: Vec<Plan> = (0..count)
            .map(|slot| tracker.plan(&mut rng, slot))
            .collect();
        for plan in &plans {
            slots.prepare(plan);
        }
        let mut cut: Vec<(usize, hipfile::DeviceSliceMut<'_>)> = Vec::new();
        let Slots { registered, plain } = &mut slots;
        for (i, mem) in registered.iter_mut().enumerate() {
            if let Some(p) = plans.get(i) {
                cut.push((
                    i,
                    mem.slice_mut(p.buffer_offset..p.buffer_offset + p.size)
                        .unwrap(),
                ));
            }
        }
        for (i, mem) in plain.iter_mut().enumerate() {
            if let Some(p) = plans.get(SLOTS / 2 + i) {
                cut.push((
                    SLOTS / 2 + i,
                    mem.slice_mut(p.buffer_offset..p.buffer_offset + p.size)
                        .unwrap(),
                ));
            }
        }
        let events = world
            .driver
            .batch(capacity, |batch| {
                let tracker_ref = &tracker;
                let requests = cut.iter_mut().map(|(i, mem)| {
                    let p = &plans[*i];
                    let file = tracker_ref.handle(p);
                    match p.op {
                        IoOp::Read => BatchRequest::read(file, mem, p.file_offset as u64),
                        IoOp::Write => BatchRequest::write(file, &*mem, p.file_offset as u64),
                    }
                    .expect("a request")
                    .cookie(p.cookie)
                });
                let submitted = match batch.submit(requests) {
                    Ok(()) => true,
                    Err(e) if count > capacity && e.kind() == ErrorKind::BatchFull => {
                        tracker.unplan(&plans);
                        tracker.tally.batch_full += 1;
                        false
                    }
                    Err(e) => {
                        panic!("thread {t}: submitting {count} entries to {capacity} places: {e:?}")
                    }
                };
                let mut events: Vec<BatchEvent> = Vec::new();
                if submitted {
                    match rng.range(0, 4) {
                        // Collect everything as it finishes.
                        0 => events.extend(batch.completions().map(|e| e.expect("a completion"))),
                        // Cancel, then collect everything.
                        1 => {
                            batch.cancel().expect("cancelling");
                            events.extend(batch.completions().map(|e| e.expect("a completion")));
                        }
                        // Collect some, then end the batch with the rest in flight.
                        2 => {
                            let max = rng.size(1, count + 1);
                            events.extend(
                                batch
                                    .wait(0, max, Some(Duration::from_micros(200)))
                                    .expect("waiting"),
                            );
                        }
                        // End it at once.
                        _ => {}
                    }
                }
                events
            })
            .expect("setting a batch up");
        drop(cut);
        for event in &events {
            let plan = tracker.pending[&event.cookie].clone();
            tracker.settle(event, &slots.region(&plan));
        }
        let cookies: Vec<usize> = tracker.pending.keys().copied().collect();
        for cookie in cookies {
            let plan = tracker.pending[&cookie].clone();
            tracker.unknown(cookie, &slots.region(&plan));
        }
        // Unused memory of the round goes back to sentinels for the next.
        for plan in &plans {
            slots.write(plan.slot, plan.buffer_offset, &vec![SENTINEL; plan.size]);
        }
        world.done[t].fetch_add(1, Ordering::Relaxed);
        world.doing[t].store(Doing::Idle as u8, Ordering::Relaxed);
    }
    finish(tracker)
}

fn finish(mut tracker: Tracker<'_, '_>) -> Tally {
    assert!(tracker.pending.is_empty());
    // The thread's stripes as the file holds them now: exactly what its completed writes left.
    let at = tracker.stripe_at();
    for (file, stripe) in tracker.stripes.iter().enumerate() {
        let now = tracker.world.file_bytes(file, at, STRIPE);
        if let Some(d) = first_difference(&now, stripe) {
            panic!(
                "thread {}: file {file} differs in its stripe at byte {d}",
                tracker.t
            );
        }
    }
    tracker.tally.bytes_checked += (FILES * STRIPE) as u64;
    std::mem::take(&mut tracker.tally)
}

fn stress_child() {
    let run_for = harness::run_seconds(3.0);
    // Few IO workers and a small queue depth: entries wait in queues, where cancels find them.
    let (_sim, driver) = sim_driver(build_and_host_copy(), Arc::new(PosixIo), |s| {
        s.max_io_threads = 2;
        s.io_queue_depth = 4;
        s.per_buffer_cache_size_kb = 128;
        s.min_piece_kb = 32;
        s.max_pinned_mem_size_kb = 16 * 1024;
    });
    let dir = harness::scratch_dir();
    let mut files = Vec::new();
    let mut handles = Vec::new();
    let mut read_only = Vec::new();
    let mut initial = Vec::new();
    let mut keep_open = Vec::new();
    for f in 0..FILES {
        let content = pattern(0xB0 + f as u64, 0, FILE_LEN);
        let path = dir.path().join(format!("f{f}"));
        std::fs::write(&path, &content).expect("writing a file");
        let rw = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .expect("opening a file");
        let ro = File::open(&path).expect("opening a file read-only");
        handles.push(driver.register_file(&rw).expect("registering a file"));
        read_only.push(
            driver
                .register_file(&ro)
                .expect("registering a read-only file"),
        );
        files.push(File::open(&path).expect("opening a file to check it"));
        keep_open.push((rw, ro));
        initial.push(content);
    }
    let world = World {
        driver: &driver,
        handles,
        read_only,
        files,
        initial,
        published: (0..THREADS).map(|_| AtomicU64::new(0)).collect(),
        stop: AtomicBool::new(false),
        doing: (0..THREADS).map(|_| AtomicU8::new(0)).collect(),
        done: (0..THREADS).map(|_| AtomicU64::new(0)).collect(),
    };
    let (tally, raced) = harness::race(
        "batch race",
        THREADS,
        run_for,
        HANG_AFTER,
        &world.stop,
        |t| {
            if t % FACADE_EVERY == FACADE_EVERY - 1 {
                facade_racer(&world, t)
            } else {
                core_racer(&world, t)
            }
        },
        |t| {
            let d = DOINGS[world.doing[t].load(Ordering::Relaxed) as usize];
            (d, world.done[t].load(Ordering::Relaxed))
        },
    );
    assert_eq!(driver.core().batch_count(), 0, "every batch was destroyed");
    // Every file: the stripes the threads checked, and the tails nobody wrote.
    for (f, content) in world.initial.iter().enumerate() {
        let tail = world.file_bytes(f, TAIL_AT, TAIL);
        if let Some(d) = first_difference(&tail, &content[TAIL_AT..]) {
            panic!("file {f}: its tail changed at byte {}", TAIL_AT + d);
        }
    }
    let events: u64 = tally.events.values().sum();
    figure(format!(
        "batch stress: {THREADS} threads for {raced:.1?}: {events} entries judged, {} bytes \
         checked; destroyed before collected: {} moved all, {} moved nothing; cancels of \
         another thread's batch: {} done, {} found it gone; {} submissions refused as full, {} \
         batches destroyed with entries in flight",
        tally.bytes_checked,
        tally.unknown_fates.0,
        tally.unknown_fates.1,
        tally.cancels_of_others.0,
        tally.cancels_of_others.1,
        tally.batch_full,
        tally.destroyed_busy
    ));
    let parts: Vec<String> = tally
        .events
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    figure(format!("batch stress: {}", parts.join(", ")));
    for needed in [
        "Read Complete",
        "Write Complete",
        "Read Canceled",
        "Write Canceled",
        "Write Failed",
    ] {
        assert!(
            tally.events.get(needed).is_some_and(|n| *n > 0),
            "no entry ended as `{needed}`: the race did not reach it"
        );
    }
    assert!(
        tally.cancels_of_others.0 > 0,
        "no thread cancelled another's batch"
    );
    assert!(
        tally.destroyed_busy > 0,
        "no batch was destroyed with entries in flight"
    );
    drop(world);
    drop(keep_open);
}

#[test]
fn sixty_four_threads_racing_batches_cancels_and_destroys() {
    let name = harness::test_name(
        module_path!(),
        "sixty_four_threads_racing_batches_cancels_and_destroys",
    );
    if harness::as_child(&name, stress_child) {
        return;
    }
    let limit = harness::run_seconds(3.0) + HANG_AFTER + Duration::from_secs(60);
    let run = harness::run_child(harness::child_command(&name), limit, &name);
    run.assert_passed(&name);
}
