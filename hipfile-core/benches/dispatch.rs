//! Micro-benchmarks of the policy layer, runnable without a GPU: ranking the registry, building
//! it, and the cost of one dispatch through [`Driver::io`] on the simulated GPU with a backend
//! that moves no bytes, for a registered buffer and for an unregistered pointer (which needs the
//! runtime's pointer query).

// `criterion_group!` generates public functions without docs.
#![allow(missing_docs)]

use std::hint::black_box;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion};
use hipfile_core::{
    Backend, BackendContext, BackendDescriptor, Completion, Decline, Driver, DriverOptions, IoCall,
    IoOp, IoPath, IoRequest, LiveSettings, PosixIo, RegistryBuilder, Settings, Submit,
};
use hipfile_hip::{sim::SimRuntime, DeviceBuffer, GpuRuntime};

/// Accepts everything and reports the full size as moved without touching a byte: what is left
/// to measure is the dispatcher itself.
#[derive(Debug)]
struct ZeroCost(&'static str);

impl Backend for ZeroCost {
    fn name(&self) -> &'static str {
        self.0
    }
    fn accepts(&self, _: &IoRequest<'_>) -> Result<(), Decline> {
        Ok(())
    }
    fn submit(&self, req: &IoRequest<'_>, _: Submit) -> Completion {
        Completion::ready(Ok(req.size()))
    }
}

/// A backend that declines everything, so the dispatcher walks past it.
#[derive(Debug)]
struct Declines;

impl Backend for Declines {
    fn name(&self) -> &'static str {
        "declines"
    }
    fn accepts(&self, _: &IoRequest<'_>) -> Result<(), Decline> {
        Err(Decline::NoP2pDriver)
    }
    fn submit(&self, _: &IoRequest<'_>, _: Submit) -> Completion {
        Completion::ready(Ok(0))
    }
}

const NAMES: [&str; 8] = ["a", "b", "c", "d", "e", "f", "g", "h"];

fn builder_of(n: usize) -> RegistryBuilder {
    let mut b = RegistryBuilder::new();
    for (i, name) in NAMES.iter().take(n).enumerate() {
        b.add(BackendDescriptor {
            name,
            priority: (i as i32 * 37) % 5,
            path: IoPath::Staged,
            init: |_| Ok(Arc::new(ZeroCost("zero"))),
        })
        .expect("names are distinct");
    }
    b
}

fn registry(c: &mut Criterion) {
    let builder = builder_of(NAMES.len());
    c.bench_function("registry/ranked_8", |b| {
        b.iter(|| black_box(&builder).ranked())
    });
    let ctx = BackendContext {
        runtime: Arc::new(SimRuntime::default()),
        io: Arc::new(PosixIo),
        settings: Arc::new(LiveSettings::new(Settings::default())),
        env: Default::default(),
    };
    c.bench_function("registry/build_8", |b| {
        b.iter(|| builder.build(black_box(&ctx), None).expect("builds"))
    });
    c.bench_function("registry/build_selected_3", |b| {
        b.iter(|| {
            builder
                .build(&ctx, Some(black_box("c,a,h")))
                .expect("builds")
        })
    });
}

fn dispatch(c: &mut Criterion) {
    let gpu: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
    let mut backends = RegistryBuilder::new();
    backends
        .add(BackendDescriptor {
            name: "declines",
            priority: 2,
            path: IoPath::Staged,
            init: |_| Ok(Arc::new(Declines)),
        })
        .expect("fresh builder");
    backends
        .add(BackendDescriptor {
            name: "zero",
            priority: 1,
            path: IoPath::Staged,
            init: |_| Ok(Arc::new(ZeroCost("zero"))),
        })
        .expect("fresh builder");
    let driver = Driver::new(DriverOptions {
        backends: Some(backends),
        selection: None,
        ..DriverOptions::with_runtime(gpu.clone())
    });
    driver.open().expect("the sim opens");
    let dir = tempfile::tempdir().expect("temp dir");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.path().join("data"))
        .expect("temp file");
    file.set_len(1 << 20).expect("sized");
    let handle = driver
        .handle_register(std::os::fd::AsRawFd::as_raw_fd(&file))
        .expect("registers");
    let registered = DeviceBuffer::new(gpu.clone(), 1 << 20).expect("device memory");
    driver
        .buf_register(registered.ptr(), registered.len(), 0)
        .expect("registers");
    let plain = DeviceBuffer::new(gpu.clone(), 1 << 20).expect("device memory");

    let call = |buffer: usize| IoCall {
        op: IoOp::Read,
        handle,
        buffer,
        size: 4096,
        file_offset: 8192,
        buffer_offset: 4096,
        loan: None,
    };
    c.bench_function("dispatch/registered_buffer", |b| {
        b.iter(|| driver.io(black_box(call(registered.ptr()))).expect("runs"))
    });
    c.bench_function("dispatch/unregistered_pointer", |b| {
        b.iter(|| driver.io(black_box(call(plain.ptr()))).expect("runs"))
    });
    driver.buf_deregister(registered.ptr()).expect("idle");
    driver.handle_deregister(handle).expect("idle");
    driver.close().expect("open");
}

criterion_group!(benches, registry, dispatch);
criterion_main!(benches);
