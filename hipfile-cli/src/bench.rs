//! `hipfile bench`: throughput and latency of hipfile-rs on one file, next to the ceilings of
//! the machine and, optionally, the KvikIO anchor and upstream's single-thread design.
//!
//! One run, one file. Per repetition, in this order: cold read (after dropping the page cache,
//! root only), hot read, the single-thread baseline, writes without and with `fsync`, small random
//! reads, batch IO, the ceilings, then the anchor. Every figure is the median over repetitions;
//! latency is the median and p99 over every read of every repetition.
//!
//! Batch IO ([`crate::batch`]) is read against figures of the same run: random 4 KiB and 64 KiB
//! reads through one batch at queue depth 1, 8, 32 and 128 (IOPS, and the median and p99 of each
//! entry's submission-to-reap time) against synchronous reads of the same size from 1, 8 and 16
//! threads, each depth next to the most threads that do not exceed it; 64 large reads in one
//! batch (128 MiB each at most, over the start of the file) against the hot whole-file read;
//! and, as root, cold random 4 KiB reads at queue depth 32 against 32 threads of O_DIRECT reads
//! of the same size (the storage's ceiling for them), the page cache dropped before each.
//!
//! Stream-ordered IO ([`crate::stream_phase`]) is read against figures of the same run too: the
//! whole file as reads of `--async-op-size` queued on 1 and on 4 streams (dealt round robin)
//! against the hot read, and against upstream's design replayed on the same streams (a `pread`
//! in a host function into pinned memory, then an async copy); one stream also against the same
//! reads made as synchronous calls one after another (the stream's own cost); the time of each
//! submission; and
//! a GPU workload (fills of a buffer of up to 1 GiB on an independent stream, as many as take
//! about as long as the reads on 1 stream) alone, the reads alone, and both queued at once, the
//! last read against the sum of the first two (the overlap: below 1, they overlapped).
//!
//! Cold figures, ours and the anchor's, are taken only after this process let go of the file's
//! page cache: the engine pins cached windows of the files it reads (pinned pages stay cached
//! whatever drops the cache, and a "cold" read of them runs at page-cache speed), so before each
//! cold read, and before each anchor process that makes one, the file is registered afresh (its
//! pins go with the old registration), the backends' background work is waited for, and the
//! bytes still pinned are noted (`page_cache_pinned_at_start`, which must be 0). A cold figure
//! that found bytes pinned, or that is above [`crate::report::COLD_CEILING_MARGIN`] times the
//! O_DIRECT ceiling of the same run, is marked not cold (`not_cold`, with why) and no ratio is
//! taken with it.
//!
//! The file read is never written: a file that exists is opened read-only and its bytes are
//! kept; a file that does not exist is made (a pattern) and then opened read-only too. The write
//! phases write a scratch file next to it ([`crate::scratch`]), removed at the end. SIGINT,
//! SIGTERM and SIGHUP remove the scratch file, a file the run is still making, and the
//! temporary directory of the default file before the process ends by the signal
//! ([`crate::signals`]).
//!
//! The report ([`crate::report`]) fits 120 columns: rows named by their keys, a legend of what
//! each kind of row measures, every row's full label in `--json`. On the simulated GPU it says
//! that its figures only compare the library with itself.
//!
//! Every byte that is timed is checked ([`crate::verify`]): the first read before anything is
//! timed, every timed whole-file read (hot, cold, baseline, the batch of large reads) after it
//! ran, the last small read of each size in each repetition, a sample of the entries of every
//! batch run and the last read of every synchronous thread, and every timed write (the scratch
//! file against the buffer). The report says per measurement how many checks ran and how many bytes they
//! compared; "verified" is true only where checks ran and passed, and a failed check makes the
//! command exit with status 1 after the report.

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions};
use std::io::{IsTerminal, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::{Args, ValueEnum};
use hipfile::{AsDevice, AsDeviceMut, Driver, DriverOptions, FileHandle, RegisteredBuffer};
use hipfile_core::{FileIo, IoPath, PosixIo};
use hipfile_hip::{
    DeviceBuffer, GpuRuntime, HostFunctionReader, OwnedStream, PinnedBuffer, Platform, StreamRef,
};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::json;

use crate::anchor::{AnchorAsk, AnchorFigure, AnchorRunner, AnchorTally};
use crate::batch::{self, Reads, CHECKED_ENTRIES};
use crate::ceiling;
use crate::measure::{Span, SplitMix64, Timed};
use crate::platform::pick_runtime;
use crate::report::{
    anchor_table, compare, compare_also, legend, not_cold, table, wrap, Figure, Measurement,
    Versus, REPORT_COLUMNS,
};
use crate::scratch::Scratch;
use crate::signals::Removal;
use crate::size::parse_size;
use crate::stream_phase::{self, Workload, CHECKED_OPS};
use crate::verify::{sentinel_for, Checked, Comparer, Ledger};

/// The phases `--only` chooses from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, ValueEnum)]
pub enum Phase {
    /// Whole-file read, file in the page cache.
    Hot,
    /// Whole-file read after dropping the page cache (root only).
    Cold,
    /// Whole-file write, without and with fsync, to a scratch file next to the file (never to
    /// the file itself).
    Write,
    /// Small random reads, one at a time: 4 KiB, 64 KiB, 1 MiB.
    Latency,
    /// Pinned host-to-device copy, parallel page-cache and O_DIRECT reads to host memory.
    Ceilings,
    /// Batch IO: random 4 KiB and 64 KiB reads through one batch at queue depth 1, 8, 32, 128
    /// against synchronous reads from 1, 8, 16 threads; 64 large reads in one batch against the
    /// hot read (which it brings along); cold random 4 KiB reads at queue depth 32 against 32
    /// threads of O_DIRECT reads (root only).
    Batch,
    /// Stream-ordered IO: the whole file as reads queued on GPU streams (`hipFileReadAsync`),
    /// on 1 and 4 streams, against the hot read (which it brings along) and against upstream's
    /// design replayed (a `pread` in a host function, then an async copy); the submission cost
    /// of each op; and a GPU workload on another stream, alone, next to the reads alone, and
    /// both at once.
    Async,
}

/// Arguments of `hipfile bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// File to read. One that exists is opened read-only and never written (a regular file, not
    /// empty); one that does not exist is made with a pattern and kept. The write phases write a
    /// scratch file of --size bytes in the same directory instead, removed at the end (so they
    /// need that much free space there). Default: a temporary file in the current directory.
    #[arg(long)]
    pub file: Option<PathBuf>,
    /// Bytes to move: a number with an optional unit K, M, G or T, binary whatever the
    /// spelling (256M, 256MB and 256MiB are all 256 MiB). Default: 256M on the sim, 8G on a
    /// GPU, or the size of a file that exists.
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
    /// When no GPU is found, list the loader's answer for every runtime library tried.
    #[arg(long)]
    pub verbose: bool,
    /// Also run upstream hipFile's design: one thread, pread into a 16 MiB pageable buffer,
    /// synchronous copy.
    #[arg(long)]
    pub baseline: bool,
    /// Path of `kvikio_anchor.py`: run it between our repetitions and print ratios ours/KvikIO.
    /// It reads the bytes we read, makes as many small reads as we do, and writes into our
    /// scratch file, left in the state our writes start from.
    #[arg(long, value_name = "SCRIPT")]
    pub kvikio: Option<PathBuf>,
    /// The KvikIO thread sweep, one process per thread count; its best figure is the anchor.
    #[arg(long, value_delimiter = ',', default_value = "1,8,16,32")]
    pub kvikio_threads: Vec<usize>,
    /// KvikIO's task size, with an optional unit as --size (default: our staged engine's chunk
    /// when that engine serves our reads, else KvikIO's own default).
    #[arg(long, value_parser = parse_size, value_name = "SIZE")]
    pub kvikio_task_size: Option<usize>,
    /// The Python interpreter that runs the anchor.
    #[arg(long, default_value = "python3")]
    pub python: String,
    /// Phases to run (comma separated; default: all). `batch` brings `hot` along.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub only: Vec<Phase>,
    /// Backends to offer requests to, in order (as `HIPFILE_BACKENDS`), e.g. `fallback`.
    #[arg(long, value_name = "NAME")]
    pub backend: Option<String>,
    /// Random reads per size and repetition in the latency phase.
    #[arg(long, default_value_t = 2000)]
    pub latency_ops: usize,
    /// Random reads per size, queue depth or thread count, and repetition in the batch phase,
    /// cold ones included (default: 1000 on the sim, 20000 on a GPU; at most what the file
    /// holds of each size).
    #[arg(long, value_name = "N")]
    pub batch_ops: Option<usize>,
    /// Bytes of each stream-ordered read of the async phase, with an optional unit as --size
    /// (at most the file's size).
    #[arg(long, value_parser = parse_size, default_value = "64M", value_name = "SIZE")]
    pub async_op_size: usize,
}

impl Default for BenchArgs {
    fn default() -> Self {
        BenchArgs {
            file: None,
            size: None,
            repeat: 3,
            platform: None,
            json: false,
            verbose: false,
            baseline: false,
            kvikio: None,
            kvikio_threads: vec![1, 8, 16, 32],
            kvikio_task_size: None,
            python: "python3".into(),
            only: Vec::new(),
            backend: None,
            latency_ops: 2000,
            batch_ops: None,
            async_op_size: 64 << 20,
        }
    }
}

/// Largest request handed to hipfile-rs at once: below Linux's `MAX_RW_COUNT` cap, large enough
/// that the engine sees the whole parallelism of the file.
const CALL_BYTES: usize = 1 << 30;
/// Sizes of the latency phase.
const LATENCY_SIZES: [(usize, &str); 3] = [(4 << 10, "4k"), (64 << 10, "64k"), (1 << 20, "1m")];
/// Sizes of the batch phase's random reads.
const BATCH_SIZES: [(usize, &str); 2] = [(4 << 10, "4k"), (64 << 10, "64k")];
/// Queue depths of the batch phase's random reads.
const BATCH_DEPTHS: [usize; 4] = [1, 8, 32, 128];
/// Threads of the synchronous reads a batch is read against: the most that do not exceed its
/// queue depth.
const SYNC_THREADS: [usize; 3] = [1, 8, 16];
/// The batch of large reads: at most this many entries of at most this many bytes, over the
/// start of the file.
const LARGE_ENTRIES: usize = 64;
const LARGE_ENTRY_BYTES: usize = 128 << 20;
/// Cold random reads: their size, and the queue depth of the batch and the threads of the
/// O_DIRECT ceiling they are read against.
const COLD_BYTES: usize = 4 << 10;
const COLD_DEPTH: usize = 32;
/// Stream counts of the async phase's reads (ours and the replay of upstream's design).
const ASYNC_STREAMS: [usize; 2] = [1, 4];
/// Pieces of pinned memory of the replay per stream of the most streams: the replay's ops in
/// flight at once.
const REPLAY_PIECES_PER_STREAM: usize = 2;
/// Bytes of the GPU workload's buffer (or the file size when smaller).
const WORKLOAD_BYTES: usize = 1 << 30;
/// The pinned copy ceiling copies this much (or the file size when smaller).
const H2D_BYTES: usize = 1 << 30;
/// Chunk in which a new file is written.
const FILL_CHUNK: usize = 64 << 20;
/// What the figures of a run on the simulated GPU are for.
const SIM_NOTE: &str = "on the simulated GPU, GPU memory is host memory: these figures only \
     compare hipfile-rs with itself and with the plain designs measured beside it (ceilings, \
     baseline, replay); they say nothing of a GPU's speed";

/// What the benchmark runs on: the GPU runtime, how it was chosen, the file IO primitives of
/// the driver (plain `pread`/`pwrite`, except in tests that need reads to go wrong), and how
/// the page cache is dropped before a cold figure ([`ceiling::drop_caches`], except in tests
/// that follow what is pinned at each cold start without root).
struct Machine {
    gpu: Arc<dyn GpuRuntime>,
    how: String,
    /// Why each GPU platform was passed over, when none was found.
    passed_over: Vec<String>,
    io: Arc<dyn FileIo>,
    drop_caches: fn() -> Result<(), String>,
}

/// Run the benchmark and print to stdout. `Ok(false)`: a byte check failed (the report says
/// which).
pub fn run(args: &BenchArgs) -> Result<bool, String> {
    crate::signals::install()?;
    let mut out = std::io::stdout().lock();
    run_to(args, &mut out)
}

/// Run the benchmark, printing the report (table or JSON lines) to `out`. `Ok(false)`: a byte
/// check failed.
pub fn run_to(args: &BenchArgs, out: &mut dyn Write) -> Result<bool, String> {
    let pick = pick_runtime(args.platform.as_deref(), args.verbose)?;
    let machine = Machine {
        gpu: pick.gpu,
        how: pick.how,
        passed_over: pick.passed_over,
        io: Arc::new(PosixIo),
        drop_caches: ceiling::drop_caches,
    };
    run_on(args, machine, out)
}

fn run_on(args: &BenchArgs, machine: Machine, out: &mut dyn Write) -> Result<bool, String> {
    let mut phases: BTreeSet<Phase> = if args.only.is_empty() {
        Phase::value_variants().iter().copied().collect()
    } else {
        args.only.iter().copied().collect()
    };
    if phases.contains(&Phase::Batch) || phases.contains(&Phase::Async) {
        // The batch of large reads and the stream-ordered reads are read against the hot read
        // of the same run.
        phases.insert(Phase::Hot);
    }
    let Machine {
        gpu,
        how,
        passed_over,
        io,
        drop_caches,
    } = machine;
    let platform = gpu.info().platform;
    let mut options = DriverOptions::with_runtime(gpu.clone());
    options.io = io;
    if let Some(list) = &args.backend {
        options.selection = Some(list.clone());
    }
    let driver = Driver::with_options(options).map_err(|e| e.to_string())?;
    let backends = driver.backends();
    let mut notes = Vec::new();
    if platform == Platform::Sim {
        notes.push(SIM_NOTE.to_string());
    }

    // The directory goes before its removal is dropped (tuple fields drop in order).
    let tmp: (tempfile::TempDir, Removal);
    let path = match &args.file {
        Some(p) => p.clone(),
        None => {
            // Not /tmp: it may be tmpfs, where neither O_DIRECT nor a cold read means anything.
            let dir = tempfile::Builder::new()
                .prefix("hipfile-bench")
                .tempdir_in(std::env::current_dir().map_err(|e| e.to_string())?)
                .map_err(|e| format!("temporary directory in .: {e}"))?;
            let removal = Removal::arm(dir.path());
            tmp = (dir, removal);
            tmp.0.path().join("bench.dat")
        }
    };
    let default_size = if platform == Platform::Sim {
        256 << 20
    } else {
        8 << 30
    };
    let (file, size, created) = prepare_file(&path, args.size, default_size)?;
    // Registered through a descriptor of its own, so that it can be registered afresh (which
    // unpins the page cache its reads pinned) while `file` stays open.
    let mut registered = Registration::new(&driver, &file)?;
    // Registered once: every timed read and write names it (or a slice of it), so requests
    // take the registered path and no pointer query is timed.
    let mut dst = driver
        .register_buffer(DeviceBuffer::new(gpu.clone(), size).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let mut comparer = Comparer::new(gpu.clone(), size)?;
    let mut ledger = Ledger::default();

    let scratch = if phases.contains(&Phase::Write) {
        match Scratch::create(&path, size) {
            Ok(s) => Some(s),
            Err(why) => {
                notes.push(format!("writes skipped: {why}"));
                None
            }
        }
    } else {
        None
    };
    let scratch_handle = match &scratch {
        Some(s) => Some(driver.register_file(s.file()).map_err(|e| e.to_string())?),
        None => None,
    };

    let mut cold_ok = false;
    if phases.contains(&Phase::Cold) || phases.contains(&Phase::Batch) {
        match drop_caches() {
            Ok(()) => cold_ok = true,
            Err(why) => {
                for (phase, what) in [
                    (Phase::Cold, "cold read"),
                    (Phase::Batch, "batch cold reads and their O_DIRECT ceiling"),
                ] {
                    if phases.contains(&phase) {
                        notes.push(format!(
                            "{what} skipped: could not drop the page cache ({why}); run as root for cold figures"
                        ));
                    }
                }
            }
        }
    }

    // The first read through hipfile-rs is compared with the file before anything is timed.
    ceiling::warm(&path, size as u64)?;
    let mut holds_file = checked_read(
        &file,
        &mut dst,
        &mut comparer,
        &mut ledger,
        "first_read",
        |d| timed(|| read_whole(&registered.handle, d)),
    )?
    .1;

    let anchor = args.kvikio.as_ref().map(|script| AnchorRunner {
        script: script.clone(),
        python: args.python.clone(),
    });
    let anchor_threads: Vec<usize> = {
        let mut seen = BTreeSet::new();
        args.kvikio_threads
            .iter()
            .copied()
            .filter(|t| seen.insert(*t))
            .collect()
    };
    // KvikIO's small reads run in one process of the sweep: the one closest to our one thread.
    let anchor_small_threads = anchor_threads.iter().copied().min();
    // The staged engine serves the reads unless a direct backend comes first and has a P2P
    // driver to serve them with.
    let paths = driver.backend_paths();
    let staged_serves = paths.iter().any(|(_, p)| *p == IoPath::Staged)
        && !(paths.first().is_some_and(|(_, p)| *p == IoPath::Direct) && gpu.p2p().is_some());
    let anchor_task_size = args
        .kvikio_task_size
        .map(|b| b as u64)
        .or_else(|| staged_serves.then(|| driver.core().settings().chunk_bytes() as u64));
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

    // The batch phase: reads per size and run (each into a region of the buffer of its own),
    // the batch of large reads, and a buffer per synchronous thread.
    let batch_ops = args
        .batch_ops
        .unwrap_or(if platform == Platform::Sim {
            1000
        } else {
            20000
        })
        .max(1);
    let batch_sizes: Vec<(usize, &str, usize)> = BATCH_SIZES
        .iter()
        .map(|&(bytes, name)| (bytes, name, batch_ops.min(size / bytes)))
        .filter(|(_, _, ops)| *ops > 0)
        .collect();
    let cold_ops = batch_ops.min(size / COLD_BYTES);
    let large_entries = LARGE_ENTRIES.min(size / 4096);
    let large_bytes = match large_entries {
        0 => 0,
        n => (size / n / 4096 * 4096).min(LARGE_ENTRY_BYTES),
    };
    let cold_key = format!("batch_cold_{}k_qd{COLD_DEPTH}", COLD_BYTES >> 10);
    let cold_ceiling_key = format!("ceiling_odirect_{}k_t{COLD_DEPTH}", COLD_BYTES >> 10);
    let mut sync_bufs = Vec::new();
    if phases.contains(&Phase::Batch) {
        if let Some(bytes) = batch_sizes.iter().map(|(b, _, _)| *b).max() {
            for _ in 0..SYNC_THREADS[SYNC_THREADS.len() - 1] {
                let buf = DeviceBuffer::new(gpu.clone(), bytes).map_err(|e| e.to_string())?;
                sync_bufs.push(driver.register_buffer(buf).map_err(|e| e.to_string())?);
            }
        }
        for (bytes, name, ops) in &batch_sizes {
            if *ops < batch_ops {
                notes.push(format!(
                    "batch: {ops} random {name} reads per run, all the file holds of {bytes} bytes"
                ));
            }
        }
        notes.push(format!(
            "batch{}: random reads per run: {}, {} of each run checked; large: {large_entries} x {} in one batch; cold: {cold_ops} x {} at queue depth {COLD_DEPTH}",
            if platform == Platform::Sim {
                " (small counts for the simulated GPU)"
            } else {
                ""
            },
            batch_sizes
                .iter()
                .map(|(_, name, ops)| format!("{ops} of {name}"))
                .collect::<Vec<_>>()
                .join(", "),
            CHECKED_ENTRIES,
            human_bytes(large_bytes),
            human_bytes(COLD_BYTES),
        ));
    }

    // The async phase: its ops, its streams (made as an application makes its own), the
    // replay's pinned pieces, and the GPU workload with a stream of its own, not ordered with
    // the null stream.
    let async_ops = stream_phase::plan(size, args.async_op_size);
    let async_op_bytes = async_ops.first().map_or(0, |(_, len)| *len);
    let max_streams = ASYNC_STREAMS[ASYNC_STREAMS.len() - 1];
    let replay_pieces = (REPLAY_PIECES_PER_STREAM * max_streams).min(async_ops.len());
    let mut async_kit = None;
    if phases.contains(&Phase::Async) {
        let streams = (0..max_streams)
            .map(|_| OwnedStream::new(gpu.clone()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("a stream for the async phase: {e}"))?;
        let reader = HostFunctionReader::new(gpu.clone(), async_op_bytes, replay_pieces)
            .map_err(|e| format!("the replay's pinned memory: {e}"))?;
        let workload = Workload::new(&gpu, size.min(WORKLOAD_BYTES))?;
        let workload_stream = OwnedStream::new_independent(gpu.clone())
            .map_err(|e| format!("the workload's stream: {e}"))?;
        let shared_file = Arc::new(file.try_clone().map_err(|e| e.to_string())?);
        notes.push(format!(
            "async: {} stream-ordered reads of {} per run, each into a region of its own of the registered buffer, dealt round robin to {} streams; {} of each run checked; replay: {replay_pieces} pinned pieces of {} (its ops in flight at most); overlap: the reads on 1 stream, the workload fills of {} on an independent stream",
            async_ops.len(),
            human_bytes(async_op_bytes),
            ASYNC_STREAMS.iter().map(|k| k.to_string()).collect::<Vec<_>>().join(" and "),
            CHECKED_OPS.min(async_ops.len()),
            human_bytes(async_op_bytes),
            human_bytes(workload.bytes()),
        ));
        async_kit = Some((streams, reader, workload, workload_stream, shared_file));
    }
    let mut workload_fills: Option<usize> = None;

    let steps_per_rep = phases.len()
        + 3 * usize::from(phases.contains(&Phase::Async))
        + 2 * usize::from(phases.contains(&Phase::Batch))
        + usize::from(phases.contains(&Phase::Write))
        + 2 * usize::from(phases.contains(&Phase::Ceilings))
        + usize::from(args.baseline)
        + usize::from(anchor.is_some());
    let progress = progress_bar((steps_per_rep * args.repeat.max(1)) as u64, args.json);
    let mut rows = Rows::default();
    let mut cold_starts = ColdStarts::default();
    let mut hot_again_pinned = None;
    let mut odirect_cold = true;
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
                let pinned = registered.release_pins(&driver, &file)?;
                cold_starts.note("read_cold", pinned);
                drop_caches()?;
                holds_file = whole_read_row(
                    &registered.handle,
                    &file,
                    (&mut dst, &mut comparer, &mut ledger, &mut rows),
                    "read_cold",
                    &format!("read, cold (caches dropped), {engine}"),
                )?;
            }
            progress.inc(1);
        }
        if phases.contains(&Phase::Hot) {
            step("hot read");
            make_hot()?;
            // The first read of a freshly registered file: staged, but for the windows pinned
            // beside it while it runs, which it copies out of from its far end. The old
            // registration's windows are unpinned first.
            registered.renew(&driver, &file)?;
            driver.settle();
            whole_read_row(
                &registered.handle,
                &file,
                (&mut dst, &mut comparer, &mut ledger, &mut rows),
                "read_hot",
                &format!("read, hot (page cache), first read of the registered file, {engine}"),
            )?;
            step("hot read again");
            driver.settle();
            let pinned = driver.page_cache_pinned_bytes();
            hot_again_pinned.get_or_insert(pinned);
            holds_file = whole_read_row(
                &registered.handle,
                &file,
                (&mut dst, &mut comparer, &mut ledger, &mut rows),
                "read_hot_again",
                &format!(
                    "read, hot, again ({} MiB of its page cache pinned), {engine}",
                    pinned >> 20
                ),
            )?;
            progress.inc(1);
        }
        if args.baseline {
            step("baseline");
            let (t, ok) = checked_read(
                &file,
                &mut dst,
                &mut comparer,
                &mut ledger,
                "baseline_read_hot",
                |d| ceiling::single_thread_bounce(&file, size as u64, |at, b| d.write_at(at, b)),
            )?;
            holds_file = ok;
            rows.throughput(
                "baseline_read_hot",
                "baseline: 1 thread, pread + sync copy (upstream design), hot",
                1,
                size,
                t,
            );
            progress.inc(1);
        }
        if let (Some(target), Some(target_handle)) = (&scratch, &scratch_handle) {
            if !holds_file {
                // What is written is the file's bytes, as what the anchor writes is.
                read_whole(&registered.handle, &mut dst)?;
                holds_file = true;
            }
            for (key, label, fsync) in [
                ("write", "write, page cache, no fsync", false),
                ("write_fsync", "write + fsync", true),
            ] {
                step(label);
                target.stamp(dst.memory())?;
                target.settle()?;
                let t = timed(|| {
                    write_whole(target_handle, &dst)?;
                    if fsync {
                        target
                            .file()
                            .sync_all()
                            .map_err(|e| format!("fsync: {e}"))?;
                    }
                    Ok(())
                })?;
                rows.throughput(key, &format!("{label}, scratch file, {engine}"), 0, size, t);
                let difference = comparer.compare(target.file(), 0, dst.memory(), 0, size)?;
                ledger.record(key, size as u64, difference);
                progress.inc(1);
            }
        } else if phases.contains(&Phase::Write) {
            progress.inc(2);
        }
        if phases.contains(&Phase::Latency) {
            step("small random reads");
            make_hot()?;
            let most = LATENCY_SIZES.iter().map(|(b, _)| *b).max().unwrap_or(0);
            let mut floor_host =
                PinnedBuffer::new(gpu.clone(), most.min(size)).map_err(|e| e.to_string())?;
            for &(bytes, name) in LATENCY_SIZES.iter().filter(|(b, _)| *b <= size) {
                let mut record = |key: String, label: String, run: LatencyRun| {
                    ledger.record(&key, bytes as u64, run.difference);
                    rows.latency(&key, &label, bytes, run.samples, run.timed);
                };
                let run = latency(
                    &registered.handle,
                    &file,
                    &mut dst,
                    size,
                    bytes,
                    args.latency_ops,
                    &mut rng,
                )?;
                record(
                    format!("latency_{name}"),
                    format!("random {name} reads, hot, 1 thread, {engine}"),
                    run,
                );
                let run = latency_floor(
                    &file,
                    &mut dst,
                    &mut floor_host,
                    size,
                    bytes,
                    args.latency_ops,
                    &mut rng,
                )?;
                record(
                    format!("latency_floor_{name}"),
                    format!("floor: random {name} reads done plainly (pread into pinned memory, one synchronous copy), hot, 1 thread"),
                    run,
                );
            }
            holds_file = false;
            progress.inc(1);
        }
        if phases.contains(&Phase::Batch) {
            step("batch: random reads");
            make_hot()?;
            for &(bytes, name, ops) in &batch_sizes {
                let mut synced = BTreeSet::new();
                for depth in BATCH_DEPTHS {
                    let offsets = random_offsets(&mut rng, size, bytes, ops);
                    let run = Reads::plan(&file, &offsets, bytes, CHECKED_ENTRIES)?.through_batch(
                        &driver,
                        &registered.handle,
                        &mut dst,
                        depth,
                    )?;
                    record_run(
                        &mut rows,
                        &mut ledger,
                        &format!("batch_{name}_qd{depth}"),
                        &format!("batch: random {name} reads, hot, queue depth {depth}, {engine}"),
                        (0, Some(depth.min(ops))),
                        bytes,
                        run,
                    );
                    let threads = sync_threads_for(depth);
                    if synced.insert(threads) {
                        let offsets = random_offsets(&mut rng, size, bytes, ops);
                        let run = batch::sync_reads(
                            &registered.handle,
                            &file,
                            &mut sync_bufs[..threads],
                            bytes,
                            &offsets,
                        )?;
                        record_run(
                            &mut rows,
                            &mut ledger,
                            &format!("sync_{name}_t{threads}"),
                            &format!(
                                "sync: random {name} reads, hot, {threads} thread{}, {engine}",
                                if threads == 1 { "" } else { "s" }
                            ),
                            (threads, None),
                            bytes,
                            run,
                        );
                    }
                }
            }
            progress.inc(1);
            step("batch: large reads");
            if large_entries > 0 {
                make_hot()?;
                let offsets: Vec<u64> = (0..large_entries)
                    .map(|i| (i * large_bytes) as u64)
                    .collect();
                let total = large_entries * large_bytes;
                dst.fill(sentinel_for(&file, 0)?)
                    .map_err(|e| e.to_string())?;
                let run = Reads::plan(&file, &offsets, large_bytes, 0)?.through_batch(
                    &driver,
                    &registered.handle,
                    &mut dst,
                    large_entries,
                )?;
                let difference = comparer.compare(&file, 0, dst.memory(), 0, total)?;
                ledger.record("batch_large", total as u64, difference);
                rows.throughput(
                    "batch_large",
                    &format!(
                        "batch: {large_entries} reads of {} in one batch, hot, {engine}",
                        human_bytes(large_bytes)
                    ),
                    0,
                    total,
                    run.timed,
                );
                rows.set_queue_depth("batch_large", large_entries);
            }
            progress.inc(1);
            step("batch: cold reads");
            if cold_ok && cold_ops > 0 {
                let offsets = random_offsets(&mut rng, size, COLD_BYTES, cold_ops);
                // The checked bytes are read from the file before the page cache is dropped.
                let reads = Reads::plan(&file, &offsets, COLD_BYTES, CHECKED_ENTRIES)?;
                let pinned = registered.release_pins(&driver, &file)?;
                cold_starts.note(&cold_key, pinned);
                drop_caches()?;
                let run = reads.through_batch(&driver, &registered.handle, &mut dst, COLD_DEPTH)?;
                record_run(
                    &mut rows,
                    &mut ledger,
                    &cold_key,
                    &format!(
                        "batch: random {}k reads, cold (caches dropped), queue depth {COLD_DEPTH}, {engine}",
                        COLD_BYTES >> 10
                    ),
                    (0, Some(COLD_DEPTH.min(cold_ops))),
                    COLD_BYTES,
                    run,
                );
                let offsets = random_offsets(&mut rng, size, COLD_BYTES, cold_ops);
                drop_caches()?;
                match ceiling::random_direct_reads(&path, &offsets, COLD_BYTES, COLD_DEPTH) {
                    Ok((t, latency_us)) => rows.iops(
                        &cold_ceiling_key,
                        &format!(
                            "ceiling: O_DIRECT random {}k reads -> host memory, {COLD_DEPTH} threads, cold",
                            COLD_BYTES >> 10
                        ),
                        (COLD_DEPTH, None),
                        COLD_BYTES,
                        latency_us,
                        t,
                    ),
                    Err(why) if rep == 0 => {
                        notes.push(format!("O_DIRECT random-read ceiling skipped: {why}"))
                    }
                    Err(_) => {}
                }
            }
            holds_file = false;
            progress.inc(1);
        }
        if let Some((streams, reader, workload, workload_stream, shared_file)) = &mut async_kit {
            let refs: Vec<StreamRef<'_>> = streams.iter().map(StreamRef::of).collect();
            let mut reads_alone_s = None;
            step("async: stream-ordered reads");
            make_hot()?;
            for k in ASYNC_STREAMS {
                stream_phase::arm(&file, &mut dst)?;
                let run = stream_phase::ours(
                    &driver,
                    &registered.handle,
                    &mut dst,
                    &async_ops,
                    &refs[..k],
                )?;
                let key = format!("async_s{k}");
                for (bytes, difference) in
                    stream_phase::check(&file, &dst, &mut comparer, &async_ops)?
                {
                    ledger.record(&key, bytes, difference);
                }
                if k == 1 {
                    reads_alone_s = Some(run.timed.seconds);
                }
                rows.throughput(
                    &key,
                    &format!(
                        "async: stream-ordered reads of {}, hot, {k} stream{}, {engine}",
                        human_bytes(async_op_bytes),
                        if k == 1 { "" } else { "s" }
                    ),
                    0,
                    size,
                    run.timed.clone(),
                );
                rows.latency(
                    &format!("async_submit_s{k}"),
                    &format!(
                        "async: submission of a {} read (io.read), {k} stream{}",
                        human_bytes(async_op_bytes),
                        if k == 1 { "" } else { "s" }
                    ),
                    async_op_bytes,
                    run.submit_us,
                    run.timed,
                );
            }
            step("async: the same reads, synchronous");
            stream_phase::arm(&file, &mut dst)?;
            let timed = stream_phase::sync_ops(&registered.handle, &mut dst, &async_ops)?;
            for (bytes, difference) in stream_phase::check(&file, &dst, &mut comparer, &async_ops)?
            {
                ledger.record("async_sync_ops", bytes, difference);
            }
            rows.throughput(
                "async_sync_ops",
                &format!(
                    "async: the same reads of {} as synchronous calls, one after another, {engine}",
                    human_bytes(async_op_bytes)
                ),
                0,
                size,
                timed,
            );
            progress.inc(1);
            step("async: upstream's design replayed");
            make_hot()?;
            for k in ASYNC_STREAMS {
                stream_phase::arm(&file, &mut dst)?;
                let run = stream_phase::replay(
                    reader,
                    &gpu,
                    shared_file,
                    &mut dst,
                    &async_ops,
                    &refs[..k],
                )?;
                let key = format!("replay_s{k}");
                for (bytes, difference) in
                    stream_phase::check(&file, &dst, &mut comparer, &async_ops)?
                {
                    ledger.record(&key, bytes, difference);
                }
                rows.throughput(
                    &key,
                    &format!(
                        "replay: upstream's design (host function pread into pinned + async copy), {} ops, hot, {k} stream{}",
                        human_bytes(async_op_bytes),
                        if k == 1 { "" } else { "s" }
                    ),
                    1,
                    size,
                    run.timed,
                );
            }
            progress.inc(1);
            step("async: overlap with a GPU workload");
            make_hot()?;
            let workload_ref = StreamRef::of(workload_stream);
            let settle = |w: &StreamRef<'_>| {
                w.synchronize()
                    .map_err(|e| format!("synchronizing the workload's stream: {e}"))
            };
            let fills = match workload_fills {
                Some(n) => n,
                None => {
                    // One fill alone, after one that warms the stream up, sizes the workload.
                    workload.queue(&workload_ref, 1)?;
                    settle(&workload_ref)?;
                    let span = Span::start();
                    workload.queue(&workload_ref, 1)?;
                    settle(&workload_ref)?;
                    let one = span.finish().seconds;
                    let n = stream_phase::fills_for(reads_alone_s.unwrap_or(0.0), one);
                    notes.push(format!(
                        "async overlap: one fill of {} took {:.3} ms; the workload is {n} fills",
                        human_bytes(workload.bytes()),
                        one * 1e3
                    ));
                    workload_fills = Some(n);
                    n
                }
            };
            let workload_label = format!(
                "overlap: GPU workload alone ({fills} fills of {}, independent stream)",
                human_bytes(workload.bytes())
            );
            workload.arm(fills)?;
            let span = Span::start();
            workload.queue(&workload_ref, fills)?;
            settle(&workload_ref)?;
            rows.duration(
                "async_overlap_workload",
                &workload_label,
                workload.bytes() * fills,
                span.finish(),
            );
            ledger.record(
                "async_overlap_workload",
                workload.bytes() as u64,
                workload.check(fills)?,
            );

            stream_phase::arm(&file, &mut dst)?;
            let run = stream_phase::ours(
                &driver,
                &registered.handle,
                &mut dst,
                &async_ops,
                &refs[..1],
            )?;
            for (bytes, difference) in stream_phase::check(&file, &dst, &mut comparer, &async_ops)?
            {
                ledger.record("async_overlap_reads", bytes, difference);
            }
            rows.duration(
                "async_overlap_reads",
                &format!("overlap: stream-ordered reads alone, 1 stream, {engine}"),
                size,
                run.timed,
            );

            workload.arm(fills)?;
            stream_phase::arm(&file, &mut dst)?;
            let span = Span::start();
            workload.queue(&workload_ref, fills)?;
            stream_phase::ours(
                &driver,
                &registered.handle,
                &mut dst,
                &async_ops,
                &refs[..1],
            )?;
            settle(&workload_ref)?;
            let together = span.finish();
            for (bytes, difference) in stream_phase::check(&file, &dst, &mut comparer, &async_ops)?
            {
                ledger.record("async_overlap_together", bytes, difference);
            }
            ledger.record(
                "async_overlap_together",
                workload.bytes() as u64,
                workload.check(fills)?,
            );
            rows.duration(
                "async_overlap_together",
                &format!("overlap: the workload, then the reads queued, both at once, {engine}"),
                size + workload.bytes() * fills,
                together,
            );
            holds_file = false;
            progress.inc(1);
        }
        if let Some(host) = &pinned {
            step("ceiling: pinned copy");
            let t = ceiling::pinned_h2d(host, |at, b| dst.write_at(at, b))?;
            holds_file = false;
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
            let cold = cold_ok && drop_caches().is_ok();
            odirect_cold &= cold;
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
        }
        if let (Some(runner), true) = (&anchor, anchor_alive) {
            step("KvikIO anchor");
            let anchor_cold = cold_ok && phases.contains(&Phase::Cold);
            if anchor_cold {
                // KvikIO's cold read drops the caches itself; what this process keeps pinned
                // would stay cached through that and be read at page-cache speed.
                let pinned = registered.release_pins(&driver, &file)?;
                cold_starts.note(ANCHOR_COLD, pinned);
            }
            ceiling::warm(&path, size as u64)?;
            for &th in &anchor_threads {
                if let Some(target) = &scratch {
                    target.settle()?;
                }
                let ask = AnchorAsk {
                    file: &path,
                    threads: th,
                    size: size as u64,
                    task_size: anchor_task_size,
                    cold: anchor_cold,
                    latency_ops: (phases.contains(&Phase::Latency)
                        && Some(th) == anchor_small_threads)
                        .then_some(args.latency_ops),
                    write: scratch.as_ref().map(|s| s.path()),
                };
                match runner.run(&ask) {
                    Ok(lines) => anchor_tally.add(th, &lines),
                    Err(why) => {
                        notes.push(format!("KvikIO anchor failed, not run again: {why}"));
                        anchor_alive = false;
                        break;
                    }
                }
            }
            progress.inc(1);
        }
    }
    progress.finish_and_clear();

    // Read after the measurements: a backend may have grown its pools on demand.
    let held = driver.resources();
    let mut measurements = rows.0;
    for m in &mut measurements {
        // A submission row's checks are those of the run it was measured in.
        let key = match m.key.strip_prefix("async_submit_") {
            Some(streams) => format!("async_{streams}"),
            None => m.key.clone(),
        };
        m.checked = ledger.get(&key).cloned();
    }
    // Each batch is read against the synchronous reads of its size from as many threads (at
    // most 16), the batch of large reads against the hot read, the cold batch against the
    // O_DIRECT ceiling at its depth.
    let mut pairs: Vec<(String, String)> = batch_sizes
        .iter()
        .flat_map(|(_, name, _)| {
            BATCH_DEPTHS.iter().map(move |depth| {
                (
                    format!("batch_{name}_qd{depth}"),
                    format!("sync_{name}_t{}", sync_threads_for(*depth)),
                )
            })
        })
        .collect();
    pairs.push(("batch_large".into(), "read_hot".into()));
    pairs.push(("read_hot_again".into(), "ceiling_h2d_pinned".into()));
    for (_, name) in LATENCY_SIZES {
        pairs.push((format!("latency_{name}"), format!("latency_floor_{name}")));
    }
    pairs.push((cold_key.clone(), cold_ceiling_key.clone()));
    for k in ASYNC_STREAMS {
        pairs.push((format!("async_s{k}"), "read_hot".into()));
        pairs.push((format!("replay_s{k}"), "read_hot".into()));
    }
    pairs.push(("async_sync_ops".into(), "read_hot".into()));
    compare(&mut measurements, &pairs);
    // Each stream count against the replay of upstream's design; one stream also against the
    // same reads made synchronously, one after another.
    let mut replays: Vec<(String, String)> = ASYNC_STREAMS
        .iter()
        .map(|k| (format!("async_s{k}"), format!("replay_s{k}")))
        .collect();
    replays.push(("async_s1".into(), "async_sync_ops".into()));
    compare_also(&mut measurements, &replays);
    let overlap = overlap_versus(&mut measurements);
    // A cold figure is judged against the O_DIRECT ceiling of the same run, in its unit.
    let headline = |key: &str| {
        measurements
            .iter()
            .find(|m| m.key == key)
            .map(|m| (m.key.clone(), m.figure.headline()))
    };
    let read_ceiling = headline("ceiling_odirect_read");
    let random_ceiling = headline(&cold_ceiling_key);
    for m in &mut measurements {
        let (ceiling, unit) = match m.key.as_str() {
            "read_cold" => (&read_ceiling, "GB/s"),
            k if k == cold_key => (&random_ceiling, "IOPS"),
            _ => continue,
        };
        m.cold_start_pinned = cold_starts.get(&m.key);
        m.not_cold = not_cold(
            m.figure.headline(),
            unit,
            ceiling.as_ref().map(|(k, v)| (k.as_str(), *v)),
            m.cold_start_pinned.unwrap_or(0),
        );
    }
    if cold_starts.most().is_some() && read_ceiling.is_none() {
        notes.push(
            "cold figures are not checked against an O_DIRECT ceiling: none was measured in this \
             run (the ceilings phase measures it)"
                .into(),
        );
    }
    if !anchor_tally.is_empty() {
        let anchor_cold = AnchorCold {
            ceiling: read_ceiling.as_ref().map(|(k, v)| (k.as_str(), *v)),
            pinned_at_start: cold_starts.get(ANCHOR_COLD),
        };
        attach_anchor(&mut measurements, &anchor_tally, size, &anchor_cold);
        if anchor_tally.set_up_samples() > 0 {
            notes.push(format!(
                "KvikIO: the first hot read of each of its processes ({} in all) includes its set-up and is left out",
                anchor_tally.set_up_samples()
            ));
        }
        let failed: Vec<&str> = measurements
            .iter()
            .filter(|m| m.key.starts_with("kvikio_"))
            .filter(|m| m.checked.as_ref().is_some_and(|c| c.failures > 0))
            .map(|m| m.key.as_str())
            .collect();
        if !failed.is_empty() {
            notes.push(format!(
                "KvikIO's own byte check failed in {}",
                failed.join(", ")
            ));
        }
    }
    if let Some(pinned) = hot_again_pinned {
        notes.push(format!(
            "read_hot_again: {} MiB of the file's page cache pinned by the engine when it ran",
            pinned >> 20
        ));
    }
    if !odirect_cold && measurements.iter().any(|m| m.key == "ceiling_odirect_read") {
        notes.push(
            "ceiling_odirect_read: the page cache was not dropped before it (as root it is)".into(),
        );
    }
    let verified = ledger.all_passed();
    let write_target = match &scratch {
        Some(s) => format!("scratch file {} (removed at the end)", s.path().display()),
        None => "none".to_string(),
    };

    if args.json {
        for m in &measurements {
            writeln!(out, "{}", m.to_json()).map_err(|e| e.to_string())?;
        }
        let summary = json!({
            "type": "summary",
            "platform": platform.to_string(),
            "platform_choice": how,
            "platforms_passed_over": passed_over,
            "backends": backends,
            "file": path.display().to_string(),
            "file_created": created,
            "file_access": "read-only",
            "write_target": scratch.as_ref().map(|s| s.path().display().to_string()),
            "bytes": size,
            "repetitions": args.repeat.max(1),
            "threads_available": threads,
            "verified": verified,
            "verification": ledger.to_json(),
            "not_checked": measurements
                .iter()
                .filter(|m| m.checked.is_none())
                .map(|m| m.key.clone())
                .collect::<Vec<_>>(),
            "cold": cold_ok,
            "cold_start_pinned_bytes": cold_starts.most(),
            "not_cold": measurements
                .iter()
                .flat_map(|m| {
                    let who = if m.key.starts_with("kvikio_") { "kvikio" } else { "ours" };
                    let ours = m.not_cold.as_ref().map(|why| json!({
                        "key": m.key, "who": who, "why": why,
                    }));
                    let anchor = m.anchor.as_ref().and_then(|a| a.not_cold.as_ref()).map(|why| {
                        json!({"key": m.key, "who": "kvikio", "why": why})
                    });
                    ours.into_iter().chain(anchor)
                })
                .collect::<Vec<_>>(),
            "anchor": args.kvikio.as_ref().map(|p| p.display().to_string()),
            "anchor_threads": args.kvikio.as_ref().map(|_| anchor_threads.clone()),
            "anchor_task_size": args.kvikio.as_ref().and(anchor_task_size),
            "anchor_latency_ops": args.kvikio.as_ref().map(|_| args.latency_ops),
            "batch": phases.contains(&Phase::Batch).then(|| json!({
                "ops": batch_sizes
                    .iter()
                    .map(|(_, name, ops)| (name.to_string(), json!(ops)))
                    .collect::<serde_json::Map<_, _>>(),
                "queue_depths": BATCH_DEPTHS,
                "sync_threads": SYNC_THREADS,
                "checked_entries": CHECKED_ENTRIES,
                "large": {"entries": large_entries, "entry_bytes": large_bytes},
                "cold": {
                    "ran": cold_ok,
                    "ops": cold_ops,
                    "bytes": COLD_BYTES,
                    "queue_depth": COLD_DEPTH,
                    "odirect_threads": COLD_DEPTH,
                },
            })),
            "async": phases.contains(&Phase::Async).then(|| json!({
                "op_bytes": async_op_bytes,
                "ops": async_ops.len(),
                "streams": ASYNC_STREAMS,
                "checked_ops": CHECKED_OPS.min(async_ops.len()),
                "replay_pieces": replay_pieces,
                "workload_fills": workload_fills,
                "overlap": overlap.map(|x| (x * 1000.0).round() / 1000.0),
            })),
            "keys": measurements.iter().map(|m| m.key.clone()).collect::<Vec<_>>(),
            "notes": notes,
            "resources": held
                .iter()
                .map(|(name, r)| (name.to_string(), json!({
                    "pinned_bytes": r.pinned_bytes,
                    "io_threads": r.io_threads,
                    "page_cache_pinned_bytes": r.page_cache_pinned_bytes,
                    "own_contexts": r.own_contexts,
                })))
                .collect::<serde_json::Map<_, _>>(),
        });
        writeln!(out, "{summary}").map_err(|e| e.to_string())?;
    } else {
        let mut head = vec![format!("hipfile bench: {how}")];
        head.extend(passed_over.iter().map(|l| format!("  {l}")));
        head.push(format!("backends: {}", backends.join(", ")));
        head.push(format!(
            "held: {}",
            held.iter()
                .map(|(name, r)| format!(
                    "{name} {} MiB pinned, {} IO threads, {} MiB of page cache pinned{}",
                    r.pinned_bytes >> 20,
                    r.io_threads,
                    r.page_cache_pinned_bytes >> 20,
                    match r.own_contexts {
                        0 => String::new(),
                        n => format!(", {n} GPU context(s) of its own (page-cache pinning)"),
                    }
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ));
        head.push(format!(
            "file: {} ({}, read-only), {} MiB, {} repetitions (median), {threads} cores available",
            path.display(),
            if created { "created" } else { "taken as it is" },
            size >> 20,
            args.repeat.max(1),
        ));
        head.push(format!("writes: {write_target}"));
        head.extend(ledger.text().lines().map(str::to_string));
        head.extend(notes.iter().map(|n| format!("note: {n}")));
        let mut text: String = head.iter().map(|l| wrap(l, REPORT_COLUMNS)).collect();
        text.push('\n');
        text.push_str(&table(&measurements));
        let anchored = anchor_table(&measurements);
        if !anchored.is_empty() {
            text.push_str("\nagainst KvikIO (kvikio_anchor.py, run between our repetitions)\n");
            text.push_str(&anchored);
        }
        text.push('\n');
        text.push_str(&legend(&measurements));
        out.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    }
    Ok(verified)
}

/// The byte at `offset` of a file the benchmark makes.
pub(crate) fn pattern_byte(offset: usize) -> u8 {
    (offset.wrapping_mul(31) ^ (offset >> 12)) as u8
}

/// Open the file to read, read-only. A file that exists is taken as it is (a regular file with
/// at least the bytes asked); one that does not is made with a pattern of `asked` (or
/// `default`) bytes first. Returns the file, the bytes to measure and whether it was made.
fn prepare_file(
    path: &Path,
    asked: Option<usize>,
    default: usize,
) -> Result<(File, usize, bool), String> {
    let shown = |e: std::io::Error| format!("{}: {e}", path.display());
    match std::fs::metadata(path) {
        Ok(meta) => {
            if !meta.is_file() {
                return Err(format!(
                    "{} is not a regular file; hipfile bench reads regular files only",
                    path.display()
                ));
            }
            let existing = usize::try_from(meta.len()).unwrap_or(usize::MAX);
            if existing == 0 {
                return Err(format!(
                    "{} is empty; name a file that does not exist to have one made",
                    path.display()
                ));
            }
            let size = asked.unwrap_or(existing);
            if size > existing {
                return Err(format!(
                    "{} has {existing} bytes, fewer than --size {size}",
                    path.display()
                ));
            }
            let file = File::open(path).map_err(shown)?;
            Ok((file, size, false))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let size = asked.unwrap_or(default);
            // create_new: a file that appeared meanwhile is never written over.
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
                .map_err(shown)?;
            // Half made, it goes (on an error or a signal); made, it is kept.
            let removal = Removal::arm(path);
            let mut chunk = vec![0u8; FILL_CHUNK.min(size)];
            let mut at = 0usize;
            while at < size {
                let n = chunk.len().min(size - at);
                for (i, b) in chunk[..n].iter_mut().enumerate() {
                    *b = pattern_byte(at + i);
                }
                file.write_all_at(&chunk[..n], at as u64).map_err(shown)?;
                at += n;
            }
            // Dirty pages of the setup must not flow into the write figures.
            file.sync_all().map_err(shown)?;
            drop(file);
            let file = File::open(path).map_err(shown)?;
            removal.keep_with(|| ());
            Ok((file, size, true))
        }
        Err(e) => Err(shown(e)),
    }
}

/// Fill `dst` with a sentinel unlike the file's first byte, run `read` (which fills `dst` with
/// the file's first `dst.len()` bytes), and compare `dst` with the file; the check goes into
/// `ledger` under `key`. Returns the time `read` gave and whether the bytes matched.
fn checked_read(
    file: &File,
    dst: &mut RegisteredBuffer,
    comparer: &mut Comparer,
    ledger: &mut Ledger,
    key: &str,
    read: impl FnOnce(&mut RegisteredBuffer) -> Result<Timed, String>,
) -> Result<(Timed, bool), String> {
    let size = dst.len();
    dst.fill(sentinel_for(file, 0)?)
        .map_err(|e| e.to_string())?;
    let t = read(dst)?;
    let difference = comparer.compare(file, 0, dst.memory(), 0, size)?;
    let ok = difference.is_none();
    ledger.record(key, size as u64, difference);
    Ok((t, ok))
}

/// The benchmark's registration of its file, through a descriptor of its own.
struct Registration {
    handle: FileHandle,
    _fd: File,
}

impl Registration {
    fn new(driver: &Driver, file: &File) -> Result<Self, String> {
        let fd = file.try_clone().map_err(|e| e.to_string())?;
        let handle = driver.register_file(&fd).map_err(|e| e.to_string())?;
        Ok(Registration { handle, _fd: fd })
    }

    /// Register the file afresh and drop the old registration, which unpins the page cache its
    /// reads had pinned.
    fn renew(&mut self, driver: &Driver, file: &File) -> Result<(), String> {
        *self = Registration::new(driver, file)?;
        Ok(())
    }

    /// What comes before a cold figure: the registration renewed (its pins go with the old
    /// one) and the backends' work in the background done, so that no pin is on its way. Returns
    /// the page cache still pinned, which a cold figure must find at 0: pinned pages stay
    /// cached whatever drops the cache.
    fn release_pins(&mut self, driver: &Driver, file: &File) -> Result<usize, String> {
        self.renew(driver, file)?;
        driver.settle();
        Ok(driver.page_cache_pinned_bytes())
    }
}

/// The key under which the anchor's cold starts are noted in [`ColdStarts`].
const ANCHOR_COLD: &str = "kvikio cold";

/// The page cache pinned by this process at each cold start, by measurement (the most over
/// the repetitions).
#[derive(Debug, Default)]
struct ColdStarts(std::collections::BTreeMap<String, usize>);

impl ColdStarts {
    fn note(&mut self, key: &str, pinned: usize) {
        let most = self.0.entry(key.to_string()).or_default();
        *most = (*most).max(pinned);
    }

    fn get(&self, key: &str) -> Option<usize> {
        self.0.get(key).copied()
    }

    /// The most pinned at any cold start; `None` when no cold figure ran.
    fn most(&self) -> Option<usize> {
        self.0.values().copied().max()
    }
}

/// Read the whole file through `handle` into the buffer, timed and compared with `file`, as the
/// throughput row `key`; whether the buffer holds the file afterwards.
fn whole_read_row(
    handle: &FileHandle,
    file: &File,
    (dst, comparer, ledger, rows): (&mut RegisteredBuffer, &mut Comparer, &mut Ledger, &mut Rows),
    key: &str,
    label: &str,
) -> Result<bool, String> {
    let (t, ok) = checked_read(file, dst, comparer, ledger, key, |d| {
        timed(|| read_whole(handle, d))
    })?;
    rows.throughput(key, label, 0, dst.len(), t);
    Ok(ok)
}

/// Read the file's first `dst.len()` bytes into `dst`, `CALL_BYTES` per call.
fn read_whole(handle: &FileHandle, dst: &mut RegisteredBuffer) -> Result<(), String> {
    let size = dst.len();
    let mut at = 0;
    while at < size {
        let want = (size - at).min(CALL_BYTES);
        let window = dst
            .slice_mut(at..at + want)
            .map_err(|e| format!("read at {at}: {e}"))?;
        let n = handle
            .read(window, at as u64)
            .map_err(|e| format!("read at {at}: {e}"))?;
        if n != want {
            return Err(format!("read at {at}: {n} of {want} bytes"));
        }
        at += n;
    }
    Ok(())
}

/// Write `src` to the file from offset 0, `CALL_BYTES` per call.
fn write_whole(handle: &FileHandle, src: &RegisteredBuffer) -> Result<(), String> {
    let size = src.len();
    let mut at = 0;
    while at < size {
        let want = (size - at).min(CALL_BYTES);
        let window = src
            .slice(at..at + want)
            .map_err(|e| format!("write at {at}: {e}"))?;
        let n = handle
            .write(window, at as u64)
            .map_err(|e| format!("write at {at}: {e}"))?;
        if n != want {
            return Err(format!("write at {at}: {n} of {want} bytes"));
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

/// What one size of the latency phase gave.
struct LatencyRun {
    /// Microseconds of each read.
    samples: Vec<f64>,
    /// The whole loop.
    timed: Timed,
    /// The check of the last read: `None` when it matched the file.
    difference: Option<String>,
}

/// `ops` reads of `bytes` at random aligned offsets into the start of the buffer, each timed
/// alone. The last one is checked: the complement of the file's bytes is put where it lands
/// first (outside its timing), and what it left is compared with the file after the loop.
fn latency(
    handle: &FileHandle,
    file: &File,
    dst: &mut RegisteredBuffer,
    size: usize,
    bytes: usize,
    ops: usize,
    rng: &mut SplitMix64,
) -> Result<LatencyRun, String> {
    timed_reads(file, dst, size, bytes, ops, rng, |dst, off| {
        let start = dst.slice_mut(..bytes).map_err(|e| e.to_string())?;
        handle.read(start, off).map_err(|e| e.to_string())
    })
}

/// The same reads done plainly, as the floor a read of ours is judged against: a `pread` of the
/// file into pinned host memory, then one synchronous copy of it to the device (what a program
/// without hipFile writes, and what KvikIO does for a small read).
fn latency_floor(
    file: &File,
    dst: &mut RegisteredBuffer,
    host: &mut PinnedBuffer,
    size: usize,
    bytes: usize,
    ops: usize,
    rng: &mut SplitMix64,
) -> Result<LatencyRun, String> {
    timed_reads(file, dst, size, bytes, ops, rng, |dst, off| {
        let staged = &mut host.as_mut_slice()[..bytes];
        let n = file.read_at(staged, off).map_err(|e| e.to_string())?;
        dst.write_at(0, &staged[..n]).map_err(|e| e.to_string())?;
        Ok(n)
    })
}

/// `ops` reads of `bytes` at random aligned offsets, each made by `read(dst, offset)` into the
/// start of `dst` and timed alone; see [`latency`] for the check.
fn timed_reads(
    file: &File,
    dst: &mut RegisteredBuffer,
    size: usize,
    bytes: usize,
    ops: usize,
    rng: &mut SplitMix64,
    mut read: impl FnMut(&mut RegisteredBuffer, u64) -> Result<usize, String>,
) -> Result<LatencyRun, String> {
    let limit = (size - bytes) as u64;
    let offsets: Vec<u64> = (0..ops.max(1))
        .map(|_| rng.aligned_below(limit, 4096))
        .collect();
    let last = offsets.len() - 1;
    let mut want = vec![0u8; bytes];
    file.read_exact_at(&mut want, offsets[last])
        .map_err(|e| format!("check: reading the file at {}: {e}", offsets[last]))?;
    let sentinel: Vec<u8> = want.iter().map(|b| !b).collect();
    let mut samples = Vec::with_capacity(offsets.len());
    let span = Span::start();
    for (i, &off) in offsets.iter().enumerate() {
        if i == last {
            dst.write_at(0, &sentinel).map_err(|e| e.to_string())?;
        }
        let t = std::time::Instant::now();
        let n = read(dst, off).map_err(|e| format!("read of {bytes} at {off}: {e}"))?;
        samples.push(t.elapsed().as_secs_f64() * 1e6);
        if n != bytes {
            return Err(format!("read of {bytes} at {off}: {n} bytes"));
        }
    }
    let timed = span.finish();
    let mut got = vec![0u8; bytes];
    dst.read_at(0, &mut got).map_err(|e| e.to_string())?;
    let difference = want.iter().zip(&got).position(|(a, b)| a != b).map(|i| {
        format!(
            "byte {} of the file is {:#04x}, the read left {:#04x} ({} of {bytes} bytes differ)",
            offsets[last] + i as u64,
            want[i],
            got[i],
            want.iter().zip(&got).filter(|(a, b)| a != b).count()
        )
    });
    Ok(LatencyRun {
        samples,
        timed,
        difference,
    })
}

/// `n` multiples of 4096 at which `bytes` lie within the first `size` bytes.
fn random_offsets(rng: &mut SplitMix64, size: usize, bytes: usize, n: usize) -> Vec<u64> {
    let limit = (size - bytes) as u64;
    (0..n).map(|_| rng.aligned_below(limit, 4096)).collect()
}

/// The synchronous thread count a batch of `depth` entries is read against: the most of
/// [`SYNC_THREADS`] that does not exceed it.
fn sync_threads_for(depth: usize) -> usize {
    SYNC_THREADS
        .iter()
        .copied()
        .filter(|t| *t <= depth)
        .max()
        .unwrap_or(SYNC_THREADS[0])
}

/// `4 KiB`, `128 MiB`: a power-of-two size as a label shows it.
fn human_bytes(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes % (1 << 20) == 0 {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes % (1 << 10) == 0 {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

/// Put a run of reads into its row (`threads`, `queue_depth`) and its checks into the ledger.
fn record_run(
    rows: &mut Rows,
    ledger: &mut Ledger,
    key: &str,
    label: &str,
    (threads, queue_depth): (usize, Option<usize>),
    bytes: usize,
    run: batch::Run,
) {
    for difference in run.checks {
        ledger.record(key, bytes as u64, difference);
    }
    rows.iops(
        key,
        label,
        (threads, queue_depth),
        bytes,
        run.latency_us,
        run.timed,
    );
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
                    checked: None,
                    queue_depth: None,
                    versus: None,
                    versus_also: Vec::new(),
                    cold_start_pinned: None,
                    not_cold: None,
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

    fn iops(
        &mut self,
        key: &str,
        label: &str,
        (threads, queue_depth): (usize, Option<usize>),
        bytes: usize,
        latency_us: Vec<f64>,
        t: Timed,
    ) {
        let empty = Figure::Iops {
            iops: Vec::new(),
            latency_us: Vec::new(),
        };
        let m = self.entry(key, label, threads, bytes, empty);
        m.queue_depth = queue_depth;
        if let Figure::Iops {
            iops,
            latency_us: all,
        } = &mut m.figure
        {
            iops.push(latency_us.len() as f64 / t.seconds);
            all.extend(latency_us);
        }
        m.cores.push(t.cores);
        m.cores_by_thread.push(t.cores_by_thread);
    }

    fn set_queue_depth(&mut self, key: &str, depth: usize) {
        if let Some(m) = self.0.iter_mut().find(|m| m.key == key) {
            m.queue_depth = Some(depth);
        }
    }

    fn duration(&mut self, key: &str, label: &str, bytes: usize, t: Timed) {
        let m = self.entry(key, label, 0, bytes, Figure::Duration(Vec::new()));
        if let Figure::Duration(v) = &mut m.figure {
            v.push(t.seconds * 1e3);
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

/// Read the run of the workload and the reads together against the sum of their times alone:
/// its `versus` is that sum, so its `versus_ratio` is the overlap (below 1: they overlapped).
/// Returns the overlap.
fn overlap_versus(rows: &mut [Measurement]) -> Option<f64> {
    let alone = |key: &str| {
        rows.iter()
            .find(|m| m.key == key)
            .map(|m| m.figure.headline())
    };
    let sum = alone("async_overlap_workload")? + alone("async_overlap_reads")?;
    let together = rows
        .iter_mut()
        .find(|m| m.key == "async_overlap_together")?;
    together.versus = Some(Versus {
        key: "async_overlap_workload + async_overlap_reads".into(),
        value: sum,
    });
    together.versus_ratio()
}

/// What decides whether the anchor's cold reads were cold: the run's O_DIRECT ceiling (key and
/// GB/s) and the page cache this process kept pinned when the anchor started them.
struct AnchorCold<'a> {
    ceiling: Option<(&'a str, f64)>,
    pinned_at_start: Option<usize>,
}

impl AnchorCold<'_> {
    fn judge(&self, figure: &mut AnchorFigure) {
        figure.not_cold = not_cold(
            figure.value,
            "GB/s",
            self.ceiling,
            self.pinned_at_start.unwrap_or(0),
        );
    }
}

/// The anchor's cold read next to ours: the best of its thread sweep among the figures that
/// were cold, or, when none was, the best, marked.
fn best_cold_anchor(tally: &AnchorTally, cold: &AnchorCold<'_>) -> Option<AnchorFigure> {
    let mut figures = tally.reads_by_threads("cold");
    figures.iter_mut().for_each(|f| cold.judge(f));
    let best = |figures: Vec<AnchorFigure>| {
        figures
            .into_iter()
            .max_by(|a, b| a.value.total_cmp(&b.value))
    };
    let (cold_ones, others): (Vec<_>, Vec<_>) =
        figures.into_iter().partition(|f| f.not_cold.is_none());
    best(cold_ones).or_else(|| best(others))
}

/// Put the anchor's best figure next to ours, and its whole thread sweep in rows of its own
/// (with the checks the script made of its reads, and for cold reads whether they were cold).
fn attach_anchor(
    rows: &mut Vec<Measurement>,
    tally: &AnchorTally,
    size: usize,
    cold: &AnchorCold<'_>,
) {
    for m in rows.iter_mut() {
        m.anchor = match m.key.as_str() {
            "read_hot" => tally.best_read("hot"),
            "read_cold" => best_cold_anchor(tally, cold),
            "write" => tally.best_write(),
            k => LATENCY_SIZES
                .iter()
                .find(|(_, name)| k == format!("latency_{name}"))
                .and_then(|(bytes, _)| tally.latency(*bytes as u64)),
        };
    }
    for cache in ["hot", "cold"] {
        for mut f in tally.reads_by_threads(cache) {
            let t = f.threads.unwrap_or(0);
            let cold_start_pinned = (cache == "cold").then_some(cold.pinned_at_start).flatten();
            if cache == "cold" {
                cold.judge(&mut f);
            }
            let tasks = f
                .task_size
                .map_or_else(String::new, |b| format!(", {} KiB tasks", b >> 10));
            rows.push(Measurement {
                key: format!("kvikio_read_{cache}_t{t}"),
                label: format!("KvikIO read, {cache}, {t} threads{tasks}"),
                threads: t,
                bytes: size as u64,
                cores: f.cores.into_iter().collect(),
                cores_by_thread: Vec::new(),
                anchor: None,
                checked: (f.checks > 0).then(|| Checked {
                    checks: f.checks,
                    failures: f.check_failures,
                    bytes: None,
                    first_failure: (f.check_failures > 0)
                        .then(|| "KvikIO's check of 16 windows of 4 KiB failed".to_string()),
                }),
                queue_depth: None,
                versus: None,
                versus_also: Vec::new(),
                cold_start_pinned,
                not_cold: f.not_cold,
                figure: Figure::Throughput(f.samples),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::os::fd::BorrowedFd;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use hipfile_core::PageCount;
    use serde_json::Value;

    /// Plain `pread`, until the `arm_at`th read that starts at offset 0 and returns bytes (the
    /// start of the `arm_at`th whole-file read); from that read on, every read that returns
    /// bytes has its first byte flipped, as a failing disk or a broken read path would give
    /// the engine wrong bytes.
    #[derive(Debug)]
    struct CorruptingIo {
        arm_at: u64,
        reads_at_zero: AtomicU64,
        armed: AtomicBool,
        corrupted: AtomicU64,
    }

    impl CorruptingIo {
        fn new(arm_at: u64) -> Self {
            CorruptingIo {
                arm_at,
                reads_at_zero: AtomicU64::new(0),
                armed: AtomicBool::new(false),
                corrupted: AtomicU64::new(0),
            }
        }

        fn after_read(&self, offset: u64, buf: &mut [u8], n: usize) {
            if n == 0 {
                return;
            }
            if offset == 0 && self.reads_at_zero.fetch_add(1, Ordering::SeqCst) + 1 >= self.arm_at {
                self.armed.store(true, Ordering::SeqCst);
            }
            if self.armed.load(Ordering::SeqCst) {
                buf[0] ^= 0xff;
                self.corrupted.fetch_add(1, Ordering::SeqCst);
            }
        }
    }

    impl FileIo for CorruptingIo {
        fn pread(&self, fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<usize> {
            let n = PosixIo.pread(fd, buf, offset)?;
            self.after_read(offset, buf, n);
            Ok(n)
        }
        fn pwrite(&self, fd: BorrowedFd<'_>, buf: &[u8], offset: u64) -> io::Result<usize> {
            PosixIo.pwrite(fd, buf, offset)
        }
        fn pread_cached(
            &self,
            fd: BorrowedFd<'_>,
            buf: &mut [u8],
            offset: u64,
        ) -> io::Result<usize> {
            let n = PosixIo.pread_cached(fd, buf, offset)?;
            self.after_read(offset, buf, n);
            Ok(n)
        }
        /// Says nothing of the page cache: the engine then pins none of the file (it pins only
        /// what it knows is cached), so every read goes through `pread` and its flipped byte,
        /// instead of being copied straight out of pinned page cache.
        fn cached_pages(&self, _: BorrowedFd<'_>, _: u64, _: u64) -> Option<PageCount> {
            None
        }
    }

    /// `hipfile bench --json` on the runtime under test through `io`, staged engine only (the
    /// engine whose reads go through `FileIo`); returns what `run_on` returned, the
    /// measurements and the summary.
    fn bench_through(io: Arc<dyn FileIo>, only: Vec<Phase>) -> (bool, Vec<Value>, Value) {
        let dir = tempfile::tempdir().unwrap();
        let args = BenchArgs {
            file: Some(dir.path().join("f.dat")),
            size: Some(4 << 20),
            repeat: 2,
            json: true,
            only,
            backend: Some("fallback".into()),
            latency_ops: 20,
            batch_ops: Some(100),
            async_op_size: 512 << 10,
            ..BenchArgs::default()
        };
        run_json(&args, io, ceiling::drop_caches)
    }

    /// `run_on` with `args` on the runtime under test through `io`, dropping the page cache
    /// with `drop_caches`; returns what it returned, the measurements and the summary.
    fn run_json(
        args: &BenchArgs,
        io: Arc<dyn FileIo>,
        drop_caches: fn() -> Result<(), String>,
    ) -> (bool, Vec<Value>, Value) {
        let gpu = hipfile_testkit::target::runtime_under_test()
            .unwrap()
            .runtime;
        let machine = Machine {
            gpu,
            how: "runtime under test".into(),
            passed_over: Vec::new(),
            io,
            drop_caches,
        };
        let mut out = Vec::new();
        let verified = run_on(args, machine, &mut out).unwrap();
        let mut objects: Vec<Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let summary = objects.pop().unwrap();
        (verified, objects, summary)
    }

    fn measurement<'a>(objects: &'a [Value], key: &str) -> &'a Value {
        objects.iter().find(|o| o["key"] == key).unwrap()
    }

    /// Stands in for dropping the page cache where a test may not (it takes root): what comes
    /// before each cold figure still runs, and that is what the test follows.
    fn cache_left_as_it_is() -> Result<(), String> {
        Ok(())
    }

    /// A stand-in for `kvikio_anchor.py` that reads nothing: a cold and two hot reads per
    /// thread count, with fixed figures.
    const STILL_ANCHOR: &str = r#"
import argparse, json
ap = argparse.ArgumentParser()
ap.add_argument("file")
ap.add_argument("--threads")
ap.add_argument("--size", type=int)
ap.add_argument("--task-size", type=int)
ap.add_argument("--cold", action="store_true")
a = ap.parse_args()
for cache in (["cold"] if a.cold else []) + ["hot", "hot"]:
    print(json.dumps({"tool": "kvikio", "op": "read", "threads": int(a.threads),
                      "cache": cache, "bytes": a.size, "gbps": 1.0, "verified": True}))
"#;

    #[test]
    fn no_cold_start_finds_the_file_pinned_ours_or_the_anchors() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f.dat");
        let size = 8usize << 20;
        std::fs::write(&file, (0..size).map(pattern_byte).collect::<Vec<u8>>()).unwrap();
        // The engine pins only the page cache of a file that has not changed for a second.
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let script = dir.path().join("anchor.py");
        std::fs::write(&script, STILL_ANCHOR).unwrap();
        let args = BenchArgs {
            file: Some(file),
            size: Some(size),
            repeat: 2,
            json: true,
            only: vec![Phase::Cold, Phase::Hot],
            backend: Some("fallback".into()),
            kvikio: Some(script),
            kvikio_threads: vec![1],
            ..BenchArgs::default()
        };
        let (verified, objects, summary) = run_json(&args, Arc::new(PosixIo), cache_left_as_it_is);
        assert!(verified, "{summary}");
        // Each repetition's hot reads pinned the file's page cache, which the next cold start
        // (the anchor's, then ours) would have found pinned.
        let again = measurement(&objects, "read_hot_again")["label"].to_string();
        assert!(
            again.contains(" MiB of its page cache pinned") && !again.contains("(0 MiB"),
            "{again}"
        );
        assert_eq!(summary["cold_start_pinned_bytes"], 0, "{summary}");
        for key in ["read_cold", "kvikio_read_cold_t1"] {
            let m = measurement(&objects, key);
            assert_eq!(m["page_cache_pinned_at_start"], 0, "{m}");
            assert_eq!(m["not_cold"], Value::Null, "{m}");
        }
        let cold = measurement(&objects, "read_cold");
        assert_eq!(cold["anchor"]["not_cold"], Value::Null, "{cold}");
        assert!(cold["ratio"].as_f64().is_some(), "{cold}");
        assert_eq!(summary["not_cold"], json!([]), "{summary}");
    }

    #[test]
    fn reads_that_return_wrong_bytes_are_reported_as_not_verified() {
        // Arm at the second whole-file read: the first (untimed) read is clean, every timed
        // read after it gets wrong bytes from the file.
        let io = Arc::new(CorruptingIo::new(2));
        let (verified, objects, summary) =
            bench_through(io.clone(), vec![Phase::Hot, Phase::Latency]);
        assert!(io.corrupted.load(Ordering::SeqCst) > 0);
        assert!(!verified);
        assert_eq!(summary["verified"], false, "{summary}");
        let first = &summary["verification"]["first_read"];
        assert_eq!(
            (&first["checks"], &first["failures"]),
            (&1.into(), &0.into())
        );
        let hot = measurement(&objects, "read_hot");
        assert_eq!(hot["verified"], false, "{hot}");
        assert_eq!(hot["checks"], 2);
        assert_eq!(summary["verification"]["read_hot"]["failures"], 2);
        let why = hot["check_failure"].as_str().unwrap();
        assert!(why.starts_with("byte 0 of the file"), "{why}");
        for key in ["latency_4k", "latency_64k", "latency_1m"] {
            let m = measurement(&objects, key);
            assert_eq!(m["verified"], false, "{m}");
            assert_eq!(m["checks"], 2, "{m}");
        }
    }

    #[test]
    fn the_same_run_with_clean_reads_is_verified() {
        let io = Arc::new(CorruptingIo::new(u64::MAX));
        let (verified, objects, summary) =
            bench_through(io.clone(), vec![Phase::Hot, Phase::Latency]);
        assert_eq!(io.corrupted.load(Ordering::SeqCst), 0);
        assert!(verified);
        assert_eq!(summary["verified"], true, "{summary}");
        let hot = measurement(&objects, "read_hot");
        assert_eq!(hot["verified"], true, "{hot}");
        assert_eq!(hot["bytes_checked"], 2 * (4 << 20));
        assert_eq!(
            measurement(&objects, "latency_1m")["bytes_checked"],
            2 << 20
        );
    }

    /// The measurements of the batch phase whose bytes are checked.
    fn batch_rows(objects: &[Value]) -> Vec<&Value> {
        let rows: Vec<&Value> = objects
            .iter()
            .filter(|o| {
                let key = o["key"].as_str().unwrap();
                key.starts_with("batch_") || key.starts_with("sync_")
            })
            .collect();
        // 2 sizes x (4 depths + 3 thread counts), the large batch, and the cold batch as root.
        assert!(rows.len() >= 15, "{objects:?}");
        rows
    }

    #[test]
    fn batch_reads_that_return_wrong_bytes_are_reported_as_not_verified() {
        // Armed at the hot read: every read of the batch phase gets wrong bytes.
        let io = Arc::new(CorruptingIo::new(2));
        let (verified, objects, summary) =
            bench_through(io.clone(), vec![Phase::Hot, Phase::Batch]);
        assert!(!verified);
        assert_eq!(summary["verified"], false, "{summary}");
        for m in batch_rows(&objects) {
            assert_eq!(m["verified"], false, "{m}");
            assert!(m["checks"].as_u64().unwrap() > 0, "{m}");
            let key = m["key"].as_str().unwrap();
            assert_eq!(
                summary["verification"][key]["failures"], m["checks"],
                "{summary}"
            );
            let why = m["check_failure"].as_str().unwrap();
            assert!(why.starts_with("byte "), "{why}");
        }
    }

    #[test]
    fn the_same_batch_phase_with_clean_reads_is_verified() {
        let io = Arc::new(CorruptingIo::new(u64::MAX));
        let (verified, objects, summary) = bench_through(io.clone(), vec![Phase::Batch]);
        assert_eq!(io.corrupted.load(Ordering::SeqCst), 0);
        assert!(verified, "{summary}");
        for m in batch_rows(&objects) {
            assert_eq!(m["verified"], true, "{m}");
        }
        // The batch of large reads brought the hot read along and is read against it.
        let large = measurement(&objects, "batch_large");
        assert_eq!(large["versus"]["key"], "read_hot", "{large}");
        assert_eq!(large["bytes_checked"], 2 * (4 << 20), "{large}");
    }

    /// The keys of the async phase whose bytes are checked, with what they are read against.
    const ASYNC_ROWS: [&str; 10] = [
        "async_s1",
        "async_sync_ops",
        "async_s4",
        "async_submit_s1",
        "async_submit_s4",
        "replay_s1",
        "replay_s4",
        "async_overlap_workload",
        "async_overlap_reads",
        "async_overlap_together",
    ];

    #[test]
    fn the_async_phase_with_clean_reads_is_verified() {
        let io = Arc::new(CorruptingIo::new(u64::MAX));
        let (verified, objects, summary) = bench_through(io.clone(), vec![Phase::Async]);
        assert_eq!(io.corrupted.load(Ordering::SeqCst), 0);
        assert!(verified, "{summary}");
        for key in ASYNC_ROWS {
            let m = measurement(&objects, key);
            assert_eq!(m["verified"], true, "{m}");
            assert!(m["checks"].as_u64().unwrap() > 0, "{m}");
        }
        // 8 ops of 512 KiB, all checked, in each of 2 repetitions.
        assert_eq!(
            measurement(&objects, "async_s4")["bytes_checked"],
            2 * (4 << 20)
        );
        assert_eq!(summary["async"]["ops"], 8);
        // Brought the hot read along; read against it, and against the replay.
        for k in [1, 4] {
            let ours = measurement(&objects, &format!("async_s{k}"));
            assert_eq!(ours["versus"]["key"], "read_hot", "{ours}");
            assert_eq!(
                ours["versus_also"][0]["key"],
                format!("replay_s{k}"),
                "{ours}"
            );
            assert!(
                ours["versus_also"][0]["ratio"].as_f64().unwrap() > 0.0,
                "{ours}"
            );
            if k == 1 {
                assert_eq!(ours["versus_also"][1]["key"], "async_sync_ops", "{ours}");
            }
            let submit = measurement(&objects, &format!("async_submit_s{k}"));
            assert_eq!(submit["ops"], 2 * 8, "{submit}");
            assert!(submit["p99_us"].as_f64().unwrap() > 0.0, "{submit}");
        }
        let together = measurement(&objects, "async_overlap_together");
        assert_eq!(together["unit"], "ms");
        let overlap = together["versus_ratio"].as_f64().unwrap();
        assert!(overlap > 0.0, "{together}");
        assert_eq!(summary["async"]["overlap"].as_f64().unwrap(), overlap);
        assert!(summary["async"]["workload_fills"].as_u64().unwrap() >= 1);
    }

    #[test]
    fn async_reads_that_return_wrong_bytes_are_reported_as_not_verified() {
        // Armed at the hot read: every read through hipfile-rs after it gets wrong bytes.
        let io = Arc::new(CorruptingIo::new(2));
        let (verified, objects, summary) = bench_through(io.clone(), vec![Phase::Async]);
        assert!(!verified);
        assert_eq!(summary["verified"], false, "{summary}");
        for key in [
            "async_s1",
            "async_s4",
            "async_submit_s1",
            "async_submit_s4",
            "async_sync_ops",
            "async_overlap_reads",
        ] {
            let m = measurement(&objects, key);
            assert_eq!(m["verified"], false, "{m}");
            let ledger_key = key.replace("submit_", "");
            assert_eq!(
                summary["verification"][ledger_key.as_str()]["failures"],
                m["checks"],
                "{summary}"
            );
            let why = m["check_failure"].as_str().unwrap();
            assert!(why.starts_with("byte "), "{why}");
        }
        // Reads and workload checked together: the reads' checks fail, the workload's pass.
        let together = measurement(&objects, "async_overlap_together");
        assert_eq!(together["verified"], false, "{together}");
        // The replay and the workload do not read through hipfile-rs: their bytes are right.
        for key in ["replay_s1", "replay_s4", "async_overlap_workload"] {
            assert_eq!(measurement(&objects, key)["verified"], true, "{key}");
        }
    }

    #[test]
    fn each_batch_depth_is_read_against_as_many_threads_as_it_may() {
        let pairs: Vec<usize> = BATCH_DEPTHS.iter().map(|d| sync_threads_for(*d)).collect();
        assert_eq!(pairs, [1, 8, 16, 16]);
        assert_eq!(human_bytes(128 << 20), "128 MiB");
        assert_eq!(human_bytes(64 << 10), "64 KiB");
        assert_eq!(human_bytes(5000), "5000 bytes");
    }
}
