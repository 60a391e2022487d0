//! Measurements and how they are shown: one JSON object per line, or a table.

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
}

impl Measurement {
    /// Ours divided by the anchor's. Throughput compares medians of GB/s (above 1: we are
    /// faster); latency compares median microseconds per read, or mean microseconds where the
    /// anchor reports only means (below 1: we are faster).
    pub fn ratio(&self) -> Option<f64> {
        let anchor = self.anchor.as_ref()?;
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
        match &self.figure {
            Figure::Throughput(s) => format!("{:.2} GB/s", median(s)),
            Figure::Latency(s) => format!("{:.1} / {:.1} us", median(s), percentile(s, 99.0)),
            Figure::Iops { iops, latency_us } => format!(
                "{:.0} IOPS, {:.1} / {:.1} us",
                median(iops),
                median(latency_us),
                percentile(latency_us, 99.0)
            ),
            Figure::Duration(s) => format!("{:.1} ms", median(s)),
        }
    }

    fn versus_text(&self) -> String {
        let Some(v) = &self.versus else {
            return String::new();
        };
        let mut text = format!("{} {}", v.key, self.value_text(v.value));
        for also in &self.versus_also {
            text.push_str(&format!("; {} {}", also.key, self.value_text(also.value)));
            if let Some(r) = self.ratio_to(also) {
                text.push_str(&format!(" ({r:.2}x)"));
            }
        }
        text
    }

    fn value_text(&self, value: f64) -> String {
        match self.figure {
            Figure::Throughput(_) => format!("{value:.2} GB/s"),
            Figure::Latency(_) => format!("{value:.1} us"),
            Figure::Iops { .. } => format!("{value:.0} IOPS"),
            Figure::Duration(_) => format!("{value:.1} ms"),
        }
    }

    fn anchor_text(&self) -> String {
        let Some(a) = &self.anchor else {
            return String::new();
        };
        let mut about = Vec::new();
        if let Some(t) = a.threads {
            about.push(format!("{t} thr"));
        }
        if let Some(c) = a.cores {
            about.push(format!("{c:.2} cores"));
        }
        if a.check_failures > 0 {
            about.push(format!("{}/{} checks FAILED", a.check_failures, a.checks));
        }
        let about = if about.is_empty() {
            String::new()
        } else {
            format!(" ({})", about.join(", "))
        };
        match (a.basis, a.p99_us) {
            (Basis::MedianGbps, _) => format!("{:.2} GB/s{about}", a.value),
            (Basis::MedianUs, Some(p99)) => format!("{:.1} / {p99:.1} us{about}", a.value),
            (Basis::MedianUs, None) => format!("{:.1} us median{about}", a.value),
            (Basis::MeanUs, _) => format!("{:.1} us mean{about}", a.value),
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

/// The table: one row per measurement; anchor columns only when an anchor ran, reference
/// columns only when a row is read against another of the same run.
pub fn table(rows: &[Measurement]) -> String {
    let anchored = rows.iter().any(|m| m.anchor.is_some());
    let versus = rows.iter().any(|m| m.versus.is_some());
    let mut header = vec![
        "measurement".to_string(),
        "figure (GB/s | IOPS | median / p99 us | ms)".into(),
        "cores".into(),
        "checked".into(),
    ];
    if anchored {
        header.push("kvikio".into());
        header.push("ours/kvikio".into());
    }
    if versus {
        header.push("versus (same run)".into());
        header.push("ours/versus".into());
    }
    let mut cells: Vec<Vec<String>> = vec![header];
    for m in rows {
        let mut row = vec![
            m.label.clone(),
            m.figure_text(),
            m.cores_median()
                .map_or_else(|| "-".into(), |c| format!("{c:.2}")),
            Checked::cell(m.checked.as_ref()),
        ];
        if anchored {
            row.push(m.anchor_text());
            row.push(m.ratio().map_or_else(String::new, |r| match m.figure {
                Figure::Throughput(_) | Figure::Iops { .. } => format!("{r:.2}x"),
                Figure::Latency(_) | Figure::Duration(_) => format!("{r:.2}x time"),
            }));
        }
        if versus {
            row.push(m.versus_text());
            row.push(
                m.versus_ratio()
                    .map_or_else(String::new, |r| format!("{r:.2}x")),
            );
        }
        cells.push(row);
    }
    let widths: Vec<usize> = (0..cells[0].len())
        .map(|c| {
            cells
                .iter()
                .map(|r| r[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for (i, row) in cells.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(c, (cell, w))| {
                if c == 0 {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                }
            })
            .collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
        if i == 0 {
            let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            out.push_str(&rule.join("  "));
            out.push('\n');
        }
    }
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
        };
        m.anchor = Some(anchor(Basis::MedianUs, 40.0));
        assert_eq!(m.ratio(), Some(0.5));
        assert_eq!(
            m.to_json()["ratio_basis"],
            "median us per read, ours / anchor"
        );
        assert_eq!(m.to_json()["anchor"]["p99_us"], 80.0);
        assert_eq!(m.anchor_text(), "40.0 / 80.0 us (1 thr)");
        m.anchor = Some(anchor(Basis::MeanUs, 40.0));
        assert_eq!(m.ratio(), Some(1.0));
        assert_eq!(
            m.to_json()["ratio_basis"],
            "mean us per read, ours / anchor"
        );
    }

    #[test]
    fn the_table_shows_anchor_columns_only_when_an_anchor_ran() {
        assert!(!table(&[row(None)]).contains("kvikio"));
        let t = table(&[row(Some(40.0))]);
        assert!(t.contains("ours/kvikio") && t.contains("0.50x"), "{t}");
        assert!(t.contains("3 ok") && t.contains("3.50 cores"), "{t}");
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
            t.contains("4000 IOPS, 51.0 / 99.0 us")
                && t.contains("sync_4k_t8 2000 IOPS")
                && t.contains("2.00x"),
            "{t}"
        );
        assert!(!table(&[row(None)]).contains("versus"));
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
        let t = table(&rows);
        assert!(
            t.contains("read_hot 40.00 GB/s; replay_s1 5.00 GB/s (4.00x)"),
            "{t}"
        );

        let mut time = row(None);
        time.figure = Figure::Duration(vec![30.0, 10.0, 20.0]);
        let j = time.to_json();
        assert_eq!((&j["unit"], &j["median_ms"]), (&"ms".into(), &20.0.into()));
        assert!(table(&[time]).contains("20.0 ms"));
    }
}
