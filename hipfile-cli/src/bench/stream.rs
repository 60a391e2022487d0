//! The async phase: stream-ordered reads of the hot file on 1 and 4 streams against the hot
//! read and against upstream's design replayed on the same streams, their submission cost, the
//! same reads as synchronous calls, and their overlap with a GPU workload.
//!
//! Its runs: the whole file read as stream-ordered ops (`hipFileReadAsync`,
//! [`hipfile::Driver::on_stream`]) on one or several streams, the same reads in upstream
//! hipFile's design ([`HostFunctionReader`]: a `pread` in a host function into pinned memory,
//! then an asynchronous copy, on the stream), and a GPU workload (fills of a device buffer on a
//! stream of its own) timed alone and queued together with the reads.
//!
//! Ops are `op_bytes` long (the last one shorter when the file is not a multiple) and op `i`
//! reads the file's bytes at `i * op_bytes` into the same offset of the registered buffer, which
//! is as large as the file: every op has a region of its own, so no window of reused regions is
//! needed and every op can be in flight at once. Ops are dealt to the streams round robin from
//! one thread. A run is timed from the first submission until every op ended and every stream
//! was synchronized; each `io.read` call is timed too (the submission cost).
//!
//! Checks: before a run the whole buffer is filled with the complement of the file's first byte;
//! after it, the regions of [`CHECKED_OPS`] ops (evenly spread, the last among them) are compared
//! with the file. An op that moved nothing or the wrong bytes cannot pass.

use std::fs::File;
use std::sync::Arc;
use std::time::Instant;

use hipfile::{AsDeviceMut, Driver, FileHandle, RegisteredBuffer, StreamIo, StreamOp};
use hipfile_hip::{
    DeviceBuffer, DeviceRange, GpuRuntime, HostFunctionReader, OwnedStream, StreamRef,
};

use serde_json::{json, Value};

use super::batch::spread;
use super::rig::Rig;
use super::rows::human_bytes;
use crate::measure::{Span, Timed};
use crate::report::{Measurement, Versus};
use crate::verify::{sentinel_for, Comparer};

/// Ops of a run whose regions are compared with the file (all of them when there are fewer).
const CHECKED_OPS: usize = 16;

/// What a run of stream-ordered reads gave.
#[derive(Debug)]
struct StreamRun {
    /// First submission to the end of the last op, streams synchronized.
    pub timed: Timed,
    /// Microseconds of each op's submission (`io.read`), on the submitting thread.
    pub submit_us: Vec<f64>,
}

/// The ops of a whole-file read: `(file offset, bytes)` each.
fn plan(size: usize, op_bytes: usize) -> Vec<(u64, usize)> {
    let op = op_bytes.clamp(1, size.max(1));
    (0..size)
        .step_by(op)
        .map(|at| (at as u64, op.min(size - at)))
        .collect()
}

/// Fill `dst` with a byte unlike the file's first one, so that an op that moved nothing is seen.
fn arm(file: &File, dst: &mut RegisteredBuffer) -> Result<(), String> {
    dst.fill(sentinel_for(file, 0)?)
        .map_err(|e| format!("check: the sentinel: {e}"))
}

/// Compare the regions of the sampled ops of `ops` with the file: one `(bytes, difference)` per
/// checked op.
fn check(
    file: &File,
    dst: &RegisteredBuffer,
    comparer: &mut Comparer,
    ops: &[(u64, usize)],
) -> Result<Vec<(u64, Option<String>)>, String> {
    spread(ops.len(), CHECKED_OPS)
        .into_iter()
        .map(|i| {
            let (at, len) = ops[i];
            let difference = comparer.compare(file, at, dst.memory(), at as usize, len)?;
            Ok((len as u64, difference))
        })
        .collect()
}

/// What [`on_streams`] lends the `StreamIo`s to.
type WithStreams<'f, 'buf, 's, R> = Box<dyn FnOnce(&mut [&mut StreamIo<'buf, 's>]) -> R + 'f>;

/// Lend one [`StreamIo`] per stream of `streams` (nested [`Driver::on_stream`] calls) to `f`.
/// Returns when every op queued through them has ended.
fn on_streams<'buf, 's, R>(
    driver: &Driver,
    streams: &'s [StreamRef<'s>],
    ios: Vec<&mut StreamIo<'buf, 's>>,
    f: WithStreams<'_, 'buf, 's, R>,
) -> R {
    match streams.split_first() {
        None => {
            let mut ios = ios;
            f(&mut ios)
        }
        Some((first, rest)) => driver.on_stream(first, move |io| {
            // The borrows of the outer levels, shortened to this level's.
            let mut inner: Vec<&mut StreamIo<'buf, 's>> = ios;
            inner.push(io);
            on_streams(driver, rest, inner, f)
        }),
    }
}

/// Read the file as `ops` stream-ordered reads through `driver`, dealt round robin to
/// `streams`, op `i` into its own region of `dst`.
fn ours(
    driver: &Driver,
    handle: &FileHandle,
    dst: &mut RegisteredBuffer,
    ops: &[(u64, usize)],
    streams: &[StreamRef<'_>],
) -> Result<StreamRun, String> {
    let end = ops.last().map_or(0, |(at, len)| *at as usize + len);
    if streams.is_empty() || end > dst.len() {
        return Err(format!(
            "{} ops on {} streams do not fit a buffer of {} bytes",
            ops.len(),
            streams.len(),
            dst.len()
        ));
    }
    let op_bytes = ops.first().map_or(1, |(_, len)| *len);
    let mut regions: Vec<_> = dst
        .as_device_mut()
        .chunks_mut(op_bytes)
        .take(ops.len())
        .collect();
    let mut submit_us = Vec::with_capacity(ops.len());
    let span = Span::start();
    let queued: Result<Vec<StreamOp>, String> = on_streams(
        driver,
        streams,
        Vec::with_capacity(streams.len()),
        Box::new(|ios| {
            let mut queued = Vec::with_capacity(ops.len());
            for (i, ((at, len), region)) in ops.iter().zip(regions.iter_mut()).enumerate() {
                let io = &mut ios[i % streams.len()];
                let start = Instant::now();
                let op = io
                    .read(handle, region, *at)
                    .map_err(|e| format!("queueing a read of {len} bytes at {at}: {e}"))?;
                submit_us.push(start.elapsed().as_secs_f64() * 1e6);
                queued.push(op);
            }
            Ok(queued)
        }),
    );
    let queued = queued?;
    for s in streams {
        s.synchronize()
            .map_err(|e| format!("synchronizing a stream: {e}"))?;
    }
    let timed = span.finish();
    drop(regions);
    for (op, (at, len)) in queued.iter().zip(ops) {
        match op.result() {
            Some(Ok(n)) if n == *len => {}
            other => return Err(format!("the read of {len} bytes at {at} ended {other:?}")),
        }
    }
    Ok(StreamRun { timed, submit_us })
}

/// Read the file as the same `ops` through synchronous calls (`hipFileRead`), one after another
/// on this thread, op `i` into its own region of `dst`: what the stream-ordered ops on one stream
/// cost without the stream, so the stream's own share of their time shows.
fn sync_ops(
    handle: &FileHandle,
    dst: &mut RegisteredBuffer,
    ops: &[(u64, usize)],
) -> Result<Timed, String> {
    let op_bytes = ops.first().map_or(1, |(_, len)| *len);
    let mut regions = dst.as_device_mut().chunks_mut(op_bytes);
    let span = Span::start();
    for (at, len) in ops {
        let region = regions
            .next()
            .ok_or_else(|| format!("no region of the buffer left for the read at {at}"))?;
        match handle.read(region, *at) {
            Ok(n) if n == *len => {}
            other => return Err(format!("the read of {len} bytes at {at} ended {other:?}")),
        }
    }
    Ok(span.finish())
}

/// Read the file as `ops` reads in upstream's design through `reader`, dealt round robin to
/// `streams`, op `i` into its own region of `dst`.
fn replay(
    reader: &HostFunctionReader,
    gpu: &Arc<dyn GpuRuntime>,
    file: &Arc<File>,
    dst: &mut RegisteredBuffer,
    ops: &[(u64, usize)],
    streams: &[StreamRef<'_>],
) -> Result<StreamRun, String> {
    let whole = DeviceRange::query(gpu, dst.memory().ptr(), dst.len())
        .map_err(|e| format!("the buffer: {e}"))?;
    let failed_before = reader.failed_reads();
    let mut submit_us = Vec::with_capacity(ops.len());
    let span = Span::start();
    for (i, &(at, len)) in ops.iter().enumerate() {
        let region = whole
            .slice(at as usize, len)
            .ok_or_else(|| format!("a read of {len} bytes at {at} does not fit the buffer"))?;
        let start = Instant::now();
        reader
            .read_on(&streams[i % streams.len()], Arc::clone(file), at, &region)
            .map_err(|e| format!("queueing a read of {len} bytes at {at}: {e}"))?;
        submit_us.push(start.elapsed().as_secs_f64() * 1e6);
    }
    for s in streams {
        s.synchronize()
            .map_err(|e| format!("synchronizing a stream: {e}"))?;
    }
    let timed = span.finish();
    if reader.failed_reads() > failed_before {
        return Err(format!(
            "{} reads in host functions failed, the first: {}",
            reader.failed_reads() - failed_before,
            reader.first_failure().unwrap_or_default()
        ));
    }
    Ok(StreamRun { timed, submit_us })
}

/// A GPU workload of known size: `fills` fills of a device buffer, queued on a stream of its own.
/// Fill `k` writes `value(k)`, so after the last one the buffer holds `value(fills - 1)`.
#[derive(Debug)]
struct Workload {
    buffer: DeviceBuffer,
    range: DeviceRange,
}

impl Workload {
    /// A workload buffer of `bytes` bytes on `gpu`.
    pub fn new(gpu: &Arc<dyn GpuRuntime>, bytes: usize) -> Result<Workload, String> {
        let buffer = DeviceBuffer::new(Arc::clone(gpu), bytes)
            .map_err(|e| format!("the workload's buffer: {e}"))?;
        let range = DeviceRange::query(gpu, buffer.ptr(), bytes)
            .map_err(|e| format!("the workload's buffer: {e}"))?;
        Ok(Workload { buffer, range })
    }

    /// Bytes one fill writes.
    pub fn bytes(&self) -> usize {
        self.range.len()
    }

    /// The byte fill `k` writes.
    fn value(k: usize) -> u8 {
        (k % 251) as u8 + 1
    }

    /// Make the buffer hold a byte unlike the one `fills` fills leave (untimed).
    pub fn arm(&mut self, fills: usize) -> Result<(), String> {
        self.buffer
            .fill(!Self::value(fills.max(1) - 1))
            .map_err(|e| format!("the workload's buffer: {e}"))
    }

    /// Queue `fills` fills on `stream`.
    pub fn queue(&self, stream: &StreamRef<'_>, fills: usize) -> Result<(), String> {
        for k in 0..fills.max(1) {
            stream
                .fill_async(&self.range, Self::value(k))
                .map_err(|e| format!("queueing fill {k} of the workload: {e}"))?;
        }
        Ok(())
    }

    /// Whether the buffer holds what `fills` fills leave: its first and last 4 KiB and one in
    /// the middle are read back. `None` when they do; else the first difference.
    pub fn check(&self, fills: usize) -> Result<Option<String>, String> {
        let want = Self::value(fills.max(1) - 1);
        let len = self.bytes();
        let window = len.min(4096);
        let mut got = vec![0u8; window];
        for at in [0, (len - window) / 2, len - window] {
            self.buffer
                .read_at(at, &mut got)
                .map_err(|e| format!("check: the workload's buffer at {at}: {e}"))?;
            if let Some(i) = got.iter().position(|b| *b != want) {
                return Ok(Some(format!(
                    "byte {} of the workload's buffer is {:#04x}, its last fill writes {want:#04x}",
                    at + i,
                    got[i]
                )));
            }
        }
        Ok(None)
    }
}

/// Fills of the workload that take about as long as the reads alone: `reads_s` over the time of
/// one fill, at least 1, at most 100,000.
fn fills_for(reads_s: f64, one_fill_s: f64) -> usize {
    if one_fill_s.is_nan() || one_fill_s <= 0.0 || !reads_s.is_finite() {
        return 1;
    }
    ((reads_s / one_fill_s).round() as usize).clamp(1, 100_000)
}

/// Stream counts of the async phase's reads (ours and the replay of upstream's design).
const ASYNC_STREAMS: [usize; 2] = [1, 4];
/// Pieces of pinned memory of the replay per stream of the most streams: the replay's ops in
/// flight at once.
const REPLAY_PIECES_PER_STREAM: usize = 2;
/// Bytes of the GPU workload's buffer (or the file size when smaller).
const WORKLOAD_BYTES: usize = 1 << 30;

/// The async phase of a run: its ops, and (when it runs) what it runs on. Planned whatever
/// phases run (the report pairs its keys).
pub(super) struct AsyncPhase {
    ops: Vec<(u64, usize)>,
    op_bytes: usize,
    replay_pieces: usize,
    kit: Option<Kit>,
    /// Fills of the workload, sized in the first repetition.
    workload_fills: Option<usize>,
}

/// What the phase runs on: its streams (made as an application makes its own), the replay's
/// pinned pieces, and the GPU workload with a stream of its own, not ordered with the null
/// stream; the file shared with the replay's host functions.
struct Kit {
    streams: Vec<OwnedStream>,
    reader: HostFunctionReader,
    workload: Workload,
    workload_stream: OwnedStream,
    shared_file: Arc<File>,
}

impl AsyncPhase {
    /// The phase for a file of `size` bytes read as ops of `op_bytes` (`--async-op-size`).
    pub(super) fn plan(size: usize, op_bytes: usize) -> AsyncPhase {
        let ops = plan(size, op_bytes);
        let op_bytes = ops.first().map_or(0, |(_, len)| *len);
        let max_streams = ASYNC_STREAMS[ASYNC_STREAMS.len() - 1];
        let replay_pieces = (REPLAY_PIECES_PER_STREAM * max_streams).min(ops.len());
        AsyncPhase {
            ops,
            op_bytes,
            replay_pieces,
            kit: None,
            workload_fills: None,
        }
    }

    /// Before the first repetition: the streams, the replay's memory, the workload, and what
    /// the run's notes say of the phase.
    pub(super) fn prepare(&mut self, rig: &mut Rig<'_>) -> Result<(), String> {
        let gpu = &rig.gpu;
        let max_streams = ASYNC_STREAMS[ASYNC_STREAMS.len() - 1];
        let streams = (0..max_streams)
            .map(|_| OwnedStream::new(gpu.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("a stream for the async phase: {e}"))?;
        let reader = HostFunctionReader::new(gpu.clone(), self.op_bytes, self.replay_pieces)
            .map_err(|e| format!("the replay's pinned memory: {e}"))?;
        let workload = Workload::new(gpu, rig.size.min(WORKLOAD_BYTES))?;
        let workload_stream = OwnedStream::new_independent(gpu.clone())
            .map_err(|e| format!("the workload's stream: {e}"))?;
        let shared_file = Arc::new(rig.file.try_clone().map_err(|e| e.to_string())?);
        rig.notes.push(format!(
            "async: {} stream-ordered reads of {} per run, each into a region of its own of the registered buffer, dealt round robin to {} streams; {} of each run checked; replay: {} pinned pieces of {} (its ops in flight at most); overlap: the reads on 1 stream, the workload fills of {} on an independent stream",
            self.ops.len(),
            human_bytes(self.op_bytes),
            ASYNC_STREAMS.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(" and "),
            CHECKED_OPS.min(self.ops.len()),
            self.replay_pieces,
            human_bytes(self.op_bytes),
            human_bytes(workload.bytes()),
        ));
        self.kit = Some(Kit {
            streams,
            reader,
            workload,
            workload_stream,
            shared_file,
        });
        Ok(())
    }

    /// One repetition, when prepared: ours on 1 and 4 streams, the same reads synchronous, the
    /// replay, and the overlap with the workload.
    pub(super) fn run(&mut self, rig: &mut Rig<'_>) -> Result<(), String> {
        let Some(kit) = &mut self.kit else {
            return Ok(());
        };
        let ops = &self.ops;
        let op_bytes = human_bytes(self.op_bytes);
        let refs: Vec<StreamRef<'_>> = kit.streams.iter().map(StreamRef::of).collect();
        let mut reads_alone_s = None;
        rig.step("async: stream-ordered reads");
        rig.make_hot()?;
        for k in ASYNC_STREAMS {
            let key = format!("async_s{k}");
            let run = checked(rig, &key, ops, |rig| ours_on(rig, ops, &refs[..k]))?;
            if k == 1 {
                reads_alone_s = Some(run.timed.seconds);
            }
            let streams = if k == 1 { "" } else { "s" };
            let label = format!(
                "async: stream-ordered reads of {op_bytes}, hot, {k} stream{streams}, {}",
                rig.engine
            );
            rig.rows
                .throughput(&key, &label, 0, rig.size, run.timed.clone());
            rig.rows.latency(
                &format!("async_submit_s{k}"),
                &format!("async: submission of a {op_bytes} read (io.read), {k} stream{streams}"),
                self.op_bytes,
                run.submit_us,
                run.timed,
            );
        }
        rig.step("async: the same reads, synchronous");
        let timed = checked(rig, "async_sync_ops", ops, |rig| {
            sync_ops(&rig.registered.handle, &mut rig.dst, ops)
        })?;
        let label = format!(
            "async: the same reads of {op_bytes} as synchronous calls, one after another, {}",
            rig.engine
        );
        rig.rows
            .throughput("async_sync_ops", &label, 0, rig.size, timed);
        rig.progress.inc(1);
        rig.step("async: upstream's design replayed");
        rig.make_hot()?;
        for k in ASYNC_STREAMS {
            let key = format!("replay_s{k}");
            let (reader, file) = (&kit.reader, &kit.shared_file);
            let run = checked(rig, &key, ops, |rig| {
                replay(reader, &rig.gpu, file, &mut rig.dst, ops, &refs[..k])
            })?;
            rig.rows.throughput(
                &key,
                &format!(
                    "replay: upstream's design (host function pread into pinned + async copy), {op_bytes} ops, hot, {k} stream{}",
                    if k == 1 { "" } else { "s" }
                ),
                1,
                rig.size,
                run.timed,
            );
        }
        rig.progress.inc(1);
        rig.step("async: overlap with a GPU workload");
        rig.make_hot()?;
        let fills = size_workload(&mut self.workload_fills, kit, rig, reads_alone_s)?;
        let workload = (&mut kit.workload, &kit.workload_stream);
        overlap(workload, rig, ops, &refs[..1], fills)?;
        rig.holds_file = false;
        rig.progress.inc(1);
        Ok(())
    }

    /// Each stream count against the hot read, its replay of upstream's design too, and the
    /// same reads made synchronously.
    pub(super) fn versus_hot() -> Vec<(String, String)> {
        let mut pairs = Vec::new();
        for k in ASYNC_STREAMS {
            pairs.push((format!("async_s{k}"), "read_hot".into()));
            pairs.push((format!("replay_s{k}"), "read_hot".into()));
        }
        pairs.push(("async_sync_ops".into(), "read_hot".into()));
        pairs
    }

    /// Each stream count also against the replay of upstream's design on as many streams; one
    /// stream also against the same reads made synchronously, one after another.
    pub(super) fn versus_replay() -> Vec<(String, String)> {
        let mut pairs: Vec<(String, String)> = ASYNC_STREAMS
            .iter()
            .map(|k| (format!("async_s{k}"), format!("replay_s{k}")))
            .collect();
        pairs.push(("async_s1".into(), "async_sync_ops".into()));
        pairs
    }

    /// The summary's `async` object, with the overlap the report found.
    pub(super) fn summary(&self, overlap: Option<f64>) -> Value {
        json!({
            "op_bytes": self.op_bytes,
            "ops": self.ops.len(),
            "streams": ASYNC_STREAMS,
            "checked_ops": CHECKED_OPS.min(self.ops.len()),
            "replay_pieces": self.replay_pieces,
            "workload_fills": self.workload_fills,
            "overlap": overlap.map(|x| (x * 1000.0).round() / 1000.0),
        })
    }
}

/// The fills of the workload: as many as take about as long as the reads on 1 stream
/// (`reads_alone_s`), sized once (`sized`), in the first repetition.
fn size_workload(
    sized: &mut Option<usize>,
    kit: &Kit,
    rig: &mut Rig<'_>,
    reads_alone_s: Option<f64>,
) -> Result<usize, String> {
    if let Some(n) = *sized {
        return Ok(n);
    }
    let workload_ref = StreamRef::of(&kit.workload_stream);
    // One fill alone, after one that warms the stream up, sizes the workload.
    kit.workload.queue(&workload_ref, 1)?;
    settle(&workload_ref)?;
    let span = Span::start();
    kit.workload.queue(&workload_ref, 1)?;
    settle(&workload_ref)?;
    let one = span.finish().seconds;
    let n = fills_for(reads_alone_s.unwrap_or(0.0), one);
    rig.notes.push(format!(
        "async overlap: one fill of {} took {:.3} ms; the workload is {n} fills",
        human_bytes(kit.workload.bytes()),
        one * 1e3
    ));
    *sized = Some(n);
    Ok(n)
}

/// Synchronize the workload's stream.
fn settle(workload: &StreamRef<'_>) -> Result<(), String> {
    workload
        .synchronize()
        .map_err(|e| format!("synchronizing the workload's stream: {e}"))
}

/// Arm the buffer (see [`arm`]), run `reads` with the rig, and put the check of the regions of
/// `ops` into the ledger under `key`; what `reads` returned.
fn checked<R>(
    rig: &mut Rig<'_>,
    key: &str,
    ops: &[(u64, usize)],
    reads: impl FnOnce(&mut Rig<'_>) -> Result<R, String>,
) -> Result<R, String> {
    arm(&rig.file, &mut rig.dst)?;
    let answer = reads(rig)?;
    for (bytes, difference) in check(&rig.file, &rig.dst, &mut rig.comparer, ops)? {
        rig.ledger.record(key, bytes, difference);
    }
    Ok(answer)
}

/// [`ours`] through the rig's registration into its buffer, on `streams`.
fn ours_on(
    rig: &mut Rig<'_>,
    ops: &[(u64, usize)],
    streams: &[StreamRef<'_>],
) -> Result<StreamRun, String> {
    ours(
        rig.driver,
        &rig.registered.handle,
        &mut rig.dst,
        ops,
        streams,
    )
}

/// The workload of `fills` alone, the reads on one stream (`one`) alone, then both queued at
/// once.
fn overlap(
    (workload, workload_stream): (&mut Workload, &OwnedStream),
    rig: &mut Rig<'_>,
    ops: &[(u64, usize)],
    one: &[StreamRef<'_>],
    fills: usize,
) -> Result<(), String> {
    let workload_ref = StreamRef::of(workload_stream);
    let workload_label = format!(
        "overlap: GPU workload alone ({fills} fills of {}, independent stream)",
        human_bytes(workload.bytes())
    );
    workload.arm(fills)?;
    let span = Span::start();
    workload.queue(&workload_ref, fills)?;
    settle(&workload_ref)?;
    rig.rows.duration(
        "async_overlap_workload",
        &workload_label,
        workload.bytes() * fills,
        span.finish(),
    );
    rig.ledger.record(
        "async_overlap_workload",
        workload.bytes() as u64,
        workload.check(fills)?,
    );

    let run = checked(rig, "async_overlap_reads", ops, |rig| {
        ours_on(rig, ops, one)
    })?;
    let label = format!(
        "overlap: stream-ordered reads alone, 1 stream, {}",
        rig.engine
    );
    rig.rows
        .duration("async_overlap_reads", &label, rig.size, run.timed);

    workload.arm(fills)?;
    let together = checked(rig, "async_overlap_together", ops, |rig| {
        let span = Span::start();
        workload.queue(&workload_ref, fills)?;
        ours_on(rig, ops, one)?;
        settle(&workload_ref)?;
        Ok(span.finish())
    })?;
    rig.ledger.record(
        "async_overlap_together",
        workload.bytes() as u64,
        workload.check(fills)?,
    );
    let label = format!(
        "overlap: the workload, then the reads queued, both at once, {}",
        rig.engine
    );
    rig.rows.duration(
        "async_overlap_together",
        &label,
        rig.size + workload.bytes() * fills,
        together,
    );
    Ok(())
}

/// Read the run of the workload and the reads together against the sum of their times alone:
/// its `versus` is that sum, so its `versus_ratio` is the overlap (below 1: they overlapped).
/// Returns the overlap.
pub(super) fn overlap_versus(rows: &mut [Measurement]) -> Option<f64> {
    let alone = |key: &str| {
        rows.iter()
            .find(|m| m.key == key)
            .map(|m| m.figure.headline())
    };
    let sum = alone("async_overlap_workload")? + alone("async_overlap_reads")?;
    let together = rows
        .iter_mut()
        .find(|m| m.key == "async_overlap_together")?;
    together.versus = Some(Versus {
        key: "async_overlap_workload + async_overlap_reads".into(),
        value: sum,
    });
    together.versus_ratio()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_covers_the_file_with_a_shorter_last_op() {
        assert_eq!(plan(10, 4), [(0, 4), (4, 4), (8, 2)]);
        assert_eq!(plan(8, 4), [(0, 4), (4, 4)]);
        assert_eq!(plan(3, 64), [(0, 3)]);
        assert_eq!(plan(5, 0), [(0, 1), (1, 1), (2, 1), (3, 1), (4, 1)]);
    }

    #[test]
    fn the_workload_is_sized_to_the_reads() {
        assert_eq!(fills_for(1.0, 0.1), 10);
        assert_eq!(fills_for(0.01, 0.1), 1);
        assert_eq!(fills_for(1.0, 0.0), 1);
        assert_eq!(fills_for(f64::NAN, 0.1), 1);
        assert_eq!(fills_for(1e9, 1e-9), 100_000);
    }
}
