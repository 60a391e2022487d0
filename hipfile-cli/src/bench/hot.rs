//! The hot phase: the whole file read with its page cache warm, first through a fresh
//! registration and then again (with the windows the engine pinned beside the first); and
//! upstream's single-thread design on the same bytes (`--baseline`).

use super::file::checked_read;
use super::rig::Rig;
use crate::ceiling;

/// The hot reads across repetitions.
#[derive(Debug, Default)]
pub(super) struct HotReads {
    /// The page cache pinned when the first repetition's read again ran.
    pub(super) again_pinned: Option<usize>,
}

impl HotReads {
    /// One repetition: the first read of a fresh registration, then the read again.
    pub(super) fn run(&mut self, rig: &mut Rig<'_>) -> Result<(), String> {
        rig.step("hot read");
        rig.make_hot()?;
        // The first read of a freshly registered file: staged, but for the windows pinned
        // beside it while it runs, which it copies out of from its far end. The old
        // registration's windows are unpinned first.
        rig.registered.renew(rig.driver, &rig.file)?;
        rig.driver.settle();
        let label = format!(
            "read, hot (page cache), first read of the registered file, {}",
            rig.engine
        );
        rig.whole_read_row("read_hot", &label)?;
        rig.step("hot read again");
        rig.driver.settle();
        let pinned = rig.driver.page_cache_pinned_bytes();
        self.again_pinned.get_or_insert(pinned);
        let label = format!(
            "read, hot, again ({} MiB of its page cache pinned), {}",
            pinned >> 20,
            rig.engine
        );
        rig.holds_file = rig.whole_read_row("read_hot_again", &label)?;
        rig.progress.inc(1);
        Ok(())
    }
}

/// One repetition of upstream's design: one thread, `pread` into a pageable buffer, a
/// synchronous copy, into the registered buffer and checked as ours.
pub(super) fn baseline(rig: &mut Rig<'_>) -> Result<(), String> {
    rig.step("baseline");
    let (file, size) = (&rig.file, rig.size);
    let (t, ok) = checked_read(
        file,
        &mut rig.dst,
        &mut rig.comparer,
        &mut rig.ledger,
        "baseline_read_hot",
        |d| ceiling::single_thread_bounce(file, size as u64, |at, b| d.write_at(at, b)),
    )?;
    rig.holds_file = ok;
    rig.rows.throughput(
        "baseline_read_hot",
        "baseline: 1 thread, pread + sync copy (upstream design), hot",
        1,
        size,
        t,
    );
    rig.progress.inc(1);
    Ok(())
}
