//! An object written from device memory and read back into it, byte-checked, with the
//! throughput of each direction: `cargo xtask test` runs it against the Ceph cluster it brings
//! up (the `servers` step, on the simulated GPU there), so CI shows S3 writes and reads on a real
//! RADOS Gateway.
//!
//! ```text
//! cargo run --release -p hipfile-remote --example s3_roundtrip -- [MIB] [BUCKET]
//! ```
//!
//! The endpoint and credentials come from the AWS environment and files (`source
//! target/ceph/env`). The bucket (default `hipfile-roundtrip`) is made when missing; the object,
//! `roundtrip.bin`, is left there and its URL printed last, for `hipfile bench --remote`.

use std::time::{Duration, Instant};

use hipfile::Driver;
use hipfile_remote::{AwsConfig, RemoteFile, RemoteOptions, RemoteWriter};
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let mib: usize = args.next().map(|a| a.parse()).transpose()?.unwrap_or(256);
    let bucket = args.next().unwrap_or_else(|| "hipfile-roundtrip".into());
    let aws = AwsConfig::from_env()?;
    make_bucket(&aws, &bucket)?;
    let url = format!("s3://{bucket}/roundtrip.bin");
    let options = RemoteOptions::from_env()?;
    let driver = Driver::open()?;
    let len = mib << 20;
    // Bytes no two objects share: a counter per 8-byte word, mixed with the size.
    let bytes: Vec<u8> = (0..len / 8)
        .flat_map(|i| {
            ((i as u64) ^ ((len as u64) << 40))
                .wrapping_mul(0x9e37_79b9_7f4a_7c15)
                .to_le_bytes()
        })
        .collect();
    let mut src = driver.alloc(len)?;
    src.write_at(0, &bytes)?;

    let start = Instant::now();
    let mut writer = RemoteWriter::create_with(&driver, &url, options.clone(), Some(&aws))?;
    writer.write(&src)?;
    let written = writer.finish()?;
    report(
        "write",
        "device memory -> object (multipart)",
        written as usize,
        start.elapsed(),
    );

    let file = RemoteFile::open_with(&driver, &url, options, Some(&aws))?;
    let mut dst = driver.alloc(len)?;
    let start = Instant::now();
    let read = file.read(&mut dst, 0)?;
    report("read", "object -> device memory", read, start.elapsed());
    if read != len || dst.to_vec()? != bytes {
        return Err(format!("{url}: the object read back differs from what was written").into());
    }
    println!("s3_roundtrip: {len} bytes written and read back, byte-checked ({url})");
    println!("{url}");
    Ok(())
}

fn report(what: &str, path: &str, bytes: usize, took: Duration) {
    println!(
        "s3_roundtrip: {what:<5} {path:<36} {bytes} bytes in {:.3} s: {:.3} GB/s",
        took.as_secs_f64(),
        bytes as f64 / took.as_secs_f64() / 1e9
    );
}

/// CreateBucket; an answer that it exists already (owned by this user) is fine.
fn make_bucket(aws: &AwsConfig, name: &str) -> Result<(), Box<dyn std::error::Error>> {
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
    )?;
    let (key, secret, token) = aws.credentials.clone().ok_or("no S3 credentials")?;
    let credentials = match token {
        Some(t) => Credentials::new_with_token(key, secret, t),
        None => Credentials::new(key, secret),
    };
    let action = bucket.create_bucket(&credentials);
    let response = ureq::put(action.sign(Duration::from_secs(600)).as_str())
        .config()
        .http_status_as_error(false)
        .build()
        .send(action.body())?;
    match response.status().as_u16() {
        200 | 409 => Ok(()),
        status => Err(format!("creating bucket {name}: HTTP {status}").into()),
    }
}
