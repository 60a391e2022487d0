//! `hipfile cp` on the sim: files of odd sizes and with holes arrive byte for byte, `--verify`
//! and `--json` say what happened, piped output has no progress bar, and refusals and failures
//! exit non-zero leaving no destination (and no temporary file) behind; files whose size says
//! nothing (procfs, sysfs) are copied to the end of their reads; a DST name of 255 bytes works;
//! SIGINT, SIGTERM and SIGHUP end a copy by that signal and leave no temporary file; a user
//! without root copies a read-only source.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal};

use serde_json::Value;

use crate::support::{names_in, splitmix_bytes};

/// `hipfile cp --platform sim ARGS`.
fn cp<S: AsRef<OsStr>>(args: &[S]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hipfile"))
        .args(["cp", "--platform", "sim"])
        .args(args)
        .output()
        .unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Bytes no two files of a test share by accident.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    splitmix_bytes(len, seed)
}

/// Copy `src` to `dst` with `--verify --json` and `extra`; the summary object.
fn copy_json(src: &Path, dst: &Path, extra: &[&str]) -> Value {
    let mut args: Vec<&OsStr> = vec![src.as_os_str(), dst.as_os_str()];
    args.extend(["--verify", "--json"].iter().map(OsStr::new));
    args.extend(extra.iter().map(OsStr::new));
    let out = cp(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn files_of_odd_sizes_arrive_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let chunk = 64 << 10;
    for (i, size) in [0, 1, 4095, 4096, 4097, 3 * chunk + 123]
        .into_iter()
        .enumerate()
    {
        let src = dir.path().join(format!("src-{size}"));
        let dst = dir.path().join(format!("dst-{size}"));
        let bytes = pattern(size, i as u64);
        std::fs::write(&src, &bytes).unwrap();
        let v = copy_json(&src, &dst, &["--chunk", "64K"]);
        assert_eq!(std::fs::read(&dst).unwrap(), bytes, "size {size}");
        assert_eq!(v["bytes"], size, "{v}");
        assert_eq!(v["verified"], true, "{v}");
        assert_eq!(v["chunk"], chunk, "{v}");
        let backends = v["backends"].as_array().unwrap();
        if size == 0 {
            assert_eq!(v["path"], "none", "{v}");
            assert!(backends.is_empty(), "{v}");
            continue;
        }
        // Every byte was read and written once, by the backends named.
        let moved: u64 = backends.iter().map(|b| b["bytes"].as_u64().unwrap()).sum();
        assert_eq!(moved, 2 * size as u64, "{v}");
        let mut paths: Vec<&str> = backends
            .iter()
            .map(|b| b["path"].as_str().unwrap())
            .collect();
        paths.dedup();
        assert_eq!(v["path"], paths.join("+"), "{v}");
        // Where the fastpath serves the copy (the sim has a P2P driver; the filesystem of the
        // temporary directory may not be one it takes), a whole number of 4 KiB goes entirely
        // direct: only an unaligned tail is staged.
        if size % 4096 == 0 && v["path"] != "staged" {
            assert_eq!(v["path"], "direct", "{v}");
        }
    }
    // Nothing but the sources and the copies: no temporary file left.
    assert_eq!(names_in(dir.path()).len(), 12);
}

#[test]
fn a_sparse_file_keeps_its_holes_and_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("sparse");
    let dst = dir.path().join("copy");
    let mib = 1usize << 20;
    let size = 10 * mib + 5;
    let mut bytes = vec![0u8; size];
    let pieces = [(0, 5000), (4 * mib + 7, 3 * 4096), (size - 100, 100)];
    let file = std::fs::File::create(&src).unwrap();
    file.set_len(size as u64).unwrap();
    for (i, (at, len)) in pieces.into_iter().enumerate() {
        let piece = pattern(len, 100 + i as u64);
        std::os::unix::fs::FileExt::write_all_at(&file, &piece, at as u64).unwrap();
        bytes[at..at + len].copy_from_slice(&piece);
    }
    file.sync_all().unwrap();
    let v = copy_json(&src, &dst, &["--chunk", "1M"]);
    assert_eq!(v["verified"], true);
    assert_eq!(std::fs::read(&dst).unwrap(), bytes);
    let allocated = |p: &Path| std::fs::metadata(p).unwrap().blocks() * 512;
    if allocated(&src) < size as u64 / 2 {
        // The filesystem keeps holes: only the data was read, and the copy has holes too.
        let moved: u64 = v["backends"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["bytes"].as_u64().unwrap())
            .sum();
        assert!(moved < size as u64, "{v}");
        assert!(allocated(&dst) < size as u64 / 2, "{}", allocated(&dst));
    }
}

#[test]
fn the_json_summary_says_what_was_copied_how_fast_and_how() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("a");
    let dst = dir.path().join("b");
    std::fs::write(&src, pattern(1 << 20, 7)).unwrap();
    let v = copy_json(&src, &dst, &[]);
    let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "backends",
            "bytes",
            "chunk",
            "destination",
            "gbps",
            "path",
            "platform",
            "read_until_eof",
            "reported_size",
            "seconds",
            "source",
            "verified",
            "verified_against",
            "verify_seconds"
        ]
    );
    assert_eq!(v["bytes"], 1 << 20);
    assert_eq!(v["reported_size"], 1 << 20);
    assert_eq!(v["read_until_eof"], false);
    assert_eq!(v["verified_against"], "source");
    assert_eq!(v["source"], src.to_str().unwrap());
    assert_eq!(v["destination"], dst.to_str().unwrap());
    assert_eq!(v["platform"], "sim");
    assert_eq!(v["chunk"], 64 << 20, "the default chunk");
    let seconds = v["seconds"].as_f64().unwrap();
    let gbps = v["gbps"].as_f64().unwrap();
    assert!(seconds > 0.0, "{v}");
    assert!(
        (gbps - (1u64 << 20) as f64 / seconds / 1e9).abs() < 1e-9 * gbps.max(1.0),
        "{v}"
    );
    assert!(v["verify_seconds"].as_f64().unwrap() >= 0.0, "{v}");
    for b in v["backends"].as_array().unwrap() {
        assert!(
            ["fastpath", "fallback"].contains(&b["name"].as_str().unwrap()),
            "{v}"
        );
        assert!(b["ops"].as_u64().unwrap() > 0, "{v}");
    }

    // Without --verify the copy is not called verified.
    let out = cp(&[
        src.as_os_str(),
        dir.path().join("c").as_os_str(),
        OsStr::new("--json"),
    ]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verified"], false, "{v}");
    assert_eq!(v["verify_seconds"], Value::Null, "{v}");
    assert_eq!(v["verified_against"], Value::Null, "{v}");
}

#[test]
fn piped_output_is_one_summary_line_and_no_progress_bar() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("a");
    std::fs::write(&src, pattern(3 << 20, 9)).unwrap();
    let out = cp(&[
        src.as_os_str(),
        dir.path().join("b").as_os_str(),
        OsStr::new("--chunk"),
        OsStr::new("256K"),
        OsStr::new("--verify"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let stdout = String::from_utf8(out.stdout.clone()).unwrap();
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    assert!(lines[0].starts_with("copied "), "{stdout}");
    assert!(lines[0].contains("3145728 bytes in "), "{stdout}");
    assert!(lines[0].contains(" GB/s, path "), "{stdout}");
    assert!(lines[0].ends_with("verified byte for byte"), "{stdout}");
    // stderr says only which platform it ran on: no bar, no carriage returns.
    let err = stderr(&out);
    assert_eq!(err, "hipfile cp: platform sim (as asked)\n");
}

#[test]
fn an_existing_destination_is_replaced_only_with_force_and_keeps_its_mode() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("a");
    let dst = dir.path().join("b");
    std::fs::write(&src, pattern(5000, 1)).unwrap();
    std::fs::write(&dst, b"old contents").unwrap();
    std::fs::set_permissions(&dst, std::fs::Permissions::from_mode(0o640)).unwrap();

    let out = cp(&[&src, &dst]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("exists: --force replaces it"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read(&dst).unwrap(), b"old contents");

    let out = cp(&[src.as_os_str(), dst.as_os_str(), OsStr::new("--force")]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(std::fs::read(&dst).unwrap(), pattern(5000, 1));
    let mode = std::fs::metadata(&dst).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o640);
    assert_eq!(names_in(dir.path()), ["a", "b"]);
}

#[test]
fn a_directory_destination_receives_the_file_under_its_name() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("data.bin");
    std::fs::write(&src, pattern(70_000, 3)).unwrap();
    let into = dir.path().join("into");
    std::fs::create_dir(&into).unwrap();
    let out = cp(&[&src, &into]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        std::fs::read(into.join("data.bin")).unwrap(),
        pattern(70_000, 3)
    );
}

#[test]
fn refusals_exit_non_zero_and_leave_no_destination() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = d.join("a");
    std::fs::write(&src, pattern(10_000, 5)).unwrap();
    std::fs::create_dir(d.join("sub")).unwrap();
    std::fs::hard_link(&src, d.join("a-link")).unwrap();
    let os = |p: &Path| p.as_os_str().to_os_string();
    let cases: [(Vec<OsString>, &str); 6] = [
        (
            vec![os(&d.join("missing")), os(&d.join("x"))],
            "cannot read",
        ),
        (
            vec![os(&src), os(&d.join("no-such-dir/x"))],
            "destination directory",
        ),
        (vec![os(&d.join("sub")), os(&d.join("x"))], "is a directory"),
        (vec![os(&src), os(&src)], "the same file"),
        (
            vec![os(&src), os(&d.join("a-link")), "--force".into()],
            "the same file",
        ),
        (
            vec![os(&src), os(&d.join("x")), "--chunk".into(), "3G".into()],
            "too large",
        ),
    ];
    for (args, why) in cases {
        let out = cp(&args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.starts_with("hipfile: ") && err.contains(why),
            "{args:?}: {err}"
        );
        assert_eq!(names_in(d), ["a", "a-link", "sub"], "{args:?}");
        assert!(names_in(&d.join("sub")).is_empty());
    }
    assert_eq!(std::fs::read(&src).unwrap(), pattern(10_000, 5));
}

#[test]
fn a_summary_that_cannot_be_written_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (src, dst) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::write(&src, pattern(10_000, 9)).unwrap();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hipfile"))
        .args(["cp", "--platform", "sim"])
        .args([&src, &dst])
        .stdout(full)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("summary could not be written"),
        "{}",
        stderr(&out)
    );
    // The copy itself is complete and in place.
    assert_eq!(std::fs::read(&dst).unwrap(), pattern(10_000, 9));
}

#[test]
fn a_file_whose_size_reads_as_0_is_copied_to_the_end_of_its_reads() {
    let dir = tempfile::tempdir().unwrap();
    // procfs reports 0 bytes and sysfs a page, whatever they hold; these two hold the same
    // bytes from one read to the next.
    for (src, reported) in [
        ("/proc/version", 0),
        ("/sys/devices/system/cpu/online", 4096),
    ] {
        let want = std::fs::read(src).unwrap();
        assert!(!want.is_empty() && want.len() < 4096, "{src}");
        assert_eq!(std::fs::metadata(src).unwrap().len(), reported, "{src}");
        let dst = dir.path().join(Path::new(src).file_name().unwrap());
        let v = copy_json(Path::new(src), &dst, &[]);
        assert_eq!(std::fs::read(&dst).unwrap(), want, "{src}");
        assert_eq!(v["bytes"], want.len(), "{v}");
        assert_eq!(v["reported_size"], reported, "{v}");
        assert_eq!(v["read_until_eof"], true, "{v}");
        assert_eq!(v["verified"], true, "{v}");
        assert_eq!(v["verified_against"], "reads", "{v}");

        let out = cp(&[OsStr::new(src), dir.path().join("line").as_os_str()]);
        let line = String::from_utf8(out.stdout).unwrap();
        assert!(
            line.contains(&format!(": {} bytes in ", want.len()))
                && line.contains(
                    "whose sizes are not what reading it gives: copied until its reads ended"
                ),
            "{line}"
        );
        std::fs::remove_file(dir.path().join("line")).unwrap();
    }
}

#[test]
fn a_destination_name_of_255_bytes_is_copied_to() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("a");
    std::fs::write(&src, pattern(70_000, 11)).unwrap();
    let name = "d".repeat(255);
    let v = copy_json(&src, &dir.path().join(&name), &[]);
    assert_eq!(v["verified"], true, "{v}");
    assert_eq!(
        std::fs::read(dir.path().join(&name)).unwrap(),
        pattern(70_000, 11)
    );
    assert_eq!(names_in(dir.path()), ["a".to_string(), name]);
}

/// A read-only source (mode 0444) copied by a user who is not root: the copy is made with the
/// source's mode through a read-write descriptor, which the file's mode would refuse to open
/// again, and is registered and written all the same. Root passes every mode check, so a root
/// run copies the binary where user 65534 may run it and runs it as that user.
#[test]
fn a_read_only_source_is_copied_by_a_user_without_root() {
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("read-only");
    std::fs::write(&src, pattern(300_001, 12)).unwrap();
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o444)).unwrap();
    let dst = dir.path().join("copy");
    let mut cmd = if rustix::process::geteuid().is_root() {
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let program = dir.path().join("hipfile");
        std::fs::copy(env!("CARGO_BIN_EXE_hipfile"), &program).unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut cmd = Command::new(program);
        cmd.uid(65534).gid(65534);
        cmd
    } else {
        Command::new(env!("CARGO_BIN_EXE_hipfile"))
    };
    let out = cmd
        .args(["cp", "--platform", "sim", "--verify", "--json"])
        .arg(&src)
        .arg(&dst)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["verified"], true, "{v}");
    assert_eq!(std::fs::read(&dst).unwrap(), pattern(300_001, 12));
    assert_eq!(
        std::fs::metadata(&dst).unwrap().permissions().mode() & 0o777,
        0o444,
        "the copy has the source's mode"
    );
}

/// A copy started with SIGHUP ignored (as `nohup` starts it) keeps it ignored: the hangup of its
/// terminal does not end it, and it completes.
#[test]
fn a_copy_started_with_sighup_ignored_survives_a_hangup() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let data = pattern(1 << 20, 14).repeat(64);
    std::fs::write(&src, &data).unwrap();
    let dst = dir.path().join("dst");
    // The shell sets SIGHUP to ignored and execs the copy, which inherits that.
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("trap '' HUP; exec \"$0\" cp --platform sim --chunk 4K \"$1\" \"$2\"")
        .arg(env!("CARGO_BIN_EXE_hipfile"))
        .arg(&src)
        .arg(&dst)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for_name(dir.path(), &mut child, |n| n.contains(".hipfile-cp-"));
    send(&child, Signal::HUP);
    let status = wait_for_end(&mut child, Duration::from_secs(120));
    assert!(status.success(), "{status}");
    assert_eq!(std::fs::read(&dst).unwrap(), data);
}

/// Wait up to `deadline` for `child` to end; kill it and fail when it does not.
fn wait_for_end(child: &mut std::process::Child, deadline: Duration) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > deadline {
            child.kill().unwrap();
            panic!("the process did not end within {deadline:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Wait up to a minute for a name in `dir` that `wanted` accepts, while `child` runs; its name.
pub fn wait_for_name(
    dir: &Path,
    child: &mut std::process::Child,
    wanted: impl Fn(&str) -> bool,
) -> String {
    let start = Instant::now();
    loop {
        if let Some(name) = names_in(dir).into_iter().find(|n| wanted(n)) {
            return name;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the process ended ({status}) before the name appeared in {dir:?}");
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no such name in {dir:?} after a minute: {:?}",
            names_in(dir)
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Send `signal` to `child`.
pub fn send(child: &std::process::Child, signal: Signal) {
    let pid = Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, signal).unwrap();
}

#[test]
fn a_signal_removes_the_temporary_copy_and_ends_the_process_by_that_signal() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    // 64 MiB in reads and writes of 4 KiB: seconds of copying, on any machine.
    std::fs::write(&src, pattern(1 << 20, 13).repeat(64)).unwrap();
    for signal in [Signal::INT, Signal::TERM, Signal::HUP] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_hipfile"))
            .args(["cp", "--platform", "sim", "--chunk", "4K", "--verify"])
            .arg(&src)
            .arg(dir.path().join("dst"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let tmp = wait_for_name(dir.path(), &mut child, |n| n.contains(".hipfile-cp-"));
        send(&child, signal);
        let status = wait_for_end(&mut child, Duration::from_secs(60));
        assert_eq!(
            status.signal(),
            Some(signal.as_raw()),
            "{signal:?}: {status}"
        );
        assert_eq!(names_in(dir.path()), ["src"], "{signal:?} left {tmp}");
    }
}
