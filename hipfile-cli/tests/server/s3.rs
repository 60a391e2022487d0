//! `hipfile cp` to and from `s3://` objects and `hipfile bench --remote s3://...` against a real
//! S3 endpoint: the one `cargo xtask ceph up` wrote to `target/ceph/env`, else the one the
//! AWS_* environment names. Each test makes a bucket of its own.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};
use serde_json::Value;

use crate::{failed, pattern, succeeded};

/// The AWS_* variables: `target/ceph/env` of the workspace over the process environment.
fn aws_env() -> HashMap<String, String> {
    let mut vars: HashMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("AWS_"))
        .collect();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/ceph/env");
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        let line = line.trim();
        let line = line.strip_prefix("export ").unwrap_or(line);
        if let Some((k, v)) = line.split_once('=') {
            if k.starts_with("AWS_") {
                vars.insert(k.into(), v.trim_matches(['"', '\'']).into());
            }
        }
    }
    for needed in [
        "AWS_ENDPOINT_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    ] {
        assert!(
            vars.contains_key(needed),
            "no {needed}: run `cargo xtask ceph up` (target/ceph/env) or set the AWS_* variables"
        );
    }
    vars
}

/// `hipfile ARGS` on the sim, with the endpoint's variables.
fn hipfile(env: &HashMap<String, String>, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hipfile"))
        .args(args)
        .env("HIPFILE_PLATFORM", "sim")
        .envs(env)
        .output()
        .unwrap()
}

/// A new bucket of the endpoint, for one test.
fn new_bucket(env: &HashMap<String, String>, test: &str) -> String {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let name = format!("hipfile-cli-{test}-{}-{stamp}", std::process::id());
    let region = env.get("AWS_REGION").cloned().unwrap_or("us-east-1".into());
    let bucket = Bucket::new(
        env["AWS_ENDPOINT_URL"].parse().unwrap(),
        UrlStyle::Path,
        name.clone(),
        region,
    )
    .unwrap();
    let credentials = Credentials::new(
        env["AWS_ACCESS_KEY_ID"].clone(),
        env["AWS_SECRET_ACCESS_KEY"].clone(),
    );
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

fn json_of(out: &Output) -> Value {
    serde_json::from_str(succeeded(out).trim()).unwrap()
}

#[test]
fn a_file_goes_up_as_a_multipart_upload_and_comes_back_byte_for_byte() {
    let env = aws_env();
    let bucket = new_bucket(&env, "roundtrip");
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.bin");
    // Three parts of 5 MiB and a tail, through a device buffer of 4 MiB.
    let bytes = pattern((15 << 20) + 12_345, 11);
    std::fs::write(&src, &bytes).unwrap();
    let url = format!("s3://{bucket}/dir/object.bin");
    let up = json_of(&hipfile(
        &env,
        &[
            "cp",
            src.to_str().unwrap(),
            &url,
            "--verify",
            "--json",
            "--chunk",
            "4M",
            "--request-size",
            "5M",
        ],
    ));
    assert_eq!(up["bytes"], bytes.len(), "{up}");
    assert_eq!(up["verified"], true, "{up}");
    assert_eq!(up["destination"], url.as_str(), "{up}");
    assert_eq!(up["remote"]["written_bytes"], bytes.len(), "{up}");
    // The lookup of the new object (a 404) is not counted as the copy's.
    assert_eq!(up["remote"]["errors"], 0, "{up}");

    let back = dir.path().join("back.bin");
    let down = json_of(&hipfile(
        &env,
        &["cp", &url, back.to_str().unwrap(), "--verify", "--json"],
    ));
    assert_eq!(down["bytes"], bytes.len(), "{down}");
    assert!(std::fs::read(&back).unwrap() == bytes);

    // Object to object, through GPU memory.
    let copy = format!("s3://{bucket}/copy.bin");
    let across = json_of(&hipfile(&env, &["cp", &url, &copy, "--verify", "--json"]));
    assert_eq!(across["bytes"], bytes.len(), "{across}");

    let bench = succeeded(&hipfile(
        &env,
        &["bench", "--remote", &copy, "--repeat", "1", "--json"],
    ));
    let summary: Value = serde_json::from_str(bench.lines().last().unwrap()).unwrap();
    assert_eq!(summary["verified"], true, "{summary}");
    assert_eq!(summary["bytes"], bytes.len(), "{summary}");
}

#[test]
fn an_existing_object_is_replaced_only_with_force() {
    let env = aws_env();
    let bucket = new_bucket(&env, "force");
    let dir = tempfile::tempdir().unwrap();
    let (a, b, back) = (
        dir.path().join("a"),
        dir.path().join("b"),
        dir.path().join("back"),
    );
    std::fs::write(&a, b"first").unwrap();
    std::fs::write(&b, b"second, longer").unwrap();
    let url = format!("s3://{bucket}/k");
    succeeded(&hipfile(&env, &["cp", a.to_str().unwrap(), &url]));
    let e = failed(&hipfile(&env, &["cp", b.to_str().unwrap(), &url]));
    assert!(e.contains("exists: --force replaces it"), "{e}");
    succeeded(&hipfile(&env, &["cp", &url, back.to_str().unwrap()]));
    assert_eq!(std::fs::read(&back).unwrap(), b"first");
    succeeded(&hipfile(
        &env,
        &["cp", "--force", b.to_str().unwrap(), &url],
    ));
    succeeded(&hipfile(&env, &["cp", "-f", &url, back.to_str().unwrap()]));
    assert_eq!(std::fs::read(&back).unwrap(), b"second, longer");
}

#[test]
fn a_missing_bucket_fails_the_upload_and_the_download() {
    let env = aws_env();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("a");
    std::fs::write(&src, b"bytes").unwrap();
    let url = "s3://hipfile-cli-no-such-bucket/k";
    let e = failed(&hipfile(&env, &["cp", src.to_str().unwrap(), url]));
    assert!(e.contains("not found"), "{e}");
    let dst = dir.path().join("never");
    let e = failed(&hipfile(&env, &["cp", url, dst.to_str().unwrap()]));
    assert!(e.contains("not found"), "{e}");
    assert!(!dst.exists());
}
