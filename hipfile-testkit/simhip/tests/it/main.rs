//! Integration tests of the simulated HIP runtime library, driven through hipfile-hip's AMD
//! platform and through a C program compiled against the real HIP headers.
//!
//! The library under test is `libamdhip64.so`, which `cargo test -p hipfile-simhip` builds next to
//! the `deps` folder holding this test binary. It reads its configuration once per process, so the
//! ROCm 5 generation is tested by re-running the `platform` tests in a child process.

mod abi;
mod c_program;
mod loading;
mod platform;
mod raw_abi;
mod support;
