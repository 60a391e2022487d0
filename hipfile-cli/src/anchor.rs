//! The KvikIO anchor: runs `kvikio_anchor.py` as a subprocess between our own repetitions,
//! parses its JSON lines, and keeps its figures per (operation, cache, threads) so the report can
//! put the best of its thread sweep next to ours.

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
    },
    /// A whole-buffer write to a file (page cache, no fsync).
    Write {
        /// KvikIO's thread-pool size.
        threads: usize,
        /// Throughput.
        gbps: f64,
    },
    /// Random reads of one size, one at a time: the mean time per read.
    Latency {
        /// Bytes per read.
        bytes: u64,
        /// Mean microseconds per read.
        us_per_op: f64,
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
    match v.get("op")?.as_str()? {
        "read" => Some(AnchorLine::Read {
            threads: threads()?,
            cache: v.get("cache")?.as_str()?.to_string(),
            gbps: v.get("gbps")?.as_f64()?,
        }),
        "write" => Some(AnchorLine::Write {
            threads: threads()?,
            gbps: v.get("gbps")?.as_f64()?,
        }),
        "read_latency" => Some(AnchorLine::Latency {
            bytes: v.get("bytes")?.as_u64()?,
            us_per_op: v.get("us_per_op")?.as_f64()?,
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
    /// The thread sweep.
    pub threads: Vec<usize>,
}

/// What one anchor run asks for.
#[derive(Clone, Copy, Debug)]
pub struct AnchorAsk<'a> {
    /// The file to read.
    pub file: &'a Path,
    /// Cold reads too (the script drops caches itself; only as root).
    pub cold: bool,
    /// Small random reads too.
    pub small: bool,
    /// Write the buffer to this file too.
    pub write: Option<&'a Path>,
}

impl AnchorRunner {
    /// Run the script once and parse what it printed.
    pub fn run(&self, ask: AnchorAsk<'_>) -> Result<Vec<AnchorLine>, String> {
        let sweep: Vec<String> = self.threads.iter().map(usize::to_string).collect();
        let mut cmd = Command::new(&self.python);
        cmd.arg(&self.script)
            .arg(ask.file)
            .arg("--threads")
            .arg(sweep.join(","));
        if ask.cold {
            cmd.arg("--cold");
        }
        if ask.small {
            cmd.arg("--small");
        }
        if let Some(out) = ask.write {
            cmd.arg("--write").arg(out);
        }
        let out = cmd
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

/// The anchor's figures over every repetition.
#[derive(Debug, Default)]
pub struct AnchorTally {
    reads: BTreeMap<(String, usize), Vec<f64>>,
    writes: BTreeMap<usize, Vec<f64>>,
    latency: BTreeMap<u64, Vec<f64>>,
}

/// The anchor's figure for one of our measurements.
#[derive(Clone, Debug, PartialEq)]
pub struct AnchorFigure {
    /// The median over repetitions (GB/s, or mean microseconds per read).
    pub value: f64,
    /// The thread count that gave it (the best of the sweep); none for latency.
    pub threads: Option<usize>,
    /// Every sample behind `value`.
    pub samples: Vec<f64>,
}

impl AnchorTally {
    /// Add one run's lines.
    pub fn add(&mut self, lines: &[AnchorLine]) {
        for line in lines {
            match line {
                AnchorLine::Read {
                    threads,
                    cache,
                    gbps,
                } => self
                    .reads
                    .entry((cache.clone(), *threads))
                    .or_default()
                    .push(*gbps),
                AnchorLine::Write { threads, gbps } => {
                    self.writes.entry(*threads).or_default().push(*gbps)
                }
                AnchorLine::Latency { bytes, us_per_op } => {
                    self.latency.entry(*bytes).or_default().push(*us_per_op)
                }
            }
        }
    }

    /// Whether nothing was added.
    pub fn is_empty(&self) -> bool {
        self.reads.is_empty() && self.writes.is_empty() && self.latency.is_empty()
    }

    /// Per thread count, the median read throughput for `cache` (`hot` or `cold`).
    pub fn reads_by_threads(&self, cache: &str) -> Vec<AnchorFigure> {
        self.reads
            .iter()
            .filter(|((c, _), _)| c == cache)
            .map(|((_, t), v)| AnchorFigure {
                value: median(v),
                threads: Some(*t),
                samples: v.clone(),
            })
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
                .map(|(t, v)| AnchorFigure {
                    value: median(v),
                    threads: Some(*t),
                    samples: v.clone(),
                })
                .collect(),
        )
    }

    /// The median of the mean time per read of `bytes`.
    pub fn latency(&self, bytes: u64) -> Option<AnchorFigure> {
        self.latency.get(&bytes).map(|v| AnchorFigure {
            value: median(v),
            threads: Some(1),
            samples: v.clone(),
        })
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
                    gbps: 40.5
                },
                AnchorLine::Write {
                    threads: 1,
                    gbps: 1.8
                },
                AnchorLine::Latency {
                    bytes: 4096,
                    us_per_op: 65.2
                },
            ]
        );
        assert_eq!(other.len(), 2);
    }

    #[test]
    fn the_best_thread_count_wins_by_its_median() {
        let mut tally = AnchorTally::default();
        let read = |threads, gbps| AnchorLine::Read {
            threads,
            cache: "hot".into(),
            gbps,
        };
        // 16 threads has one outlier high sample but the better median belongs to 8.
        tally.add(&[read(8, 40.0), read(16, 60.0)]);
        tally.add(&[read(8, 41.0), read(16, 30.0)]);
        tally.add(&[read(8, 42.0), read(16, 31.0)]);
        let best = tally.best_read("hot").unwrap();
        assert_eq!(best.threads, Some(8));
        assert_eq!(best.value, 41.0);
        assert!(tally.best_read("cold").is_none());
    }
}
