//! What every phase measures with: the driver, the file and its registration, the registered
//! buffer every timed read lands in, the byte checks, the rows, the notes, and the run's place
//! (repetition, progress). The phases borrow it one after another.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;

use hipfile::{Driver, IoOp, RegisteredBuffer};
use hipfile_hip::GpuRuntime;
use indicatif::{ProgressBar, ProgressStyle};

use super::file::{checked_read, move_whole, timed, Registration};
use super::rows::Rows;
use crate::ceiling;
use crate::measure::{SplitMix64, Timed};
use crate::verify::{Comparer, Ledger};

/// The benchmark's state across phases and repetitions. Fields drop in order: the checks and
/// the buffer before the registration, the registration before the file.
pub(super) struct Rig<'d> {
    pub(super) driver: &'d Driver,
    pub(super) gpu: Arc<dyn GpuRuntime>,
    /// The file read, and the bytes measured of it.
    pub(super) path: PathBuf,
    pub(super) size: usize,
    pub(super) comparer: Comparer,
    /// Registered once: every timed read and write names it (or a slice of it), so requests
    /// take the registered path and no pointer query is timed.
    pub(super) dst: RegisteredBuffer,
    /// Registered through a descriptor of its own, so that it can be registered afresh (which
    /// unpins the page cache its reads pinned) while `file` stays open.
    pub(super) registered: Registration,
    pub(super) file: File,
    pub(super) ledger: Ledger,
    pub(super) rows: Rows,
    pub(super) notes: Vec<String>,
    pub(super) cold_starts: ColdStarts,
    pub(super) rng: SplitMix64,
    /// "hipfile-rs (backends)", as the labels name our engine.
    pub(super) engine: String,
    pub(super) drop_caches: fn() -> Result<(), String>,
    /// Whether the page cache could be dropped: cold figures are taken only then.
    pub(super) cold_ok: bool,
    /// Whether the buffer holds the file's first bytes (what the writes write).
    pub(super) holds_file: bool,
    pub(super) progress: ProgressBar,
    /// The repetition under way, from 0.
    pub(super) rep: usize,
}

impl Rig<'_> {
    /// Say on the progress bar what runs now.
    pub(super) fn step(&self, what: &str) {
        self.progress
            .set_message(format!("rep {}: {what}", self.rep + 1));
    }

    /// "Hot" is made true before each hot figure rather than assumed: a cold read, the O_DIRECT
    /// ceiling or an engine that writes with O_DIRECT may have left the page cache without the
    /// file.
    pub(super) fn make_hot(&self) -> Result<(), String> {
        ceiling::warm(&self.path, self.size as u64)
    }

    /// What comes before a cold figure of ours, noted under `key`: the pins of this process let
    /// go (see [`Registration::release_pins`]), then the page cache dropped.
    pub(super) fn cold_start(&mut self, key: &str) -> Result<(), String> {
        let pinned = self.release_pins()?;
        self.cold_starts.note(key, pinned);
        (self.drop_caches)()
    }

    /// [`Registration::release_pins`] of the file's registration.
    pub(super) fn release_pins(&mut self) -> Result<usize, String> {
        self.registered.release_pins(self.driver, &self.file)
    }

    /// Read the whole file through the registration into the buffer, timed, and compare it
    /// with the file, the check noted under `key`; the time, and whether the bytes matched.
    pub(super) fn checked_whole_read(&mut self, key: &str) -> Result<(Timed, bool), String> {
        let handle = &self.registered.handle;
        checked_read(
            &self.file,
            &mut self.dst,
            &mut self.comparer,
            &mut self.ledger,
            key,
            |d| timed(|| move_whole(IoOp::Read, handle, d)),
        )
    }

    /// [`Rig::checked_whole_read`] as the throughput row `key`; whether the buffer holds the
    /// file afterwards.
    pub(super) fn whole_read_row(&mut self, key: &str, label: &str) -> Result<bool, String> {
        let (t, ok) = self.checked_whole_read(key)?;
        self.rows.throughput(key, label, 0, self.dst.len(), t);
        Ok(ok)
    }
}

/// The page cache pinned by this process at each cold start, by measurement (the most over
/// the repetitions).
#[derive(Debug, Default)]
pub(super) struct ColdStarts(BTreeMap<String, usize>);

impl ColdStarts {
    pub(super) fn note(&mut self, key: &str, pinned: usize) {
        let most = self.0.entry(key.to_string()).or_default();
        *most = (*most).max(pinned);
    }

    pub(super) fn get(&self, key: &str) -> Option<usize> {
        self.0.get(key).copied()
    }

    /// The most pinned at any cold start; `None` when no cold figure ran.
    pub(super) fn most(&self) -> Option<usize> {
        self.0.values().copied().max()
    }
}

/// A bar of `steps` on a terminal; none for `--json` or when stderr is not one.
pub(super) fn progress_bar(steps: u64, json: bool) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(steps);
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}") {
        bar.set_style(style);
    }
    bar
}
