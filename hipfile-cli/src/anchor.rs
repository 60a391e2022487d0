//! The KvikIO anchor: runs `kvikio_anchor.py` as a subprocess between our own repetitions,
//! parses its JSON lines, and keeps its figures per (operation, cache, threads) so the report can
//! put the best of its thread sweep next to ours.
//!
//! Both sides are asked for the same work: the script reads the bytes we read (`--size`), with
//! the task size of our staged engine's chunk where the staged engine serves our reads
//! (`--task-size`), makes as many small reads per size as we do (`--latency-ops`), and writes
//! (`--write`) into the scratch file our write phase uses, left in the same state ours starts
//! from. One process runs per thread count of the sweep, so every process's write meets that
//! state (within one process, a later write would meet the dirty pages of the one before).
//! Each process's first hot read includes KvikIO's set-up in that process; it is left out of
//! the figures when the process made a second one, so the anchor has one hot sample per thread
//! count and repetition, as we have one per repetition.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::measure::median;

/// One line the anchor printed.
#[derive(Clone, Debug, PartialEq)]
pub enum AnchorLine {
    /// A whole-file read into GPU memory.
    Read {
        /// KvikIO's thread-pool size.
        threads: usize,
        /// `hot` or `cold`.
        cache: String,
        /// Throughput.
        gbps: f64,
        /// Cores busy during the read (process CPU time / wall time), where printed.
        cores: Option<f64>,
        /// KvikIO's task size in bytes, where printed.
        task_size: Option<u64>,
        /// Whether the script's check of the read bytes passed, where printed.
        verified: Option<bool>,
    },
    /// A whole-buffer write to a file (page cache, no fsync).
    Write {
        /// KvikIO's thread-pool size.
        threads: usize,
        /// Throughput.
        gbps: f64,
        /// Cores busy during the write, where printed.
        cores: Option<f64>,
    },
    /// Random reads of one size, one at a time.
    Latency {
        /// Bytes per read.
        bytes: u64,
        /// Mean microseconds per read.
        us_per_op: f64,
        /// Median microseconds per read, where printed.
        us_median: Option<f64>,
        /// 99th percentile microseconds per read, where printed.
        us_p99: Option<f64>,
    },
}

/// Parse the anchor's output: every line that is a JSON object from `"tool": "kvikio"` with a
/// known `op`; anything else (warnings, blank lines) is returned apart so the report can show it.
pub fn parse_output(text: &str) -> (Vec<AnchorLine>, Vec<String>) {
    let mut lines = Vec::new();
    let mut other = Vec::new();
    for raw in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match parse_line(raw) {
            Some(line) => lines.push(line),
            None => other.push(raw.to_string()),
        }
    }
    (lines, other)
}

fn parse_line(raw: &str) -> Option<AnchorLine> {
    let v: Value = serde_json::from_str(raw).ok()?;
    if v.get("tool")?.as_str()? != "kvikio" {
        return None;
    }
    let threads = || v.get("threads")?.as_u64().map(|t| t as usize);
    let number = |name: &str| v.get(name).and_then(Value::as_f64);
    match v.get("op")?.as_str()? {
        "read" => Some(AnchorLine::Read {
            threads: threads()?,
            cache: v.get("cache")?.as_str()?.to_string(),
            gbps: number("gbps")?,
            cores: number("cores"),
            task_size: v.get("task_size").and_then(Value::as_u64),
            verified: v.get("verified").and_then(Value::as_bool),
        }),
        "write" => Some(AnchorLine::Write {
            threads: threads()?,
            gbps: number("gbps")?,
            cores: number("cores"),
        }),
        "read_latency" => Some(AnchorLine::Latency {
            bytes: v.get("bytes")?.as_u64()?,
            us_per_op: number("us_per_op")?,
            us_median: number("us_median"),
            us_p99: number("us_p99"),
        }),
        _ => None,
    }
}

/// How to run the anchor.
#[derive(Clone, Debug)]
pub struct AnchorRunner {
    /// `kvikio_anchor.py`.
    pub script: PathBuf,
    /// The interpreter (`python3`).
    pub python: String,
}

/// What one anchor process is asked for.
#[derive(Clone, Copy, Debug)]
pub struct AnchorAsk<'a> {
    /// The file to read.
    pub file: &'a Path,
    /// KvikIO's thread-pool size.
    pub threads: usize,
    /// Bytes to read from the start of the file (ours).
    pub size: u64,
    /// KvikIO's task size in bytes; `None` leaves KvikIO's default.
    pub task_size: Option<u64>,
    /// Cold reads too (the script drops caches itself; only as root).
    pub cold: bool,
    /// Small random reads too, this many per size (ours).
    pub latency_ops: Option<usize>,
    /// Write the buffer to this file too (an existing file, overwritten in place).
    pub write: Option<&'a Path>,
}

impl AnchorRunner {
    /// The command line of one anchor process.
    pub fn command(&self, ask: &AnchorAsk<'_>) -> Command {
        let mut cmd = Command::new(&self.python);
        cmd.arg(&self.script)
            .arg(ask.file)
            .arg("--threads")
            .arg(ask.threads.to_string())
            .arg("--size")
            .arg(ask.size.to_string());
        if let Some(bytes) = ask.task_size {
            cmd.arg("--task-size").arg(bytes.to_string());
        }
        if ask.cold {
            cmd.arg("--cold");
        }
        if let Some(ops) = ask.latency_ops {
            cmd.arg("--small").arg("--latency-ops").arg(ops.to_string());
        }
        if let Some(out) = ask.write {
            cmd.arg("--write").arg(out);
        }
        cmd
    }

    /// Run the script once and parse what it printed.
    pub fn run(&self, ask: &AnchorAsk<'_>) -> Result<Vec<AnchorLine>, String> {
        let out = self
            .command(ask)
            .output()
            .map_err(|e| format!("{} {}: {e}", self.python, self.script.display()))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
            return Err(format!(
                "{} exited with {}: {}",
                self.script.display(),
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            ));
        }
        let (lines, _) = parse_output(&stdout);
        if lines.is_empty() {
            return Err(format!("{} printed no measurement", self.script.display()));
        }
        Ok(lines)
    }
}

/// What a figure's value is, and so what of ours it is divided by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Basis {
    /// Median GB/s over the samples.
    MedianGbps,
    /// Median microseconds per read (the median of each run's median).
    MedianUs,
    /// Mean microseconds per read (an anchor that prints no median).
    MeanUs,
}

/// One sample of the anchor: a figure with what the script said about it.
#[derive(Clone, Debug, PartialEq)]
struct Sample {
    value: f64,
    cores: Option<f64>,
    verified: Option<bool>,
    task_size: Option<u64>,
    median_us: Option<f64>,
    p99_us: Option<f64>,
}

impl Sample {
    fn plain(value: f64) -> Self {
        Sample {
            value,
            cores: None,
            verified: None,
            task_size: None,
            median_us: None,
            p99_us: None,
        }
    }
}

/// The anchor's figures over every repetition.
#[derive(Debug, Default)]
pub struct AnchorTally {
    reads: BTreeMap<(String, usize), Vec<Sample>>,
    writes: BTreeMap<usize, Vec<Sample>>,
    latency: BTreeMap<u64, (usize, Vec<Sample>)>,
    set_up_samples: usize,
}

/// The anchor's figure for one of our measurements.
#[derive(Clone, Debug, PartialEq)]
pub struct AnchorFigure {
    /// GB/s or microseconds per read, as `basis` says.
    pub value: f64,
    /// What `value` is.
    pub basis: Basis,
    /// The thread count that gave it (the best of the sweep; for latency, the pool size of the
    /// process that made the small reads).
    pub threads: Option<usize>,
    /// Every sample behind `value` (GB/s, or each run's median or mean microseconds).
    pub samples: Vec<f64>,
    /// The median of the cores the samples kept busy, where the script printed them.
    pub cores: Option<f64>,
    /// Latency: the median of each run's 99th percentile, where printed.
    pub p99_us: Option<f64>,
    /// Samples the script checked the bytes of (it compares 16 windows of 4 KiB per read).
    pub checks: usize,
    /// Of those, the samples whose check failed.
    pub check_failures: usize,
    /// KvikIO's task size, where printed.
    pub task_size: Option<u64>,
    /// For a cold read: why it is not one (see [`crate::report::not_cold`]); no ratio is taken
    /// against it then.
    pub not_cold: Option<String>,
}

impl AnchorFigure {
    fn from_samples(samples: &[Sample], threads: Option<usize>, basis: Basis) -> AnchorFigure {
        let cores: Vec<f64> = samples.iter().filter_map(|s| s.cores).collect();
        let p99: Vec<f64> = samples.iter().filter_map(|s| s.p99_us).collect();
        let values: Vec<f64> = samples
            .iter()
            .map(|s| match basis {
                Basis::MedianUs => s.median_us.unwrap_or(s.value),
                Basis::MedianGbps | Basis::MeanUs => s.value,
            })
            .collect();
        AnchorFigure {
            value: median(&values),
            basis,
            threads,
            samples: values,
            cores: (!cores.is_empty()).then(|| median(&cores)),
            p99_us: (!p99.is_empty()).then(|| median(&p99)),
            checks: samples.iter().filter(|s| s.verified.is_some()).count(),
            check_failures: samples.iter().filter(|s| s.verified == Some(false)).count(),
            task_size: samples.iter().find_map(|s| s.task_size),
            not_cold: None,
        }
    }
}

impl AnchorTally {
    /// Add the lines of one anchor process that ran with `threads` threads. A process's first
    /// hot read of a thread count includes KvikIO's set-up there; it is left out when the
    /// process made another hot read of that thread count.
    pub fn add(&mut self, threads: usize, lines: &[AnchorLine]) {
        let mut hot_reads: BTreeMap<usize, usize> = BTreeMap::new();
        for line in lines {
            if let AnchorLine::Read { threads, cache, .. } = line {
                if cache == "hot" {
                    *hot_reads.entry(*threads).or_default() += 1;
                }
            }
        }
        let mut first_hot_seen: BTreeMap<usize, bool> = BTreeMap::new();
        for line in lines {
            match line {
                AnchorLine::Read {
                    threads,
                    cache,
                    gbps,
                    cores,
                    task_size,
                    verified,
                } => {
                    if cache == "hot"
                        && hot_reads.get(threads).copied().unwrap_or(0) > 1
                        && !first_hot_seen.insert(*threads, true).unwrap_or(false)
                    {
                        self.set_up_samples += 1;
                        continue;
                    }
                    self.reads
                        .entry((cache.clone(), *threads))
                        .or_default()
                        .push(Sample {
                            cores: *cores,
                            verified: *verified,
                            task_size: *task_size,
                            ..Sample::plain(*gbps)
                        });
                }
                AnchorLine::Write {
                    threads,
                    gbps,
                    cores,
                } => self.writes.entry(*threads).or_default().push(Sample {
                    cores: *cores,
                    ..Sample::plain(*gbps)
                }),
                AnchorLine::Latency {
                    bytes,
                    us_per_op,
                    us_median,
                    us_p99,
                } => {
                    let entry = self.latency.entry(*bytes).or_insert((threads, Vec::new()));
                    entry.0 = threads;
                    entry.1.push(Sample {
                        median_us: *us_median,
                        p99_us: *us_p99,
                        ..Sample::plain(*us_per_op)
                    });
                }
            }
        }
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.reads.is_empty() && self.writes.is_empty() && self.latency.is_empty()
    }

    /// Hot reads left out because they include KvikIO's set-up in their process.
    pub fn set_up_samples(&self) -> usize {
        self.set_up_samples
    }

    /// Per thread count, the median read throughput for `cache` (`hot` or `cold`).
    pub fn reads_by_threads(&self, cache: &str) -> Vec<AnchorFigure> {
        self.reads
            .iter()
            .filter(|((c, _), _)| c == cache)
            .map(|((_, t), v)| AnchorFigure::from_samples(v, Some(*t), Basis::MedianGbps))
            .collect()
    }

    /// The best hand-tuned read: the thread count whose median is highest.
    pub fn best_read(&self, cache: &str) -> Option<AnchorFigure> {
        best(self.reads_by_threads(cache))
    }

    /// The best write over the sweep.
    pub fn best_write(&self) -> Option<AnchorFigure> {
        best(
            self.writes
                .iter()
                .map(|(t, v)| AnchorFigure::from_samples(v, Some(*t), Basis::MedianGbps))
                .collect(),
        )
    }

    /// The time per read of `bytes`: the median of each run's median where the script printed
    /// medians, else the median of each run's mean.
    pub fn latency(&self, bytes: u64) -> Option<AnchorFigure> {
        let (threads, samples) = self.latency.get(&bytes)?;
        let basis = if samples.iter().all(|s| s.median_us.is_some()) {
            Basis::MedianUs
        } else {
            Basis::MeanUs
        };
        Some(AnchorFigure::from_samples(samples, Some(*threads), basis))
    }
}

fn best(figures: Vec<AnchorFigure>) -> Option<AnchorFigure> {
    figures
        .into_iter()
        .max_by(|a, b| a.value.total_cmp(&b.value))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchor_lines_parse_and_noise_is_kept_apart() {
        let text = r#"
{"tool": "kvikio", "op": "read", "threads": 8, "cache": "hot", "bytes": 100, "gbps": 40.5}
a warning from somewhere
{"tool": "kvikio", "op": "write", "threads": 1, "bytes": 100, "gbps": 1.8}
{"tool": "kvikio", "op": "read_latency", "bytes": 4096, "us_per_op": 65.2}
{"tool": "other", "op": "read"}
"#;
        let (lines, other) = parse_output(text);
        assert_eq!(
            lines,
            vec![
                AnchorLine::Read {
                    threads: 8,
                    cache: "hot".into(),
                    gbps: 40.5,
                    cores: None,
                    task_size: None,
                    verified: None,
                },
                AnchorLine::Write {
                    threads: 1,
                    gbps: 1.8,
                    cores: None,
                },
                AnchorLine::Latency {
                    bytes: 4096,
                    us_per_op: 65.2,
                    us_median: None,
                    us_p99: None,
                },
            ]
        );
        assert_eq!(other.len(), 2);
    }

    /// Lines exactly as `kvikio_anchor.py` prints them now: cores, task size, the check, and
    /// the median and p99 of the small reads.
    #[test]
    fn cores_checks_and_p99_are_parsed() {
        let text = r#"
{"tool": "kvikio", "op": "read", "threads": 16, "cache": "hot", "task_size": 4194304, "bytes": 8589934592, "gbps": 44.7, "cores": 3.21, "verified": true}
{"tool": "kvikio", "op": "read", "threads": 16, "cache": "cold", "task_size": 4194304, "bytes": 8589934592, "gbps": 1.4, "cores": 0.5, "verified": false}
{"tool": "kvikio", "op": "write", "threads": 16, "bytes": 8589934592, "gbps": 1.8, "cores": 1.05}
{"tool": "kvikio", "op": "read_latency", "bytes": 65536, "us_per_op": 199.0, "us_median": 180.5, "us_p99": 410.25}
"#;
        let (lines, other) = parse_output(text);
        assert!(other.is_empty(), "{other:?}");
        assert_eq!(
            lines[0],
            AnchorLine::Read {
                threads: 16,
                cache: "hot".into(),
                gbps: 44.7,
                cores: Some(3.21),
                task_size: Some(4 << 20),
                verified: Some(true),
            }
        );
        assert!(matches!(
            lines[1],
            AnchorLine::Read {
                verified: Some(false),
                ..
            }
        ));
        assert_eq!(
            lines[2],
            AnchorLine::Write {
                threads: 16,
                gbps: 1.8,
                cores: Some(1.05),
            }
        );
        assert_eq!(
            lines[3],
            AnchorLine::Latency {
                bytes: 65536,
                us_per_op: 199.0,
                us_median: Some(180.5),
                us_p99: Some(410.25),
            }
        );

        let mut tally = AnchorTally::default();
        tally.add(16, &lines);
        let cold = tally.best_read("cold").unwrap();
        assert_eq!((cold.checks, cold.check_failures), (1, 1));
        assert_eq!(cold.cores, Some(0.5));
        assert_eq!(cold.task_size, Some(4 << 20));
        let lat = tally.latency(65536).unwrap();
        assert_eq!(lat.basis, Basis::MedianUs);
        assert_eq!(lat.value, 180.5);
        assert_eq!(lat.p99_us, Some(410.25));
        assert_eq!(lat.threads, Some(16));
        assert_eq!(tally.best_write().unwrap().cores, Some(1.05));
    }

    #[test]
    fn latency_without_medians_falls_back_to_means() {
        let mut tally = AnchorTally::default();
        let line = |us| AnchorLine::Latency {
            bytes: 4096,
            us_per_op: us,
            us_median: None,
            us_p99: None,
        };
        tally.add(1, &[line(60.0)]);
        tally.add(1, &[line(70.0)]);
        tally.add(1, &[line(65.0)]);
        let lat = tally.latency(4096).unwrap();
        assert_eq!(lat.basis, Basis::MeanUs);
        assert_eq!(lat.value, 65.0);
        assert_eq!(lat.p99_us, None);
    }

    fn read(threads: usize, cache: &str, gbps: f64) -> AnchorLine {
        AnchorLine::Read {
            threads,
            cache: cache.into(),
            gbps,
            cores: None,
            task_size: None,
            verified: Some(true),
        }
    }

    #[test]
    fn the_best_thread_count_wins_by_its_median() {
        let mut tally = AnchorTally::default();
        // 16 threads has one outlier high sample but the better median belongs to 8.
        tally.add(8, &[read(8, "hot", 40.0)]);
        tally.add(16, &[read(16, "hot", 60.0)]);
        tally.add(8, &[read(8, "hot", 41.0)]);
        tally.add(16, &[read(16, "hot", 30.0)]);
        tally.add(8, &[read(8, "hot", 42.0)]);
        tally.add(16, &[read(16, "hot", 31.0)]);
        let best = tally.best_read("hot").unwrap();
        assert_eq!(best.threads, Some(8));
        assert_eq!(best.value, 41.0);
        assert_eq!(best.checks, 3);
        assert!(tally.best_read("cold").is_none());
    }

    #[test]
    fn the_first_hot_read_of_a_process_is_its_set_up_and_left_out() {
        let mut tally = AnchorTally::default();
        // As the script prints with --cold: cold, then two hot reads.
        tally.add(
            4,
            &[
                read(4, "cold", 1.0),
                read(4, "hot", 5.0),
                read(4, "hot", 9.0),
            ],
        );
        tally.add(4, &[read(4, "hot", 6.0), read(4, "hot", 10.0)]);
        let hot = tally.best_read("hot").unwrap();
        assert_eq!(hot.samples, vec![9.0, 10.0]);
        assert_eq!(tally.set_up_samples(), 2);
        assert_eq!(tally.best_read("cold").unwrap().samples, vec![1.0]);
        // A lone hot read is kept: there is nothing better to take.
        let mut lone = AnchorTally::default();
        lone.add(1, &[read(1, "hot", 3.0)]);
        assert_eq!(lone.best_read("hot").unwrap().samples, vec![3.0]);
        assert_eq!(lone.set_up_samples(), 0);
    }

    fn args_of(cmd: &Command) -> Vec<String> {
        cmd.get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn the_command_asks_for_our_size_task_size_ops_and_write_target() {
        let runner = AnchorRunner {
            script: "kvikio_anchor.py".into(),
            python: "python3".into(),
        };
        let full = AnchorAsk {
            file: Path::new("/data/f.dat"),
            threads: 16,
            size: 8 << 30,
            task_size: Some(4 << 20),
            cold: true,
            latency_ops: Some(2000),
            write: Some(Path::new("/data/scratch.dat")),
        };
        let cmd = runner.command(&full);
        assert_eq!(cmd.get_program(), "python3");
        assert_eq!(
            args_of(&cmd),
            [
                "kvikio_anchor.py",
                "/data/f.dat",
                "--threads",
                "16",
                "--size",
                "8589934592",
                "--task-size",
                "4194304",
                "--cold",
                "--small",
                "--latency-ops",
                "2000",
                "--write",
                "/data/scratch.dat",
            ]
        );
        let bare = AnchorAsk {
            task_size: None,
            cold: false,
            latency_ops: None,
            write: None,
            threads: 1,
            size: 4096,
            ..full
        };
        assert_eq!(
            args_of(&runner.command(&bare)),
            [
                "kvikio_anchor.py",
                "/data/f.dat",
                "--threads",
                "1",
                "--size",
                "4096"
            ]
        );
    }
}
