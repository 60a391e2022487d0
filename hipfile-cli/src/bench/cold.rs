//! The cold phase: the whole file read after this process let go of its page cache (see
//! [`Rig::cold_start`]) and the cache was dropped; and, once the run is measured, the judgement
//! of every cold figure of ours against the O_DIRECT ceiling of the same run.

use super::rig::{ColdStarts, Rig};
use crate::report::{not_cold, Measurement};

/// One repetition: the cold read, when the page cache can be dropped.
pub(super) fn run(rig: &mut Rig<'_>) -> Result<(), String> {
    rig.step("cold read");
    if rig.cold_ok {
        rig.cold_start("read_cold")?;
        let label = format!("read, cold (caches dropped), {}", rig.engine);
        rig.holds_file = rig.whole_read_row("read_cold", &label)?;
    }
    rig.progress.inc(1);
    Ok(())
}

/// A measurement's headline figure, with its key.
pub(super) fn headline(measurements: &[Measurement], key: &str) -> Option<(String, f64)> {
    measurements
        .iter()
        .find(|m| m.key == key)
        .map(|m| (m.key.clone(), m.figure.headline()))
}

/// Mark the cold figures of ours (the cold read, the cold batch `cold_batch_key`) that found
/// bytes pinned at their start or ran faster than the O_DIRECT ceiling of the same run allows,
/// each against the ceiling in its own unit; returns the whole-file read ceiling (key, GB/s).
pub(super) fn judge(
    measurements: &mut [Measurement],
    cold_starts: &ColdStarts,
    (cold_batch_key, random_ceiling_key): (&str, &str),
) -> Option<(String, f64)> {
    let read_ceiling = headline(measurements, "ceiling_odirect_read");
    let random_ceiling = headline(measurements, random_ceiling_key);
    for m in measurements.iter_mut() {
        let (ceiling, unit) = match m.key.as_str() {
            "read_cold" => (&read_ceiling, "GB/s"),
            k if k == cold_batch_key => (&random_ceiling, "IOPS"),
            _ => continue,
        };
        m.cold_start_pinned = cold_starts.get(&m.key);
        m.not_cold = not_cold(
            m.figure.headline(),
            unit,
            ceiling.as_ref().map(|(k, v)| (k.as_str(), *v)),
            m.cold_start_pinned.unwrap_or(0),
        );
    }
    read_ceiling
}
