use std::sync::atomic::Ordering;
use std::sync::Arc;

use hipfile::{AsDeviceMut, Driver, DriverOptions};
use hipfile_hip::sim::SimRuntime;
use hipfile_remote::{RemoteError, RemoteFile, RemoteOptions};

use crate::server::ObjectServer;

pub fn driver() -> Driver {
    Driver::with_options(DriverOptions::with_runtime(Arc::new(SimRuntime::default()))).unwrap()
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4099) as u8).collect()
}

/// Small requests, so a few hundred KiB take many requests on several threads.
fn small_requests() -> RemoteOptions {
    RemoteOptions {
        request_size: 64 << 10,
        connections: 4,
        ..RemoteOptions::default()
    }
}

#[test]
fn reads_land_in_device_memory_at_any_offset_and_stop_short_at_the_end() {
    let object = pattern(1 << 20 | 333);
    let (_server, url) = ObjectServer::with_object(object.clone());
    let driver = driver();
    let file = RemoteFile::open(&driver, &url, small_requests()).unwrap();
    assert_eq!(file.nbytes(), object.len() as u64);
    let mut dst = driver.alloc(object.len()).unwrap();
    for (offset, len) in [(0, object.len()), (12345, 300_000), (1, 1), (65536, 65536)] {
        dst.fill(0xEE).unwrap();
        let n = file
            .read(dst.slice_mut(..len).unwrap(), offset as u64)
            .unwrap();
        assert_eq!(n, len);
        let got = dst.to_vec().unwrap();
        assert!(got[..len] == object[offset..offset + len], "{offset}+{len}");
        assert!(got[len..].iter().all(|&b| b == 0xEE), "nothing past {len}");
    }
    // Past the end: short, then nothing.
    let tail = 1000;
    let at = (object.len() - tail) as u64;
    assert_eq!(file.read(&mut dst, at).unwrap(), tail);
    assert_eq!(dst.to_vec().unwrap()[..tail], object[object.len() - tail..]);
    assert_eq!(file.read(&mut dst, object.len() as u64).unwrap(), 0);
    assert_eq!(file.read(&mut dst, u64::MAX).unwrap(), 0);
}

#[test]
fn host_reads_fill_the_callers_memory_in_parallel() {
    let object = pattern(777_777);
    let (_server, url) = ObjectServer::with_object(object.clone());
    let file = RemoteFile::open(&driver(), &url, small_requests()).unwrap();
    let mut buf = vec![0u8; object.len() + 10];
    assert_eq!(file.read_host(&mut buf, 0).unwrap(), object.len());
    assert_eq!(buf[..object.len()], object[..]);
    let mut some = vec![0u8; 100_000];
    assert_eq!(file.read_host(&mut some, 500_000).unwrap(), 100_000);
    assert_eq!(some[..], object[500_000..600_000]);
    let counts = file.counts();
    assert!(
        counts.requests >= 14 && counts.read_bytes >= 877_777,
        "{counts:?}"
    );
}

#[test]
fn a_pending_read_owns_its_buffer_and_answers_when_waited_for() {
    let object = pattern(300_000);
    let (_server, url) = ObjectServer::with_object(object.clone());
    let driver = driver();
    let file = RemoteFile::open(&driver, &url, small_requests()).unwrap();
    let pending = file.pread(driver.alloc(200_000).unwrap(), 50_000);
    let (buf, n) = pending.wait_with_buffer().unwrap();
    assert_eq!(n, 200_000);
    assert_eq!(buf.to_vec().unwrap(), object[50_000..250_000]);
    let pending = file.pread(buf, 299_000);
    assert_eq!(pending.wait().unwrap(), 1000);

    let pending = file.pread_host(vec![0u8; 100_000], 123);
    let (host, n) = pending.wait_with_buffer().unwrap();
    assert_eq!(n, 100_000);
    assert_eq!(host[..], object[123..100_123]);
    let done = file.pread_host(vec![0u8; 10], 1 << 40);
    while !done.is_done() {
        std::thread::yield_now();
    }
    assert_eq!(done.wait().unwrap(), 0);
}

#[test]
fn a_server_that_ignores_range_fails_the_read_rather_than_misplacing_bytes() {
    let object = pattern(200_000);
    let (server, url) = ObjectServer::with_object(object);
    server.store.ignores_range.store(true, Ordering::Relaxed);
    let driver = driver();
    let file = RemoteFile::open(&driver, &url, small_requests()).unwrap();
    // One request's worth, so one GET (the size came from HEAD).
    let mut dst = driver.alloc(50_000).unwrap();
    let e = file.read(&mut dst, 1000).unwrap_err();
    assert!(
        matches!(e, RemoteError::RangeIgnored { status: 200, .. }),
        "{e}"
    );
    let e = hipfile::Error::from(e);
    assert_eq!(e.errno(), Some(libc::EOPNOTSUPP));
    assert_eq!(
        server.store.gets.load(Ordering::Relaxed),
        1,
        "an answer that ignores Range is not retried"
    );
}

#[test]
fn a_missing_object_is_not_found_at_open_and_reads_as_enoent() {
    let server = ObjectServer::start();
    let url = format!("{}/bucket/missing", server.endpoint);
    let e = RemoteFile::open(&driver(), &url, RemoteOptions::default()).unwrap_err();
    assert!(matches!(e, RemoteError::NotFound { .. }), "{e}");
    assert_eq!(hipfile::Error::from(e).errno(), Some(libc::ENOENT));
}

#[test]
fn memory_the_drivers_runtime_does_not_know_is_refused_before_any_request() {
    let (server, url) = ObjectServer::with_object(pattern(4096));
    let driver = driver();
    let file = RemoteFile::open(&driver, &url, small_requests()).unwrap();
    let elsewhere = hipfile::DeviceBuffer::new(Arc::new(SimRuntime::default()), 4096).unwrap();
    let e = file.read(elsewhere, 0).unwrap_err();
    assert!(matches!(e, RemoteError::Device(_)), "{e}");
    assert_eq!(server.store.gets.load(Ordering::Relaxed), 0);
}

#[test]
fn the_drivers_statistics_count_the_remote_path_beside_the_backends() {
    let mut options = DriverOptions::with_runtime(Arc::new(SimRuntime::default()));
    options.env.stats_level = Some(1);
    let driver = Driver::with_options(options).unwrap();
    let object = pattern(200_000);
    let (_server, url) = ObjectServer::with_object(object);
    let file = RemoteFile::open(&driver, &url, small_requests()).unwrap();
    let mut dst = driver.alloc(150_000).unwrap();
    assert_eq!(file.read(&mut dst, 0).unwrap(), 150_000);
    let snap = driver.stats().unwrap();
    let remote = snap.side_path(hipfile_remote::PATH_NAME).unwrap();
    // HEAD at open, then three ranged GETs of at most 64 KiB.
    assert_eq!(remote.get("requests"), 4);
    assert_eq!(remote.get("read_bytes"), 150_000);
    assert_eq!(remote.get("errors"), 0);
    assert_eq!(file.counts().requests, 4);
}

#[test]
fn server_errors_and_cut_bodies_are_retried_and_the_bytes_still_land_in_place() {
    let object = pattern(400_000);
    let (server, url) = ObjectServer::with_object(object.clone());
    let driver = driver();
    let options = RemoteOptions {
        backoff: std::time::Duration::from_millis(1),
        ..small_requests()
    };
    let file = RemoteFile::open(&driver, &url, options).unwrap();
    server.store.fail_gets.store(3, Ordering::Relaxed);
    server.store.cut_gets.store(2, Ordering::Relaxed);
    let mut dst = driver.alloc(object.len()).unwrap();
    assert_eq!(file.read(&mut dst, 0).unwrap(), object.len());
    assert!(dst.to_vec().unwrap() == object);
    let counts = file.counts();
    assert_eq!(counts.retries, 5, "{counts:?}");
    assert_eq!(counts.errors, 0);
    assert_eq!(
        counts.read_bytes,
        object.len() as u64,
        "resumed, not refetched: {counts:?}"
    );
}

#[test]
fn a_failure_past_the_retries_fails_the_whole_read_with_no_count() {
    let object = pattern(400_000);
    let (server, url) = ObjectServer::with_object(object);
    let driver = driver();
    let options = RemoteOptions {
        retries: 2,
        backoff: std::time::Duration::from_millis(1),
        ..small_requests()
    };
    let file = RemoteFile::open(&driver, &url, options).unwrap();
    server.store.fail_gets.store(usize::MAX, Ordering::Relaxed);
    let mut dst = driver.alloc(400_000).unwrap();
    let e = file.read(&mut dst, 0).unwrap_err();
    assert!(
        matches!(
            e,
            RemoteError::Server {
                status: 503,
                attempts: 3,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("SlowDown"), "{e}");
    let mut host = vec![0u8; 1000];
    assert!(file.read_host(&mut host, 0).is_err());
    assert_eq!(hipfile::Error::from(e).errno(), Some(libc::EIO));
    assert!(file.counts().errors >= 1);
}
