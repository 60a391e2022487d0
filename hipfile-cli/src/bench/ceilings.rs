//! The ceilings phase: what the machine does without hipfile-rs, the figures ours are read
//! against. A pinned host-to-device copy, and parallel page-cache and O_DIRECT reads of the file
//! into host memory ([`crate::ceiling`] makes each).

use hipfile_hip::PinnedBuffer;

use super::rig::Rig;
use crate::ceiling;

/// The pinned copy ceiling copies this much (or the file size when smaller).
const H2D_BYTES: usize = 1 << 30;

/// The ceilings of a run: the pinned memory the copy copies from, and whether every O_DIRECT
/// ceiling found the page cache dropped.
pub(super) struct Ceilings {
    pinned: PinnedBuffer,
    /// Threads of the parallel reads: the cores available.
    threads: usize,
    pub(super) odirect_cold: bool,
}

impl Ceilings {
    /// The pinned memory (a pattern) for a file of `size` bytes, read from `threads` threads.
    pub(super) fn prepare(rig: &Rig<'_>, threads: usize) -> Result<Ceilings, String> {
        let mut pinned = PinnedBuffer::new(rig.gpu.clone(), rig.size.min(H2D_BYTES))
            .map_err(|e| e.to_string())?;
        pinned
            .as_mut_slice()
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = i as u8);
        Ok(Ceilings {
            pinned,
            threads,
            odirect_cold: true,
        })
    }

    /// One repetition: the copy, the page-cache read, the O_DIRECT read.
    pub(super) fn run(&mut self, rig: &mut Rig<'_>) -> Result<(), String> {
        let (size, threads) = (rig.size, self.threads);
        rig.step("ceiling: pinned copy");
        let dst = &mut rig.dst;
        let t = ceiling::pinned_h2d(&self.pinned, |at, b| dst.write_at(at, b))?;
        rig.holds_file = false;
        rig.rows.throughput(
            "ceiling_h2d_pinned",
            "ceiling: pinned host->device copy",
            1,
            size.min(H2D_BYTES),
            t,
        );
        rig.progress.inc(1);
        rig.step("ceiling: page-cache read");
        rig.make_hot()?;
        let (t, n) = ceiling::parallel_read(&rig.path, size as u64, threads, false)?;
        rig.rows.throughput(
            "ceiling_pagecache_read",
            &format!("ceiling: page cache -> host memory, {threads} threads"),
            threads,
            n as usize,
            t,
        );
        rig.progress.inc(1);
        rig.step("ceiling: O_DIRECT read");
        let cold = rig.cold_ok && (rig.drop_caches)().is_ok();
        self.odirect_cold &= cold;
        match ceiling::parallel_read(&rig.path, size as u64, threads, true) {
            Ok((t, n)) => rig.rows.throughput(
                "ceiling_odirect_read",
                &format!(
                    "ceiling: O_DIRECT -> host memory, {threads} threads, {}",
                    if cold {
                        "cold"
                    } else {
                        "page cache not dropped"
                    }
                ),
                threads,
                n as usize,
                t,
            ),
            Err(why) if rig.rep == 0 => rig.notes.push(format!("O_DIRECT ceiling skipped: {why}")),
            Err(_) => {}
        }
        rig.progress.inc(1);
        Ok(())
    }
}
