//! Tests against real servers (feature `server-tests`): Debian's nginx started on a loopback
//! port by the test itself, and an S3 endpoint (Ceph's RADOS Gateway from `cargo xtask ceph up`,
//! named by `target/ceph/env`, or any endpoint the AWS_* environment names). They fail, never
//! skip, when their server is missing.

mod failures;
mod nginx;
mod s3;

use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard};

use hipfile::{Driver, DriverOptions};
use hipfile_hip::sim::SimRuntime;

/// Held shared by every test of the S3 gateway, and alone by the tests that kill it.
pub static GATEWAY: RwLock<()> = RwLock::new(());

/// The S3 gateway, kept running for the caller while the guard lives.
pub fn gateway_shared() -> RwLockReadGuard<'static, ()> {
    GATEWAY.read().unwrap_or_else(PoisonError::into_inner)
}

/// A private driver on a simulated GPU.
pub fn driver() -> Driver {
    Driver::with_options(DriverOptions::with_runtime(Arc::new(SimRuntime::default()))).unwrap()
}

/// `len` bytes of a xorshift stream from `seed`: incompressible, and no two offsets alike.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}
