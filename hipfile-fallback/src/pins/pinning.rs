//! The pinning thread: it pins the windows requests queued, the last queued first, in a GPU
//! context of its own or while the engine is idle, and unpins windows idle for a second,
//! least recently used first, to make room in the budget.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};
use hipfile_hip::{OwnedContext, PinnedFileRange};

use super::{FilePins, FileWindows, Job, Pin, Shared, Window, IDLE, QUIET, RETRY, WINDOW};

/// The pins' log lines keep the target they had when the pins were one module, so that
/// applications filtering on it keep seeing them.
const LOG_TARGET: &str = "hipfile_fallback::pins";

/// The pinning thread: pin each queued window, until the driver closes. The window queued last
/// is pinned first: a read queues its windows first to last, so the pins of the read at work
/// start at its far end (where its staging threads arrive last, [`super::TransferPins::serve_tail`]), and windows of
/// reads gone by wait behind those of the read at work. Unpinning runs as soon as it is asked
/// for; a marker is answered once no window waits.
pub(super) fn pin_windows(shared: &Shared, jobs: &Receiver<Job>) {
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
            log::info!(
                target: LOG_TARGET,
                "page-cache pins of device {device} are made in a GPU context of their own"
            );
            Some(Arc::new(context))
        }
        answer => {
            if let Err(e) = answer {
                log::info!(
                    target: LOG_TARGET,
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
        .map_err(|e| log::debug!(target: LOG_TARGET, "pinning the page cache at {start}: {e}"))
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
