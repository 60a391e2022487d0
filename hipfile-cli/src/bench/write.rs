//! The write phase: the registered buffer (holding the file's bytes) written whole to the
//! scratch file, without and with `fsync`, each write starting from the same state of the
//! scratch file and checked against the buffer after it.

use std::path::Path;

use hipfile::{Driver, FileHandle, IoOp};

use super::file::{move_whole, timed};
use super::rig::Rig;
use super::scratch::Scratch;

/// Where the writes go: the scratch file and its registration (dropped first).
pub(super) struct WriteTarget {
    handle: FileHandle,
    pub(super) scratch: Scratch,
}

impl WriteTarget {
    /// A scratch file next to `path` of `size` bytes, registered; `None`, with a note saying
    /// why, when none can be made there.
    pub(super) fn create(
        driver: &Driver,
        path: &Path,
        size: usize,
        notes: &mut Vec<String>,
    ) -> Result<Option<WriteTarget>, String> {
        let scratch = match Scratch::create(path, size) {
            Ok(s) => s,
            Err(why) => {
                notes.push(format!("writes skipped: {why}"));
                return Ok(None);
            }
        };
        let handle = driver
            .register_file(scratch.file())
            .map_err(|e| e.to_string())?;
        Ok(Some(WriteTarget { handle, scratch }))
    }

    /// One repetition: a write without `fsync`, then one with.
    pub(super) fn run(&self, rig: &mut Rig<'_>) -> Result<(), String> {
        if !rig.holds_file {
            // What is written is the file's bytes, as what the anchor writes is.
            move_whole(IoOp::Read, &rig.registered.handle, &mut rig.dst)?;
            rig.holds_file = true;
        }
        let target = &self.scratch;
        for (key, label, fsync) in [
            ("write", "write, page cache, no fsync", false),
            ("write_fsync", "write + fsync", true),
        ] {
            rig.step(label);
            target.stamp(rig.dst.memory())?;
            target.settle()?;
            let dst = &mut rig.dst;
            let t = timed(|| {
                move_whole(IoOp::Write, &self.handle, dst)?;
                if fsync {
                    target
                        .file()
                        .sync_all()
                        .map_err(|e| format!("fsync: {e}"))?;
                }
                Ok(())
            })?;
            let label = format!("{label}, scratch file, {}", rig.engine);
            rig.rows.throughput(key, &label, 0, rig.size, t);
            let difference =
                rig.comparer
                    .compare(target.file(), 0, rig.dst.memory(), 0, rig.size)?;
            rig.ledger.record(key, rig.size as u64, difference);
            rig.progress.inc(1);
        }
        Ok(())
    }
}
