//! Reads and writes against a real S3 endpoint: Ceph's RADOS Gateway brought up by
//! `cargo xtask ceph up` (which writes `target/ceph/env`), or the endpoint and credentials the
//! AWS_* environment names.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use hipfile::AsDevice;
use hipfile_remote::{AwsConfig, RemoteError, RemoteFile, RemoteOptions, RemoteWriter};
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};

use crate::{driver, random_bytes};

const MIB: usize = 1 << 20;

/// `target/ceph/env` of the workspace: `KEY=VALUE` lines (an `export ` before them and quotes
/// around values allowed).
fn ceph_env() -> HashMap<String, String> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/ceph/env");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let line = line.trim();
            let line = line.strip_prefix("export ").unwrap_or(line);
            let (k, v) = line.split_once('=')?;
            Some((
                k.trim().to_string(),
                v.trim().trim_matches(['"', '\'']).to_string(),
            ))
        })
        .collect()
}

/// The endpoint's configuration: `target/ceph/env` over the process environment.
fn aws() -> AwsConfig {
    let file = ceph_env();
    let lookup = |name: &str| file.get(name).cloned().or_else(|| std::env::var(name).ok());
    assert!(
        lookup("AWS_ENDPOINT_URL_S3")
            .or_else(|| lookup("AWS_ENDPOINT_URL"))
            .is_some(),
        "no S3 endpoint: run `cargo xtask ceph up` (target/ceph/env) or set AWS_ENDPOINT_URL"
    );
    let aws = AwsConfig::from_lookup(lookup).unwrap();
    assert!(
        aws.credentials.is_some(),
        "no S3 credentials in target/ceph/env or AWS_*"
    );
    aws
}

fn bucket_of(aws: &AwsConfig, name: &str) -> (Bucket, Credentials) {
    let style = if aws.path_style {
        UrlStyle::Path
    } else {
        UrlStyle::VirtualHost
    };
    let bucket = Bucket::new(
        aws.endpoint.clone(),
        style,
        name.to_string(),
        aws.region.clone(),
    )
    .unwrap();
    let (key, secret, token) = aws.credentials.clone().unwrap();
    let credentials = match token {
        Some(t) => Credentials::new_with_token(key, secret, t),
        None => Credentials::new(key, secret),
    };
    (bucket, credentials)
}

/// A new bucket for one test (its name unique to the run).
fn new_bucket(aws: &AwsConfig, test: &str) -> String {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let name = format!("hipfile-{test}-{}-{stamp}", std::process::id());
    let (bucket, credentials) = bucket_of(aws, &name);
    let action = bucket.create_bucket(&credentials);
    let url = action.sign(Duration::from_secs(600));
    let response = ureq::put(url.as_str())
        .config()
        .http_status_as_error(false)
        .build()
        .send(action.body())
        .unwrap();
    assert_eq!(response.status().as_u16(), 200, "creating bucket {name}");
    name
}

fn options() -> RemoteOptions {
    RemoteOptions {
        request_size: 8 * MIB,
        connections: 8,
        ..RemoteOptions::default()
    }
}

#[test]
fn a_64_mib_object_written_from_device_memory_reads_back_whole() {
    let aws = aws();
    let bucket = new_bucket(&aws, "roundtrip");
    let url = format!("s3://{bucket}/dir/object.bin");
    let driver = driver();
    let bytes = random_bytes(64 * MIB + 4321, 0xce9);
    let mut src = driver.alloc(bytes.len()).unwrap();
    src.write_at(0, &bytes).unwrap();
    let mut writer = RemoteWriter::create_with(&driver, &url, options(), Some(&aws)).unwrap();
    // Two writes whose cut is not on a part boundary.
    let cut = 20 * MIB + 5;
    writer.write(src.slice(..cut).unwrap()).unwrap();
    writer.write(src.slice(cut..).unwrap()).unwrap();
    assert_eq!(writer.finish().unwrap(), bytes.len() as u64);

    let file = RemoteFile::open_with(&driver, &url, options(), Some(&aws)).unwrap();
    assert_eq!(file.nbytes(), bytes.len() as u64);
    let mut dst = driver.alloc(bytes.len()).unwrap();
    assert_eq!(file.read(&mut dst, 0).unwrap(), bytes.len());
    assert!(dst.to_vec().unwrap() == bytes);
    let mut host = vec![0u8; 3 * MIB];
    assert_eq!(
        file.read_host(&mut host, 30 * MIB as u64 + 1).unwrap(),
        3 * MIB
    );
    assert!(host[..] == bytes[30 * MIB + 1..33 * MIB + 1]);
    assert_eq!(file.counts().errors, 0);
}

#[test]
fn missing_keys_and_buckets_are_not_found() {
    let aws = aws();
    let bucket = new_bucket(&aws, "missing");
    let driver = driver();
    for url in [
        format!("s3://{bucket}/no-such-key"),
        format!("s3://{bucket}-absent/key"),
    ] {
        let e = RemoteFile::open_with(&driver, &url, options(), Some(&aws)).unwrap_err();
        assert!(matches!(e, RemoteError::NotFound { .. }), "{url}: {e}");
    }
}

#[test]
fn bad_credentials_are_access_denied() {
    let good = aws();
    let bucket = new_bucket(&good, "creds");
    let driver = driver();
    let mut w =
        RemoteWriter::create_with(&driver, &format!("s3://{bucket}/k"), options(), Some(&good))
            .unwrap();
    w.write_host(b"secret").unwrap();
    w.finish().unwrap();
    let bad = AwsConfig {
        credentials: Some(("AKIDNOTAKEY".into(), "wrong".into(), None)),
        ..good.clone()
    };
    let e = RemoteFile::open_with(&driver, &format!("s3://{bucket}/k"), options(), Some(&bad))
        .unwrap_err();
    assert!(matches!(e, RemoteError::AccessDenied { .. }), "{e}");
    let wrong_secret = AwsConfig {
        credentials: Some((good.credentials.clone().unwrap().0, "wrong".into(), None)),
        ..good
    };
    let mut w = RemoteWriter::create_with(
        &driver,
        &format!("s3://{bucket}/k2"),
        options(),
        Some(&wrong_secret),
    )
    .unwrap();
    w.write_host(b"x").unwrap();
    let e = w.finish().unwrap_err();
    assert!(matches!(e, RemoteError::AccessDenied { .. }), "{e}");
}

#[test]
fn a_writer_dropped_before_finish_leaves_no_object() {
    let aws = aws();
    let bucket = new_bucket(&aws, "abort");
    let url = format!("s3://{bucket}/abandoned");
    let driver = driver();
    let mut w = RemoteWriter::create_with(&driver, &url, options(), Some(&aws)).unwrap();
    // Two whole parts uploaded, then abandoned.
    w.write_host(&random_bytes(16 * MIB + 1, 3)).unwrap();
    drop(w);
    let e = RemoteFile::open_with(&driver, &url, options(), Some(&aws)).unwrap_err();
    assert!(matches!(e, RemoteError::NotFound { .. }), "{e}");
}
