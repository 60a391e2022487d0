//! Page-cache pins: reads of a cached, settled file are copied out of its pinned pages, and
//! nothing stale, unbounded or unreleased is left behind.

use std::os::fd::AsRawFd;
use std::sync::Arc;

use hipfile_core::{Driver, FileHandleId, IoOp, Settings};

use crate::support::{self, call};
use hipfile_hip::sim::SimRuntime;
use hipfile_hip::{DeviceBuffer, MemoryKind};
use hipfile_testkit::conformance::pattern;

const WINDOW: usize = hipfile_fallback::pins::WINDOW;

fn driver(sim: &Arc<SimRuntime>, tune: impl FnOnce(&mut Settings)) -> Driver {
    support::driver(sim, None, |s| {
        s.stats_level = 1;
        // Files of the tests were just written: pin them at once.
        s.page_cache_pin_settle_ms = 0;
        s.per_buffer_cache_size_kb = 1024;
        tune(s);
    })
}

fn read(d: &Driver, handle: FileHandleId, dev: &DeviceBuffer, size: usize, at: i64) -> usize {
    d.io(call(IoOp::Read, handle, dev.ptr(), size, at)).unwrap()
}

fn counter(d: &Driver, name: &str) -> u64 {
    d.session()
        .unwrap()
        .registry()
        .mechanisms()
        .into_iter()
        .flat_map(|(_, c)| c)
        .find(|(n, _)| *n == name)
        .map_or(0, |(_, v)| v)
}

fn pinned(d: &Driver) -> usize {
    let session = d.session().unwrap();
    session.registry().settle();
    session.registry().resources()[0].1.page_cache_pinned_bytes
}

/// A file of `windows` pinning windows and a half, its driver, handle and a device buffer.
struct Rig {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    file: std::fs::File,
    sim: Arc<SimRuntime>,
    d: Driver,
    handle: FileHandleId,
    dev: DeviceBuffer,
}

fn rig(size: usize, tune: impl FnOnce(&mut Settings)) -> Rig {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, pattern(7, 0, size)).unwrap();
    let sim = Arc::new(SimRuntime::default());
    let d = driver(&sim, tune);
    let file = std::fs::File::open(&path).unwrap();
    let handle = d.handle_register(file.as_raw_fd()).unwrap();
    let dev = DeviceBuffer::new(sim.clone(), size).unwrap();
    Rig {
        _dir: dir,
        path,
        file,
        sim,
        d,
        handle,
        dev,
    }
}

#[test]
fn a_second_read_is_copied_out_of_the_pinned_page_cache() {
    let size = 2 * WINDOW + WINDOW / 2 + 100;
    let mut r = rig(size, |_| {});
    assert_eq!(read(&r.d, r.handle, &r.dev, size, 0), size);
    assert_eq!(r.dev.to_vec().unwrap(), pattern(7, 0, size));
    // The first read's three windows (the last cut at the end of the file) were pinned beside
    // it (what it copied out of them, it took from its far end).
    assert_eq!(pinned(&r.d), size);
    assert_eq!(counter(&r.d, "page_cache_pins"), 3);
    let before = counter(&r.d, "pinned_page_cache_bytes");
    r.dev.fill(0).unwrap();
    assert_eq!(read(&r.d, r.handle, &r.dev, size, 0), size);
    assert_eq!(r.dev.to_vec().unwrap(), pattern(7, 0, size));
    assert_eq!(
        counter(&r.d, "pinned_page_cache_bytes"),
        before + size as u64
    );
    // A read at an unaligned offset, one across two windows, and one running past the end of
    // the file (its last piece is staged and finds the end).
    let mut got = vec![0u8; 3 << 20];
    for (at, len) in [
        (4097usize, 1 << 20),
        (WINDOW - 1000, 3 << 20),
        (size - 5000, 1 << 20),
    ] {
        let n = read(&r.d, r.handle, &r.dev, len, at as i64);
        assert_eq!(n, len.min(size - at), "read of {len} at {at}");
        r.dev.read_at(0, &mut got[..n]).unwrap();
        assert_eq!(
            got[..n],
            pattern(7, at as u64, n)[..],
            "read of {len} at {at}"
        );
    }
    // The whole file into a larger buffer: the request runs past the end of the file (into
    // the page that holds its last byte), so its last bytes are staged and find the end.
    let big = DeviceBuffer::new(r.sim.clone(), size + 8192).unwrap();
    assert_eq!(read(&r.d, r.handle, &big, size + 8192, 0), size);
    assert_eq!(big.to_vec().unwrap()[..size], pattern(7, 0, size)[..]);
    drop(big);
    // Deregistering the file unpins it: only the staging lanes stay registered host memory.
    let lanes = r.sim.live_allocations(MemoryKind::Host) - 3;
    r.d.handle_deregister(r.handle).unwrap();
    assert_eq!(pinned(&r.d), 0);
    assert_eq!(r.sim.live_allocations(MemoryKind::Host), lanes);
}

#[test]
fn a_changed_file_is_read_as_it_is_now_and_its_pins_are_dropped() {
    let size = WINDOW + 8192;
    let r = rig(size, |_| {});
    read(&r.d, r.handle, &r.dev, size, 0);
    assert_eq!(pinned(&r.d), size);
    // Truncated: the next read finds the new end and unpins the old pages.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&r.path)
        .unwrap()
        .set_len(5000)
        .unwrap();
    let before = counter(&r.d, "pinned_page_cache_bytes");
    assert_eq!(read(&r.d, r.handle, &r.dev, size, 0), 5000);
    assert_eq!(counter(&r.d, "pinned_page_cache_bytes"), before);
    // The old pages unpinned; the file as it is now pinned in their place.
    assert_eq!(pinned(&r.d), 5000);
    // Rewritten with other bytes: read as they are now.
    std::fs::write(&r.path, pattern(8, 0, size)).unwrap();
    assert_eq!(read(&r.d, r.handle, &r.dev, size, 0), size);
    assert_eq!(r.dev.to_vec().unwrap(), pattern(8, 0, size));
    let served = counter(&r.d, "pinned_page_cache_bytes");
    assert_eq!(pinned(&r.d), size, "pinned again under the new stamp");
    assert_eq!(read(&r.d, r.handle, &r.dev, size, 0), size);
    assert_eq!(r.dev.to_vec().unwrap(), pattern(8, 0, size));
    assert_eq!(
        counter(&r.d, "pinned_page_cache_bytes"),
        served + size as u64
    );
}

#[test]
fn a_write_through_the_library_unpins_its_file() {
    let size = WINDOW;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, pattern(3, 0, size)).unwrap();
    let sim = Arc::new(SimRuntime::default());
    let d = driver(&sim, |_| {});
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let handle = d.handle_register(file.as_raw_fd()).unwrap();
    let dev = DeviceBuffer::new(sim.clone(), size).unwrap();
    read(&d, handle, &dev, size, 0);
    assert_eq!(pinned(&d), size);
    let mut small = DeviceBuffer::new(sim.clone(), 4096).unwrap();
    small.write_at(0, &[0xab; 4096]).unwrap();
    d.io(call(IoOp::Write, handle, small.ptr(), 4096, 8192))
        .unwrap();
    assert_eq!(pinned(&d), 0);
    read(&d, handle, &dev, size, 0);
    let mut want = pattern(3, 0, size);
    want[8192..8192 + 4096].fill(0xab);
    assert_eq!(dev.to_vec().unwrap(), want);
}

#[test]
fn pins_stay_within_the_budget_and_make_room_from_idle_windows() {
    let size = 3 * WINDOW;
    let budget_kb = (2 * WINDOW / 1024) as u64;
    let r = rig(size, |s| s.page_cache_pins_kb = Some(budget_kb));
    read(&r.d, r.handle, &r.dev, size, 0);
    assert_eq!(pinned(&r.d), 2 * WINDOW, "two windows fit");
    // The windows are pinned last to first: the first one found no room. It is pinned once a
    // window has been idle long enough to give way (and the first one's refusal is a second
    // old: reads of it before that do not ask again).
    let first = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while counter(&r.d, "page_cache_pins_evicted") == 0 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(300));
        read(&r.d, r.handle, &r.dev, WINDOW, first);
        pinned(&r.d);
    }
    assert_eq!(pinned(&r.d), 2 * WINDOW);
    assert_eq!(counter(&r.d, "page_cache_pins_evicted"), 1);
    let served = counter(&r.d, "pinned_page_cache_bytes");
    read(&r.d, r.handle, &r.dev, WINDOW, first);
    assert_eq!(
        counter(&r.d, "pinned_page_cache_bytes"),
        served + WINDOW as u64
    );
    let mut got = vec![0u8; WINDOW];
    r.dev.read_at(0, &mut got).unwrap();
    assert_eq!(got, pattern(7, first as u64, WINDOW));
}

#[test]
fn nothing_is_pinned_when_the_budget_is_0_direct_io_is_asked_for_or_the_file_just_changed() {
    let size = WINDOW;
    let off = rig(size, |s| s.page_cache_pins_kb = Some(0));
    read(&off.d, off.handle, &off.dev, size, 0);
    assert_eq!(pinned(&off.d), 0);
    let direct = rig(size, |s| s.direct_io = hipfile_core::DirectIoPolicy::Always);
    read(&direct.d, direct.handle, &direct.dev, size, 0);
    assert_eq!(
        pinned(&direct.d),
        0,
        "O_DIRECT asked for: no page cache pinned"
    );
    let fresh = rig(size, |s| s.page_cache_pin_settle_ms = 60_000);
    read(&fresh.d, fresh.handle, &fresh.dev, size, 0);
    assert_eq!(pinned(&fresh.d), 0);
    assert_eq!(fresh.dev.to_vec().unwrap(), pattern(7, 0, size));
}

#[test]
fn a_file_whose_pages_are_not_all_cached_is_not_pinned() {
    let size = WINDOW;
    let r = rig(size, |_| {});
    // Drop the file's pages from the cache where the kernel lets us; a kernel without
    // cachestat(2) cannot say what is cached, and nothing is pinned either way.
    r.file.sync_all().unwrap();
    rustix::fs::fadvise(&r.file, 0, None, rustix::fs::Advice::DontNeed).unwrap();
    let cached = hipfile_hip::os::cached_pages(std::os::fd::AsFd::as_fd(&r.file), 0, size as u64);
    if !cached.is_some_and(|c| c.cached < c.total) {
        // The kernel cannot say, or the filesystem keeps its pages (tmpfs): nothing to show.
        eprintln!("page cache not dropped here: {cached:?}");
        return;
    }
    // The read brings its own page back into the cache, not the rest of the window.
    read(&r.d, r.handle, &r.dev, 4096, 0);
    assert_eq!(pinned(&r.d), 0);
    assert_eq!(counter(&r.d, "page_cache_pins"), 0);
}

#[test]
fn pinning_waits_for_requests_at_work_not_for_finished_ones_nobody_reaped() {
    let size = WINDOW;
    // In the device's primary context (a runtime without contexts of the library's own).
    let r = rig(size, |s| s.page_cache_pin_own_context = false);
    let batch = r.d.batch_setup(1).unwrap();
    r.d.batch_submit(
        batch,
        &[hipfile_core::BatchEntry {
            call: call(IoOp::Read, r.handle, r.dev.ptr(), size, 0),
            cookie: 1,
        }],
    )
    .unwrap();
    // The entry runs on the IO workers and finishes; nobody reaps it, so its completion stays
    // held by the batch. The window it asked for is pinned all the same.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        s.spawn(|| tx.send(pinned(&r.d)).unwrap());
        let got = rx.recv_timeout(std::time::Duration::from_secs(20));
        if got.is_err() {
            // Let the waiting thread go before failing.
            r.d.batch_destroy(batch).unwrap();
        }
        assert_eq!(got.expect("pinning waited for a finished entry"), size);
    });
    r.d.batch_destroy(batch).unwrap();
}

/// A read of another file held inside its first `pread` until released, while a window of the
/// rig's file waits to be pinned: pinned at once in a context of the library's own (and
/// reported), only after the held read in the primary context.
#[test]
fn windows_are_pinned_in_a_context_of_their_own_beside_requests_at_work() {
    for own in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, pattern(2, 0, WINDOW)).unwrap();
        std::fs::write(&b, pattern(5, 0, 8192)).unwrap();
        let held_inode = std::fs::metadata(&b)
            .map(|m| std::os::unix::fs::MetadataExt::ino(&m))
            .unwrap();
        let gate = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
        let hook_gate = Arc::clone(&gate);
        // The held file reads as not cached: its window is never pinned, so the held read is
        // staged and waits in its `pread`. (Cached, its window could be pinned in a context of
        // its own before the read reached the `pread`, and carry its only piece.)
        let io = support::HookedIo::before_pread(move |fd| {
            if rustix::fs::fstat(fd).is_ok_and(|st| st.st_ino == held_inode) {
                let (open, cv) = &*hook_gate;
                let mut open = open.lock().unwrap();
                while !*open {
                    open = cv.wait(open).unwrap();
                }
            }
        })
        .with_cachestat(support::Cachestat::ColdFile(held_inode));
        let sim = Arc::new(SimRuntime::default());
        let d = support::driver(&sim, Some(Arc::new(io)), |s| {
            s.stats_level = 1;
            s.page_cache_pin_settle_ms = 0;
            s.page_cache_pin_own_context = own;
        });
        let (fa, fb) = (
            std::fs::File::open(&a).unwrap(),
            std::fs::File::open(&b).unwrap(),
        );
        let (ha, hb) = (
            d.handle_register(fa.as_raw_fd()).unwrap(),
            d.handle_register(fb.as_raw_fd()).unwrap(),
        );
        let mut dev_a = DeviceBuffer::new(sim.clone(), WINDOW).unwrap();
        let dev_b = DeviceBuffer::new(sim.clone(), 8192).unwrap();
        let release = || {
            let (open, cv) = &*gate;
            *open
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = true;
            cv.notify_all();
        };
        // The window of the file read beside the held read.
        let a_window = WINDOW;
        std::thread::scope(|s| {
            // A failed assertion must not leave the held read waiting for ever.
            struct Release<F: Fn()>(F);
            impl<F: Fn()> Drop for Release<F> {
                fn drop(&mut self) {
                    (self.0)();
                }
            }
            let _release = Release(release);
            let held = s.spawn(|| read(&d, hb, &dev_b, 8192, 0));
            // The held read is at work before the window is asked for.
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert!(!held.is_finished());
            assert_eq!(read(&d, ha, &dev_a, WINDOW, 0), WINDOW);
            let (tx, rx) = std::sync::mpsc::channel();
            let driver = &d;
            s.spawn(move || tx.send(pinned(driver)).unwrap());
            let early = rx.recv_timeout(std::time::Duration::from_millis(500));
            if own {
                assert_eq!(early, Ok(a_window), "pinned beside the read at work");
                assert!(!held.is_finished());
            } else {
                assert!(
                    early.is_err(),
                    "the primary context waits for the engine to pause"
                );
            }
            release();
            assert_eq!(held.join().unwrap(), 8192);
            if !own {
                assert_eq!(rx.recv().unwrap(), a_window);
            }
        });
        let resources = d.session().unwrap().registry().resources()[0].1;
        assert_eq!(resources.own_contexts, usize::from(own));
        dev_a.fill(0).unwrap();
        let before = counter(&d, "pinned_page_cache_bytes");
        assert_eq!(read(&d, ha, &dev_a, WINDOW, 0), WINDOW);
        assert_eq!(dev_a.to_vec().unwrap(), pattern(2, 0, WINDOW));
        assert_eq!(
            counter(&d, "pinned_page_cache_bytes"),
            before + WINDOW as u64
        );
        d.handle_deregister(ha).unwrap();
        d.handle_deregister(hb).unwrap();
        assert_eq!(pinned(&d), 0);
        drop(d);
        assert_eq!(sim.live_contexts(), 0, "the context went with its last pin");
    }
}

/// File IO whose `pread`s, once the returned mark holds the count of the sim's host
/// registrations before a read (its staging lanes), wait until `windows` more are there: until
/// the pinning thread, working beside the read, pinned every window. `once`: only the first
/// `pread` after the mark waits (and clears it).
fn held_until_pinned(
    sim: &Arc<SimRuntime>,
    windows: usize,
    once: bool,
) -> (support::HookedIo, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let mark = Arc::new(AtomicUsize::new(usize::MAX));
    let (sim, hook_mark) = (Arc::clone(sim), Arc::clone(&mark));
    let io = support::HookedIo::before_pread(move |_| {
        let base = if once {
            hook_mark.swap(usize::MAX, Ordering::AcqRel)
        } else {
            hook_mark.load(Ordering::Acquire)
        };
        if base == usize::MAX {
            return;
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while sim.live_allocations(MemoryKind::Host) < base + windows
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    });
    (io, mark)
}

/// A read whose windows are pinned while it runs (its first piece held back until they are)
/// copies the rest of its bytes out of them, from its far end, and every byte is right; a read
/// running past the end of the file, pinned beside too, reads the file's bytes and stops there.
#[test]
fn a_read_takes_the_windows_pinned_while_it_runs_from_its_far_end() {
    let size = 3 * WINDOW + WINDOW / 2;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, pattern(4, 0, size)).unwrap();
    let sim = Arc::new(SimRuntime::default());
    // The first piece waits until the pinning thread pinned the four windows.
    let (io, before) = held_until_pinned(&sim, 4, true);
    let d = support::driver(&sim, Some(Arc::new(io)), |s| {
        s.stats_level = 1;
        s.page_cache_pin_settle_ms = 0;
        s.per_buffer_cache_size_kb = 1024;
        // One thread: its first piece is the only one staged.
        s.max_request_parallelism = 1;
    });
    let file = std::fs::File::open(&path).unwrap();
    let handle = d.handle_register(file.as_raw_fd()).unwrap();
    let dev = DeviceBuffer::new(sim.clone(), size).unwrap();
    before.store(
        sim.live_allocations(MemoryKind::Host),
        std::sync::atomic::Ordering::Release,
    );
    assert_eq!(read(&d, handle, &dev, size, 0), size);
    assert_eq!(dev.to_vec().unwrap(), pattern(4, 0, size));
    // Every piece after the first came out of the windows (the first too, when the windows
    // were pinned before the read took it).
    let piece = 1 << 20;
    let served = counter(&d, "pinned_page_cache_bytes");
    assert!(
        served == (size - piece) as u64 || served == size as u64,
        "{served} bytes out of the windows"
    );
    assert_eq!(pinned(&d), size);

    // Past the end of the file, on a fresh registration: pinned beside, read as the file is.
    d.handle_deregister(handle).unwrap();
    assert_eq!(pinned(&d), 0);
    let handle = d.handle_register(file.as_raw_fd()).unwrap();
    let big = DeviceBuffer::new(sim.clone(), size + 3 * piece).unwrap();
    let at = 12345;
    assert_eq!(
        read(&d, handle, &big, size + 3 * piece, at as i64),
        size - at
    );
    assert_eq!(
        big.to_vec().unwrap()[..size - at],
        pattern(4, at as u64, size - at)[..]
    );
    assert_eq!(pinned(&d), size);
}

/// Several threads read an unaligned range while its windows are pinned beside them: every
/// thread's first piece waits for the windows, the rest of the range comes out of them, and
/// every byte is where it belongs.
#[test]
fn several_threads_and_an_unaligned_range_share_a_read_with_the_windows_pinned_beside_it() {
    let size = 4 * WINDOW + WINDOW / 2;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, pattern(9, 0, size)).unwrap();
    let sim = Arc::new(SimRuntime::default());
    // Every thread's first piece waits until the pinning thread pinned every window.
    let (io, before) = held_until_pinned(&sim, size.div_ceil(WINDOW), false);
    let threads = 4;
    let d = support::driver(&sim, Some(Arc::new(io)), |s| {
        s.stats_level = 1;
        s.page_cache_pin_settle_ms = 0;
        s.per_buffer_cache_size_kb = 1024;
        s.max_request_parallelism = threads;
    });
    let file = std::fs::File::open(&path).unwrap();
    let handle = d.handle_register(file.as_raw_fd()).unwrap();
    let (at, len) = (4097usize, size - 4097 - 5000);
    let dev = DeviceBuffer::new(sim.clone(), len).unwrap();
    before.store(
        sim.live_allocations(MemoryKind::Host),
        std::sync::atomic::Ordering::Release,
    );
    assert_eq!(read(&d, handle, &dev, len, at as i64), len);
    before.store(usize::MAX, std::sync::atomic::Ordering::Release);
    assert_eq!(dev.to_vec().unwrap(), pattern(9, at as u64, len));
    let served = counter(&d, "pinned_page_cache_bytes") as usize;
    // Each staging thread's first piece (1 MiB at most) was staged; windows carried the rest.
    assert!(
        served <= len && served + threads as usize * (1 << 20) >= len,
        "{served} of {len} bytes out of the windows"
    );
}

/// A context of the library's own that cannot be made (the device out of memory, a GPU that
/// allows one context): the windows are pinned in the primary context, in the engine's pauses,
/// and reads stop expecting pins beside them.
#[test]
fn without_a_context_of_its_own_the_windows_are_pinned_in_the_primary_one() {
    use hipfile_testkit::faults::{RuntimeOp, ScriptedRuntime, Trigger};
    let size = 2 * WINDOW;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, pattern(6, 0, size)).unwrap();
    let sim = Arc::new(SimRuntime::default());
    let scripted = Arc::new(ScriptedRuntime::new(sim.clone()).rule(
        RuntimeOp::ContextCreate,
        Trigger::From(1),
        hipfile_hip::HipErrorCode::OUT_OF_MEMORY,
    ));
    let d = support::driver_on(scripted.clone(), None, |s| {
        s.stats_level = 1;
        s.page_cache_pin_settle_ms = 0;
    });
    let file = std::fs::File::open(&path).unwrap();
    let handle = d.handle_register(file.as_raw_fd()).unwrap();
    let dev = DeviceBuffer::new(scripted.clone(), size).unwrap();
    assert_eq!(read(&d, handle, &dev, size, 0), size);
    assert_eq!(pinned(&d), size, "pinned all the same");
    assert_eq!(scripted.calls(RuntimeOp::ContextCreate), 1, "asked once");
    let resources = d.session().unwrap().registry().resources()[0].1;
    assert_eq!(resources.own_contexts, 0);
    assert_eq!(sim.live_contexts(), 0);
    let before = counter(&d, "pinned_page_cache_bytes");
    assert_eq!(read(&d, handle, &dev, size, 0), size);
    assert_eq!(dev.to_vec().unwrap(), pattern(6, 0, size));
    assert_eq!(counter(&d, "pinned_page_cache_bytes"), before + size as u64);
}
