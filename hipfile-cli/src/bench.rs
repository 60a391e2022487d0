//! `hipfile bench`: throughput and latency of hipfile-rs on one file, next to the ceilings of
//! the machine and, optionally, the KvikIO anchor and upstream's single-thread design.
//!
//! One run, one file. Per repetition, in this order: cold read (after dropping the page cache,
//! root only), hot read, the single-thread baseline, writes without and with `fsync`, small random
//! reads, the ceilings, then the anchor. Every figure is the median over repetitions; latency is
//! the median and p99 over every read of every repetition. The first read through hipfile-rs is
//! compared byte for byte with the file before anything is timed.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{IsTerminal, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, ValueEnum};
use hipfile::{Driver, DriverOptions, FileHandle};
use hipfile_hip::{sim::SimRuntime, DeviceBuffer, GpuRuntime, PinnedBuffer, Platform};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::anchor::{AnchorAsk, AnchorRunner, AnchorTally};
use crate::ceiling;
use crate::measure::{Span, SplitMix64, Timed};
use crate::report::{table, Figure, Measurement};

/// The phases `--only` chooses from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Phase {
    /// Whole-file read, file in the page cache.
    Hot,
    /// Whole-file read after dropping the page cache (root only).
    Cold,
    /// Whole-file write, without and with fsync.
    Write,
    /// Small random reads, one at a time: 4 KiB, 64 KiB, 1 MiB.
    Latency,
    /// Pinned host-to-device copy, parallel page-cache and O_DIRECT reads to host memory.
    Ceilings,
}

/// Arguments of `hipfile bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// File to measure: taken as it is when it exists and is not empty (its bytes are kept),
    /// else created with a pattern. Default: a temporary file in the current directory.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Bytes to move, with an optional K/M/G suffix (default: 256M on the sim, 8G on a GPU, or
    /// the size of a file that exists).
    #[arg(long, value_parser = parse_size)]
    pub size: Option<usize>,
    /// Repetitions of each measurement; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub repeat: usize,
    /// Platform: amd, nvidia or sim (default: the GPU the machine has, else the sim).
    #[arg(long)]
    pub platform: Option<String>,
    /// One JSON object per measurement per line, then a summary object.
    #[arg(long)]
    pub json: bool,
    /// Also run upstream hipFile's design: one thread, pread into a 16 MiB pageable buffer,
    /// synchronous copy.
    #[arg(long)]
    pub baseline: bool,
    /// Path of `kvikio_anchor.py`: run it between our repetitions and print ratios ours/KvikIO.
    #[arg(long, value_name = "SCRIPT")]
    pub kvikio: Option<PathBuf>,
    /// The KvikIO thread sweep; its best figure is the anchor.
    #[arg(long, value_delimiter = ',', default_value = "1,8,16,32")]
    pub kvikio_threads: Vec<usize>,
    /// The Python interpreter that runs the anchor.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Phases to run (comma separated; default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Phase>,
    /// Backends to offer requests to, in order (as `HIPFILE_BACKENDS`), e.g. `fallback`.
    #[arg(long, value_name = "NAME")]
    pub backend: Option<String>,
    /// Random reads per size and repetition in the latency phase.
    #[arg(long, default_value_t = 2000)]
    pub latency_ops: usize,
}

impl Default for BenchArgs {
    fn default() -> Self {
        BenchArgs {
            file: None,
            size: None,
            repeat: 3,
            platform: None,
            json: false,
            baseline: false,
            kvikio: None,
            kvikio_threads: vec![1, 8, 16, 32],
            python: "python3".into(),
            only: Vec::new(),
            backend: None,
            latency_ops: 2000,
        }
    }
}

/// Parse `123`, `4K`, `256M`, `8G`.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let (digits, mult) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: usize = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("unknown size suffix in {text:?}")),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    let n: usize = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a size"))?;
    n.checked_mul(mult)
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{text:?} is out of range"))
}

fn pick_runtime(platform: Option<&str>) -> Result<(Arc<dyn GpuRuntime>, String), String> {
    match platform {
        Some(name) => {
            let p = hipfile_hip::parse_platform(name).map_err(|e| e.to_string())?;
            let rt = hipfile_hip::open_platform(p).map_err(|e| e.to_string())?;
            Ok((rt, format!("platform {p} (as asked)")))
        }
        None => match hipfile_hip::open_default() {
            Ok(rt) => {
                let info = rt.info();
                Ok((
                    rt,
                    format!("platform {} (detected: {})", info.platform, info.library),
                ))
            }
            Err(e) => Ok((
                Arc::new(SimRuntime::default()) as Arc<dyn GpuRuntime>,
                format!(
                    "no GPU found ({e}); running on the simulated GPU ({})",
                    Platform::Sim
                ),
            )),
        },
    }
}

/// Largest request handed to hipfile-rs at once: below Linux's `MAX_RW_COUNT` cap, large enough
/// that the engine sees the whole parallelism of the file.
const CALL_BYTES: usize = 1 << 30;
/// Sizes of the latency phase.
const LATENCY_SIZES: [(usize, &str); 3] = [(4 << 10, "4k"), (64 << 10, "64k"), (1 << 20, "1m")];
/// The pinned copy ceiling copies this much (or the file size when smaller).
const H2D_BYTES: usize = 1 << 30;
/// Chunk of the byte-for-byte comparison.
const VERIFY_CHUNK: usize = 64 << 20;

/// Run the benchmark and print to stdout.
pub fn run(args: &BenchArgs) -> Result<(), String> {
    let mut out = std::io::stdout().lock();
    run_to(args, &mut out)
}

/// Run the benchmark, printing the report (table or JSON lines) to `out`.
pub fn run_to(args: &BenchArgs, out: &mut dyn Write) -> Result<(), String> {
    let phases: BTreeSet<Phase> = if args.only.is_empty() {
        Phase::value_variants().iter().copied().collect()
    } else {
        args.only.iter().copied().collect()
    };
    let (gpu, how) = pick_runtime(args.platform.as_deref())?;
    let platform = gpu.info().platform;
    let mut options = DriverOptions::with_runtime(gpu.clone());
    if let Some(list) = &args.backend {
        options.selection = Some(list.clone());
    }
    let driver = Driver::with_options(options).map_err(|e| e.to_string())?;
    let backends = driver.backends();
    let mut notes = Vec::new();

    let tmp;
    let path = match &args.file {
        Some(p) => p.clone(),
        None => {
            // Not /tmp: it may be tmpfs, where neither O_DIRECT nor a cold read means anything.
            tmp = tempfile::Builder::new()
                .prefix("hipfile-bench")
                .tempdir_in(std::env::current_dir().map_err(|e| e.to_string())?)
                .map_err(|e| format!("temporary directory in .: {e}"))?;
            tmp.path().join("bench.dat")
        }
    };
    let default_size = if platform == Platform::Sim {
        256 << 20
    } else {
        8 << 30
    };
    let (file, size, created) = prepare_file(&path, args.size, default_size)?;
    let handle = driver.register_file(&file).map_err(|e| e.to_string())?;
    let mut dst = DeviceBuffer::new(gpu.clone(), size).map_err(|e| e.to_string())?;
    let registered = driver
        .register_buffer(dst.ptr(), size)
        .map_err(|e| e.to_string())?;

    let mut cold_ok = false;
    if phases.contains(&Phase::Cold) {
        match ceiling::drop_caches() {
            Ok(()) => cold_ok = true,
            Err(why) => notes.push(format!(
                "cold read skipped: could not drop the page cache ({why}); run as root for cold figures"
            )),
        }
    }

    // The first read through hipfile-rs is compared with the file before anything is timed: a
    // benchmark that does not verify could report a broken engine as fast.
    ceiling::warm(&path, size as u64)?;
    dst.fill(0x5a).map_err(|e| e.to_string())?;
    read_whole(&handle, registered.ptr(), size)?;
    verify(&file, &dst, size)?;

    let anchor = args.kvikio.as_ref().map(|script| AnchorRunner {
        script: script.clone(),
        python: args.python.clone(),
        threads: args.kvikio_threads.clone(),
    });
    let anchor_write = path.with_extension("kvikio-write");
    let mut anchor_tally = AnchorTally::default();
    let mut anchor_alive = anchor.is_some();

    let threads = ceiling::available_threads();
    let h2d_bytes = size.min(H2D_BYTES);
    let mut pinned = None;
    if phases.contains(&Phase::Ceilings) {
        let mut host = PinnedBuffer::new(gpu.clone(), h2d_bytes).map_err(|e| e.to_string())?;
        host.as_mut_slice()
            .iter_mut()
            .enumerate()
            .for_each(|(i, b)| *b = i as u8);
        pinned = Some(host);
    }

    let steps_per_rep = phases.len()
        + usize::from(phases.contains(&Phase::Write))
        + 2 * usize::from(phases.contains(&Phase::Ceilings))
        + usize::from(args.baseline)
        + usize::from(anchor.is_some());
    let progress = progress_bar((steps_per_rep * args.repeat.max(1)) as u64, args.json);
    let mut rows = Rows::default();
    let mut rng = SplitMix64::new(0x0068_6970_6669_6c65);
    let engine = format!("hipfile-rs ({})", backends.join(","));

    // "Hot" is made true before each hot figure rather than assumed: a cold read, the O_DIRECT
    // ceiling or an engine that writes with O_DIRECT may have left the page cache without the file.
    let make_hot = || ceiling::warm(&path, size as u64);
    for rep in 0..args.repeat.max(1) {
        let step = |what: &str| progress.set_message(format!("rep {}: {what}", rep + 1));
        if phases.contains(&Phase::Cold) {
            step("cold read");
            if cold_ok {
                ceiling::drop_caches()?;
                let t = timed(|| read_whole(&handle, registered.ptr(), size))?;
                rows.throughput(
                    "read_cold",
                    &format!("read, cold (caches dropped), {engine}"),
                    0,
                    size,
                    t,
                );
            }
            progress.inc(1);
        }
        if phases.contains(&Phase::Hot) {
            step("hot read");
            make_hot()?;
            let t = timed(|| read_whole(&handle, registered.ptr(), size))?;
            rows.throughput(
                "read_hot",
                &format!("read, hot (page cache), {engine}"),
                0,
                size,
                t,
            );
            progress.inc(1);
        }
        if args.baseline {
            step("baseline");
            let t = ceiling::single_thread_bounce(&file, size as u64, &mut dst)?;
            rows.throughput(
                "baseline_read_hot",
                "baseline: 1 thread, pread + sync copy (upstream design), hot",
                1,
                size,
                t,
            );
            progress.inc(1);
        }
        if phases.contains(&Phase::Write) {
            // The device buffer holds the file's own bytes (verified above), so writing it back
            // leaves a file we were given as it was.
            step("write");
            file.sync_all().map_err(|e| e.to_string())?;
            let t = timed(|| write_whole(&handle, registered.ptr(), size))?;
            rows.throughput(
                "write",
                &format!("write, page cache, no fsync, {engine}"),
                0,
                size,
                t,
            );
            progress.inc(1);
            step("write + fsync");
            file.sync_all().map_err(|e| e.to_string())?;
            let t = timed(|| {
                write_whole(&handle, registered.ptr(), size)?;
                file.sync_all().map_err(|e| format!("fsync: {e}"))
            })?;
            rows.throughput(
                "write_fsync",
                &format!("write + fsync, {engine}"),
                0,
                size,
                t,
            );
            progress.inc(1);
        }
        if phases.contains(&Phase::Latency) {
            step("small random reads");
            make_hot()?;
            for (bytes, name) in LATENCY_SIZES.iter().filter(|(b, _)| *b <= size) {
                let (samples, t) = latency(
                    &handle,
                    registered.ptr(),
                    size,
                    *bytes,
                    args.latency_ops,
                    &mut rng,
                )?;
                rows.latency(
                    &format!("latency_{name}"),
                    &format!("random {name} reads, hot, 1 thread, {engine}"),
                    *bytes,
                    samples,
                    t,
                );
            }
            progress.inc(1);
        }
        if let Some(host) = &pinned {
            step("ceiling: pinned copy");
            let t = ceiling::pinned_h2d(host, &mut dst)?;
            rows.throughput(
                "ceiling_h2d_pinned",
                "ceiling: pinned host->device copy",
                1,
                h2d_bytes,
                t,
            );
            progress.inc(1);
            step("ceiling: page-cache read");
            make_hot()?;
            let (t, n) = ceiling::parallel_read(&path, size as u64, threads, false)?;
            rows.throughput(
                "ceiling_pagecache_read",
                &format!("ceiling: page cache -> host memory, {threads} threads"),
                threads,
                n as usize,
                t,
            );
            progress.inc(1);
            step("ceiling: O_DIRECT read");
            let cold = cold_ok && ceiling::drop_caches().is_ok();
            match ceiling::parallel_read(&path, size as u64, threads, true) {
                Ok((t, n)) => rows.throughput(
                    "ceiling_odirect_read",
                    &format!(
                        "ceiling: O_DIRECT -> host memory, {threads} threads, {}",
                        if cold {
                            "cold"
                        } else {
                            "page cache not dropped"
                        }
                    ),
                    threads,
                    n as usize,
                    t,
                ),
                Err(why) if rep == 0 => notes.push(format!("O_DIRECT ceiling skipped: {why}")),
                Err(_) => {}
            }
            progress.inc(1);
            // Put back what the ceilings disturbed: the device buffer holds the file again, and
            // the file is hot again.
            read_whole(&handle, registered.ptr(), size)?;
        }
        if let (Some(runner), true) = (&anchor, anchor_alive) {
            step("KvikIO anchor");
            ceiling::warm(&path, size as u64)?;
            let ask = AnchorAsk {
                file: &path,
                cold: cold_ok,
                small: phases.contains(&Phase::Latency),
                write: phases
                    .contains(&Phase::Write)
                    .then_some(anchor_write.as_path()),
            };
            match runner.run(ask) {
                Ok(lines) => anchor_tally.add(&lines),
                Err(why) => {
                    notes.push(format!("KvikIO anchor failed, not run again: {why}"));
                    anchor_alive = false;
                }
            }
            let _ = std::fs::remove_file(&anchor_write);
            progress.inc(1);
        }
    }
    progress.finish_and_clear();

    // Read after the measurements: a backend may have grown its pools on demand.
    let held = driver.resources();
    let mut measurements = rows.0;
    if !anchor_tally.is_empty() {
        attach_anchor(&mut measurements, &anchor_tally);
    }

    if args.json {
        for m in &measurements {
            writeln!(out, "{}", m.to_json()).map_err(|e| e.to_string())?;
        }
        let summary = json!({
            "type": "summary",
            "platform": platform.to_string(),
            "platform_choice": how,
            "backends": backends,
            "file": path.display().to_string(),
            "file_created": created,
            "bytes": size,
            "repetitions": args.repeat.max(1),
            "threads_available": threads,
            "verified": true,
            "cold": cold_ok,
            "anchor": args.kvikio.as_ref().map(|p| p.display().to_string()),
            "anchor_threads": args.kvikio.as_ref().map(|_| args.kvikio_threads.clone()),
            "keys": measurements.iter().map(|m| m.key.clone()).collect::<Vec<_>>(),
            "notes": notes,
            "resources": held
                .iter()
                .map(|(name, r)| (name.to_string(), json!({
                    "pinned_bytes": r.pinned_bytes,
                    "io_threads": r.io_threads,
                })))
                .collect::<serde_json::Map<_, _>>(),
        });
        writeln!(out, "{summary}").map_err(|e| e.to_string())?;
    } else {
        let text = format!(
            "hipfile bench: {how}\nbackends: {}\nheld: {}\nfile: {} ({}), {} MiB, {} repetitions (median), {threads} cores available\nverified: the first read matched the file byte for byte\n{}\n{}",
            backends.join(", "),
            held.iter()
                .map(|(name, r)| format!(
                    "{name} {} MiB pinned, {} IO threads",
                    r.pinned_bytes >> 20,
                    r.io_threads
                ))
                .collect::<Vec<_>>()
                .join("; "),
            path.display(),
            if created { "created" } else { "taken as it is" },
            size >> 20,
            args.repeat.max(1),
            notes.iter().map(|n| format!("note: {n}\n")).collect::<String>(),
            table(&measurements),
        );
        out.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Open `path`, taking it as it is when it has bytes, else creating it with a pattern of
/// `asked` (or `default`) bytes. Returns the file, the bytes to measure and whether it was created.
fn prepare_file(
    path: &Path,
    asked: Option<usize>,
    default: usize,
) -> Result<(File, usize, bool), String> {
    let shown = |e: std::io::Error| format!("{}: {e}", path.display());
    let existing = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(path)
        .map_err(shown)?;
    if existing > 0 {
        let size = asked.unwrap_or(existing as usize);
        if size as u64 > existing {
            return Err(format!(
                "{} has {existing} bytes, fewer than --size {size}",
                path.display()
            ));
        }
        return Ok((file, size, false));
    }
    let size = asked.unwrap_or(default);
    let mut chunk = vec![0u8; VERIFY_CHUNK.min(size)];
    let mut at = 0usize;
    while at < size {
        let n = chunk.len().min(size - at);
        for (i, b) in chunk[..n].iter_mut().enumerate() {
            let x = at + i;
            *b = (x.wrapping_mul(31) ^ (x >> 12)) as u8;
        }
        file.write_all_at(&chunk[..n], at as u64).map_err(shown)?;
        at += n;
    }
    // Dirty pages of the setup must not flow into the write figures.
    file.sync_all().map_err(shown)?;
    Ok((file, size, true))
}

fn read_whole(handle: &FileHandle, ptr: usize, size: usize) -> Result<(), String> {
    let mut at = 0;
    while at < size {
        let want = (size - at).min(CALL_BYTES);
        let n = handle
            .read(ptr, want, at as u64, at)
            .map_err(|e| format!("read at {at}: {e}"))?;
        if n != want {
            return Err(format!("read at {at}: {n} of {want} bytes"));
        }
        at += n;
    }
    Ok(())
}

fn write_whole(handle: &FileHandle, ptr: usize, size: usize) -> Result<(), String> {
    let mut at = 0;
    while at < size {
        let want = (size - at).min(CALL_BYTES);
        let n = handle
            .write(ptr, want, at as u64, at)
            .map_err(|e| format!("write at {at}: {e}"))?;
        if n != want {
            return Err(format!("write at {at}: {n} of {want} bytes"));
        }
        at += n;
    }
    Ok(())
}

fn verify(file: &File, dst: &DeviceBuffer, size: usize) -> Result<(), String> {
    let mut want = vec![0u8; VERIFY_CHUNK.min(size)];
    let mut got = vec![0u8; want.len()];
    let mut at = 0;
    while at < size {
        let n = want.len().min(size - at);
        file.read_exact_at(&mut want[..n], at as u64)
            .map_err(|e| format!("verification read at {at}: {e}"))?;
        dst.read_at(at, &mut got[..n]).map_err(|e| e.to_string())?;
        if want[..n] != got[..n] {
            let i = want[..n]
                .iter()
                .zip(&got[..n])
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Err(format!(
                "verification failed: the read differs from the file at byte {}",
                at + i
            ));
        }
        at += n;
    }
    Ok(())
}

fn timed(f: impl FnOnce() -> Result<(), String>) -> Result<Timed, String> {
    let span = Span::start();
    f()?;
    Ok(span.finish())
}

/// `ops` reads of `bytes` at random aligned offsets, each timed alone.
fn latency(
    handle: &FileHandle,
    ptr: usize,
    size: usize,
    bytes: usize,
    ops: usize,
    rng: &mut SplitMix64,
) -> Result<(Vec<f64>, Timed), String> {
    let limit = (size - bytes) as u64;
    let offsets: Vec<u64> = (0..ops.max(1))
        .map(|_| rng.aligned_below(limit, 4096))
        .collect();
    let mut samples = Vec::with_capacity(offsets.len());
    let span = Span::start();
    for off in offsets {
        let t = std::time::Instant::now();
        let n = handle
            .read(ptr, bytes, off, 0)
            .map_err(|e| format!("read of {bytes} at {off}: {e}"))?;
        samples.push(t.elapsed().as_secs_f64() * 1e6);
        if n != bytes {
            return Err(format!("read of {bytes} at {off}: {n} bytes"));
        }
    }
    Ok((samples, span.finish()))
}

fn progress_bar(steps: u64, json: bool) -> ProgressBar {
    if json || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(steps);
    if let Ok(style) = ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} {msg}") {
        bar.set_style(style);
    }
    bar
}

/// Measurements in first-seen order, samples appended per repetition.
#[derive(Debug, Default)]
struct Rows(Vec<Measurement>);

impl Rows {
    fn entry(
        &mut self,
        key: &str,
        label: &str,
        threads: usize,
        bytes: usize,
        figure: Figure,
    ) -> &mut Measurement {
        let i = match self.0.iter().position(|m| m.key == key) {
            Some(i) => i,
            None => {
                self.0.push(Measurement {
                    key: key.into(),
                    label: label.into(),
                    threads,
                    bytes: bytes as u64,
                    figure,
                    cores: Vec::new(),
                    cores_by_thread: Vec::new(),
                    anchor: None,
                });
                self.0.len() - 1
            }
        };
        &mut self.0[i]
    }

    fn throughput(&mut self, key: &str, label: &str, threads: usize, bytes: usize, t: Timed) {
        let m = self.entry(key, label, threads, bytes, Figure::Throughput(Vec::new()));
        if let Figure::Throughput(v) = &mut m.figure {
            v.push(bytes as f64 / t.seconds / 1e9);
        }
        m.cores.push(t.cores);
        m.cores_by_thread.push(t.cores_by_thread);
    }

    fn latency(&mut self, key: &str, label: &str, bytes: usize, samples: Vec<f64>, t: Timed) {
        let m = self.entry(key, label, 1, bytes, Figure::Latency(Vec::new()));
        if let Figure::Latency(v) = &mut m.figure {
            v.extend(samples);
        }
        m.cores.push(t.cores);
        m.cores_by_thread.push(t.cores_by_thread);
    }
}

/// Put the anchor's best figure next to ours, and its whole thread sweep in rows of its own.
fn attach_anchor(rows: &mut Vec<Measurement>, tally: &AnchorTally) {
    for m in rows.iter_mut() {
        m.anchor = match m.key.as_str() {
            "read_hot" => tally.best_read("hot"),
            "read_cold" => tally.best_read("cold"),
            "write" => tally.best_write(),
            k => LATENCY_SIZES
                .iter()
                .find(|(_, name)| k == format!("latency_{name}"))
                .and_then(|(bytes, _)| tally.latency(*bytes as u64)),
        };
    }
    for cache in ["hot", "cold"] {
        for f in tally.reads_by_threads(cache) {
            let t = f.threads.unwrap_or(0);
            rows.push(Measurement {
                key: format!("kvikio_read_{cache}_t{t}"),
                label: format!("KvikIO read, {cache}, {t} threads"),
                threads: t,
                bytes: 0,
                figure: Figure::Throughput(f.samples),
                cores: Vec::new(),
                cores_by_thread: Vec::new(),
                anchor: None,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("4K"), Ok(4096));
        assert_eq!(parse_size("256m"), Ok(256 << 20));
        assert_eq!(parse_size("7"), Ok(7));
        assert!(parse_size("0").is_err());
        assert!(parse_size("3X").is_err());
    }
}
