//! The async phase's runs: the whole file read as stream-ordered ops (`hipFileReadAsync`,
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
use hipfile_hip::{DeviceBuffer, DeviceRange, GpuRuntime, HostFunctionReader, StreamRef};

use crate::batch::spread;
use crate::measure::{Span, Timed};
use crate::verify::{sentinel_for, Comparer};

/// Ops of a run whose regions are compared with the file (all of them when there are fewer).
pub const CHECKED_OPS: usize = 16;

/// What a run of stream-ordered reads gave.
#[derive(Debug)]
pub struct StreamRun {
    /// First submission to the end of the last op, streams synchronized.
    pub timed: Timed,
    /// Microseconds of each op's submission (`io.read`), on the submitting thread.
    pub submit_us: Vec<f64>,
}

/// The ops of a whole-file read: `(file offset, bytes)` each.
pub fn plan(size: usize, op_bytes: usize) -> Vec<(u64, usize)> {
    let op = op_bytes.clamp(1, size.max(1));
    (0..size)
        .step_by(op)
        .map(|at| (at as u64, op.min(size - at)))
        .collect()
}

/// Fill `dst` with a byte unlike the file's first one, so that an op that moved nothing is seen.
pub fn arm(file: &File, dst: &mut RegisteredBuffer) -> Result<(), String> {
    dst.fill(sentinel_for(file, 0)?)
        .map_err(|e| format!("check: the sentinel: {e}"))
}

/// Compare the regions of the sampled ops of `ops` with the file: one `(bytes, difference)` per
/// checked op.
pub fn check(
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
pub fn ours(
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
pub fn sync_ops(
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
pub fn replay(
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
pub struct Workload {
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
pub fn fills_for(reads_s: f64, one_fill_s: f64) -> usize {
    if one_fill_s.is_nan() || one_fill_s <= 0.0 || !reads_s.is_finite() {
        return 1;
    }
    ((reads_s / one_fill_s).round() as usize).clamp(1, 100_000)
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
