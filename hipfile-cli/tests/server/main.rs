//! `hipfile cp` and `hipfile bench --remote` against real servers: nginx serving a directory on
//! loopback (started by the tests, from a configuration in a temporary directory), and an S3
//! endpoint named by the AWS_* environment (`cargo xtask ceph up` writes one to
//! `target/ceph/env`). Built only with the feature `server-tests`; each test fails, not skips,
//! when its server is not there.
//!
//! ```text
//! cargo test -p hipfile-cli --features server-tests --test server
//! ```

mod http;
mod nginx;
mod s3;

use std::ffi::OsStr;
use std::process::{Command, Output};

/// `hipfile ARGS` on the simulated GPU.
pub fn hipfile<S: AsRef<OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hipfile"))
        .args(args)
        .env("HIPFILE_PLATFORM", "sim")
        .output()
        .unwrap()
}

/// The output of a command that must have succeeded, as text.
pub fn succeeded(out: &Output) -> String {
    assert!(
        out.status.success(),
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The standard error of a command that must have failed.
pub fn failed(out: &Output) -> String {
    assert!(
        !out.status.success(),
        "succeeded where it must fail\nstdout: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `len` bytes of SplitMix64 from `seed`.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed;
    (0..len)
        .map(|_| {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}
