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

#[test]
fn statistics_requested_say_where_they_are_served() {
    use std::os::unix::fs::PermissionsExt;
    let runtime = tempfile::tempdir().unwrap();
    std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hipfile"))
        .args(["check", "--platform", "sim", "--json"])
        .env("HIPFILE_STATS_LEVEL", "1")
        .env("XDG_RUNTIME_DIR", runtime.path())
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let socket = &report["platform"]["stats_socket"];
    assert_eq!(socket["state"], "served", "{report}");
    let at = socket["served_at"][0].as_str().unwrap();
    assert!(
        at.starts_with(&format!("{}/hipfile/stats-", runtime.path().display())),
        "{socket}"
    );
    assert_eq!(report["stats_socket_dir"], runtime.path().to_str().unwrap());

    // A runtime directory others may enter is not used: the abstract name alone serves.
    std::fs::set_permissions(runtime.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hipfile"))
        .args(["check", "--platform", "sim"])
        .env("HIPFILE_STATS_LEVEL", "1")
        .env("XDG_RUNTIME_DIR", runtime.path())
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("statistics:"))
        .unwrap_or_else(|| panic!("no statistics line: {text}"));
    assert!(line.contains("served at @hipfile-stats-"), "{line}");
    assert!(line.contains("lets other users in (mode 755"), "{line}");
}
