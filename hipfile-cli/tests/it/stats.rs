//! `hipfile stats` against a running program on the sim: this test binary itself, run in the
//! target role ([`stats_target_role`]). `-p PID --once --json` reads its counters, the table
//! view shows them, and `-- PROGRAM` runs it and prints the summary.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use serde_json::Value;

/// Set in the target's environment: `wait` (keep the driver open until stdin closes) or the
/// milliseconds to keep it open.
const ROLE: &str = "HIPFILE_CLI_STATS_TARGET";
const READY: &str = "[stats-target-ready]";

/// The target: opens the process-wide driver (platform and statistics level from the
/// environment), writes a 64 KiB file, reads it into GPU memory with four aligned 4 KiB reads and
/// two unaligned 100-byte reads, says it is ready, and keeps the driver open as [`ROLE`] says.
/// Outside that role it does nothing.
#[test]
fn stats_target_role() {
    let Ok(role) = std::env::var(ROLE) else {
        return;
    };
    let driver = hipfile::Driver::open().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    std::fs::write(&path, (0..64 * 1024).map(|i| i as u8).collect::<Vec<u8>>()).unwrap();
    let file = std::fs::File::open(&path).unwrap();
    let handle = driver.register_file(&file).unwrap();
    let mut four = driver.alloc(4096).unwrap();
    for i in 0..4 {
        handle.read(&mut four, i * 4096).unwrap();
    }
    let mut small = driver.alloc(100).unwrap();
    for i in 0..2 {
        handle.read(&mut small, 1 + i * 100).unwrap();
    }
    println!("\n{READY}");
    if role == "wait" {
        std::io::stdin().read_to_end(&mut Vec::new()).unwrap();
    } else {
        std::thread::sleep(std::time::Duration::from_millis(role.parse().unwrap()));
    }
}

/// This test binary in the target role, as a program and its arguments.
fn target_command() -> (std::path::PathBuf, [&'static str; 4]) {
    (
        std::env::current_exe().unwrap(),
        [
            "--exact",
            "stats::stats_target_role",
            "--nocapture",
            "--test-threads=1",
        ],
    )
}

fn hipfile(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hipfile"))
        .args(args)
        .output()
        .unwrap()
}

/// The expected counters of the target's workload in a statistics document.
fn assert_workload(doc: &Value) {
    assert_eq!(doc["version"], 1);
    assert_eq!(doc["read"]["ok"], 6);
    assert_eq!(doc["read"]["bytes"], 4 * 4096 + 200);
    let backends = doc["backends"].as_array().unwrap();
    let fastpath = backends.iter().find(|b| b["name"] == "fastpath").unwrap();
    assert_eq!(fastpath["ops"], 4);
    assert_eq!(fastpath["declines"]["misaligned"], 2);
    let fallback = backends.iter().find(|b| b["name"] == "fallback").unwrap();
    assert_eq!(fallback["ops"], 2);
}

#[test]
fn pid_once_json_and_table_read_a_running_process() {
    let (exe, args) = target_command();
    let mut child = Command::new(exe)
        .args(args)
        .env(ROLE, "wait")
        .env("HIPFILE_PLATFORM", "sim")
        .env("HIPFILE_STATS_LEVEL", "3")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut seen = String::new();
    while !seen.contains(READY) {
        assert!(
            stdout.read_line(&mut seen).unwrap() > 0,
            "the target ended before it was ready: {seen}"
        );
    }
    let pid = child.id().to_string();

    let out = hipfile(&["stats", "-p", &pid, "--once", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
    let doc: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(doc["pid"], child.id());
    assert_eq!(doc["level"], 3);
    assert_workload(&doc);

    let out = hipfile(&["stats", "-p", &pid, "--once"]);
    assert!(out.status.success());
    let view = String::from_utf8(out.stdout).unwrap();
    assert!(view.contains(&format!("pid {pid}, level 3")), "{view}");
    assert!(view.contains("fastpath (direct via sim): 4 ops"), "{view}");
    assert!(view.contains("declined: misaligned 2"), "{view}");

    drop(child.stdin.take());
    stdout.read_to_string(&mut seen).unwrap();
    assert!(child.wait().unwrap().success(), "{seen}");
    // The process is gone: a clear error, not a hang.
    let out = hipfile(&["stats", "-p", &pid, "--once"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("serves no statistics"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn running_a_program_prints_its_summary_and_keeps_its_exit_status() {
    let (program, args) = target_command();
    let out = Command::new(env!("CARGO_BIN_EXE_hipfile"))
        .args(["stats", "--json", "--"])
        .arg(&program)
        .args(args)
        .env(ROLE, "600")
        .env("HIPFILE_PLATFORM", "sim")
        .env_remove("HIPFILE_STATS_LEVEL")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    // The program's own output, then the summary.
    let summary = text.lines().last().unwrap();
    let doc: Value = serde_json::from_str(summary).unwrap();
    assert_eq!(doc["level"], 3, "HIPFILE_STATS_LEVEL=3 when unset");
    assert_workload(&doc);

    let out = Command::new(env!("CARGO_BIN_EXE_hipfile"))
        .args(["stats", "--"])
        .arg(&program)
        .args(args)
        .env(ROLE, "600")
        .env("HIPFILE_PLATFORM", "sim")
        .output()
        .unwrap();
    let view = String::from_utf8(out.stdout).unwrap();
    assert!(view.contains("exited"), "{view}");
    assert!(view.contains("fallback (staged): 2 ops"), "{view}");

    // A program that closes its driver right after its last request and exits, sooner than
    // the next read of its socket: the summary still holds all it did (the driver's last word).
    let out = Command::new(env!("CARGO_BIN_EXE_hipfile"))
        .args(["stats", "--json", "--"])
        .arg(&program)
        .args(args)
        .env(ROLE, "0")
        .env("HIPFILE_PLATFORM", "sim")
        .env_remove("HIPFILE_STATS_LEVEL")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let doc: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_workload(&doc);

    let out = hipfile(&["stats", "--", "false"]);
    assert!(
        !out.status.success(),
        "the program's failure is the command's"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("served no statistics"));
}
