//! Reads of a file that another thread truncates and extends meanwhile. Whatever count `n` a
//! read returns, the first `n` bytes of the buffer are the file's bytes at those offsets, and
//! the bytes past `n` keep their sentinel, and nothing outside the request changes. A short
//! count is the only failure allowed. Two exceptions past the count, inside the request, are
//! counted and reported: a direct read (the fastpath's O_DIRECT or DMA into device memory) may
//! leave zeros there, because the kernel reads the request's blocks past the end of file and
//! only then shortens the count; and a request the staged engine spreads over threads is not
//! one atomic read, so a piece past the final count may have copied the file's own bytes (the
//! file was longer when it ran) before another piece found the end of file. Bytes that are not
//! the file's, at any place, are a violation.
//!
//! The file only ever holds a prefix of one pattern: it is extended by writing the pattern's
//! next bytes, never by growing it with zeros. It is cut at multiples of 2 MiB only: Linux
//! zeroes the tail of a page (or large folio) that a truncation cuts, and a buffered read that
//! sampled the old size just before may copy those zeros (the kernel's own race, in a plain
//! `pread` too); cuts at 2 MiB never split a page cache folio.

use std::fs::OpenOptions;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use hipfile::{AsDeviceMut, FileHandle};
use hipfile_hip::{DeviceBuffer, GpuRuntime};
use hipfile_testkit::conformance::{pattern, SENTINEL};
use hipfile_testkit::target::runtime_under_test;

use crate::harness::{self, figure, first_difference, Rng};

const MIB: usize = 1024 * 1024;
const FILE_LEN: usize = 12 * MIB;
/// Sentinel bytes kept on both sides of every request, checked too.
const GUARD: usize = 4096;

/// The kinds of reads that race the truncations: (name, aligned, smallest, largest size).
const READERS: [(&str, bool, usize, usize); 4] = [
    ("aligned", true, 4096, 4 * MIB),
    ("unaligned small", false, 1, 64 * 1024),
    ("unaligned large", false, 64 * 1024, 6 * MIB),
    ("unaligned very large", false, MIB, 8 * MIB),
];

#[derive(Debug, Default)]
struct ReadFigures {
    reads: u64,
    full: u64,
    short: u64,
    empty: u64,
    bytes_checked: u64,
    /// Direct reads that zero-filled their request past the count.
    direct_zero_fills: u64,
    /// Reads spread over threads where a piece past the final count had copied the file's
    /// bytes before another piece found the end of file.
    racing_pieces: u64,
    /// The first read of each kind of violation: (kind, what happened).
    violations: Vec<(&'static str, String)>,
}

/// What a read left in its buffer outside its count.
enum Outside {
    /// Nothing changed.
    Clean,
    /// Zeros past the count inside the request, from a direct (O_DIRECT or DMA) read: the kernel
    /// reads whole blocks of the request past the end of file and then shortens the count.
    DirectZeroFill,
    /// The file's own bytes past the count, at their own offsets: a request spread over threads
    /// is not one atomic read, and a piece past the final count copied them (the file was longer
    /// then) before another piece found the end of file. Never bytes that are not the file's.
    RacingPiece,
    /// Anything else: (the kind of change, where).
    Violation(&'static str, String),
}

/// What changed in `buffer` (a guard, a read's `len` bytes at `at`, a guard) outside the `n`
/// bytes a read at file offset `offset` returned; `direct` for reads the fastpath serves.
fn outside_the_count(
    buffer: &[u8],
    (at, len, n): (usize, usize, usize),
    offset: u64,
    content: &[u8],
    direct: bool,
) -> Outside {
    if let Some(i) = buffer[..at].iter().position(|&b| b != SENTINEL) {
        return Outside::Violation(
            "written before the buffer offset",
            format!("byte {i} of the guard changed"),
        );
    }
    if let Some(i) = buffer[at + len..].iter().position(|&b| b != SENTINEL) {
        return Outside::Violation(
            "written past the end of the request",
            format!("byte {i} after the request changed"),
        );
    }
    let past = &buffer[at + n..at + len];
    let Some(first) = past.iter().position(|&b| b != SENTINEL) else {
        return Outside::Clean;
    };
    let last = past.iter().rposition(|&b| b != SENTINEL).unwrap_or(first);
    let file_at = offset as usize + n;
    let (mut file_bytes, mut zeros, mut other) = (0usize, 0usize, 0usize);
    for (i, &b) in past.iter().enumerate().filter(|(_, &b)| b != SENTINEL) {
        if content.get(file_at + i) == Some(&b) && b != 0 {
            file_bytes += 1;
        } else if b == 0 {
            zeros += 1;
        } else {
            other += 1;
        }
    }
    let kind = match (file_bytes, zeros, other) {
        (0, _, 0) if direct => return Outside::DirectZeroFill,
        (0, _, 0) => "zeros past the count",
        (_, _, 0) => return Outside::RacingPiece,
        _ => "bytes past the count that are neither the file's nor zeros",
    };
    Outside::Violation(
        kind,
        format!(
            "bytes {first}..={last} after the count changed (file offsets {}..={}): {file_bytes} \
             the file's, {zeros} zeros, {other} other",
            file_at + first,
            file_at + last
        ),
    )
}

fn reader(
    gpu: &Arc<dyn GpuRuntime>,
    handle: &FileHandle,
    content: &[u8],
    kind: (&str, bool, usize, usize),
    seed: u64,
    stop: &AtomicBool,
) -> ReadFigures {
    let (name, aligned, lo, hi) = kind;
    let mut rng = Rng::new(seed);
    let mut dev = DeviceBuffer::new(Arc::clone(gpu), hi + 3 * GUARD).expect("a buffer");
    dev.fill(SENTINEL).expect("filling with the sentinel");
    let mut figures = ReadFigures::default();
    let mut back = vec![0u8; hi + 3 * GUARD];
    while !stop.load(Ordering::Relaxed) {
        let mut len = rng.size(lo, hi + 1);
        let mut offset = rng.range(0, FILE_LEN as u64);
        let mut buffer_offset = GUARD + rng.size(0, GUARD);
        if aligned {
            len = (len / 4096).max(1) * 4096;
            offset -= offset % 4096;
            buffer_offset = GUARD;
        }
        let window = dev
            .slice_mut(buffer_offset..buffer_offset + len)
            .expect("a window of the buffer");
        let n = handle.read(window, offset).unwrap_or_else(|e| {
            panic!("{name} read of {len} at {offset} failed under truncation: {e:?}")
        });
        assert!(n <= len, "{name} read of {len} returned {n}");
        let whole = buffer_offset + len + GUARD;
        dev.read_at(0, &mut back[..whole]).expect("device bytes");
        let start = offset as usize;
        let got = &back[buffer_offset..buffer_offset + n];
        if let Some(at) = first_difference(got, &content[start..start + n]) {
            panic!(
                "{name} read of {len} at {offset} returned {n}: byte {at} of the count is not \
                 the file's"
            );
        }
        let outside = outside_the_count(
            &back[..whole],
            (buffer_offset, len, n),
            offset,
            content,
            aligned,
        );
        match &outside {
            Outside::Clean => {}
            Outside::DirectZeroFill => figures.direct_zero_fills += 1,
            Outside::RacingPiece => figures.racing_pieces += 1,
            Outside::Violation(kind, at) => {
                if !figures.violations.iter().any(|(k, _)| k == kind) {
                    figures.violations.push((
                        kind,
                        format!(
                            "{name} read of {len} at {offset} (buffer offset {buffer_offset}) \
                             returned {n}: {kind}: {at}"
                        ),
                    ));
                }
            }
        }
        if !matches!(outside, Outside::Clean) {
            // Start the next read from a clean buffer.
            dev.fill(SENTINEL).expect("filling with the sentinel");
        }
        // Put the sentinel back where the read wrote.
        dev.write_at(buffer_offset, &vec![SENTINEL; n])
            .expect("restoring the sentinel");
        figures.reads += 1;
        figures.bytes_checked += whole as u64;
        match n {
            0 => figures.empty += 1,
            n if n == len => figures.full += 1,
            _ => figures.short += 1,
        }
    }
    figures
}

#[test]
fn reads_racing_truncation_return_exact_prefixes_and_only_the_files_bytes() {
    let gpu = runtime_under_test().expect("the GPU runtime").runtime;
    let driver = harness::driver_on(&gpu, |s| {
        s.max_io_threads = 3;
        s.per_buffer_cache_size_kb = 512;
        s.min_piece_kb = 64;
    });
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("data");
    let content = pattern(0x7C, 0, FILE_LEN);
    std::fs::write(&path, &content).expect("writing the file");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("opening");
    let handle = driver.register_file(&file).expect("registering");
    let run_for = harness::run_seconds(2.0);
    let stop = AtomicBool::new(false);
    let (cuts, extensions) = (AtomicU64::new(0), AtomicU64::new(0));
    let figures: Vec<ReadFigures> = thread::scope(|s| {
        let readers: Vec<_> = READERS
            .iter()
            .enumerate()
            .map(|(i, kind)| {
                let (gpu, handle, content, stop) = (&gpu, &handle, &content, &stop);
                s.spawn(move || reader(gpu, handle, content, *kind, 0x7C00 + i as u64, stop))
            })
            .collect();
        let mut rng = Rng::new(0x7C7C);
        let mut len = FILE_LEN as u64;
        let started = Instant::now();
        while started.elapsed() < run_for {
            if rng.chance(50) && len >= 2 * MIB as u64 {
                len = rng.range(0, len / (2 * MIB as u64) + 1) * 2 * MIB as u64;
                file.set_len(len).expect("truncating");
                cuts.fetch_add(1, Ordering::Relaxed);
            } else if len < FILE_LEN as u64 {
                let end = rng.range(len + 1, FILE_LEN as u64 + 1);
                file.write_all_at(&content[len as usize..end as usize], len)
                    .expect("extending");
                len = end;
                extensions.fetch_add(1, Ordering::Relaxed);
            }
            thread::yield_now();
        }
        stop.store(true, Ordering::Relaxed);
        readers
            .into_iter()
            .map(|r| r.join().expect("a reader"))
            .collect()
    });
    let total = |f: fn(&ReadFigures) -> u64| figures.iter().map(f).sum::<u64>();
    figure(format!(
        "truncation: {} cuts, {} extensions; {} reads ({} full, {} short, {} empty), {} bytes \
         checked, every count an exact prefix; {} direct reads zero-filled past their count; \
         {} spread reads left a racing piece's file bytes past their count",
        cuts.load(Ordering::Relaxed),
        extensions.load(Ordering::Relaxed),
        total(|f| f.reads),
        total(|f| f.full),
        total(|f| f.short),
        total(|f| f.empty),
        total(|f| f.bytes_checked),
        total(|f| f.direct_zero_fills),
        total(|f| f.racing_pieces)
    ));
    let violations: Vec<&str> = figures
        .iter()
        .flat_map(|f| f.violations.iter().map(|(_, what)| what.as_str()))
        .collect();
    for v in &violations {
        figure(format!("truncation: VIOLATION: {v}"));
    }
    assert!(
        violations.is_empty(),
        "reads changed the buffer outside their count:\n  {}",
        violations.join("\n  ")
    );
    assert!(
        total(|f| f.short) > 0,
        "no read came back short: the truncations never met a read"
    );
}
