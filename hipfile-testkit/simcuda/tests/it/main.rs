//! Integration tests of the simulated CUDA library, driven through hipfile-hip's NVIDIA platform
//! and through its C entry points directly.
//!
//! The library under test is `libsimcuda.so`, which `cargo test -p hipfile-simcuda` builds into
//! the `deps` folder holding this test binary. It reads its configuration once per process, so the
//! two-device configuration is tested by re-running the `platform` tests in a child process.

mod loading;
mod platform;
mod raw_abi;
mod support;
mod two_devices;
