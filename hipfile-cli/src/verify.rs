//! Byte checks: what `hipfile bench` compared, and how.
//!
//! A benchmark that does not check its bytes could report a broken engine as fast. Before a
//! read is checked, the device buffer is filled with a sentinel that differs from the file's
//! first byte, so a read that moved nothing cannot pass; after it, the buffer is compared with
//! the file byte for byte. A write is checked by comparing the file written with the buffer.
//! The [`Ledger`] keeps, per measurement, how many checks ran, how many bytes they compared and
//! what the first difference was; the report shows it, and "verified" is true only where checks
//! ran and all of them passed.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use hipfile_hip::{DeviceBuffer, GpuRuntime, PinnedBuffer};
use serde_json::{json, Value};

/// Bytes compared per step.
const CHUNK: usize = 64 << 20;

/// What the checks behind one measurement found.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Checked {
    /// Checks made.
    pub checks: usize,
    /// Checks that found a difference.
    pub failures: usize,
    /// Bytes compared, over all checks; `None` where the checker does not say (the anchor).
    pub bytes: Option<u64>,
    /// The first difference found.
    pub first_failure: Option<String>,
}

impl Checked {
    /// Checks ran and every one passed.
    pub fn passed(&self) -> bool {
        self.checks > 0 && self.failures == 0
    }

    /// The JSON fields a measurement carries: `verified`, `checks`, `bytes_checked`,
    /// `check_failure`.
    pub fn json_fields(checked: Option<&Checked>) -> Value {
        match checked {
            None => json!({
                "verified": null,
                "checks": 0,
                "bytes_checked": 0,
                "check_failure": null,
            }),
            Some(c) => json!({
                "verified": c.passed(),
                "checks": c.checks,
                "bytes_checked": c.bytes,
                "check_failure": c.first_failure,
            }),
        }
    }

    /// A table cell: `2 ok`, `1/2 FAILED`, or `-` when nothing was checked.
    pub fn cell(checked: Option<&Checked>) -> String {
        match checked {
            Some(c) if c.checks == 0 => "-".into(),
            Some(c) if c.failures == 0 => format!("{} ok", c.checks),
            Some(c) => format!("{}/{} FAILED", c.failures, c.checks),
            None => "-".into(),
        }
    }
}

/// The checks of one run, by measurement key (plus `first_read`), in first-seen order.
#[derive(Debug, Default)]
pub struct Ledger(Vec<(String, Checked)>);

impl Ledger {
    /// Record one check of `bytes` bytes under `key`: `difference` is `None` when everything
    /// matched, else where the first difference was.
    pub fn record(&mut self, key: &str, bytes: u64, difference: Option<String>) {
        let i = match self.0.iter().position(|(k, _)| k == key) {
            Some(i) => i,
            None => {
                self.0.push((
                    key.to_string(),
                    Checked {
                        bytes: Some(0),
                        ..Checked::default()
                    },
                ));
                self.0.len() - 1
            }
        };
        let c = &mut self.0[i].1;
        c.checks += 1;
        c.bytes = Some(c.bytes.unwrap_or(0) + bytes);
        if let Some(why) = difference {
            c.failures += 1;
            c.first_failure.get_or_insert(why);
        }
    }

    /// The checks recorded under `key`.
    pub fn get(&self, key: &str) -> Option<&Checked> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, c)| c)
    }

    /// Checks ran, and every one passed.
    pub fn all_passed(&self) -> bool {
        !self.0.is_empty() && self.0.iter().all(|(_, c)| c.passed())
    }

    /// Checks made and bytes compared, over every key.
    pub fn totals(&self) -> (usize, u64) {
        self.0.iter().fold((0, 0), |(n, b), (_, c)| {
            (n + c.checks, b + c.bytes.unwrap_or(0))
        })
    }

    /// `{key: {checks, failures, bytes, first_failure}}`.
    pub fn to_json(&self) -> Value {
        Value::Object(
            self.0
                .iter()
                .map(|(k, c)| {
                    (
                        k.clone(),
                        json!({
                            "checks": c.checks,
                            "failures": c.failures,
                            "bytes": c.bytes,
                            "first_failure": c.first_failure,
                        }),
                    )
                })
                .collect(),
        )
    }

    /// The report's line about the checks, and one line per key whose checks failed.
    pub fn text(&self) -> String {
        let (checks, bytes) = self.totals();
        let failed: Vec<&(String, Checked)> =
            self.0.iter().filter(|(_, c)| c.failures > 0).collect();
        let keys: Vec<&str> = self.0.iter().map(|(k, _)| k.as_str()).collect();
        let mut out = if failed.is_empty() && checks > 0 {
            format!(
                "verified: {checks} byte checks passed, {} compared ({})\n",
                mib(bytes),
                keys.join(", ")
            )
        } else {
            format!(
                "NOT VERIFIED: {} of {checks} byte checks failed ({} compared)\n",
                failed.iter().map(|(_, c)| c.failures).sum::<usize>(),
                mib(bytes)
            )
        };
        for (key, c) in failed {
            out.push_str(&format!(
                "  {key}: {} of {} checks failed; first: {}\n",
                c.failures,
                c.checks,
                c.first_failure.as_deref().unwrap_or("?")
            ));
        }
        out
    }
}

fn mib(bytes: u64) -> String {
    if bytes >= 1 << 20 {
        format!("{:.1} MiB", bytes as f64 / f64::from(1 << 20))
    } else {
        format!("{bytes} bytes")
    }
}

/// A byte unlike the file's byte at `offset`: what a check fills the buffer with first, so a
/// read that moved nothing there cannot pass.
pub fn sentinel_for(file: &File, offset: u64) -> Result<u8, String> {
    let mut b = [0u8; 1];
    file.read_exact_at(&mut b, offset)
        .map_err(|e| format!("reading the byte at {offset}: {e}"))?;
    Ok(!b[0])
}

/// Compares device memory with a file, a chunk at a time, through pinned host memory (a
/// device-to-host copy into pageable memory runs at a fraction of the link's speed).
pub struct Comparer {
    want: Vec<u8>,
    got: PinnedBuffer,
}

impl std::fmt::Debug for Comparer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comparer")
            .field("chunk", &self.want.len())
            .finish()
    }
}

impl Comparer {
    /// Buffers for comparing up to `len` bytes a chunk at a time.
    pub fn new(gpu: Arc<dyn GpuRuntime>, len: usize) -> Result<Comparer, String> {
        let chunk = CHUNK.min(len).max(1);
        Ok(Comparer {
            want: vec![0u8; chunk],
            got: PinnedBuffer::new(gpu, chunk).map_err(|e| e.to_string())?,
        })
    }

    /// Compare `len` bytes of `file` from `file_offset` with `dst` from `dst_offset`: `None`
    /// when they are equal, else a description of the first difference. Errors are failures to
    /// read either side, not differences.
    pub fn compare(
        &mut self,
        file: &File,
        file_offset: u64,
        dst: &DeviceBuffer,
        dst_offset: usize,
        len: usize,
    ) -> Result<Option<String>, String> {
        let chunk = self.want.len();
        let mut at = 0usize;
        while at < len {
            let n = chunk.min(len - at);
            let foff = file_offset + at as u64;
            file.read_exact_at(&mut self.want[..n], foff)
                .map_err(|e| format!("check: reading the file at {foff}: {e}"))?;
            let got = &mut self.got.as_mut_slice()[..n];
            dst.read_at(dst_offset + at, got)
                .map_err(|e| format!("check: copying the buffer at {}: {e}", dst_offset + at))?;
            if let Some(i) = self.want[..n]
                .iter()
                .zip(got.iter())
                .position(|(a, b)| a != b)
            {
                let differing = self.want[i..n]
                    .iter()
                    .zip(&got[i..])
                    .filter(|(a, b)| a != b)
                    .count();
                return Ok(Some(format!(
                    "byte {} of the file is {:#04x}, the buffer has {:#04x} ({differing} bytes differ in the {} from there)",
                    foff + i as u64,
                    self.want[i],
                    got[i],
                    mib((n - i) as u64),
                )));
            }
            at += n;
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_counts_checks_bytes_and_the_first_failure() {
        let mut l = Ledger::default();
        assert!(!l.all_passed(), "no check is no verification");
        l.record("first_read", 100, None);
        l.record("read_hot", 100, None);
        assert!(l.all_passed());
        l.record("read_hot", 100, Some("byte 7".into()));
        l.record("read_hot", 100, Some("byte 9".into()));
        assert!(!l.all_passed());
        let hot = l.get("read_hot").unwrap();
        assert_eq!((hot.checks, hot.failures, hot.bytes), (3, 2, Some(300)));
        assert_eq!(hot.first_failure.as_deref(), Some("byte 7"));
        assert_eq!(l.totals(), (4, 400));
        assert!(l.text().starts_with("NOT VERIFIED: 2 of 4"), "{}", l.text());
        assert_eq!(Checked::cell(l.get("read_hot")), "2/3 FAILED");
        assert_eq!(Checked::cell(l.get("first_read")), "1 ok");
        assert_eq!(Checked::cell(None), "-");
        let j = Checked::json_fields(l.get("read_hot"));
        assert_eq!(j["verified"], false);
        assert_eq!(Checked::json_fields(None)["verified"], Value::Null);
    }

    #[test]
    fn the_comparer_finds_the_first_difference() {
        let rt = hipfile_testkit::target::runtime_under_test()
            .unwrap()
            .runtime;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let bytes: Vec<u8> = (0..100_000u32).map(|i| (i * 7) as u8).collect();
        std::fs::write(&path, &bytes).unwrap();
        let file = File::open(&path).unwrap();
        let mut dst = DeviceBuffer::new(rt.clone(), bytes.len()).unwrap();
        dst.write_at(0, &bytes).unwrap();
        let mut c = Comparer::new(rt, bytes.len()).unwrap();
        assert_eq!(c.compare(&file, 0, &dst, 0, bytes.len()).unwrap(), None);
        assert_eq!(c.compare(&file, 500, &dst, 500, 1000).unwrap(), None);
        dst.write_at(70_000, &[!bytes[70_000]]).unwrap();
        let why = c.compare(&file, 0, &dst, 0, bytes.len()).unwrap().unwrap();
        assert!(why.starts_with("byte 70000 "), "{why}");
        assert_eq!(sentinel_for(&file, 3).unwrap(), !bytes[3]);
    }
}
