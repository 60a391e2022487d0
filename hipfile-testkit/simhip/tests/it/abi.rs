//! The ROCm 5 generation. The library reads `HIPFILE_SIM_ROCM` once per process, so the
//! `platform` and `raw_abi` tests run again in a child process of this test binary configured for ROCm 5 with
//! two devices, loading the library through `HIPFILE_HIP_LIBRARY` this time.

use std::process::Command;

use crate::support::sim_library;

#[test]
fn the_platform_tests_pass_against_the_rocm5_abi_with_two_devices() {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args(["platform::", "raw_abi::", "--test-threads=2"])
        .env("HIPFILE_SIM_ROCM", "5")
        .env("HIPFILE_SIM_DEVICES", "2")
        .env("HIPFILE_HIP_LIBRARY", sim_library())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "ROCm 5 child run failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("test result: ok") && !stdout.contains(" 0 passed"),
        "the child ran no tests:\n{stdout}"
    );
}
