//! Pinned page-cache pages: a read-only mapping of a range of a file, registered with the
//! runtime so the device copies the cached pages straight out of the page cache.
//!
//! A [`FileMapping`] maps `len` bytes of a file at a page-aligned offset (`PROT_READ`,
//! `MAP_SHARED`); a [`PinnedFileRange`] pins one with the runtime's read-only registration.
//! Nothing in hipfile-rs reads the mapping with the CPU: only the device does, by DMA out of the
//! pinned pages, queued through a [`crate::StagingLane`] ([`crate::StagingLane::upload_pinned`]),
//! which keeps the range alive until its copy has completed. So a page that leaves the file while it is pinned
//! (the file truncated or a hole punched under it) never raises `SIGBUS` here: the pinned page
//! stays the process's until the range is dropped, and the device reads the bytes it held.
//! Whoever keeps a range decides whether those bytes are still the file's (the staged engine
//! compares the file's size and change times before each use).
//!
//! The registration needs the pages: the kernel brings in any page that is not cached when the
//! range is pinned, so callers pin ranges that are cached already. A mapping never reaches past
//! the page that holds the file's last byte (the caller says where the file ends), and copies
//! out of it are bounded by the range.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::error::{HipError, HipErrorCode, HipResult};
use crate::runtime::{GpuRuntime, OwnedContext};

pub use crate::ffi::os::FileMapping;

/// A [`FileMapping`] pinned with a runtime: the device copies straight out of its pages.
pub struct PinnedFileRange {
    pub(super) runtime: Arc<dyn GpuRuntime>,
    /// The device the registration was made on (and is undone on).
    pub(super) device: i32,
    /// The context of the library's own it was made in (and is undone in), if any.
    pub(super) context: Option<Arc<OwnedContext>>,
    pub(super) mapping: FileMapping,
    /// Where the pinned bytes are counted while the range lives.
    pub(super) ledger: Option<Arc<AtomicUsize>>,
}

impl PinnedFileRange {
    /// The range of `mapping` just registered, its bytes counted in `ledger`.
    pub(super) fn pinned(
        runtime: &Arc<dyn GpuRuntime>,
        device: i32,
        context: Option<Arc<OwnedContext>>,
        mapping: FileMapping,
        ledger: Option<Arc<AtomicUsize>>,
    ) -> Self {
        if let Some(l) = &ledger {
            l.fetch_add(mapping.len(), Ordering::AcqRel);
        }
        PinnedFileRange {
            runtime: Arc::clone(runtime),
            device,
            context,
            mapping,
            ledger,
        }
    }

    /// The file offset of the first byte.
    pub fn offset(&self) -> u64 {
        self.mapping.offset()
    }

    /// Bytes pinned.
    pub fn len(&self) -> usize {
        self.mapping.len()
    }

    /// Whether the range is empty (never: [`FileMapping::map`] refuses that).
    pub fn is_empty(&self) -> bool {
        self.mapping.len() == 0
    }

    /// The file offset past the last byte.
    pub fn end(&self) -> u64 {
        self.offset() + self.len() as u64
    }

    /// Whether `len` bytes of the file at `file_offset` lie inside the range.
    pub fn covers(&self, file_offset: u64, len: usize) -> bool {
        file_offset >= self.offset()
            && file_offset
                .checked_add(len as u64)
                .is_some_and(|end| end <= self.end())
    }

    /// Whether the range was pinned with `runtime`.
    pub(crate) fn belongs_to(&self, runtime: &Arc<dyn GpuRuntime>) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(&self.runtime), Arc::as_ptr(runtime))
    }

    /// The address of the byte at `file_offset` in the mapping, for a copy of `len` bytes the
    /// range covers (checked).
    pub(crate) fn source(&self, file_offset: u64, len: usize) -> HipResult<*const u8> {
        if !self.covers(file_offset, len) {
            return Err(HipError::Call {
                call: "hipMemcpyAsync",
                code: HipErrorCode::INVALID_VALUE,
                detail: Some(format!(
                    "{len} bytes at {file_offset} are not all in the pinned range {}..{}",
                    self.offset(),
                    self.end()
                )),
            });
        }
        Ok(self
            .mapping
            .ptr()
            .as_ptr()
            .wrapping_add((file_offset - self.offset()) as usize)
            .cast_const())
    }
}

impl fmt::Debug for PinnedFileRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedFileRange")
            .field("mapping", &self.mapping)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ffi::os::page_size;
    use crate::sim::SimRuntime;
    use crate::{DeviceBuffer, DeviceRange, MemoryKind, OwnedContext, StagingLane, StreamOrder};
    use std::io::Write;
    use std::os::fd::{AsFd, BorrowedFd};

    /// Map and pin `len` bytes of the file open on `fd` at `offset`, on the current device.
    fn pin(
        rt: &Arc<dyn GpuRuntime>,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        ledger: Option<Arc<AtomicUsize>>,
    ) -> HipResult<PinnedFileRange> {
        let mapping = FileMapping::map(fd, offset, len).map_err(|e| HipError::Call {
            call: "mmap",
            code: HipErrorCode::INVALID_VALUE,
            detail: Some(e.to_string()),
        })?;
        PinnedFileRange::register(rt, rt.current_device()?, mapping, ledger)
    }

    fn file_of(bytes: &[u8]) -> (tempfile::TempDir, std::fs::File) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::File::create(&path)
            .unwrap()
            .write_all(bytes)
            .unwrap();
        (dir, std::fs::File::open(&path).unwrap())
    }

    #[test]
    fn a_pinned_range_is_copied_to_the_device_and_unpinned_when_dropped() {
        let sim = Arc::new(SimRuntime::default());
        let rt: Arc<dyn GpuRuntime> = sim.clone();
        let page = page_size();
        let bytes: Vec<u8> = (0..3 * page + 100).map(|i| (i % 251) as u8).collect();
        let (_dir, file) = file_of(&bytes);
        let ledger = Arc::new(AtomicUsize::new(0));
        // The whole file, its last page partial.
        let pin = Arc::new(pin(&rt, file.as_fd(), 0, bytes.len(), Some(ledger.clone())).unwrap());
        assert_eq!(ledger.load(Ordering::Acquire), bytes.len());
        assert_eq!(sim.live_allocations(MemoryKind::Host), 1);
        let dev = DeviceBuffer::new(rt.clone(), bytes.len()).unwrap();
        let range = DeviceRange::query(&rt, dev.ptr(), bytes.len()).unwrap();
        let mut lane =
            StagingLane::new(&rt, 0, page, Default::default(), StreamOrder::Independent).unwrap();
        let tail = page as u64 + 7;
        let n = bytes.len() - tail as usize;
        lane.upload_pinned(&pin, tail, &range.slice(0, n).unwrap())
            .unwrap();
        // Out of range: refused, nothing queued.
        assert!(lane
            .upload_pinned(&pin, tail, &range.slice(0, n + 1).unwrap())
            .is_err());
        lane.finish().unwrap();
        assert_eq!(dev.to_vec().unwrap()[..n], bytes[tail as usize..]);
        drop(lane);
        drop(pin);
        assert_eq!(ledger.load(Ordering::Acquire), 0);
        assert_eq!(sim.live_allocations(MemoryKind::Host), 0);
    }

    #[test]
    fn a_lane_keeps_the_range_until_its_copy_is_done() {
        let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
        let page = page_size();
        let bytes = vec![9u8; 2 * page];
        let (_dir, file) = file_of(&bytes);
        let ledger = Arc::new(AtomicUsize::new(0));
        let pin = Arc::new(pin(&rt, file.as_fd(), 0, bytes.len(), Some(ledger.clone())).unwrap());
        let dev = DeviceBuffer::new(rt.clone(), bytes.len()).unwrap();
        let range = DeviceRange::query(&rt, dev.ptr(), bytes.len()).unwrap();
        let mut lane =
            StagingLane::new(&rt, 0, page, Default::default(), StreamOrder::Independent).unwrap();
        lane.upload_pinned(&pin, 0, &range).unwrap();
        drop(pin);
        // The lane's copy still holds the pin.
        assert_eq!(ledger.load(Ordering::Acquire), bytes.len());
        lane.finish().unwrap();
        assert_eq!(ledger.load(Ordering::Acquire), 0);
        assert_eq!(dev.to_vec().unwrap(), bytes);
    }

    #[test]
    fn a_mapping_says_whether_all_its_pages_are_cached() {
        let page = page_size();
        let (_dir, file) = file_of(&vec![5u8; 8 * page]);
        let mapping = FileMapping::map(file.as_fd(), 0, 8 * page).unwrap();
        assert!(mapping.all_cached(), "a file just written is cached");
        file.sync_all().unwrap();
        crate::ffi::os::advise_dont_need(file.as_fd());
        let tail = FileMapping::map(file.as_fd(), 4 * page as u64, 4 * page).unwrap();
        // tmpfs keeps its pages whatever the advice: only a dropped page may say false.
        let still = FileMapping::map(file.as_fd(), 0, page)
            .unwrap()
            .all_cached();
        assert_eq!(tail.all_cached(), still);
    }

    #[test]
    fn a_range_is_pinned_on_the_device_asked_for_and_the_thread_keeps_its_own() {
        let sim = Arc::new(SimRuntime::new(crate::sim::SimConfig {
            devices: 2,
            ..crate::sim::SimConfig::default()
        }));
        let rt: Arc<dyn GpuRuntime> = sim.clone();
        let page = page_size();
        let (_dir, file) = file_of(&vec![4u8; 2 * page]);
        let mapping = FileMapping::map(file.as_fd(), 0, 2 * page).unwrap();
        let range = PinnedFileRange::register(&rt, 1, mapping, None).unwrap();
        let at = range.mapping.ptr().as_ptr() as usize;
        let info = rt.pointer_info(at).unwrap();
        assert_eq!((info.kind, info.device), (MemoryKind::Host, 1));
        assert_eq!(rt.current_device().unwrap(), 0);
        drop(range);
        assert_eq!(rt.pointer_info(at).unwrap().kind, MemoryKind::Unregistered);
        assert_eq!(rt.current_device().unwrap(), 0);
    }

    #[test]
    fn a_range_pinned_in_a_context_of_its_own_is_unpinned_there_and_the_thread_keeps_its_device() {
        let sim = Arc::new(SimRuntime::new(crate::sim::SimConfig {
            devices: 2,
            ..crate::sim::SimConfig::default()
        }));
        let rt: Arc<dyn GpuRuntime> = sim.clone();
        let page = page_size();
        let (_dir, file) = file_of(&vec![8u8; 2 * page]);
        let context = Arc::new(OwnedContext::new(&rt, 1).unwrap().unwrap());
        let mapping = FileMapping::map(file.as_fd(), 0, 2 * page).unwrap();
        let ledger = Arc::new(AtomicUsize::new(0));
        let range = PinnedFileRange::register_in(&context, mapping, Some(ledger.clone())).unwrap();
        let at = range.mapping.ptr().as_ptr() as usize;
        assert!(sim.registered_in_own_context(at));
        let info = rt.pointer_info(at).unwrap();
        assert_eq!((info.kind, info.device), (MemoryKind::Host, 1));
        assert_eq!(rt.current_device().unwrap(), 0);
        // The sim unpins only in the context the pin was made in: outside it, refused.
        assert!(range.unregister_outside_its_context().is_err());
        // A context cannot go while something is pinned in it; the range holds it.
        drop(context);
        assert_eq!(sim.live_contexts(), 1);
        drop(range);
        assert_eq!(rt.pointer_info(at).unwrap().kind, MemoryKind::Unregistered);
        assert_eq!(ledger.load(Ordering::Acquire), 0);
        assert_eq!(sim.live_contexts(), 0, "the last range let its context go");
        assert_eq!(rt.current_device().unwrap(), 0);
    }

    #[test]
    fn a_runtime_without_contexts_of_its_own_says_so() {
        let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::new(crate::sim::SimConfig {
            own_contexts: false,
            ..crate::sim::SimConfig::default()
        }));
        assert!(OwnedContext::new(&rt, 0).unwrap().is_none());
        let with: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
        assert!(OwnedContext::new(&with, 5).is_err(), "no such device");
    }

    #[test]
    fn ranges_that_cannot_be_pinned_are_refused() {
        let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
        let page = page_size();
        let (dir, file) = file_of(&vec![1u8; 2 * page]);
        assert!(pin(&rt, file.as_fd(), 1, page, None).is_err());
        assert!(pin(&rt, file.as_fd(), 0, 0, None).is_err());
        let write_only = std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("f"))
            .unwrap();
        assert!(pin(&rt, write_only.as_fd(), 0, page, None).is_err());
    }

    #[test]
    fn a_copy_of_pages_the_file_lost_fails_on_the_sim_instead_of_killing_it() {
        let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
        let page = page_size();
        let (dir, file) = file_of(&vec![3u8; 4 * page]);
        let pin = Arc::new(pin(&rt, file.as_fd(), 0, 4 * page, None).unwrap());
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join("f"))
            .unwrap()
            .set_len(page as u64)
            .unwrap();
        let dev = DeviceBuffer::new(rt.clone(), 4 * page).unwrap();
        let range = DeviceRange::query(&rt, dev.ptr(), 4 * page).unwrap();
        let mut lane =
            StagingLane::new(&rt, 0, page, Default::default(), StreamOrder::Independent).unwrap();
        lane.upload_pinned(&pin, 0, &range).unwrap();
        assert!(lane.finish().is_err());
    }
}
