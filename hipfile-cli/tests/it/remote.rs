//! `hipfile cp` and `hipfile bench --remote` refusals that need no server: what cannot be
//! written, options that do not fit, URLs the client refuses, and a server that is not there,
//! each a clear message, a non-zero exit and no destination left behind. The copies themselves
//! are in `tests/server` (feature `server-tests`).

use std::net::TcpListener;
use std::process::{Command, Output};

use crate::support::names_in;

fn hipfile(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hipfile"))
        .args(args)
        .env("HIPFILE_REMOTE_RETRIES", "0")
        .output()
        .unwrap()
}

/// The message of a command that must fail.
fn refused(args: &[&str]) -> String {
    let out = hipfile(args);
    assert!(!out.status.success(), "{args:?} succeeded");
    assert!(
        out.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A loopback URL of a port nothing listens on.
fn nobody_there() -> String {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}/object")
}

#[test]
fn an_http_destination_is_refused_before_anything_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("a");
    std::fs::write(&src, b"bytes").unwrap();
    let e = refused(&[
        "cp",
        "--platform",
        "sim",
        src.to_str().unwrap(),
        "https://example.invalid/a",
    ]);
    assert!(e.contains("only s3:// objects can be written"), "{e}");
}

#[test]
fn remote_options_without_a_remote_object_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::write(&a, b"bytes").unwrap();
    let e = refused(&[
        "cp",
        "--platform",
        "sim",
        "--connections",
        "4",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
    ]);
    assert!(e.contains("apply to remote objects"), "{e}");
    assert!(!b.exists());
    let e = refused(&["bench", "--platform", "sim", "--request-size", "1M"]);
    assert!(e.contains("apply to --remote"), "{e}");
}

#[test]
fn bench_remote_refuses_the_options_of_a_file() {
    for (flag, value) in [
        ("--file", Some("x")),
        ("--only", Some("hot")),
        ("--baseline", None),
    ] {
        let mut args = vec![
            "bench",
            "--platform",
            "sim",
            "--remote",
            "http://127.0.0.1:9/o",
            flag,
        ];
        args.extend(value);
        let e = refused(&args);
        assert!(
            e.contains("--remote reads a remote object instead"),
            "{flag}: {e}"
        );
    }
}

#[test]
fn zero_connections_and_bad_sizes_are_refused_by_the_parser() {
    let e = refused(&["cp", "--connections", "0", "s3://b/k", "x"]);
    assert!(e.contains("at least 1"), "{e}");
    let e = refused(&["bench", "--remote", "s3://b/k", "--request-size", "0"]);
    assert!(e.contains("zero bytes"), "{e}");
}

#[test]
fn urls_the_client_cannot_use_are_refused_and_leave_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("copy");
    for url in ["s3://bucket-only", "s3:///key", "http://"] {
        let e = refused(&["cp", "--platform", "sim", url, dst.to_str().unwrap()]);
        assert!(e.contains("invalid remote URL"), "{url}: {e}");
    }
    assert!(names_in(dir.path()).is_empty());
}

#[test]
fn a_server_that_is_not_there_fails_the_copy_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = nobody_there();
    let e = refused(&[
        "cp",
        "--platform",
        "sim",
        &url,
        dir.path().to_str().unwrap(),
    ]);
    assert!(e.contains("connection failed"), "{e}");
    assert!(
        names_in(dir.path()).is_empty(),
        "{:?}",
        names_in(dir.path())
    );
    let e = refused(&["bench", "--platform", "sim", "--remote", &url]);
    assert!(e.contains("connection failed"), "{e}");
}

#[test]
fn an_object_url_without_a_name_needs_a_file_name_in_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let e = refused(&[
        "cp",
        "--platform",
        "sim",
        "http://127.0.0.1:9/dir/",
        dir.path().to_str().unwrap(),
    ]);
    assert!(e.contains("has no name to copy it under"), "{e}");
}
