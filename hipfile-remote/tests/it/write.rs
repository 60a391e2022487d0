use std::sync::atomic::Ordering;

use hipfile::AsDevice;
use hipfile_remote::{
    AwsConfig, RemoteError, RemoteFile, RemoteOptions, RemoteWriter, MIN_PART_SIZE,
};

use crate::read::driver;
use crate::server::ObjectServer;

fn aws(server: &ObjectServer) -> AwsConfig {
    AwsConfig {
        endpoint: server.endpoint.parse().unwrap(),
        path_style: true,
        region: "us-east-1".into(),
        credentials: None,
    }
}

fn parts_of_5_mib() -> RemoteOptions {
    RemoteOptions {
        request_size: 1 << 20,
        connections: 3,
        ..RemoteOptions::default()
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed ^ (i >> 13) as u8)
        .collect()
}

#[test]
fn device_writes_become_one_multipart_object_of_their_bytes_in_order() {
    let server = ObjectServer::start();
    let driver = driver();
    let bytes = pattern(3 * MIN_PART_SIZE + 12_345, 1);
    let mut src = driver.alloc(bytes.len()).unwrap();
    src.write_at(0, &bytes).unwrap();
    let url = "s3://bucket/dir/written.bin";
    let mut w =
        RemoteWriter::create_with(&driver, url, parts_of_5_mib(), Some(&aws(&server))).unwrap();
    // Cuts that do not fall on part boundaries: a head filling the pending part, whole parts
    // from device memory through staging lanes, a tail left pending.
    let cut = [0, 1_000_000, 2 * MIN_PART_SIZE + 7, bytes.len()];
    for w2 in cut.windows(2) {
        assert_eq!(
            w.write(src.slice(w2[0]..w2[1]).unwrap()).unwrap(),
            w2[1] - w2[0]
        );
    }
    assert_eq!(w.written(), bytes.len() as u64);
    assert!(
        server.object("/bucket/dir/written.bin").is_none(),
        "invisible before finish"
    );
    assert_eq!(w.finish().unwrap(), bytes.len() as u64);
    assert_eq!(server.store.parts.load(Ordering::Relaxed), 4);
    assert!(server.object("/bucket/dir/written.bin").unwrap() == bytes);

    // And it reads back through the reader.
    let file = RemoteFile::open_with(&driver, url, parts_of_5_mib(), Some(&aws(&server))).unwrap();
    let mut dst = driver.alloc(bytes.len()).unwrap();
    assert_eq!(file.read(&mut dst, 0).unwrap(), bytes.len());
    assert!(dst.to_vec().unwrap() == bytes);
}

#[test]
fn host_writes_upload_whole_parts_from_the_callers_memory() {
    let server = ObjectServer::start();
    let bytes = pattern(2 * MIN_PART_SIZE + 99, 2);
    let mut w = RemoteWriter::create_with(
        &driver(),
        "s3://bucket/h",
        parts_of_5_mib(),
        Some(&aws(&server)),
    )
    .unwrap();
    for piece in bytes.chunks(3 << 20) {
        w.write_host(piece).unwrap();
    }
    assert_eq!(w.finish().unwrap(), bytes.len() as u64);
    assert_eq!(server.store.parts.load(Ordering::Relaxed), 3);
    assert!(server.object("/bucket/h").unwrap() == bytes);
}

#[test]
fn an_object_smaller_than_a_part_is_one_put() {
    let server = ObjectServer::start();
    let driver = driver();
    let mut src = driver.alloc(1000).unwrap();
    src.fill(9).unwrap();
    let mut w = RemoteWriter::create_with(
        &driver,
        "s3://bucket/small",
        parts_of_5_mib(),
        Some(&aws(&server)),
    )
    .unwrap();
    w.write(&src).unwrap();
    w.write_host(b"tail").unwrap();
    assert_eq!(w.finish().unwrap(), 1004);
    assert_eq!(server.store.parts.load(Ordering::Relaxed), 0);
    let object = server.object("/bucket/small").unwrap();
    assert_eq!(object[..1000], [9u8; 1000]);
    assert_eq!(&object[1000..], b"tail");
    let empty = RemoteWriter::create_with(
        &driver,
        "s3://bucket/empty",
        parts_of_5_mib(),
        Some(&aws(&server)),
    )
    .unwrap();
    assert_eq!(empty.finish().unwrap(), 0);
    assert_eq!(server.object("/bucket/empty").unwrap(), b"");
}

#[test]
fn a_writer_dropped_unfinished_aborts_its_upload_and_leaves_no_object() {
    let server = ObjectServer::start();
    let mut w = RemoteWriter::create_with(
        &driver(),
        "s3://bucket/abandoned",
        parts_of_5_mib(),
        Some(&aws(&server)),
    )
    .unwrap();
    w.write_host(&pattern(MIN_PART_SIZE + 1, 3)).unwrap();
    assert_eq!(server.store.uploads.lock().unwrap().len(), 1);
    drop(w);
    assert_eq!(server.store.aborts.load(Ordering::Relaxed), 1);
    assert!(server.store.uploads.lock().unwrap().is_empty());
    assert!(server.object("/bucket/abandoned").is_none());
}

#[test]
fn a_part_whose_etag_is_not_its_md5_fails_the_write_and_aborts_the_upload() {
    let server = ObjectServer::start();
    server.store.wrong_etags.store(true, Ordering::Relaxed);
    let mut w = RemoteWriter::create_with(
        &driver(),
        "s3://bucket/bad",
        parts_of_5_mib(),
        Some(&aws(&server)),
    )
    .unwrap();
    let e = w.write_host(&pattern(MIN_PART_SIZE, 4)).unwrap_err();
    assert!(matches!(e, RemoteError::ChecksumMismatch { .. }), "{e}");
    assert_eq!(server.store.aborts.load(Ordering::Relaxed), 1);
    assert!(matches!(
        w.write_host(b"more"),
        Err(RemoteError::Unsupported(_))
    ));
    assert!(w.finish().is_err());
    assert!(server.object("/bucket/bad").is_none());

    // With checksums off the ETag is not checked.
    let options = RemoteOptions {
        checksums: false,
        ..parts_of_5_mib()
    };
    let mut w = RemoteWriter::create_with(
        &driver(),
        "s3://bucket/unchecked",
        options,
        Some(&aws(&server)),
    )
    .unwrap();
    w.write_host(&pattern(MIN_PART_SIZE, 4)).unwrap();
    w.finish().unwrap();
}

#[test]
fn plain_http_objects_cannot_be_written() {
    let e = RemoteWriter::create(&driver(), "http://127.0.0.1:9/x", RemoteOptions::default())
        .unwrap_err();
    assert!(matches!(e, RemoteError::Unsupported(_)), "{e}");
}
