//! Measurements and how they are shown: one JSON object per line, or tables a 120-column
//! terminal holds.
//!
//! The tables name each row by its key (`read_hot`, `batch_4k_qd32`), which is short and stable;
//! a legend under them says what each kind of key measures, and the full label of every row is
//! in `--json`. A row read against another of the same run names that row and the ratio; the
//! anchor's figures get a table of their own.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::anchor::{AnchorFigure, Basis};
use crate::measure::{mean, median, percentile};
use crate::verify::Checked;

/// What a measurement measured.
#[derive(Clone, Debug)]
pub enum Figure {
    /// GB/s of each repetition.
    Throughput(Vec<f64>),
    /// Microseconds of each operation, over all repetitions.
    Latency(Vec<f64>),
    /// Operations per second of each repetition, and the microseconds of each operation (from
    /// its submission to its completion), over all repetitions.
    Iops {
        /// Operations per second, per repetition.
        iops: Vec<f64>,
        /// Microseconds per operation.
        latency_us: Vec<f64>,
    },
    /// Milliseconds of each repetition (a run's wall time, where the time itself is the figure).
    Duration(Vec<f64>),
}

impl Figure {
    /// The number a row is compared by: median GB/s, median IOPS, or median microseconds.
    pub fn headline(&self) -> f64 {
        match self {
            Figure::Throughput(v) | Figure::Latency(v) | Figure::Duration(v) => median(v),
            Figure::Iops { iops, .. } => median(iops),
        }
    }

    fn unit(&self) -> &'static str {
        match self {
            Figure::Throughput(_) => "GB/s",
            Figure::Latency(_) => "us",
            Figure::Iops { .. } => "IOPS",
            Figure::Duration(_) => "ms",
        }
    }

    fn same_kind(&self, other: &Figure) -> bool {
        std::mem::discriminant(self) == std::mem::discriminant(other)
    }
}

/// Another measurement of the same run that a row is read against (the synchronous reads next
/// to a batch, the machine's ceiling next to ours).
#[derive(Clone, Debug, PartialEq)]
pub struct Versus {
    /// Its key.
    pub key: String,
    /// Its headline figure ([`Figure::headline`]), in the row's unit.
    pub value: f64,
}

/// One row of the report.
#[derive(Clone, Debug)]
pub struct Measurement {
    /// Stable identifier (`read_hot`, `latency_4k`, ...).
    pub key: String,
    /// What a reader needs to know: cache state, fsync or not, who moved the bytes.
    pub label: String,
    /// Threads (ours: the engine decides, reported as 0; ceilings and anchors: their count).
    pub threads: usize,
    /// Bytes per repetition (throughput) or per operation (latency).
    pub bytes: u64,
    /// The samples.
    pub figure: Figure,
    /// Cores busy during each repetition (process CPU time / wall time).
    pub cores: Vec<f64>,
    /// Cores busy during each repetition per group of threads (see
    /// [`crate::measure::thread_cpu_seconds`]): where the CPU time went.
    pub cores_by_thread: Vec<BTreeMap<String, f64>>,
    /// The anchor's figure for the same measurement, when an anchor ran.
    pub anchor: Option<AnchorFigure>,
    /// The byte checks behind the figure; `None` where nothing was checked (the ceilings).
    pub checked: Option<Checked>,
    /// Requests kept in flight at once, for requests through a batch.
    pub queue_depth: Option<usize>,
    /// The measurement of the same run this one is read against, when there is one.
    pub versus: Option<Versus>,
    /// Further measurements of the same run it is read against (ours against a replay of
    /// upstream's design, next to the hot read it is first read against).
    pub versus_also: Vec<Versus>,
    /// For a cold figure: bytes of page cache this process kept pinned when it started (the
    /// most over the repetitions); pinned pages stay cached whatever drops the cache.
    pub cold_start_pinned: Option<usize>,
    /// For a cold figure: why it is not one ([`not_cold`]); no ratio is taken with it then.
    pub not_cold: Option<String>,
}

/// How far a cold read may pass the O_DIRECT ceiling of its run and still be taken as cold: a
/// read from the storage is not much faster than the CPU's direct reads from it, while one
/// served (in part) from the page cache is many times faster.
pub const COLD_CEILING_MARGIN: f64 = 1.5;

/// Why a cold figure of `value` (in `unit`) is not one, if it is not: this process kept
/// `pinned_at_start` bytes of page cache pinned when it started, or it is above
/// [`COLD_CEILING_MARGIN`] times `ceiling` (the key and figure of the run's O_DIRECT ceiling in
/// the same unit, where one was measured).
pub fn not_cold(
    value: f64,
    unit: &str,
    ceiling: Option<(&str, f64)>,
    pinned_at_start: usize,
) -> Option<String> {
    if pinned_at_start > 0 {
        return Some(format!(
            "{} MiB of the file's page cache was pinned by this process when it started",
            pinned_at_start.div_ceil(1 << 20)
        ));
    }
    let (key, ceiling) = ceiling?;
    (ceiling > 0.0 && value > COLD_CEILING_MARGIN * ceiling).then(|| {
        format!(
            "{value:.2} {unit} is {:.1}x the O_DIRECT ceiling of this run ({key}, {ceiling:.2} \
             {unit}): above {COLD_CEILING_MARGIN}x, not all of it came from the storage",
            value / ceiling
        )
    })
}

impl Measurement {
    /// Ours divided by the anchor's. Throughput compares medians of GB/s (above 1: we are
    /// faster); latency compares median microseconds per read, or mean microseconds where the
    /// anchor reports only means (below 1: we are faster).
    pub fn ratio(&self) -> Option<f64> {
        let anchor = self.anchor.as_ref()?;
        if self.not_cold.is_some() || anchor.not_cold.is_some() {
            return None;
        }
        let ours = match (&self.figure, anchor.basis) {
            (Figure::Throughput(v), Basis::MedianGbps) => median(v),
            (Figure::Latency(v), Basis::MedianUs) => median(v),
            (Figure::Latency(v), Basis::MeanUs) => mean(v),
            _ => return None,
        };
        (anchor.value > 0.0).then(|| ours / anchor.value)
    }

    /// Ours divided by the reference of the same run ([`Versus`]): above 1, ours moves more
    /// bytes or operations per second (for latency, takes longer).
    pub fn versus_ratio(&self) -> Option<f64> {
        self.versus.as_ref().and_then(|v| self.ratio_to(v))
    }

    fn ratio_to(&self, v: &Versus) -> Option<f64> {
        (v.value > 0.0).then(|| self.figure.headline() / v.value)
    }

    fn versus_basis(&self) -> Option<String> {
        let what = match self.figure {
            Figure::Throughput(_) => "median GB/s",
            Figure::Latency(_) => "median us per op",
            Figure::Iops { .. } => "median IOPS",
            Figure::Duration(_) => "median ms",
        };
        self.versus
            .as_ref()
            .map(|v| format!("{what}, ours / {}", v.key))
    }

    fn ratio_basis(&self) -> &'static str {
        match self.anchor.as_ref().map(|a| a.basis) {
            Some(Basis::MeanUs) => "mean us per read, ours / anchor",
            Some(Basis::MedianUs) => "median us per read, ours / anchor",
            Some(Basis::MedianGbps) | None => match self.figure {
                Figure::Throughput(_) => "median GB/s, ours / anchor",
                Figure::Latency(_) => "median us per read, ours / anchor",
                Figure::Iops { .. } => "median IOPS, ours / anchor",
                Figure::Duration(_) => "median ms, ours / anchor",
            },
        }
    }

    fn cores_median(&self) -> Option<f64> {
        (!self.cores.is_empty()).then(|| median(&self.cores))
    }

    /// Per group of threads, the median over the repetitions (a group absent from one counts 0).
    fn cores_by_thread_median(&self) -> BTreeMap<String, f64> {
        let groups: std::collections::BTreeSet<&String> =
            self.cores_by_thread.iter().flat_map(|m| m.keys()).collect();
        groups
            .into_iter()
            .map(|g| {
                let v: Vec<f64> = self
                    .cores_by_thread
                    .iter()
                    .map(|m| m.get(g).copied().unwrap_or(0.0))
                    .collect();
                (g.clone(), round3(median(&v)))
            })
            .collect()
    }

    /// The JSON object of this measurement.
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "type": "measurement",
            "key": self.key,
            "label": self.label,
            "threads": self.threads,
            "bytes": self.bytes,
            "cores": self.cores_median().map(round3),
            "cores_by_thread": self.cores_by_thread_median(),
            "anchor": self.anchor.as_ref().map(|a| json!({
                "tool": "kvikio",
                "value": round3(a.value),
                "threads": a.threads,
                "samples": a.samples,
                "cores": a.cores.map(round3),
                "p99_us": a.p99_us.map(round3),
                "task_size": a.task_size,
                "checks": a.checks,
                "check_failures": a.check_failures,
                "not_cold": a.not_cold,
            })),
            "ratio": self.ratio().map(round3),
            "ratio_basis": self.ratio_basis(),
            "queue_depth": self.queue_depth,
            "versus": self.versus.as_ref().map(|v| json!({
                "key": v.key,
                "value": round3(v.value),
                "unit": self.figure.unit(),
            })),
            "versus_ratio": self.versus_ratio().map(round3),
            "versus_basis": self.versus_basis(),
            "versus_also": self.versus_also.iter().map(|v| json!({
                "key": v.key,
                "value": round3(v.value),
                "unit": self.figure.unit(),
                "ratio": self.ratio_to(v).map(round3),
            })).collect::<Vec<_>>(),
            "page_cache_pinned_at_start": self.cold_start_pinned,
            "not_cold": self.not_cold,
        });
        let extra = match &self.figure {
            Figure::Throughput(s) => json!({
                "unit": "GB/s",
                "gbps": round3(median(s)),
                "samples": s.iter().copied().map(round3).collect::<Vec<_>>(),
                "repetitions": s.len(),
            }),
            Figure::Latency(s) => json!({
                "unit": "us",
                "median_us": round3(median(s)),
                "p99_us": round3(percentile(s, 99.0)),
                "mean_us": round3(mean(s)),
                "ops": s.len(),
            }),
            Figure::Iops { iops, latency_us } => json!({
                "unit": "IOPS",
                "iops": round3(median(iops)),
                "samples": iops.iter().copied().map(round3).collect::<Vec<_>>(),
                "repetitions": iops.len(),
                "median_us": round3(median(latency_us)),
                "p99_us": round3(percentile(latency_us, 99.0)),
                "mean_us": round3(mean(latency_us)),
                "ops": latency_us.len(),
            }),
            Figure::Duration(s) => json!({
                "unit": "ms",
                "median_ms": round3(median(s)),
                "samples": s.iter().copied().map(round3).collect::<Vec<_>>(),
                "repetitions": s.len(),
            }),
        };
        for more in [extra, Checked::json_fields(self.checked.as_ref())] {
            if let (Some(obj), Value::Object(more)) = (v.as_object_mut(), more) {
                obj.extend(more);
            }
        }
        v
    }

    fn figure_text(&self) -> String {
        let text = match &self.figure {
            Figure::Throughput(s) => format!("{:.2} GB/s", median(s)),
            Figure::Latency(s) => format!("{:.1} / {:.1} us", median(s), percentile(s, 99.0)),
            Figure::Iops { iops, latency_us } => format!(
                "{:.0} IOPS, {:.1} / {:.1} us",
                median(iops),
                median(latency_us),
                percentile(latency_us, 99.0)
            ),
            Figure::Duration(s) => format!("{:.1} ms", median(s)),
        };
        if self.not_cold.is_some() {
            format!("{text} {NOT_COLD_MARK}")
        } else {
            text
        }
    }

    /// The rows it is read against, one a line: the ratio and the row's key (a sum of rows
    /// one term a line).
    fn versus_lines(&self) -> Vec<String> {
        let Some(v) = &self.versus else {
            return Vec::new();
        };
        let mut lines = Vec::new();
        for (reference, ratio) in std::iter::once((v, self.versus_ratio()))
            .chain(self.versus_also.iter().map(|a| (a, self.ratio_to(a))))
        {
            let ratio = ratio.map_or_else(|| "-".to_string(), |r| format!("{r:.2}x"));
            let mut terms = reference.key.split(" + ");
            lines.push(format!("{ratio} {}", terms.next().unwrap_or_default()));
            let pad = " ".repeat(ratio.len());
            lines.extend(terms.map(|t| format!("{pad} + {t}")));
        }
        lines
    }

    fn anchor_text(&self) -> String {
        let Some(a) = &self.anchor else {
            return String::new();
        };
        let text = match (a.basis, a.p99_us) {
            (Basis::MedianGbps, _) => format!("{:.2} GB/s", a.value),
            (Basis::MedianUs, Some(p99)) => format!("{:.1} / {p99:.1} us", a.value),
            (Basis::MedianUs, None) => format!("{:.1} us median", a.value),
            (Basis::MeanUs, _) => format!("{:.1} us mean", a.value),
        };
        if a.not_cold.is_some() {
            format!("{text} {NOT_COLD_MARK}")
        } else {
            text
        }
    }

    fn anchor_checks_text(&self) -> String {
        match &self.anchor {
            Some(a) if a.check_failures > 0 => format!("{}/{} FAILED", a.check_failures, a.checks),
            Some(a) if a.checks > 0 => format!("{} ok", a.checks),
            _ => "-".into(),
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// Set each `(ours, reference)` pair's [`Versus`]: the reference's headline figure, where both
/// rows are there and measure the same kind of figure.
pub fn compare(rows: &mut [Measurement], pairs: &[(String, String)]) {
    compare_with(rows, pairs, |m, v| m.versus = Some(v));
}

/// As [`compare`], adding each reference to the row's [`Measurement::versus_also`].
pub fn compare_also(rows: &mut [Measurement], pairs: &[(String, String)]) {
    compare_with(rows, pairs, |m, v| m.versus_also.push(v));
}

fn compare_with(
    rows: &mut [Measurement],
    pairs: &[(String, String)],
    set: impl Fn(&mut Measurement, Versus),
) {
    for (ours, reference) in pairs {
        let Some(r) = rows.iter().find(|m| &m.key == reference) else {
            continue;
        };
        let (figure, key) = (r.figure.clone(), r.key.clone());
        if let Some(m) = rows.iter_mut().find(|m| &m.key == ours) {
            if m.figure.same_kind(&figure) {
                set(
                    m,
                    Versus {
                        key,
                        value: figure.headline(),
                    },
                );
            }
        }
    }
}

/// The widest line the human report has: a terminal of 120 columns shows it whole.
pub const REPORT_COLUMNS: usize = 120;
/// Marks a cold figure that is not one; a line under the table says why.
const NOT_COLD_MARK: &str = "*";

/// The table: one row per measurement, named by its key; the rows it is read against in a
/// column of their own, only when a row is read against another of the same run.
pub fn table(rows: &[Measurement]) -> String {
    let versus = rows.iter().any(|m| m.versus.is_some());
    let mut header = vec!["row", "figure", "cores", "checked"];
    if versus {
        header.push("vs same run");
    }
    let cells = rows.iter().map(|m| {
        let mut row = vec![
            vec![m.key.clone()],
            vec![m.figure_text()],
            vec![m
                .cores_median()
                .map_or_else(|| "-".into(), |c| format!("{c:.2}"))],
            vec![Checked::cell(m.checked.as_ref())],
        ];
        if versus {
            row.push(m.versus_lines());
        }
        row
    });
    let mut out = lay_out(&header, cells.collect(), &[false, true, true, true, false]);
    for m in rows {
        if let Some(why) = &m.not_cold {
            out.push_str(&wrap(
                &format!("{NOT_COLD_MARK} {} is not cold: {why}", m.key),
                REPORT_COLUMNS,
            ));
        }
    }
    out
}

/// The anchor's figures next to ours, for the rows that have one; empty when none has.
pub fn anchor_table(rows: &[Measurement]) -> String {
    let anchored: Vec<&Measurement> = rows.iter().filter(|m| m.anchor.is_some()).collect();
    if anchored.is_empty() {
        return String::new();
    }
    let header = [
        "row",
        "ours",
        "KvikIO",
        "threads",
        "cores",
        "checked",
        "ours/KvikIO",
    ];
    let cells = anchored
        .iter()
        .map(|m| {
            let a = m.anchor.as_ref();
            vec![
                vec![m.key.clone()],
                vec![m.figure_text()],
                vec![m.anchor_text()],
                vec![a
                    .and_then(|a| a.threads)
                    .map_or_else(|| "-".into(), |t| t.to_string())],
                vec![a
                    .and_then(|a| a.cores)
                    .map_or_else(|| "-".into(), |c| format!("{c:.2}"))],
                vec![m.anchor_checks_text()],
                vec![m.ratio().map_or_else(
                    || "-".into(),
                    |r| match m.figure {
                        Figure::Throughput(_) | Figure::Iops { .. } => format!("{r:.2}x"),
                        Figure::Latency(_) | Figure::Duration(_) => format!("{r:.2}x time"),
                    },
                )],
            ]
        })
        .collect();
    let mut out = lay_out(&header, cells, &[false, true, true, true, true, true, true]);
    for m in &anchored {
        if let Some(why) = m.anchor.as_ref().and_then(|a| a.not_cold.as_ref()) {
            out.push_str(&wrap(
                &format!("{NOT_COLD_MARK} {}: KvikIO's is not cold: {why}", m.key),
                REPORT_COLUMNS,
            ));
        }
    }
    out
}

/// Columns padded to their widest cell (right-aligned where `right` says), a rule under the
/// header; a cell of several lines makes its row as many lines.
fn lay_out(header: &[&str], rows: Vec<Vec<Vec<String>>>, right: &[bool]) -> String {
    let widths: Vec<usize> = (0..header.len())
        .map(|c| {
            rows.iter()
                .flat_map(|r| r[c].iter())
                .map(|l| l.chars().count())
                .chain([header[c].chars().count()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let line = |cells: &[&str]| -> String {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, w))| {
                if right.get(c).copied().unwrap_or(false) {
                    format!("{cell:>w$}")
                } else {
                    format!("{cell:<w$}")
                }
            })
            .collect();
        format!("{}\n", padded.join("  ").trim_end())
    };
    let mut out = line(header);
    let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    out.push_str(&format!("{}\n", rule.join("  ")));
    for row in &rows {
        let height = row.iter().map(Vec::len).max().unwrap_or(1).max(1);
        for i in 0..height {
            let cells: Vec<&str> = row
                .iter()
                .map(|cell| cell.get(i).map_or("", String::as_str))
                .collect();
            out.push_str(&line(&cells));
        }
    }
    out
}

/// What each kind of row measures: a key pattern (`<size>`, `<n>`, `<cache>` stand for a part
/// of the key) and what a row of that kind is.
const ROW_KINDS: [(&str, &str); 26] = [
    ("read_cold", "whole-file read, page cache dropped first (as root)"),
    ("read_hot", "whole-file read from the page cache, the first of a fresh registration"),
    ("read_hot_again", "the same read again: what the engine pinned of the page cache is copied straight out of it"),
    ("baseline_read_hot", "upstream hipFile's design: 1 thread, pread into a 16 MiB pageable buffer, synchronous copy"),
    ("write", "whole-buffer write to the scratch file, page cache, no fsync"),
    ("write_fsync", "the same write, then fsync"),
    ("latency_<size>", "random reads of <size>, one at a time, hot: median / p99 us"),
    ("latency_floor_<size>", "the same reads done plainly: pread into pinned memory, one synchronous copy"),
    ("batch_<size>_qd<n>", "random reads of <size> through one batch, <n> in flight, hot"),
    ("sync_<size>_t<n>", "the same reads as synchronous calls from <n> threads"),
    ("batch_large", "large reads over the file in one batch, hot (their size: the notes)"),
    ("batch_cold_<size>_qd<n>", "random reads of <size> through one batch, <n> in flight, page cache dropped"),
    ("ceiling_odirect_<size>_t<n>", "ceiling: O_DIRECT random reads of <size> to host memory from <n> threads, cold"),
    ("async_s<n>", "the file as stream-ordered reads (hipFileReadAsync) queued on <n> streams, hot"),
    ("async_submit_s<n>", "the time one of those reads takes to submit, <n> streams: median / p99 us"),
    ("async_sync_ops", "the same reads as synchronous calls, one after another"),
    ("replay_s<n>", "upstream's design replayed on <n> streams: pread in a host function, then an async copy"),
    ("async_overlap_workload", "a GPU workload alone (fills of a buffer on an independent stream)"),
    ("async_overlap_reads", "the stream-ordered reads alone, 1 stream"),
    ("async_overlap_together", "both queued at once; vs: its time / the sum of both alone (below 1: they overlapped)"),
    ("ceiling_h2d_pinned", "ceiling: pinned host -> device copy"),
    ("ceiling_pagecache_read", "ceiling: page cache -> host memory, every core"),
    ("ceiling_odirect_read", "ceiling: O_DIRECT -> host memory, every core, page cache dropped (as root)"),
    ("kvikio_read_<cache>_t<n>", "KvikIO's whole-file read, <cache>, <n> threads"),
    ("remote_read", "a remote object read into GPU memory: ranged requests in parallel, pinned staging lanes"),
    ("remote_read_host", "the same object read into host memory (the network and the server, no GPU side)"),
];

/// Whether `key` is of the kind `pattern` names ([`ROW_KINDS`]): a placeholder stands for one
/// or more lowercase letters and digits.
fn key_matches(pattern: &str, key: &str) -> bool {
    let Some(open) = pattern.find('<') else {
        return pattern == key;
    };
    let Some(close) = pattern[open..].find('>') else {
        return pattern == key;
    };
    let rest = &pattern[open + close + 1..];
    let Some(tail) = key.strip_prefix(&pattern[..open]) else {
        return false;
    };
    let run = tail
        .bytes()
        .take_while(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        .count();
    (1..=run).any(|n| key_matches(rest, &tail[n..]))
}

/// What a row of `key` measures, from [`ROW_KINDS`].
pub fn row_kind(key: &str) -> Option<(&'static str, &'static str)> {
    ROW_KINDS
        .iter()
        .copied()
        .find(|(pattern, _)| key_matches(pattern, key))
}

/// The legend under the tables: what the columns say, and what each kind of row in `rows`
/// measures.
pub fn legend(rows: &[Measurement]) -> String {
    let mut lines = vec![
        "legend (every row's full label: --json)".to_string(),
        "  figure: GB/s; IOPS with median / p99 us from submission to completion; median / p99 us \
         per read; or ms. cores: CPU time / wall time of the process. checked: the byte checks \
         that ran (FAILED when one did not match)."
            .to_string(),
    ];
    if rows.iter().any(|m| m.versus.is_some()) {
        lines.push(
            "  vs same run: ours / the row named (GB/s, IOPS: above 1 is more per second; us, ms: \
             above 1 is longer)."
                .to_string(),
        );
    }
    if rows.iter().any(|m| m.anchor.is_some()) {
        lines.push(
            "  KvikIO: the best figure of its thread sweep (threads, cores: that one's). \
             ours/KvikIO: GB/s ours / KvikIO's (above 1: ours is faster); for small reads, time \
             ours / KvikIO's (below 1: ours is faster)."
                .to_string(),
        );
    }
    let flagged = |m: &Measurement| {
        m.not_cold.is_some() || m.anchor.as_ref().is_some_and(|a| a.not_cold.is_some())
    };
    if rows.iter().any(flagged) {
        lines.push(format!(
            "  {NOT_COLD_MARK}: a cold figure that is not one (why: the line under its table); no \
             ratio is taken with it."
        ));
    }
    let mut kinds: Vec<(&str, &str)> = Vec::new();
    for m in rows {
        if let Some(kind) = row_kind(&m.key) {
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
    }
    let mut out: String = lines.iter().map(|l| wrap(l, REPORT_COLUMNS)).collect();
    let width = kinds.iter().map(|(p, _)| p.len()).max().unwrap_or(0);
    for (pattern, what) in kinds {
        let line = format!("  {pattern:<width$}  {what}");
        out.push_str(&wrap_hanging(&line, REPORT_COLUMNS, width + 4));
    }
    out
}

/// `line` in lines of at most `width` characters, broken at spaces where it can be (a word
/// longer than a line is cut), each continuation indented two more than the line; every line
/// ends in a newline.
pub fn wrap(line: &str, width: usize) -> String {
    let lead = line.len() - line.trim_start_matches(' ').len();
    wrap_hanging(line, width, lead + 2)
}

/// As [`wrap`], continuations indented by `hang` (at most half the width).
fn wrap_hanging(line: &str, width: usize, hang: usize) -> String {
    let lead = line.len() - line.trim_start_matches(' ').len();
    let indent = " ".repeat(hang.min(width / 2));
    let chars: Vec<char> = line.trim_end().chars().collect();
    let mut rest = &chars[..];
    let mut prefix = "";
    let mut out = String::new();
    while prefix.len() + rest.len() > width {
        let room = width - prefix.len();
        // The last space that leaves at most `room` characters, past the line's indentation.
        let start = if prefix.is_empty() { lead + 1 } else { 1 };
        let (head, tail) = match (start..=room).rev().find(|&i| rest[i] == ' ') {
            Some(i) => rest.split_at(i),
            None => rest.split_at(room),
        };
        out.push_str(prefix);
        let end = head.iter().rposition(|c| *c != ' ').map_or(0, |i| i + 1);
        out.extend(&head[..end]);
        out.push('\n');
        let spaces = tail.iter().take_while(|c| **c == ' ').count();
        rest = &tail[spaces..];
        prefix = &indent;
    }
    out.push_str(prefix);
    out.extend(rest);
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(anchor: Option<f64>) -> Measurement {
        Measurement {
            key: "read_hot".into(),
            label: "read, hot".into(),
            threads: 0,
            bytes: 1 << 20,
            figure: Figure::Throughput(vec![10.0, 20.0, 30.0]),
            cores: vec![1.0, 2.0, 3.0],
            cores_by_thread: vec![
                BTreeMap::from([("caller".into(), 1.0), ("hipfile-io".into(), 4.0)]),
                BTreeMap::from([("caller".into(), 0.5)]),
                BTreeMap::from([("caller".into(), 0.75), ("hipfile-io".into(), 2.0)]),
            ],
            anchor: anchor.map(|value| AnchorFigure {
                value,
                basis: Basis::MedianGbps,
                threads: Some(16),
                samples: vec![value],
                cores: Some(3.5),
                p99_us: None,
                checks: 1,
                check_failures: 0,
                task_size: Some(4 << 20),
                not_cold: None,
            }),
            checked: Some(Checked {
                checks: 3,
                failures: 0,
                bytes: Some(3 << 20),
                first_failure: None,
            }),
            queue_depth: None,
            versus: None,
            versus_also: Vec::new(),
            cold_start_pinned: None,
            not_cold: None,
        }
    }

    #[test]
    fn ratios_divide_ours_by_the_anchor() {
        assert_eq!(row(Some(40.0)).ratio(), Some(0.5));
        assert_eq!(row(None).ratio(), None);
        let j = row(Some(40.0)).to_json();
        assert_eq!(j["gbps"], 20.0);
        assert_eq!(j["cores"], 2.0);
        assert_eq!(j["cores_by_thread"]["caller"], 0.75);
        assert_eq!(j["cores_by_thread"]["hipfile-io"], 2.0);
        assert_eq!(j["ratio"], 0.5);
        assert_eq!(j["anchor"]["threads"], 16);
        assert_eq!(j["anchor"]["cores"], 3.5);
        assert_eq!(j["verified"], true);
        assert_eq!(j["bytes_checked"], 3 << 20);
        let mut unchecked = row(None);
        unchecked.checked = None;
        assert_eq!(unchecked.to_json()["verified"], Value::Null);
    }

    #[test]
    fn latency_is_compared_by_median_when_the_anchor_gives_one() {
        let mut m = row(None);
        m.figure = Figure::Latency(vec![10.0, 20.0, 90.0]);
        let anchor = |basis, value| AnchorFigure {
            value,
            basis,
            threads: Some(1),
            samples: vec![value],
            cores: None,
            p99_us: Some(80.0),
            checks: 0,
            check_failures: 0,
            task_size: None,
            not_cold: None,
        };
        m.anchor = Some(anchor(Basis::MedianUs, 40.0));
        assert_eq!(m.ratio(), Some(0.5));
        assert_eq!(
            m.to_json()["ratio_basis"],
            "median us per read, ours / anchor"
        );
        assert_eq!(m.to_json()["anchor"]["p99_us"], 80.0);
        assert_eq!(m.anchor_text(), "40.0 / 80.0 us");
        m.anchor = Some(anchor(Basis::MeanUs, 40.0));
        assert_eq!(m.ratio(), Some(1.0));
        assert_eq!(
            m.to_json()["ratio_basis"],
            "mean us per read, ours / anchor"
        );
    }

    #[test]
    fn the_anchor_has_a_table_of_its_own_only_when_it_ran() {
        assert!(anchor_table(&[row(None)]).is_empty());
        assert!(!table(&[row(Some(40.0))]).contains("KvikIO"));
        let t = anchor_table(&[row(Some(40.0))]);
        assert!(t.contains("ours/KvikIO") && t.contains("0.50x"), "{t}");
        assert!(t.contains("40.00 GB/s") && t.contains("3.50"), "{t}");
        assert!(table(&[row(None)]).contains("3 ok"));
    }

    #[test]
    fn a_row_is_read_against_another_of_the_same_run() {
        let mut batch = row(None);
        batch.key = "batch_4k_qd8".into();
        batch.queue_depth = Some(8);
        batch.figure = Figure::Iops {
            iops: vec![4000.0; 3],
            latency_us: (1..=100).map(f64::from).collect(),
        };
        let mut sync = row(None);
        sync.key = "sync_4k_t8".into();
        sync.figure = Figure::Iops {
            iops: vec![1000.0, 3000.0, 2000.0],
            latency_us: vec![5.0, 6.0, 7.0],
        };
        let hot = row(None);
        let mut rows = vec![batch, sync, hot];
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        compare(
            &mut rows,
            &[
                pair("batch_4k_qd8", "sync_4k_t8"),
                // Not the same kind of figure, or not there: nothing to read against.
                pair("read_hot", "sync_4k_t8"),
                pair("sync_4k_t8", "sync_4k_t16"),
            ],
        );
        assert_eq!(
            rows[0].versus,
            Some(Versus {
                key: "sync_4k_t8".into(),
                value: 2000.0
            })
        );
        assert_eq!(rows[0].versus_ratio(), Some(2.0));
        assert!(rows[1].versus.is_none() && rows[2].versus.is_none());
        let j = rows[0].to_json();
        assert_eq!(j["unit"], "IOPS");
        assert_eq!(j["iops"], 4000.0);
        assert_eq!(j["repetitions"], 3);
        assert_eq!(
            (&j["median_us"], &j["p99_us"]),
            (&51.0.into(), &99.0.into())
        );
        assert_eq!(j["ops"], 100);
        assert_eq!(j["queue_depth"], 8);
        assert_eq!(j["versus"]["key"], "sync_4k_t8");
        assert_eq!(j["versus"]["value"], 2000.0);
        assert_eq!(j["versus_ratio"], 2.0);
        assert_eq!(j["versus_basis"], "median IOPS, ours / sync_4k_t8");
        assert_eq!(rows[2].to_json()["versus"], Value::Null);
        let t = table(&rows);
        assert!(
            t.contains("4000 IOPS, 51.0 / 99.0 us") && t.contains("2.00x sync_4k_t8"),
            "{t}"
        );
        assert!(!table(&[row(None)]).contains("vs same run"));
    }

    #[test]
    fn a_row_is_also_read_against_further_rows_and_times_are_in_ms() {
        let mut ours = row(None);
        ours.key = "async_s1".into();
        let mut hot = row(None);
        hot.figure = Figure::Throughput(vec![40.0; 3]);
        let mut replay = row(None);
        replay.key = "replay_s1".into();
        replay.figure = Figure::Throughput(vec![5.0; 3]);
        let mut rows = vec![ours, hot, replay];
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        compare(&mut rows, &[pair("async_s1", "read_hot")]);
        compare_also(&mut rows, &[pair("async_s1", "replay_s1")]);
        assert_eq!(rows[0].versus_ratio(), Some(0.5));
        let j = rows[0].to_json();
        assert_eq!(j["versus_also"][0]["key"], "replay_s1");
        assert_eq!(j["versus_also"][0]["ratio"], 4.0);
        assert_eq!(j["versus_also"][0]["unit"], "GB/s");
        assert_eq!(rows[1].to_json()["versus_also"], json!([]));
        // One reference a line, under the first.
        let t = table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        let at = lines
            .iter()
            .position(|l| l.starts_with("async_s1 "))
            .unwrap();
        assert!(lines[at].ends_with("0.50x read_hot"), "{t}");
        assert!(lines[at + 1].trim() == "4.00x replay_s1", "{t}");
        assert_eq!(
            lines[at].len() - "0.50x read_hot".len(),
            lines[at + 1].len() - "4.00x replay_s1".len(),
            "{t}"
        );

        let mut time = row(None);
        time.figure = Figure::Duration(vec![30.0, 10.0, 20.0]);
        let j = time.to_json();
        assert_eq!((&j["unit"], &j["median_ms"]), (&"ms".into(), &20.0.into()));
        assert!(table(&[time]).contains("20.0 ms"));
    }

    #[test]
    fn a_cold_figure_is_not_cold_with_pins_held_or_far_above_the_o_direct_ceiling() {
        let ceiling = Some(("ceiling_odirect_read", 1.68));
        // The H100 run: KvikIO "cold" at 30.24 GB/s against 1.68 of O_DIRECT.
        let why = not_cold(30.24, "GB/s", ceiling, 0).unwrap();
        assert!(
            why.starts_with("30.24 GB/s is 18.0x the O_DIRECT ceiling of this run"),
            "{why}"
        );
        assert_eq!(not_cold(2.5, "GB/s", ceiling, 0), None);
        assert!(not_cold(2.53, "GB/s", ceiling, 0).is_some());
        // No ceiling measured: only pins can tell.
        assert_eq!(not_cold(30.24, "GB/s", None, 0), None);
        let why = not_cold(1.0, "GB/s", ceiling, 64 << 20).unwrap();
        assert!(
            why.starts_with("64 MiB of the file's page cache was pinned"),
            "{why}"
        );

        // Flagged, it has no ratio, and says so in the table and the JSON.
        let mut m = row(Some(30.24));
        m.key = "read_cold".into();
        assert!(m.ratio().is_some());
        if let Some(a) = m.anchor.as_mut() {
            a.not_cold = not_cold(a.value, "GB/s", ceiling, 0);
        }
        assert_eq!(m.ratio(), None);
        let j = m.to_json();
        assert_eq!(j["ratio"], Value::Null);
        assert!(j["anchor"]["not_cold"].as_str().unwrap().contains("18.0x"));
        let t = anchor_table(&[m.clone()]);
        assert!(t.contains("30.24 GB/s *"), "{t}");
        assert!(
            t.contains("* read_cold: KvikIO's is not cold: 30.24 GB/s"),
            "{t}"
        );
        m.anchor = None;
        m.not_cold = Some("pinned".into());
        m.cold_start_pinned = Some(1);
        let j = m.to_json();
        assert_eq!(
            (&j["not_cold"], &j["page_cache_pinned_at_start"]),
            (&"pinned".into(), &1.into())
        );
        let t = table(&[m]);
        assert!(
            t.contains("20.00 GB/s *") && t.contains("* read_cold is not cold: pinned"),
            "{t}"
        );
    }

    #[test]
    fn row_kinds_match_their_keys_and_only_them() {
        for (key, pattern) in [
            ("read_hot", "read_hot"),
            ("latency_4k", "latency_<size>"),
            ("latency_floor_1m", "latency_floor_<size>"),
            ("batch_64k_qd128", "batch_<size>_qd<n>"),
            ("batch_cold_4k_qd32", "batch_cold_<size>_qd<n>"),
            ("ceiling_odirect_4k_t32", "ceiling_odirect_<size>_t<n>"),
            ("ceiling_odirect_read", "ceiling_odirect_read"),
            ("async_submit_s4", "async_submit_s<n>"),
            ("kvikio_read_cold_t16", "kvikio_read_<cache>_t<n>"),
        ] {
            assert_eq!(row_kind(key).map(|k| k.0), Some(pattern), "{key}");
        }
        assert_eq!(row_kind("latency_"), None);
        assert_eq!(row_kind("something_new"), None);
    }

    #[test]
    fn long_lines_wrap_at_spaces_within_the_width() {
        let line = format!("note: {}", "word ".repeat(60));
        let wrapped = wrap(&line, 40);
        assert!(
            wrapped.lines().all(|l| l.chars().count() <= 40),
            "{wrapped}"
        );
        assert!(
            wrapped.lines().skip(1).all(|l| l.starts_with("  word")),
            "{wrapped}"
        );
        let words: Vec<&str> = wrapped.split_whitespace().collect();
        assert_eq!(words.len(), 61);
        // A word longer than the width is cut; a short line is left as it is.
        let long = format!("path: /{}", "x".repeat(100));
        let wrapped = wrap(&long, 40);
        assert!(
            wrapped.lines().all(|l| l.chars().count() <= 40),
            "{wrapped}"
        );
        assert_eq!(
            wrapped.replace("\n  ", "").replace(['\n', ' '], ""),
            long.replace(' ', "")
        );
        assert_eq!(wrap("short", 40), "short\n");
    }

    #[test]
    fn the_tables_of_the_widest_rows_a_gpu_run_gives_fit_120_columns() {
        let mut rows = Vec::new();
        for key in [
            "async_overlap_together",
            "ceiling_odirect_4k_t32",
            "batch_cold_4k_qd32",
            "kvikio_read_cold_t32",
        ] {
            let mut m = row(Some(123.456));
            m.key = key.into();
            m.figure = Figure::Iops {
                iops: vec![1_234_567.0],
                latency_us: vec![1_234.5, 12_345.6],
            };
            m.checked = Some(Checked {
                checks: 192,
                failures: 192,
                bytes: None,
                first_failure: None,
            });
            m.not_cold = Some("why".into());
            m.versus = Some(Versus {
                key: "async_overlap_workload + async_overlap_reads".into(),
                value: 10_000.0,
            });
            // Ratios up to 123.46x.
            m.versus_also = vec![Versus {
                key: "ceiling_odirect_4k_t32".into(),
                value: 10_000.0,
            }];
            m.cores = vec![128.0];
            if let Some(a) = m.anchor.as_mut() {
                a.basis = Basis::MedianUs;
                a.p99_us = Some(123_456.7);
                a.not_cold = Some("why".into());
                a.threads = Some(128);
                a.check_failures = 192;
                a.checks = 192;
            }
            rows.push(m);
        }
        let main = table(&rows);
        // The anchor is set beside whole-file reads, writes and small reads.
        for (m, key) in
            rows.iter_mut()
                .zip(["read_cold", "latency_64k", "write_fsync", "read_hot_again"])
        {
            m.key = key.into();
            m.figure = Figure::Latency(vec![1_234.5, 12_345.6]);
        }
        let anchored = anchor_table(&rows);
        for text in [main, anchored, legend(&rows)] {
            for line in text.lines() {
                assert!(line.chars().count() <= REPORT_COLUMNS, "{line}");
            }
        }
    }
}
