//! The batch phase: random reads of the hot file through one batch at queue depth 1, 8, 32 and
//! 128 against synchronous reads of the same size from 1, 8 and 16 threads; 64 large reads in
//! one batch (against the hot read); and, as root, cold random reads through a batch against
//! O_DIRECT reads from as many threads.
//!
//! Its reads: many requests in flight through one batch (`hipFileBatchIO*`), and
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

use std::collections::BTreeSet;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::time::Instant;

use hipfile::{AsDeviceMut, BatchRequest, BatchStatus, Driver, FileHandle, RegisteredBuffer};
use hipfile_hip::DeviceBuffer;
use serde_json::{json, Value};

use super::rig::Rig;
use super::rows::human_bytes;
use crate::ceiling;
use crate::measure::{together, Span, SplitMix64, Timed};
use crate::verify::sentinel_for;

/// Entries of a run whose bytes are checked (all of them when the run has fewer).
pub(super) const CHECKED_ENTRIES: usize = 64;

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
fn sync_reads(
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
pub(super) fn spread(n: usize, count: usize) -> Vec<usize> {
    if count >= n {
        return (0..n).collect();
    }
    (1..=count).map(|j| j * n / count - 1).collect()
}

/// `None` when `got` is `want`, else where they first differ (`file_offset`: where `want` is in
/// the file).
pub(super) fn difference(file_offset: u64, want: &[u8], got: &[u8]) -> Option<String> {
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

/// Sizes of the batch phase's random reads.
const BATCH_SIZES: [(usize, &str); 2] = [(4 << 10, "4k"), (64 << 10, "64k")];
/// Queue depths of the batch phase's random reads.
pub(super) const BATCH_DEPTHS: [usize; 4] = [1, 8, 32, 128];
/// Threads of the synchronous reads a batch is read against: the most that do not exceed its
/// queue depth.
const SYNC_THREADS: [usize; 3] = [1, 8, 16];
/// The batch of large reads: at most this many entries of at most this many bytes, over the
/// start of the file.
const LARGE_ENTRIES: usize = 64;
const LARGE_ENTRY_BYTES: usize = 128 << 20;
/// Cold random reads: their size, and the queue depth of the batch and the threads of the
/// O_DIRECT ceiling they are read against.
const COLD_BYTES: usize = 4 << 10;
const COLD_DEPTH: usize = 32;

/// The batch phase of a run: how many reads of what, its keys, and a registered buffer per
/// synchronous thread. Planned whatever phases run (the report pairs its keys).
pub(super) struct BatchPhase {
    /// Random reads per size, queue depth or thread count, and repetition.
    ops: usize,
    /// `(bytes, name, reads per run)` of each size the file holds.
    sizes: Vec<(usize, &'static str, usize)>,
    cold_ops: usize,
    large_entries: usize,
    large_bytes: usize,
    /// The cold batch's key, and its O_DIRECT ceiling's.
    pub(super) cold_key: String,
    pub(super) cold_ceiling_key: String,
    sync_bufs: Vec<RegisteredBuffer>,
}

impl BatchPhase {
    /// The phase for a file of `size` bytes and `--batch-ops` (`asked`; 1000 on the sim,
    /// 20000 on a GPU).
    pub(super) fn plan(asked: Option<usize>, sim: bool, size: usize) -> BatchPhase {
        let ops = asked.unwrap_or(if sim { 1000 } else { 20000 }).max(1);
        let sizes = BATCH_SIZES
            .iter()
            .map(|&(bytes, name)| (bytes, name, ops.min(size / bytes)))
            .filter(|(_, _, ops)| *ops > 0)
            .collect();
        let large_entries = LARGE_ENTRIES.min(size / 4096);
        let large_bytes = match large_entries {
            0 => 0,
            n => (size / n / 4096 * 4096).min(LARGE_ENTRY_BYTES),
        };
        BatchPhase {
            ops,
            sizes,
            cold_ops: ops.min(size / COLD_BYTES),
            large_entries,
            large_bytes,
            cold_key: format!("batch_cold_{}k_qd{COLD_DEPTH}", COLD_BYTES >> 10),
            cold_ceiling_key: format!("ceiling_odirect_{}k_t{COLD_DEPTH}", COLD_BYTES >> 10),
            sync_bufs: Vec::new(),
        }
    }

    /// Before the first repetition: a buffer per synchronous thread, and what the run's notes
    /// say of the phase.
    pub(super) fn prepare(&mut self, rig: &mut Rig<'_>, sim: bool) -> Result<(), String> {
        if let Some(bytes) = self.sizes.iter().map(|(b, _, _)| *b).max() {
            for _ in 0..SYNC_THREADS[SYNC_THREADS.len() - 1] {
                let buf = DeviceBuffer::new(rig.gpu.clone(), bytes).map_err(|e| e.to_string())?;
                self.sync_bufs
                    .push(rig.driver.register_buffer(buf).map_err(|e| e.to_string())?);
            }
        }
        for (bytes, name, ops) in &self.sizes {
            if *ops < self.ops {
                rig.notes.push(format!(
                    "batch: {ops} random {name} reads per run, all the file holds of {bytes} bytes"
                ));
            }
        }
        rig.notes.push(format!(
            "batch{}: random reads per run: {}, {} of each run checked; large: {} x {} in one batch; cold: {} x {} at queue depth {COLD_DEPTH}",
            if sim {
                " (small counts for the simulated GPU)"
            } else {
                ""
            },
            self.sizes
                .iter()
                .map(|(_, name, ops)| format!("{ops} of {name}"))
                .collect::<Vec<_>>()
                .join(", "),
            CHECKED_ENTRIES,
            self.large_entries,
            human_bytes(self.large_bytes),
            self.cold_ops,
            human_bytes(COLD_BYTES),
        ));
        Ok(())
    }

    /// One repetition: the random reads, the batch of large reads, the cold reads.
    pub(super) fn run(&mut self, rig: &mut Rig<'_>) -> Result<(), String> {
        rig.step("batch: random reads");
        rig.make_hot()?;
        self.random_reads(rig)?;
        rig.progress.inc(1);
        rig.step("batch: large reads");
        if self.large_entries > 0 {
            rig.make_hot()?;
            self.large_reads(rig)?;
        }
        rig.progress.inc(1);
        rig.step("batch: cold reads");
        if rig.cold_ok && self.cold_ops > 0 {
            self.cold_reads(rig)?;
        }
        rig.holds_file = false;
        rig.progress.inc(1);
        Ok(())
    }

    /// Each size at each queue depth, and the synchronous reads each depth is read against.
    fn random_reads(&mut self, rig: &mut Rig<'_>) -> Result<(), String> {
        let size = rig.size;
        for &(bytes, name, ops) in &self.sizes {
            let mut synced = BTreeSet::new();
            for depth in BATCH_DEPTHS {
                let offsets = random_offsets(&mut rig.rng, size, bytes, ops);
                let run = Reads::plan(&rig.file, &offsets, bytes, CHECKED_ENTRIES)?.through_batch(
                    rig.driver,
                    &rig.registered.handle,
                    &mut rig.dst,
                    depth,
                )?;
                let label = format!(
                    "batch: random {name} reads, hot, queue depth {depth}, {}",
                    rig.engine
                );
                record_run(
                    rig,
                    &format!("batch_{name}_qd{depth}"),
                    &label,
                    (0, Some(depth.min(ops))),
                    bytes,
                    run,
                );
                let threads = sync_threads_for(depth);
                if synced.insert(threads) {
                    let offsets = random_offsets(&mut rig.rng, size, bytes, ops);
                    let run = sync_reads(
                        &rig.registered.handle,
                        &rig.file,
                        &mut self.sync_bufs[..threads],
                        bytes,
                        &offsets,
                    )?;
                    let label = format!(
                        "sync: random {name} reads, hot, {threads} thread{}, {}",
                        if threads == 1 { "" } else { "s" },
                        rig.engine
                    );
                    record_run(
                        rig,
                        &format!("sync_{name}_t{threads}"),
                        &label,
                        (threads, None),
                        bytes,
                        run,
                    );
                }
            }
        }
        Ok(())
    }

    /// The start of the file in one batch of large reads, checked whole.
    fn large_reads(&self, rig: &mut Rig<'_>) -> Result<(), String> {
        let (entries, bytes) = (self.large_entries, self.large_bytes);
        let offsets: Vec<u64> = (0..entries).map(|i| (i * bytes) as u64).collect();
        let total = entries * bytes;
        rig.dst
            .fill(sentinel_for(&rig.file, 0)?)
            .map_err(|e| e.to_string())?;
        let run = Reads::plan(&rig.file, &offsets, bytes, 0)?.through_batch(
            rig.driver,
            &rig.registered.handle,
            &mut rig.dst,
            entries,
        )?;
        let difference = rig
            .comparer
            .compare(&rig.file, 0, rig.dst.memory(), 0, total)?;
        rig.ledger.record("batch_large", total as u64, difference);
        rig.rows.throughput(
            "batch_large",
            &format!(
                "batch: {entries} reads of {} in one batch, hot, {}",
                human_bytes(bytes),
                rig.engine
            ),
            0,
            total,
            run.timed,
        );
        rig.rows.set_queue_depth("batch_large", entries);
        Ok(())
    }

    /// Cold random reads through a batch, then as many O_DIRECT reads from as many threads as
    /// its queue depth, the page cache dropped before each.
    fn cold_reads(&self, rig: &mut Rig<'_>) -> Result<(), String> {
        let (size, ops) = (rig.size, self.cold_ops);
        let offsets = random_offsets(&mut rig.rng, size, COLD_BYTES, ops);
        // The checked bytes are read from the file before the page cache is dropped.
        let reads = Reads::plan(&rig.file, &offsets, COLD_BYTES, CHECKED_ENTRIES)?;
        rig.cold_start(&self.cold_key)?;
        let run =
            reads.through_batch(rig.driver, &rig.registered.handle, &mut rig.dst, COLD_DEPTH)?;
        let label = format!(
            "batch: random {}k reads, cold (caches dropped), queue depth {COLD_DEPTH}, {}",
            COLD_BYTES >> 10,
            rig.engine
        );
        record_run(
            rig,
            &self.cold_key,
            &label,
            (0, Some(COLD_DEPTH.min(ops))),
            COLD_BYTES,
            run,
        );
        let offsets = random_offsets(&mut rig.rng, size, COLD_BYTES, ops);
        (rig.drop_caches)()?;
        match ceiling::random_direct_reads(&rig.path, &offsets, COLD_BYTES, COLD_DEPTH) {
            Ok((t, latency_us)) => rig.rows.iops(
                &self.cold_ceiling_key,
                &format!(
                    "ceiling: O_DIRECT random {}k reads -> host memory, {COLD_DEPTH} threads, cold",
                    COLD_BYTES >> 10
                ),
                (COLD_DEPTH, None),
                COLD_BYTES,
                latency_us,
                t,
            ),
            Err(why) if rig.rep == 0 => rig
                .notes
                .push(format!("O_DIRECT random-read ceiling skipped: {why}")),
            Err(_) => {}
        }
        Ok(())
    }

    /// Each batch against the synchronous reads of its size from as many threads (at most
    /// 16).
    pub(super) fn pairs(&self) -> Vec<(String, String)> {
        self.sizes
            .iter()
            .flat_map(|(_, name, _)| {
                BATCH_DEPTHS.iter().map(move |depth| {
                    (
                        format!("batch_{name}_qd{depth}"),
                        format!("sync_{name}_t{}", sync_threads_for(*depth)),
                    )
                })
            })
            .collect()
    }

    /// The summary's `batch` object.
    pub(super) fn summary(&self, cold_ran: bool) -> Value {
        json!({
            "ops": self.sizes
                .iter()
                .map(|(_, name, ops)| (name.to_string(), json!(ops)))
                .collect::<serde_json::Map<_, _>>(),
            "queue_depths": BATCH_DEPTHS,
            "sync_threads": SYNC_THREADS,
            "checked_entries": CHECKED_ENTRIES,
            "large": {"entries": self.large_entries, "entry_bytes": self.large_bytes},
            "cold": {
                "ran": cold_ran,
                "ops": self.cold_ops,
                "bytes": COLD_BYTES,
                "queue_depth": COLD_DEPTH,
                "odirect_threads": COLD_DEPTH,
            },
        })
    }
}

/// Put a run of reads into its row (`threads`, `queue_depth`) and its checks into the ledger.
fn record_run(
    rig: &mut Rig<'_>,
    key: &str,
    label: &str,
    (threads, queue_depth): (usize, Option<usize>),
    bytes: usize,
    run: Run,
) {
    for difference in run.checks {
        rig.ledger.record(key, bytes as u64, difference);
    }
    rig.rows.iops(
        key,
        label,
        (threads, queue_depth),
        bytes,
        run.latency_us,
        run.timed,
    );
}

/// `n` multiples of 4096 at which `bytes` lie within the first `size` bytes.
fn random_offsets(rng: &mut SplitMix64, size: usize, bytes: usize, n: usize) -> Vec<u64> {
    let limit = (size - bytes) as u64;
    (0..n).map(|_| rng.aligned_below(limit, 4096)).collect()
}

/// The synchronous thread count a batch of `depth` entries is read against: the most of
/// [`SYNC_THREADS`] that does not exceed it.
pub(super) fn sync_threads_for(depth: usize) -> usize {
    SYNC_THREADS
        .iter()
        .copied()
        .filter(|t| *t <= depth)
        .max()
        .unwrap_or(SYNC_THREADS[0])
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
