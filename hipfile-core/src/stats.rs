//! Counters of an open driver: which path each request took and how it went.
//!
//! The level (`HIPFILE_STATS_LEVEL` or `hipFileParamProfileStats`, the higher of the two) picks
//! what is counted, as upstream's `profile.cufile_stats`:
//!
//! - 0: nothing.
//! - 1: per direction (reads, writes; synchronous and stream-ordered requests together, batch
//!   entries apart) successes, failures, bytes, latency and the time window they ran in; every
//!   API operation's successes and failures (file and buffer registration, batch calls, stream
//!   registration); per backend the requests, bytes and failures it ran, the declines of its
//!   `accepts` by reason and the requests it handed over to a later backend (failovers).
//! - 2: level 1 and histograms of request sizes.
//! - 3: level 2 and per-GPU counters.
//!
//! Every counter is a relaxed atomic; a level below a counter's costs one branch. The level may
//! change while the driver is open ([`Stats::set_level`], cuFile's `cuFileSetStatsLevel`):
//! counting at a level starts when it is set, what was counted stays.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use crate::backend::IoPath;
use crate::error::Result;
use crate::io::IoOp;
use crate::registry::Dispatched;
use crate::routes::RouteCounters;
use crate::snapshot::{
    size_bucket, ApiOp, BackendCounts, BatchCounts, DirectionCounts, GpuCounts, OpCount,
    SidePathCounts, StatsSnapshot, SIZE_BUCKETS,
};

/// How a request reached the driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Channel {
    /// `hipFileRead`/`hipFileWrite`.
    Sync,
    /// A stream-ordered op (`hipFileReadAsync`/`hipFileWriteAsync`).
    Async,
    /// An entry of a batch.
    Batch,
}

#[derive(Debug)]
struct Direction {
    ok: AtomicU64,
    err: AtomicU64,
    bytes: AtomicU64,
    unaligned: AtomicU64,
    direct: AtomicU64,
    staged: AtomicU64,
    host: AtomicU64,
    latency_sum_us: AtomicU64,
    /// Microseconds after the epoch the first request started (`u64::MAX`: none yet).
    first_start_us: AtomicU64,
    /// Microseconds after the epoch the last request ended.
    last_end_us: AtomicU64,
    hist: [AtomicU64; SIZE_BUCKETS],
}

impl Default for Direction {
    fn default() -> Self {
        Direction {
            ok: AtomicU64::new(0),
            err: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            unaligned: AtomicU64::new(0),
            direct: AtomicU64::new(0),
            staged: AtomicU64::new(0),
            host: AtomicU64::new(0),
            latency_sum_us: AtomicU64::new(0),
            first_start_us: AtomicU64::new(u64::MAX),
            last_end_us: AtomicU64::new(0),
            hist: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }
}

fn add(a: &AtomicU64, n: u64) {
    a.fetch_add(n, Ordering::Relaxed);
}

fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

impl Direction {
    fn record(&self, req: &Finished<'_>, level: u8) {
        if req.unaligned {
            add(&self.unaligned, 1);
        }
        match req.outcome {
            Err(_) => add(&self.err, 1),
            Ok(d) => {
                add(&self.ok, 1);
                add(&self.bytes, d.bytes as u64);
                add(
                    match d.path {
                        IoPath::Direct => &self.direct,
                        IoPath::Staged => &self.staged,
                        IoPath::Host => &self.host,
                    },
                    1,
                );
                add(
                    &self.latency_sum_us,
                    req.end_us.saturating_sub(req.start_us),
                );
                self.first_start_us
                    .fetch_min(req.start_us, Ordering::Relaxed);
                self.last_end_us.fetch_max(req.end_us, Ordering::Relaxed);
                if level >= 2 {
                    add(&self.hist[size_bucket(req.size as u64)], 1);
                }
            }
        }
    }

    fn snapshot(&self) -> DirectionCounts {
        let first = get(&self.first_start_us);
        let last = get(&self.last_end_us);
        DirectionCounts {
            ok: get(&self.ok),
            err: get(&self.err),
            bytes: get(&self.bytes),
            unaligned: get(&self.unaligned),
            direct: get(&self.direct),
            staged: get(&self.staged),
            host: get(&self.host),
            latency_sum_us: get(&self.latency_sum_us),
            window_us: if first == u64::MAX {
                0
            } else {
                last.saturating_sub(first)
            },
            size_kb_hist: std::array::from_fn(|i| get(&self.hist[i])),
        }
    }
}

#[derive(Debug, Default)]
struct Gpu {
    read: Direction,
    write: Direction,
    buf_register_ok: AtomicU64,
    buf_register_err: AtomicU64,
    buf_deregister: AtomicU64,
    registered_bytes: AtomicU64,
}

#[derive(Debug, Default)]
struct OpCounter {
    ok: AtomicU64,
    err: AtomicU64,
}

impl OpCounter {
    fn count(&self, ok: bool) {
        add(if ok { &self.ok } else { &self.err }, 1);
    }
    fn snapshot(&self) -> OpCount {
        OpCount {
            ok: get(&self.ok),
            err: get(&self.err),
        }
    }
}

#[derive(Debug, Default)]
struct Batch {
    enqueued: OpCounter,
    staged_enqueued: AtomicU64,
    processed: OpCounter,
    staged_processed: OpCounter,
    direct_submits: AtomicU64,
    staged_submits: AtomicU64,
    mixed_submits: AtomicU64,
    submit_latency_sum_us: AtomicU64,
    completion_latency_sum_us: AtomicU64,
    /// Sequence number of the submission the `last_*` bytes belong to.
    last_submission: AtomicU64,
    next_submission: AtomicU64,
    last_read_bytes: AtomicU64,
    last_write_bytes: AtomicU64,
}

/// One finished request, as [`Stats::record`] counts it.
#[derive(Clone, Copy, Debug)]
pub struct Finished<'a> {
    /// Direction.
    pub op: IoOp,
    /// How it reached the driver.
    pub channel: Channel,
    /// The device ordinal of its memory (`None`: it failed before its memory was known).
    pub device: Option<i32>,
    /// Bytes asked for.
    pub size: usize,
    /// Whether its offset, size or address misses 4 KiB alignment.
    pub unaligned: bool,
    /// Microseconds after the counters' epoch it started ([`Stats::now_us`]).
    pub start_us: u64,
    /// Microseconds after the epoch it ended.
    pub end_us: u64,
    /// What became of it.
    pub outcome: &'a Result<Dispatched>,
}

#[derive(Debug)]
struct BackendCounters {
    name: &'static str,
    path: IoPath,
    ops: AtomicU64,
    bytes: AtomicU64,
}

/// Counters of a path beside the backends: IO that a front door runs itself rather than
/// through the registry (remote objects), counted under its own name and shown with the
/// driver's statistics. Counts at level 1 and above, as the backends' counters.
#[derive(Debug)]
pub struct SidePath {
    name: &'static str,
    names: &'static [&'static str],
    values: Vec<AtomicU64>,
    level: Arc<AtomicU8>,
}

impl SidePath {
    /// The path's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Add `n` to the counter at `index` of the names it was made with (an index past them
    /// counts nothing).
    pub fn add(&self, index: usize, n: u64) {
        if self.level.load(Ordering::Relaxed) >= 1 {
            if let Some(v) = self.values.get(index) {
                add(v, n);
            }
        }
    }

    /// The counters now, by name.
    pub fn counts(&self) -> SidePathCounts {
        SidePathCounts {
            name: self.name,
            counters: self
                .names
                .iter()
                .copied()
                .zip(self.values.iter().map(get))
                .collect(),
        }
    }
}

/// Live counters.
#[derive(Debug)]
pub struct Stats {
    level: Arc<AtomicU8>,
    epoch: Instant,
    read: Direction,
    write: Direction,
    batch_read: Direction,
    batch_write: Direction,
    batch: Batch,
    api: [OpCounter; ApiOp::ALL.len()],
    gpus: Vec<Gpu>,
    backends: Vec<BackendCounters>,
    routes: Arc<RouteCounters>,
    side_paths: Mutex<Vec<Arc<SidePath>>>,
}

impl Stats {
    /// Counters at `level` (0 to 3) for the backends `backends` (name and path, in the
    /// registry's order) whose declines and failovers `routes` counts, on a platform of
    /// `devices` GPUs.
    pub fn new(
        level: u8,
        backends: &[(&'static str, IoPath)],
        routes: Arc<RouteCounters>,
        devices: usize,
    ) -> Self {
        let level = level.min(3);
        routes.enable(level >= 1);
        Stats {
            level: Arc::new(AtomicU8::new(level)),
            epoch: Instant::now(),
            read: Direction::default(),
            write: Direction::default(),
            batch_read: Direction::default(),
            batch_write: Direction::default(),
            batch: Batch::default(),
            api: std::array::from_fn(|_| OpCounter::default()),
            // Kept at every level: a level raised to 3 later counts per GPU from then on.
            gpus: (0..devices).map(|_| Gpu::default()).collect(),
            backends: backends
                .iter()
                .map(|&(name, path)| BackendCounters {
                    name,
                    path,
                    ops: AtomicU64::new(0),
                    bytes: AtomicU64::new(0),
                })
                .collect(),
            routes,
            side_paths: Mutex::new(Vec::new()),
        }
    }

    /// The counters of the path beside the backends named `name`, made with the counters
    /// `names` on first call; later calls get the same counters (and the first call's names).
    pub fn side_path(&self, name: &'static str, names: &'static [&'static str]) -> Arc<SidePath> {
        let mut paths = self
            .side_paths
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(p) = paths.iter().find(|p| p.name == name) {
            return Arc::clone(p);
        }
        let path = Arc::new(SidePath {
            name,
            names,
            values: names.iter().map(|_| AtomicU64::new(0)).collect(),
            level: Arc::clone(&self.level),
        });
        paths.push(Arc::clone(&path));
        path
    }

    /// Whether counting is on (level 1 or more).
    pub fn enabled(&self) -> bool {
        self.level() >= 1
    }

    /// The level.
    pub fn level(&self) -> u8 {
        self.level.load(Ordering::Relaxed)
    }

    /// Count at `level` (at most 3) from now on.
    pub fn set_level(&self, level: u8) {
        let level = level.min(3);
        self.level.store(level, Ordering::Relaxed);
        self.routes.enable(level >= 1);
    }

    /// Microseconds since the counters' epoch (0 when counting is off, so a caller that does not
    /// count reads no clock).
    pub fn now_us(&self) -> u64 {
        if !self.enabled() {
            return 0;
        }
        self.uptime_us()
    }

    /// Microseconds since the counters started.
    fn uptime_us(&self) -> u64 {
        self.epoch.elapsed().as_micros().min(u128::from(u64::MAX)) as u64
    }

    /// Count one API operation.
    pub fn api(&self, op: ApiOp, ok: bool) {
        if self.enabled() {
            self.api[op.index()].count(ok);
        }
    }

    /// Count one finished request.
    pub fn record(&self, req: Finished<'_>) {
        if !self.enabled() {
            return;
        }
        let dir = match (req.channel, req.op) {
            (Channel::Batch, IoOp::Read) => &self.batch_read,
            (Channel::Batch, IoOp::Write) => &self.batch_write,
            (_, IoOp::Read) => &self.read,
            (_, IoOp::Write) => &self.write,
        };
        let level = self.level();
        dir.record(&req, level);
        if let Ok(d) = req.outcome {
            if let Some(b) = self.backends.get(d.backend_index) {
                add(&b.ops, 1);
                add(&b.bytes, d.bytes as u64);
            }
        }
        if req.channel == Channel::Batch {
            let staged = matches!(req.outcome, Ok(d) if d.path == IoPath::Staged);
            self.batch.processed.count(req.outcome.is_ok());
            if staged {
                self.batch.staged_processed.count(true);
            }
            add(
                &self.batch.completion_latency_sum_us,
                req.end_us.saturating_sub(req.start_us),
            );
        }
        if let Some(gpu) = self.gpu(req.device) {
            match req.op {
                IoOp::Read => gpu.read.record(&req, level),
                IoOp::Write => gpu.write.record(&req, level),
            }
        }
    }

    /// A staged-path batch entry failed: [`Stats::record`] cannot tell its path from its error.
    pub fn batch_staged_failed(&self) {
        if self.enabled() {
            self.batch.staged_processed.count(false);
        }
    }

    /// A new batch submission starts; its number, for [`Stats::batch_entry_bytes`].
    pub fn batch_submission(&self) -> u64 {
        if !self.enabled() {
            return 0;
        }
        let n = self.batch.next_submission.fetch_add(1, Ordering::Relaxed) + 1;
        self.batch.last_submission.store(n, Ordering::Relaxed);
        self.batch.last_read_bytes.store(0, Ordering::Relaxed);
        self.batch.last_write_bytes.store(0, Ordering::Relaxed);
        n
    }

    /// An entry of submission `submission` moved `bytes` in direction `op`: counted in the
    /// last submission's bytes while no later submission started.
    pub fn batch_entry_bytes(&self, submission: u64, op: IoOp, bytes: usize) {
        if !self.enabled() || get(&self.batch.last_submission) != submission {
            return;
        }
        add(
            match op {
                IoOp::Read => &self.batch.last_read_bytes,
                IoOp::Write => &self.batch.last_write_bytes,
            },
            bytes as u64,
        );
    }

    /// A batch entry went to a backend of `path` (`Some`) or was refused by every backend.
    pub fn batch_enqueued(&self, path: Option<IoPath>) {
        if !self.enabled() {
            return;
        }
        self.batch.enqueued.count(path.is_some());
        if path == Some(IoPath::Staged) {
            add(&self.batch.staged_enqueued, 1);
        }
    }

    /// A `hipFileBatchIOSubmit` call ended after `us` microseconds with `direct` entries on the
    /// direct path and `staged` on the staged path.
    pub fn batch_submitted(&self, ok: bool, us: u64, direct: usize, staged: usize) {
        if !self.enabled() {
            return;
        }
        self.api(ApiOp::BatchSubmit, ok);
        add(&self.batch.submit_latency_sum_us, us);
        match (direct > 0, staged > 0) {
            (true, true) => add(&self.batch.mixed_submits, 1),
            (true, false) => add(&self.batch.direct_submits, 1),
            (false, true) => add(&self.batch.staged_submits, 1),
            (false, false) => {}
        }
    }

    /// A buffer registration of `len` bytes on `device` (when known) ended.
    pub fn buf_registered(&self, device: Option<i32>, len: usize, ok: bool) {
        if !self.enabled() {
            return;
        }
        self.api(ApiOp::BufRegister, ok);
        if let Some(gpu) = self.gpu(device) {
            if ok {
                add(&gpu.buf_register_ok, 1);
                add(&gpu.registered_bytes, len as u64);
            } else {
                add(&gpu.buf_register_err, 1);
            }
        }
    }

    /// A buffer of `len` bytes on `device` (when known) was deregistered (`ok`) or not.
    pub fn buf_deregistered(&self, device: Option<i32>, len: usize, ok: bool) {
        if !self.enabled() {
            return;
        }
        self.api(ApiOp::BufDeregister, ok);
        if let Some(gpu) = self.gpu(device).filter(|_| ok) {
            add(&gpu.buf_deregister, 1);
            gpu.registered_bytes
                .fetch_sub(len as u64, Ordering::Relaxed);
        }
    }

    /// The per-GPU counters of `device`, counted at level 3.
    fn gpu(&self, device: Option<i32>) -> Option<&Gpu> {
        if self.level() < 3 {
            return None;
        }
        device
            .and_then(|d| usize::try_from(d).ok())
            .and_then(|d| self.gpus.get(d))
    }

    /// The counters now, with what each backend of `registry` reports of its own
    /// ([`crate::Registry::mechanisms`]).
    pub fn snapshot_with(&self, registry: &crate::Registry) -> StatsSnapshot {
        let mut snap = self.snapshot();
        for (b, (mechanism, counters)) in snap.backends.iter_mut().zip(registry.mechanisms()) {
            b.mechanism = mechanism;
            b.counters = counters;
        }
        snap
    }

    /// The counters now (without the backends' own: [`Stats::snapshot_with`]).
    pub fn snapshot(&self) -> StatsSnapshot {
        let b = &self.batch;
        StatsSnapshot {
            level: self.level(),
            uptime_us: self.uptime_us(),
            read: self.read.snapshot(),
            write: self.write.snapshot(),
            batch_read: self.batch_read.snapshot(),
            batch_write: self.batch_write.snapshot(),
            batch: BatchCounts {
                enqueued: b.enqueued.snapshot(),
                staged_enqueued: get(&b.staged_enqueued),
                processed: b.processed.snapshot(),
                staged_processed: b.staged_processed.snapshot(),
                direct_submits: get(&b.direct_submits),
                staged_submits: get(&b.staged_submits),
                mixed_submits: get(&b.mixed_submits),
                submit_latency_sum_us: get(&b.submit_latency_sum_us),
                completion_latency_sum_us: get(&b.completion_latency_sum_us),
                last_read_bytes: get(&b.last_read_bytes),
                last_write_bytes: get(&b.last_write_bytes),
            },
            api: ApiOp::ALL
                .iter()
                .map(|&op| (op, self.api[op.index()].snapshot()))
                .collect(),
            gpus: self
                .gpus
                .iter()
                .take(if self.level() >= 3 {
                    self.gpus.len()
                } else {
                    0
                })
                .enumerate()
                .map(|(i, g)| GpuCounts {
                    device: i as i32,
                    read: g.read.snapshot(),
                    write: g.write.snapshot(),
                    buf_register: OpCount {
                        ok: get(&g.buf_register_ok),
                        err: get(&g.buf_register_err),
                    },
                    buf_deregister: get(&g.buf_deregister),
                    registered_bytes: get(&g.registered_bytes),
                })
                .collect(),
            backends: self
                .backends
                .iter()
                .enumerate()
                .map(|(i, b)| BackendCounts {
                    name: b.name,
                    path: b.path,
                    ops: get(&b.ops),
                    bytes: get(&b.bytes),
                    errors: self.routes.errors(i),
                    declines: self.routes.declines(i),
                    failovers: self
                        .routes
                        .failovers(i)
                        .zip(&self.backends)
                        .map(|(n, to)| (to.name, n))
                        .filter(|(_, n)| *n > 0)
                        .collect(),
                    mechanism: None,
                    counters: Vec::new(),
                })
                .collect(),
            refused_by_policy: self.routes.policy_refusals(),
            p2p_mechanisms: Vec::new(),
            side_paths: self
                .side_paths
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .map(|p| p.counts())
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decline::{Decline, DeclineReason};
    use crate::error::{Error, ErrorKind};

    fn ran(backend_index: usize, bytes: usize, path: IoPath) -> Result<Dispatched> {
        Ok(Dispatched {
            bytes,
            backend: "",
            backend_index,
            path,
        })
    }

    fn finished(
        op: IoOp,
        channel: Channel,
        size: usize,
        start_us: u64,
        end_us: u64,
        outcome: &Result<Dispatched>,
    ) -> Finished<'_> {
        Finished {
            op,
            channel,
            device: Some(1),
            size,
            unaligned: size % 4096 != 0,
            start_us,
            end_us,
            outcome,
        }
    }

    fn stats(level: u8) -> Stats {
        let paths = [
            ("direct-one", IoPath::Direct),
            ("staged-one", IoPath::Staged),
        ];
        Stats::new(level, &paths, Arc::new(RouteCounters::new(2)), 2)
    }

    #[test]
    fn a_side_path_counts_under_its_name_from_level_1_and_shows_in_the_snapshot() {
        let stats = stats(0);
        const NAMES: &[&str] = &["requests", "read_bytes"];
        let remote = stats.side_path("remote", NAMES);
        remote.add(0, 5);
        assert_eq!(
            stats.snapshot().side_paths[0].get("requests"),
            0,
            "level 0 counts nothing"
        );
        stats.set_level(1);
        remote.add(0, 2);
        remote.add(1, 4096);
        remote.add(7, 1);
        let again = stats.side_path("remote", &["other"]);
        again.add(0, 1);
        let snap = stats.snapshot();
        assert_eq!(snap.side_paths.len(), 1, "one path per name");
        let counts = snap.side_path("remote").unwrap();
        assert_eq!(counts.counters, [("requests", 3), ("read_bytes", 4096)]);
        let doc = snap.to_json(1);
        assert_eq!(doc["side_paths"][0]["name"], "remote");
        assert_eq!(doc["side_paths"][0]["counters"]["read_bytes"], 4096);
    }

    #[test]
    fn size_buckets_double_from_one_kib() {
        let buckets: Vec<usize> = [0, 1, 1024, 1025, 2048, 4096, 4097, 1 << 20, u64::MAX]
            .iter()
            .map(|&n| size_bucket(n))
            .collect();
        assert_eq!(buckets, [0, 0, 0, 1, 1, 2, 3, 10, 31]);
    }

    #[test]
    fn host_memory_requests_count_on_their_own_path_and_on_no_gpu() {
        let paths = [("staged-one", IoPath::Staged), ("host", IoPath::Host)];
        let stats = Stats::new(3, &paths, Arc::new(RouteCounters::new(2)), 2);
        let host = ran(1, 512, IoPath::Host);
        stats.record(Finished {
            device: Some(hipfile_hip::HOST_DEVICE),
            ..finished(IoOp::Write, Channel::Sync, 512, 0, 5, &host)
        });
        let s = stats.snapshot();
        assert_eq!((s.write.ok, s.write.host, s.write.staged), (1, 1, 0));
        assert_eq!(s.ops_by(IoPath::Host), 1);
        assert!(s.gpus.iter().all(|g| g.write == DirectionCounts::default()));
        let doc = s.to_json(1);
        assert_eq!(doc["write"]["host"], 1);
        assert_eq!(doc["backends"][1]["path"], "host");
    }

    #[test]
    fn requests_are_counted_per_direction_backend_path_size_and_gpu() {
        let stats = stats(3);
        let direct = ran(0, 4096, IoPath::Direct);
        let staged_write = ran(1, 100, IoPath::Staged);
        let staged_read = ran(1, 7, IoPath::Staged);
        let failed = Err(Error::new(ErrorKind::InternalError, "x"));
        stats.record(finished(IoOp::Read, Channel::Sync, 4096, 10, 30, &direct));
        stats.record(finished(
            IoOp::Write,
            Channel::Async,
            100,
            5,
            6,
            &staged_write,
        ));
        stats.record(finished(IoOp::Read, Channel::Sync, 7, 40, 50, &staged_read));
        stats.record(finished(IoOp::Read, Channel::Sync, 9, 60, 70, &failed));
        stats.record(finished(IoOp::Read, Channel::Batch, 4096, 0, 100, &direct));
        let s = stats.snapshot();
        assert_eq!((s.read.ok, s.read.err, s.write.ok), (2, 1, 1));
        assert_eq!((s.read.bytes, s.write.bytes), (4103, 100));
        assert_eq!((s.read.direct, s.read.staged, s.read.unaligned), (1, 1, 2));
        assert_eq!((s.read.latency_sum_us, s.read.latency_avg_us()), (30, 15));
        assert_eq!(s.read.window_us, 40);
        assert_eq!(s.read.bytes_per_sec(), 4103 * 25_000);
        assert_eq!(s.read.size_kb_hist[2], 1);
        assert_eq!(s.read.size_kb_hist[0], 1);
        assert_eq!(s.read.size_kb_hist.iter().sum::<u64>(), 2);
        assert_eq!((s.batch_read.ok, s.batch_read.bytes), (1, 4096));
        assert_eq!(s.batch.processed, OpCount { ok: 1, err: 0 });
        assert_eq!(s.batch.completion_latency_sum_us, 100);
        assert_eq!((s.ops_by(IoPath::Direct), s.ops_by(IoPath::Staged)), (2, 2));
        assert_eq!(s.backend("staged-one").unwrap().bytes, 107);
        assert_eq!(s.gpus.len(), 2);
        assert_eq!(s.gpus[0].read, DirectionCounts::default());
        assert_eq!((s.gpus[1].read.ok, s.gpus[1].read.err), (3, 1));
        assert_eq!(s.gpus[1].write.bytes, 100);
    }

    #[test]
    fn each_level_keeps_only_its_counters() {
        let direct = ran(0, 4096, IoPath::Direct);
        for level in 0..=3u8 {
            let stats = stats(level);
            stats.record(finished(IoOp::Read, Channel::Sync, 4096, 0, 1, &direct));
            stats.api(ApiOp::HandleRegister, true);
            stats.routes.declined(1, &Decline::CompatModeForced);
            let s = stats.snapshot();
            assert_eq!(s.level, level);
            assert_eq!(s.read.ok, u64::from(level >= 1));
            assert_eq!(s.api(ApiOp::HandleRegister).ok, u64::from(level >= 1));
            assert_eq!(
                s.declined(DeclineReason::CompatModeForced),
                u64::from(level >= 1)
            );
            assert_eq!(s.read.size_kb_hist[2], u64::from(level >= 2));
            assert_eq!(s.gpus.len(), if level >= 3 { 2 } else { 0 });
        }
    }

    /// A level raised or lowered while counting: what each level counts starts and stops then,
    /// and what was counted stays.
    #[test]
    fn the_level_changes_while_counting() {
        let direct = ran(0, 4096, IoPath::Direct);
        let stats = stats(0);
        stats.record(finished(IoOp::Read, Channel::Sync, 4096, 0, 1, &direct));
        assert_eq!(stats.snapshot().read.ok, 0);
        stats.set_level(3);
        assert_eq!(stats.level(), 3);
        stats.record(finished(IoOp::Read, Channel::Sync, 4096, 0, 1, &direct));
        stats.routes.declined(1, &Decline::CompatModeForced);
        let s = stats.snapshot();
        assert_eq!((s.level, s.read.ok, s.read.size_kb_hist[2]), (3, 1, 1));
        assert_eq!(s.declined(DeclineReason::CompatModeForced), 1);
        assert_eq!(s.gpus.len(), 2);
        assert_eq!(
            (s.gpus[0].read.ok, s.gpus[1].read.ok),
            (0, 1),
            "device 1 read"
        );
        stats.set_level(1);
        stats.record(finished(IoOp::Read, Channel::Sync, 4096, 0, 1, &direct));
        let s = stats.snapshot();
        assert_eq!((s.read.ok, s.read.size_kb_hist[2], s.gpus.len()), (2, 1, 0));
        stats.set_level(9);
        assert_eq!(stats.level(), 3, "at most 3");
    }

    #[test]
    fn declines_failures_and_failovers_are_counted_per_backend() {
        let stats = stats(1);
        stats
            .routes
            .declined(0, &Decline::Misaligned { required: 512 });
        stats
            .routes
            .declined(0, &Decline::Misaligned { required: 4096 });
        stats.routes.declined(0, &Decline::NoP2pDriver);
        stats.routes.failed(0);
        stats.routes.failed_over(0, 1);
        stats.routes.failed(1);
        let s = stats.snapshot();
        let first = s.backend("direct-one").unwrap();
        assert_eq!(first.declined(DeclineReason::Misaligned), 2);
        assert_eq!(first.declined(DeclineReason::NoP2pDriver), 1);
        assert_eq!(first.declines.len(), 2);
        assert_eq!((first.errors, first.failed_over_to("staged-one")), (1, 1));
        let second = s.backend("staged-one").unwrap();
        assert_eq!((second.errors, second.failovers.len()), (1, 0));
    }

    #[test]
    fn buffers_and_last_batch_bytes_are_counted() {
        let stats = stats(3);
        stats.buf_registered(Some(0), 8192, true);
        stats.buf_registered(Some(0), 4096, true);
        stats.buf_registered(None, 4096, false);
        stats.buf_deregistered(Some(0), 4096, true);
        let first = stats.batch_submission();
        stats.batch_entry_bytes(first, IoOp::Read, 10);
        let second = stats.batch_submission();
        stats.batch_entry_bytes(first, IoOp::Read, 1000);
        stats.batch_entry_bytes(second, IoOp::Write, 20);
        stats.batch_submitted(true, 7, 1, 1);
        stats.batch_enqueued(Some(IoPath::Staged));
        stats.batch_enqueued(None);
        let s = stats.snapshot();
        assert_eq!(s.api(ApiOp::BufRegister), OpCount { ok: 2, err: 1 });
        assert_eq!(s.api(ApiOp::BufDeregister).ok, 1);
        assert_eq!(s.gpus[0].buf_register, OpCount { ok: 2, err: 0 });
        assert_eq!(
            (s.gpus[0].buf_deregister, s.gpus[0].registered_bytes),
            (1, 8192)
        );
        assert_eq!((s.batch.last_read_bytes, s.batch.last_write_bytes), (0, 20));
        assert_eq!(s.api(ApiOp::BatchSubmit).ok, 1);
        assert_eq!(
            (s.batch.mixed_submits, s.batch.submit_latency_sum_us),
            (1, 7)
        );
        assert_eq!(s.batch.enqueued, OpCount { ok: 1, err: 1 });
        assert_eq!(s.batch.staged_enqueued, 1);
    }
}
