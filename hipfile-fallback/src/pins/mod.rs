//! Page-cache pins: cached ranges of registered files, pinned once and copied to the device
//! straight out of the page cache by every read after that.
//!
//! Staging a cached read costs the host a copy of every byte (page cache -> pinned staging) and
//! the DMA reads it once more; on the H200 host that shared memory bandwidth holds the staged hot
//! read at 0.93 of the pinned-copy ceiling with ten cores busy. The runtime can pin the page
//! cache's own pages (a read-only mapping of the file, registered read-only,
//! [`hipfile_hip::PinnedFileRange`]); the device then reads them by DMA at the ceiling with no
//! CPU copy (measured there: 55.1-55.5 GB/s out of pinned page-cache windows against 55.5 out of
//! `cudaHostAlloc` memory). Pinning is not free (64 MiB windows: 37-63 GB/s of one core, and
//! unpinning a third of that again), so pins are kept: a registered file's windows stay pinned
//! while the file is registered, unchanged and within the budget, and repeated reads (model
//! weights loaded again, KV-cache blocks, a dataset read every epoch) are pure DMA.
//!
//! How it runs:
//! - A read of a registered file looks up the pinned windows its range touches
//!   ([`TransferPins`]): pieces inside a pinned window are copied out of it, the others are
//!   staged as before. A read that pinned windows cover whole runs on the calling thread alone.
//! - Windows of [`WINDOW`] bytes that a read touched and that are not pinned are mapped and
//!   queued for the pinning thread when every page of the window is cached (`cachestat(2)`, and
//!   `mincore(2)` again before pinning: pinning pages that are not cached would read them from
//!   the disk, one fault at a time), the file has not changed for
//!   [`hipfile_core::Settings::page_cache_pin_settle_ms`], and the budget has room
//!   ([`hipfile_core::Settings::page_cache_pin_bytes`]; windows idle for a second are unpinned,
//!   least recently used first, to make room).
//! - Pinning holds its GPU context's lock for as long as it takes (~2 ms a window on the H200
//!   host), and every call made in that context meanwhile waits: pinning in the device's primary
//!   context beside a hot read halved it there (22.8 against 50 GB/s), and stalls the
//!   application's own GPU calls too. So the pinning thread pins in a context of its own
//!   ([`hipfile_hip::OwnedContext`]; measured there: copies in the primary context ran at 47.5-48.5
//!   GB/s beside it, as alone, against 2.4-3.3 beside pinning in the primary context), at once
//!   and beside the engine's reads ([`hipfile_core::Settings::page_cache_pin_own_context`]).
//!   Where the runtime has no such context (the HIP platform) or it is turned off, it pins in
//!   the primary context only while no request of the engine has run for 2 ms.
//! - The window queued last is pinned first, and a read queues its windows first to last in one
//!   go: the pins of the read at work start at its far end. The read's staging threads take its
//!   pieces from the front; whenever windows were pinned, one of them takes the pieces at the
//!   back those windows hold and queues their copies out of them ([`TransferPins::serve_tail`]), until front and
//!   back meet; such a read stages on fewer threads ([`crate::engine`]). Pinning does not scale
//!   with threads (one lock in the driver: 31-36 GB/s from one to four contexts), so it carries
//!   part of a first read and all of the reads after it.
//!
//! Why the bytes stay right: a pinned page is the page cache's page, so writes through the page
//! cache (this process's or any other's) land in it. What replaces pages (truncation, a punched
//! hole, a direct write) changes the file's size or change time. Every request checks the
//! application's descriptor with `fstat` ([`hipfile_core::RegisteredFile::check_caller`]) and
//! carries what it found ([`IoRequest::file_stamp`]); a read with another stamp than the one its
//! file's windows were pinned under unpins them all, and a request without one uses none. A
//! change in the same timestamp tick as the one before could keep the stamp on a kernel with
//! coarse timestamps; windows are pinned only once the file's change time lies the settle time
//! in the past, so any later change gets a later time. A write through hipfile-rs unpins
//! the file's windows before it starts (an O_DIRECT write replaces the page cache's pages under
//! the pins). A window never reaches past the end of the file, and copies out of it never
//! past the window. Nothing reads a window with the CPU: a truncated file never raises `SIGBUS`.
//!
//! The rooms: this module keeps each registered file's windows ([`FilePins`]), the budget, the
//! counters and the look-up a request makes when it starts; `transfer` is one transfer's side
//! ([`TransferPins`], the piece source the engine asks before it stages a piece); `pinning` is
//! the pinning thread, which pins queued windows and unpins idle ones to make room.
//!
//! [`IoRequest::file_stamp`]: hipfile_core::OwnedRequest::file_stamp

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::Sender;
use hipfile_core::{DirectIoPolicy, FileIo, IoOp, IoRequest};
use hipfile_hip::os::FileStamp;
use hipfile_hip::{FileMapping, GpuRuntime, PinnedFileRange};

mod pinning;
mod transfer;

pub use transfer::{Cover, TransferPins};
use transfer::{LivePins, PinView};

/// Bytes of a file pinned as one: window `i` is `[i * WINDOW, (i + 1) * WINDOW)`, cut at the end
/// of the file. Large enough that pinning runs near its best rate (1 MiB: 7.5 GB/s, 4 MiB: 21,
/// 64 MiB: 37-47 on the H200 host) and a 1 GiB read is 16 copies, small enough that a file
/// read in part pins little more than that part.
pub const WINDOW: usize = 64 << 20;

/// How long a window must have gone unused before it is unpinned to make room for another.
const IDLE: Duration = Duration::from_secs(1);

/// How long no request of the engine must have run before a window is pinned.
const QUIET: Duration = Duration::from_millis(2);

/// How long a window found not cached (or refused for want of room) is not queued again.
const RETRY: Duration = Duration::from_secs(1);

/// One window of a file.
#[derive(Debug)]
enum Window {
    /// Queued for the pinning thread.
    Queued,
    /// Pinned; `used` is when a read last copied out of it.
    Pinned {
        range: Arc<PinnedFileRange>,
        used: Instant,
    },
    /// Not pinned (not all cached, no room, the pin failed); not queued again before `until`.
    Skipped { until: Instant },
}

/// The windows of one registered file, kept in the file's registration
/// ([`hipfile_core::RegisteredFile::backend_state`]) and dropped (unpinned) with it. The pinning
/// thread reaches it through a weak reference, so it never keeps the registration (and its
/// descriptors) alive.
#[derive(Debug, Default)]
pub struct FilePins {
    state: Mutex<FileWindows>,
    /// Windows pinned so far: a read at work looks for new ones when it moves.
    pinned_so_far: AtomicU64,
}

#[derive(Debug, Default)]
struct FileWindows {
    /// The stamp the windows were pinned under.
    stamp: FileStamp,
    windows: BTreeMap<u64, Window>,
}

impl FilePins {
    fn lock(&self) -> MutexGuard<'_, FileWindows> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A request of the engine at work ([`PagePins::running`]): the pinning thread waits until
/// none is, and then some more. Dropped when the request has finished.
#[derive(Debug)]
struct Running(Arc<Shared>);

impl Drop for Running {
    fn drop(&mut self) {
        let s = &self.0;
        s.quiet_since
            .store(s.epoch.elapsed().as_nanos() as u64, Ordering::Release);
        s.running.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Work for the pinning thread.
enum Job {
    /// Pin the windows a read asked for, first to last (sent as one, so the thread starts
    /// with the last).
    Pin(Vec<Pin>),
    /// Drop windows a request let go of (unpinning takes the GPU runtime's lock for as long as
    /// pinning does: not on the request's thread).
    Unpin(BTreeMap<u64, Window>),
    /// Answer once every job queued before this one is done.
    Marker(Sender<()>),
}

/// A window to pin: its mapping, made on the request's thread (which holds the file), so the
/// pinning thread needs no descriptor of the file.
struct Pin {
    file: Weak<FilePins>,
    window: u64,
    mapping: FileMapping,
    stamp: FileStamp,
    device: i32,
    budget: usize,
    /// Pin in a context of the library's own where the runtime has one
    /// ([`hipfile_core::Settings::page_cache_pin_own_context`]).
    own_context: bool,
}

/// What the requests and the pinning thread share.
#[derive(Debug)]
struct Shared {
    runtime: Arc<dyn GpuRuntime>,
    /// Bytes pinned now.
    pinned: Arc<AtomicUsize>,
    /// Every file that has windows, for making room.
    files: Mutex<Vec<Weak<FilePins>>>,
    /// Bytes copied out of pinned windows.
    served: AtomicU64,
    /// Windows pinned and unpinned to make room, since the driver opened.
    pins_made: AtomicU64,
    evicted: AtomicU64,
    /// Requests of the engine running now, and when the last one ended (ns since `epoch`).
    running: AtomicUsize,
    quiet_since: AtomicU64,
    epoch: Instant,
    /// Set when the driver closes: the pinning thread stops waiting for a quiet moment.
    closing: AtomicBool,
    /// Contexts of the library's own the pinning thread made (one per device at most).
    own_contexts: AtomicUsize,
    /// Whether the runtime offers contexts of the library's own at all.
    offers_contexts: bool,
    /// Devices whose context of the library's own could not be made.
    no_context: Mutex<Vec<i32>>,
}

/// The page-cache pins of a driver: the budget, the pinning thread and the counters.
#[derive(Debug)]
pub struct PagePins {
    shared: Arc<Shared>,
    /// What the page cache holds is asked through it (`cachestat`).
    io: Arc<dyn FileIo>,
    jobs: Option<Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl PagePins {
    /// Pins made with `runtime`, of ranges that `io` says are cached.
    pub fn new(runtime: Arc<dyn GpuRuntime>, io: Arc<dyn FileIo>) -> std::io::Result<Self> {
        let runtime_offers = runtime.offers_contexts();
        let shared = Arc::new(Shared {
            runtime,
            pinned: Arc::default(),
            files: Mutex::default(),
            served: AtomicU64::new(0),
            pins_made: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            running: AtomicUsize::new(0),
            quiet_since: AtomicU64::new(0),
            epoch: Instant::now(),
            closing: AtomicBool::new(false),
            own_contexts: AtomicUsize::new(0),
            offers_contexts: runtime_offers,
            no_context: Mutex::default(),
        });
        let (tx, rx) = crossbeam_channel::unbounded();
        let worker = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("hipfile-pins".into())
            .spawn(move || pinning::pin_windows(&worker, &rx))?;
        Ok(PagePins {
            shared,
            io,
            jobs: Some(tx),
            thread: Some(thread),
        })
    }

    /// Bytes of page cache pinned now.
    pub fn pinned_bytes(&self) -> usize {
        self.shared.pinned.load(Ordering::Acquire)
    }

    /// Whether windows of `device` are pinned beside reads (in a context of the library's own):
    /// the runtime offers such contexts and making the device's did not fail.
    pub fn pins_beside_reads(&self, device: i32) -> bool {
        let s = &self.shared;
        s.offers_contexts
            && !s
                .no_context
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains(&device)
    }

    /// GPU contexts of the library's own the pinning thread made.
    pub fn own_contexts(&self) -> usize {
        self.shared.own_contexts.load(Ordering::Acquire)
    }

    /// Counters for statistics: bytes copied out of pinned windows, windows pinned, windows
    /// unpinned to make room.
    pub fn counters(&self) -> [(&'static str, u64); 3] {
        let s = &self.shared;
        [
            ("pinned_page_cache_bytes", s.served.load(Ordering::Relaxed)),
            ("page_cache_pins", s.pins_made.load(Ordering::Relaxed)),
            ("page_cache_pins_evicted", s.evicted.load(Ordering::Relaxed)),
        ]
    }

    /// Count `bytes` copied out of pinned windows.
    fn served(&self, bytes: usize) {
        self.shared
            .served
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Mark a request of the engine at work until the answer is dropped (when the request has
    /// finished): windows are pinned only while none is.
    fn running(&self) -> Running {
        self.shared.running.fetch_add(1, Ordering::AcqRel);
        Running(Arc::clone(&self.shared))
    }

    fn send(&self, job: Job) {
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(job);
        }
    }

    /// Unpin every window of `pins`, on the pinning thread.
    fn drop_windows(&self, state: &mut FileWindows) {
        if !state.windows.is_empty() {
            self.send(Job::Unpin(std::mem::take(&mut state.windows)));
        }
    }

    /// The pinned windows a request may copy out of, and for a read some of whose windows are
    /// queued for pinning where pinning runs beside reads, its live view of the windows pinned
    /// while it runs. A read whose file changed since its windows were pinned unpins them;
    /// windows it touches that are not pinned are queued for pinning when the file is settled
    /// and the budget is not 0. A write unpins every window of its file and answers none; so
    /// does a request under `HIPFILE_DIRECT_IO=always` (which asks to keep off the page cache),
    /// and a request that carries no stamp of its file gets none.
    fn look_up(&self, req: &IoRequest<'_>) -> (PinView, Option<Arc<LivePins>>) {
        let mut view = PinView::default();
        let budget = req.settings.page_cache_pin_bytes();
        let off = budget == 0 || req.settings.direct_io == DirectIoPolicy::Always;
        let Some(stamp) = req.file_stamp else {
            return (view, None);
        };
        if off || req.op == IoOp::Write || req.append {
            if let Some(pins) = req.file.backend_state_if::<Arc<FilePins>>() {
                self.drop_windows(&mut pins.lock());
            }
            return (view, None);
        }
        let Some(pins) = req.file.backend_state(|| Arc::new(FilePins::default())) else {
            return (view, None);
        };
        let mut state = pins.lock();
        if state.stamp != stamp {
            self.drop_windows(&mut state);
            state.stamp = stamp;
        }
        let end = req
            .file_offset
            .saturating_add(req.size() as u64)
            .min(stamp.size);
        if req.file_offset >= end {
            return (view, None);
        }
        let first = req.file_offset / WINDOW as u64;
        let last = (end - 1) / WINDOW as u64;
        let now = Instant::now();
        let settled = settled(stamp, req.settings.page_cache_pin_settle_ms);
        let mut queued = Vec::new();
        let mut waiting = false;
        for w in first..=last {
            match state.windows.get_mut(&w) {
                Some(Window::Pinned { range, used }) => {
                    *used = now;
                    view.push(Arc::clone(range));
                }
                Some(Window::Queued) => waiting = true,
                Some(Window::Skipped { until }) if *until > now => {}
                _ if settled => {
                    let start = w * WINDOW as u64;
                    let len = (stamp.size - start).min(WINDOW as u64) as usize;
                    let fd = req.file.buffered_fd();
                    // Only a window the page cache holds whole (`cachestat`: pinning pages that
                    // are not cached would read them from the disk, one fault at a time, under
                    // the runtime's lock). The request holds the file: map it now, pin it later.
                    let cached = self
                        .io
                        .cached_pages(fd, start, len as u64)
                        .is_some_and(|c| c.cached >= c.total);
                    let mapping = cached
                        .then(|| FileMapping::map(fd, start, len))
                        .and_then(|m| {
                            m.map_err(|e| log::debug!("mapping {len} bytes at {start}: {e}"))
                                .ok()
                        });
                    let Some(mapping) = mapping else {
                        state
                            .windows
                            .insert(w, Window::Skipped { until: now + RETRY });
                        continue;
                    };
                    state.windows.insert(w, Window::Queued);
                    queued.push(Pin {
                        file: Arc::downgrade(pins),
                        window: w,
                        mapping,
                        stamp,
                        device: req.device(),
                        budget,
                        own_context: req.settings.page_cache_pin_own_context,
                    });
                }
                _ => {}
            }
        }
        drop(state);
        // Windows pinned beside the read serve its back (a read that runs past the end of the
        // file has none they can hold).
        let within = req.file_offset.saturating_add(req.size() as u64) <= stamp.size;
        let live = ((!queued.is_empty() || waiting)
            && within
            && req.settings.page_cache_pin_own_context
            && self.pins_beside_reads(req.device()))
        .then(|| {
            Arc::new(LivePins {
                file: Arc::downgrade(pins),
                stamp,
                seen: AtomicU64::new(pins.pinned_so_far.load(Ordering::Acquire)),
            })
        });
        if !queued.is_empty() {
            {
                let mut files = self
                    .shared
                    .files
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                files.retain(|f| f.strong_count() > 0);
                let me = Arc::downgrade(pins);
                if !files.iter().any(|f| f.ptr_eq(&me)) {
                    files.push(me);
                }
            }
            self.send(Job::Pin(queued));
        }
        (view, live)
    }

    /// Wait until the pinning thread has worked through every window queued so far (tests, and
    /// the benchmark's repeated reads). The thread pins only while the engine is idle: under a
    /// steady stream of requests this waits until they pause.
    pub fn settle(&self) {
        let (tx, rx) = crossbeam_channel::bounded(1);
        if let Some(jobs) = &self.jobs {
            if jobs.send(Job::Marker(tx)).is_ok() {
                let _ = rx.recv();
            }
        }
    }
}

impl Drop for PagePins {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::Release);
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Whether the file's last change lies at least `settle_ms` in the past.
fn settled(stamp: FileStamp, settle_ms: u64) -> bool {
    let Ok(now) = SystemTime::now().duration_since(UNIX_EPOCH) else {
        return false;
    };
    let (secs, nanos) = stamp.changed;
    let changed = Duration::new(
        u64::try_from(secs).unwrap_or(0),
        u32::try_from(nanos).unwrap_or(0),
    );
    now.checked_sub(changed)
        .is_some_and(|age| age >= Duration::from_millis(settle_ms))
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipfile_hip::sim::{SimConfig, SimRuntime};

    #[test]
    fn pins_run_beside_reads_only_where_the_runtime_offers_contexts_of_its_own() {
        let io: Arc<dyn FileIo> = Arc::new(hipfile_core::PosixIo);
        let with = PagePins::new(Arc::new(SimRuntime::default()), Arc::clone(&io)).unwrap();
        assert!(with.pins_beside_reads(0));
        let without = PagePins::new(
            Arc::new(SimRuntime::new(SimConfig {
                own_contexts: false,
                ..SimConfig::default()
            })),
            io,
        )
        .unwrap();
        assert!(!without.pins_beside_reads(0));
    }
}
