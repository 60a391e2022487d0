//! Signals do not cut transfers short: with a handler installed without `SA_RESTART` (so an
//! interrupted system call fails with EINTR instead of restarting), SIGUSR1 is sent over and over
//! to every thread of the process, the library's `hipfile-io` workers included, while large
//! reads and writes run on both paths; every one must report its full count and move exact
//! bytes. In a child process, so the storm hits no other test.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hipfile::{AsDevice, AsDeviceMut, FileHandle, RegisteredBuffer};
use hipfile_hip::DeviceBuffer;
use hipfile_testkit::conformance::pattern;
use hipfile_testkit::target::runtime_under_test;

use crate::harness::{self, figure, first_difference};

const MIB: usize = 1024 * 1024;

/// Signals sent, in all and to the library's IO workers.
#[derive(Debug, Default)]
struct Storm {
    sent: u64,
    to_workers: u64,
    workers_seen: usize,
}

/// Send SIGUSR1 to every other thread of the process, sweep after sweep, until `stop`.
fn storm(stop: &AtomicBool) -> Storm {
    let me = harness::current_thread_id();
    let mut names: std::collections::HashMap<i32, String> = Default::default();
    let mut out = Storm::default();
    while !stop.load(Ordering::Relaxed) {
        for tid in harness::thread_ids() {
            if tid == me {
                continue;
            }
            let name = names
                .entry(tid)
                .or_insert_with(|| harness::thread_name(tid));
            // A thread that ended since the listing answers ESRCH.
            if harness::signal_thread(tid, libc::SIGUSR1).is_ok() {
                out.sent += 1;
                if name.starts_with("hipfile-io") {
                    out.to_workers += 1;
                }
            }
        }
        thread::sleep(Duration::from_micros(50));
    }
    out.workers_seen = names
        .values()
        .filter(|n| n.starts_with("hipfile-io"))
        .count();
    out
}

/// One transfer of the storm: read or write, where, how much.
struct Transfer {
    what: &'static str,
    write: bool,
    offset: u64,
    len: usize,
    buffer_offset: usize,
}

const TRANSFERS: [Transfer; 4] = [
    Transfer {
        what: "aligned 16 MiB read",
        write: false,
        offset: 4096,
        len: 16 * MIB,
        buffer_offset: 0,
    },
    Transfer {
        what: "unaligned 16 MiB read",
        write: false,
        offset: 1001,
        len: 16 * MIB + 333,
        buffer_offset: 7,
    },
    Transfer {
        what: "unaligned 8 MiB write",
        write: true,
        offset: 777,
        len: 8 * MIB + 5,
        buffer_offset: 3,
    },
    Transfer {
        what: "aligned 8 MiB write",
        write: true,
        offset: 8 * MIB as u64,
        len: 8 * MIB,
        buffer_offset: 0,
    },
];

fn run_transfer(
    t: &Transfer,
    handle: &FileHandle,
    file: &std::fs::File,
    dev: &mut RegisteredBuffer,
    content: &[u8],
) -> usize {
    let start = t.offset as usize;
    let expected = &content[start..start + t.len];
    let window = t.buffer_offset..t.buffer_offset + t.len;
    if t.write {
        // The file keeps its content: a write puts back the bytes that are there.
        dev.write_at(t.buffer_offset, expected).expect("filling");
        let n = handle
            .write(dev.slice(window).expect("a window of the buffer"), t.offset)
            .unwrap_or_else(|e| panic!("{} under signals: {e:?}", t.what));
        assert_eq!(n, t.len, "{} under signals reported {n}", t.what);
        let mut back = vec![0u8; t.len];
        file.read_exact_at(&mut back, t.offset)
            .expect("reading back");
        if let Some(at) = first_difference(&back, expected) {
            panic!("{} under signals: the file differs at byte {at}", t.what);
        }
    } else {
        dev.fill(0).expect("clearing");
        let n = handle
            .read(
                dev.slice_mut(window).expect("a window of the buffer"),
                t.offset,
            )
            .unwrap_or_else(|e| panic!("{} under signals: {e:?}", t.what));
        assert_eq!(n, t.len, "{} under signals reported {n}", t.what);
        let mut back = vec![0u8; t.len];
        dev.read_at(t.buffer_offset, &mut back)
            .expect("device bytes");
        if let Some(at) = first_difference(&back, expected) {
            panic!("{} under signals: the buffer differs at byte {at}", t.what);
        }
    }
    t.len
}

fn storm_child() {
    harness::count_signal_without_restart(libc::SIGUSR1).expect("installing the handler");
    let gpu = runtime_under_test().expect("the GPU runtime").runtime;
    // Four workers whatever the machine, and small pieces, so every request is spread.
    let driver = harness::driver_on(&gpu, |s| {
        s.max_io_threads = 4;
        s.per_buffer_cache_size_kb = 1024;
        s.min_piece_kb = 128;
    });
    let dir = tempfile::tempdir().expect("a temporary directory");
    let content = pattern(0x51, 0, 24 * MIB + 777);
    let path = dir.path().join("data");
    std::fs::write(&path, &content).expect("writing the file");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("opening");
    let handle = driver.register_file(&file).expect("registering");
    let mut dev = driver
        .register_buffer(DeviceBuffer::new(Arc::clone(&gpu), 16 * MIB + 8192).expect("a buffer"))
        .expect("registering the buffer");
    let run_for = harness::run_seconds(2.0);
    let stop = AtomicBool::new(false);
    let (mut transfers, mut bytes) = (0usize, 0usize);
    let storm = thread::scope(|s| {
        let storm = s.spawn(|| storm(&stop));
        let started = Instant::now();
        let mut rounds = 0;
        while rounds < 3 || started.elapsed() < run_for {
            for t in &TRANSFERS {
                bytes += run_transfer(t, &handle, &file, &mut dev, &content);
                transfers += 1;
            }
            rounds += 1;
        }
        stop.store(true, Ordering::Relaxed);
        storm.join().expect("the signalling thread")
    });
    drop(dev);
    let handled = harness::handled_signals();
    figure(format!(
        "EINTR storm: {transfers} transfers ({} kinds), {bytes} bytes checked, all full counts; \
         {} SIGUSR1 sent ({} to {} hipfile-io workers), {handled} handled",
        TRANSFERS.len(),
        storm.sent,
        storm.to_workers,
        storm.workers_seen
    ));
    assert!(
        storm.to_workers > 0,
        "no signal reached a hipfile-io worker: the storm missed the library's threads"
    );
    assert!(handled > 0, "the handler never ran");
}

#[test]
fn transfers_under_a_storm_of_signals_are_whole_and_exact() {
    let name = harness::test_name(
        module_path!(),
        "transfers_under_a_storm_of_signals_are_whole_and_exact",
    );
    if harness::as_child(&name, storm_child) {
        return;
    }
    let run = harness::run_child(
        harness::child_command(&name),
        Duration::from_secs(180),
        &name,
    );
    run.assert_passed(&name);
}
