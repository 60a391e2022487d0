//! Micro-benchmarks of small reads through the staged engine on the simulated GPU: 4 KiB and
//! 64 KiB reads from a hot file through a driver that has only the fallback registered. No GPU
//! needed, so a regression in the per-request cost shows on any machine.

// `criterion_group!` generates public functions without docs.
#![allow(missing_docs)]

use std::hint::black_box;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use hipfile_core::{Driver, DriverOptions, IoCall, IoOp, RegistryBuilder};
use hipfile_hip::{sim::SimRuntime, DeviceBuffer, GpuRuntime};

const FILE_BYTES: usize = 16 << 20;

fn small_reads(c: &mut Criterion) {
    let gpu: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
    let mut backends = RegistryBuilder::new();
    hipfile_fallback::register(&mut backends).expect("fresh builder");
    let driver = Driver::new(DriverOptions {
        backends: Some(backends),
        selection: None,
        ..DriverOptions::with_runtime(gpu.clone())
    });
    driver.open().expect("the sim opens");

    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("data");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .expect("temp file");
    let data: Vec<u8> = (0..FILE_BYTES).map(|i| (i * 7 + (i >> 12)) as u8).collect();
    file.write_all(&data).expect("written");
    // Read it once so every benchmarked read is hot.
    let mut sink = Vec::new();
    std::fs::File::open(&path)
        .and_then(|mut f| f.read_to_end(&mut sink))
        .expect("read back");
    let handle = driver.handle_register(file.as_raw_fd()).expect("registers");
    let buffer = DeviceBuffer::new(gpu.clone(), 1 << 20).expect("device memory");
    driver
        .buf_register(buffer.ptr(), buffer.len(), 0)
        .expect("registers");

    let mut group = c.benchmark_group("fallback_read_hot");
    for size in [4usize << 10, 64 << 10] {
        group.throughput(Throughput::Bytes(size as u64));
        group.bench_with_input(BenchmarkId::from_parameter(size), &size, |b, &size| {
            let slots = (FILE_BYTES / size) as i64;
            let mut i = 0i64;
            b.iter(|| {
                // A stride that visits every slot before repeating, not one hot offset.
                i = (i + 7919) % slots;
                let n = driver
                    .io(black_box(IoCall {
                        op: IoOp::Read,
                        handle,
                        buffer: buffer.ptr(),
                        size,
                        file_offset: i * size as i64,
                        buffer_offset: 0,
                        loan: None,
                    }))
                    .expect("reads");
                assert_eq!(n, size);
            })
        });
    }
    group.finish();
    driver.buf_deregister(buffer.ptr()).expect("idle");
    driver.handle_deregister(handle).expect("idle");
    driver.close().expect("open");
}

criterion_group!(benches, small_reads);
criterion_main!(benches);
