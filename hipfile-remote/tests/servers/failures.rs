//! Failures of remote reads and writes against the real RADOS Gateway: the gateway killed in the
//! middle of a read and of an upload (and started again the way `cargo xtask ceph up` starts
//! it), a slow gateway, transient 5xx answers, bytes flipped on the wire, and many readers at
//! once. Where a fault must land on one request, hipfile-testkit's [`FaultProxy`] stands between
//! the client and the gateway: the client's endpoint is the proxy's URL, so the SigV4 presigned
//! URLs are signed for the `Host` the gateway then receives (the proxy forwards heads byte for
//! byte).
//!
//! The tests that kill the gateway run one after the other in one test function, holding
//! [`crate::GATEWAY`] alone (every other S3 test holds it shared), and a guard starts the
//! gateway again when they end, failed or not.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use hipfile::{AsDevice, Driver, DriverOptions};
use hipfile_hip::sim::SimRuntime;
use hipfile_remote::{RemoteError, RemoteFile, RemoteOptions, RemoteWriter, PATH_NAME};
use hipfile_testkit::http_proxy::{Fault, FaultProxy, Rule};

use crate::s3::{ceph_env, quick, TestBucket, MIB};
use crate::{driver, random_bytes};

/// A driver on a simulated GPU counting statistics (level 1), so the remote path shows in them.
fn counting_driver() -> Driver {
    let mut options = DriverOptions::with_runtime(Arc::new(SimRuntime::default()));
    options.env.stats_level = Some(1);
    Driver::with_options(options).unwrap()
}

/// Wait until `done` says yes, for at most `limit`.
fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "waited {limit:?} for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The RADOS Gateway of the cluster `target/ceph/env` names: `radosgw -n client.rgw.x` with
/// the cluster's `ceph.conf`, its pid file in `run/`, as `cargo xtask ceph up` starts it.
struct Gateway {
    dir: PathBuf,
    addr: String,
}

impl Gateway {
    fn of(bucket: &TestBucket) -> Gateway {
        let dir = ceph_env()
            .get("HIPFILE_CEPH_DIR")
            .cloned()
            .or_else(|| std::env::var("HIPFILE_CEPH_DIR").ok())
            .expect("HIPFILE_CEPH_DIR (target/ceph/env): the kill tests need the cluster's dir");
        Gateway {
            dir: dir.into(),
            addr: bucket.gateway_addr(),
        }
    }

    fn pid(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.dir.join("run/client.rgw.x.pid")).ok()?;
        text.trim().parse().ok()
    }

    /// Whether the gateway answers `GET /` with 200.
    fn answers(&self) -> bool {
        ureq::get(&format!("http://{}/", self.addr))
            .config()
            .http_status_as_error(false)
            .timeout_global(Some(Duration::from_secs(2)))
            .build()
            .call()
            .is_ok_and(|r| r.status().as_u16() == 200)
    }

    /// SIGKILL, and wait until the port refuses connections.
    fn kill(&self) {
        let pid = self.pid().expect("the gateway's pid file");
        let status = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -KILL {pid}");
        wait_until("the gateway to die", Duration::from_secs(10), || {
            std::net::TcpStream::connect(&self.addr).is_err()
        });
    }

    /// Start it as `cargo xtask ceph up` does, and wait until it answers.
    fn start(&self) {
        let out = std::fs::File::create(self.dir.join("log/client.rgw.x.out")).unwrap();
        let status = Command::new("radosgw")
            .arg("-c")
            .arg(self.dir.join("ceph.conf"))
            .args(["-n", "client.rgw.x"])
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .status()
            .expect("running radosgw");
        assert!(status.success(), "radosgw -n client.rgw.x: {status}");
        wait_until("the gateway to answer", Duration::from_secs(60), || {
            self.answers()
        });
    }
}

/// Starts the gateway again when dropped, if it does not answer: a kill test that fails leaves
/// the cluster whole for the tests after it.
struct Restarts<'g>(&'g Gateway);

impl Drop for Restarts<'_> {
    fn drop(&mut self) {
        if !self.0.answers() {
            self.0.start();
        }
    }
}

#[test]
fn the_gateway_killed_mid_read_and_mid_upload_fails_them_and_serves_again_once_restarted() {
    let _alone = crate::GATEWAY
        .write()
        .unwrap_or_else(PoisonError::into_inner);
    let bucket = TestBucket::new("killed");
    let gateway = Gateway::of(&bucket);
    let _restarts = Restarts(&gateway);
    killed_mid_read(&bucket, &gateway);
    killed_mid_upload(&bucket, &gateway);
}

/// A 256 MiB read into device memory, one GET of it stalled by the proxy after 1 MiB while the
/// gateway is killed: the read fails, naming the object; restarted, the same read succeeds.
fn killed_mid_read(bucket: &TestBucket, gateway: &Gateway) {
    let driver = driver();
    let len = 256 * MIB;
    let bytes = random_bytes(len, 0xdead);
    bucket.put(&driver, "big.bin", &bytes);
    let proxy = FaultProxy::start(bucket.gateway_addr()).unwrap();
    // Pieces of 32 MiB: far more than the socket buffers between the gateway and the proxy can
    // hold, so the stalled GET's body cannot have left the gateway whole before the kill.
    let file = RemoteFile::open_with(
        &driver,
        &bucket.url("big.bin"),
        quick(32 * MIB, 4),
        Some(&bucket.through(&proxy)),
    )
    .unwrap();
    proxy.inject(
        Rule::new(Fault::StallBody {
            after: MIB as u64,
            pause: Duration::from_millis(1500),
        })
        .method("GET"),
    );
    let pending = file.pread(driver.alloc(len).unwrap(), 0);
    wait_until("1 MiB read", Duration::from_secs(30), || {
        file.counts().read_bytes >= MIB as u64
    });
    assert_eq!(
        proxy.counts().faulted,
        1,
        "the stall is on a GET of this read"
    );
    gateway.kill();
    let e = pending.wait().unwrap_err();
    // Through the proxy the dead gateway is a 502 (the proxy cannot connect); straight to it, a
    // refused connection.
    assert!(
        matches!(
            e,
            RemoteError::Server { status: 502, .. } | RemoteError::Connection { .. }
        ),
        "{e}"
    );
    assert!(e.to_string().contains(&bucket.url("big.bin")), "{e}");
    let errno = hipfile::Error::from(e).errno();
    assert!(
        errno == Some(libc::EIO) || errno == Some(libc::ECONNRESET),
        "{errno:?}"
    );
    let counts = file.counts();
    assert!(counts.errors >= 1 && counts.retries >= 2, "{counts:?}");

    gateway.start();
    let mut dst = driver.alloc(len).unwrap();
    assert_eq!(file.read(&mut dst, 0).unwrap(), len);
    assert!(
        dst.to_vec().unwrap() == bytes,
        "the read after restart is whole"
    );
}

/// A 48 MiB upload from device memory: two 20 MiB parts uploaded, the gateway killed, `finish`
/// fails and says the abort could not reach the gateway, naming the upload left; restarted,
/// no object is visible and the upload is there until aborted.
fn killed_mid_upload(bucket: &TestBucket, gateway: &Gateway) {
    let driver = driver();
    let bytes = random_bytes(48 * MIB, 0x48);
    let mut src = driver.alloc(bytes.len()).unwrap();
    src.write_at(0, &bytes).unwrap();
    let key = "upload.bin";
    let mut writer = RemoteWriter::create_with(
        &driver,
        &bucket.url(key),
        quick(20 * MIB, 2),
        Some(&bucket.aws),
    )
    .unwrap();
    assert_eq!(writer.write(&src).unwrap(), bytes.len());
    assert_eq!(bucket.uploads().len(), 1, "one upload in progress");
    gateway.kill();
    let e = writer.finish().unwrap_err();
    let RemoteError::UploadLeft {
        failure,
        upload_id,
        abort,
    } = &e
    else {
        panic!("expected the abort to fail too: {e}");
    };
    assert!(
        matches!(**failure, RemoteError::Connection { .. }),
        "{failure}"
    );
    assert!(matches!(**abort, RemoteError::Connection { .. }), "{abort}");
    assert!(e.to_string().contains("parts stay on the server"), "{e}");
    assert_eq!(
        hipfile::Error::from(RemoteError::UploadLeft {
            failure: Box::new(RemoteError::Connection {
                url: String::new(),
                attempts: 1,
                detail: String::new()
            }),
            upload_id: upload_id.clone(),
            abort: Box::new(RemoteError::Config(String::new())),
        })
        .errno(),
        Some(libc::ECONNRESET),
        "reads as the write's failure"
    );

    gateway.start();
    bucket.assert_absent(&driver, key);
    assert_eq!(
        bucket.uploads(),
        std::slice::from_ref(upload_id),
        "the upload the error names"
    );
    bucket.abort(key, upload_id);
    assert!(bucket.uploads().is_empty());
}

#[test]
fn a_writer_failing_with_the_gateway_up_aborts_its_upload_and_leaves_no_object() {
    let _up = crate::gateway_shared();
    let bucket = TestBucket::new("cutpart");
    let proxy = FaultProxy::start(bucket.gateway_addr()).unwrap();
    let driver = driver();
    // Every attempt of part 2 is cut after 1 MiB of its body.
    proxy.inject(
        Rule::new(Fault::CutRequest { after: MIB as u64 })
            .method("PUT")
            .target_contains("partNumber=2")
            .always(),
    );
    // The abort's answer held back past the read timeout: the gateway aborted the upload, the
    // writer does not know, tries again and hears NoSuchUpload, which means it is gone.
    proxy.inject(Rule::new(Fault::DelayHead(Duration::from_millis(1500))).method("DELETE"));
    let key = "cut.bin";
    let options = RemoteOptions {
        read_timeout: Duration::from_millis(500),
        ..quick(8 * MIB, 2)
    };
    let mut writer = RemoteWriter::create_with(
        &driver,
        &bucket.url(key),
        options,
        Some(&bucket.through(&proxy)),
    )
    .unwrap();
    let e = writer.write_host(&random_bytes(24 * MIB, 7)).unwrap_err();
    assert!(
        matches!(e, RemoteError::Connection { attempts: 3, .. }),
        "{e}"
    );
    let cut = proxy
        .fired()
        .iter()
        .filter(|f| f.target.contains("partNumber=2"))
        .count();
    assert_eq!(cut, 3, "part 2 tried three times");
    let deletes = proxy
        .fired()
        .iter()
        .filter(|f| f.method == "DELETE")
        .count();
    assert_eq!(deletes, 1, "the abort's first answer was held back");
    assert_eq!(proxy.fired().len(), 4, "{:?}", proxy.fired());
    let refused = writer.write_host(b"more").unwrap_err();
    assert!(matches!(refused, RemoteError::Unsupported(_)), "{refused}");
    assert!(bucket.uploads().is_empty(), "the upload was aborted");
    bucket.assert_absent(&driver, key);
}

#[test]
fn a_slow_gateway_times_out_after_the_retries_and_a_longer_timeout_reads_through() {
    let _up = crate::gateway_shared();
    let bucket = TestBucket::new("slow");
    let driver = counting_driver();
    let bytes = random_bytes(3 * MIB, 0x510);
    bucket.put(&driver, "slow.bin", &bytes);
    let proxy = FaultProxy::start(bucket.gateway_addr()).unwrap();
    let via_proxy = bucket.through(&proxy);
    let url = bucket.url("slow.bin");

    let short = RemoteOptions {
        read_timeout: Duration::from_millis(300),
        ..quick(4 * MIB, 1)
    };
    let file = RemoteFile::open_with(&driver, &url, short, Some(&via_proxy)).unwrap();
    let before = file.counts();
    proxy.inject(
        Rule::new(Fault::DelayHead(Duration::from_millis(1000)))
            .method("GET")
            .always(),
    );
    let mut dst = driver.alloc(bytes.len()).unwrap();
    let e = file.read(&mut dst, 0).unwrap_err();
    assert!(matches!(e, RemoteError::Timeout { attempts: 3, .. }), "{e}");
    assert_eq!(
        hipfile::Error::from(e).errno(),
        Some(libc::ETIMEDOUT),
        "a timeout reads as ETIMEDOUT"
    );
    let after = file.counts();
    assert_eq!(after.requests - before.requests, 3);
    assert_eq!(after.retries - before.retries, 2);
    assert_eq!(after.errors - before.errors, 1);
    let remote = driver.stats().unwrap();
    let remote = remote.side_path(PATH_NAME).unwrap();
    assert_eq!(remote.get("retries"), after.retries);
    assert_eq!(remote.get("errors"), after.errors);
    proxy.clear();

    // The timeout as a setting of the environment: longer than the delay, the read succeeds.
    std::env::set_var("HIPFILE_REMOTE_READ_TIMEOUT_MS", "3000");
    let from_env = RemoteOptions::from_env();
    std::env::remove_var("HIPFILE_REMOTE_READ_TIMEOUT_MS");
    let patient = RemoteOptions {
        retries: 0,
        ..from_env.unwrap()
    };
    assert_eq!(patient.read_timeout, Duration::from_secs(3));
    let file = RemoteFile::open_with(&driver, &url, patient, Some(&via_proxy)).unwrap();
    let faulted = proxy.counts().faulted;
    proxy.inject(Rule::new(Fault::DelayHead(Duration::from_millis(800))).method("GET"));
    let started = Instant::now();
    assert_eq!(file.read(&mut dst, 0).unwrap(), bytes.len());
    assert!(started.elapsed() >= Duration::from_millis(800));
    assert!(dst.to_vec().unwrap() == bytes);
    assert_eq!(proxy.counts().faulted, faulted + 1);
}

#[test]
fn transient_5xx_answers_are_retried_counted_and_the_bytes_land_whole() {
    let _up = crate::gateway_shared();
    let bucket = TestBucket::new("transient");
    let driver = counting_driver();
    let bytes = random_bytes(20 * MIB + 77, 0x503);
    bucket.put(&driver, "read.bin", &bytes);
    let proxy = FaultProxy::start(bucket.gateway_addr()).unwrap();
    let via_proxy = bucket.through(&proxy);

    let file = RemoteFile::open_with(
        &driver,
        &bucket.url("read.bin"),
        quick(4 * MIB, 4),
        Some(&via_proxy),
    )
    .unwrap();
    let before = file.counts();
    proxy.inject(Rule::new(Fault::status(503)).method("GET").times(3));
    let mut dst = driver.alloc(bytes.len()).unwrap();
    assert_eq!(file.read(&mut dst, 0).unwrap(), bytes.len());
    assert!(dst.to_vec().unwrap() == bytes);
    let after = file.counts();
    assert_eq!(after.retries - before.retries, 3, "{after:?}");
    assert_eq!(after.errors, 0);
    assert_eq!(after.read_bytes - before.read_bytes, bytes.len() as u64);
    assert_eq!(proxy.counts().faulted, 3);

    // One part of an upload answered 500 once.
    proxy.inject(
        Rule::new(Fault::status(500))
            .method("PUT")
            .target_contains("partNumber=2"),
    );
    let written = random_bytes(17 * MIB, 0x500);
    let mut src = driver.alloc(written.len()).unwrap();
    src.write_at(0, &written).unwrap();
    let mut w = RemoteWriter::create_with(
        &driver,
        &bucket.url("write.bin"),
        quick(8 * MIB, 3),
        Some(&via_proxy),
    )
    .unwrap();
    w.write(src.slice(..).unwrap()).unwrap();
    assert_eq!(w.finish().unwrap(), written.len() as u64);
    assert_eq!(proxy.counts().faulted, 4);
    let back = RemoteFile::open_with(
        &driver,
        &bucket.url("write.bin"),
        quick(8 * MIB, 3),
        Some(&bucket.aws),
    )
    .unwrap();
    let mut host = vec![0u8; written.len()];
    assert_eq!(back.read_host(&mut host, 0).unwrap(), written.len());
    assert!(host == written);

    let counts = back.counts();
    assert_eq!(counts.retries - after.retries, 1, "{counts:?}");
    assert_eq!(counts.errors, 0);
    // The driver's statistics show the same counts as the path `remote` (`hipfile stats`).
    let snapshot = driver.stats().unwrap();
    let remote = snapshot.side_path(PATH_NAME).unwrap();
    assert_eq!(remote.get("retries"), counts.retries);
    assert_eq!(remote.get("requests"), counts.requests);
    assert_eq!(remote.get("read_bytes"), counts.read_bytes);
    assert_eq!(remote.get("written_bytes"), counts.written_bytes);
    assert_eq!(remote.get("errors"), 0);
}

#[test]
fn a_byte_flipped_on_an_upload_is_refused_by_the_gateway_and_never_stored() {
    let _up = crate::gateway_shared();
    let bucket = TestBucket::new("flipup");
    let driver = counting_driver();
    let proxy = FaultProxy::start(bucket.gateway_addr()).unwrap();
    let via_proxy = bucket.through(&proxy);
    let bytes = random_bytes(12 * MIB, 0xf11);
    let flip_part_2 = || {
        Rule::new(Fault::FlipRequestBodyByte { offset: 1000 })
            .method("PUT")
            .target_contains("partNumber=2")
    };
    let write = |key: &str, options: RemoteOptions| {
        let mut w = RemoteWriter::create_with(&driver, &bucket.url(key), options, Some(&via_proxy))
            .unwrap();
        w.write_host(&bytes)?;
        w.finish()
    };
    let read = |key: &str| {
        let f = RemoteFile::open_with(
            &driver,
            &bucket.url(key),
            quick(8 * MIB, 2),
            Some(&bucket.aws),
        )
        .unwrap();
        let mut host = vec![0u8; bytes.len()];
        assert_eq!(f.read_host(&mut host, 0).unwrap(), bytes.len());
        host
    };

    // Once: the gateway answers BadDigest, the part is sent again, and the object is whole.
    proxy.inject(flip_part_2());
    assert_eq!(
        write("once.bin", quick(6 * MIB, 2)).unwrap(),
        bytes.len() as u64
    );
    assert!(read("once.bin") == bytes);
    let stats = driver.stats().unwrap();
    assert_eq!(stats.side_path(PATH_NAME).unwrap().get("retries"), 1);

    // On every attempt: the write fails as a checksum mismatch, and nothing is stored.
    proxy.inject(flip_part_2().always());
    let e = write("always.bin", quick(6 * MIB, 2)).unwrap_err();
    assert!(matches!(e, RemoteError::ChecksumMismatch { .. }), "{e}");
    assert!(e.to_string().contains("BadDigest"), "{e}");
    assert_eq!(hipfile::Error::from(e).errno(), Some(libc::EBADMSG));
    assert!(bucket.uploads().is_empty(), "the upload was aborted");
    bucket.assert_absent(&driver, "always.bin");
    proxy.clear();

    // A whole object in one PUT is checked the same way.
    proxy.inject(
        Rule::new(Fault::FlipRequestBodyByte { offset: 5 })
            .method("PUT")
            .always(),
    );
    let e = write("single.bin", quick(16 * MIB, 1)).unwrap_err();
    assert!(matches!(e, RemoteError::ChecksumMismatch { .. }), "{e}");
    bucket.assert_absent(&driver, "single.bin");
    proxy.clear();

    // What the checksum guards against: without it, the flipped byte is stored.
    proxy.inject(flip_part_2());
    let unchecked = RemoteOptions {
        checksums: false,
        ..quick(6 * MIB, 2)
    };
    write("unchecked.bin", unchecked).unwrap();
    let stored = read("unchecked.bin");
    let differ: Vec<usize> = (0..bytes.len())
        .filter(|&i| stored[i] != bytes[i])
        .collect();
    assert_eq!(differ, [6 * MIB + 1000]);
}

#[test]
fn a_byte_flipped_on_a_whole_object_read_is_a_checksum_mismatch_when_reads_are_verified() {
    let _up = crate::gateway_shared();
    let bucket = TestBucket::new("flipread");
    let driver = counting_driver();
    // Written in one PUT (smaller than a part): its ETag is its MD5.
    let bytes = random_bytes(6 * MIB + 3, 0xf12);
    let single = RemoteOptions {
        checksums: false,
        ..quick(8 * MIB, 1)
    };
    let mut w = RemoteWriter::create_with(
        &driver,
        &bucket.url("single.bin"),
        single,
        Some(&bucket.aws),
    )
    .unwrap();
    w.write_host(&bytes).unwrap();
    w.finish().unwrap();
    let proxy = FaultProxy::start(bucket.gateway_addr()).unwrap();
    let via_proxy = bucket.through(&proxy);
    // 1 MiB pieces on 3 connections: seven GETs, hashed in object order as they arrive.
    let verified = RemoteOptions {
        verify_reads: true,
        ..quick(MIB, 3)
    };
    let file = RemoteFile::open_with(
        &driver,
        &bucket.url("single.bin"),
        verified.clone(),
        Some(&via_proxy),
    )
    .unwrap();
    let mut dst = driver.alloc(bytes.len()).unwrap();
    assert_eq!(file.read(&mut dst, 0).unwrap(), bytes.len());
    assert!(dst.to_vec().unwrap() == bytes);
    let mut host = vec![0u8; bytes.len()];
    assert_eq!(file.read_host(&mut host, 0).unwrap(), bytes.len());

    for device in [true, false] {
        proxy.inject(Rule::new(Fault::FlipBodyByte { offset: 4321 }).method("GET"));
        let e = if device {
            file.read(&mut dst, 0).unwrap_err()
        } else {
            file.read_host(&mut host, 0).unwrap_err()
        };
        assert!(matches!(e, RemoteError::ChecksumMismatch { .. }), "{e}");
        assert_eq!(hipfile::Error::from(e).errno(), Some(libc::EBADMSG));
    }
    assert_eq!(file.counts().errors, 2);
    // A part of the object has no checksum to check: the flipped byte comes through.
    proxy.inject(Rule::new(Fault::FlipBodyByte { offset: 0 }).method("GET"));
    let mut part = vec![0u8; 100];
    assert_eq!(file.read_host(&mut part, 10).unwrap(), 100);
    assert_eq!(part[0], !bytes[10]);

    // A multipart object's ETag is no MD5 of its bytes: nothing to check, and no false alarm.
    let multi = random_bytes(11 * MIB, 0xf13);
    bucket.put(&driver, "multi.bin", &multi);
    let file = RemoteFile::open_with(
        &driver,
        &bucket.url("multi.bin"),
        verified,
        Some(&via_proxy),
    )
    .unwrap();
    let mut dst = driver.alloc(multi.len()).unwrap();
    assert_eq!(file.read(&mut dst, 0).unwrap(), multi.len());
    assert!(dst.to_vec().unwrap() == multi);
}

#[test]
fn sixteen_readers_on_one_driver_read_two_objects_at_once_and_ranges_past_the_end() {
    let _up = crate::gateway_shared();
    let bucket = TestBucket::new("many");
    let driver = driver();
    let objects = [random_bytes(64 * MIB, 0x64a), random_bytes(64 * MIB, 0x64b)];
    bucket.put(&driver, "a.bin", &objects[0]);
    bucket.put(&driver, "b.bin", &objects[1]);
    let keys = ["a.bin", "b.bin"];
    std::thread::scope(|s| {
        for t in 0..16usize {
            let (driver, bucket, objects) = (&driver, &bucket, &objects);
            s.spawn(move || {
                let file = RemoteFile::open_with(
                    driver,
                    &bucket.url(keys[t % 2]),
                    quick(2 * MIB, 3),
                    Some(&bucket.aws),
                )
                .unwrap();
                let offset = t * 3 * MIB + t * 4097;
                let len = 16 * MIB + t * 1000;
                let mut dst = driver.alloc(len).unwrap();
                assert_eq!(file.read(&mut dst, offset as u64).unwrap(), len);
                let expected = &objects[t % 2][offset..offset + len];
                assert!(dst.to_vec().unwrap() == expected, "reader {t}");
            });
        }
    });
    let file = RemoteFile::open_with(
        &driver,
        &bucket.url("a.bin"),
        quick(2 * MIB, 3),
        Some(&bucket.aws),
    )
    .unwrap();
    let size = file.nbytes();
    assert_eq!(size, 64 * MIB as u64);
    let mut dst = driver.alloc(3 * MIB).unwrap();
    // Straddling the end: the bytes up to it.
    assert_eq!(file.read(&mut dst, size - 1000).unwrap(), 1000);
    assert!(dst.to_vec().unwrap()[..1000] == objects[0][64 * MIB - 1000..]);
    // At and past the end: nothing, no request.
    let requests = file.counts().requests;
    assert_eq!(file.read(&mut dst, size).unwrap(), 0);
    assert_eq!(file.read(&mut dst, size + 5).unwrap(), 0);
    assert_eq!(file.counts().requests, requests);
    assert_eq!(file.counts().errors, 0);
}
