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
//!   ([`PagePins::view`]): pieces inside a pinned window are copied out of it, the others are
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
//!   back those windows hold and queues their copies out of them ([`LivePins`]), until front and
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
//! [`IoRequest::file_stamp`]: hipfile_core::OwnedRequest::file_stamp

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, Sender};
use hipfile_core::{DirectIoPolicy, FileIo, IoOp, IoRequest};
use hipfile_hip::os::FileStamp;
use hipfile_hip::{FileMapping, GpuRuntime, OwnedContext, PinnedFileRange};

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

/// A read's view of its file's windows while it runs: windows pinned after the read began (the
/// pinning thread works beside the engine in a context of its own) are copied out of from the
/// read's far end ([`crate::engine`] takes those pieces from the back).
#[derive(Debug)]
pub struct LivePins {
    /// Weak: a read its submitter holds long after it finished (an unreaped batch entry) must not
    /// keep a deregistered file's windows pinned.
    file: Weak<FilePins>,
    stamp: FileStamp,
    seen: AtomicU64,
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
pub struct PinView {
    /// The first window (most requests touch one: no list to allocate).
    first: Option<Arc<PinnedFileRange>>,
    more: Vec<Arc<PinnedFileRange>>,
    /// Set for a read some of whose windows are queued for pinning, where pinning runs beside
    /// reads.
    live: Option<Arc<LivePins>>,
}

impl PinView {
    fn push(&mut self, range: Arc<PinnedFileRange>) {
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

    /// The live view of a read some of whose windows wait to be pinned (taken once).
    pub fn take_live(&mut self) -> Option<Arc<LivePins>> {
        self.live.take()
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

/// A request of the engine at work ([`PagePins::running`]): the pinning thread waits until
/// none is, and then some more. Dropped when the request has finished.
#[derive(Debug)]
pub struct Running(Arc<Shared>);

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
            .spawn(move || pin_windows(&worker, &rx))?;
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
    pub fn served(&self, bytes: usize) {
        self.shared
            .served
            .fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// Mark a request of the engine at work until the answer is dropped (when the request has
    /// finished): windows are pinned only while none is.
    pub fn running(&self) -> Running {
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

    /// The pinned windows a request may copy out of. A read whose file changed since its
    /// windows were pinned unpins them; windows it touches that are not pinned are queued for
    /// pinning when the file is settled and the budget is not 0. A write unpins every window of
    /// its file and answers none; so does a request under `HIPFILE_DIRECT_IO=always` (which
    /// asks to keep off the page cache), and a request that carries no stamp of its file gets
    /// none.
    pub fn view(&self, req: &IoRequest<'_>) -> PinView {
        let mut view = PinView::default();
        let budget = req.settings.page_cache_pin_bytes();
        let off = budget == 0 || req.settings.direct_io == DirectIoPolicy::Always;
        let Some(stamp) = req.file_stamp else {
            return view;
        };
        if off || req.op == IoOp::Write || req.append {
            if let Some(pins) = req.file.backend_state_if::<Arc<FilePins>>() {
                self.drop_windows(&mut pins.lock());
            }
            return view;
        }
        let Some(pins) = req.file.backend_state(|| Arc::new(FilePins::default())) else {
            return view;
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
            return view;
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
        if (!queued.is_empty() || waiting)
            && within
            && req.settings.page_cache_pin_own_context
            && self.pins_beside_reads(req.device())
        {
            view.live = Some(Arc::new(LivePins {
                file: Arc::downgrade(pins),
                stamp,
                seen: AtomicU64::new(pins.pinned_so_far.load(Ordering::Acquire)),
            }));
        }
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
        view
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

/// The pinning thread: pin each queued window, until the driver closes. The window queued last
/// is pinned first: a read queues its windows first to last, so the pins of the read at work
/// start at its far end (where its staging threads arrive last, [`LivePins`]), and windows of
/// reads gone by wait behind those of the read at work. Unpinning runs as soon as it is asked
/// for; a marker is answered once no window waits.
fn pin_windows(shared: &Shared, jobs: &Receiver<Job>) {
    // The contexts of the library's own, by device (`None`: the runtime has none, or making
    // one failed), made at the first window of their device and kept while the driver is open
    // (counted in `held:`); each pinned window holds its context too, so the last window gone
    // after the driver closed destroys it.
    let mut contexts: HashMap<i32, Option<Arc<OwnedContext>>> = HashMap::new();
    let mut waiting: Vec<Pin> = Vec::new();
    let mut markers: Vec<Sender<()>> = Vec::new();
    loop {
        let job = if waiting.is_empty() {
            for done in markers.drain(..) {
                let _ = done.send(());
            }
            match jobs.recv() {
                Ok(job) => job,
                Err(_) => return,
            }
        } else {
            match jobs.try_recv() {
                Ok(job) => job,
                Err(crossbeam_channel::TryRecvError::Empty) => {
                    // Nothing new asked for: pin the window queued last.
                    if let Some(pin) = waiting.pop() {
                        if !pin_next(shared, &mut contexts, pin) {
                            return;
                        }
                    }
                    continue;
                }
                Err(crossbeam_channel::TryRecvError::Disconnected) => return,
            }
        };
        match job {
            Job::Pin(pins) => waiting.extend(pins),
            Job::Unpin(windows) => drop(windows),
            Job::Marker(done) => markers.push(done),
        }
    }
}

/// Pin one window, in the context of its device's own where there is one; false when the
/// driver closes while the window waits for a pause.
fn pin_next(
    shared: &Shared,
    contexts: &mut HashMap<i32, Option<Arc<OwnedContext>>>,
    pin: Pin,
) -> bool {
    let context = if pin.own_context {
        contexts
            .entry(pin.device)
            .or_insert_with(|| own_context(shared, pin.device))
            .clone()
    } else {
        None
    };
    // In the device's primary context, pinning would stall the engine's copies (and the
    // application's GPU calls): only in a pause.
    if context.is_none() && !wait_for_quiet(shared) {
        return false;
    }
    if let Some(pins) = pin.file.upgrade() {
        pin_window(shared, &pins, pin, context.as_ref());
    }
    true
}

/// A context of the library's own on `device` for pinning, if the runtime has one to offer.
fn own_context(shared: &Shared, device: i32) -> Option<Arc<OwnedContext>> {
    match OwnedContext::new(&shared.runtime, device) {
        Ok(Some(context)) => {
            shared.own_contexts.fetch_add(1, Ordering::AcqRel);
            log::info!("page-cache pins of device {device} are made in a GPU context of their own");
            Some(Arc::new(context))
        }
        answer => {
            if let Err(e) = answer {
                log::info!(
                    "no GPU context of its own for page-cache pins of device {device} ({e}): \
                     pinning in the primary context, while the engine is idle"
                );
            }
            shared
                .no_context
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(device);
            None
        }
    }
}

/// Wait until no request of the engine has run for [`QUIET`]; false when the driver closes.
///
/// Pinning holds the GPU runtime's lock for as long as it takes (2 ms for a window on the H200
/// host), and every copy the engine queues meanwhile waits for it: pinning beside a hot read
/// halved it there (22.8 against 50 GB/s). So windows are pinned between requests, and a
/// request that arrives while one is being pinned waits at most that one.
fn wait_for_quiet(shared: &Shared) -> bool {
    loop {
        if shared.closing.load(Ordering::Acquire) {
            return false;
        }
        let now = shared.epoch.elapsed().as_nanos() as u64;
        let quiet_for = now.saturating_sub(shared.quiet_since.load(Ordering::Acquire));
        if shared.running.load(Ordering::Acquire) == 0 && quiet_for >= QUIET.as_nanos() as u64 {
            return true;
        }
        std::thread::sleep(QUIET);
    }
}

fn pin_window(
    shared: &Shared,
    pins: &Arc<FilePins>,
    job: Pin,
    context: Option<&Arc<OwnedContext>>,
) {
    let Pin {
        window,
        mapping,
        stamp,
        device,
        budget,
        ..
    } = job;
    let (start, len) = (window * WINDOW as u64, mapping.len());
    let wanted = |state: &FileWindows| {
        state.stamp == stamp && matches!(state.windows.get(&window), Some(Window::Queued))
    };
    if !wanted(&pins.lock()) {
        // Dropped (the file changed or was written) while queued.
        return;
    }
    // Still all cached (pages may have been reclaimed while the window waited).
    let range = if mapping.all_cached() && make_room(shared, len, budget) {
        let ledger = Some(Arc::clone(&shared.pinned));
        match context {
            Some(context) => PinnedFileRange::register_in(context, mapping, ledger),
            None => PinnedFileRange::register(&shared.runtime, device, mapping, ledger),
        }
        .map_err(|e| log::debug!("pinning the page cache at {start}: {e}"))
        .ok()
    } else {
        None
    };
    let mut state = pins.lock();
    if !wanted(&state) {
        // The windows were dropped while this one was pinned: it goes with them.
        return;
    }
    let entry = match range {
        Some(range) => {
            shared.pins_made.fetch_add(1, Ordering::Relaxed);
            pins.pinned_so_far.fetch_add(1, Ordering::AcqRel);
            Window::Pinned {
                range: Arc::new(range),
                used: Instant::now(),
            }
        }
        None => Window::Skipped {
            until: Instant::now() + RETRY,
        },
    };
    state.windows.insert(window, entry);
}

/// Unpin windows idle for [`IDLE`], least recently used first, until `len` more bytes fit in
/// `budget`; whether they fit.
fn make_room(shared: &Shared, len: usize, budget: usize) -> bool {
    let fits = || shared.pinned.load(Ordering::Acquire) + len <= budget;
    if fits() {
        return true;
    }
    if len > budget {
        return false;
    }
    let files: Vec<Arc<FilePins>> = shared
        .files
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    let now = Instant::now();
    let mut idle: Vec<(Instant, usize, u64)> = Vec::new();
    for (i, f) in files.iter().enumerate() {
        for (&w, window) in &f.lock().windows {
            if let Window::Pinned { used, .. } = window {
                if now.duration_since(*used) >= IDLE {
                    idle.push((*used, i, w));
                }
            }
        }
    }
    idle.sort();
    for (_, i, w) in idle {
        if fits() {
            break;
        }
        let mut state = files[i].lock();
        if let Some(Window::Pinned { used, .. }) = state.windows.get(&w) {
            if now.duration_since(*used) >= IDLE {
                let gone = state.windows.remove(&w);
                drop(state);
                // Unpinned here, once no read copies out of it any more.
                drop(gone);
                shared.evicted.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    fits()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipfile_hip::sim::{SimConfig, SimRuntime};
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
