//! Statistics: `hipFileGetStatsL1`/`L2`/`L3` from the open driver's counters
//! ([`hipfile_core::StatsSnapshot`]). What each level counts is `HIPFILE_STATS_LEVEL`'s (or
//! `hipFileParamProfileStats`'s) business: a field of a level above the one counted reads 0.
//!
//! How the fields map:
//!
//! - `read_ops`/`write_ops`, `read_bytes`..., the latencies: synchronous and stream-ordered
//!   requests (batch entries have their own `batch_*` fields). Failures include requests refused
//!   before any backend ran them (a bad handle, a negative offset). Latencies are from the call
//!   (or the stream reaching the op) to its end; bandwidth and rates are over the window from
//!   the first request's start to the last one's end.
//! - `batch_submit_ops`: `hipFileBatchIOSubmit` calls; `batch_complete_ops`:
//!   `hipFileBatchIOGetStatus` calls; `batch_enqueued_ops`/`batch_processed_ops`: entries handed
//!   to a backend and entries finished, the `posix` ones those of the staged path;
//!   `batch_p2p_submit_ops`, `batch_mixed_io_submit_ops`: submissions whose entries all took the
//!   direct (P2P DMA) path, or both paths. `batch_completion_lat_*`: from an entry's submission
//!   to its end. Batch rates are over the longer of the batch reads' and writes' windows.
//! - Per GPU: `n_p2p_*` the direct path, `n_posix_*` the staged path, `n_mmap*` buffer
//!   registrations of the GPU's memory, `reg_bytes` the bytes registered now.
//!
//! Fields that cannot apply stay 0, each for its reason:
//! - `batch_nvfs_submit_ops`, `n_nvfs_reads`/`n_nvfs_writes`: there is no nvidia-fs kernel
//!   module path of its own; the direct path is P2P DMA through the platform's driver, counted
//!   in the `p2p` fields.
//! - `batch_aio_submit_ops`, `batch_iouring_submit_ops`: the staged engine runs
//!   `pread`/`pwrite` on its worker threads, neither Linux AIO nor io_uring; its entries count in
//!   `batch_posix_*`.
//! - `n_dr_reads`/`n_dr_writes`: no dynamic routing through another GPU's bounce buffers is
//!   done; each request runs on its own GPU's memory.
//! - `n_sparse_regions`, `n_inline_regions`: requests are not split by the file's sparse or
//!   inline-data regions (these are cuFile's nvidia-fs extent statistics).
//! - `uuid`: the GPU runtime boundary exposes no UUID query; GPUs are told apart by their index
//!   in `per_gpu_stats`, which is the device ordinal.

use hipfile_core::{per_sec, ApiOp, DirectionCounts, GpuCounts, OpCount, StatsSnapshot};

use super::conventions::{guarded_pair, Door, HipFile, StatusPair};
use super::types::*;

fn counter(c: OpCount) -> hipFileOpCounter_t {
    hipFileOpCounter_t {
        ok: c.ok,
        err: c.err,
    }
}

fn ok_only(ok: u64) -> hipFileOpCounter_t {
    hipFileOpCounter_t { ok, err: 0 }
}

/// Door `D`'s open driver's counters now; `DriverNotInitialized` while closed.
pub fn snapshot<D: Door>() -> Result<StatsSnapshot, D::Pair> {
    let session = D::driver()
        .session()
        .ok_or(D::Pair::op(hipFileDriverNotInitialized))?;
    Ok(session.stats().snapshot())
}

/// Level 1 statistics of `snap`.
pub fn level1(snap: &StatsSnapshot) -> hipFileStatsLevel1_t {
    let (r, w, b) = (&snap.read, &snap.write, &snap.batch);
    let submits = snap.api(ApiOp::BatchSubmit);
    let processed = b.processed.ok + b.processed.err;
    let batch_window = snap.batch_read.window_us.max(snap.batch_write.window_us);
    hipFileStatsLevel1_t {
        read_ops: hipFileOpCounter_t {
            ok: r.ok,
            err: r.err,
        },
        write_ops: hipFileOpCounter_t {
            ok: w.ok,
            err: w.err,
        },
        hdl_register_ops: counter(snap.api(ApiOp::HandleRegister)),
        hdl_deregister_ops: counter(snap.api(ApiOp::HandleDeregister)),
        buf_register_ops: counter(snap.api(ApiOp::BufRegister)),
        buf_deregister_ops: counter(snap.api(ApiOp::BufDeregister)),
        read_bytes: r.bytes,
        write_bytes: w.bytes,
        read_bw_bytes_per_sec: r.bytes_per_sec(),
        write_bw_bytes_per_sec: w.bytes_per_sec(),
        read_lat_avg_us: r.latency_avg_us(),
        write_lat_avg_us: w.latency_avg_us(),
        read_ops_per_sec: r.ops_per_sec(),
        write_ops_per_sec: w.ops_per_sec(),
        read_lat_sum_us: r.latency_sum_us,
        write_lat_sum_us: w.latency_sum_us,
        batch_submit_ops: counter(submits),
        batch_complete_ops: counter(snap.api(ApiOp::BatchStatus)),
        batch_setup_ops: counter(snap.api(ApiOp::BatchSetup)),
        batch_cancel_ops: counter(snap.api(ApiOp::BatchCancel)),
        batch_destroy_ops: counter(snap.api(ApiOp::BatchDestroy)),
        batch_enqueued_ops: counter(b.enqueued),
        batch_posix_enqueued_ops: ok_only(b.staged_enqueued),
        batch_processed_ops: counter(b.processed),
        batch_posix_processed_ops: counter(b.staged_processed),
        batch_nvfs_submit_ops: hipFileOpCounter_t::default(),
        batch_p2p_submit_ops: ok_only(b.direct_submits),
        batch_aio_submit_ops: hipFileOpCounter_t::default(),
        batch_iouring_submit_ops: hipFileOpCounter_t::default(),
        batch_mixed_io_submit_ops: ok_only(b.mixed_submits),
        batch_total_submit_ops: counter(submits),
        batch_read_bytes: snap.batch_read.bytes,
        batch_write_bytes: snap.batch_write.bytes,
        batch_read_bw_bytes: snap.batch_read.bytes_per_sec(),
        batch_write_bw_bytes: snap.batch_write.bytes_per_sec(),
        batch_submit_lat_avg_us: b
            .submit_latency_sum_us
            .checked_div(submits.ok + submits.err)
            .unwrap_or(0),
        batch_completion_lat_avg_us: b
            .completion_latency_sum_us
            .checked_div(processed)
            .unwrap_or(0),
        batch_submit_ops_per_sec: per_sec(submits.ok, batch_window),
        batch_complete_ops_per_sec: per_sec(processed, batch_window),
        batch_submit_lat_sum_us: b.submit_latency_sum_us,
        batch_completion_lat_sum_us: b.completion_latency_sum_us,
        last_batch_read_bytes: b.last_read_bytes,
        last_batch_write_bytes: b.last_write_bytes,
    }
}

/// Every read (or write) size histogram: synchronous, stream-ordered and batch together.
fn histogram(a: &DirectionCounts, b: &DirectionCounts) -> [u64; 32] {
    std::array::from_fn(|i| a.size_kb_hist[i] + b.size_kb_hist[i])
}

/// Level 2 statistics of `snap`.
pub fn level2(snap: &StatsSnapshot) -> hipFileStatsLevel2_t {
    hipFileStatsLevel2_t {
        basic: level1(snap),
        read_size_kb_hist: histogram(&snap.read, &snap.batch_read),
        write_size_kb_hist: histogram(&snap.write, &snap.batch_write),
    }
}

/// The share (percent, at most 100) of a direction's window that its requests were in flight.
fn utilization(d: &DirectionCounts) -> u64 {
    (d.latency_sum_us.saturating_mul(100))
        .checked_div(d.window_us)
        .unwrap_or(0)
        .min(100)
}

fn per_gpu(g: &GpuCounts) -> hipFilePerGpuStats_t {
    let (r, w) = (&g.read, &g.write);
    hipFilePerGpuStats_t {
        uuid: [0; HIPFILE_GPU_UUID_LEN],
        read_bytes: r.bytes,
        read_bw_bytes_per_sec: r.bytes_per_sec(),
        read_utilization: utilization(r),
        read_duration_us: r.latency_sum_us,
        n_total_reads: r.ok + r.err,
        n_p2p_reads: r.direct,
        n_nvfs_reads: 0,
        n_posix_reads: r.staged,
        n_unaligned_reads: r.unaligned,
        n_dr_reads: 0,
        n_sparse_regions: 0,
        n_inline_regions: 0,
        n_reads_err: r.err,
        write_bytes: w.bytes,
        write_bw_bytes_per_sec: w.bytes_per_sec(),
        write_utilization: utilization(w),
        write_duration_us: w.latency_sum_us,
        n_total_writes: w.ok + w.err,
        n_p2p_writes: w.direct,
        n_nvfs_writes: 0,
        n_posix_writes: w.staged,
        n_unaligned_writes: w.unaligned,
        n_dr_writes: 0,
        n_writes_err: w.err,
        n_mmap: g.buf_register.ok + g.buf_register.err,
        n_mmap_ok: g.buf_register.ok,
        n_mmap_err: g.buf_register.err,
        n_mmap_free: g.buf_deregister,
        reg_bytes: g.registered_bytes,
    }
}

/// Level 3 statistics of `snap`: GPUs past `HIPFILE_MAX_GPUS` are left out.
pub fn level3(snap: &StatsSnapshot) -> hipFileStatsLevel3_t {
    let mut out = hipFileStatsLevel3_t {
        detailed: level2(snap),
        ..Default::default()
    };
    let gpus = snap.gpus.iter().take(HIPFILE_MAX_GPUS);
    for (slot, g) in out.per_gpu_stats.iter_mut().zip(gpus) {
        *slot = per_gpu(g);
    }
    out.num_gpus = snap.gpus.len().min(HIPFILE_MAX_GPUS) as u32;
    out
}

/// Fill the caller's statistics struct at `out` with `build` applied to `counters`, the
/// counters of door `D`'s driver.
///
/// # Safety
/// `out` is NULL or valid for writing a `T`.
pub unsafe fn write_stats<D: Door, T>(
    out: *mut T,
    counters: impl FnOnce() -> Result<StatsSnapshot, D::Pair>,
    build: impl FnOnce(&StatsSnapshot) -> T,
) -> D::Pair {
    if out.is_null() {
        return D::Pair::op(hipFileInvalidValue);
    }
    match counters() {
        Ok(snap) => {
            let stats = build(&snap);
            // SAFETY: `out` is non-null and, by the caller's contract, valid for writing a `T`.
            unsafe { out.write(stats) };
            D::Pair::SUCCESS
        }
        Err(e) => e,
    }
}

/// Level 1 statistics.
#[no_mangle]
pub unsafe extern "C" fn hipFileGetStatsL1(stats: *mut hipFileStatsLevel1_t) -> hipFileError_t {
    // SAFETY: the C caller passes NULL or its own hipFileStatsLevel1_t.
    guarded_pair(|| unsafe { write_stats::<HipFile, _>(stats, snapshot::<HipFile>, level1) })
}

/// Level 2 statistics: level 1 and the request size histograms (counted from level 2 on).
#[no_mangle]
pub unsafe extern "C" fn hipFileGetStatsL2(stats: *mut hipFileStatsLevel2_t) -> hipFileError_t {
    // SAFETY: the C caller passes NULL or its own hipFileStatsLevel2_t.
    guarded_pair(|| unsafe { write_stats::<HipFile, _>(stats, snapshot::<HipFile>, level2) })
}

/// Level 3 statistics: level 2 and per-GPU counters (counted at level 3; `num_gpus` is 0
/// below).
#[no_mangle]
pub unsafe extern "C" fn hipFileGetStatsL3(stats: *mut hipFileStatsLevel3_t) -> hipFileError_t {
    // SAFETY: the C caller passes NULL or its own hipFileStatsLevel3_t.
    guarded_pair(|| unsafe { write_stats::<HipFile, _>(stats, snapshot::<HipFile>, level3) })
}

#[cfg(test)]
mod tests {
    use hipfile_core::{BatchCounts, IoPath};

    use super::*;

    fn direction(ok: u64, bytes: u64, latency: u64, window: u64) -> DirectionCounts {
        DirectionCounts {
            ok,
            err: 1,
            bytes,
            unaligned: 2,
            direct: ok,
            staged: 0,
            host: 0,
            latency_sum_us: latency,
            window_us: window,
            size_kb_hist: std::array::from_fn(|i| i as u64),
        }
    }

    fn snap() -> StatsSnapshot {
        StatsSnapshot {
            level: 3,
            uptime_us: 2_000_000,
            read: direction(4, 4_000_000, 400, 1_000_000),
            write: direction(2, 8192, 10, 0),
            batch_read: direction(3, 300, 30, 2_000_000),
            batch_write: DirectionCounts::default(),
            batch: BatchCounts {
                enqueued: OpCount { ok: 3, err: 1 },
                staged_enqueued: 1,
                processed: OpCount { ok: 3, err: 1 },
                staged_processed: OpCount { ok: 1, err: 0 },
                direct_submits: 1,
                staged_submits: 0,
                mixed_submits: 1,
                submit_latency_sum_us: 40,
                completion_latency_sum_us: 80,
                last_read_bytes: 100,
                last_write_bytes: 0,
            },
            api: vec![
                (ApiOp::BatchSubmit, OpCount { ok: 2, err: 2 }),
                (ApiOp::HandleRegister, OpCount { ok: 5, err: 1 }),
            ],
            gpus: vec![GpuCounts {
                device: 0,
                read: direction(4, 4_000_000, 400, 1000),
                write: DirectionCounts::default(),
                buf_register: OpCount { ok: 2, err: 1 },
                buf_deregister: 1,
                registered_bytes: 4096,
            }],
            backends: vec![hipfile_core::BackendCounts {
                name: "fastpath",
                path: IoPath::Direct,
                ops: 7,
                bytes: 4_000_300,
                errors: 0,
                declines: Vec::new(),
                failovers: Vec::new(),
                mechanism: Some("sim"),
                counters: Vec::new(),
            }],
            ..StatsSnapshot::default()
        }
    }

    #[test]
    fn level_one_derives_rates_and_averages_from_the_counters() {
        let l1 = level1(&snap());
        assert_eq!(l1.read_ops, hipFileOpCounter_t { ok: 4, err: 1 });
        assert_eq!(l1.hdl_register_ops, hipFileOpCounter_t { ok: 5, err: 1 });
        assert_eq!(l1.read_bw_bytes_per_sec, 4_000_000);
        assert_eq!((l1.read_lat_avg_us, l1.read_ops_per_sec), (100, 4));
        assert_eq!(l1.write_bw_bytes_per_sec, 0, "an empty window has no rate");
        assert_eq!(l1.batch_total_submit_ops, l1.batch_submit_ops);
        assert_eq!(l1.batch_submit_lat_avg_us, 10);
        assert_eq!(l1.batch_completion_lat_avg_us, 20);
        assert_eq!(l1.batch_complete_ops_per_sec, 2);
        assert_eq!(l1.batch_read_bw_bytes, 150);
        assert_eq!(l1.batch_submit_ops_per_sec, 1);
        assert_eq!(l1.batch_posix_enqueued_ops.ok, 1);
        assert_eq!(
            (l1.batch_p2p_submit_ops.ok, l1.batch_mixed_io_submit_ops.ok),
            (1, 1)
        );
        assert_eq!(l1.last_batch_read_bytes, 100);
    }

    #[test]
    fn higher_levels_add_histograms_and_per_gpu_counters() {
        let s = snap();
        let l2 = level2(&s);
        assert_eq!(l2.basic, level1(&s));
        assert_eq!(l2.read_size_kb_hist[5], 10, "sync and batch together");
        assert_eq!(l2.write_size_kb_hist[5], 5);
        let l3 = level3(&s);
        assert_eq!(l3.detailed, l2);
        assert_eq!(l3.num_gpus, 1);
        let g = &l3.per_gpu_stats[0];
        assert_eq!((g.n_total_reads, g.n_p2p_reads, g.n_reads_err), (5, 4, 1));
        assert_eq!((g.read_utilization, g.n_unaligned_reads), (40, 2));
        assert_eq!((g.n_mmap, g.n_mmap_ok, g.n_mmap_err), (3, 2, 1));
        assert_eq!((g.n_mmap_free, g.reg_bytes), (1, 4096));
        assert_eq!(l3.per_gpu_stats[1], hipFilePerGpuStats_t::default());
    }
}
