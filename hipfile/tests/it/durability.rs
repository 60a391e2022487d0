//! What a write reported done guarantees when the process dies or the file cannot grow: a
//! multi-threaded writer killed with SIGKILL at a random moment loses no block it reported
//! written; a full filesystem fails a write with ENOSPC, never a short success, and keeps what
//! was written before; a write crossing `RLIMIT_FSIZE` fails with EFBIG having written the bytes
//! up to the limit and none past it. Each runs in a child process of its own (re-executing
//! this test binary), so the kill, the mount namespace and the file size limit touch nothing else.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hipfile::{AsDevice, DeviceSlice, Driver, ErrorKind, FileHandle, RegisteredBuffer};
use hipfile_hip::{DeviceBuffer, GpuRuntime, HipResult};
use hipfile_testkit::conformance::pattern;
use hipfile_testkit::target::runtime_under_test;

use crate::harness::{self, figure, first_difference, Rng};

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

/// Bytes blocks are cut from: a block is this pattern from its own starting point, so that any
/// two blocks differ and a byte written to the wrong block or offset shows.
fn block_source(seed: u64) -> Vec<u8> {
    pattern(seed, 0, 5 * MIB)
}

/// Where in [`block_source`] block `index` starts.
fn block_shift(index: usize) -> usize {
    (index * 4099) % MIB
}

/// Open `path` for reading and writing, creating it empty.
fn create(path: &Path) -> File {
    OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)
        .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()))
}

/// The bytes of `path` at `[offset, offset + len)`, short where the file ends.
fn read_back(file: &File, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("reading back at {offset}: {e}"),
        }
    }
    buf.truncate(done);
    buf
}

// ---------------------------------------------------------------------------------------------
// SIGKILL of a multi-threaded writer

const WRITER_THREADS: usize = 8;
const KILL_ROUNDS: u64 = 4;
/// More than the writers get through before the kill, so that it lands mid-stream.
const BLOCKS_PER_ROUND: usize = 2048;
const RECORD_LEN: usize = 13;

/// One block of the writer's file.
#[derive(Clone, Copy, Debug)]
struct Block {
    offset: u64,
    len: usize,
    /// Offset of the data in the writer's device buffer.
    buffer_offset: usize,
    aligned: bool,
}

/// The blocks of a round: sizes from 4 KiB to 4 MiB spread evenly over the powers of two,
/// every other one aligned (offset, size and buffer offset multiples of 4096, which the
/// fastpath serves) and the others unaligned everywhere (the staged path). They never share a
/// byte.
fn kill_layout(seed: u64) -> Vec<Block> {
    let mut rng = Rng::new(seed ^ 0x6B69_6C6C);
    let mut cursor = 0u64;
    (0..BLOCKS_PER_ROUND)
        .map(|i| {
            let aligned = i % 2 == 0;
            let top = 1usize << rng.range(12, 23);
            let mut len = rng.size(top / 2, top + 1).clamp(4 * KIB, 4 * MIB);
            let (offset, buffer_offset) = if aligned {
                len = (len / 4096).max(1) * 4096;
                (cursor.next_multiple_of(4096), 0)
            } else {
                len |= 1;
                (cursor + rng.range(1, 4096), rng.size(1, 4096))
            };
            cursor = offset + len as u64;
            Block {
                offset,
                len,
                buffer_offset,
                aligned,
            }
        })
        .collect()
}

/// A line of the writer's log: `tag` is `S` (started), `C` (write returned success) or `E`.
fn record(tag: char, index: usize) -> [u8; RECORD_LEN] {
    let text = format!("{tag} {index:>10}\n");
    text.as_bytes().try_into().expect("a record is 13 bytes")
}

/// A writer's device memory: registered with the driver, or plain.
enum Staging {
    Registered(RegisteredBuffer),
    Plain(DeviceBuffer),
}

impl Staging {
    fn write_at(&mut self, offset: usize, src: &[u8]) -> HipResult<()> {
        match self {
            Staging::Registered(r) => r.write_at(offset, src),
            Staging::Plain(d) => d.write_at(offset, src),
        }
    }

    fn window(&self, offset: usize, len: usize) -> DeviceSlice<'_> {
        let range = offset..offset + len;
        match self {
            Staging::Registered(r) => r.slice(range),
            Staging::Plain(d) => d.slice(range),
        }
        .expect("a window of the buffer")
    }
}

fn kill_child(gpu: Arc<dyn GpuRuntime>, dir: &Path, seed: u64) {
    let driver = harness::driver_on(&gpu, |_| {});
    let data = create(&dir.join("data"));
    let handle = driver
        .register_file(&data)
        .expect("registering the data file");
    let log = OpenOptions::new()
        .append(true)
        .open(dir.join("log"))
        .expect("opening the log");
    let blocks = kill_layout(seed);
    let source = block_source(seed);
    let next = AtomicUsize::new(0);
    thread::scope(|s| {
        for t in 0..WRITER_THREADS {
            let (gpu, driver, handle, log) = (&gpu, &driver, &handle, &log);
            let (blocks, source, next) = (&blocks, &source, &next);
            s.spawn(move || {
                let dev = DeviceBuffer::new(Arc::clone(gpu), 4 * MIB + 8 * KIB)
                    .expect("allocating a device buffer");
                // Half the writers use a registered buffer, half plain device memory.
                let mut dev = if t % 2 == 0 {
                    Staging::Registered(driver.register_buffer(dev).expect("registering a buffer"))
                } else {
                    Staging::Plain(dev)
                };
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(b) = blocks.get(i) else { break };
                    let shift = block_shift(i);
                    dev.write_at(b.buffer_offset, &source[shift..shift + b.len])
                        .expect("filling the device buffer");
                    let mut log = log;
                    log.write_all(&record('S', i)).expect("logging a start");
                    match handle.write(dev.window(b.buffer_offset, b.len), b.offset) {
                        Ok(n) if n == b.len => {
                            log.write_all(&record('C', i))
                                .expect("logging a completion");
                        }
                        other => {
                            log.write_all(&record('E', i)).expect("logging a failure");
                            panic!("block {i} ({b:?}): {other:?}");
                        }
                    }
                }
                drop(dev);
            });
        }
    });
    // Every block is written: only possible when the kill came late, which the parent reports.
    drop(handle);
}

fn parse_log(text: &[u8]) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let (mut started, mut complete, mut failed) = (Vec::new(), Vec::new(), Vec::new());
    // A record is written by one write(2) on an O_APPEND descriptor: whole or absent.
    for rec in text.chunks_exact(RECORD_LEN) {
        let line = String::from_utf8_lossy(rec);
        let index: usize = line[2..].trim().parse().expect("a block index");
        match rec[0] {
            b'S' => started.push(index),
            b'C' => complete.push(index),
            _ => failed.push(index),
        }
    }
    (started, complete, failed)
}

#[test]
fn sigkill_of_a_multithreaded_writer_loses_no_block_it_reported_written() {
    let name = harness::test_name(
        module_path!(),
        "sigkill_of_a_multithreaded_writer_loses_no_block_it_reported_written",
    );
    if harness::as_child(&name, || {
        let gpu = runtime_under_test().expect("the GPU runtime").runtime;
        let dir = PathBuf::from(harness::child_env(harness::DIR_VAR));
        let seed = harness::child_env(harness::SEED_VAR)
            .parse()
            .expect("a seed");
        kill_child(gpu, &dir, seed);
    }) {
        return;
    }
    let mut rng = Rng::new(0x5EED_0009);
    let (mut checked_blocks, mut checked_bytes, mut in_flight_total) = (0usize, 0usize, 0usize);
    for round in 0..KILL_ROUNDS {
        let seed = 0xD0_0000 + round;
        let dir = tempfile::tempdir().expect("a temporary directory");
        File::create(dir.path().join("log")).expect("creating the log");
        let mut cmd = harness::child_command(&name);
        cmd.env(harness::DIR_VAR, dir.path())
            .env(harness::SEED_VAR, seed.to_string())
            .stdout(std::process::Stdio::null());
        let mut child = cmd.spawn().expect("starting the writer");
        // Wait until the writers are under way, then let them run a random while more.
        let log_path = dir.path().join("log");
        let started = Instant::now();
        while std::fs::metadata(&log_path).map_or(0, |m| m.len()) < (2 * RECORD_LEN) as u64 {
            if child.try_wait().expect("polling the writer").is_some()
                || started.elapsed() > Duration::from_secs(60)
            {
                break;
            }
            thread::sleep(Duration::from_millis(2));
        }
        let delay = Duration::from_millis(rng.range(10, 250));
        thread::sleep(delay);
        let _ = child.kill();
        let out = child.wait_with_output().expect("reaping the writer");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.signal() == Some(libc::SIGKILL) || out.status.success(),
            "round {round}: the writer failed before the kill ({}):\n{stderr}",
            out.status
        );

        let (started, complete, failed) =
            parse_log(&std::fs::read(&log_path).expect("reading the log"));
        assert!(
            failed.is_empty(),
            "round {round}: writes failed: {failed:?}\n{stderr}"
        );
        let blocks = kill_layout(seed);
        let source = block_source(seed);
        let data = File::open(dir.path().join("data")).expect("opening the written file");
        for &i in &complete {
            let b = blocks[i];
            let shift = block_shift(i);
            let on_disk = read_back(&data, b.offset, b.len);
            if let Some(at) = first_difference(&on_disk, &source[shift..shift + b.len]) {
                panic!(
                    "round {round} (seed {seed:#x}, killed after {delay:?}): block {i} ({b:?}) \
                     was reported written but differs at byte {at} (file has {} of its bytes)",
                    on_disk.len()
                );
            }
            checked_bytes += b.len;
        }
        let in_flight = started.len() - complete.len();
        let aligned = complete.iter().filter(|&&i| blocks[i].aligned).count();
        figure(format!(
            "kill -9 round {round}: seed {seed:#x}, SIGKILL sent {delay:?} after the first writes \
             (child: {}), {} blocks reported written ({aligned} aligned, {} unaligned), all byte-exact; \
             {in_flight} in flight at the kill",
            out.status,
            complete.len(),
            complete.len() - aligned
        ));
        checked_blocks += complete.len();
        in_flight_total += in_flight;
    }
    figure(format!(
        "kill -9: {KILL_ROUNDS} rounds, {WRITER_THREADS} writer threads, {checked_blocks} blocks \
         and {checked_bytes} bytes checked, {in_flight_total} writes cut by the kill"
    ));
    assert!(
        checked_blocks > 0,
        "no round got a block written before the kill"
    );
    assert!(
        in_flight_total > 0,
        "no kill landed while a write was in flight: the test proved nothing"
    );
}

// ---------------------------------------------------------------------------------------------
// ENOSPC on a small tmpfs

const TMPFS_BYTES: u64 = 8 * MIB as u64;

/// Sizes and alignments the filling writes cycle through: (size, aligned).
const FILL_WRITES: [(usize, bool); 6] = [
    (MIB, true),
    (300 * KIB + 1, false),
    (2 * MIB, true),
    (64 * KIB + 5, false),
    (4 * MIB + 1, false),
    (4 * KIB, true),
];

fn enospc_child(gpu: Arc<dyn GpuRuntime>, dir: &Path) {
    if let Err(e) = harness::mount_tmpfs(dir, TMPFS_BYTES) {
        panic!(
            "cannot mount a {TMPFS_BYTES}-byte tmpfs on {} ({e}): this test needs root \
             (CAP_SYS_ADMIN) to fill a filesystem of its own",
            dir.display()
        );
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").expect("reading mountinfo");
    assert!(
        mounts
            .lines()
            .any(|l| l.contains(&*dir.to_string_lossy()) && l.contains(" - tmpfs ")),
        "the tmpfs is not in this process's mount table"
    );
    let driver = harness::driver_on(&gpu, |_| {});
    let path = dir.join("data");
    let file = create(&path);
    let handle = driver.register_file(&file).expect("registering the file");
    let source = block_source(0xE05);
    let mut dev = DeviceBuffer::new(Arc::clone(&gpu), 4 * MIB + 8 * KIB).expect("a buffer");

    // (offset, bytes) of every write reported done.
    let mut written: Vec<(u64, Vec<u8>)> = Vec::new();
    let (mut enospc, mut attempts, mut in_a_row) = (0usize, 0usize, 0usize);
    let mut cursor = 0u64;
    let mut write = |handle: &FileHandle, offset: u64, bytes: &[u8], buffer_offset: usize| {
        dev.write_at(buffer_offset, bytes)
            .expect("filling the buffer");
        handle.write(
            dev.slice(buffer_offset..buffer_offset + bytes.len())?,
            offset,
        )
    };
    while in_a_row < 3 && attempts < 64 {
        let (len, aligned) = FILL_WRITES[attempts % FILL_WRITES.len()];
        let (offset, buffer_offset) = if aligned {
            (cursor.next_multiple_of(4096), 0)
        } else {
            (cursor + 123, 77)
        };
        let shift = block_shift(attempts);
        let bytes = &source[shift..shift + len];
        attempts += 1;
        match write(&handle, offset, bytes, buffer_offset) {
            Ok(n) => {
                assert_eq!(
                    n, len,
                    "a write of {len} bytes at {offset} reported {n}: a short success"
                );
                written.push((offset, bytes.to_vec()));
                cursor = offset + len as u64;
                in_a_row = 0;
            }
            Err(e) => {
                assert!(
                    e.kind() == ErrorKind::Os && e.errno() == Some(libc::ENOSPC),
                    "a write of {len} bytes at {offset} on a full filesystem failed with {e:?}, \
                     not ENOSPC"
                );
                enospc += 1;
                in_a_row += 1;
            }
        }
    }
    assert!(enospc > 0, "{attempts} writes never filled the filesystem");
    // Overwriting bytes already written needs no new space.
    let (offset, old) = written
        .first()
        .cloned()
        .expect("a write before the disk filled");
    let shift = block_shift(999);
    let fresh = source[shift..shift + old.len()].to_vec();
    let n = write(&handle, offset, &fresh, 0).expect("overwriting on a full filesystem");
    assert_eq!(n, fresh.len(), "an overwrite reported a short count");
    written[0].1 = fresh;

    let mut checked = 0usize;
    for (offset, bytes) in &written {
        let on_disk = read_back(&file, *offset, bytes.len());
        if let Some(at) = first_difference(&on_disk, bytes) {
            panic!(
                "{} bytes at {offset} were reported written before the filesystem filled, but \
                 differ at byte {at}",
                bytes.len()
            );
        }
        checked += bytes.len();
    }
    // And through hipfile: the last block read back into device memory.
    let (offset, bytes) = written.last().expect("a write");
    let mut back = DeviceBuffer::new(Arc::clone(&gpu), bytes.len()).expect("a buffer");
    let n = handle
        .read(&mut back, *offset)
        .expect("reading back on a full filesystem");
    assert_eq!(n, bytes.len());
    assert!(
        back.to_vec().expect("device bytes") == *bytes,
        "a read back differs"
    );
    let size = file.metadata().expect("metadata").len();
    figure(format!(
        "ENOSPC: tmpfs of {TMPFS_BYTES} bytes, {attempts} writes: {} done, {enospc} ENOSPC, \
         no short success; {checked} bytes checked intact (file {size} bytes)",
        written.len()
    ));
    drop(handle);
}

#[test]
fn a_full_filesystem_fails_writes_with_enospc_and_keeps_what_was_written() {
    let name = harness::test_name(
        module_path!(),
        "a_full_filesystem_fails_writes_with_enospc_and_keeps_what_was_written",
    );
    if harness::as_child(&name, || {
        let gpu = runtime_under_test().expect("the GPU runtime").runtime;
        enospc_child(gpu, Path::new(&harness::child_env(harness::DIR_VAR)));
    }) {
        return;
    }
    let dir = tempfile::tempdir().expect("a mount point");
    let mut cmd = harness::child_command(&name);
    cmd.env(harness::DIR_VAR, dir.path());
    harness::in_private_mount_namespace(&mut cmd);
    let child = cmd.spawn().unwrap_or_else(|e| {
        panic!(
            "cannot start a child in a mount namespace of its own ({e}): this test needs root \
             (CAP_SYS_ADMIN) for unshare(CLONE_NEWNS) and mount"
        )
    });
    let run = harness::wait_with_limit(child, Duration::from_secs(120), &name);
    run.assert_passed(&name);
    assert!(
        std::fs::read_dir(dir.path())
            .expect("listing the mount point")
            .next()
            .is_none(),
        "the child's tmpfs is visible outside its mount namespace"
    );
}

// ---------------------------------------------------------------------------------------------
// EFBIG at RLIMIT_FSIZE

/// The file size limit: not a multiple of 4096, so an aligned write ends past it mid-block.
const FSIZE_LIMIT: u64 = 3 * MIB as u64 + 1000;

/// A write that meets the file size limit: where, how much, from where in the device buffer.
struct LimitCase {
    name: &'static str,
    offset: u64,
    len: usize,
    buffer_offset: usize,
}

const LIMIT_CASES: [LimitCase; 5] = [
    LimitCase {
        name: "unaligned write crossing the limit (staged)",
        offset: FSIZE_LIMIT - 100_001,
        len: 200_003,
        buffer_offset: 5,
    },
    LimitCase {
        name: "unaligned write of several pieces crossing the limit (staged, IO workers)",
        offset: FSIZE_LIMIT - MIB as u64 - 5,
        len: 2 * MIB + 333,
        buffer_offset: 3,
    },
    LimitCase {
        name: "aligned 4 MiB write whose end crosses an unaligned limit (the fastpath's shape)",
        offset: 0,
        len: 4 * MIB,
        buffer_offset: 0,
    },
    LimitCase {
        name: "write starting at the limit",
        offset: FSIZE_LIMIT,
        len: 8 * KIB,
        buffer_offset: 0,
    },
    LimitCase {
        name: "write ending exactly at the limit (fits)",
        offset: FSIZE_LIMIT - 5000,
        len: 5000,
        buffer_offset: 11,
    },
];

/// Run one case on a file of its own; `Err` says what went wrong.
fn limit_case(
    gpu: &Arc<dyn GpuRuntime>,
    driver: &Driver,
    dir: &Path,
    i: usize,
    case: &LimitCase,
    source: &[u8],
) -> Result<usize, String> {
    let file = create(&dir.join(format!("limit{i}")));
    let handle = driver
        .register_file(&file)
        .map_err(|e| format!("registering: {e:?}"))?;
    let mut dev = DeviceBuffer::new(Arc::clone(gpu), 4 * MIB + 8 * KIB).expect("a buffer");
    let data = &source[..case.len];
    dev.write_at(case.buffer_offset, data).expect("filling");
    let window = dev
        .slice(case.buffer_offset..case.buffer_offset + case.len)
        .expect("a window of the buffer");
    let result = handle.write(window, case.offset);
    let end = case.offset + case.len as u64;
    let fits = end <= FSIZE_LIMIT;
    match (&result, fits) {
        (Ok(n), true) if *n == case.len => {}
        (Err(e), false) if e.kind() == ErrorKind::Os && e.errno() == Some(libc::EFBIG) => {}
        (other, true) => return Err(format!("a write within the limit returned {other:?}")),
        (other, false) => {
            return Err(format!(
                "returned {other:?} where -1/EFBIG was expected (errno {})",
                libc::EFBIG
            ))
        }
    }
    let size = file.metadata().expect("metadata").len();
    let expected_size = if case.offset >= FSIZE_LIMIT {
        0
    } else {
        end.min(FSIZE_LIMIT)
    };
    if size != expected_size {
        return Err(format!(
            "the file is {size} bytes, not {expected_size}: the bytes up to the limit (and none \
             past it) must be written"
        ));
    }
    let kept = (expected_size.saturating_sub(case.offset)) as usize;
    let on_disk = read_back(&file, case.offset, kept);
    if let Some(at) = first_difference(&on_disk, &data[..kept]) {
        return Err(format!(
            "the {kept} bytes up to the limit differ at byte {at}"
        ));
    }
    Ok(kept)
}

#[test]
fn a_write_crossing_the_file_size_limit_fails_with_efbig_having_written_up_to_it() {
    let name = harness::test_name(
        module_path!(),
        "a_write_crossing_the_file_size_limit_fails_with_efbig_having_written_up_to_it",
    );
    if harness::as_child(&name, || {
        harness::ignore_signal(libc::SIGXFSZ).expect("ignoring SIGXFSZ");
        let gpu = runtime_under_test().expect("the GPU runtime").runtime;
        let dir = tempfile::tempdir().expect("a temporary directory");
        let driver = harness::driver_on(&gpu, |s| s.min_piece_kb = 64);
        let source = pattern(0xEF, 0, 4 * MIB + 4 * KIB);
        harness::limit_file_size(FSIZE_LIMIT).expect("setting RLIMIT_FSIZE");
        let mut failures = Vec::new();
        for (i, case) in LIMIT_CASES.iter().enumerate() {
            match limit_case(&gpu, &driver, dir.path(), i, case, &source) {
                Ok(kept) => figure(format!(
                    "EFBIG: {}: ok ({kept} bytes up to the limit checked)",
                    case.name
                )),
                Err(why) => {
                    figure(format!("EFBIG: {}: FAILED: {why}", case.name));
                    failures.push(format!("{}: {why}", case.name));
                }
            }
        }
        figure(format!(
            "EFBIG: limit {FSIZE_LIMIT} bytes, backends {:?}: {} cases, {} failed",
            driver.backends(),
            LIMIT_CASES.len(),
            failures.len()
        ));
        assert!(
            failures.is_empty(),
            "writes at RLIMIT_FSIZE:\n  {}",
            failures.join("\n  ")
        );
    }) {
        return;
    }
    let run = harness::run_child(
        harness::child_command(&name),
        Duration::from_secs(120),
        &name,
    );
    run.assert_passed(&name);
}
