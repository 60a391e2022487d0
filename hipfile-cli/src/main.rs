//! # `hipfile`: the command-line tool of hipfile-rs
//!
//! `hipfile check` tells whether this machine can do direct (P2P) IO between storage and GPU
//! memory and why not: platform, runtime, devices, P2P driver, and per mounted filesystem the
//! fastpath's verdict and the mode a read there gets (P2P, staged with O_DIRECT, staged through
//! the page cache; table, or `--json`); it exits 0 only when the fastpath is possible. Without a
//! GPU runtime it says so in one line per platform (`--verbose`: every library name tried).
//!
//! `hipfile cp SRC DST` copies a file through GPU memory, a chunk at a time through one device
//! buffer (what upstream hipFile's `aiscp` example does), with a progress bar on a terminal,
//! `--verify` to read the copy back and compare it, and `--json` for a summary naming the
//! backends that moved the bytes. The copy is written under a hidden name next to DST, flushed,
//! and renamed to DST only when complete (and checked); an existing DST is replaced only with
//! `--force`.
//!
//! With the cargo feature `remote` (on by default), SRC or DST may be a remote object:
//! `s3://bucket/key` or `http(s)://...` as SRC (read by ranged requests in parallel into the
//! device buffer), `s3://bucket/key` as DST (a multipart upload from it, completed only when
//! every byte was sent); `--request-size` and `--connections` set the requests
//! ([`remote::copy`]). `hipfile bench --remote URL` measures reads of a remote object into GPU
//! and host memory instead of a file.
//!
//! `hipfile bench` measures hipfile-rs on one file (created, or taken as it is and opened
//! read-only: its bytes are never changed): hot and cold whole-file reads into GPU memory,
//! writes with and without `fsync` (to a scratch file next to it, removed at the end), the
//! latency of small random reads (median and p99), and batch IO (random reads at queue depth 1
//! to 128 against synchronous reads from 1 to 16 threads, a batch of large reads against the hot
//! read, cold random reads against the O_DIRECT ceiling), and stream-ordered reads
//! (`hipFileReadAsync` on 1 and 4 streams, against the hot read and upstream's host-function
//! design, their submission cost, and their overlap with a GPU workload on another stream), each
//! the median of several repetitions with the cores the process kept busy. In the same run it measures the machine's ceilings
//! (pinned host-to-device copy, parallel page-cache and O_DIRECT reads to host memory), and on
//! request upstream hipFile's single-thread design (`--baseline`) and KvikIO (`--kvikio
//! kvikio_anchor.py`), alternating with our repetitions and printing ratios ours/anchor. Every
//! timed read and write is compared byte for byte with the file (reads) or the buffer (writes);
//! the report says per measurement what was checked, and a failed check makes the command exit
//! with status 1. Output: a table, or `--json` (one object per measurement per line, then a
//! summary). It runs on the real GPU when the machine has one, and otherwise on the simulated
//! GPU, saying so.
//!
//! ```text
//! hipfile check                                                   # fastpath possible here?
//! hipfile cp --verify data.bin /mnt/nvme/data.bin                 # copy through GPU memory
//! cargo run --release -p hipfile-cli -- bench                     # sim or GPU, table
//! hipfile bench --size 8G --baseline --kvikio kvikio_anchor.py    # side by side with KvikIO
//! hipfile bench --only hot,latency --backend fallback --json
//! hipfile bench --only batch --json                               # batch IO, against sync reads
//! hipfile bench --only async --json                               # stream-ordered reads
//! hipfile cp --verify s3://bucket/weights.bin /mnt/nvme/            # object -> GPU -> file
//! hipfile bench --remote http://host/data.bin --connections 32      # a remote object
//! ```

#![forbid(unsafe_code)]

mod anchor;
mod bench;
mod ceiling;
mod check;
mod cp;
mod location;
mod measure;
mod platform;
#[cfg(feature = "remote")]
mod remote;
#[cfg(feature = "remote")]
mod remote_args;
mod report;
mod signals;
mod size;
mod stats;
mod verify;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// GPU-direct storage IO with hipfile-rs.
#[derive(Debug, Parser)]
#[command(name = "hipfile", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Measure reads, writes and small-read latency through GPU memory, next to the ceilings.
    ///
    /// The file read is never written: writes are measured on a scratch file next to it. Every
    /// timed read and write is compared byte for byte with the file or the buffer; the report
    /// says what each check covered, and the exit status is 1 when a check failed.
    Bench(Box<bench::BenchArgs>),
    /// Tell whether this machine can do direct (P2P) IO, and why not; exit 0 only if it can.
    Check(check::CheckArgs),
    /// Copy a file (or an s3:// or http(s):// object) through GPU memory, in chunks of one
    /// device buffer.
    ///
    /// The copy is written next to DST under a hidden name, flushed, checked with --verify, and
    /// renamed to DST only then: a failure leaves no DST (or the old one, with --force). An
    /// existing DST is replaced only with --force; DST may be a directory to copy into.
    Cp(cp::CpArgs),
    /// Live statistics of a running process (`-p PID`), or of a program run under it
    /// (`-- PROGRAM ARGS`): throughput per path, operations, errors, declines by reason.
    Stats(stats::StatsArgs),
}

/// `hipfile cp`: a local copy ([`cp`]), or one with a remote object on a side
/// ([`remote::copy`]).
fn copy(args: &cp::CpArgs) -> Result<bool, String> {
    use location::{locate, Location};
    let (src, dst) = (locate(&args.src), locate(&args.dst));
    let object = [src, dst].into_iter().find_map(|l| match l {
        Location::Object(url) => Some(url),
        Location::Local(_) => None,
    });
    match object {
        None => cp::run(args),
        #[cfg(feature = "remote")]
        Some(_) => {
            signals::install()?;
            let chunk = cp::chunk_bytes(args.chunk)?;
            remote::copy::run(args, src, dst, chunk)
        }
        #[cfg(not(feature = "remote"))]
        Some(url) => Err(format!(
            "{url} is a remote object: this hipfile was built without the cargo feature \
             `remote` (write ./{url} for a local path of that name)"
        )),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench::run(&args),
        Command::Check(args) => check::run(&args),
        Command::Cp(args) => copy(&args),
        Command::Stats(args) => stats::run(&args),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("hipfile: {e}");
            ExitCode::FAILURE
        }
    }
}
