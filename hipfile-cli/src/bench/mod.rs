//! `hipfile bench`: throughput and latency of hipfile-rs on one file, next to the ceilings of
//! the machine and, optionally, the KvikIO anchor and upstream's single-thread design.
//!
//! One run, one file. Per repetition, in this order: cold read (after dropping the page cache,
//! root only), hot read, the single-thread baseline, writes without and with `fsync`, small random
//! reads, batch IO, the ceilings, then the anchor. Every figure is the median over repetitions;
//! latency is the median and p99 over every read of every repetition.
//!
//! Batch IO ([`batch`]) is read against figures of the same run: random 4 KiB and 64 KiB
//! reads through one batch at queue depth 1, 8, 32 and 128 (IOPS, and the median and p99 of each
//! entry's submission-to-reap time) against synchronous reads of the same size from 1, 8 and 16
//! threads, each depth next to the most threads that do not exceed it; 64 large reads in one
//! batch (128 MiB each at most, over the start of the file) against the hot whole-file read;
//! and, as root, cold random 4 KiB reads at queue depth 32 against 32 threads of O_DIRECT reads
//! of the same size (the storage's ceiling for them), the page cache dropped before each.
//!
//! Stream-ordered IO ([`stream`]) is read against figures of the same run too: the
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
//! phases write a scratch file next to it ([`scratch`]), removed at the end. SIGINT,
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
//!
//! Modules, in the order a run uses them: [`options`] (the flags and the phases), [`file`] (the
//! file read: made or taken, registered, moved whole), [`scratch`] (the file written), [`rig`]
//! (what every phase measures with), then a module per phase: [`cold`], [`hot`] (and the
//! baseline), [`write`], [`latency`], [`batch`], [`stream`] (the async phase), [`ceilings`],
//! [`kvikio`] (the anchor); [`rows`] gathers the measurements and [`summary`] finishes them and
//! writes the report ([`crate::report`] lays it out).

mod batch;
mod ceilings;
mod cold;
mod file;
mod hot;
mod kvikio;
mod latency;
mod options;
#[cfg(feature = "remote")]
mod remote;
mod rig;
mod rows;
mod scratch;
mod stream;
mod summary;
mod write;

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::Arc;

use clap::ValueEnum;
use hipfile::{Driver, DriverOptions};
use hipfile_core::{FileIo, PosixIo};
use hipfile_hip::{DeviceBuffer, GpuRuntime, Platform};
use indicatif::ProgressBar;

use crate::ceiling;
use crate::measure::SplitMix64;
use crate::platform::pick_runtime;
use crate::signals::Removal;
use crate::verify::{Comparer, Ledger};
use batch::BatchPhase;
use ceilings::Ceilings;
use file::{prepare_file, Registration};
use hot::HotReads;
use kvikio::Anchor;
pub use options::{BenchArgs, Phase};
use rig::{progress_bar, ColdStarts, Rig};
use rows::Rows;
use stream::AsyncPhase;
use summary::Ran;
use write::WriteTarget;

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
    #[cfg(feature = "remote")]
    match &args.remote {
        Some(url) => {
            remote::refuse_file_options(args)?;
            let pick = pick_runtime(args.platform.as_deref(), args.verbose)?;
            return remote::run(args, url, (pick.gpu, &pick.how, &pick.passed_over), out);
        }
        None if args.remote_options.given() => {
            return Err("--request-size and --connections apply to --remote".into());
        }
        None => {}
    }
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
    let sim = platform == Platform::Sim;
    let mut options = DriverOptions::with_runtime(gpu.clone());
    options.io = io;
    if let Some(list) = &args.backend {
        options.selection = Some(list.clone());
    }
    let driver = Driver::with_options(options).map_err(|e| e.to_string())?;
    let backends = driver.backends();
    let mut notes = Vec::new();
    if sim {
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
    let default_size = if sim { 256 << 20 } else { 8 << 30 };
    let (file, size, created) = prepare_file(&path, args.size, default_size)?;
    let registered = Registration::new(&driver, &file)?;
    let dst = driver
        .register_buffer(DeviceBuffer::new(gpu.clone(), size).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let comparer = Comparer::new(gpu.clone(), size)?;
    let mut rig = Rig {
        driver: &driver,
        gpu: gpu.clone(),
        path,
        size,
        comparer,
        dst,
        registered,
        file,
        ledger: Ledger::default(),
        rows: Rows::default(),
        notes,
        cold_starts: ColdStarts::default(),
        rng: SplitMix64::new(0x0068_6970_6669_6c65),
        engine: format!("hipfile-rs ({})", backends.join(",")),
        drop_caches,
        cold_ok: false,
        holds_file: false,
        progress: ProgressBar::hidden(),
        rep: 0,
    };

    let write_target = if phases.contains(&Phase::Write) {
        WriteTarget::create(&driver, &rig.path, size, &mut rig.notes)?
    } else {
        None
    };

    if phases.contains(&Phase::Cold) || phases.contains(&Phase::Batch) {
        match drop_caches() {
            Ok(()) => rig.cold_ok = true,
            Err(why) => {
                for (phase, what) in [
                    (Phase::Cold, "cold read"),
                    (Phase::Batch, "batch cold reads and their O_DIRECT ceiling"),
                ] {
                    if phases.contains(&phase) {
                        rig.notes.push(format!(
                            "{what} skipped: could not drop the page cache ({why}); run as root for cold figures"
                        ));
                    }
                }
            }
        }
    }

    // The first read through hipfile-rs is compared with the file before anything is timed.
    ceiling::warm(&rig.path, size as u64)?;
    rig.holds_file = rig.checked_whole_read("first_read")?.1;

    let mut anchor = Anchor::prepare(args, &rig);
    let threads = ceiling::available_threads();
    let mut ceilings = if phases.contains(&Phase::Ceilings) {
        Some(Ceilings::prepare(&rig, threads)?)
    } else {
        None
    };
    let mut batch = BatchPhase::plan(args.batch_ops, sim, size);
    if phases.contains(&Phase::Batch) {
        batch.prepare(&mut rig, sim)?;
    }
    let mut stream = AsyncPhase::plan(size, args.async_op_size);
    if phases.contains(&Phase::Async) {
        stream.prepare(&mut rig)?;
    }
    let mut hot = HotReads::default();

    let steps_per_rep = phases.len()
        + 3 * usize::from(phases.contains(&Phase::Async))
        + 2 * usize::from(phases.contains(&Phase::Batch))
        + usize::from(phases.contains(&Phase::Write))
        + 2 * usize::from(phases.contains(&Phase::Ceilings))
        + usize::from(args.baseline)
        + usize::from(args.kvikio.is_some());
    rig.progress = progress_bar((steps_per_rep * args.repeat.max(1)) as u64, args.json);

    for rep in 0..args.repeat.max(1) {
        rig.rep = rep;
        if phases.contains(&Phase::Cold) {
            cold::run(&mut rig)?;
        }
        if phases.contains(&Phase::Hot) {
            hot.run(&mut rig)?;
        }
        if args.baseline {
            hot::baseline(&mut rig)?;
        }
        if let Some(target) = &write_target {
            target.run(&mut rig)?;
        } else if phases.contains(&Phase::Write) {
            rig.progress.inc(2);
        }
        if phases.contains(&Phase::Latency) {
            latency::run(&mut rig, args.latency_ops)?;
        }
        if phases.contains(&Phase::Batch) {
            batch.run(&mut rig)?;
        }
        stream.run(&mut rig)?;
        if let Some(ceilings) = &mut ceilings {
            ceilings.run(&mut rig)?;
        }
        let latency_ops = phases.contains(&Phase::Latency).then_some(args.latency_ops);
        anchor.run(
            &mut rig,
            write_target.as_ref(),
            phases.contains(&Phase::Cold),
            latency_ops,
        )?;
    }
    rig.progress.finish_and_clear();

    let ran = Ran {
        args,
        phases: &phases,
        platform,
        how: &how,
        passed_over: &passed_over,
        backends: &backends,
        created,
        threads,
        hot: &hot,
        write_target: write_target.as_ref(),
        batch: &batch,
        stream: &stream,
        ceilings: ceilings.as_ref(),
        anchor: &anchor,
    };
    summary::write(&ran, &mut rig, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io;
    use std::os::fd::BorrowedFd;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use hipfile_core::PageCount;
    use serde_json::{json, Value};

    use super::batch::{sync_threads_for, BATCH_DEPTHS};
    use super::file::pattern_byte;
    use super::rows::human_bytes;

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
