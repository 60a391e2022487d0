//! The file the write phases write, ours and the anchor's: never the file read.
//!
//! It is made next to the file read (same filesystem, so the write figures are about the
//! storage the reads came from), as large as the bytes measured, and removed when the run ends,
//! on errors too, and on SIGINT, SIGTERM and SIGHUP ([`crate::signals`]; only SIGKILL leaves it:
//! its name starts with `hipfile-bench-scratch`). Every timed write, ours and the anchor's, starts from the same
//! state of it ([`Scratch::settle`]): all its bytes there, on disk (`fsync`), and not in the page
//! cache (`posix_fadvise(DONTNEED)`, which needs no root, unlike dropping every cache).

use std::fs::File;
use std::num::NonZeroU64;
use std::os::unix::fs::FileExt;
use std::path::Path;

use hipfile_hip::DeviceBuffer;
use tempfile::NamedTempFile;

use super::file::pattern_byte;
use crate::signals::Removal;

/// Windows of the file stamped before each timed write of ours.
const STAMPS: u64 = 16;
/// Bytes per stamped window.
const STAMP_BYTES: usize = 4096;

/// The write target.
#[derive(Debug)]
pub struct Scratch {
    file: NamedTempFile,
    /// Dropped after `file` (fields drop in order), and armed from the start for a signal.
    _removal: Removal,
    size: u64,
}

impl Scratch {
    /// Make a scratch file of `size` bytes in the directory of `next_to`, filled with bytes
    /// that differ from [`pattern_byte`]'s pattern, on disk.
    pub fn create(next_to: &Path, size: usize) -> Result<Scratch, String> {
        let dir = match next_to.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => std::env::current_dir().map_err(|e| format!("current directory: {e}"))?,
        };
        let dir = dir.as_path();
        let file = tempfile::Builder::new()
            .prefix("hipfile-bench-scratch-")
            .suffix(".dat")
            .tempfile_in(dir)
            .map_err(|e| format!("a scratch file in {}: {e}", dir.display()))?;
        let removal = Removal::arm(file.path());
        let shown = |e: std::io::Error| format!("{}: {e}", file.path().display());
        let mut chunk = vec![0u8; (64 << 20).min(size)];
        let mut at = 0usize;
        while at < size {
            let n = chunk.len().min(size - at);
            for (i, b) in chunk[..n].iter_mut().enumerate() {
                *b = pattern_byte(at + i) ^ 0xa5;
            }
            file.as_file()
                .write_all_at(&chunk[..n], at as u64)
                .map_err(shown)?;
            at += n;
        }
        file.as_file().sync_all().map_err(shown)?;
        Ok(Scratch {
            file,
            _removal: removal,
            size: size as u64,
        })
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The open file (read and write).
    pub fn file(&self) -> &File {
        self.file.as_file()
    }

    /// Put the complement of `dst`'s bytes into a few windows spread over the file (the first
    /// and last page among them), so that the check after a write proves that this write landed
    /// there, even when the write before left the same bytes.
    pub fn stamp(&self, dst: &DeviceBuffer) -> Result<(), String> {
        let mut window = vec![0u8; STAMP_BYTES];
        for offset in stamp_offsets(self.size) {
            let n = STAMP_BYTES.min((self.size - offset) as usize);
            dst.read_at(offset as usize, &mut window[..n])
                .map_err(|e| e.to_string())?;
            window[..n].iter_mut().for_each(|b| *b = !*b);
            self.file()
                .write_all_at(&window[..n], offset)
                .map_err(|e| format!("{}: {e}", self.path().display()))?;
        }
        Ok(())
    }

    /// The state every timed write starts from: every byte on disk, none in the page cache.
    pub fn settle(&self) -> Result<(), String> {
        let shown = |e: &dyn std::fmt::Display| format!("{}: {e}", self.path().display());
        self.file().sync_all().map_err(|e| shown(&e))?;
        rustix::fs::fadvise(
            self.file(),
            0,
            NonZeroU64::new(self.size),
            rustix::fs::Advice::DontNeed,
        )
        .map_err(|e| shown(&e))
    }
}

/// Offsets of the stamped windows: the first page, the last, and evenly between.
fn stamp_offsets(size: u64) -> Vec<u64> {
    let page = STAMP_BYTES as u64;
    let last = size.saturating_sub(1) / page * page;
    let mut v: Vec<u64> = (0..STAMPS)
        .map(|i| last * i / (STAMPS - 1) / page * page)
        .collect();
    v.dedup();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_cover_the_first_and_last_page() {
        let v = stamp_offsets(8 << 20);
        assert_eq!(v.first(), Some(&0));
        assert_eq!(v.last(), Some(&((8 << 20) - 4096)));
        assert_eq!(v.len(), 16);
        assert!(v.iter().all(|o| o % 4096 == 0));
        assert_eq!(stamp_offsets(4096), [0]);
        assert_eq!(stamp_offsets(5000), [0, 4096]);
    }

    #[test]
    fn the_scratch_file_is_made_next_to_the_file_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let next_to = dir.path().join("data.bin");
        let path = {
            let s = Scratch::create(&next_to, 10_000).unwrap();
            assert_eq!(s.path().parent(), Some(dir.path()));
            assert_eq!(std::fs::metadata(s.path()).unwrap().len(), 10_000);
            s.settle().unwrap();
            assert!(Removal::armed(s.path()));
            s.path().to_path_buf()
        };
        assert!(!path.exists());
        assert!(!Removal::armed(&path));
        assert!(!next_to.exists());
    }
}
