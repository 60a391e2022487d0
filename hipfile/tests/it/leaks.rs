//! Nothing grows with use: after a warm-up, 10,000 cycles of register file and buffer, IO on
//! both paths, deregister leave the process with the same descriptors, threads, pinned bytes
//! (as the backends report them), simulated allocations and streams, and resident memory (within
//! a bound far below what a leak of one small allocation per cycle would add); closing the
//! driver gives back everything it took, and so do repeated open/IO/close cycles (counted
//! exactly; their resident memory is reported, not asserted: thread churn moves it). In a child
//! process, so that the counts are this test's alone.

use std::fs::OpenOptions;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hipfile::{AsDeviceMut, Driver};
use hipfile_hip::sim::SimRuntime;
use hipfile_hip::{DeviceBuffer, MemoryKind};
use hipfile_testkit::conformance::pattern;
use hipfile_testkit::target::runtime_under_test;

use crate::harness::{self, figure, first_difference};

/// Register/IO/deregister cycles: 10,000, or `HIPFILE_LEAK_CYCLES` (longer runs tell a slow
/// leak from a cache that settles).
fn cycles() -> usize {
    std::env::var("HIPFILE_LEAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}
const WARM_UP: usize = 600;
/// Warm-up cycles whose reads are all spread over the IO workers: the allocator's arenas of the
/// threads that pass the staged pieces around take a few hundred such reads to reach their
/// working size (resident memory grows by about 1 KiB per read up to about 250 KiB, then stops).
const WARM_UP_WORKERS: usize = 500;
const DRIVER_CYCLES: usize = 200;
const DRIVER_WARM_UP: usize = 20;
const FILE_LEN: usize = 1 << 20;
/// Resident memory may grow by this much over the second half of the cycles without a leak
/// (measured on the sim: 4 to 56 KiB over all 10,000 cycles once warm); one 16-byte allocation
/// lost per cycle adds 5,000 heap chunks of 32 bytes, 156 KiB, over the second half.
const RSS_SLACK_KIB: i64 = 128;
/// The same on a real GPU, whose runtime allocates for itself as the cycles run: the second
/// half grew by 0, 76, 96, 104 and 184 KiB in five runs on the H200. The sim's run of the same
/// cycles is the one that catches a 16-byte leak of the library's per cycle.
const GPU_RSS_SLACK_KIB: i64 = 256;

/// What may leak, counted at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Counts {
    fds: usize,
    threads: usize,
    rss_kib: u64,
    /// Pinned bytes and IO threads the backends report (zero when the driver is closed).
    pinned_bytes: usize,
    io_threads: usize,
    /// Live pinned host, device and managed allocations and streams of the simulator.
    sim: Option<[usize; 4]>,
}

impl Counts {
    fn take(driver: Option<&Driver>, sim: Option<&SimRuntime>) -> Counts {
        let resources = driver.map(Driver::resources).unwrap_or_default();
        Counts {
            fds: harness::open_fds(),
            threads: harness::thread_ids().len(),
            rss_kib: harness::rss_kib(),
            pinned_bytes: resources.iter().map(|(_, r)| r.pinned_bytes).sum(),
            io_threads: resources.iter().map(|(_, r)| r.io_threads).sum(),
            sim: sim.map(|s| {
                [
                    s.live_allocations(MemoryKind::Host),
                    s.live_allocations(MemoryKind::Device),
                    s.live_allocations(MemoryKind::Managed),
                    s.live_streams(),
                ]
            }),
        }
    }

    /// Count until nothing has grown since `before`, for at most two seconds: threads that
    /// were told to end (a runtime's stream workers) leave on their own schedule.
    fn settled(driver: Option<&Driver>, sim: Option<&SimRuntime>, before: &Counts) -> Counts {
        let since = Instant::now();
        loop {
            let now = Counts::take(driver, sim);
            if now.growth(before, false).is_empty() || since.elapsed() > Duration::from_secs(2) {
                return now;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Every count that differs from `before` (resident memory: that grew past the slack, the
    /// sim's when the counts are the sim's, a GPU runtime's otherwise).
    fn growth(&self, before: &Counts, rss: bool) -> Vec<String> {
        let mut out = Vec::new();
        let exact = |out: &mut Vec<String>, what: &str, a: usize, b: usize| {
            if a != b {
                out.push(format!("{what} {a} -> {b}"));
            }
        };
        exact(&mut out, "descriptors", before.fds, self.fds);
        if before.threads != self.threads {
            let names: Vec<String> = harness::thread_ids()
                .into_iter()
                .map(harness::thread_name)
                .collect();
            out.push(format!(
                "threads {} -> {} (now: {})",
                before.threads,
                self.threads,
                names.join(", ")
            ));
        }
        exact(
            &mut out,
            "pinned bytes",
            before.pinned_bytes,
            self.pinned_bytes,
        );
        exact(&mut out, "IO threads", before.io_threads, self.io_threads);
        if let (Some(a), Some(b)) = (before.sim, self.sim) {
            let names = [
                "simulated pinned host allocations",
                "simulated device allocations",
                "simulated managed allocations",
                "simulated streams",
            ];
            for ((what, a), b) in names.iter().zip(a).zip(b) {
                exact(&mut out, what, a, b);
            }
        }
        let rss_growth = self.rss_kib as i64 - before.rss_kib as i64;
        let slack = if self.sim.is_some() {
            RSS_SLACK_KIB
        } else {
            GPU_RSS_SLACK_KIB
        };
        if rss && rss_growth > slack {
            out.push(format!(
                "resident memory {} KiB -> {} KiB",
                before.rss_kib, self.rss_kib
            ));
        }
        out
    }

    fn delta(&self, before: &Counts) -> String {
        format!(
            "fds {:+}, threads {:+}, pinned {:+} B, IO threads {:+}, sim {}, RSS {:+} KiB",
            self.fds as i64 - before.fds as i64,
            self.threads as i64 - before.threads as i64,
            self.pinned_bytes as i64 - before.pinned_bytes as i64,
            self.io_threads as i64 - before.io_threads as i64,
            match (before.sim, self.sim) {
                (Some(a), Some(b)) =>
                    format!("{:?}", [0, 1, 2, 3].map(|i| b[i] as i64 - a[i] as i64)),
                _ => "n/a".to_string(),
            },
            self.rss_kib as i64 - before.rss_kib as i64
        )
    }
}

/// The file, the buffers and the expected bytes every cycle uses.
struct Rig {
    path: std::path::PathBuf,
    content: Vec<u8>,
    registered: DeviceBuffer,
    plain: DeviceBuffer,
    back: Vec<u8>,
}

impl Rig {
    /// Register the file and a buffer, write through the fastpath's shape (aligned, registered),
    /// read through the staged path (unaligned, an interior pointer; every 50th cycle a read
    /// large enough for the IO workers), check the bytes, deregister.
    fn cycle(&mut self, driver: &Driver, i: usize) {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .expect("opening the file");
        let handle = driver.register_file(&file).expect("registering the file");
        let mut buffer = driver
            .register_buffer(&mut self.registered)
            .expect("registering the buffer");
        let at = (i % 64) * 4096;
        buffer
            .write_at(0, &self.content[at..at + 4096])
            .expect("filling");
        assert_eq!(handle.write(&buffer, at as u64), Ok(4096));
        let (len, offset) = if i % 50 == 0 || i < WARM_UP_WORKERS {
            (300 * 1024 + 5, 4097 + i % 1000)
        } else {
            (1013, 4097 + i % 1000)
        };
        let interior = self
            .plain
            .slice_mut(333..333 + len)
            .expect("a window of the buffer");
        let n = handle.read(interior, offset as u64).expect("reading");
        assert_eq!(n, len);
        self.plain
            .read_at(333, &mut self.back[..len])
            .expect("device bytes");
        if let Some(d) = first_difference(&self.back[..len], &self.content[offset..offset + len]) {
            panic!("cycle {i}: a read differs at byte {d}");
        }
        drop(buffer);
        drop(handle);
    }
}

fn leak_child() {
    let target = runtime_under_test().expect("the GPU runtime");
    let sim = target.sim.as_deref();
    let gpu = target.runtime;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("data");
    let content = pattern(0x1EA4, 0, FILE_LEN);
    std::fs::write(&path, &content).expect("writing the file");
    let mut rig = Rig {
        registered: DeviceBuffer::new(Arc::clone(&gpu), 4096).expect("a buffer"),
        plain: DeviceBuffer::new(Arc::clone(&gpu), 512 * 1024).expect("a buffer"),
        back: vec![0u8; 512 * 1024],
        path,
        content,
    };
    let open = || {
        harness::driver_on(&gpu, |s| {
            s.max_io_threads = 2;
            s.per_buffer_cache_size_kb = 256;
            s.min_piece_kb = 64;
            s.max_pinned_mem_size_kb = 4096;
        })
    };
    // A GPU runtime starts threads of its own at first use (the sim: its null stream's worker),
    // which live as long as it does: count from after one copy.
    rig.registered.fill(0).expect("a first copy");
    let closed = Counts::take(None, sim);

    let started = Instant::now();
    let driver = open();
    for i in 0..WARM_UP {
        rig.cycle(&driver, i);
    }
    let warm = Counts::take(Some(&driver), sim);
    let cycles = cycles();
    for i in WARM_UP..WARM_UP + cycles / 2 {
        rig.cycle(&driver, i);
    }
    let middle = Counts::take(Some(&driver), sim);
    for i in WARM_UP + cycles / 2..WARM_UP + cycles {
        rig.cycle(&driver, i);
    }
    let after = Counts::settled(Some(&driver), sim, &warm);
    let cycles_took = started.elapsed();
    drop(driver);
    let after_close = Counts::settled(None, sim, &closed);

    let started = Instant::now();
    for i in 0..DRIVER_WARM_UP {
        let driver = open();
        rig.cycle(&driver, i);
    }
    let warm_reopen = Counts::settled(None, sim, &after_close);
    let driver_middle = DRIVER_WARM_UP + (DRIVER_CYCLES - DRIVER_WARM_UP) / 2;
    for i in DRIVER_WARM_UP..driver_middle {
        let driver = open();
        rig.cycle(&driver, i);
    }
    let middle_reopen = Counts::settled(None, sim, &warm_reopen);
    for i in driver_middle..DRIVER_CYCLES {
        let driver = open();
        rig.cycle(&driver, i);
    }
    let after_reopen = Counts::settled(None, sim, &warm_reopen);
    let reopen_took = started.elapsed();

    figure(format!(
        "leaks: {cycles} register/IO/deregister cycles after {WARM_UP} warm-up ({cycles_took:.1?}): \
         open driver holds {} pinned bytes, {} IO threads; delta {}",
        warm.pinned_bytes,
        warm.io_threads,
        after.delta(&warm)
    ));
    figure(format!(
        "leaks: driver close: delta from before it opened {}",
        after_close.delta(&closed)
    ));
    figure(format!(
        "leaks: {} open/IO/close cycles after {DRIVER_WARM_UP} warm-up ({reopen_took:.1?}): delta {}",
        DRIVER_CYCLES - DRIVER_WARM_UP,
        after_reopen.delta(&warm_reopen)
    ));
    figure(format!(
        "leaks: resident memory over the IO cycles: {:+} KiB in the first half, {:+} KiB in the \
         second; over the open/close cycles: {:+} KiB, then {:+} KiB",
        middle.rss_kib as i64 - warm.rss_kib as i64,
        after.rss_kib as i64 - middle.rss_kib as i64,
        middle_reopen.rss_kib as i64 - warm_reopen.rss_kib as i64,
        after_reopen.rss_kib as i64 - middle_reopen.rss_kib as i64
    ));
    let mut leaks = Vec::new();
    for (what, later, earlier, rss) in [
        // Counts must not move over all the cycles; resident memory must not keep growing: a
        // runtime's own caches (the CUDA runtime's, on a GPU) may still settle in the first
        // half, a leak grows in both.
        ("over the IO cycles", &after, &warm, false),
        (
            "over the second half of the IO cycles",
            &after,
            &middle,
            true,
        ),
        ("after the driver closed", &after_close, &closed, false),
        // Each open starts IO threads: the allocator may still be adding per-thread arenas in
        // the first half (seen under load); a leak grows in both halves.
        (
            "over the open/close cycles",
            &after_reopen,
            &warm_reopen,
            false,
        ),
        (
            "over the second half of the open/close cycles",
            &after_reopen,
            &middle_reopen,
            true,
        ),
    ] {
        for g in later.growth(earlier, rss) {
            leaks.push(format!("{what}: {g}"));
        }
    }
    assert!(leaks.is_empty(), "leaked:\n  {}", leaks.join("\n  "));
}

#[test]
fn ten_thousand_cycles_and_driver_close_leak_nothing() {
    let name = harness::test_name(
        module_path!(),
        "ten_thousand_cycles_and_driver_close_leak_nothing",
    );
    if harness::as_child(&name, leak_child) {
        return;
    }
    let run = harness::run_child(
        harness::child_command(&name),
        std::time::Duration::from_secs(300),
        &name,
    );
    run.assert_passed(&name);
}
