//! Statistics: `hipFileGetStatsL1`/`L2`/`L3` from the open driver's counters. Only the level 1
//! operation and byte counters are kept; every other field reads 0.

use super::conventions::{driver, guarded_pair};
use super::types::*;

fn counter(ok: u64, err: u64) -> hipFileOpCounter_t {
    hipFileOpCounter_t { ok, err }
}

/// Level 1 statistics from the open driver's counters.
fn level1() -> Result<hipFileStatsLevel1_t, hipFileError_t> {
    let session = driver()
        .session()
        .ok_or(hipFileError_t::op(hipFileDriverNotInitialized))?;
    let snap = session.stats().snapshot();
    Ok(hipFileStatsLevel1_t {
        read_ops: counter(snap.reads, snap.read_errors),
        write_ops: counter(snap.writes, snap.write_errors),
        read_bytes: snap.bytes_read,
        write_bytes: snap.bytes_written,
        ..Default::default()
    })
}

/// Level 2: level 1 and empty size histograms (none are kept).
fn level2(basic: hipFileStatsLevel1_t) -> hipFileStatsLevel2_t {
    hipFileStatsLevel2_t {
        basic,
        ..Default::default()
    }
}

/// Level 3: level 2 and no per-GPU counters (`num_gpus` is 0).
fn level3(basic: hipFileStatsLevel1_t) -> hipFileStatsLevel3_t {
    hipFileStatsLevel3_t {
        detailed: level2(basic),
        ..Default::default()
    }
}

/// Fill the caller's statistics struct at `out` with `build` applied to the level-1 counters.
///
/// # Safety
/// `out` is NULL or valid for writing a `T`.
unsafe fn write_stats<T>(
    out: *mut T,
    build: impl FnOnce(hipFileStatsLevel1_t) -> T,
) -> hipFileError_t {
    if out.is_null() {
        return hipFileError_t::op(hipFileInvalidValue);
    }
    match level1() {
        Ok(l1) => {
            let stats = build(l1);
            // SAFETY: `out` is non-null and, by the caller's contract, valid for writing a `T`.
            unsafe { out.write(stats) };
            hipFileError_t::SUCCESS
        }
        Err(e) => e,
    }
}

/// Level 1 statistics.
#[no_mangle]
pub unsafe extern "C" fn hipFileGetStatsL1(stats: *mut hipFileStatsLevel1_t) -> hipFileError_t {
    // SAFETY: the C caller passes NULL or its own hipFileStatsLevel1_t.
    guarded_pair(|| unsafe { write_stats(stats, |l1| l1) })
}

/// Level 2 statistics (no size histograms are kept: they read 0).
#[no_mangle]
pub unsafe extern "C" fn hipFileGetStatsL2(stats: *mut hipFileStatsLevel2_t) -> hipFileError_t {
    // SAFETY: the C caller passes NULL or its own hipFileStatsLevel2_t.
    guarded_pair(|| unsafe { write_stats(stats, level2) })
}

/// Level 3 statistics (no per-GPU counters are kept: `num_gpus` is 0).
#[no_mangle]
pub unsafe extern "C" fn hipFileGetStatsL3(stats: *mut hipFileStatsLevel3_t) -> hipFileError_t {
    // SAFETY: the C caller passes NULL or its own hipFileStatsLevel3_t.
    guarded_pair(|| unsafe { write_stats(stats, level3) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn higher_levels_carry_level_one_and_zeroes() {
        let l1 = hipFileStatsLevel1_t {
            read_ops: counter(3, 1),
            write_bytes: 8192,
            ..Default::default()
        };
        let l2 = level2(l1);
        assert_eq!(l2.basic, l1);
        assert!(l2
            .read_size_kb_hist
            .iter()
            .chain(&l2.write_size_kb_hist)
            .all(|n| *n == 0));
        let l3 = level3(l1);
        assert_eq!(l3.detailed, l2);
        assert_eq!(l3.num_gpus, 0);
        assert!(l3
            .per_gpu_stats
            .iter()
            .all(|gpu| *gpu == hipFilePerGpuStats_t::default()));
    }
}
