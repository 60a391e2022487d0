//! # Examples of hipfile-rs
//!
//! - `gpu-copy` (`src/bin/gpu-copy.rs`): copy a file through GPU memory with the Rust API, the way
//!   a data loader stages a file on the GPU and a checkpointer writes it back, verifying the copy.
//! - `c/copy_through_gpu.c`: the same from C, written against `hipfile.h` and HIP exactly as a
//!   program for upstream hipFile (built and run by `cargo xtask c-tests`).
//! - `backend-bounce/`: a backend of a third party, as its own crate (`hipfile-backend-bounce`),
//!   with the conformance suite and a facade build that links it.
//!
//! The library part holds what the Rust example does, so tests can run it on the simulated GPU.

#![forbid(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::path::Path;
use std::sync::Arc;

use hipfile::{AsDevice, Driver, DriverOptions};
use hipfile_hip::GpuRuntime;

/// Copy `src` to `dst` through device memory of `gpu`, `chunk` bytes at a time: each chunk is
/// read from `src` into the GPU buffer and written from it to `dst`. Returns the bytes copied.
pub fn copy_through_gpu(
    gpu: Arc<dyn GpuRuntime>,
    src: &Path,
    dst: &Path,
    chunk: usize,
) -> Result<u64, String> {
    let driver =
        Driver::with_options(DriverOptions::with_runtime(gpu)).map_err(|e| e.to_string())?;
    let input = File::open(src).map_err(|e| format!("{}: {e}", src.display()))?;
    let output = OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(dst)
        .map_err(|e| format!("{}: {e}", dst.display()))?;
    let reader = driver.register_file(&input).map_err(|e| e.to_string())?;
    let writer = driver.register_file(&output).map_err(|e| e.to_string())?;
    // One registered buffer carries every chunk: registered once, it takes the registered path.
    let buffer = driver.alloc(chunk).map_err(|e| e.to_string())?;
    let mut staging = driver.register_buffer(buffer).map_err(|e| e.to_string())?;
    let mut offset = 0u64;
    loop {
        let n = reader
            .read(&mut staging, offset)
            .map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        // The last chunk may be short: write only the bytes read.
        let filled = staging.slice(..n).map_err(|e| e.to_string())?;
        let written = writer.write(filled, offset).map_err(|e| e.to_string())?;
        if written != n {
            return Err(format!("wrote {written} of {n} bytes at offset {offset}"));
        }
        offset += n as u64;
    }
    Ok(offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipfile_hip::sim::SimRuntime;

    #[test]
    fn a_file_copied_through_the_gpu_is_identical() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..3_000_001u32).map(|i| (i % 253) as u8).collect();
        std::fs::write(dir.path().join("a"), &data).unwrap();
        let n = copy_through_gpu(
            Arc::new(SimRuntime::default()),
            &dir.path().join("a"),
            &dir.path().join("b"),
            1 << 20,
        )
        .unwrap();
        assert_eq!(n, data.len() as u64);
        assert_eq!(std::fs::read(dir.path().join("b")).unwrap(), data);
    }
}
