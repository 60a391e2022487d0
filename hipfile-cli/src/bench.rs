//! `hipfile bench`: a round trip through GPU memory with throughput figures.

use std::fs::OpenOptions;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use hipfile::{Driver, DriverOptions};
use hipfile_hip::{sim::SimRuntime, DeviceBuffer, GpuRuntime, Platform};

/// Arguments of `hipfile bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// File to write and read (created or overwritten); default: a temporary file.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Bytes to move, with an optional K/M/G suffix (powers of 1024).
    #[arg(long, default_value = "256M", value_parser = parse_size)]
    size: usize,
    /// Repetitions of each direction; the median is reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// Platform: amd, nvidia or sim (default: the GPU the machine has, else the sim).
    #[arg(long)]
    platform: Option<String>,
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
                let p = rt.info().platform;
                Ok((rt, format!("platform {p} (detected)")))
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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Run the benchmark.
pub fn run(args: &BenchArgs) -> Result<(), String> {
    let (gpu, how) = pick_runtime(args.platform.as_deref())?;
    println!("hipfile bench: {how}");
    let driver = Driver::with_options(DriverOptions {
        selection: None,
        ..DriverOptions::with_runtime(gpu.clone())
    })
    .map_err(|e| e.to_string())?;
    println!("backends: {}", driver.backends().join(", "));

    let tmp;
    let path = match &args.file {
        Some(p) => p.clone(),
        None => {
            tmp = tempfile::Builder::new()
                .prefix("hipfile-bench")
                .tempdir_in(".")
                .map_err(|e| e.to_string())?;
            tmp.path().join("bench.dat")
        }
    };
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let handle = driver.register_file(&file).map_err(|e| e.to_string())?;

    let size = args.size;
    let mut src = DeviceBuffer::new(gpu.clone(), size).map_err(|e| e.to_string())?;
    let pattern: Vec<u8> = (0..size)
        .map(|i| (i.wrapping_mul(31) ^ (i >> 12)) as u8)
        .collect();
    src.write_at(0, &pattern).map_err(|e| e.to_string())?;
    let dst = DeviceBuffer::new(gpu.clone(), size).map_err(|e| e.to_string())?;
    let _src_reg = driver
        .register_buffer(src.ptr(), size)
        .map_err(|e| e.to_string())?;
    let _dst_reg = driver
        .register_buffer(dst.ptr(), size)
        .map_err(|e| e.to_string())?;

    let repeat = args.repeat.max(1);
    let (mut writes, mut reads) = (Vec::new(), Vec::new());
    for _ in 0..repeat {
        let t = Instant::now();
        let n = handle
            .write(src.ptr(), size, 0, 0)
            .map_err(|e| e.to_string())?;
        writes.push(n as f64 / t.elapsed().as_secs_f64() / 1e9);
        if n != size {
            return Err(format!("wrote {n} of {size} bytes"));
        }
        let t = Instant::now();
        let n = handle
            .read(dst.ptr(), size, 0, 0)
            .map_err(|e| e.to_string())?;
        reads.push(n as f64 / t.elapsed().as_secs_f64() / 1e9);
        if n != size {
            return Err(format!("read {n} of {size} bytes"));
        }
    }
    let back = dst.to_vec().map_err(|e| e.to_string())?;
    if back != pattern {
        let at = back
            .iter()
            .zip(&pattern)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        return Err(format!(
            "verification failed: first differing byte at offset {at}"
        ));
    }
    println!(
        "size: {} MiB, repetitions: {repeat} (median), file: {}",
        size >> 20,
        path.display()
    );
    println!("write (page cache, no fsync): {:8.2} GB/s", median(writes));
    println!("read  (hot, page cache):      {:8.2} GB/s", median(reads));
    println!("verified: all {size} bytes identical");
    Ok(())
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

    #[test]
    fn the_benchmark_runs_and_verifies_on_the_sim() {
        let dir = tempfile::tempdir().unwrap();
        let args = BenchArgs {
            file: Some(dir.path().join("b.dat")),
            size: 3 << 20,
            repeat: 1,
            platform: Some("sim".into()),
        };
        run(&args).unwrap();
        assert_eq!(
            std::fs::metadata(dir.path().join("b.dat")).unwrap().len(),
            3 << 20
        );
    }
}
