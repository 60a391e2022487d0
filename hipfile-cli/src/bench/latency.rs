//! The latency phase: small random reads of the hot file, one at a time, each timed alone,
//! through hipfile-rs and done plainly (the floor they are judged against).

use std::fs::File;
use std::os::unix::fs::FileExt;

use hipfile::{AsDeviceMut, FileHandle, RegisteredBuffer};
use hipfile_hip::PinnedBuffer;

use super::batch::difference;
use super::rig::Rig;
use crate::measure::Span;

/// Sizes of the latency phase.
pub(super) const LATENCY_SIZES: [(usize, &str); 3] =
    [(4 << 10, "4k"), (64 << 10, "64k"), (1 << 20, "1m")];

/// One repetition: `ops` reads of each size (at most the file's), ours and the floor's.
pub(super) fn run(rig: &mut Rig<'_>, ops: usize) -> Result<(), String> {
    rig.step("small random reads");
    rig.make_hot()?;
    let size = rig.size;
    let most = LATENCY_SIZES.iter().map(|(b, _)| *b).max().unwrap_or(0);
    let mut floor_host =
        PinnedBuffer::new(rig.gpu.clone(), most.min(size)).map_err(|e| e.to_string())?;
    for &(bytes, name) in LATENCY_SIZES.iter().filter(|(b, _)| *b <= size) {
        let ours = (
            format!("latency_{name}"),
            format!("random {name} reads, hot, 1 thread, {}", rig.engine),
        );
        timed_reads(rig, ours, bytes, ops, |_, handle, dst, off| {
            let start = dst.slice_mut(..bytes).map_err(|e| e.to_string())?;
            handle.read(start, off).map_err(|e| e.to_string())
        })?;
        // The floor a read of ours is judged against, the same reads done plainly: a `pread` of
        // the file into pinned host memory, then one synchronous copy of it to the device (what
        // a program without hipFile writes, and what KvikIO does for a small read).
        let floor = (
            format!("latency_floor_{name}"),
            format!("floor: random {name} reads done plainly (pread into pinned memory, one synchronous copy), hot, 1 thread"),
        );
        timed_reads(rig, floor, bytes, ops, |file, _, dst, off| {
            let staged = &mut floor_host.as_mut_slice()[..bytes];
            let n = file.read_at(staged, off).map_err(|e| e.to_string())?;
            dst.write_at(0, &staged[..n]).map_err(|e| e.to_string())?;
            Ok(n)
        })?;
    }
    rig.holds_file = false;
    rig.progress.inc(1);
    Ok(())
}

/// `ops` reads of `bytes` at random aligned offsets of the file, each made by
/// `read(file, handle, dst, offset)` into the start of the buffer and timed alone, as the latency
/// row `key` (labelled `label`). The last one is checked: the complement of the file's bytes is
/// put where it lands first (outside its timing), and what it left is compared with the file
/// after the loop.
fn timed_reads(
    rig: &mut Rig<'_>,
    (key, label): (String, String),
    bytes: usize,
    ops: usize,
    mut read: impl FnMut(&File, &FileHandle, &mut RegisteredBuffer, u64) -> Result<usize, String>,
) -> Result<(), String> {
    let Rig {
        file,
        registered,
        dst,
        rng,
        size,
        ..
    } = &mut *rig;
    let limit = (*size - bytes) as u64;
    let offsets: Vec<u64> = (0..ops.max(1))
        .map(|_| rng.aligned_below(limit, 4096))
        .collect();
    let last = offsets.len() - 1;
    let mut want = vec![0u8; bytes];
    file.read_exact_at(&mut want, offsets[last])
        .map_err(|e| format!("check: reading the file at {}: {e}", offsets[last]))?;
    let sentinel: Vec<u8> = want.iter().map(|b| !b).collect();
    let mut samples = Vec::with_capacity(offsets.len());
    let span = Span::start();
    for (i, &off) in offsets.iter().enumerate() {
        if i == last {
            dst.write_at(0, &sentinel).map_err(|e| e.to_string())?;
        }
        let t = std::time::Instant::now();
        let n = read(file, &registered.handle, dst, off)
            .map_err(|e| format!("read of {bytes} at {off}: {e}"))?;
        samples.push(t.elapsed().as_secs_f64() * 1e6);
        if n != bytes {
            return Err(format!("read of {bytes} at {off}: {n} bytes"));
        }
    }
    let timed = span.finish();
    let mut got = vec![0u8; bytes];
    dst.read_at(0, &mut got).map_err(|e| e.to_string())?;
    let difference = difference(offsets[last], &want, &got);
    rig.ledger.record(&key, bytes as u64, difference);
    rig.rows.latency(&key, &label, bytes, samples, timed);
    Ok(())
}
