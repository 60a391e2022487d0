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
    assert_eq!(doc["socket"]["state"], "served", "{}", doc["socket"]);
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

/// Set in a forger's environment: how it answers on its own statistics name, as a process
/// whose driver (or whatever holds its name) misbehaves: `drip` (a byte every half second,
/// without end), `flood` (megabytes without end) or `escapes` (a document whose strings drive a
/// terminal).
const FORGER: &str = "HIPFILE_CLI_STATS_FORGER";

/// A document whose strings carry terminal escapes: clear the screen, set the window title,
/// ring the bell, a C1 control sequence introducer.
fn forged_document() -> Value {
    serde_json::json!({
        "version": 1, "pid": std::process::id(), "level": 1,
        "backends": [{"name": "\u{1b}[2Jevil", "path": "\u{9b}31m", "mechanism": "\u{7}",
                      "ops": 1, "bytes": 0, "errors": 0,
                      "declines": {"\u{1b}]0;title\u{7}": 1}, "failovers": {}, "counters": {}}],
        "api": {"\u{1b}[31mred": {"ok": 1, "err": 0}}
    })
}

/// The forger: binds the abstract statistics name of its own pid and answers every connection
/// as [`FORGER`] says, until it is killed. Outside that role it does nothing.
#[test]
fn stats_forger_role() {
    use std::io::Write;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let Ok(how) = std::env::var(FORGER) else {
        return;
    };
    let name = format!("hipfile-stats-{}", std::process::id());
    let listener =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    println!("\n{READY}");
    for stream in listener.incoming() {
        let mut stream = stream.unwrap();
        let how = how.clone();
        std::thread::spawn(move || match how.as_str() {
            "drip" => {
                while stream.write_all(b" ").is_ok() {
                    std::thread::sleep(std::time::Duration::from_millis(500));
                }
            }
            "flood" => {
                let block = vec![b' '; 1 << 20];
                while stream.write_all(&block).is_ok() {}
            }
            _ => {
                let _ = writeln!(stream, "{}", forged_document());
            }
        });
    }
}

/// A process that is killed and reaped when this value drops, a failing test included.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The forger, started and ready, answering as `how`.
fn forger(how: &str) -> Running {
    let (exe, mut args) = target_command();
    args[1] = "stats::stats_forger_role";
    let mut child = Running(
        Command::new(exe)
            .args(args)
            .env(FORGER, how)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut stdout = BufReader::new(child.0.stdout.take().unwrap());
    let mut seen = String::new();
    while !seen.contains(READY) {
        assert!(
            stdout.read_line(&mut seen).unwrap() > 0,
            "the forger ended before it was ready: {seen}"
        );
    }
    child
}

/// `hipfile stats -p` on `pid` with `extra` arguments: the output and how long it took.
fn stats_of(pid: u32, extra: &[&str]) -> (std::process::Output, std::time::Duration) {
    let started = std::time::Instant::now();
    let pid = pid.to_string();
    let out = hipfile(&[&["stats", "-p", &pid][..], extra].concat());
    (out, started.elapsed())
}

#[test]
fn an_answer_that_never_ends_is_given_up_at_the_deadline_of_the_whole_answer() {
    let drip = forger("drip");
    let (out, took) = stats_of(drip.0.id(), &["--once"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("did not end within 5.0 s"), "{stderr}");
    assert!(took < std::time::Duration::from_secs(9), "{took:?}");
}

#[test]
fn an_answer_larger_than_a_document_can_be_is_given_up() {
    let flood = forger("flood");
    let (out, took) = stats_of(flood.0.id(), &["--once", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("longer than 4 MiB"), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
}

#[test]
fn escapes_a_process_sends_are_shown_not_obeyed() {
    let escapes = forger("escapes");
    let raw = |bytes: &[u8]| -> Vec<char> {
        String::from_utf8(bytes.to_vec())
            .unwrap()
            .chars()
            .filter(|&c| c != '\n' && c.is_control())
            .collect()
    };
    let (out, _) = stats_of(escapes.0.id(), &["--once"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        raw(&out.stdout),
        [],
        "{:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    let view = String::from_utf8(out.stdout).unwrap();
    assert!(
        view.contains("\\u{1b}[2Jevil (\\u{9b}31m via \\u{7})"),
        "{view}"
    );
    let (out, _) = stats_of(escapes.0.id(), &["--once", "--json"]);
    assert!(out.status.success());
    assert_eq!(
        raw(&out.stdout),
        [],
        "{:?}",
        String::from_utf8_lossy(&out.stdout)
    );
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        doc,
        forged_document_of(escapes.0.id()),
        "the same document, escaped"
    );
}

/// [`forged_document`] as the forger with pid `pid` sent it.
fn forged_document_of(pid: u32) -> Value {
    let mut doc = forged_document();
    doc["pid"] = pid.into();
    doc
}

#[test]
fn an_answer_from_a_process_that_took_anothers_name_is_refused() {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixListener};
    let victim = Running(Command::new("sleep").arg("60").spawn().unwrap());
    let pid = victim.0.id();
    // This process takes the victim's name and would answer anything.
    let name = format!("hipfile-stats-{pid}");
    let _squatter =
        UnixListener::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes()).unwrap()).unwrap();
    let (out, took) = stats_of(pid, &["--once", "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(out.stdout.is_empty());
    assert!(
        stderr.contains(&format!("held by process {} of user", std::process::id())),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("not by process {pid} of user")),
        "{stderr}"
    );
    assert!(
        took < std::time::Duration::from_secs(5),
        "refused, never read: {took:?}"
    );
}

#[test]
fn the_interval_must_be_seconds_in_bounds() {
    for bad in ["inf", "NaN", "-1", "0", "1e30"] {
        let interval = format!("--interval={bad}");
        let out = hipfile(&["stats", "-p", "1", "--once", &interval]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(stderr.contains("--interval"), "{bad}: {stderr}");
        assert!(
            stderr.contains("seconds from 0.05 to 86400"),
            "{bad}: {stderr}"
        );
    }
}
