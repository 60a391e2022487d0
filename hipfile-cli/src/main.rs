//! # `hipfile`: the command-line tool of hipfile-rs
//!
//! `hipfile bench` measures hipfile-rs on one file (created, or taken as it is): hot and cold
//! whole-file reads into GPU memory, writes with and without `fsync`, and the latency of small
//! random reads (median and p99), each the median of several repetitions with the cores the
//! process kept busy. In the same run it measures the machine's ceilings (pinned host-to-device
//! copy, parallel page-cache and O_DIRECT reads to host memory), and on request upstream
//! hipFile's single-thread design (`--baseline`) and KvikIO (`--kvikio kvikio_anchor.py`),
//! alternating with our repetitions and printing ratios ours/anchor. The first read is compared
//! byte for byte with the file before anything is timed. Output: a table, or `--json` (one object
//! per measurement per line, then a summary). It runs on the real GPU when the machine has one,
//! and otherwise on the simulated GPU, saying so.
//!
//! ```text
//! cargo run --release -p hipfile-cli -- bench                     # sim or GPU, table
//! hipfile bench --size 8G --baseline --kvikio kvikio_anchor.py    # side by side with KvikIO
//! hipfile bench --only hot,latency --backend fallback --json
//! ```

#![forbid(unsafe_code)]

mod anchor;
mod bench;
mod ceiling;
mod measure;
mod report;

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
    Bench(bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(args) => bench::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hipfile: {e}");
            ExitCode::FAILURE
        }
    }
}
