//! The file the benchmark reads: made with a pattern or taken as it is, registered through a
//! descriptor of its own, and moved whole to or from the registered buffer.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::Path;

use hipfile::{AsDevice, AsDeviceMut, Driver, FileHandle, IoOp, RegisteredBuffer};

use crate::measure::{Span, Timed};
use crate::signals::Removal;
use crate::verify::{sentinel_for, Comparer, Ledger};

/// Largest request handed to hipfile-rs at once: below Linux's `MAX_RW_COUNT` cap, large enough
/// that the engine sees the whole parallelism of the file.
const CALL_BYTES: usize = 1 << 30;
/// Chunk in which a new file is written.
const FILL_CHUNK: usize = 64 << 20;

/// The byte at `offset` of a file the benchmark makes.
pub(super) fn pattern_byte(offset: usize) -> u8 {
    (offset.wrapping_mul(31) ^ (offset >> 12)) as u8
}

/// Open the file to read, read-only. A file that exists is taken as it is (a regular file with
/// at least the bytes asked); one that does not is made with a pattern of `asked` (or
/// `default`) bytes first. Returns the file, the bytes to measure and whether it was made.
pub(super) fn prepare_file(
    path: &Path,
    asked: Option<usize>,
    default: usize,
) -> Result<(File, usize, bool), String> {
    let shown = |e: std::io::Error| format!("{}: {e}", path.display());
    match std::fs::metadata(path) {
        Ok(meta) => {
            if !meta.is_file() {
                return Err(format!(
                    "{} is not a regular file; hipfile bench reads regular files only",
                    path.display()
                ));
            }
            let existing = usize::try_from(meta.len()).unwrap_or(usize::MAX);
            if existing == 0 {
                return Err(format!(
                    "{} is empty; name a file that does not exist to have one made",
                    path.display()
                ));
            }
            let size = asked.unwrap_or(existing);
            if size > existing {
                return Err(format!(
                    "{} has {existing} bytes, fewer than --size {size}",
                    path.display()
                ));
            }
            let file = File::open(path).map_err(shown)?;
            Ok((file, size, false))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let size = asked.unwrap_or(default);
            // create_new: a file that appeared meanwhile is never written over.
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(shown)?;
            // Half made, it goes (on an error or a signal); made, it is kept.
            let removal = Removal::arm(path);
            let mut chunk = vec![0u8; FILL_CHUNK.min(size)];
            let mut at = 0usize;
            while at < size {
                let n = chunk.len().min(size - at);
                for (i, b) in chunk[..n].iter_mut().enumerate() {
                    *b = pattern_byte(at + i);
                }
                file.write_all_at(&chunk[..n], at as u64).map_err(shown)?;
                at += n;
            }
            // Dirty pages of the setup must not flow into the write figures.
            file.sync_all().map_err(shown)?;
            drop(file);
            let file = File::open(path).map_err(shown)?;
            removal.keep_with(|| ());
            Ok((file, size, true))
        }
        Err(e) => Err(shown(e)),
    }
}

/// Fill `dst` with a sentinel unlike the file's first byte, run `read` (which fills `dst` with
/// the file's first `dst.len()` bytes), and compare `dst` with the file; the check goes into
/// `ledger` under `key`. Returns the time `read` gave and whether the bytes matched.
pub(super) fn checked_read(
    file: &File,
    dst: &mut RegisteredBuffer,
    comparer: &mut Comparer,
    ledger: &mut Ledger,
    key: &str,
    read: impl FnOnce(&mut RegisteredBuffer) -> Result<Timed, String>,
) -> Result<(Timed, bool), String> {
    let size = dst.len();
    dst.fill(sentinel_for(file, 0)?)
        .map_err(|e| e.to_string())?;
    let t = read(dst)?;
    let difference = comparer.compare(file, 0, dst.memory(), 0, size)?;
    let ok = difference.is_none();
    ledger.record(key, size as u64, difference);
    Ok((t, ok))
}

/// The benchmark's registration of its file, through a descriptor of its own.
pub(super) struct Registration {
    pub(super) handle: FileHandle,
    _fd: File,
}

impl Registration {
    pub(super) fn new(driver: &Driver, file: &File) -> Result<Self, String> {
        let fd = file.try_clone().map_err(|e| e.to_string())?;
        let handle = driver.register_file(&fd).map_err(|e| e.to_string())?;
        Ok(Registration { handle, _fd: fd })
    }

    /// Register the file afresh and drop the old registration, which unpins the page cache its
    /// reads had pinned.
    pub(super) fn renew(&mut self, driver: &Driver, file: &File) -> Result<(), String> {
        *self = Registration::new(driver, file)?;
        Ok(())
    }

    /// What comes before a cold figure: the registration renewed (its pins go with the old
    /// one) and the backends' work in the background done, so that no pin is on its way. Returns
    /// the page cache still pinned, which a cold figure must find at 0: pinned pages stay
    /// cached whatever drops the cache.
    pub(super) fn release_pins(&mut self, driver: &Driver, file: &File) -> Result<usize, String> {
        self.renew(driver, file)?;
        driver.settle();
        Ok(driver.page_cache_pinned_bytes())
    }
}

/// Move the file's first `memory.len()` bytes into `memory` (a read) or all of `memory` to the
/// file from offset 0 (a write), `CALL_BYTES` per call.
pub(super) fn move_whole(
    op: IoOp,
    handle: &FileHandle,
    memory: &mut RegisteredBuffer,
) -> Result<(), String> {
    let verb = match op {
        IoOp::Read => "read",
        IoOp::Write => "write",
    };
    let size = memory.len();
    let mut at = 0;
    while at < size {
        let want = (size - at).min(CALL_BYTES);
        let window = at..at + want;
        let n = match op {
            IoOp::Read => memory
                .slice_mut(window)
                .and_then(|w| handle.read(w, at as u64)),
            IoOp::Write => memory
                .slice(window)
                .and_then(|w| handle.write(w, at as u64)),
        }
        .map_err(|e| format!("{verb} at {at}: {e}"))?;
        if n != want {
            return Err(format!("{verb} at {at}: {n} of {want} bytes"));
        }
        at += n;
    }
    Ok(())
}

/// The time `f` took.
pub(super) fn timed(f: impl FnOnce() -> Result<(), String>) -> Result<Timed, String> {
    let span = Span::start();
    f()?;
    Ok(span.finish())
}
