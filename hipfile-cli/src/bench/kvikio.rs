//! The KvikIO anchor (`--kvikio`): `kvikio_anchor.py` run between our repetitions, one process
//! per thread count of its sweep, and its figures put next to ours (its best) and in rows of
//! their own (the whole sweep). Its cold reads start as ours do, with nothing of the file pinned
//! by this process.

use std::collections::BTreeSet;

use hipfile::IoPath;

use super::latency::LATENCY_SIZES;
use super::options::BenchArgs;
use super::rig::{ColdStarts, Rig};
use super::write::WriteTarget;
use crate::anchor::{AnchorAsk, AnchorFigure, AnchorRunner, AnchorTally};
use crate::report::{not_cold, Figure, Measurement};
use crate::verify::Checked;

/// The key under which the anchor's cold starts are noted in [`ColdStarts`].
const ANCHOR_COLD: &str = "kvikio cold";

/// The anchor of a run, when `--kvikio` names its script.
pub(super) struct Anchor {
    runner: Option<AnchorRunner>,
    /// The thread sweep, each count once.
    pub(super) threads: Vec<usize>,
    /// The process of the sweep that makes KvikIO's small reads: the one closest to our one
    /// thread.
    small_threads: Option<usize>,
    pub(super) task_size: Option<u64>,
    pub(super) tally: AnchorTally,
    /// Cleared when the script fails: it is not run again.
    alive: bool,
}

impl Anchor {
    /// The anchor `args` ask for, with KvikIO's task size defaulting to our staged engine's
    /// chunk when that engine serves our reads.
    pub(super) fn prepare(args: &BenchArgs, rig: &Rig<'_>) -> Anchor {
        let runner = args.kvikio.as_ref().map(|script| AnchorRunner {
            script: script.clone(),
            python: args.python.clone(),
        });
        let threads: Vec<usize> = {
            let mut seen = BTreeSet::new();
            args.kvikio_threads
                .iter()
                .copied()
                .filter(|t| seen.insert(*t))
                .collect()
        };
        // KvikIO's small reads run in one process of the sweep: the one closest to our one thread.
        let small_threads = threads.iter().copied().min();
        // The staged engine serves the reads unless a direct backend comes first and has a P2P
        // driver to serve them with.
        let paths = rig.driver.backend_paths();
        let staged_serves = paths.iter().any(|(_, p)| *p == IoPath::Staged)
            && !(paths.first().is_some_and(|(_, p)| *p == IoPath::Direct)
                && rig.gpu.p2p().is_some());
        let task_size = args
            .kvikio_task_size
            .map(|b| b as u64)
            .or_else(|| staged_serves.then(|| rig.driver.core().settings().chunk_bytes() as u64));
        let alive = runner.is_some();
        Anchor {
            runner,
            threads,
            small_threads,
            task_size,
            tally: AnchorTally::default(),
            alive,
        }
    }

    /// One repetition, while the script has not failed: a process per thread count. `cold`:
    /// the cold phase runs, so the anchor reads cold too; `latency_ops`: the latency phase runs
    /// with so many reads per size.
    pub(super) fn run(
        &mut self,
        rig: &mut Rig<'_>,
        target: Option<&WriteTarget>,
        cold: bool,
        latency_ops: Option<usize>,
    ) -> Result<(), String> {
        let Some(runner) = self.runner.as_ref().filter(|_| self.alive) else {
            return Ok(());
        };
        rig.step("KvikIO anchor");
        let anchor_cold = rig.cold_ok && cold;
        if anchor_cold {
            // KvikIO's cold read drops the caches itself; what this process keeps pinned
            // would stay cached through that and be read at page-cache speed.
            let pinned = rig.release_pins()?;
            rig.cold_starts.note(ANCHOR_COLD, pinned);
        }
        rig.make_hot()?;
        for &th in &self.threads {
            if let Some(target) = target {
                target.scratch.settle()?;
            }
            let ask = AnchorAsk {
                file: &rig.path,
                threads: th,
                size: rig.size as u64,
                task_size: self.task_size,
                cold: anchor_cold,
                latency_ops: latency_ops.filter(|_| Some(th) == self.small_threads),
                write: target.map(|t| t.scratch.path()),
            };
            match runner.run(&ask) {
                Ok(lines) => self.tally.add(th, &lines),
                Err(why) => {
                    rig.notes
                        .push(format!("KvikIO anchor failed, not run again: {why}"));
                    self.alive = false;
                    break;
                }
            }
        }
        rig.progress.inc(1);
        Ok(())
    }

    /// Once the run is measured: the anchor's figures into `measurements`, its cold reads
    /// judged against the O_DIRECT read ceiling (`read_ceiling`), and what the notes say of it.
    pub(super) fn attach(
        &self,
        measurements: &mut Vec<Measurement>,
        size: usize,
        read_ceiling: Option<(&str, f64)>,
        cold_starts: &ColdStarts,
        notes: &mut Vec<String>,
    ) {
        if self.tally.is_empty() {
            return;
        }
        let tally = &self.tally;
        let anchor_cold = AnchorCold {
            ceiling: read_ceiling,
            pinned_at_start: cold_starts.get(ANCHOR_COLD),
        };
        attach_anchor(measurements, tally, size, &anchor_cold);
        if tally.set_up_samples() > 0 {
            notes.push(format!(
                "KvikIO: the first hot read of each of its processes ({} in all) includes its set-up and is left out",
                tally.set_up_samples()
            ));
        }
        let failed: Vec<&str> = measurements
            .iter()
            .filter(|m| m.key.starts_with("kvikio_"))
            .filter(|m| m.checked.as_ref().is_some_and(|c| c.failures > 0))
            .map(|m| m.key.as_str())
            .collect();
        if !failed.is_empty() {
            notes.push(format!(
                "KvikIO's own byte check failed in {}",
                failed.join(", ")
            ));
        }
    }
}

/// What decides whether the anchor's cold reads were cold: the run's O_DIRECT ceiling (key and
/// GB/s) and the page cache this process kept pinned when the anchor started them.
struct AnchorCold<'a> {
    ceiling: Option<(&'a str, f64)>,
    pinned_at_start: Option<usize>,
}

impl AnchorCold<'_> {
    fn judge(&self, figure: &mut AnchorFigure) {
        figure.not_cold = not_cold(
            figure.value,
            "GB/s",
            self.ceiling,
            self.pinned_at_start.unwrap_or(0),
        );
    }
}

/// The anchor's cold read next to ours: the best of its thread sweep among the figures that
/// were cold, or, when none was, the best, marked.
fn best_cold_anchor(tally: &AnchorTally, cold: &AnchorCold<'_>) -> Option<AnchorFigure> {
    let mut figures = tally.reads_by_threads("cold");
    figures.iter_mut().for_each(|f| cold.judge(f));
    let best = |figures: Vec<AnchorFigure>| {
        figures
            .into_iter()
            .max_by(|a, b| a.value.total_cmp(&b.value))
    };
    let (cold_ones, others): (Vec<_>, Vec<_>) =
        figures.into_iter().partition(|f| f.not_cold.is_none());
    best(cold_ones).or_else(|| best(others))
}

/// Put the anchor's best figure next to ours, and its whole thread sweep in rows of its own
/// (with the checks the script made of its reads, and for cold reads whether they were cold).
fn attach_anchor(
    rows: &mut Vec<Measurement>,
    tally: &AnchorTally,
    size: usize,
    cold: &AnchorCold<'_>,
) {
    for m in rows.iter_mut() {
        m.anchor = match m.key.as_str() {
            "read_hot" => tally.best_read("hot"),
            "read_cold" => best_cold_anchor(tally, cold),
            "write" => tally.best_write(),
            k => LATENCY_SIZES
                .iter()
                .find(|(_, name)| k == format!("latency_{name}"))
                .and_then(|(bytes, _)| tally.latency(*bytes as u64)),
        };
    }
    for cache in ["hot", "cold"] {
        for mut f in tally.reads_by_threads(cache) {
            let t = f.threads.unwrap_or(0);
            let cold_start_pinned = (cache == "cold").then_some(cold.pinned_at_start).flatten();
            if cache == "cold" {
                cold.judge(&mut f);
            }
            let tasks = f
                .task_size
                .map_or_else(String::new, |b| format!(", {} KiB tasks", b >> 10));
            rows.push(Measurement {
                key: format!("kvikio_read_{cache}_t{t}"),
                label: format!("KvikIO read, {cache}, {t} threads{tasks}"),
                threads: t,
                bytes: size as u64,
                cores: f.cores.into_iter().collect(),
                cores_by_thread: Vec::new(),
                anchor: None,
                checked: (f.checks > 0).then(|| Checked {
                    checks: f.checks,
                    failures: f.check_failures,
                    bytes: None,
                    first_failure: (f.check_failures > 0)
                        .then(|| "KvikIO's check of 16 windows of 4 KiB failed".to_string()),
                }),
                queue_depth: None,
                versus: None,
                versus_also: Vec::new(),
                cold_start_pinned,
                not_cold: f.not_cold,
                figure: Figure::Throughput(f.samples),
            });
        }
    }
}
