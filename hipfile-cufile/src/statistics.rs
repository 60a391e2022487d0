//! Statistics: `cuFileGetStatsL1`/`L2`/`L3` (the facade's builders over the core's counters)
//! and cuFile's controls over them.
//!
//! - `cuFileSetStatsLevel(level)`: 0 to 3, else `CU_FILE_INVALID_VALUE`. The same knob as
//!   `CUFILE_PARAM_PROFILE_STATS` (cufile.json's `profile.cufile_stats`): staged while the driver
//!   is closed; while it is open the core counts at the new level from then on (as cuFile, whose
//!   programs set the level after opening and read counters of the IO that follows).
//! - `cuFileGetStatsLevel`: the level counted at (open), or that will be (closed): the higher of
//!   the setting and `HIPFILE_STATS_LEVEL` at the open.
//! - `cuFileStatsReset`: the counters read from zero again: later reads report what happened
//!   since the reset (counts, bytes, latency sums; rates over the whole window).
//! - `cuFileStatsStop`: reads keep answering the counters as they were at the stop;
//!   `cuFileStatsStart` answers live counters again. (The core keeps counting meanwhile; a stop
//!   costs nothing on the IO path.)
//!
//! The reads answer `CU_FILE_DRIVER_NOT_INITIALIZED` while the driver is closed, and the reset
//! and stop hold for the driver's current opening only.

use std::ffi::c_int;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use hipfile::capi::{self, guarded_pair, result_pair, Door, StatusPair};
use hipfile_core::{limits, DirectionCounts, GpuCounts, OpCount, Session, StatsSnapshot};

use crate::door::CuFile;
use crate::types::*;

/// What the controls changed, for one opening of the driver (its session).
#[derive(Default)]
struct Control {
    /// The session these apply to; another session starts afresh. (A weak reference keeps the
    /// session's allocation, so a later session never shares its address.)
    session: Weak<Session>,
    /// The counters at the last reset.
    baseline: Option<StatsSnapshot>,
    /// The counters (since the baseline) at the last stop, while stopped.
    frozen: Option<StatsSnapshot>,
}

fn control() -> std::sync::MutexGuard<'static, Control> {
    static CONTROL: Mutex<Control> = Mutex::new(Control {
        session: Weak::new(),
        baseline: None,
        frozen: None,
    });
    CONTROL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn session() -> Result<Arc<Session>, CUfileError_t> {
    CuFile::driver()
        .session()
        .ok_or(CUfileError_t::op(CU_FILE_DRIVER_NOT_INITIALIZED))
}

/// The control of `session`, reset when it belongs to an earlier opening.
fn control_of(session: &Arc<Session>) -> std::sync::MutexGuard<'static, Control> {
    let mut c = control();
    if !std::ptr::eq(c.session.as_ptr(), Arc::as_ptr(session)) {
        *c = Control {
            session: Arc::downgrade(session),
            ..Control::default()
        };
    }
    c
}

fn op_since(now: OpCount, base: OpCount) -> OpCount {
    OpCount {
        ok: now.ok.saturating_sub(base.ok),
        err: now.err.saturating_sub(base.err),
    }
}

fn direction_since(now: &DirectionCounts, base: &DirectionCounts) -> DirectionCounts {
    DirectionCounts {
        ok: now.ok.saturating_sub(base.ok),
        err: now.err.saturating_sub(base.err),
        bytes: now.bytes.saturating_sub(base.bytes),
        unaligned: now.unaligned.saturating_sub(base.unaligned),
        direct: now.direct.saturating_sub(base.direct),
        staged: now.staged.saturating_sub(base.staged),
        host: now.host.saturating_sub(base.host),
        latency_sum_us: now.latency_sum_us.saturating_sub(base.latency_sum_us),
        window_us: now.window_us,
        size_kb_hist: std::array::from_fn(|i| {
            now.size_kb_hist[i].saturating_sub(base.size_kb_hist[i])
        }),
    }
}

fn gpu_since(now: &GpuCounts, base: Option<&GpuCounts>) -> GpuCounts {
    let Some(base) = base else { return *now };
    GpuCounts {
        device: now.device,
        read: direction_since(&now.read, &base.read),
        write: direction_since(&now.write, &base.write),
        buf_register: op_since(now.buf_register, base.buf_register),
        buf_deregister: now.buf_deregister.saturating_sub(base.buf_deregister),
        // A level, not a count: what is registered now.
        registered_bytes: now.registered_bytes,
    }
}

/// The counters of `now` since `base`. Levels (registered bytes, the last batch's bytes) and
/// windows are `now`'s.
pub fn since(now: &StatsSnapshot, base: &StatsSnapshot) -> StatsSnapshot {
    let (b, nb) = (&base.batch, &now.batch);
    let mut out = now.clone();
    out.read = direction_since(&now.read, &base.read);
    out.write = direction_since(&now.write, &base.write);
    out.batch_read = direction_since(&now.batch_read, &base.batch_read);
    out.batch_write = direction_since(&now.batch_write, &base.batch_write);
    out.batch.enqueued = op_since(nb.enqueued, b.enqueued);
    out.batch.staged_enqueued = nb.staged_enqueued.saturating_sub(b.staged_enqueued);
    out.batch.processed = op_since(nb.processed, b.processed);
    out.batch.staged_processed = op_since(nb.staged_processed, b.staged_processed);
    out.batch.direct_submits = nb.direct_submits.saturating_sub(b.direct_submits);
    out.batch.staged_submits = nb.staged_submits.saturating_sub(b.staged_submits);
    out.batch.mixed_submits = nb.mixed_submits.saturating_sub(b.mixed_submits);
    out.batch.submit_latency_sum_us = nb
        .submit_latency_sum_us
        .saturating_sub(b.submit_latency_sum_us);
    out.batch.completion_latency_sum_us = nb
        .completion_latency_sum_us
        .saturating_sub(b.completion_latency_sum_us);
    out.api = now
        .api
        .iter()
        .map(|&(op, count)| (op, op_since(count, base.api(op))))
        .collect();
    out.gpus = now
        .gpus
        .iter()
        .map(|g| gpu_since(g, base.gpus.iter().find(|b| b.device == g.device)))
        .collect();
    out
}

/// The counters the statistics reads answer: frozen at a stop, else live, since the last reset.
pub fn counters() -> Result<StatsSnapshot, CUfileError_t> {
    let session = session()?;
    let c = control_of(&session);
    if let Some(frozen) = &c.frozen {
        return Ok(frozen.clone());
    }
    let now = session.stats().snapshot();
    Ok(match &c.baseline {
        Some(base) => since(&now, base),
        None => now,
    })
}

/// `cuFileStatsReset`.
pub fn stats_reset() -> CUfileError_t {
    match session() {
        Err(e) => e,
        Ok(session) => {
            let mut c = control_of(&session);
            let now = session.stats().snapshot();
            if c.frozen.is_some() {
                // Stopped: reads answer zeros until started again.
                c.frozen = Some(since(&now, &now));
            }
            c.baseline = Some(now);
            CUfileError_t::SUCCESS
        }
    }
}

/// `cuFileStatsStop`.
pub fn stats_stop() -> CUfileError_t {
    match counters() {
        Err(e) => e,
        Ok(snap) => {
            if let Some(session) = CuFile::driver().session() {
                control_of(&session).frozen = Some(snap);
            }
            CUfileError_t::SUCCESS
        }
    }
}

/// `cuFileStatsStart`.
pub fn stats_start() -> CUfileError_t {
    match session() {
        Err(e) => e,
        Ok(session) => {
            control_of(&session).frozen = None;
            CUfileError_t::SUCCESS
        }
    }
}

/// `cuFileSetStatsLevel`: staged while closed; counted at from now on while open.
pub fn set_stats_level(level: c_int) -> CUfileError_t {
    let Ok(level) = u8::try_from(level) else {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    };
    if u64::from(level) > limits::MAX_STATS_LEVEL {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    let driver = CuFile::driver();
    let set = |s: &mut hipfile::Settings| s.stats_level = u64::from(level);
    if driver.stage_settings(set).is_ok() {
        return CUfileError_t::SUCCESS;
    }
    // Open: the live settings say so, and the counters count at it.
    match driver.session() {
        Some(session) => {
            let answer = result_pair(driver.update_live_settings(set));
            if answer == CUfileError_t::SUCCESS {
                session.stats().set_level(level);
            }
            answer
        }
        // Closed again meanwhile.
        None => result_pair(driver.stage_settings(set)),
    }
}

/// `cuFileGetStatsLevel`: the level counted at while open, else the one the next open counts at.
pub fn stats_level() -> c_int {
    let driver = CuFile::driver();
    match driver.session() {
        Some(session) => c_int::from(session.stats().level()),
        None => c_int::from(
            driver
                .settings()
                .effective_stats_level(&hipfile_core::EnvConfig::cached()),
        ),
    }
}

/// Set the statistics level (0 to 3).
#[no_mangle]
pub extern "C" fn cuFileSetStatsLevel(level: c_int) -> CUfileError_t {
    guarded_pair(|| set_stats_level(level))
}

/// The statistics level in force.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetStatsLevel(level: *mut c_int) -> CUfileError_t {
    // SAFETY: the C caller passes NULL or its own int.
    guarded_pair(|| unsafe { capi::write_out(level, stats_level()) })
}

/// Answer live counters again.
#[no_mangle]
pub extern "C" fn cuFileStatsStart() -> CUfileError_t {
    guarded_pair(stats_start)
}

/// Keep answering the counters as they are now.
#[no_mangle]
pub extern "C" fn cuFileStatsStop() -> CUfileError_t {
    guarded_pair(stats_stop)
}

/// Count from zero again.
#[no_mangle]
pub extern "C" fn cuFileStatsReset() -> CUfileError_t {
    guarded_pair(stats_reset)
}

/// Level 1 statistics.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetStatsL1(stats: *mut CUfileStatsLevel1_t) -> CUfileError_t {
    // SAFETY: the C caller passes NULL or its own struct.
    guarded_pair(|| unsafe { capi::write_stats::<CuFile, _>(stats, counters, capi::level1) })
}

/// Level 2 statistics.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetStatsL2(stats: *mut CUfileStatsLevel2_t) -> CUfileError_t {
    // SAFETY: the C caller passes NULL or its own struct.
    guarded_pair(|| unsafe { capi::write_stats::<CuFile, _>(stats, counters, capi::level2) })
}

/// Level 3 statistics.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetStatsL3(stats: *mut CUfileStatsLevel3_t) -> CUfileError_t {
    // SAFETY: the C caller passes NULL or its own struct.
    guarded_pair(|| unsafe { capi::write_stats::<CuFile, _>(stats, counters, capi::level3) })
}
