//! One transfer's side of the page-cache pins: the piece source the engine asks before it
//! stages a piece of a read ([`TransferPins::serve`]), the windows pinned beside a read that
//! serve its far end ([`TransferPins::serve_tail`]), and the transfer's mark as running for the
//! pinning thread.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, Weak};
use std::time::Instant;

use hipfile_core::{Error, ErrorKind, IoRequest};
use hipfile_hip::os::FileStamp;
use hipfile_hip::{DeviceRange, PinnedFileRange, StagingLane};

use super::{FilePins, PagePins, Running, Window, WINDOW};
use crate::plan::piece_memory;

/// How much of a read pinned windows hold when it starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cover {
    /// Every byte: the read stages nothing, and its copies need no thread but the one queuing
    /// them.
    Whole,
    /// Not every byte, and windows of the read are pinned beside it while it runs: they serve
    /// its far end ([`TransferPins::serve_tail`]), so it stages on fewer threads.
    Growing,
    /// Some bytes or none, and no more while it runs (every write is here).
    Part,
}

/// The pins' side of one transfer, the source the engine asks first for each piece of a read
/// ([`TransferPins::serve`]): the pinned windows it found when it started and those pinned
/// while it runs, and its mark as running for the pinning thread. Let go of when the transfer
/// finished ([`TransferPins::release`]): its submitter may hold it long after.
#[derive(Debug)]
pub struct TransferPins {
    /// Where in the file the transfer starts: the engine speaks of request-relative bytes.
    file_offset: u64,
    cover: Cover,
    /// The windows pieces are copied out of.
    windows: RwLock<PinView>,
    /// For a read some of whose windows wait to be pinned: the windows pinned while it runs.
    live: Option<Arc<LivePins>>,
    /// Marks the transfer at work for the pinning thread until it finished or was withdrawn.
    running: Mutex<Option<Running>>,
    /// Where bytes copied out of pinned windows are counted (statistics on).
    counted: Option<Arc<PagePins>>,
}

impl TransferPins {
    /// The pins of `req`: its pinned windows looked up (and those it touches that are cached
    /// queued for pinning, which asks the page cache with `cachestat`), and the transfer marked
    /// running until [`TransferPins::release`].
    pub fn new(pins: &Arc<PagePins>, req: &IoRequest<'_>) -> TransferPins {
        let (windows, live) = pins.look_up(req);
        // Every byte, those past the end of the file too (the page that holds the last byte):
        // a piece the windows do not hold is staged.
        let end = req.file_offset.saturating_add(req.size() as u64);
        let cover = if !windows.is_empty() && windows.covers_all(req.file_offset..end) {
            Cover::Whole
        } else if live.is_some() {
            Cover::Growing
        } else {
            Cover::Part
        };
        TransferPins {
            file_offset: req.file_offset,
            cover,
            windows: RwLock::new(windows),
            live,
            running: Mutex::new(Some(pins.running())),
            counted: (req.stats_level() >= 1).then(|| Arc::clone(pins)),
        }
    }

    /// How much of the read pinned windows held when it started.
    pub fn cover(&self) -> Cover {
        self.cover
    }

    /// Queue the copies of the request-relative bytes `range` into the same bytes of `memory`
    /// (the request's device memory) straight out of the pinned windows, one per window they
    /// lie in; false (nothing queued) unless pinned windows hold them all: then the engine
    /// stages them.
    pub fn serve(
        &self,
        lane: &mut StagingLane,
        memory: &DeviceRange,
        range: Range<usize>,
    ) -> Result<bool, Error> {
        let (start, len) = (range.start, range.len());
        let at = self.file_offset + start as u64;
        let windows = self.windows.read().unwrap_or_else(PoisonError::into_inner);
        if windows.is_empty() || !windows.covers_all(at..at + len as u64) {
            return Ok(false);
        }
        let mut done = 0;
        while done < len {
            let here = at + done as u64;
            let window = windows.covering(here, 1).ok_or_else(|| {
                Error::new(ErrorKind::InternalError, "a pinned window went missing")
            })?;
            let n = usize::try_from(window.end() - here)
                .unwrap_or(usize::MAX)
                .min(len - done);
            lane.upload_pinned(window, here, &piece_memory(memory, start + done, n)?)
                .map_err(|e| Error::hip(&e, "queuing a copy out of the page cache"))?;
            done += n;
        }
        if let Some(pins) = &self.counted {
            pins.served(len);
        }
        Ok(true)
    }

    /// Whether windows of the read's file were pinned since the last call: then
    /// [`TransferPins::serve_tail`] may find some of its pieces held.
    pub fn news(&self) -> bool {
        self.live.as_ref().is_some_and(|live| live.news())
    }

    /// Serve the far end of `unclaimed` (the request-relative bytes no thread has taken yet)
    /// out of the windows pinned while the read runs: the pinning thread pins a read's windows
    /// last to first beside its staging threads, which take pieces first to last, until the
    /// two meet. `claim` is handed the request-relative byte from which pinned windows hold
    /// every byte to the end of `unclaimed`, claims the pieces from there on and answers their
    /// bytes (`None`: none were left); those are served. Answers the bytes served.
    pub fn serve_tail(
        &self,
        lane: &mut StagingLane,
        memory: &DeviceRange,
        unclaimed: Range<usize>,
        claim: impl FnOnce(usize) -> Option<Range<usize>>,
    ) -> Result<usize, Error> {
        let Some(live) = &self.live else {
            return Ok(0);
        };
        let at = self.file_offset;
        let Some((covered, windows)) =
            live.tail(at + unclaimed.start as u64, at + unclaimed.end as u64)
        else {
            return Ok(0);
        };
        let Some(claimed) = claim(usize::try_from(covered - at).unwrap_or(usize::MAX)) else {
            return Ok(0);
        };
        self.windows
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .add(windows);
        let len = claimed.len();
        if !self.serve(lane, memory, claimed)? {
            return Err(Error::new(
                ErrorKind::InternalError,
                "pinned windows of a claimed tail went missing",
            ));
        }
        Ok(len)
    }

    /// Let go of the windows and of the running mark, once no copy out of the windows is in
    /// flight any more (every lane of the transfer drained).
    pub fn release(&self) {
        *self.windows.write().unwrap_or_else(PoisonError::into_inner) = PinView::default();
        self.running
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

/// A read's view of its file's windows while it runs: windows pinned after the read began (the
/// pinning thread works beside the engine in a context of its own) are copied out of from the
/// read's far end ([`crate::engine`] takes those pieces from the back).
#[derive(Debug)]
pub(super) struct LivePins {
    /// Weak: a read its submitter holds long after it finished (an unreaped batch entry) must not
    /// keep a deregistered file's windows pinned.
    pub(super) file: Weak<FilePins>,
    pub(super) stamp: FileStamp,
    pub(super) seen: AtomicU64,
}

impl LivePins {
    /// Whether windows of the file were pinned since the last call.
    pub fn news(&self) -> bool {
        let Some(file) = self.file.upgrade() else {
            return false;
        };
        let now = file.pinned_so_far.load(Ordering::Acquire);
        self.seen.swap(now, Ordering::AcqRel) != now
    }

    /// The pinned windows that hold the file's bytes from `end` back as far as they go, not past
    /// `start`: where that covered tail starts, and the windows. `None` when the byte before
    /// `end` is in no pinned window (or the file changed since the read began).
    pub fn tail(&self, start: u64, end: u64) -> Option<(u64, Vec<Arc<PinnedFileRange>>)> {
        if end <= start {
            return None;
        }
        let file = self.file.upgrade()?;
        let mut state = file.lock();
        if state.stamp != self.stamp {
            return None;
        }
        let now = Instant::now();
        let mut covered = end;
        let mut windows = Vec::new();
        let mut w = (end - 1) / WINDOW as u64;
        while covered > start {
            match state.windows.get_mut(&w) {
                Some(Window::Pinned { range, used })
                    if range.offset() < covered && range.end() >= covered =>
                {
                    *used = now;
                    covered = range.offset();
                    windows.push(Arc::clone(range));
                }
                _ => break,
            }
            if w == 0 {
                break;
            }
            w -= 1;
        }
        (!windows.is_empty()).then(|| (covered.max(start), windows))
    }
}

/// The pinned windows a read may copy out of, in file order.
#[derive(Debug, Default)]
pub(super) struct PinView {
    /// The first window (most requests touch one: no list to allocate).
    first: Option<Arc<PinnedFileRange>>,
    more: Vec<Arc<PinnedFileRange>>,
}

impl PinView {
    pub(super) fn push(&mut self, range: Arc<PinnedFileRange>) {
        if self.first.is_none() {
            self.first = Some(range);
        } else {
            self.more.push(range);
        }
    }

    /// Add `ranges` the view does not have, keeping it in file order.
    pub fn add(&mut self, ranges: Vec<Arc<PinnedFileRange>>) {
        let mut all: Vec<Arc<PinnedFileRange>> = self.first.take().into_iter().collect();
        all.append(&mut self.more);
        for range in ranges {
            if !all.iter().any(|r| Arc::ptr_eq(r, &range)) {
                all.push(range);
            }
        }
        all.sort_by_key(|r| r.offset());
        let mut all = all.into_iter();
        self.first = all.next();
        self.more = all.collect();
    }

    fn ranges(&self) -> impl Iterator<Item = &Arc<PinnedFileRange>> {
        self.first.iter().chain(&self.more)
    }

    /// The window that holds all of `len` bytes at `file_offset`, if one is pinned.
    pub fn covering(&self, file_offset: u64, len: usize) -> Option<&Arc<PinnedFileRange>> {
        self.ranges().find(|r| r.covers(file_offset, len))
    }

    /// Whether pinned windows hold every byte of `range`.
    pub fn covers_all(&self, range: Range<u64>) -> bool {
        let mut at = range.start;
        for r in self.ranges() {
            if at >= range.end {
                // Windows past the range (after a gap) do not matter.
                return true;
            }
            if r.offset() > at {
                return false;
            }
            at = at.max(r.end());
        }
        at >= range.end
    }

    /// Whether no window is pinned.
    pub fn is_empty(&self) -> bool {
        self.first.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipfile_hip::sim::SimRuntime;
    use hipfile_hip::{FileMapping, GpuRuntime};
    use std::os::fd::AsFd;

    #[test]
    fn windows_past_the_range_after_a_gap_do_not_hide_its_cover() {
        let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
        let page = 64 << 10;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![1u8; 3 * page]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let pin = |at: usize| {
            let mapping = FileMapping::map(file.as_fd(), at as u64, page).unwrap();
            Arc::new(PinnedFileRange::register(&rt, 0, mapping, None).unwrap())
        };
        let mut view = PinView::default();
        view.add(vec![pin(2 * page), pin(0)]);
        let page = page as u64;
        assert!(view.covers_all(0..100));
        assert!(view.covers_all(0..page));
        assert!(!view.covers_all(0..page + 1), "the gap");
        assert!(view.covers_all(2 * page..3 * page));
        assert!(
            view.covering(2 * page + 5, 10).is_some(),
            "kept in file order"
        );
    }
}
