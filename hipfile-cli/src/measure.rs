//! Clocks and statistics: wall time with the process CPU time spent meanwhile (in all, and per
//! kind of thread), medians and percentiles, and a small deterministic generator for random
//! offsets.

use std::collections::{BTreeMap, HashMap};
use std::sync::Barrier;
use std::time::Instant;

/// CPU time (user + system, all threads, to the nanosecond) this process has used, from
/// `CLOCK_PROCESS_CPUTIME_ID`: `/proc/self/stat` counts in 10 ms ticks, too coarse for a loop of
/// small reads.
pub fn process_cpu_seconds() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// CPU seconds each live thread of this process has used, by thread id, with the group the
/// thread is counted in: `caller` for the main thread, else its name without the trailing
/// number (`hipfile-io-3` -> `hipfile-io`); threads that never set a name (the GPU runtime's
/// helpers, for one) inherit the process name and are counted as `unnamed`. Read from
/// `/proc/self/task/*/schedstat` (nanoseconds on a CPU); empty where that is not readable.
pub fn thread_cpu_seconds() -> HashMap<u32, (String, f64)> {
    let pid = std::process::id();
    let process_name = std::fs::read_to_string("/proc/self/comm").unwrap_or_default();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return HashMap::new();
    };
    let mut out = HashMap::new();
    for task in tasks.flatten() {
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<u32>().ok())
        else {
            continue;
        };
        let dir = task.path();
        let Some(ns) = std::fs::read_to_string(dir.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        else {
            continue;
        };
        let name = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
        out.insert(
            tid,
            (
                thread_group(tid == pid, &name, &process_name),
                ns as f64 * 1e-9,
            ),
        );
    }
    out
}

/// The group a thread is counted in (see [`thread_cpu_seconds`]).
fn thread_group(main: bool, name: &str, process_name: &str) -> String {
    if main {
        return "caller".into();
    }
    if name.trim() == process_name.trim() {
        return "unnamed".into();
    }
    let stem = name
        .trim()
        .trim_end_matches(|c: char| c.is_ascii_digit())
        .trim_end_matches(['-', '_', ' ', ':']);
    if stem.is_empty() {
        "unnamed".into()
    } else {
        stem.into()
    }
}

/// A running measurement: wall clock, process CPU time and per-thread CPU time at its start.
#[derive(Debug)]
pub struct Span {
    wall: Instant,
    cpu: f64,
    threads: HashMap<u32, (String, f64)>,
}

/// What a finished [`Span`] saw.
#[derive(Clone, Debug)]
pub struct Timed {
    /// Wall seconds.
    pub seconds: f64,
    /// CPU seconds divided by wall seconds: how many cores were busy on average.
    pub cores: f64,
    /// The same, per group of threads (threads that ended during the span are not seen).
    pub cores_by_thread: BTreeMap<String, f64>,
}

impl Span {
    /// Start now.
    pub fn start() -> Span {
        let threads = thread_cpu_seconds();
        Span {
            cpu: process_cpu_seconds(),
            threads,
            wall: Instant::now(),
        }
    }

    /// Stop now.
    pub fn finish(self) -> Timed {
        let seconds = self.wall.elapsed().as_secs_f64().max(1e-9);
        let cores = ((process_cpu_seconds() - self.cpu) / seconds).max(0.0);
        let mut cores_by_thread = BTreeMap::new();
        for (tid, (group, now)) in thread_cpu_seconds() {
            let before = self.threads.get(&tid).map_or(0.0, |(_, s)| *s);
            *cores_by_thread.entry(group).or_insert(0.0) += ((now - before) / seconds).max(0.0);
        }
        Timed {
            seconds,
            cores,
            cores_by_thread,
        }
    }
}

/// Run `work` on each of `items`, one thread per item, started together: the threads are made
/// first and wait at a barrier, the clock starts, then they are let go; it stops when the last
/// one ends. Returns the time and the results in the order of `items`; the first error (or a
/// panic) fails the whole run.
pub fn together<T: Send, R: Send>(
    items: Vec<T>,
    work: impl Fn(T) -> Result<R, String> + Sync,
) -> Result<(Timed, Vec<R>), String> {
    let start = Barrier::new(items.len() + 1);
    let (timed, results) = std::thread::scope(|scope| {
        let workers: Vec<_> = items
            .into_iter()
            .map(|item| {
                let (start, work) = (&start, &work);
                scope.spawn(move || {
                    start.wait();
                    work(item)
                })
            })
            .collect();
        let span = Span::start();
        start.wait();
        let results: Vec<Result<R, String>> = workers
            .into_iter()
            .map(|w| w.join().unwrap_or_else(|_| Err("a worker panicked".into())))
            .collect();
        (span.finish(), results)
    });
    Ok((timed, results.into_iter().collect::<Result<_, _>>()?))
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
    fn threads_are_grouped_by_name_without_their_number() {
        assert_eq!(thread_group(true, "hipfile\n", "hipfile\n"), "caller");
        assert_eq!(
            thread_group(false, "hipfile-io-12\n", "hipfile\n"),
            "hipfile-io"
        );
        assert_eq!(thread_group(false, "hipfile\n", "hipfile\n"), "unnamed");
        assert_eq!(
            thread_group(false, "cuda-EvtHandlr\n", "hipfile\n"),
            "cuda-EvtHandlr"
        );
        assert_eq!(thread_group(false, "42\n", "hipfile\n"), "unnamed");
    }

    #[test]
    fn a_busy_named_thread_is_counted_in_its_group() {
        let span = Span::start();
        let spinner = std::thread::Builder::new()
            .name("spin-7".into())
            .spawn(|| {
                let start = Instant::now();
                let mut x = 0u64;
                while start.elapsed().as_millis() < 200 {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
                // Stay alive until the span ends, so the thread is still listed.
                std::thread::park_timeout(std::time::Duration::from_millis(300));
            })
            .expect("spawn");
        std::thread::sleep(std::time::Duration::from_millis(250));
        let t = span.finish();
        spinner.thread().unpark();
        spinner.join().expect("join");
        // How much of a core it got depends on the machine's load: that it is counted, under its
        // group's name, is what this checks.
        let spin = t.cores_by_thread.get("spin").copied().unwrap_or(0.0);
        assert!(spin > 0.0, "{:?}", t.cores_by_thread);
    }

    #[test]
    fn work_started_together_is_timed_from_the_start_to_the_last_end() {
        let (t, out) = together(vec![30u64, 60, 10], |ms| {
            std::thread::sleep(std::time::Duration::from_millis(ms));
            Ok(ms * 2)
        })
        .unwrap();
        assert_eq!(out, [60, 120, 20]);
        assert!(t.seconds >= 0.06 && t.seconds < 5.0, "{}", t.seconds);
        let failed = together(vec![1, 2, 3], |i| {
            if i == 2 {
                Err(format!("item {i}"))
            } else {
                Ok(i)
            }
        });
        assert_eq!(failed.unwrap_err(), "item 2");
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
