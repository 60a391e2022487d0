//! `hipfile check` as a user runs it: what it says when no GPU runtime loads.

use std::process::Command;

/// `hipfile check` with runtimes that cannot be there, so the answer is the same on every
/// machine; returns stdout.
fn check_without_runtimes(extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hipfile"))
        .arg("check")
        .args(extra)
        .env_remove("HIPFILE_PLATFORM")
        .env("HIPFILE_HIP_LIBRARY", "/nonexistent/libamdhip64.so")
        .env("HIPFILE_CUDART_LIBRARY", "/nonexistent/libcudart.so")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "no platform, no fastpath");
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_missing_runtime_is_one_line_per_platform() {
    let text = check_without_runtimes(&[]);
    let platform: Vec<&str> = text.lines().take_while(|l| !l.is_empty()).collect();
    assert_eq!(
        platform[..3],
        [
            "platform:     none",
            "              AMD: /nonexistent/libamdhip64.so not found",
            "              NVIDIA: /nonexistent/libcudart.so not found",
        ],
        "{text}"
    );
    assert!(!text.contains("cannot open shared object file"), "{text}");
}

#[test]
fn verbose_shows_the_loaders_answer() {
    let text = check_without_runtimes(&["--verbose"]);
    assert!(
        text.contains(
            "\n                /nonexistent/libamdhip64.so: cannot open shared object file: No such file or directory\n"
        ),
        "{text}"
    );
}
