//! The measurements of a run as they come in: one row per key, in first-seen order, each
//! repetition's figure appended to it.

use crate::measure::Timed;
use crate::report::{Figure, Measurement};

/// Measurements in first-seen order, samples appended per repetition.
#[derive(Debug, Default)]
pub(super) struct Rows(pub(super) Vec<Measurement>);

impl Rows {
    /// A repetition of the row `key` (made with the empty `figure` when new): its cores
    /// noted, the row and the seconds it took handed back for its figure.
    fn sample(
        &mut self,
        (key, label): (&str, &str),
        threads: usize,
        bytes: usize,
        figure: Figure,
        t: Timed,
    ) -> (&mut Measurement, f64) {
        let i = match self.0.iter().position(|m| m.key == key) {
            Some(i) => i,
            None => {
                self.0.push(Measurement {
                    key: key.into(),
                    label: label.into(),
                    threads,
                    bytes: bytes as u64,
                    figure,
                    cores: Vec::new(),
                    cores_by_thread: Vec::new(),
                    anchor: None,
                    checked: None,
                    queue_depth: None,
                    versus: None,
                    versus_also: Vec::new(),
                    cold_start_pinned: None,
                    not_cold: None,
                });
                self.0.len() - 1
            }
        };
        let m = &mut self.0[i];
        m.cores.push(t.cores);
        m.cores_by_thread.push(t.cores_by_thread);
        (m, t.seconds)
    }

    pub(super) fn throughput(
        &mut self,
        key: &str,
        label: &str,
        threads: usize,
        bytes: usize,
        t: Timed,
    ) {
        let empty = Figure::Throughput(Vec::new());
        let (m, seconds) = self.sample((key, label), threads, bytes, empty, t);
        if let Figure::Throughput(v) = &mut m.figure {
            v.push(bytes as f64 / seconds / 1e9);
        }
    }

    pub(super) fn iops(
        &mut self,
        key: &str,
        label: &str,
        (threads, queue_depth): (usize, Option<usize>),
        bytes: usize,
        latency_us: Vec<f64>,
        t: Timed,
    ) {
        let empty = Figure::Iops {
            iops: Vec::new(),
            latency_us: Vec::new(),
        };
        let (m, seconds) = self.sample((key, label), threads, bytes, empty, t);
        m.queue_depth = queue_depth;
        if let Figure::Iops {
            iops,
            latency_us: all,
        } = &mut m.figure
        {
            iops.push(latency_us.len() as f64 / seconds);
            all.extend(latency_us);
        }
    }

    pub(super) fn set_queue_depth(&mut self, key: &str, depth: usize) {
        if let Some(m) = self.0.iter_mut().find(|m| m.key == key) {
            m.queue_depth = Some(depth);
        }
    }

    pub(super) fn duration(&mut self, key: &str, label: &str, bytes: usize, t: Timed) {
        let empty = Figure::Duration(Vec::new());
        let (m, seconds) = self.sample((key, label), 0, bytes, empty, t);
        if let Figure::Duration(v) = &mut m.figure {
            v.push(seconds * 1e3);
        }
    }

    pub(super) fn latency(
        &mut self,
        key: &str,
        label: &str,
        bytes: usize,
        samples: Vec<f64>,
        t: Timed,
    ) {
        let empty = Figure::Latency(Vec::new());
        let (m, _) = self.sample((key, label), 1, bytes, empty, t);
        if let Figure::Latency(v) = &mut m.figure {
            v.extend(samples);
        }
    }
}

/// `4 KiB`, `128 MiB`: a power-of-two size as a label shows it.
pub(super) fn human_bytes(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes % (1 << 10) == 0 {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}
