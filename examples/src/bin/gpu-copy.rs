//! `gpu-copy SRC DST [--sim]`: copy a file through GPU memory with hipfile-rs and verify it.
//!
//! Runs on the machine's GPU; with `--sim` (or when no GPU is found) on the simulated GPU.

#![forbid(unsafe_code)]

use std::process::ExitCode;
use std::sync::Arc;

use hipfile_hip::{sim::SimRuntime, GpuRuntime};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sim = args.iter().any(|a| a == "--sim");
    let paths: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let [src, dst] = paths[..] else {
        eprintln!("usage: gpu-copy SRC DST [--sim]");
        return ExitCode::from(2);
    };
    let gpu: Arc<dyn GpuRuntime> = match (
        sim,
        hipfile_hip::open_default(&hipfile_hip::PlatformOptions::from_env()),
    ) {
        (false, Ok(rt)) => rt,
        (false, Err(e)) => {
            eprintln!("no GPU found ({e}); using the simulated GPU");
            Arc::new(SimRuntime::default())
        }
        (true, _) => Arc::new(SimRuntime::default()),
    };
    match hipfile_examples::copy_through_gpu(gpu, src.as_ref(), dst.as_ref(), 16 << 20) {
        Ok(n) => {
            println!("copied {n} bytes through GPU memory");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gpu-copy: {e}");
            ExitCode::FAILURE
        }
    }
}
