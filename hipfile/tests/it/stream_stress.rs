//! Stream-ordered IO under load: sixteen streams with sixty-four ops each (reads and writes of
//! random sizes, unaligned ones included, to ranges of one file that no two ops share) while
//! other threads register and deregister the streams, every op and the final file
//! byte-checked; and the driver closed to zero (every facade value dropped) while ops wait on
//! held streams, after which every op still ends with its bytes and the driver's threads and
//! descriptors go away.
//!
//! Every wait is bounded: the first test runs [`within`] a limit, the second in a child process
//! killed after one, and the streams' holds give up after a while.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use hipfile::{AsDevice, DeviceBuffer, Driver, DriverOptions, ErrorKind};
use hipfile_core::stream::{FIXED_BUF_OFFSET, FIXED_FILE_OFFSET, FIXED_FILE_SIZE};
use hipfile_core::IoOp;
use hipfile_hip::sim::SimRuntime;
use hipfile_hip::{GpuRuntime, OwnedStream, StreamRef};
use hipfile_testkit::conformance::pattern;

use crate::harness::{
    as_child, child_command, open_fds, run_child, scratch_dir, test_name, thread_ids, Rng,
};
use crate::stream::{
    assert_back_to, data_file, ended, filled, outcome, plain_rig, sentinel_buffer, submit_core,
    within, CoreSlots, StreamHold, KIB, SENTINEL, TEST_LIMIT,
};

/// One op of the stress: its direction and its range of the file.
#[derive(Clone, Copy, Debug)]
struct Planned {
    op: IoOp,
    offset: usize,
    size: usize,
    seed: u64,
}

/// `ops` ops for each of `streams` streams, each in a slot of `slot` bytes of its own: random
/// direction, size and place in the slot, a third of them page-aligned.
fn plan(rng: &mut Rng, streams: usize, ops: usize, slot: usize) -> Vec<Vec<Planned>> {
    (0..streams)
        .map(|s| {
            (0..ops)
                .map(|o| {
                    let base = (s * ops + o) * slot;
                    let (inner, size) = if rng.chance(33) {
                        (0, 4096 * rng.size(1, slot / 4096 + 1))
                    } else {
                        let inner = rng.size(0, 700);
                        (inner, rng.size(1, slot - inner + 1))
                    };
                    Planned {
                        op: if rng.chance(50) {
                            IoOp::Read
                        } else {
                            IoOp::Write
                        },
                        offset: base + inner,
                        size,
                        seed: 1000 + (s * ops + o) as u64,
                    }
                })
                .collect()
        })
        .collect()
}

/// What the file holds once every planned write is done.
fn expected_file(initial: &[u8], plans: &[Vec<Planned>]) -> Vec<u8> {
    let mut expected = initial.to_vec();
    for p in plans.iter().flatten().filter(|p| p.op == IoOp::Write) {
        expected[p.offset..p.offset + p.size].copy_from_slice(&pattern(p.seed, 0, p.size));
    }
    expected
}

/// Device memory for each planned op: a write's bytes, or sentinels for a read to land in.
fn buffers(driver: &Driver, plans: &[Vec<Planned>]) -> Vec<Vec<DeviceBuffer>> {
    plans
        .iter()
        .map(|ops| {
            ops.iter()
                .map(|p| match p.op {
                    IoOp::Read => sentinel_buffer(driver, p.size),
                    IoOp::Write => filled(driver, &pattern(p.seed, 0, p.size)),
                })
                .collect()
        })
        .collect()
}

/// Each read's memory holds its range of the initial file.
fn check_reads(initial: &[u8], plans: &[Vec<Planned>], memory: &[Vec<DeviceBuffer>]) {
    for (s, (ops, bufs)) in plans.iter().zip(memory).enumerate() {
        for (o, (p, buf)) in ops.iter().zip(bufs).enumerate() {
            if p.op == IoOp::Read {
                assert!(
                    buf.to_vec().unwrap() == initial[p.offset..p.offset + p.size],
                    "stream {s} op {o} ({p:?}) read the wrong bytes"
                );
            }
        }
    }
}

#[test]
fn sixteen_streams_of_mixed_ops_stay_byte_exact_while_streams_are_registered_and_deregistered() {
    const STREAMS: usize = 16;
    const OPS: usize = 64;
    const SLOT: usize = 12 * KIB;
    within(TEST_LIMIT, "stream stress", || {
        let rig = plain_rig();
        let driver = &rig.driver;
        let dir = scratch_dir();
        let initial = pattern(40, 0, STREAMS * OPS * SLOT);
        let (path, file) = data_file(dir.path(), "data", &initial);
        let handle = driver.register_file(&file).unwrap();
        let plans = plan(&mut Rng::new(0x5eed_0016), STREAMS, OPS, SLOT);
        let mut memory = buffers(driver, &plans);
        let streams: Vec<OwnedStream> = (0..STREAMS)
            .map(|i| {
                let gpu = Arc::clone(&rig.gpu);
                // Streams ordered with the legacy default stream only where the staged
                // engine serves unaligned ops (the test backend's synchronous copies would
                // wait for the held stream).
                if i % 2 == 0 && cfg!(feature = "fallback") {
                    OwnedStream::new(gpu).unwrap()
                } else {
                    OwnedStream::new_independent(gpu).unwrap()
                }
            })
            .collect();
        let done = AtomicBool::new(false);
        let churned = AtomicU64::new(0);

        let results: Vec<Vec<Result<usize, ErrorKind>>> = thread::scope(|scope| {
            let churners: Vec<_> = (0..2u64)
                .map(|t| {
                    let (streams, done, churned, driver) = (&streams, &done, &churned, driver);
                    scope.spawn(move || {
                        let mut rng = Rng::new(0xc4u64 + t);
                        let flags = [0, FIXED_BUF_OFFSET, FIXED_FILE_OFFSET | FIXED_FILE_SIZE];
                        while !done.load(Ordering::Acquire) {
                            let s = StreamRef::of(&streams[rng.size(0, STREAMS)]);
                            let f = flags[rng.size(0, flags.len())];
                            for r in [driver.register_stream(&s, f), driver.deregister_stream(&s)] {
                                match r {
                                    Ok(()) => {
                                        churned.fetch_add(1, Ordering::Relaxed);
                                    }
                                    Err(e) => assert_eq!(
                                        e.kind(),
                                        ErrorKind::InvalidValue,
                                        "registering or deregistering a stream: {e}"
                                    ),
                                }
                            }
                            thread::yield_now();
                        }
                    })
                })
                .collect();
            let workers: Vec<_> = plans
                .iter()
                .zip(memory.iter_mut())
                .zip(&streams)
                .map(|((ops, bufs), stream)| {
                    let handle = &handle;
                    scope.spawn(move || {
                        let s = StreamRef::of(stream);
                        driver.on_stream(&s, |io| {
                            let queued: Vec<_> = ops
                                .iter()
                                .zip(bufs.iter_mut())
                                .map(|(p, buf)| match p.op {
                                    IoOp::Read => io.read(handle, buf, p.offset as u64),
                                    IoOp::Write => io.write(handle, &*buf, p.offset as u64),
                                })
                                .map(|q| q.expect("queueing an op"))
                                .collect();
                            queued.iter().map(|op| outcome(&ended(op))).collect()
                        })
                    })
                })
                .collect();
            let results = workers.into_iter().map(|w| w.join().unwrap()).collect();
            done.store(true, Ordering::Release);
            for c in churners {
                c.join().unwrap();
            }
            results
        });

        for (s, (ops, got)) in plans.iter().zip(&results).enumerate() {
            let want: Vec<_> = ops.iter().map(|p| Ok(p.size)).collect();
            assert_eq!(got, &want, "results of stream {s}");
        }
        check_reads(&initial, &plans, &memory);
        assert!(
            std::fs::read(&path).unwrap() == expected_file(&initial, &plans),
            "the file's bytes after every write"
        );
        assert!(
            churned.load(Ordering::Relaxed) > 0,
            "no stream was registered"
        );
    });
}

/// Eight held streams with four ops each queued through the core API, every facade value
/// dropped (the driver closes to zero), then the streams let go one by one: every op ends with
/// its bytes, and the driver's threads and descriptors go away.
fn close_under_queued_ops_child() {
    const STREAMS: usize = 8;
    const OPS: usize = 4;
    const SLOT: usize = 24 * KIB;
    let sim = Arc::new(SimRuntime::default());
    let gpu: Arc<dyn GpuRuntime> = sim.clone();
    let dir = scratch_dir();
    let initial = pattern(41, 0, STREAMS * OPS * SLOT);
    let (path, file) = data_file(dir.path(), "data", &initial);
    let plans = plan(&mut Rng::new(0x5eed_0008), STREAMS, OPS, SLOT);
    let streams: Vec<OwnedStream> = (0..STREAMS)
        .map(|_| OwnedStream::new_independent(Arc::clone(&gpu)).unwrap())
        .collect();
    // The sim's stream threads, started before the counts.
    for stream in &streams {
        let s = StreamRef::of(stream);
        s.launch_host_func(Box::new(|| {})).unwrap();
        s.synchronize().unwrap();
    }
    StreamRef::null(&gpu).synchronize().unwrap();
    let memory: Vec<Vec<DeviceBuffer>> = plans
        .iter()
        .map(|ops| {
            ops.iter()
                .map(|p| {
                    let mut buf = DeviceBuffer::new(Arc::clone(&gpu), p.size).unwrap();
                    match p.op {
                        IoOp::Read => buf.fill(SENTINEL).unwrap(),
                        IoOp::Write => buf.write_at(0, &pattern(p.seed, 0, p.size)).unwrap(),
                    }
                    buf
                })
                .collect()
        })
        .collect();
    let (fds, threads) = (open_fds(), thread_ids());

    let driver = Driver::with_options(DriverOptions {
        backends: Some(crate::batch_support::build_and_host_copy()),
        ..DriverOptions::with_runtime(Arc::clone(&gpu))
    })
    .unwrap();
    let core = Arc::clone(driver.core());
    let handle = driver.register_file(&file).unwrap();
    let holds: Vec<StreamHold> = streams
        .iter()
        .map(|stream| StreamHold::on(&StreamRef::of(stream)))
        .collect();
    let slots: Vec<Vec<Arc<CoreSlots>>> = plans
        .iter()
        .zip(&memory)
        .zip(&streams)
        .map(|((ops, bufs), stream)| {
            let s = StreamRef::of(stream);
            ops.iter()
                .zip(bufs)
                .map(|(p, buf)| {
                    submit_core(
                        &core,
                        p.op,
                        handle.id(),
                        buf.as_device().base(),
                        p.size,
                        p.offset as i64,
                        &s,
                    )
                    .expect("queueing an op")
                })
                .collect()
        })
        .collect();
    for hold in &holds {
        hold.wait_reached();
    }
    drop(handle);
    drop(driver);
    assert_eq!(core.use_count(), 0, "every reference was dropped");
    thread::sleep(Duration::from_millis(50));
    assert!(
        slots.iter().flatten().all(|s| s.result().is_none()),
        "an op ended while its stream was held"
    );
    let mut order: Vec<usize> = (0..STREAMS).collect();
    let mut rng = Rng::new(0x0de7);
    for i in (1..order.len()).rev() {
        order.swap(i, rng.size(0, i + 1));
    }
    for s in order {
        holds[s].release();
        for (o, (slot, p)) in slots[s].iter().zip(&plans[s]).enumerate() {
            assert_eq!(
                outcome(&slot.ended()),
                Ok(p.size),
                "stream {s} op {o} ({p:?})"
            );
        }
        thread::sleep(Duration::from_millis(rng.range(0, 20)));
    }
    for stream in &streams {
        StreamRef::of(stream).synchronize().unwrap();
    }
    assert!(holds.iter().all(|h| !h.gave_up()));
    check_reads(&initial, &plans, &memory);
    assert!(
        std::fs::read(&path).unwrap() == expected_file(&initial, &plans),
        "the file's bytes after every write"
    );
    drop(core);
    assert_back_to(fds, &threads);
}

#[test]
fn closing_the_driver_under_ops_queued_on_held_streams_ends_every_op_and_leaks_nothing() {
    let name = test_name(
        module_path!(),
        "closing_the_driver_under_ops_queued_on_held_streams_ends_every_op_and_leaks_nothing",
    );
    if as_child(&name, close_under_queued_ops_child) {
        return;
    }
    run_child(child_command(&name), TEST_LIMIT, &name).assert_passed(&name);
}
