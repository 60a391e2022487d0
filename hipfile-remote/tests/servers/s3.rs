//! Reads and writes against a real S3 endpoint: Ceph's RADOS Gateway brought up by
//! `cargo xtask ceph up` (which writes `target/ceph/env`), or the endpoint and credentials the
//! AWS_* environment names.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use hipfile::AsDevice;
use hipfile::Driver;
use hipfile_remote::{AwsConfig, RemoteError, RemoteFile, RemoteOptions, RemoteWriter};
use hipfile_testkit::http_proxy::FaultProxy;
use rusty_s3::actions::ListObjectsV2;
use rusty_s3::{Bucket, Credentials, Method, S3Action, UrlStyle};

use crate::{driver, random_bytes};

pub(crate) const MIB: usize = 1 << 20;

/// `target/ceph/env` of the workspace: `KEY=VALUE` lines (an `export ` before them and quotes
/// around values allowed).
pub(crate) fn ceph_env() -> HashMap<String, String> {
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
pub(crate) fn aws() -> AwsConfig {
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

pub(crate) fn bucket_of(aws: &AwsConfig, name: &str) -> (Bucket, Credentials) {
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
pub(crate) fn new_bucket(aws: &AwsConfig, test: &str) -> String {
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

/// Settings for failure tests: few, quick retries.
pub(crate) fn quick(request_size: usize, connections: usize) -> RemoteOptions {
    RemoteOptions {
        request_size,
        connections,
        retries: 2,
        backoff: Duration::from_millis(10),
        read_timeout: Duration::from_secs(10),
        ..RemoteOptions::default()
    }
}

/// A bucket of one test, with the requests a test makes of it directly (not through the
/// client under test): listing multipart uploads, aborting one, deleting objects.
pub(crate) struct TestBucket {
    pub(crate) aws: AwsConfig,
    pub(crate) name: String,
}

impl TestBucket {
    pub(crate) fn new(test: &str) -> TestBucket {
        let aws = aws();
        let name = new_bucket(&aws, test);
        TestBucket { aws, name }
    }

    pub(crate) fn url(&self, key: &str) -> String {
        format!("s3://{}/{key}", self.name)
    }

    /// The endpoint's configuration with `proxy` as the endpoint.
    pub(crate) fn through(&self, proxy: &FaultProxy) -> AwsConfig {
        AwsConfig {
            endpoint: proxy.url().parse().unwrap(),
            ..self.aws.clone()
        }
    }

    /// `host:port` of the gateway, for a proxy to forward to.
    pub(crate) fn gateway_addr(&self) -> String {
        let e = &self.aws.endpoint;
        format!(
            "{}:{}",
            e.host_str().unwrap(),
            e.port_or_known_default().unwrap()
        )
    }

    /// The ids of the bucket's multipart uploads in progress.
    pub(crate) fn uploads(&self) -> Vec<String> {
        self.uploads_by_key()
            .into_iter()
            .map(|(_, id)| id)
            .collect()
    }

    /// The bucket's multipart uploads in progress, key and id (S3's ListMultipartUploads,
    /// `GET /bucket?uploads`, signed here: rusty-s3 has no action for it).
    fn uploads_by_key(&self) -> Vec<(String, String)> {
        let (bucket, _) = bucket_of(&self.aws, &self.name);
        let (key, secret, token) = self.aws.credentials.clone().unwrap();
        let url = rusty_s3::signing::sign(
            &jiff::Timestamp::now(),
            Method::Get,
            bucket.base_url().clone(),
            &key,
            &secret,
            token.as_deref(),
            &self.aws.region,
            600,
            [("uploads", "")].into_iter(),
            std::iter::empty(),
        );
        let mut response = ureq::get(url.as_str())
            .config()
            .http_status_as_error(false)
            .build()
            .call()
            .unwrap();
        let text = response.body_mut().read_to_string().unwrap();
        assert_eq!(
            response.status().as_u16(),
            200,
            "ListMultipartUploads: {text}"
        );
        let field = |upload: &str, name: &str| -> Option<String> {
            let from = upload.find(&format!("<{name}>"))? + name.len() + 2;
            let to = upload[from..].find(&format!("</{name}>"))? + from;
            Some(upload[from..to].to_string())
        };
        text.split("<Upload>")
            .skip(1)
            .filter_map(|u| Some((field(u, "Key")?, field(u, "UploadId")?)))
            .collect()
    }

    pub(crate) fn abort(&self, key: &str, upload_id: &str) {
        let (bucket, credentials) = bucket_of(&self.aws, &self.name);
        let url = bucket
            .abort_multipart_upload(Some(&credentials), key, upload_id)
            .sign(Duration::from_secs(600));
        let status = ureq::delete(url.as_str())
            .config()
            .http_status_as_error(false)
            .build()
            .call()
            .unwrap()
            .status()
            .as_u16();
        assert_eq!(status, 204, "aborting upload {upload_id}");
    }

    /// Write `bytes` at `key` straight to the gateway (no checksums: setting up, not testing).
    pub(crate) fn put(&self, driver: &Driver, key: &str, bytes: &[u8]) {
        let options = RemoteOptions {
            checksums: false,
            ..quick(16 * MIB, 8)
        };
        let mut w =
            RemoteWriter::create_with(driver, &self.url(key), options, Some(&self.aws)).unwrap();
        w.write_host(bytes).unwrap();
        assert_eq!(w.finish().unwrap(), bytes.len() as u64);
    }

    /// Whether an object is visible at `key` (a HEAD through the client).
    pub(crate) fn assert_absent(&self, driver: &Driver, key: &str) {
        match RemoteFile::open_with(driver, &self.url(key), quick(MIB, 1), Some(&self.aws)) {
            Err(RemoteError::NotFound { .. }) => {}
            Err(e) => panic!("{key}: expected NotFound, got {e}"),
            Ok(f) => panic!("{key}: an object of {} bytes is visible", f.nbytes()),
        }
    }
}

impl Drop for TestBucket {
    /// Empty the bucket, remove it, and have the gateway free the space now: the OSD keeps
    /// objects in memory, capped, and the gateway frees deleted objects' data only at its
    /// garbage collection (hours later by default), so the tests would fill it in a few runs.
    fn drop(&mut self) {
        let (bucket, credentials) = bucket_of(&self.aws, &self.name);
        let call = |method: &str, url: url::Url| {
            let agent = ureq::Agent::new_with_config(
                ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(Duration::from_secs(10)))
                    .build(),
            );
            let request = match method {
                "GET" => agent.get(url.as_str()).call(),
                _ => agent.delete(url.as_str()).call(),
            };
            request
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
        };
        for (key, id) in self.uploads_by_key() {
            let action = bucket.abort_multipart_upload(Some(&credentials), &key, &id);
            call("DELETE", action.sign(Duration::from_secs(600)));
        }
        let listed = call(
            "GET",
            bucket
                .list_objects_v2(Some(&credentials))
                .sign(Duration::from_secs(600)),
        );
        let listed = listed.and_then(|text| ListObjectsV2::parse_response(&text).ok());
        for object in listed.map(|l| l.contents).unwrap_or_default() {
            let action = bucket.delete_object(Some(&credentials), &object.key);
            call("DELETE", action.sign(Duration::from_secs(600)));
        }
        call(
            "DELETE",
            bucket
                .delete_bucket(&credentials)
                .sign(Duration::from_secs(600)),
        );
        if let Some(conf) = ceph_env().get("CEPH_CONF") {
            let _ = std::process::Command::new("radosgw-admin")
                .args(["-c", conf, "gc", "process", "--include-all"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
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
    let _up = crate::gateway_shared();
    let made = TestBucket::new("roundtrip");
    let (aws, bucket) = (made.aws.clone(), made.name.clone());
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
    let _up = crate::gateway_shared();
    let made = TestBucket::new("missing");
    let (aws, bucket) = (made.aws.clone(), made.name.clone());
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
    let _up = crate::gateway_shared();
    let made = TestBucket::new("creds");
    let (good, bucket) = (made.aws.clone(), made.name.clone());
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
    let _up = crate::gateway_shared();
    let made = TestBucket::new("abort");
    let (aws, bucket) = (made.aws.clone(), made.name.clone());
    let url = format!("s3://{bucket}/abandoned");
    let driver = driver();
    let mut w = RemoteWriter::create_with(&driver, &url, options(), Some(&aws)).unwrap();
    // Two whole parts uploaded, then abandoned.
    w.write_host(&random_bytes(16 * MIB + 1, 3)).unwrap();
    drop(w);
    let e = RemoteFile::open_with(&driver, &url, options(), Some(&aws)).unwrap_err();
    assert!(matches!(e, RemoteError::NotFound { .. }), "{e}");
}
