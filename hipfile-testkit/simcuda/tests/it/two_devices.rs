//! Two devices. The library reads `HIPFILE_SIM_DEVICES` once per process, so the `platform` tests
//! run again in a child process of this test binary configured with two devices, loading the
//! library through `HIPFILE_CUDART_LIBRARY` and `HIPFILE_CUDA_LIBRARY` this time.

use std::process::Command;

use crate::support::sim_library;

#[test]
fn the_platform_tests_pass_with_two_devices_through_the_environment() {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args(["platform::", "--test-threads=2"])
        .env("HIPFILE_SIM_DEVICES", "2")
        .env("HIPFILE_CUDART_LIBRARY", sim_library())
        .env("HIPFILE_CUDA_LIBRARY", sim_library())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "two-device child run failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains("test result: ok") && !stdout.contains(" 0 passed"),
        "the child ran no tests:\n{stdout}"
    );
}
