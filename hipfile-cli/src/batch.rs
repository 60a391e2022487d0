//! The batch phase's reads: many requests in flight through one batch (`hipFileBatchIO*`), and
//! the synchronous reads of the same size from several threads they are read against.
//!
//! A batch at queue depth `qd` is driven as cuFile's batch users drive one: `qd` entries are
//! submitted, then the caller reaps with `wait(1, qd)` and submits as many new entries as came
//! back, until every read of the run is done. An entry's latency runs from just before the
//! submission that carried it to the return of the reap that reported it. Entry `i` reads into
//! region `i` of the registered buffer, so no two entries in flight share memory, and what a
//! checked entry left is still there when the run ends.
//!
//! The batch is the facade's ([`hipfile::Driver::batch`]): the registered buffer is cut into one
//! exclusive region per entry ([`hipfile::DeviceSliceMut::chunks_mut`]), each lent to the batch
//! for the whole run, and the batch is destroyed (its entries finished or withdrawn) before the
//! regions are read back.
//!
//! Checks ([`Reads`]): the file's bytes of a sample of entries (evenly spread, the last among
//! them) are read when the reads are planned; before the clock starts, those entries' regions
//! get the complement of those bytes, and after the run each region is compared with them. A
//! read that moved nothing, or the wrong bytes, cannot pass. The synchronous threads check the
//! last read of each thread the same way (the latency phase's check).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use hipfile::{AsDeviceMut, BatchRequest, BatchStatus, Driver, FileHandle, RegisteredBuffer};

use crate::measure::{together, Span, Timed};

/// Entries of a run whose bytes are checked (all of them when the run has fewer).
pub const CHECKED_ENTRIES: usize = 64;

/// What a run of reads gave.
#[derive(Debug)]
pub struct Run {
    /// Microseconds of each read: submission to reap (batch), or the call (synchronous).
    pub latency_us: Vec<f64>,
    /// The whole run.
    pub timed: Timed,
    /// One per checked read: `None` when it left the file's bytes, else the first difference.
    pub checks: Vec<Option<String>>,
}

/// Random reads planned: where each reads, and the file's bytes of the entries to check.
#[derive(Debug)]
pub struct Reads<'a> {
    offsets: &'a [u64],
    bytes: usize,
    /// `(entry, the file's bytes there)`.
    checked: Vec<(usize, Vec<u8>)>,
}

impl<'a> Reads<'a> {
    /// Reads of `bytes` at each of `offsets`, `checks` of them checked. Reads the checked
    /// entries' bytes from `file` now: a cold run drops the page cache after this.
    pub fn plan(
        file: &File,
        offsets: &'a [u64],
        bytes: usize,
        checks: usize,
    ) -> Result<Reads<'a>, String> {
        let checked = spread(offsets.len(), checks)
            .into_iter()
            .map(|i| {
                let mut want = vec![0u8; bytes];
                file.read_exact_at(&mut want, offsets[i])
                    .map_err(|e| format!("check: reading the file at {}: {e}", offsets[i]))?;
                Ok((i, want))
            })
            .collect::<Result<_, String>>()?;
        Ok(Reads {
            offsets,
            bytes,
            checked,
        })
    }

    /// Run the reads through one batch of `queue_depth` entries of `driver`, entry `i` into
    /// `[i * bytes, (i + 1) * bytes)` of `dst`.
    pub fn through_batch(
        &self,
        driver: &Driver,
        handle: &FileHandle,
        dst: &mut RegisteredBuffer,
        queue_depth: usize,
    ) -> Result<Run, String> {
        let (n, bytes) = (self.offsets.len(), self.bytes);
        if n == 0 || n.checked_mul(bytes).map_or(true, |b| b > dst.len()) {
            return Err(format!(
                "{n} reads of {bytes} bytes do not fit a buffer of {} bytes",
                dst.len()
            ));
        }
        for (i, want) in &self.checked {
            let sentinel: Vec<u8> = want.iter().map(|b| !b).collect();
            dst.write_at(i * bytes, &sentinel)
                .map_err(|e| format!("check: the sentinel of entry {i}: {e}"))?;
        }
        let depth = queue_depth.clamp(1, n);
        // One region of the buffer per entry, each lent to the batch for the whole run.
        let mut regions: Vec<_> = dst.as_device_mut().chunks_mut(bytes).take(n).collect();
        let mut submitted_at = vec![Instant::now(); n];
        let mut latency_us = Vec::with_capacity(n);
        let span = Span::start();
        driver
            .batch(depth, |batch| -> Result<(), String> {
                let mut free = regions.iter_mut().enumerate();
                let mut room = depth;
                while latency_us.len() < n {
                    let mut requests = Vec::with_capacity(room);
                    let mut first = None;
                    for (i, region) in free.by_ref().take(room) {
                        first.get_or_insert(i);
                        requests.push(
                            BatchRequest::read(handle, region, self.offsets[i])
                                .map_err(|e| format!("entry {i}: {e}"))?
                                .cookie(i),
                        );
                    }
                    if let Some(first) = first {
                        let count = requests.len();
                        let now = Instant::now();
                        batch
                            .submit(requests)
                            .map_err(|e| format!("submitting {count} entries: {e}"))?;
                        submitted_at[first..first + count].fill(now);
                        room -= count;
                    }
                    let events = batch
                        .wait(1, depth, None)
                        .map_err(|e| format!("reaping: {e}"))?;
                    let reaped = Instant::now();
                    if events.is_empty() {
                        return Err(format!(
                            "reaping: no entry came back with {} outstanding",
                            batch.outstanding()
                        ));
                    }
                    for event in events {
                        let i = event.cookie;
                        match (event.status, &event.result) {
                            (BatchStatus::Complete, Ok(got)) if *got == bytes && i < n => {}
                            (status, result) => {
                                return Err(format!(
                                    "batch entry {i} (a read of {bytes} bytes at {}): \
                                     {status:?}, {result:?}",
                                    self.offsets.get(i).copied().unwrap_or(u64::MAX)
                                ))
                            }
                        }
                        latency_us.push(reaped.duration_since(submitted_at[i]).as_secs_f64() * 1e6);
                        room += 1;
                    }
                }
                Ok(())
            })
            .map_err(|e| format!("a batch of {depth} entries: {e}"))??;
        let timed = span.finish();
        drop(regions);
        let mut got = vec![0u8; bytes];
        let mut checks = Vec::with_capacity(self.checked.len());
        for (i, want) in &self.checked {
            dst.read_at(i * bytes, &mut got)
                .map_err(|e| format!("check: copying entry {i} back: {e}"))?;
            checks.push(difference(self.offsets[*i], want, &got));
        }
        Ok(Run {
            latency_us,
            timed,
            checks,
        })
    }
}

/// Read `bytes` at each of `offsets` with synchronous [`FileHandle::read`] calls, one thread per
/// buffer of `bufs` (thread `t` reads the `t`th share of `offsets`, in order, into the start of
/// its buffer), the threads started together. The last read of each thread is checked: the
/// complement of the file's bytes is put in its buffer just before it.
pub fn sync_reads(
    handle: &FileHandle,
    file: &File,
    bufs: &mut [RegisteredBuffer],
    bytes: usize,
    offsets: &[u64],
) -> Result<Run, String> {
    let (n, threads) = (offsets.len(), bufs.len().max(1));
    let mut items = Vec::with_capacity(threads);
    for (t, buf) in bufs.iter_mut().enumerate() {
        let share = &offsets[t * n / threads..(t + 1) * n / threads];
        let Some(&last) = share.last() else {
            continue;
        };
        let mut want = vec![0u8; bytes];
        file.read_exact_at(&mut want, last)
            .map_err(|e| format!("check: reading the file at {last}: {e}"))?;
        items.push((buf, share, want));
    }
    let (timed, per_thread) = together(items, |(buf, share, want)| {
        let sentinel: Vec<u8> = want.iter().map(|b| !b).collect();
        let mut samples = Vec::with_capacity(share.len());
        for (k, &off) in share.iter().enumerate() {
            if k + 1 == share.len() {
                buf.write_at(0, &sentinel)
                    .map_err(|e| format!("check: the sentinel: {e}"))?;
            }
            let window = buf
                .slice_mut(..bytes)
                .map_err(|e| format!("read of {bytes} at {off}: {e}"))?;
            let start = Instant::now();
            let got = handle
                .read(window, off)
                .map_err(|e| format!("read of {bytes} at {off}: {e}"))?;
            samples.push(start.elapsed().as_secs_f64() * 1e6);
            if got != bytes {
                return Err(format!("read of {bytes} at {off}: {got} bytes"));
            }
        }
        let mut got = vec![0u8; bytes];
        buf.read_at(0, &mut got)
            .map_err(|e| format!("check: copying the buffer back: {e}"))?;
        Ok((samples, difference(share[share.len() - 1], &want, &got)))
    })?;
    let mut run = Run {
        latency_us: Vec::with_capacity(n),
        timed,
        checks: Vec::with_capacity(per_thread.len()),
    };
    for (samples, check) in per_thread {
        run.latency_us.extend(samples);
        run.checks.push(check);
    }
    Ok(run)
}

/// `count` indices of `0..n`, evenly spread, the last one among them (all of `0..n` when
/// `count >= n`).
pub fn spread(n: usize, count: usize) -> Vec<usize> {
    if count >= n {
        return (0..n).collect();
    }
    (1..=count).map(|j| j * n / count - 1).collect()
}

/// `None` when `got` is `want`, else where they first differ (`file_offset`: where `want` is in
/// the file).
fn difference(file_offset: u64, want: &[u8], got: &[u8]) -> Option<String> {
    let i = want.iter().zip(got).position(|(a, b)| a != b)?;
    Some(format!(
        "byte {} of the file is {:#04x}, the read left {:#04x} ({} of {} bytes differ)",
        file_offset + i as u64,
        want[i],
        got[i],
        want.iter().zip(got).filter(|(a, b)| a != b).count(),
        want.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checked_entries_are_spread_and_end_with_the_last() {
        assert_eq!(spread(10, 3), [2, 5, 9]);
        assert_eq!(spread(4, 64), [0, 1, 2, 3]);
        assert_eq!(spread(1000, 64).len(), 64);
        assert_eq!(spread(1000, 64).last(), Some(&999));
        assert!(spread(5, 0).is_empty());
    }

    #[test]
    fn a_difference_names_the_file_byte() {
        assert_eq!(difference(100, &[1, 2, 3], &[1, 2, 3]), None);
        let why = difference(100, &[1, 2, 3], &[1, 9, 8]).unwrap();
        assert_eq!(
            why,
            "byte 101 of the file is 0x02, the read left 0x09 (2 of 3 bytes differ)"
        );
    }
}
