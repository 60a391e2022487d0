//! Batches through the Rust API (`Driver::batch`, `BatchRequest`, `Batch`) on the simulated GPU:
//! round trips through registered and plain memory, short reads, an entry failing next to ones
//! that succeed, failover of one entry from the direct path to the staged one, cancel, the batch
//! IO timeout, what an entry in flight holds against deregistration, and the end of a batch (its
//! closure returning, or the driver closing to zero under it).
//!
//! Most tests run in every feature row: [`build_and_host_copy`] adds a test backend below the
//! built-in ones, which serves what they decline. Tests that must know exactly which entries
//! have started hold them at a [`Gate`] with one IO worker (see `batch_support`).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hipfile::{
    AsDevice, AsDeviceMut, BatchEvent, BatchRequest, BatchStatus, DeviceBuffer, Driver, ErrorKind,
};
use hipfile_core::PosixIo;
use hipfile_testkit::conformance::pattern;

use crate::batch_support::{
    build_and_host_copy, one_worker, sim_driver, watched_host_copy, Gate, Watched, WATCHED,
};
use crate::harness::scratch_dir;

const KIB: usize = 1024;
const SENTINEL: u8 = 0xEE;

/// `bytes` written to `dir/name`, opened read-write.
fn data_file(dir: &Path, name: &str, bytes: &[u8]) -> (PathBuf, File) {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("writing a file");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("opening a file");
    (path, file)
}

/// Device memory of `len` bytes, every byte [`SENTINEL`].
fn sentinel_buffer(driver: &Driver, len: usize) -> DeviceBuffer {
    let mut buf = driver.alloc(len).expect("device memory");
    buf.fill(SENTINEL).expect("filling device memory");
    buf
}

/// Device memory holding `bytes`.
fn filled(driver: &Driver, bytes: &[u8]) -> DeviceBuffer {
    let mut buf = driver.alloc(bytes.len()).expect("device memory");
    buf.write_at(0, bytes).expect("filling device memory");
    buf
}

/// Events by cookie; panics on a cookie seen twice.
fn by_cookie(events: impl IntoIterator<Item = BatchEvent>) -> BTreeMap<usize, BatchEvent> {
    let mut map = BTreeMap::new();
    for event in events {
        let cookie = event.cookie;
        assert!(
            map.insert(cookie, event).is_none(),
            "cookie {cookie} reported twice"
        );
    }
    map
}

/// Every completion of `batch`, by cookie.
fn collect_all(batch: &mut hipfile::Batch<'_>) -> BTreeMap<usize, BatchEvent> {
    by_cookie(
        batch
            .completions()
            .map(|e| e.expect("collecting completions")),
    )
}

#[track_caller]
fn assert_complete(event: &BatchEvent, bytes: usize) {
    assert_eq!(
        (event.status, event.result.as_ref().ok()),
        (BatchStatus::Complete, Some(&bytes)),
        "entry {}: {event:?}",
        event.cookie
    );
}

#[track_caller]
fn assert_failed_with(event: &BatchEvent, errno: i32) {
    assert_eq!(event.status, BatchStatus::Failed, "entry {}", event.cookie);
    let err = event.result.as_ref().expect_err("a failed entry's error");
    assert_eq!(
        (err.kind(), err.errno()),
        (ErrorKind::Os, Some(errno)),
        "entry {}: {err}",
        event.cookie
    );
}

#[track_caller]
fn assert_canceled(event: &BatchEvent) {
    assert_eq!(
        (event.status, event.result.as_ref().ok()),
        (BatchStatus::Canceled, Some(&0)),
        "entry {}: {event:?}",
        event.cookie
    );
}

#[test]
fn writes_then_reads_round_trip_byte_exact_through_registered_and_plain_memory() {
    let (_sim, driver) = sim_driver(build_and_host_copy(), Arc::new(PosixIo), |_| {});
    let dir = scratch_dir();
    let (path, file) = data_file(dir.path(), "data", &[]);
    let handle = driver.register_file(&file).unwrap();

    let a = pattern(1, 0, 128 * KIB);
    let b = pattern(2, 0, 64 * KIB);
    let c = pattern(3, 0, 1024 * KIB + 4096);
    let registered = driver.register_buffer(filled(&driver, &a)).unwrap();
    let plain = filled(&driver, &b);
    let big = filled(&driver, &c);
    // (cookie, source bytes, file offset): aligned ones, unaligned ones, one of several chunks,
    // and one of no bytes far past the end (it must not extend the file).
    let (w2, w3, w4, w5) = (
        registered.slice(65636..95636).unwrap(),
        plain.slice(4096..12288).unwrap(),
        plain.slice(13..4013).unwrap(),
        plain.slice(100..100).unwrap(),
    );
    let mut expected = vec![0u8; 262_144 + c.len()];
    for (bytes, at) in [
        (&a[..65536], 0),
        (&a[65636..95636], 70_001),
        (&b[4096..12288], 131_072),
        (&b[13..4013], 150_003),
        (&c[..], 262_144),
    ] {
        expected[at..at + bytes.len()].copy_from_slice(bytes);
    }
    let head = registered.slice(..65536).unwrap();
    driver
        .batch(8, |batch| {
            batch
                .submit([
                    BatchRequest::write(&handle, &head, 0).unwrap().cookie(1),
                    BatchRequest::write(&handle, &w2, 70_001).unwrap().cookie(2),
                    BatchRequest::write(&handle, &w3, 131_072)
                        .unwrap()
                        .cookie(3),
                    BatchRequest::write(&handle, &w4, 150_003)
                        .unwrap()
                        .cookie(4),
                    BatchRequest::write(&handle, &big, 262_144)
                        .unwrap()
                        .cookie(5),
                    BatchRequest::write(&handle, &w5, 1 << 30)
                        .unwrap()
                        .cookie(6),
                ])
                .unwrap();
            assert_eq!(batch.outstanding(), 6);
            let events = collect_all(batch);
            assert_eq!(batch.outstanding(), 0);
            for (cookie, bytes) in [
                (1, 65536),
                (2, 30000),
                (3, 8192),
                (4, 4000),
                (5, c.len()),
                (6, 0),
            ] {
                assert_complete(&events[&cookie], bytes);
            }
        })
        .unwrap();
    assert_eq!(
        std::fs::read(&path).unwrap(),
        expected,
        "the file holds every write"
    );

    // Read it all back, into fresh memory of both kinds; reads may overlap in the file.
    let mut whole = driver
        .register_buffer(sentinel_buffer(&driver, 128 * KIB))
        .unwrap();
    let mut middle = sentinel_buffer(&driver, 64 * KIB);
    let mut inner = middle.slice_mut(1..30001).unwrap();
    let mut large = sentinel_buffer(&driver, c.len());
    let mut tail = driver
        .register_buffer(sentinel_buffer(&driver, 8 * KIB))
        .unwrap();
    driver
        .batch(4, |batch| {
            batch
                .submit([
                    BatchRequest::read(&handle, &mut whole, 0)
                        .unwrap()
                        .cookie(11),
                    BatchRequest::read(&handle, &mut inner, 70_001)
                        .unwrap()
                        .cookie(12),
                    BatchRequest::read(&handle, &mut large, 262_144)
                        .unwrap()
                        .cookie(13),
                    BatchRequest::read(&handle, &mut tail, 150_003)
                        .unwrap()
                        .cookie(14),
                ])
                .unwrap();
            let events = collect_all(batch);
            for (cookie, bytes) in [(11, 128 * KIB), (12, 30000), (13, c.len()), (14, 8192)] {
                assert_complete(&events[&cookie], bytes);
            }
        })
        .unwrap();
    assert_eq!(whole.to_vec().unwrap(), expected[..128 * KIB]);
    let middle = middle.to_vec().unwrap();
    assert_eq!(middle[1..30001], expected[70_001..100_001]);
    assert_eq!(
        middle[0], SENTINEL,
        "the byte before the slice is untouched"
    );
    assert!(
        middle[30001..].iter().all(|&x| x == SENTINEL),
        "the bytes after the slice are untouched"
    );
    assert_eq!(large.to_vec().unwrap(), c);
    assert_eq!(tail.to_vec().unwrap(), expected[150_003..150_003 + 8192]);
}

#[test]
fn reads_are_short_at_the_end_of_the_file_and_empty_past_it() {
    let (_sim, driver) = sim_driver(build_and_host_copy(), Arc::new(PosixIo), |_| {});
    let dir = scratch_dir();
    let content = pattern(4, 0, 10_000);
    let (path, file) = data_file(dir.path(), "data", &content);
    let handle = driver.register_file(&file).unwrap();
    let mut inside = sentinel_buffer(&driver, 4096);
    let mut across = sentinel_buffer(&driver, 12288);
    let mut at_end = sentinel_buffer(&driver, 100);
    let mut past = sentinel_buffer(&driver, 4096);
    let mut none = sentinel_buffer(&driver, 4096);
    let mut empty = none.slice_mut(0..0).unwrap();
    let source = filled(&driver, &[1u8; 16]);
    let no_bytes = source.slice(8..8).unwrap();
    driver
        .batch(8, |batch| {
            batch
                .submit([
                    BatchRequest::read(&handle, &mut inside, 0)
                        .unwrap()
                        .cookie(1),
                    BatchRequest::read(&handle, &mut across, 8192)
                        .unwrap()
                        .cookie(2),
                    BatchRequest::read(&handle, &mut at_end, 10_000)
                        .unwrap()
                        .cookie(3),
                    BatchRequest::read(&handle, &mut past, 1 << 30)
                        .unwrap()
                        .cookie(4),
                    BatchRequest::read(&handle, &mut empty, 0)
                        .unwrap()
                        .cookie(5),
                    BatchRequest::write(&handle, &no_bytes, 1 << 20)
                        .unwrap()
                        .cookie(6),
                ])
                .unwrap();
            let events = collect_all(batch);
            for (cookie, bytes) in [(1, 4096), (2, 1808), (3, 0), (4, 0), (5, 0), (6, 0)] {
                assert_complete(&events[&cookie], bytes);
            }
        })
        .unwrap();
    assert_eq!(inside.to_vec().unwrap(), content[..4096]);
    let across = across.to_vec().unwrap();
    assert_eq!(across[..1808], content[8192..]);
    // Past the file's last block the memory keeps what it held (the direct path may zero the
    // rest of that block).
    assert!(across[4096..].iter().all(|&x| x == SENTINEL));
    for buf in [&at_end, &past, &none] {
        assert!(buf.to_vec().unwrap().iter().all(|&x| x == SENTINEL));
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        content,
        "a write of no bytes changes nothing"
    );
}

#[test]
fn an_entry_failing_with_ebadf_leaves_its_neighbours_to_succeed() {
    let (_sim, driver) = sim_driver(build_and_host_copy(), Arc::new(PosixIo), |_| {});
    let dir = scratch_dir();
    let p = pattern(5, 0, 16 * KIB);
    let q = pattern(6, 0, 16 * KIB);
    let (ro_path, _) = data_file(dir.path(), "ro", &p);
    let (wo_path, _) = data_file(dir.path(), "wo", &q);
    let (_, rw) = data_file(dir.path(), "rw", &p);
    let ro = File::open(&ro_path).unwrap();
    let wo = OpenOptions::new().write(true).open(&wo_path).unwrap();
    let (h_ro, h_wo, h_rw) = (
        driver.register_file(&ro).unwrap(),
        driver.register_file(&wo).unwrap(),
        driver.register_file(&rw).unwrap(),
    );
    let source = filled(&driver, &pattern(7, 0, 8 * KIB));
    let mut from_ro = sentinel_buffer(&driver, 8 * KIB);
    let mut from_wo = sentinel_buffer(&driver, 8 * KIB);
    let mut from_rw = driver
        .register_buffer(sentinel_buffer(&driver, 8 * KIB))
        .unwrap();
    driver
        .batch(5, |batch| {
            batch
                .submit([
                    BatchRequest::read(&h_ro, &mut from_ro, 4096)
                        .unwrap()
                        .cookie(1),
                    BatchRequest::write(&h_ro, &source, 0).unwrap().cookie(2),
                    BatchRequest::read(&h_wo, &mut from_wo, 0)
                        .unwrap()
                        .cookie(3),
                    BatchRequest::write(&h_wo, &source, 4096).unwrap().cookie(4),
                    BatchRequest::read(&h_rw, &mut from_rw, 1)
                        .unwrap()
                        .cookie(5),
                ])
                .unwrap();
            let events = collect_all(batch);
            assert_complete(&events[&1], 8 * KIB);
            assert_failed_with(&events[&2], libc::EBADF);
            assert_failed_with(&events[&3], libc::EBADF);
            assert_complete(&events[&4], 8 * KIB);
            assert_complete(&events[&5], 8 * KIB);
        })
        .unwrap();
    assert_eq!(from_ro.to_vec().unwrap(), p[4096..4096 + 8 * KIB]);
    assert!(from_wo.to_vec().unwrap().iter().all(|&x| x == SENTINEL));
    assert_eq!(from_rw.to_vec().unwrap(), p[1..1 + 8 * KIB]);
    assert_eq!(
        std::fs::read(&ro_path).unwrap(),
        p,
        "the refused write moved nothing"
    );
    let mut q_after = q.clone();
    q_after[4096..4096 + 8 * KIB].copy_from_slice(&pattern(7, 0, 8 * KIB));
    assert_eq!(std::fs::read(&wo_path).unwrap(), q_after);
}

/// Per entry, ENODEV from the direct path moves that entry alone to the staged one, which
/// completes it byte-exact; the others stay on the direct path.
#[cfg(all(feature = "fastpath", feature = "fallback"))]
#[test]
fn enodev_moves_one_entry_from_the_direct_path_to_the_staged_one() {
    let (sim, driver) = sim_driver(hipfile::backends(), Arc::new(PosixIo), |_| {});
    let ops = |name: &str| driver.stats().unwrap().backend(name).map_or(0, |b| b.ops);
    let dir = scratch_dir();
    let content = pattern(8, 0, 6 * 64 * KIB);
    let (path, file) = data_file(dir.path(), "data", &content);
    let handle = driver.register_file(&file).unwrap();

    let mut dsts: Vec<DeviceBuffer> = (0..6).map(|_| sentinel_buffer(&driver, 64 * KIB)).collect();
    let calls = sim.p2p_faults().calls();
    sim.p2p_faults().fail_call(3, libc::ENODEV);
    let events = driver
        .batch(6, |batch| {
            batch
                .submit(dsts.iter_mut().enumerate().map(|(i, dst)| {
                    BatchRequest::read(&handle, dst, (i * 64 * KIB) as u64)
                        .unwrap()
                        .cookie(i)
                }))
                .unwrap();
            collect_all(batch)
        })
        .unwrap();
    for (i, dst) in dsts.iter().enumerate() {
        assert_complete(&events[&i], 64 * KIB);
        assert_eq!(
            dst.to_vec().unwrap(),
            content[i * 64 * KIB..(i + 1) * 64 * KIB],
            "read {i}"
        );
    }
    assert_eq!(
        sim.p2p_faults().calls() - calls,
        6,
        "one DMA per entry, the failed one included"
    );
    assert_eq!((ops("fastpath"), ops("fallback")), (5, 1));

    let sources: Vec<DeviceBuffer> = (0..4)
        .map(|i| filled(&driver, &pattern(20 + i, 0, 64 * KIB)))
        .collect();
    let calls = sim.p2p_faults().calls();
    sim.p2p_faults().fail_call(2, libc::ENODEV);
    let events = driver
        .batch(4, |batch| {
            batch
                .submit(sources.iter().enumerate().map(|(i, src)| {
                    BatchRequest::write(&handle, src, (i * 64 * KIB) as u64)
                        .unwrap()
                        .cookie(i)
                }))
                .unwrap();
            collect_all(batch)
        })
        .unwrap();
    let mut expected = content.clone();
    for i in 0..4 {
        assert_complete(&events[&i], 64 * KIB);
        expected[i * 64 * KIB..(i + 1) * 64 * KIB].copy_from_slice(&pattern(
            20 + i as u64,
            0,
            64 * KIB,
        ));
    }
    assert_eq!(std::fs::read(&path).unwrap(), expected);
    assert_eq!(sim.p2p_faults().calls() - calls, 4);
    assert_eq!((ops("fastpath"), ops("fallback")), (8, 2));
}

#[test]
fn submissions_are_all_or_nothing_and_bounded_by_the_capacity() {
    let (_sim, driver) = sim_driver(build_and_host_copy(), Arc::new(PosixIo), |_| {});
    let core = Arc::clone(driver.core());
    assert_eq!(
        driver.batch(0, |_| ()).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
    assert_eq!(
        driver.batch(129, |_| ()).unwrap_err().kind(),
        ErrorKind::InvalidValue,
        "more than max_batch_io_size"
    );
    let dir = scratch_dir();
    let content = pattern(9, 0, 32 * KIB);
    let (path, file) = data_file(dir.path(), "data", &content);
    let (_, other) = data_file(dir.path(), "other", &content);
    let handle = driver.register_file(&file).unwrap();
    let gone = driver.register_file(&other).unwrap();
    core.handle_deregister(gone.id()).unwrap();
    let source = filled(&driver, &[3u8; 4096]);
    let mut dst = sentinel_buffer(&driver, 4096);
    assert_eq!(
        BatchRequest::read(&handle, &mut dst, u64::MAX)
            .unwrap_err()
            .errno(),
        Some(libc::EINVAL),
        "a file offset past the largest one"
    );
    // The first byte of an entry lies inside its memory, even for an entry of no bytes.
    let at_end = source.slice(4096..4096).unwrap();
    driver
        .batch(2, |batch| {
            assert_eq!(
                batch.wait(2, 1, None).unwrap_err().kind(),
                ErrorKind::InvalidValue,
                "min above max"
            );
            assert_eq!(
                batch.wait(0, 0, None).unwrap_err().kind(),
                ErrorKind::InvalidValue
            );
            assert!(
                batch.wait(1, 2, None).unwrap().is_empty(),
                "nothing outstanding: an empty answer at once"
            );
            let write = |at| BatchRequest::write(&handle, &source, at).unwrap();
            assert_eq!(
                batch
                    .submit([write(0), write(4096), write(8192)])
                    .unwrap_err()
                    .kind(),
                ErrorKind::BatchFull
            );
            assert_eq!(
                batch
                    .submit([write(0), BatchRequest::write(&gone, &source, 0).unwrap()])
                    .unwrap_err()
                    .kind(),
                ErrorKind::HandleNotRegistered
            );
            assert_eq!(
                batch
                    .submit([write(0), BatchRequest::write(&handle, &at_end, 0).unwrap()])
                    .unwrap_err()
                    .kind(),
                ErrorKind::InvalidValue
            );
            assert_eq!(batch.outstanding(), 0);
            assert!(batch.wait(1, 2, Some(Duration::ZERO)).unwrap().is_empty());
            assert_eq!(
                std::fs::read(&path).unwrap(),
                content,
                "nothing of the refused submissions ran"
            );
            batch.submit([write(0).cookie(7)]).unwrap();
            assert_eq!(
                batch.submit([write(4096), write(8192)]).unwrap_err().kind(),
                ErrorKind::BatchFull,
                "an entry counts until it is collected"
            );
            batch.submit([write(4096).cookie(8)]).unwrap();
            let events = collect_all(batch);
            assert_complete(&events[&7], 4096);
            assert_complete(&events[&8], 4096);
            batch
                .submit([write(8192).cookie(9), write(12288).cookie(10)])
                .unwrap();
            let events = collect_all(batch);
            assert_eq!(events.len(), 2);
        })
        .unwrap();
    let mut expected = content;
    expected[..16384].fill(3);
    assert_eq!(std::fs::read(&path).unwrap(), expected);
}

/// An entry of no bytes at the largest file offset asks for nothing past it: it is accepted and
/// completes with 0, as one at offset 0 does (and as `hipFileWrite` of no bytes there answers).
#[test]
fn an_entry_of_no_bytes_at_the_largest_file_offset_completes_with_zero() {
    let (_sim, driver) = sim_driver(build_and_host_copy(), Arc::new(PosixIo), |_| {});
    let dir = scratch_dir();
    let (path, file) = data_file(dir.path(), "data", &[5u8; 4096]);
    let handle = driver.register_file(&file).unwrap();
    let source = filled(&driver, &[1u8; 4096]);
    let nothing = source.slice(0..0).unwrap();
    assert_eq!(handle.write(nothing, i64::MAX as u64).unwrap(), 0);
    driver
        .batch(2, |batch| {
            batch
                .submit([
                    BatchRequest::write(&handle, &nothing, i64::MAX as u64)
                        .unwrap()
                        .cookie(1),
                    BatchRequest::write(&handle, &nothing, 0).unwrap().cookie(2),
                ])
                .unwrap();
            let events = collect_all(batch);
            assert_complete(&events[&1], 0);
            assert_complete(&events[&2], 0);
        })
        .unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), [5u8; 4096]);
}

/// In a batch of `dsts.len()` places, submit reads of 8 KiB pieces of `handle`'s file into
/// `dsts` (cookies 1..=count) on a driver with one worker behind a closed gate, wait until the
/// first has started and stopped at the gate, and lend the batch to `f`; the batch ends when `f`
/// returns.
fn held_reads<'b, R>(
    driver: &Driver,
    gate: &Gate,
    handle: &'b hipfile::FileHandle,
    dsts: &'b mut [DeviceBuffer],
    f: impl FnOnce(&mut hipfile::Batch<'b>) -> R,
) -> R {
    driver
        .batch(dsts.len(), |batch| {
            batch
                .submit(dsts.iter_mut().enumerate().map(|(i, dst)| {
                    BatchRequest::read(handle, dst, (i * 8 * KIB + 1) as u64)
                        .unwrap()
                        .cookie(i + 1)
                }))
                .unwrap();
            gate.wait_held(1);
            f(batch)
        })
        .unwrap()
}

/// Cancel while the first of five entries runs: the four that have not started are withdrawn
/// and come back canceled with no byte moved; cancel returns only once the first has finished,
/// and nothing runs after it returns.
fn cancel_withdraws_what_has_not_started(backends: hipfile_core::RegistryBuilder, slot: &Watched) {
    let gate = Gate::closed();
    let (_sim, driver) = sim_driver(backends, gate.clone(), one_worker);
    let dir = scratch_dir();
    let content = pattern(10, 0, 64 * KIB);
    let (_, file) = data_file(dir.path(), "data", &content);
    let handle = driver.register_file(&file).unwrap();
    let mut dsts: Vec<DeviceBuffer> = (0..5).map(|_| sentinel_buffer(&driver, 8 * KIB)).collect();
    held_reads(&driver, &gate, &handle, &mut dsts, |batch| {
        thread::scope(|s| {
            let canceller = s.spawn(|| {
                batch.cancel().unwrap();
                Instant::now()
            });
            slot.wait_withdrawn(4);
            thread::sleep(Duration::from_millis(20));
            assert!(
                !canceller.is_finished(),
                "cancel returned while an entry still ran"
            );
            let opened = Instant::now();
            gate.open();
            let returned = canceller.join().unwrap();
            assert!(returned >= opened);
        });
        let calls = gate.calls();
        thread::sleep(Duration::from_millis(50));
        assert_eq!(gate.calls(), calls, "a file call after cancel returned");
        assert_eq!(slot.withdrawn.load(Ordering::Acquire), 4);
        assert_eq!(
            slot.refused.load(Ordering::Acquire),
            1,
            "the started entry ran on"
        );
        // Every entry is terminal once cancel returned: all five come back at once.
        let events = by_cookie(batch.wait(5, 5, Some(Duration::ZERO)).unwrap());
        assert_eq!(events.len(), 5);
        assert_complete(&events[&1], 8 * KIB);
        for cookie in 2..=5 {
            assert_canceled(&events[&cookie]);
        }
    });
    assert_eq!(dsts[0].to_vec().unwrap(), content[1..1 + 8 * KIB]);
    for (i, dst) in dsts.iter().enumerate().skip(1) {
        assert!(
            dst.to_vec().unwrap().iter().all(|&x| x == SENTINEL),
            "canceled entry {} moved bytes",
            i + 1
        );
    }
}

#[test]
fn cancel_withdraws_entries_not_started_and_waits_for_the_started_one() {
    cancel_withdraws_what_has_not_started(watched_host_copy::<0>(), &WATCHED[0]);
}

/// The same through the staged engine of `hipfile-fallback` and its own withdrawal.
#[cfg(feature = "fallback")]
#[test]
fn the_staged_engine_withdraws_entries_not_started() {
    cancel_withdraws_what_has_not_started(
        crate::batch_support::watched_fallback::<1>(),
        &WATCHED[1],
    );
}

#[test]
fn an_entry_past_the_batch_io_timeout_is_reported_and_keeps_its_place_until_it_ends() {
    const TIMEOUT_MS: u64 = 300;
    let gate = Gate::closed();
    let (_sim, driver) = sim_driver(watched_host_copy::<2>(), gate.clone(), |s| {
        one_worker(s);
        s.batch_io_timeout_ms = TIMEOUT_MS;
    });
    let dir = scratch_dir();
    let (path, file) = data_file(dir.path(), "data", &[0u8; 32 * KIB]);
    let handle = driver.register_file(&file).unwrap();
    let slow = filled(&driver, &pattern(11, 0, 8 * KIB));
    let fast = filled(&driver, &pattern(12, 0, 8 * KIB));
    driver
        .batch(2, |batch| {
            let submitted = Instant::now();
            batch
                .submit([BatchRequest::write(&handle, &slow, 0).unwrap().cookie(1)])
                .unwrap();
            gate.wait_held(1);
            let events = batch.wait(1, 2, None).unwrap();
            assert!(submitted.elapsed() >= Duration::from_millis(TIMEOUT_MS));
            assert_eq!(events.len(), 1);
            let event = &events[0];
            assert_eq!((event.cookie, event.status), (1, BatchStatus::Timeout));
            let err = event.result.as_ref().unwrap_err();
            assert_eq!(
                (err.kind(), err.errno()),
                (ErrorKind::Os, Some(libc::ETIMEDOUT))
            );
            assert_eq!(batch.outstanding(), 0);

            // Still running, it takes one of the two places.
            let write = |at| BatchRequest::write(&handle, &fast, at).unwrap();
            assert_eq!(
                batch
                    .submit([write(8192), write(16384)])
                    .unwrap_err()
                    .kind(),
                ErrorKind::BatchFull
            );
            batch.submit([write(8192).cookie(2)]).unwrap();
            assert_eq!(
                batch.submit([write(16384)]).unwrap_err().kind(),
                ErrorKind::BatchFull
            );
            gate.open();
            let events = batch.wait(1, 1, None).unwrap();
            assert_complete(&events[0], 8 * KIB);
            // One worker runs them in order: the timed-out entry has finished, and both places are free.
            batch
                .submit([write(16384).cookie(3), write(24576).cookie(4)])
                .unwrap();
            let events = collect_all(batch);
            assert_complete(&events[&3], 8 * KIB);
            assert_complete(&events[&4], 8 * KIB);
        })
        .unwrap();
    let mut expected = pattern(11, 0, 8 * KIB);
    for _ in 0..3 {
        expected.extend(pattern(12, 0, 8 * KIB));
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        expected,
        "the timed-out write ran to its end"
    );
}

/// An entry reported as timed out keeps its place and its memory only while it runs: once it
/// has finished, the next submission finds both places free and its registered memory
/// deregisters, without another status call in between.
#[test]
fn a_timed_out_entry_lets_its_place_and_memory_go_when_it_finishes() {
    const TIMEOUT_MS: u64 = 100;
    let gate = Gate::closed();
    let (_sim, driver) = sim_driver(watched_host_copy::<6>(), gate.clone(), |s| {
        one_worker(s);
        s.batch_io_timeout_ms = TIMEOUT_MS;
    });
    let core = Arc::clone(driver.core());
    let dir = scratch_dir();
    let (path, file) = data_file(dir.path(), "data", &[0u8; 32 * KIB]);
    let handle = driver.register_file(&file).unwrap();
    let slow = driver
        .register_buffer(filled(&driver, &pattern(16, 0, 8 * KIB)))
        .unwrap();
    let slow_at = slow.ptr();
    let fast = filled(&driver, &pattern(17, 0, 8 * KIB));
    driver
        .batch(2, |batch| {
            // A failed check unwinds through it, so the batch's end does not wait forever.
            let _released = gate.open_on_drop();
            batch
                .submit([BatchRequest::write(&handle, &slow, 0).unwrap().cookie(1)])
                .unwrap();
            gate.wait_held(1);
            let events = batch.wait(1, 2, None).unwrap();
            assert_eq!(
                (events[0].cookie, events[0].status),
                (1, BatchStatus::Timeout)
            );
            assert_eq!(
                core.buf_deregister(slow_at).unwrap_err().kind(),
                ErrorKind::InvalidValue,
                "the timed-out entry still runs"
            );
            gate.open();
            // Its bytes land, then it finishes; no status call looks at the batch meanwhile.
            let write = |at| BatchRequest::write(&handle, &fast, at).unwrap();
            let since = Instant::now();
            loop {
                match batch.submit([write(8192).cookie(2), write(16384).cookie(3)]) {
                    Ok(()) => break,
                    Err(e) => {
                        assert_eq!(e.kind(), ErrorKind::BatchFull);
                        assert!(
                            since.elapsed() < Duration::from_secs(10),
                            "the finished timed-out entry still holds its place"
                        );
                        thread::sleep(Duration::from_millis(5));
                    }
                }
            }
            core.buf_deregister(slow_at).unwrap();
            let events = collect_all(batch);
            assert_complete(&events[&2], 8 * KIB);
            assert_complete(&events[&3], 8 * KIB);
        })
        .unwrap();
    let mut expected = pattern(16, 0, 8 * KIB);
    expected.extend(pattern(17, 0, 8 * KIB));
    expected.extend(pattern(17, 0, 8 * KIB));
    expected.extend(vec![0u8; 8 * KIB]);
    assert_eq!(std::fs::read(&path).unwrap(), expected);
}

/// Registered memory an entry reads or writes cannot be deregistered while the entry runs
/// (`InvalidValue`, cuFile's answer, which a caller can act on). A file handle can: it is
/// forgotten at once (later requests on it are `HandleNotRegistered`, the descriptor registers
/// again), the entries in flight finish on the registration, and its descriptors close when the
/// last of them ends.
#[test]
fn entries_in_flight_hold_their_memory_and_their_files_registration() {
    let gate = Gate::closed();
    let (_sim, driver) = sim_driver(watched_host_copy::<3>(), gate.clone(), one_worker);
    let core = Arc::clone(driver.core());
    let dir = scratch_dir();
    let (path, file) = data_file(dir.path(), "data", &pattern(13, 0, 16 * KIB));
    let handle = driver.register_file(&file).unwrap();
    let registration = Arc::downgrade(&core.file(handle.id()).unwrap());
    let source = driver
        .register_buffer(filled(&driver, &pattern(14, 0, 8 * KIB)))
        .unwrap();
    let mut dst = driver
        .register_buffer(sentinel_buffer(&driver, 8 * KIB))
        .unwrap();
    let (source_at, dst_at) = (source.ptr(), dst.ptr());
    driver
        .batch(2, |batch| {
            // A failed check unwinds through it, so the batch's end does not wait forever.
            let _released = gate.open_on_drop();
            batch
                .submit([
                    BatchRequest::write(&handle, &source, 0).unwrap().cookie(1),
                    BatchRequest::read(&handle, &mut dst, 8192)
                        .unwrap()
                        .cookie(2),
                ])
                .unwrap();
            gate.wait_held(1);
            for (at, what) in [
                (source_at, "the running entry's memory"),
                (dst_at, "the queued entry's memory"),
            ] {
                assert_eq!(
                    core.buf_deregister(at).unwrap_err().kind(),
                    ErrorKind::InvalidValue,
                    "{what}"
                );
            }
            core.handle_deregister(handle.id()).unwrap();
            let mut probe = sentinel_buffer(&driver, 4096);
            assert_eq!(
                handle.read(&mut probe, 0).unwrap_err().kind(),
                ErrorKind::HandleNotRegistered,
                "the handle is forgotten at once"
            );
            // The descriptor registers again (the entries keep the old registration).
            drop(driver.register_file(&file).unwrap());
            assert!(
                registration.upgrade().is_some(),
                "the entries in flight hold the registration"
            );
            gate.open();
            let events = collect_all(batch);
            assert_complete(&events[&1], 8 * KIB);
            assert_complete(&events[&2], 8 * KIB);
            // Collected, the entries hold nothing.
            core.buf_deregister(source_at).unwrap();
            core.buf_deregister(dst_at).unwrap();
        })
        .unwrap();
    assert_eq!(
        std::fs::read(&path).unwrap()[..8192],
        pattern(14, 0, 8 * KIB)[..]
    );
    assert_eq!(dst.to_vec().unwrap(), pattern(13, 8192, 8 * KIB));
    assert!(
        registration.upgrade().is_none(),
        "the deregistered file's registration, its descriptors with it, ended with its last entry"
    );
}

/// When its closure returns, the batch cancels the entries not started and `Driver::batch`
/// returns only once the started one has finished.
#[test]
fn the_end_of_a_batch_cancels_what_has_not_started_and_waits_for_the_rest() {
    let slot = &WATCHED[4];
    let gate = Gate::closed();
    let (_sim, driver) = sim_driver(watched_host_copy::<4>(), gate.clone(), one_worker);
    let dir = scratch_dir();
    let content = pattern(15, 0, 64 * KIB);
    let (_, file) = data_file(dir.path(), "data", &content);
    let handle = driver.register_file(&file).unwrap();
    let mut dsts: Vec<DeviceBuffer> = (0..3).map(|_| sentinel_buffer(&driver, 8 * KIB)).collect();
    thread::scope(|s| {
        let ender = s.spawn(|| {
            held_reads(&driver, &gate, &handle, &mut dsts, |_| {
                assert_eq!(driver.core().batch_count(), 1);
            });
            Instant::now()
        });
        slot.wait_withdrawn(2);
        thread::sleep(Duration::from_millis(20));
        assert!(
            !ender.is_finished(),
            "the batch ended while an entry still ran"
        );
        let opened = Instant::now();
        gate.open();
        assert!(ender.join().unwrap() >= opened);
    });
    let calls = gate.calls();
    thread::sleep(Duration::from_millis(50));
    assert_eq!(gate.calls(), calls, "a file call after the batch ended");
    assert_eq!(driver.core().batch_count(), 0);
    assert_eq!(dsts[0].to_vec().unwrap(), content[1..1 + 8 * KIB]);
    for dst in &dsts[1..] {
        assert!(dst.to_vec().unwrap().iter().all(|&x| x == SENTINEL));
    }
}

#[test]
fn closing_the_driver_to_zero_destroys_its_batches() {
    let slot = &WATCHED[5];
    let gate = Gate::closed();
    let (_sim, driver) = sim_driver(watched_host_copy::<5>(), gate.clone(), one_worker);
    let core = Arc::clone(driver.core());
    let dir = scratch_dir();
    let content = pattern(16, 0, 64 * KIB);
    let (_, file) = data_file(dir.path(), "data", &content);
    let handle = driver.register_file(&file).unwrap();
    let source = filled(&driver, &[1u8; 4096]);
    let mut dsts: Vec<DeviceBuffer> = (0..2).map(|_| sentinel_buffer(&driver, 8 * KIB)).collect();
    held_reads(&driver, &gate, &handle, &mut dsts, |batch| {
        assert_eq!(core.use_count(), 1);
        thread::scope(|s| {
            // A C caller closing the process's last reference under the Rust values.
            let closer = s.spawn(|| {
                core.close().unwrap();
                Instant::now()
            });
            slot.wait_withdrawn(1);
            thread::sleep(Duration::from_millis(20));
            assert!(
                !closer.is_finished(),
                "the close returned while an entry still ran"
            );
            let opened = Instant::now();
            gate.open();
            assert!(closer.join().unwrap() >= opened);
        });
        assert_eq!((core.use_count(), core.batch_count()), (0, 0));
        assert_eq!(
            batch.wait(1, 2, Some(Duration::ZERO)).unwrap_err().kind(),
            ErrorKind::InvalidValue,
            "the batch is gone"
        );
        assert_eq!(
            batch
                .submit([BatchRequest::write(&handle, &source, 0).unwrap()])
                .unwrap_err()
                .kind(),
            ErrorKind::InvalidValue
        );
        assert_eq!(batch.cancel().unwrap_err().kind(), ErrorKind::InvalidValue);
        // Ending the batch finds it gone and leaves it at that.
    });
    assert_eq!((core.use_count(), core.batch_count()), (0, 0));
    assert_eq!(dsts[0].to_vec().unwrap(), content[1..1 + 8 * KIB]);
    assert!(dsts[1].to_vec().unwrap().iter().all(|&x| x == SENTINEL));
    // A batch set up on the closed driver is destroyed by the next close to zero.
    let id = core.batch_setup(4).unwrap();
    assert_eq!((core.use_count(), core.batch_count()), (0, 1));
    core.open().unwrap();
    core.close().unwrap();
    assert_eq!(core.batch_count(), 0);
    assert_eq!(
        core.batch_status(id, 0, 1, None).unwrap_err().kind(),
        ErrorKind::InvalidValue
    );
}

/// Panics on any thread of the process, counted by [`count_panics`].
#[cfg(feature = "fallback")]
static PANICS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Count every panic of this process (a child's: the hook is the process's) before the default
/// hook reports it.
#[cfg(feature = "fallback")]
fn count_panics() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = thread::current().name().unwrap_or("unnamed").to_string();
        PANICS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(format!("{thread}: {info}"));
        default(info);
    }));
}

/// A queued staged entry whose worker waits for a staging lane when the cancel withdraws it:
/// the worker goes on once a lane is free and must find nothing to do, without a panic.
#[cfg(feature = "fallback")]
fn withdrawn_while_waiting_for_a_lane_child() {
    count_panics();
    let slot = &WATCHED[7];
    let gate = Gate::closed();
    // Two staging lanes (the pinned bound holds two of 2 x 16 KiB) and three workers: two
    // entries hold the lanes at the gate, the third one's worker waits for a lane.
    let (_sim, driver) = sim_driver(
        crate::batch_support::watched_fallback::<7>(),
        gate.clone(),
        |s| {
            s.max_io_threads = 3;
            s.io_queue_depth = 3;
            s.per_buffer_cache_size_kb = 16;
            s.max_pinned_mem_size_kb = 64;
        },
    );
    let dir = scratch_dir();
    let content = pattern(18, 0, 64 * KIB);
    let (_, file) = data_file(dir.path(), "data", &content);
    let handle = driver.register_file(&file).unwrap();
    let mut dsts: Vec<DeviceBuffer> = (0..3).map(|_| sentinel_buffer(&driver, 8 * KIB)).collect();
    let withdrawn = driver
        .batch(3, |batch| {
            batch
                .submit(dsts.iter_mut().enumerate().map(|(i, dst)| {
                    BatchRequest::read(&handle, dst, (i * 8 * KIB) as u64)
                        .unwrap()
                        .cookie(i + 1)
                }))
                .unwrap();
            gate.wait_held(2);
            // Time for the third worker to reach its wait for a lane.
            thread::sleep(Duration::from_millis(200));
            thread::scope(|s| {
                let canceller = s.spawn(|| batch.cancel().unwrap());
                slot.wait_withdrawn(1);
                gate.open();
                canceller.join().unwrap();
            });
            let events = by_cookie(batch.wait(3, 3, Some(Duration::ZERO)).unwrap());
            // Which entry's worker came last to the lanes is up to the scheduler: that one is
            // withdrawn, the two at the gate complete.
            let waited = (1..=3)
                .find(|c| events[c].status == BatchStatus::Canceled)
                .expect("the entry whose worker waited for a lane is withdrawn");
            for cookie in 1..=3 {
                if cookie == waited {
                    assert_canceled(&events[&cookie]);
                } else {
                    assert_complete(&events[&cookie], 8 * KIB);
                }
            }
            waited
        })
        .unwrap();
    for (i, dst) in dsts.iter().enumerate() {
        let bytes = dst.to_vec().unwrap();
        if i + 1 == withdrawn {
            assert!(
                bytes.iter().all(|&x| x == SENTINEL),
                "the withdrawn entry moved bytes"
            );
        } else {
            assert_eq!(bytes, content[i * 8 * KIB..(i + 1) * 8 * KIB]);
        }
    }
    let panics = PANICS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    assert!(
        panics.is_empty(),
        "threads panicked while a withdrawn entry's worker got its lane: {panics:#?}"
    );
}

#[cfg(feature = "fallback")]
#[test]
fn a_staged_entry_withdrawn_while_its_worker_waits_for_a_lane_panics_no_thread() {
    let name = crate::harness::test_name(
        module_path!(),
        "a_staged_entry_withdrawn_while_its_worker_waits_for_a_lane_panics_no_thread",
    );
    if crate::harness::as_child(&name, withdrawn_while_waiting_for_a_lane_child) {
        return;
    }
    let run = crate::harness::run_child(
        crate::harness::child_command(&name),
        Duration::from_secs(120),
        &name,
    );
    run.assert_passed(&name);
}
