//! # `hipfile`: the command-line tool of hipfile-rs
//!
//! `hipfile bench` moves a file through GPU memory with hipfile-rs and reports throughput: it
//! writes a pattern from device memory to a file, reads it back into another device buffer,
//! verifies every byte and prints GB/s for both directions. It runs on the real GPU when the
//! machine has one, and otherwise on the simulated GPU, saying so.

#![forbid(unsafe_code)]

mod bench;

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
    /// Write and read a file through GPU memory and report throughput.
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
