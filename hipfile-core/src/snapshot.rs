//! What the counters say at one moment ([`StatsSnapshot`]) and its JSON document, the one the
//! statistics socket serves and `hipfile stats` prints; the live counters that fill it are
//! [`crate::Stats`]'s.

use crate::backend::IoPath;
use crate::decline::DeclineReason;

/// The version of the JSON document of the counters ([`StatsSnapshot::to_json`]), which the
/// statistics socket serves ([`crate::stats_server`]).
pub const PROTOCOL_VERSION: u64 = 1;

/// Buckets of the request size histograms.
pub const SIZE_BUCKETS: usize = 32;

/// The histogram bucket of a request of `size` bytes: 0 for up to 1 KiB, then bucket `i` for
/// sizes above `2^(i-1)` KiB up to `2^i` KiB; sizes above 2^30 KiB land in the last bucket.
pub fn size_bucket(size: u64) -> usize {
    let kib = size.saturating_sub(1) / 1024;
    ((u64::BITS - kib.leading_zeros()) as usize).min(SIZE_BUCKETS - 1)
}

/// API operations counted by outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApiOp {
    /// `hipFileHandleRegister`.
    HandleRegister,
    /// `hipFileHandleDeregister`.
    HandleDeregister,
    /// `hipFileBufRegister`.
    BufRegister,
    /// `hipFileBufDeregister`.
    BufDeregister,
    /// `hipFileBatchIOSetUp`.
    BatchSetup,
    /// `hipFileBatchIOSubmit`.
    BatchSubmit,
    /// `hipFileBatchIOGetStatus`.
    BatchStatus,
    /// `hipFileBatchIOCancel`.
    BatchCancel,
    /// `hipFileBatchIODestroy`.
    BatchDestroy,
    /// `hipFileStreamRegister`.
    StreamRegister,
    /// `hipFileStreamDeregister`.
    StreamDeregister,
}

impl ApiOp {
    /// Every operation, in the order of [`StatsSnapshot::api`].
    pub const ALL: [ApiOp; 11] = [
        ApiOp::HandleRegister,
        ApiOp::HandleDeregister,
        ApiOp::BufRegister,
        ApiOp::BufDeregister,
        ApiOp::BatchSetup,
        ApiOp::BatchSubmit,
        ApiOp::BatchStatus,
        ApiOp::BatchCancel,
        ApiOp::BatchDestroy,
        ApiOp::StreamRegister,
        ApiOp::StreamDeregister,
    ];

    /// A short name for reports.
    pub fn name(self) -> &'static str {
        match self {
            ApiOp::HandleRegister => "handle_register",
            ApiOp::HandleDeregister => "handle_deregister",
            ApiOp::BufRegister => "buf_register",
            ApiOp::BufDeregister => "buf_deregister",
            ApiOp::BatchSetup => "batch_setup",
            ApiOp::BatchSubmit => "batch_submit",
            ApiOp::BatchStatus => "batch_status",
            ApiOp::BatchCancel => "batch_cancel",
            ApiOp::BatchDestroy => "batch_destroy",
            ApiOp::StreamRegister => "stream_register",
            ApiOp::StreamDeregister => "stream_deregister",
        }
    }

    /// Position in [`ApiOp::ALL`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// Successes and failures of one operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCount {
    /// Successes.
    pub ok: u64,
    /// Failures.
    pub err: u64,
}

/// Requests of one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirectionCounts {
    /// Requests that succeeded.
    pub ok: u64,
    /// Requests that failed.
    pub err: u64,
    /// Bytes the successful requests moved.
    pub bytes: u64,
    /// Requests (successful or not) whose file offset, size or memory address is not a
    /// multiple of 4 KiB.
    pub unaligned: u64,
    /// Successful requests by the direct path.
    pub direct: u64,
    /// Successful requests by the staged path.
    pub staged: u64,
    /// Successful requests on host memory ([`IoPath::Host`]).
    pub host: u64,
    /// Microseconds the successful requests took, summed.
    pub latency_sum_us: u64,
    /// Microseconds from the start of the first request to the end of the last one (0 before
    /// any finished).
    pub window_us: u64,
    /// Successful requests by size ([`size_bucket`]; level 2).
    pub size_kb_hist: [u64; SIZE_BUCKETS],
}

impl DirectionCounts {
    /// Mean latency of the successful requests, in microseconds.
    pub fn latency_avg_us(&self) -> u64 {
        self.latency_sum_us.checked_div(self.ok).unwrap_or(0)
    }

    /// Bytes per second over [`DirectionCounts::window_us`].
    pub fn bytes_per_sec(&self) -> u64 {
        per_sec(self.bytes, self.window_us)
    }

    /// Successful requests per second over [`DirectionCounts::window_us`].
    pub fn ops_per_sec(&self) -> u64 {
        per_sec(self.ok, self.window_us)
    }
}

/// `count` per second over `us` microseconds (0 for an empty window).
pub fn per_sec(count: u64, us: u64) -> u64 {
    if us == 0 {
        return 0;
    }
    (u128::from(count) * 1_000_000 / u128::from(us)).min(u128::from(u64::MAX)) as u64
}

/// Batch entries beyond their per-direction counts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchCounts {
    /// Entries handed to a backend (ok) or refused by every backend at submission (err).
    pub enqueued: OpCount,
    /// Of `enqueued.ok`, those on the staged path.
    pub staged_enqueued: u64,
    /// Entries finished, successfully or not.
    pub processed: OpCount,
    /// Of `processed`, those on the staged path.
    pub staged_processed: OpCount,
    /// Submissions whose entries all went to direct backends.
    pub direct_submits: u64,
    /// Submissions whose entries all went to staged backends.
    pub staged_submits: u64,
    /// Submissions whose entries went to both paths.
    pub mixed_submits: u64,
    /// Microseconds `hipFileBatchIOSubmit` calls took, summed.
    pub submit_latency_sum_us: u64,
    /// Microseconds from each entry's submission to its end, summed over processed entries.
    pub completion_latency_sum_us: u64,
    /// Bytes read by the entries of the last submission that read or wrote anything, as far
    /// as they finished.
    pub last_read_bytes: u64,
    /// Bytes written, as `last_read_bytes`.
    pub last_write_bytes: u64,
}

/// One GPU's requests and registered buffers (level 3).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GpuCounts {
    /// The device ordinal.
    pub device: i32,
    /// Reads into this GPU's memory, every channel.
    pub read: DirectionCounts,
    /// Writes from this GPU's memory, every channel.
    pub write: DirectionCounts,
    /// Buffer registrations of this GPU's memory.
    pub buf_register: OpCount,
    /// Buffer deregistrations.
    pub buf_deregister: u64,
    /// Bytes of this GPU's memory registered now.
    pub registered_bytes: u64,
}

/// Requests and bytes one backend ran, and how requests left it.
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
    /// Requests it accepted and failed (those it handed over by failover included).
    pub errors: u64,
    /// Requests it declined, by reason (zero counts left out), in [`DeclineReason::ALL`] order.
    pub declines: Vec<(DeclineReason, u64)>,
    /// Requests it failed that a later backend took over, by that backend's name.
    pub failovers: Vec<(&'static str, u64)>,
    /// What it moves bytes through ([`crate::BackendReport::mechanism`]: the fastpath's P2P
    /// driver).
    pub mechanism: Option<&'static str>,
    /// Its own counters ([`crate::BackendReport::counters`]: the fallback's page cache and O_DIRECT
    /// bytes).
    pub counters: Vec<(&'static str, u64)>,
}

impl BackendCounts {
    /// Declines for `reason`.
    pub fn declined(&self, reason: DeclineReason) -> u64 {
        self.declines
            .iter()
            .find(|(r, _)| *r == reason)
            .map_or(0, |(_, n)| *n)
    }

    /// Failovers from this backend to the backend named `to`.
    pub fn failed_over_to(&self, to: &str) -> u64 {
        self.failovers
            .iter()
            .find(|(name, _)| *name == to)
            .map_or(0, |(_, n)| *n)
    }
}

/// The counters of a path beside the backends ([`crate::SidePath`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SidePathCounts {
    /// The path's name (`remote`).
    pub name: &'static str,
    /// Its counters by name, in the order it made them.
    pub counters: Vec<(&'static str, u64)>,
}

impl SidePathCounts {
    /// The counter named `name` (0 when it has none of that name).
    pub fn get(&self, name: &str) -> u64 {
        self.counters
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v)
    }
}

/// A snapshot of the counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// The level counting ran at (0: nothing was counted).
    pub level: u8,
    /// Microseconds since counting started (the driver opened).
    pub uptime_us: u64,
    /// Synchronous and stream-ordered reads.
    pub read: DirectionCounts,
    /// Synchronous and stream-ordered writes.
    pub write: DirectionCounts,
    /// Batch reads.
    pub batch_read: DirectionCounts,
    /// Batch writes.
    pub batch_write: DirectionCounts,
    /// Batch entries and submissions.
    pub batch: BatchCounts,
    /// API operations by outcome, in [`ApiOp::ALL`] order.
    pub api: Vec<(ApiOp, OpCount)>,
    /// Per GPU, by device ordinal (level 3; empty below).
    pub gpus: Vec<GpuCounts>,
    /// Per backend, in the registry's offer order.
    pub backends: Vec<BackendCounts>,
    /// Requests that failed closed: their file handle's policy is direct only
    /// ([`crate::IoPolicy::DirectOnly`]) and no direct backend ran them.
    pub refused_by_policy: u64,
    /// The direct (P2P) mechanisms the driver may use ([`crate::P2pMechanisms::names`]), as
    /// the settings in force say (empty in counters taken without them).
    pub p2p_mechanisms: Vec<&'static str>,
    /// Paths beside the backends (IO a front door runs itself, such as remote objects), in the
    /// order they were first counted.
    pub side_paths: Vec<SidePathCounts>,
}

fn op_json(c: OpCount) -> serde_json::Value {
    serde_json::json!({ "ok": c.ok, "err": c.err })
}

impl DirectionCounts {
    /// As JSON (the fields by name; the histogram as `size_kb_hist`).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "ok": self.ok,
            "err": self.err,
            "bytes": self.bytes,
            "unaligned": self.unaligned,
            "direct": self.direct,
            "staged": self.staged,
            "host": self.host,
            "latency_sum_us": self.latency_sum_us,
            "window_us": self.window_us,
            "size_kb_hist": self.size_kb_hist.to_vec(),
        })
    }
}

impl StatsSnapshot {
    /// The document the statistics socket serves ([`crate::stats_server`]): `version`, the
    /// process `pid`, and every counter by name.
    pub fn to_json(&self, pid: u32) -> serde_json::Value {
        let b = &self.batch;
        let map = |pairs: Vec<(String, serde_json::Value)>| {
            serde_json::Value::Object(pairs.into_iter().collect())
        };
        serde_json::json!({
            "version": PROTOCOL_VERSION,
            "pid": pid,
            "level": self.level,
            "uptime_us": self.uptime_us,
            "read": self.read.to_json(),
            "write": self.write.to_json(),
            "batch_read": self.batch_read.to_json(),
            "batch_write": self.batch_write.to_json(),
            "batch": {
                "enqueued": op_json(b.enqueued),
                "staged_enqueued": b.staged_enqueued,
                "processed": op_json(b.processed),
                "staged_processed": op_json(b.staged_processed),
                "direct_submits": b.direct_submits,
                "staged_submits": b.staged_submits,
                "mixed_submits": b.mixed_submits,
                "submit_latency_sum_us": b.submit_latency_sum_us,
                "completion_latency_sum_us": b.completion_latency_sum_us,
                "last_read_bytes": b.last_read_bytes,
                "last_write_bytes": b.last_write_bytes,
            },
            "api": map(self.api.iter().map(|(op, c)| (op.name().to_string(), op_json(*c))).collect()),
            "gpus": self.gpus.iter().map(|g| serde_json::json!({
                "device": g.device,
                "read": g.read.to_json(),
                "write": g.write.to_json(),
                "buf_register": op_json(g.buf_register),
                "buf_deregister": g.buf_deregister,
                "registered_bytes": g.registered_bytes,
            })).collect::<Vec<_>>(),
            "refused_by_policy": self.refused_by_policy,
            "p2p_mechanisms": self.p2p_mechanisms,
            "side_paths": self.side_paths.iter().map(|p| serde_json::json!({
                "name": p.name,
                "counters": map(p.counters.iter().map(|(name, n)| (name.to_string(), (*n).into())).collect()),
            })).collect::<Vec<_>>(),
            "backends": self.backends.iter().map(|k| serde_json::json!({
                "name": k.name,
                "path": k.path.name(),
                "mechanism": k.mechanism,
                "ops": k.ops,
                "bytes": k.bytes,
                "errors": k.errors,
                "declines": map(k.declines.iter().map(|(r, n)| (r.name().to_string(), (*n).into())).collect()),
                "failovers": map(k.failovers.iter().map(|(to, n)| (to.to_string(), (*n).into())).collect()),
                "counters": map(k.counters.iter().map(|(name, n)| (name.to_string(), (*n).into())).collect()),
            })).collect::<Vec<_>>(),
        })
    }

    /// Requests completed by backends of `path`.
    pub fn ops_by(&self, path: IoPath) -> u64 {
        self.backends
            .iter()
            .filter(|b| b.path == path)
            .map(|b| b.ops)
            .sum()
    }

    /// The counters of the path beside the backends named `name`.
    pub fn side_path(&self, name: &str) -> Option<&SidePathCounts> {
        self.side_paths.iter().find(|p| p.name == name)
    }

    /// The counts of the backend named `name`.
    pub fn backend(&self, name: &str) -> Option<&BackendCounts> {
        self.backends.iter().find(|b| b.name == name)
    }

    /// The outcomes of `op`.
    pub fn api(&self, op: ApiOp) -> OpCount {
        self.api
            .iter()
            .find(|(o, _)| *o == op)
            .map_or(OpCount::default(), |(_, c)| *c)
    }

    /// Declines by reason summed over every backend.
    pub fn declined(&self, reason: DeclineReason) -> u64 {
        self.backends.iter().map(|b| b.declined(reason)).sum()
    }
}
