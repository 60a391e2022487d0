//! `hipfile cp` and `hipfile bench --remote` against nginx on loopback.

use serde_json::Value;

use crate::nginx::Nginx;
use crate::{failed, hipfile, pattern, succeeded};

/// Copy `url` to `dst` with `--verify --json` and `extra`; the summary object.
fn copy_json(url: &str, dst: &std::path::Path, extra: &[&str]) -> Value {
    let mut args = vec!["cp", url, dst.to_str().unwrap(), "--verify", "--json"];
    args.extend(extra);
    let stdout = succeeded(&hipfile(&args));
    assert_eq!(stdout.lines().count(), 1, "{stdout}");
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn objects_of_odd_sizes_arrive_byte_for_byte_through_gpu_memory() {
    let nginx = Nginx::start();
    let dir = tempfile::tempdir().unwrap();
    let chunk = 64 << 10;
    for (i, size) in [1, 4095, 4097, 3 * chunk + 123, 1 << 20]
        .into_iter()
        .enumerate()
    {
        let name = format!("object-{size}");
        let bytes = pattern(size, i as u64);
        std::fs::write(nginx.root.join(&name), &bytes).unwrap();
        let dst = dir.path().join(&name);
        let v = copy_json(
            &nginx.url(&name),
            &dst,
            &[
                "--chunk",
                "64K",
                "--request-size",
                "16K",
                "--connections",
                "4",
            ],
        );
        assert_eq!(std::fs::read(&dst).unwrap(), bytes, "size {size}");
        assert_eq!(v["bytes"], size, "{v}");
        assert_eq!(v["reported_size"], size, "{v}");
        assert_eq!(v["verified"], true, "{v}");
        assert_eq!(v["request_size"], 16 << 10, "{v}");
        assert_eq!(v["connections"], 4, "{v}");
        // The local side wrote every byte through hipfile-rs (and read them back to check).
        let moved: u64 = v["backends"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["bytes"].as_u64().unwrap())
            .sum();
        assert_eq!(moved, size as u64, "{v}");
        // The remote path counted the object's bytes (the check's reads left out).
        assert_eq!(v["remote"]["read_bytes"], size, "{v}");
        assert!(v["remote"]["requests"].as_u64().unwrap() >= 1, "{v}");
        assert_eq!(v["remote"]["errors"], 0, "{v}");
    }
}

#[test]
fn an_empty_object_gives_an_empty_file() {
    let nginx = Nginx::start();
    std::fs::write(nginx.root.join("empty"), b"").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("copy");
    let v = copy_json(&nginx.url("empty"), &dst, &[]);
    assert_eq!(v["bytes"], 0, "{v}");
    assert_eq!(std::fs::read(&dst).unwrap(), b"");
}

#[test]
fn a_directory_destination_takes_the_last_segment_of_the_url() {
    let nginx = Nginx::start();
    std::fs::create_dir(nginx.root.join("sub")).unwrap();
    let bytes = pattern(10_000, 7);
    std::fs::write(nginx.root.join("sub/weights.bin"), &bytes).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = hipfile(&[
        "cp",
        &nginx.url("sub/weights.bin"),
        dir.path().to_str().unwrap(),
    ]);
    let line = succeeded(&out);
    assert!(line.starts_with("copied http://"), "{line}");
    assert!(line.contains("10000 bytes"), "{line}");
    assert_eq!(
        std::fs::read(dir.path().join("weights.bin")).unwrap(),
        bytes
    );
}

#[test]
fn an_existing_file_is_replaced_only_with_force() {
    let nginx = Nginx::start();
    std::fs::write(nginx.root.join("a"), b"new bytes").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("a");
    std::fs::write(&dst, b"old").unwrap();
    let e = failed(&hipfile(&["cp", &nginx.url("a"), dst.to_str().unwrap()]));
    assert!(e.contains("exists: --force replaces it"), "{e}");
    assert_eq!(std::fs::read(&dst).unwrap(), b"old");
    succeeded(&hipfile(&[
        "cp",
        "-f",
        &nginx.url("a"),
        dst.to_str().unwrap(),
    ]));
    assert_eq!(std::fs::read(&dst).unwrap(), b"new bytes");
}

#[test]
fn a_missing_object_fails_and_leaves_nothing() {
    let nginx = Nginx::start();
    let dir = tempfile::tempdir().unwrap();
    let dst = dir.path().join("never");
    let e = failed(&hipfile(&[
        "cp",
        &nginx.url("absent"),
        dst.to_str().unwrap(),
    ]));
    assert!(e.contains("not found"), "{e}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn bench_remote_reads_the_object_into_gpu_and_host_memory_and_checks_every_read() {
    let nginx = Nginx::start();
    let size = (3 << 20) + 5;
    std::fs::write(nginx.root.join("bench.bin"), pattern(size, 3)).unwrap();
    let out = hipfile(&[
        "bench",
        "--remote",
        &nginx.url("bench.bin"),
        "--repeat",
        "2",
        "--request-size",
        "256K",
        "--connections",
        "8",
        "--json",
    ]);
    let stdout = succeeded(&out);
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (summary, rows) = lines.split_last().unwrap();
    assert_eq!(summary["type"], "summary", "{summary}");
    assert_eq!(summary["verified"], true, "{summary}");
    assert_eq!(summary["bytes"], size, "{summary}");
    assert_eq!(summary["platform"], "sim", "{summary}");
    assert_eq!(summary["request_size"], 256 << 10, "{summary}");
    let keys: Vec<&str> = rows.iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["remote_read", "remote_read_host"]);
    for row in rows {
        assert_eq!(row["unit"], "GB/s", "{row}");
        assert_eq!(row["repetitions"], 2, "{row}");
        assert_eq!(row["verified"], true, "{row}");
        assert_eq!(row["checks"], 2, "{row}");
        assert!(row["gbps"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["cores"].as_f64().is_some(), "{row}");
    }
    // The table names the simulated GPU and the object.
    let table = succeeded(&hipfile(&[
        "bench",
        "--remote",
        &nginx.url("bench.bin"),
        "--repeat",
        "1",
        "--size",
        "1M",
    ]));
    assert!(table.contains("simulated GPU"), "{table}");
    assert!(table.contains("remote_read_host"), "{table}");
    assert!(table.contains("1048576 bytes read of"), "{table}");
}
