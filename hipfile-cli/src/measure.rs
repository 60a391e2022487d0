//! Clocks and statistics: wall time with the process CPU time spent meanwhile, medians and
//! percentiles, and a small deterministic generator for random offsets.

use std::time::Instant;

/// CPU time (user + system, all threads, to the nanosecond) this process has used, from
/// `CLOCK_PROCESS_CPUTIME_ID`: `/proc/self/stat` counts in 10 ms ticks, too coarse for a loop of
/// small reads.
pub fn process_cpu_seconds() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// A running measurement: wall clock and process CPU time at its start.
#[derive(Debug)]
pub struct Span {
    wall: Instant,
    cpu: f64,
}

/// What a finished [`Span`] saw.
#[derive(Clone, Copy, Debug)]
pub struct Timed {
    /// Wall seconds.
    pub seconds: f64,
    /// CPU seconds divided by wall seconds: how many cores were busy on average.
    pub cores: f64,
}

impl Span {
    /// Start now.
    pub fn start() -> Span {
        Span {
            cpu: process_cpu_seconds(),
            wall: Instant::now(),
        }
    }

    /// Stop now.
    pub fn finish(self) -> Timed {
        let seconds = self.wall.elapsed().as_secs_f64().max(1e-9);
        let cores = ((process_cpu_seconds() - self.cpu) / seconds).max(0.0);
        Timed { seconds, cores }
    }
}

/// The median of `v` (the upper one for an even count); `NaN` when empty.
pub fn median(v: &[f64]) -> f64 {
    let s = sorted(v);
    s.get(s.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The nearest-rank `p`th percentile of `v`; `NaN` when empty.
pub fn percentile(v: &[f64], p: f64) -> f64 {
    let s = sorted(v);
    if s.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * s.len() as f64).ceil() as usize;
    s[rank.clamp(1, s.len()) - 1]
}

/// The arithmetic mean of `v`; `NaN` when empty.
pub fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn sorted(v: &[f64]) -> Vec<f64> {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s
}

/// SplitMix64: a few lines, no dependency, the same offsets for the same seed.
#[derive(Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting at `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A multiple of `align` in `[0, limit]`.
    pub fn aligned_below(&mut self, limit: u64, align: u64) -> u64 {
        let slots = limit / align + 1;
        (self.next_u64() % slots) * align
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians_and_percentiles() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 3.0);
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert_eq!(percentile(&v, 100.0), 100.0);
        assert!(median(&[]).is_nan());
    }

    #[test]
    fn offsets_are_aligned_and_in_range() {
        let mut r = SplitMix64::new(7);
        for _ in 0..1000 {
            let o = r.aligned_below(1 << 20, 4096);
            assert_eq!(o % 4096, 0);
            assert!(o <= 1 << 20);
        }
    }

    #[test]
    fn cpu_time_is_read_on_linux() {
        let before = process_cpu_seconds();
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        assert!(process_cpu_seconds() > before);
    }
}
