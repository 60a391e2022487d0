//! Settings that must change what the engine does, and many threads at once.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::thread;

use hipfile_core::{Driver, DriverOptions, IoOp, RegistryBuilder};
use hipfile_hip::sim::SimRuntime;
use hipfile_hip::{DeviceBuffer, GpuRuntime, MemoryKind};
use hipfile_testkit::conformance::pattern;
use hipfile_testkit::faults::{FileOp, ScriptedIo};

use crate::support::{call, driver, Cachestat, HookedIo};

fn read_all(d: &Driver, path: &std::path::Path, dev: &DeviceBuffer, size: usize) -> usize {
    let file = std::fs::File::open(path).unwrap();
    let handle = d.handle_register(file.as_raw_fd()).unwrap();
    let n = d.io(call(IoOp::Read, handle, dev.ptr(), size, 0)).unwrap();
    d.handle_deregister(handle).unwrap();
    n
}

#[test]
fn the_largest_transfer_bounds_every_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let size = 1 << 20;
    std::fs::write(&path, pattern(5, 0, size)).unwrap();
    for (kb, preads) in [(64u64, 16u64), (256, 4)] {
        let sim = Arc::new(SimRuntime::default());
        let io = Arc::new(ScriptedIo::new());
        // One thread per request: pieces are then whole transfers, not shares of the request.
        let d = driver(
            &sim,
            Some(io.clone() as Arc<dyn hipfile_core::FileIo>),
            |s| {
                s.max_direct_io_size_kb = kb;
                s.direct_io = hipfile_core::DirectIoPolicy::Never;
                s.max_request_parallelism = 1;
            },
        );
        let dev = DeviceBuffer::new(sim.clone(), size).unwrap();
        assert_eq!(read_all(&d, &path, &dev, size), size);
        assert_eq!(
            io.calls(FileOp::Pread),
            preads,
            "max_direct_io_size_kb = {kb}"
        );
        assert_eq!(dev.to_vec().unwrap(), pattern(5, 0, size));
    }
}

#[test]
fn the_pinned_memory_bound_bounds_the_staging_pool() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let size = 4 << 20;
    std::fs::write(&path, pattern(6, 0, size)).unwrap();
    let sim = Arc::new(SimRuntime::default());
    // 64 KiB of pinned memory: 16 KiB chunks, lanes of 32 KiB, at most two of them.
    let d = driver(&sim, None, |s| {
        s.max_pinned_mem_size_kb = 64;
        s.max_io_threads = 4;
    });
    thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                let dev = DeviceBuffer::new(sim.clone(), size).unwrap();
                assert_eq!(read_all(&d, &path, &dev, size), size);
                assert_eq!(dev.to_vec().unwrap(), pattern(6, 0, size));
            });
        }
    });
    let peak = sim.peak_allocations(MemoryKind::Host);
    assert!(
        (1..=2).contains(&peak),
        "at most two 32 KiB lanes fit 64 KiB, at any moment: {peak} were live at once"
    );
    assert!(sim.live_allocations(MemoryKind::Host) <= 2);
}

#[test]
fn sixty_four_threads_register_and_move_bytes_through_the_staged_engine() {
    let sim = Arc::new(SimRuntime::default());
    let d = driver(&sim, None, |s| s.per_buffer_cache_size_kb = 16);
    let dir = tempfile::tempdir().unwrap();
    thread::scope(|scope| {
        for t in 0..64usize {
            let (d, sim, dir) = (&d, &sim, &dir);
            scope.spawn(move || {
                let size = 200_000 + 4099 * t;
                let path = dir.path().join(format!("t{t}"));
                let file = OpenOptions::new()
                    .create_new(true)
                    .read(true)
                    .write(true)
                    .open(&path)
                    .unwrap();
                let data = pattern(t as u64, 0, size);
                let mut src = DeviceBuffer::new(sim.clone(), size).unwrap();
                src.write_at(0, &data).unwrap();
                let dst = DeviceBuffer::new(sim.clone(), size).unwrap();
                let handle = d.handle_register(file.as_raw_fd()).unwrap();
                d.buf_register(src.ptr(), size, 0).unwrap();
                let write = call(IoOp::Write, handle, src.ptr(), size, 0);
                assert_eq!(d.io(write).unwrap(), size);
                assert_eq!(
                    d.io(call(IoOp::Read, handle, dst.ptr(), size, 0)).unwrap(),
                    size
                );
                assert_eq!(dst.to_vec().unwrap(), data, "thread {t}");
                d.buf_deregister(src.ptr()).unwrap();
                d.handle_deregister(handle).unwrap();
            });
        }
    });
    d.close().unwrap();
    assert_eq!(
        sim.live_allocations(MemoryKind::Host),
        0,
        "closing frees every staging lane"
    );
}

/// Read a 64 MiB file that the page cache holds through the fallback in `Auto` with `io`'s
/// cachestat answer and `RWF_NOWAIT` refusing every 4 MiB (as the kernel refuses the cached page
/// that carries its readahead mark); returns the reads made on the O_DIRECT descriptor and the
/// `RWF_NOWAIT` probes, and whether this kernel answers `cachestat` itself. The bytes are checked.
fn read_cached_file(cachestat: Cachestat) -> (u64, u64, bool) {
    use std::sync::atomic::{AtomicU64, Ordering};
    // TMPDIR, as every file test here: on the GPU machine the bundle points it at its scratch
    // directory (the build machine's target directory does not exist there).
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cached");
    let size = 64 << 20;
    let data = pattern(7, 0, size);
    std::fs::write(&path, &data).unwrap();
    assert_eq!(std::fs::read(&path).unwrap().len(), size);
    let file = std::fs::File::open(&path).unwrap();
    let kernel_answers =
        hipfile_hip::os::cached_pages(std::os::fd::AsFd::as_fd(&file), 0, 4096).is_some();
    let sim = Arc::new(SimRuntime::default());
    let direct_reads = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&direct_reads);
    let io = Arc::new(
        HookedIo::before_pread(move |fd| {
            if rustix::fs::fcntl_getfl(fd).is_ok_and(|f| f.contains(rustix::fs::OFlags::DIRECT)) {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        })
        .refusing_cached_every(4 << 20)
        .with_cachestat(cachestat),
    );
    let mut backends = RegistryBuilder::new();
    hipfile_fallback::register(&mut backends).unwrap();
    let rt: Arc<dyn GpuRuntime> = sim.clone();
    let d = Driver::new(DriverOptions {
        backends: Some(backends),
        selection: None,
        io: io.clone(),
        ..DriverOptions::with_runtime(rt)
    });
    d.stage_settings(|s| s.direct_io = hipfile_core::DirectIoPolicy::Auto)
        .unwrap();
    let dev = DeviceBuffer::new(sim.clone(), size).unwrap();
    assert_eq!(read_all(&d, &path, &dev, size), size);
    assert!(dev.to_vec().unwrap() == data, "bytes differ");
    (
        direct_reads.load(Ordering::Relaxed),
        io.probes(),
        kernel_answers,
    )
}

#[test]
fn a_cached_file_is_read_from_the_page_cache_never_from_the_disk() {
    let (direct, probes, kernel_answers) = read_cached_file(Cachestat::Kernel);
    assert_eq!(direct, 0, "cached pieces were read with O_DIRECT");
    // Where the kernel answers cachestat (6.5 and later), nothing is probed with RWF_NOWAIT;
    // before, every piece is.
    assert_eq!(probes == 0, kernel_answers, "{probes} RWF_NOWAIT probes");
}

#[test]
fn without_cachestat_readahead_marks_do_not_send_cached_pieces_to_the_disk() {
    let (direct, probes, _) = read_cached_file(Cachestat::Missing);
    assert_eq!(direct, 0, "cached pieces were read with O_DIRECT");
    assert!(probes > 0, "the RWF_NOWAIT probe was not used");
}

#[test]
fn pieces_cachestat_calls_cold_go_to_the_disk_without_a_probe() {
    let (direct, probes, _) = read_cached_file(Cachestat::Cold);
    // Where the file system takes O_DIRECT (TMPDIR must be on one, see conformance.rs),
    // every aligned piece is read with it; no RWF_NOWAIT probe starts readahead.
    assert!(direct > 0, "cold pieces were read through the page cache");
    assert_eq!(probes, 0, "cold pieces were probed with RWF_NOWAIT");
}

#[test]
fn deregistering_a_buffer_with_io_in_flight_is_refused_and_a_file_waits_for_its_io() {
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel();
    // The first pread waits until the test has tried to deregister.
    let started = std::sync::Mutex::new(Some(started_tx));
    let release = std::sync::Mutex::new(release_rx);
    let io = Arc::new(HookedIo::before_pread(move |_| {
        if let Some(started) = started.lock().unwrap().take() {
            started.send(()).unwrap();
            release.lock().unwrap().recv().unwrap();
        }
    }));
    let sim = Arc::new(SimRuntime::default());
    let d = driver(&sim, Some(io), |s| {
        s.direct_io = hipfile_core::DirectIoPolicy::Never
    });
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, pattern(9, 0, 1 << 20)).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let handle = d.handle_register(file.as_raw_fd()).unwrap();
    let registration = Arc::downgrade(&d.file(handle).unwrap());
    let dev = DeviceBuffer::new(sim.clone(), 1 << 20).unwrap();
    d.buf_register(dev.ptr(), 1 << 20, 0).unwrap();
    let (buffer, file_handle, read) = thread::scope(|s| {
        let reader = s.spawn(|| d.io(call(IoOp::Read, handle, dev.ptr(), 1 << 20, 0)));
        started_rx.recv().unwrap();
        // Looked at only once the read was let go, so a failed check cannot leave it held.
        let buffer = d.buf_deregister(dev.ptr()).map_err(|e| e.kind());
        let file_handle = d.handle_deregister(handle).map_err(|e| e.kind());
        let held = registration.upgrade().is_some();
        release_tx.send(()).unwrap();
        (buffer, (file_handle, held), reader.join().unwrap())
    });
    assert_eq!(
        buffer,
        Err(hipfile_core::ErrorKind::InvalidValue),
        "the memory a read is filling"
    );
    assert_eq!(
        file_handle,
        (Ok(()), true),
        "the handle is forgotten, the read holds its registration"
    );
    assert_eq!(read.unwrap(), 1 << 20, "the read ran to its end");
    assert!(
        registration.upgrade().is_none(),
        "then the registration ended"
    );
    d.buf_deregister(dev.ptr()).unwrap();
    assert_eq!(
        d.handle_deregister(handle).unwrap_err().kind(),
        hipfile_core::ErrorKind::HandleNotRegistered
    );
    assert_eq!(dev.to_vec().unwrap(), pattern(9, 0, 1 << 20));
}

#[test]
fn the_engine_reports_the_lanes_and_threads_it_holds() {
    let sim = Arc::new(SimRuntime::default());
    let d = driver(&sim, None, |s| {
        s.max_io_threads = 3;
        s.per_buffer_cache_size_kb = 1024;
    });
    let held = d.session().unwrap().registry().resources();
    // One lane of two 1 MiB halves for each thread that can work on a request: 3 workers and
    // the caller, made when the driver opened.
    assert_eq!(
        held,
        vec![(
            "fallback",
            hipfile_core::Resources {
                pinned_bytes: 4 * (2 << 20),
                io_threads: 3,
                page_cache_pinned_bytes: 0,
                own_contexts: 0,
            }
        )]
    );
    assert_eq!(
        held[0].1.pinned_bytes,
        sim.live_allocations(MemoryKind::Host) * (2 << 20),
        "the report matches what the runtime allocated"
    );
    d.close().unwrap();
}

/// An `O_APPEND` descriptor: a write spread over many pieces (and, if it were positional, over
/// every thread) lands at the end of the file, in order, over nothing that was there; the file
/// offset it names is not used, as `pwrite(2)` on such a descriptor does.
#[test]
fn writes_through_an_append_descriptor_append_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let head = pattern(1, 0, 12_345);
    std::fs::write(&path, &head).unwrap();
    let sim = Arc::new(SimRuntime::default());
    let io = Arc::new(ScriptedIo::new());
    let d = driver(
        &sim,
        Some(io.clone() as Arc<dyn hipfile_core::FileIo>),
        |s| {
            s.per_buffer_cache_size_kb = 64;
            s.min_piece_kb = 64;
            s.min_io_threshold_kb = 0;
            s.direct_io = hipfile_core::DirectIoPolicy::Always;
        },
    );
    let file = OpenOptions::new()
        .read(true)
        .append(true)
        .open(&path)
        .unwrap();
    let handle = d.handle_register(file.as_raw_fd()).unwrap();
    let size = (1 << 20) + 777;
    let body = pattern(2, 0, size);
    let mut dev = DeviceBuffer::new(sim.clone(), size).unwrap();
    dev.write_at(0, &body).unwrap();
    let write = |file_offset| d.io(call(IoOp::Write, handle, dev.ptr(), size, file_offset));
    assert_eq!(write(0).unwrap(), size);
    assert_eq!(write(4096).unwrap(), size);
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk.len(), head.len() + 2 * size);
    assert!(
        on_disk[..head.len()] == head[..],
        "the bytes before were kept"
    );
    assert!(
        on_disk[head.len()..head.len() + size] == body[..],
        "first append in order"
    );
    assert!(
        on_disk[head.len() + size..] == body[..],
        "second append in order"
    );
    assert_eq!(
        io.calls(FileOp::Pwrite),
        2 * size.div_ceil(64 << 10) as u64,
        "one appending write per 64 KiB piece, none through O_DIRECT"
    );
}

/// Two threads appending through one registered `O_APPEND` descriptor at once: each request
/// lands whole, one after the other, though each is written in many pieces.
#[test]
fn concurrent_appends_to_one_file_land_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    std::fs::write(&path, b"head").unwrap();
    let sim = Arc::new(SimRuntime::default());
    let d = driver(&sim, None, |s| {
        s.per_buffer_cache_size_kb = 16;
        s.min_io_threshold_kb = 0;
    });
    let file = OpenOptions::new().append(true).open(&path).unwrap();
    let handle = d.handle_register(file.as_raw_fd()).unwrap();
    let size = 512 * 1024;
    let bodies = [pattern(31, 0, size), pattern(32, 0, size)];
    thread::scope(|scope| {
        for body in &bodies {
            let (d, sim) = (&d, &sim);
            scope.spawn(move || {
                let mut dev = DeviceBuffer::new(sim.clone(), size).unwrap();
                dev.write_at(0, body).unwrap();
                for _ in 0..4 {
                    let n = d.io(call(IoOp::Write, handle, dev.ptr(), size, 0)).unwrap();
                    assert_eq!(n, size);
                }
            });
        }
    });
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk.len(), 4 + 8 * size);
    assert_eq!(&on_disk[..4], b"head");
    for (k, request) in on_disk[4..].chunks(size).enumerate() {
        assert!(
            bodies.iter().any(|b| b[..] == *request),
            "appended request {k} is not one whole request's bytes"
        );
    }
}

/// Descriptors in this process that name `path`.
fn descriptors_of(path: &std::path::Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target == path)
        .count()
}

#[test]
fn a_deregistered_file_keeps_no_descriptor_in_the_engine_while_a_helper_offer_waits() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let size = 8 << 20;
    std::fs::write(&a, pattern(3, 0, size)).unwrap();
    std::fs::write(&b, pattern(4, 0, size)).unwrap();
    let b_target = b.canonicalize().unwrap();
    // Every pread of `b` waits until the gate opens, so the one worker, helping a read of `b`,
    // stays busy and the helper offer of the read of `a` waits in its queue.
    let gate = Arc::new((std::sync::Mutex::new(false), std::sync::Condvar::new()));
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let started_tx = std::sync::Mutex::new(started_tx);
    let hook_gate = Arc::clone(&gate);
    let io = Arc::new(HookedIo::before_pread(move |fd| {
        let target = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        if target.ok().as_deref() != Some(b_target.as_path()) {
            return;
        }
        let _ = started_tx.lock().unwrap().send(());
        let (open, opened) = &*hook_gate;
        let mut open = open.lock().unwrap();
        while !*open {
            open = opened.wait(open).unwrap();
        }
    }));
    let sim = Arc::new(SimRuntime::default());
    let d = driver(&sim, Some(io), |s| {
        s.max_io_threads = 1;
        s.direct_io = hipfile_core::DirectIoPolicy::Never;
    });
    let dev_a = DeviceBuffer::new(sim.clone(), size).unwrap();
    let dev_b = DeviceBuffer::new(sim.clone(), size).unwrap();
    /// Opens the gate when dropped, so a failed assertion cannot leave the reader of `b` waiting.
    struct OpenOnDrop<'a>(&'a (std::sync::Mutex<bool>, std::sync::Condvar));
    impl Drop for OpenOnDrop<'_> {
        fn drop(&mut self) {
            let (open, opened) = self.0;
            *open.lock().unwrap_or_else(|e| e.into_inner()) = true;
            opened.notify_all();
        }
    }
    thread::scope(|s| {
        let reader_b = s.spawn(|| read_all(&d, &b, &dev_b, size));
        let opener = OpenOnDrop(&gate);
        // The reader of `b` and the worker helping it both wait in a pread of `b`.
        for _ in 0..2 {
            started_rx
                .recv_timeout(std::time::Duration::from_secs(30))
                .expect("the reader of b and its helper start");
        }
        assert_eq!(read_all(&d, &a, &dev_a, size), size);
        // `read_all` dropped its descriptor of `a` and deregistered the file: nothing of the
        // engine may keep one open, though the helper offer of that read is still queued.
        assert_eq!(descriptors_of(&a.canonicalize().unwrap()), 0);
        drop(opener);
        assert_eq!(reader_b.join().unwrap(), size);
    });
    assert_eq!(dev_a.to_vec().unwrap(), pattern(3, 0, size));
    assert_eq!(dev_b.to_vec().unwrap(), pattern(4, 0, size));
}
