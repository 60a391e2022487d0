//! Reads copied straight out of the pinned page cache: byte for byte what the file holds, also
//! after the file was rewritten in place, truncated and refilled with other bytes, and after
//! eleven kinds of change by another process. On the
//! simulated GPU by default; on the machine's GPU with `HIPFILE_GPU_TESTS=1`, where the device
//! reads the pinned pages by DMA and a pin kept past a change would show the old bytes.

use std::os::unix::fs::FileExt;

use hipfile::{Driver, DriverOptions, Settings};
use hipfile_hip::DeviceBuffer;
use hipfile_testkit::conformance::pattern;
use hipfile_testkit::target::runtime_under_test;

const WINDOW: usize = hipfile_fallback::pins::WINDOW;

fn pinned_bytes_served(driver: &Driver) -> u64 {
    driver
        .core()
        .session()
        .unwrap()
        .registry()
        .mechanisms()
        .into_iter()
        .flat_map(|(_, counters)| counters)
        .find(|(name, _)| *name == "pinned_page_cache_bytes")
        .map_or(0, |(_, v)| v)
}

/// A driver of the staged engine alone on `gpu`, counting, that pins at once (the files are
/// written by the tests themselves).
fn pinning_driver(gpu: &std::sync::Arc<dyn hipfile_hip::GpuRuntime>) -> Driver {
    Driver::with_options(DriverOptions {
        selection: Some("fallback".into()),
        settings: Settings {
            page_cache_pin_settle_ms: 0,
            stats_level: 1,
            ..Settings::default()
        },
        ..DriverOptions::with_runtime(gpu.clone())
    })
    .unwrap()
}

#[test]
fn reads_out_of_the_pinned_page_cache_follow_the_file_byte_for_byte() {
    let gpu = runtime_under_test().unwrap().runtime;
    let driver = pinning_driver(&gpu);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let size = WINDOW + 12345;
    std::fs::write(&path, pattern(21, 0, size)).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let handle = driver.register_file(&file).unwrap();
    let mut dev = DeviceBuffer::new(gpu.clone(), size).unwrap();
    let mut read_all = |want: &[u8]| {
        dev.fill(0).unwrap();
        assert_eq!(handle.read(&mut dev, 0).unwrap(), want.len());
        let got = dev.to_vec().unwrap();
        if let Some(i) = got[..want.len()].iter().zip(want).position(|(a, b)| a != b) {
            panic!(
                "byte {i} of {}: {:#04x}, the file holds {:#04x}",
                want.len(),
                got[i],
                want[i]
            );
        }
    };
    read_all(&pattern(21, 0, size));
    driver.settle();
    assert_eq!(driver.page_cache_pinned_bytes(), size);
    // The first read may have taken windows pinned while it ran.
    let first = pinned_bytes_served(&driver);
    read_all(&pattern(21, 0, size));
    assert_eq!(pinned_bytes_served(&driver), first + size as u64);

    // Rewritten in place through the page cache.
    let mut want = pattern(21, 0, size);
    let patch = pattern(22, 0, 3 * 4096 + 7);
    file.write_all_at(&patch, (WINDOW - 4096) as u64).unwrap();
    want[WINDOW - 4096..WINDOW - 4096 + patch.len()].copy_from_slice(&patch);
    read_all(&want);
    driver.settle();
    read_all(&want);

    // Truncated, then refilled to the same size with other bytes: new pages, new stamp.
    file.set_len(0).unwrap();
    let other = pattern(23, 0, size);
    file.write_all_at(&other, 0).unwrap();
    // The bytes show that no copy came out of the old pins (the read may take windows pinned
    // under the new stamp while it runs).
    read_all(&other);
    driver.settle();
    let before = pinned_bytes_served(&driver);
    read_all(&other);
    assert_eq!(pinned_bytes_served(&driver), before + size as u64);
    drop(handle);
    assert_eq!(
        driver.page_cache_pinned_bytes(),
        0,
        "deregistered: unpinned"
    );
}

// ---------------------------------------------------------------------------------------------
// Another process changes a file whose page cache is pinned

/// The changes another process makes to a registered file whose windows are pinned.
const CHANGES: [&str; 11] = [
    "pwrite",
    "truncate_and_rewrite",
    "rename_over",
    "shared_mapping_write",
    "truncate_smaller",
    "shrink_and_regrow",
    "direct_write",
    "punch_hole",
    "zero_range",
    "copy_file_range",
    "dirty_shared_mapping_held",
];

/// Names the change a child makes ([`CHANGES`]).
const CHANGE_VAR: &str = "HIPFILE_IT_CHANGE";
/// A child whose filesystem cannot make its change says so on this line.
const UNSUPPORTED: &str = "the filesystem cannot make the change";
/// The child that keeps a dirty shared mapping says so on this line, then waits for the file
/// named by the path plus `.done`.
const HOLDING: &str = "holding the dirty mapping";

fn check_os(rc: libc::c_int, what: &str) {
    assert_eq!(rc, 0, "{what}: {}", std::io::Error::last_os_error());
}

/// The child: make change `CHANGE_VAR` to the file at `DIR_VAR`, as another process would.
fn change_file() {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    let path = std::path::PathBuf::from(std::env::var(crate::harness::DIR_VAR).unwrap());
    let change = std::env::var(CHANGE_VAR).unwrap();
    let open = || {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap()
    };
    let file = open();
    let size = file.metadata().unwrap().len() as usize;
    let shared_write = |keep: bool| {
        // SAFETY: a fresh shared mapping of the whole file, written through a slice of it while
        // this process alone holds it; unmapped (or left to the process's exit) afterwards.
        unsafe {
            let at = libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            );
            assert_ne!(at, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
            let bytes = std::slice::from_raw_parts_mut(at.cast::<u8>(), size);
            let patch = pattern(34, 0, 2 * 4096 + 17);
            let start = size / 3;
            bytes[start..start + patch.len()].copy_from_slice(&patch);
            if keep {
                println!("{HOLDING}");
                let done = path.with_extension("done");
                let since = std::time::Instant::now();
                while !done.exists() && since.elapsed() < std::time::Duration::from_secs(120) {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            } else {
                check_os(libc::msync(at, size, libc::MS_SYNC), "msync");
            }
            check_os(libc::munmap(at, size), "munmap");
        }
    };
    match change.as_str() {
        "pwrite" => file
            .write_all_at(&pattern(31, 0, 3 * 4096 + 7), (size / 2 - 4096) as u64)
            .unwrap(),
        "truncate_and_rewrite" => {
            file.set_len(0).unwrap();
            file.write_all_at(&pattern(32, 0, size), 0).unwrap();
        }
        "rename_over" => {
            let fresh = path.with_extension("fresh");
            std::fs::write(&fresh, pattern(33, 0, size)).unwrap();
            std::fs::rename(&fresh, &path).unwrap();
        }
        "shared_mapping_write" => shared_write(false),
        "dirty_shared_mapping_held" => shared_write(true),
        "truncate_smaller" => file.set_len((size / 2 + 1000) as u64).unwrap(),
        "shrink_and_regrow" => {
            file.set_len((size / 3) as u64).unwrap();
            file.set_len(size as u64).unwrap();
        }
        "direct_write" => {
            let direct = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(&path)
                .unwrap();
            let len = 1 << 20;
            let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
            // SAFETY: a non-zero size with a valid alignment; freed below with the same layout.
            let buf = unsafe { std::alloc::alloc(layout) };
            assert!(!buf.is_null());
            // SAFETY: `buf` holds `len` bytes until it is freed below.
            let bytes = unsafe { std::slice::from_raw_parts_mut(buf, len) };
            bytes.copy_from_slice(&pattern(35, 0, len));
            direct.write_all_at(bytes, 10 * 4096).unwrap();
            // SAFETY: allocated above with this layout and no longer borrowed.
            unsafe { std::alloc::dealloc(buf, layout) };
        }
        "punch_hole" | "zero_range" => {
            let mode = if change == "punch_hole" {
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE
            } else {
                libc::FALLOC_FL_ZERO_RANGE
            };
            // SAFETY: plain integer arguments on a descriptor this process owns.
            let rc = unsafe { libc::fallocate(file.as_raw_fd(), mode, (size / 4) as i64, 1 << 20) };
            if rc != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EOPNOTSUPP) {
                println!("{UNSUPPORTED} {change}");
                return;
            }
            check_os(rc, &change);
        }
        "copy_file_range" => {
            let other = path.with_extension("other");
            std::fs::write(&other, pattern(36, 0, 1 << 20)).unwrap();
            let src = std::fs::File::open(&other).unwrap();
            let (mut from, mut to) = (0i64, (size / 2 - 8192) as i64);
            let mut left = 1usize << 20;
            while left > 0 {
                // SAFETY: both offsets are valid out-pointers; the descriptors are this process's.
                let n = unsafe {
                    libc::copy_file_range(
                        src.as_raw_fd(),
                        &mut from,
                        file.as_raw_fd(),
                        &mut to,
                        left,
                        0,
                    )
                };
                assert!(
                    n > 0,
                    "copy_file_range: {}",
                    std::io::Error::last_os_error()
                );
                left -= n as usize;
            }
        }
        other => panic!("no change named {other}"),
    }
}

/// The registered descriptor's own answer for the whole range: what a read must give.
fn pread_whole(file: &std::fs::File, len: usize) -> Vec<u8> {
    let mut want = vec![0u8; len];
    let mut done = 0;
    while done < len {
        match file.read_at(&mut want[done..], done as u64).unwrap() {
            0 => break,
            n => done += n,
        }
    }
    want.truncate(done);
    want
}

/// Another process changes a registered file after its windows were pinned, in each of eleven
/// ways. Every read after the change, at once, once the engine pinned what it may, and seconds
/// later, gives exactly what `pread` on the registered descriptor gives, and nothing past the
/// end of the file's bytes lands in the buffer (past the last block the bytes read end in). On
/// the GPU the device reads the pinned pages by DMA, so a pin kept past a change would show
/// the old bytes.
#[test]
fn changes_by_another_process_are_never_read_stale() {
    let name = crate::harness::test_name(
        module_path!(),
        "changes_by_another_process_are_never_read_stale",
    );
    if crate::harness::as_child(&name, change_file) {
        return;
    }
    let rut = runtime_under_test().unwrap();
    let on_gpu = rut.sim.is_none();
    let gpu = rut.runtime;
    let driver = pinning_driver(&gpu);
    // 128 MiB on the GPU (two windows), as the probe that found no stale read; on the sim, where
    // the device reads the live mapping anyway, a few MiB in one window.
    let size = if on_gpu { 128 << 20 } else { (4 << 20) + 12345 };
    let later = if on_gpu { [1300, 2600] } else { [100, 200] };
    const SENTINEL: u8 = 0xC3;
    let dir = crate::harness::scratch_dir();
    let mut dev = DeviceBuffer::new(gpu.clone(), size).unwrap();
    let mut reads = 0;
    let mut unsupported = Vec::new();
    for (i, change) in CHANGES.iter().enumerate() {
        let path = dir.path().join(format!("{change}.bin"));
        std::fs::write(&path, pattern(30 + i as u64, 0, size)).unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let handle = driver.register_file(&file).unwrap();
        assert_eq!(handle.read(&mut dev, 0).unwrap(), size);
        driver.settle();
        assert_eq!(
            driver.page_cache_pinned_bytes(),
            size,
            "{change}: the file is pinned before the change"
        );
        let mut cmd = crate::harness::child_command(&name);
        cmd.env(crate::harness::DIR_VAR, &path)
            .env(CHANGE_VAR, change);
        let held = if *change == "dirty_shared_mapping_held" {
            let mut child = cmd.spawn().unwrap();
            let mut lines =
                std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
            assert!(
                lines.any(|l| l.is_ok_and(|l| l.contains(HOLDING))),
                "{change}: the child never held its mapping"
            );
            // The rest of its output is read to its end, so the child never writes to a closed pipe.
            let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());
            Some((child, rest))
        } else {
            let run = crate::harness::run_child(cmd, std::time::Duration::from_secs(120), &name);
            run.assert_passed(&name);
            if run.stdout.contains(UNSUPPORTED) {
                unsupported.push(*change);
                drop(handle);
                continue;
            }
            None
        };
        let mut check = |when: &str| {
            dev.fill(SENTINEL).unwrap();
            let n = handle.read(&mut dev, 0).unwrap();
            let want = pread_whole(&file, size);
            let got = dev.to_vec().unwrap();
            assert_eq!(n, want.len(), "{change}, {when}: bytes read");
            if let Some(at) = got[..n].iter().zip(&want).position(|(a, b)| a != b) {
                panic!(
                    "{change}, {when}: byte {at} of {n} is {:#04x}, pread gives {:#04x}",
                    got[at], want[at]
                );
            }
            let block_end = n.div_ceil(4096) * 4096;
            if let Some(at) = got[block_end.min(size)..]
                .iter()
                .position(|&b| b != SENTINEL)
            {
                panic!("{change}, {when}: a byte {at} past the last block read was written");
            }
            reads += 1;
        };
        let changed = std::time::Instant::now();
        let changed_size = file.metadata().unwrap().len();
        check("right after the change");
        driver.settle();
        check("once pinned again");
        for ms in later {
            let at = changed + std::time::Duration::from_millis(ms);
            std::thread::sleep(at.saturating_duration_since(std::time::Instant::now()));
            check(&format!("{ms} ms later"));
        }
        if let Some((mut child, rest)) = held {
            std::fs::write(path.with_extension("done"), b"").unwrap();
            let status = child.wait().unwrap();
            let output = rest.join().unwrap();
            assert!(status.success(), "{change}: the child failed: {output:?}");
            check("after the mapping's writer left");
        }
        assert_eq!(
            file.metadata().unwrap().len(),
            changed_size,
            "{change}: the reads changed the file's size"
        );
    }
    println!(
        "{} changes, {reads} reads checked against pread, none stale (on {})",
        CHANGES.len() - unsupported.len(),
        if on_gpu { "the GPU" } else { "the sim" }
    );
    if !unsupported.is_empty() {
        hipfile_testkit::ledger::skip(&format!(
            "the scratch filesystem cannot make these changes: {unsupported:?}"
        ));
    }
}
