//! `hipfile bench --json` on the sim with tiny sizes: every phase runs, every line parses, every
//! expected measurement is there with the byte checks behind it; the batch phase's counts add up
//! and each of its figures names the figure of the same run it is read against; a file the bench
//! is given keeps its bytes; the KvikIO runner against a fake anchor script.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::support::{names_in, splitmix_bytes};

/// Run `hipfile bench --platform sim --json` with `extra` arguments on `file`; returns the
/// measurement objects and the summary.
fn bench_json(file: &Path, extra: &[&str]) -> (Vec<Value>, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_hipfile"))
        .args(["bench", "--platform", "sim", "--json", "--repeat", "2"])
        .args(["--size", "4M", "--latency-ops", "40", "--file"])
        .arg(file)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "hipfile bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut objects: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let summary = objects.pop().unwrap();
    assert_eq!(summary["type"], "summary");
    assert!(objects.iter().all(|o| o["type"] == "measurement"));
    (objects, summary)
}

fn keys(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| o["key"].as_str().unwrap().to_string())
        .collect()
}

fn find<'a>(objects: &'a [Value], key: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["key"] == key)
        .unwrap_or_else(|| panic!("no {key} in {:?}", keys(objects)))
}

#[test]
fn each_phase_reports_its_measurements() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.dat");
    let expected: [(&str, &[&str]); 4] = [
        ("hot", &["read_hot", "read_hot_again"]),
        ("write", &["write", "write_fsync"]),
        (
            "latency",
            &[
                "latency_4k",
                "latency_floor_4k",
                "latency_64k",
                "latency_floor_64k",
                "latency_1m",
                "latency_floor_1m",
            ],
        ),
        (
            "ceilings",
            &[
                "ceiling_h2d_pinned",
                "ceiling_pagecache_read",
                "ceiling_odirect_read",
            ],
        ),
    ];
    for (phase, want) in expected {
        let (objects, summary) = bench_json(&file, &["--only", phase]);
        let mut got = keys(&objects);
        got.sort();
        let mut want: Vec<String> = want.iter().map(|k| k.to_string()).collect();
        want.sort();
        // O_DIRECT may be refused by the filesystem under the temp dir (tmpfs); then a note says so.
        if phase == "ceilings" && !got.contains(&"ceiling_odirect_read".to_string()) {
            assert!(
                summary["notes"].to_string().contains("O_DIRECT"),
                "{summary}"
            );
            want.retain(|k| k != "ceiling_odirect_read");
        }
        assert_eq!(got, want, "phase {phase}");
        assert_eq!(summary["platform"], "sim");
        // Verified means: the first read and every timed read or write were compared, and all
        // matched; the ceilings move no bytes of the file into GPU memory and are not checked.
        assert_eq!(summary["verified"], true, "{summary}");
        let first = &summary["verification"]["first_read"];
        assert_eq!(first["checks"], 1, "{summary}");
        assert_eq!(first["bytes"], 4 << 20, "{summary}");
        for o in &objects {
            let key = o["key"].as_str().unwrap();
            let checked = &summary["verification"][key];
            if key.starts_with("ceiling_") {
                assert_eq!(o["verified"], Value::Null, "{o}");
                assert_eq!(o["checks"], 0, "{o}");
                assert!(checked.is_null(), "{summary}");
                assert!(
                    summary["not_checked"]
                        .as_array()
                        .unwrap()
                        .contains(&key.into()),
                    "{summary}"
                );
                continue;
            }
            // One check per repetition, of the whole file or of one small read.
            let per_check = if o["unit"] == "us" {
                o["bytes"].as_u64().unwrap()
            } else {
                4 << 20
            };
            assert_eq!(o["verified"], true, "{o}");
            assert_eq!(o["checks"], 2, "{o}");
            assert_eq!(o["bytes_checked"], 2 * per_check, "{o}");
            assert_eq!(checked["failures"], 0, "{summary}");
        }
        // The staged engine's pinned lanes and threads are reported, within the default bound.
        let pinned = summary["resources"]["fallback"]["pinned_bytes"]
            .as_u64()
            .unwrap();
        assert!(pinned > 0 && pinned <= 256 << 20, "{summary}");
        assert!(
            summary["resources"]["fallback"]["io_threads"]
                .as_u64()
                .unwrap()
                >= 1
        );
        for o in &objects {
            assert!(o["cores_by_thread"]["caller"].as_f64().is_some(), "{o}");
        }
        for o in &objects {
            match o["unit"].as_str().unwrap() {
                "GB/s" => {
                    assert!(o["gbps"].as_f64().unwrap() > 0.0, "{o}");
                    assert_eq!(o["repetitions"], 2, "{o}");
                }
                "us" => {
                    assert_eq!(o["ops"], 80, "{o}");
                    assert!(o["p99_us"].as_f64() >= o["median_us"].as_f64(), "{o}");
                }
                other => panic!("unit {other}"),
            }
        }
    }
    // The file, created by the first run, is taken as it is by the next ones.
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 4 << 20);
}

#[test]
fn cold_reads_run_as_root_and_say_why_not_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let (objects, summary) = bench_json(&dir.path().join("f.dat"), &["--only", "cold"]);
    if summary["cold"] == true {
        assert_eq!(keys(&objects), ["read_cold"]);
    } else {
        assert!(objects.is_empty());
        assert!(
            summary["notes"].to_string().contains("cold read skipped"),
            "{summary}"
        );
    }
}

#[test]
fn the_baseline_runs_next_to_ours() {
    let dir = tempfile::tempdir().unwrap();
    let (objects, _) = bench_json(
        &dir.path().join("f.dat"),
        &["--only", "hot", "--baseline", "--backend", "fallback"],
    );
    assert_eq!(
        keys(&objects),
        ["read_hot", "read_hot_again", "baseline_read_hot"]
    );
    assert!(find(&objects, "read_hot")["label"]
        .as_str()
        .unwrap()
        .contains("fallback"));
}

/// A stand-in for `kvikio_anchor.py`: the same arguments, anchor-shaped lines, fixed figures.
/// Each process appends what it was asked for to `calls.jsonl` beside the script. Like the
/// real script, it opens the write target `r+` (it must exist) and its first hot read of a
/// process is slow (KvikIO's set-up).
const FAKE_ANCHOR: &str = r#"
import argparse, json, os
ap = argparse.ArgumentParser()
ap.add_argument("file")
ap.add_argument("--threads", default="1,8,16")
ap.add_argument("--task-size", type=int, default=0)
ap.add_argument("--size", type=int, default=0)
ap.add_argument("--cold", action="store_true")
ap.add_argument("--write")
ap.add_argument("--small", action="store_true")
ap.add_argument("--latency-ops", type=int, default=2000)
a = ap.parse_args()
size = a.size or os.path.getsize(a.file)
seen = {"file": a.file, "threads": a.threads, "size": a.size, "task_size": a.task_size,
        "latency_ops": a.latency_ops if a.small else None, "write": a.write,
        "write_size": os.path.getsize(a.write) if a.write else None}
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "calls.jsonl"), "a") as log:
    log.write(json.dumps(seen) + "\n")
print("a line that is not JSON")
for th in [int(t) for t in a.threads.split(",")]:
    samples = (["cold"] if a.cold else []) + ["hot", "hot"]
    for i, cache in enumerate(samples):
        gbps = 0.0001 if cache == "hot" and samples.index("hot") == i else 0.001 * th
        print(json.dumps({"tool": "kvikio", "op": "read", "threads": th, "cache": cache,
                          "task_size": a.task_size or 4194304, "bytes": size, "gbps": gbps,
                          "cores": 0.5 * th, "verified": True}))
    if a.write:
        with open(a.write, "r+b") as f:
            f.write(b"x")
        print(json.dumps({"tool": "kvikio", "op": "write", "threads": th, "bytes": size,
                          "gbps": 0.002, "cores": 0.25}))
if a.small:
    for sz in (4096, 65536, 1 << 20):
        print(json.dumps({"tool": "kvikio", "op": "read_latency", "bytes": sz, "us_per_op": 1e6,
                          "us_median": 9e5, "us_p99": 2e6}))
"#;

fn anchor_calls(dir: &Path) -> Vec<Value> {
    let calls = std::fs::read_to_string(dir.join("calls.jsonl")).unwrap();
    std::fs::remove_file(dir.join("calls.jsonl")).unwrap();
    calls
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_kvikio_anchor_is_run_parsed_and_compared() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("fake_anchor.py");
    std::fs::write(&script, FAKE_ANCHOR).unwrap();
    let file = dir.path().join("f.dat");
    let (objects, summary) = bench_json(
        &file,
        &[
            "--only",
            "hot,write,latency",
            "--kvikio",
            script.to_str().unwrap(),
            "--kvikio-threads",
            "1,4",
        ],
    );
    assert!(
        !summary["notes"]
            .to_string()
            .contains("KvikIO anchor failed"),
        "{summary}"
    );
    let hot = find(&objects, "read_hot");
    // The best of the sweep: 4 threads, 0.004 GB/s (the slow first hot read of each process
    // is its set-up, left out), with the cores the script printed.
    assert_eq!(hot["anchor"]["threads"], 4, "{hot}");
    assert_eq!(hot["anchor"]["value"], 0.004, "{hot}");
    assert_eq!(hot["anchor"]["cores"], 2.0, "{hot}");
    assert_eq!(hot["anchor"]["task_size"], 4 << 20, "{hot}");
    let ratio = hot["ratio"].as_f64().unwrap();
    assert!(
        (ratio - hot["gbps"].as_f64().unwrap() / 0.004).abs() < 0.01 * ratio,
        "{hot}"
    );
    let write = find(&objects, "write");
    assert_eq!(write["anchor"]["value"], 0.002);
    assert_eq!(write["anchor"]["cores"], 0.25);
    // Latency is compared by median, and the anchor's p99 is shown.
    let lat = find(&objects, "latency_4k");
    assert_eq!(lat["anchor"]["value"], 9e5);
    assert_eq!(lat["anchor"]["p99_us"], 2e6);
    assert_eq!(lat["anchor"]["threads"], 1);
    assert_eq!(lat["ratio_basis"], "median us per read, ours / anchor");
    assert!(lat["ratio"].as_f64().unwrap() < 1.0, "{lat}");
    // Two repetitions, one hot sample each per thread count, each checked by the script.
    let t1 = find(&objects, "kvikio_read_hot_t1");
    assert_eq!(t1["samples"].as_array().unwrap().len(), 2, "{t1}");
    assert_eq!(t1["verified"], true, "{t1}");
    assert_eq!(t1["checks"], 2, "{t1}");
    assert_eq!(t1["cores"], 0.5, "{t1}");
    find(&objects, "kvikio_read_hot_t4");

    // What the script was asked: one process per thread count and repetition, our size, our
    // small-read count (once per repetition, in the 1-thread process), no task size (on the sim
    // the fastpath serves our reads, so our chunk is not the comparable setting), and a write
    // target that is not the file read, exists, and has our size.
    let calls = anchor_calls(dir.path());
    let threads: Vec<&str> = calls
        .iter()
        .map(|c| c["threads"].as_str().unwrap())
        .collect();
    assert_eq!(threads, ["1", "4", "1", "4"]);
    for c in &calls {
        assert_eq!(c["size"], 4 << 20, "{c}");
        assert_eq!(c["task_size"], 0, "{c}");
        let small = if c["threads"] == "1" {
            40.into()
        } else {
            Value::Null
        };
        assert_eq!(c["latency_ops"], small, "{c}");
        let target = Path::new(c["write"].as_str().unwrap());
        assert_ne!(target, file);
        assert_eq!(target.parent(), Some(dir.path()));
        assert_eq!(c["write_size"], 4 << 20, "{c}");
    }
    assert_eq!(names_in(dir.path()), ["f.dat", "fake_anchor.py"]);

    // With the staged engine serving our reads, KvikIO gets its chunk as task size.
    bench_json(
        &file,
        &[
            "--only",
            "hot",
            "--backend",
            "fallback",
            "--kvikio",
            script.to_str().unwrap(),
            "--kvikio-threads",
            "2",
        ],
    );
    for c in anchor_calls(dir.path()) {
        assert_eq!(c["task_size"], 4 << 20, "{c}");
        assert_eq!(c["write"], Value::Null, "{c}");
        assert_eq!(c["latency_ops"], Value::Null, "{c}");
    }
}

#[test]
fn a_failing_anchor_is_a_note_not_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("broken.py");
    std::fs::write(&script, "import sys\nsys.exit('no cupy here')\n").unwrap();
    let (objects, summary) = bench_json(
        &dir.path().join("f.dat"),
        &["--only", "hot", "--kvikio", script.to_str().unwrap()],
    );
    assert_eq!(keys(&objects), ["read_hot", "read_hot_again"]);
    assert!(
        summary["notes"].to_string().contains("no cupy here"),
        "{summary}"
    );
}

#[test]
fn the_table_is_readable() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hipfile"))
        .args([
            "bench",
            "--platform",
            "sim",
            "--size",
            "2M",
            "--repeat",
            "1",
        ])
        .args(["--latency-ops", "10", "--only", "hot,latency", "--file"])
        .arg(dir.path().join("f.dat"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for want in [
        "platform sim",
        "\nread_hot ",
        "GB/s",
        "\nlatency_4k ",
        "latency_<size>  ",
        "random reads of <size>, one at a time",
        "checked",
        "1 ok",
        "only compare hipfile-rs with itself",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    // The checks that ran, not a constant: the first read, the hot read and its second read,
    // three small reads and their three floors (one line, wrapped).
    let verified = unwrapped(&text)
        .into_iter()
        .find(|l| l.starts_with("verified: "))
        .unwrap_or_else(|| panic!("no verified line in:\n{text}"));
    assert!(
        verified.starts_with("verified: 9 byte checks passed")
            && verified.contains("first_read, read_hot, read_hot_again, latency_4k"),
        "{verified}"
    );
}

/// The report's lines with each wrapped line joined to the line it continues.
fn unwrapped(text: &str) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for line in text.lines() {
        match lines.last_mut() {
            Some(last) if line.starts_with("  ") && !last.is_empty() && !last.starts_with(' ') => {
                last.push(' ');
                last.push_str(line.trim_start());
            }
            _ => lines.push(line.to_string()),
        }
    }
    lines
}

/// Bytes no pattern of the bench makes (SplitMix64 of a fixed seed).
fn foreign_bytes(len: usize) -> Vec<u8> {
    splitmix_bytes(len, 0x1234_5678_9abc_def0)
}

#[test]
fn a_file_it_is_given_keeps_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f.dat");
    let before = foreign_bytes(4 << 20);
    std::fs::write(&file, &before).unwrap();
    let modified = std::fs::metadata(&file).unwrap().modified().unwrap();
    // Small reads land in the buffer the writes write out; both run twice.
    let (objects, summary) = bench_json(&file, &["--only", "write,latency"]);
    assert_eq!(summary["file_created"], false);
    let after = std::fs::read(&file).unwrap();
    assert_eq!(after.len(), before.len());
    let changed = before.iter().zip(&after).filter(|(a, b)| a != b).count();
    assert_eq!(
        changed, 0,
        "hipfile bench changed {changed} bytes of the file it was given"
    );
    assert_eq!(
        std::fs::metadata(&file).unwrap().modified().unwrap(),
        modified
    );
    // The writes went to a scratch file next to it, which is gone.
    let target = summary["write_target"].as_str().unwrap();
    assert_ne!(Path::new(target), file);
    assert_eq!(Path::new(target).parent(), Some(dir.path()));
    assert_eq!(names_in(dir.path()), ["f.dat"]);
    for key in ["write", "write_fsync"] {
        let w = find(&objects, key);
        assert_eq!(w["verified"], true, "{w}");
        assert_eq!(w["bytes_checked"], 2 * (4 << 20), "{w}");
    }
    assert_eq!(summary["verified"], true, "{summary}");
}

#[test]
fn only_regular_files_with_bytes_are_read_and_nothing_else_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.dat");
    std::fs::write(&empty, b"").unwrap();
    for (path, why) in [
        (empty.as_path(), "is empty"),
        (dir.path(), "not a regular file"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_hipfile"))
            .args(["bench", "--platform", "sim", "--size", "1M", "--file"])
            .arg(path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(why), "{stderr}");
    }
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0);
    assert_eq!(names_in(dir.path()), ["empty.dat"]);
}

#[test]
fn the_batch_phase_reads_against_sync_threads_and_its_counts_add_up() {
    let dir = tempfile::tempdir().unwrap();
    let (objects, summary) = bench_json(
        &dir.path().join("f.dat"),
        &["--only", "batch", "--batch-ops", "100"],
    );
    let batch = &summary["batch"];
    // 100 reads per run of 4 KiB; a 4 MiB file holds only 64 regions of 64 KiB.
    let runs = [("4k", 4096u64, 100u64), ("64k", 65536, 64)];
    assert_eq!(batch["ops"]["4k"], 100, "{summary}");
    assert_eq!(batch["ops"]["64k"], 64, "{summary}");
    assert!(
        summary["notes"]
            .to_string()
            .contains("64 random 64k reads per run"),
        "{summary}"
    );
    let checked_per_run = batch["checked_entries"].as_u64().unwrap();
    for (name, bytes, ops) in runs {
        for depth in [1u64, 8, 32, 128] {
            let o = find(&objects, &format!("batch_{name}_qd{depth}"));
            assert_eq!(o["unit"], "IOPS", "{o}");
            assert_eq!(o["bytes"], bytes, "{o}");
            assert_eq!(o["threads"], 0, "{o}");
            assert_eq!(o["queue_depth"], depth.min(ops), "{o}");
            assert_eq!(o["repetitions"], 2, "{o}");
            // Every read of both runs is timed; a sample of each run is checked.
            assert_eq!(o["ops"], 2 * ops, "{o}");
            let checks = 2 * checked_per_run.min(ops);
            assert_eq!(o["checks"], checks, "{o}");
            assert_eq!(o["bytes_checked"], checks * bytes, "{o}");
            assert_eq!(o["verified"], true, "{o}");
            assert!(o["iops"].as_f64().unwrap() > 0.0, "{o}");
            assert!(o["p99_us"].as_f64() >= o["median_us"].as_f64(), "{o}");
            let threads = [1u64, 8, 16].into_iter().filter(|t| *t <= depth).max();
            let versus = format!("sync_{name}_t{}", threads.unwrap());
            assert_eq!(o["versus"]["key"], versus.as_str(), "{o}");
            let reference = find(&objects, &versus)["iops"].as_f64().unwrap();
            let ratio = o["versus_ratio"].as_f64().unwrap();
            let want = o["iops"].as_f64().unwrap() / reference;
            assert!((ratio - want).abs() <= 0.01 * want + 0.001, "{o}");
        }
        for threads in [1u64, 8, 16] {
            let o = find(&objects, &format!("sync_{name}_t{threads}"));
            assert_eq!(o["unit"], "IOPS", "{o}");
            assert_eq!(o["threads"], threads, "{o}");
            assert_eq!(o["queue_depth"], Value::Null, "{o}");
            assert_eq!(o["ops"], 2 * ops, "{o}");
            // The last read of each thread, in each run.
            assert_eq!(o["checks"], 2 * threads, "{o}");
            assert_eq!(o["bytes_checked"], 2 * threads * bytes, "{o}");
            assert_eq!(o["verified"], true, "{o}");
        }
    }
    // 64 entries over the whole file, read against the hot read it brought along.
    assert_eq!(batch["large"]["entries"], 64, "{summary}");
    assert_eq!(batch["large"]["entry_bytes"], 65536, "{summary}");
    let large = find(&objects, "batch_large");
    assert_eq!(large["unit"], "GB/s", "{large}");
    assert_eq!(large["queue_depth"], 64, "{large}");
    assert_eq!(large["bytes"], 4 << 20, "{large}");
    assert_eq!(large["checks"], 2, "{large}");
    assert_eq!(large["bytes_checked"], 2 * (4 << 20), "{large}");
    assert_eq!(large["versus"]["key"], "read_hot", "{large}");
    assert_eq!(
        large["versus"]["value"],
        find(&objects, "read_hot")["gbps"],
        "{large}"
    );
    // Cold: the batch at queue depth 32 against 32 O_DIRECT threads, as root; a note otherwise.
    if batch["cold"]["ran"] == true {
        let cold = find(&objects, "batch_cold_4k_qd32");
        assert_eq!(cold["ops"], 200, "{cold}");
        assert_eq!(cold["queue_depth"], 32, "{cold}");
        assert_eq!(cold["checks"], 2 * 64, "{cold}");
        assert_eq!(cold["verified"], true, "{cold}");
        if objects.iter().any(|o| o["key"] == "ceiling_odirect_4k_t32") {
            let ceiling = find(&objects, "ceiling_odirect_4k_t32");
            assert_eq!(ceiling["ops"], 200, "{ceiling}");
            assert_eq!(ceiling["threads"], 32, "{ceiling}");
            assert_eq!(ceiling["verified"], Value::Null, "{ceiling}");
            assert_eq!(cold["versus"]["key"], "ceiling_odirect_4k_t32", "{cold}");
            assert!(cold["versus_ratio"].as_f64().unwrap() > 0.0, "{cold}");
        } else {
            assert!(
                summary["notes"].to_string().contains("O_DIRECT"),
                "{summary}"
            );
        }
    } else {
        assert!(
            summary["notes"]
                .to_string()
                .contains("batch cold reads and their O_DIRECT ceiling skipped"),
            "{summary}"
        );
    }
    // The ledger behind the rows: every check the rows count is in the summary, none failed.
    assert_eq!(summary["verified"], true, "{summary}");
    for o in &objects {
        let key = o["key"].as_str().unwrap();
        if key.starts_with("ceiling_") {
            continue;
        }
        let ledger = &summary["verification"][key];
        assert_eq!(ledger["checks"], o["checks"], "{key}: {summary}");
        assert_eq!(ledger["bytes"], o["bytes_checked"], "{key}: {summary}");
        assert_eq!(ledger["failures"], 0, "{key}: {summary}");
    }
}

#[test]
fn the_default_run_has_the_batch_phase_and_its_table_reads_against_the_same_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hipfile"))
        .args([
            "bench",
            "--platform",
            "sim",
            "--size",
            "2M",
            "--repeat",
            "1",
        ])
        .args(["--latency-ops", "10", "--batch-ops", "40", "--file"])
        .arg(dir.path().join("f.dat"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    for want in [
        "vs same run",
        "\nbatch_4k_qd32 ",
        "\nsync_64k_t16 ",
        "x sync_4k_t16\n",
        "\nbatch_large ",
        "x read_hot\n",
        "large: 64 x 32 KiB in one batch",
        "IOPS",
        "small counts for the simulated GPU",
        "\nlatency_1m ",
    ] {
        assert!(text.contains(want), "{want:?} missing from:\n{text}");
    }
    // The legend explains each kind of row.
    for (pattern, what) in [
        (
            "batch_<size>_qd<n>",
            "random reads of <size> through one batch, <n> in flight, hot",
        ),
        (
            "sync_<size>_t<n>",
            "the same reads as synchronous calls from <n> threads",
        ),
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("  {pattern} ")) && l.ends_with(what)),
            "{pattern} not explained in:\n{text}"
        );
    }
}

/// A stand-in for `kvikio_anchor.py` whose cold reads are far faster than any storage: the
/// bench marks them, takes no ratio with them, and still fits the width.
const FAST_COLD_ANCHOR: &str = r#"
import argparse, json
ap = argparse.ArgumentParser()
ap.add_argument("file")
ap.add_argument("--threads")
ap.add_argument("--size", type=int)
ap.add_argument("--task-size", type=int)
ap.add_argument("--cold", action="store_true")
ap.add_argument("--write")
ap.add_argument("--small", action="store_true")
ap.add_argument("--latency-ops", type=int)
a = ap.parse_args()
th = int(a.threads)
for cache in (["cold"] if a.cold else []) + ["hot", "hot"]:
    print(json.dumps({"tool": "kvikio", "op": "read", "threads": th, "cache": cache,
                      "bytes": a.size, "gbps": 1e6 if cache == "cold" else 1.5, "cores": 1.25,
                      "verified": True}))
if a.write:
    print(json.dumps({"tool": "kvikio", "op": "write", "threads": th, "bytes": a.size,
                      "gbps": 0.75}))
if a.small:
    for sz in (4096, 65536, 1 << 20):
        print(json.dumps({"tool": "kvikio", "op": "read_latency", "bytes": sz,
                          "us_per_op": 1234.5, "us_median": 1234.5, "us_p99": 12345.6}))
"#;

#[test]
fn every_line_of_a_run_of_every_phase_fits_120_columns() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("anchor.py");
    std::fs::write(&script, FAST_COLD_ANCHOR).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hipfile"))
        .args([
            "bench",
            "--platform",
            "sim",
            "--size",
            "4M",
            "--repeat",
            "1",
        ])
        .args([
            "--latency-ops",
            "10",
            "--batch-ops",
            "40",
            "--async-op-size",
            "1M",
        ])
        .args(["--baseline", "--kvikio-threads", "1,32", "--kvikio"])
        .arg(&script)
        .arg("--file")
        .arg(dir.path().join("f.dat"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let widest = text.lines().map(|l| l.chars().count()).max().unwrap_or(0);
    assert!(widest <= 120, "a line of {widest} columns in:\n{text}");
    // Every phase that runs on the sim is in it, and every kind of row it has is explained.
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.starts_with("row "))
        .skip(2)
        .take_while(|l| !l.is_empty() && !l.starts_with("* "))
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split(' ').next())
        .collect();
    for key in [
        "read_hot",
        "baseline_read_hot",
        "write_fsync",
        "latency_floor_64k",
        "batch_64k_qd128",
        "sync_4k_t16",
        "batch_large",
        "async_s4",
        "replay_s1",
        "async_overlap_together",
        "ceiling_h2d_pinned",
        "kvikio_read_hot_t32",
    ] {
        assert!(rows.contains(&key), "no {key} row in:\n{text}");
    }
    let legend = text.split("\nlegend ").nth(1).unwrap();
    assert!(legend.contains("kvikio_read_<cache>_t<n>"), "{text}");
    // The simulated GPU's figures are said to compare the library with itself only.
    assert!(
        unwrapped(&text).iter().any(|l| l.contains(
            "these figures only compare hipfile-rs with itself and with the plain designs \
             measured beside it"
        )),
        "{text}"
    );
    // The anchor's table; as root, its cold reads (a million GB/s) are marked and not compared.
    assert!(text.contains("\nagainst KvikIO "), "{text}");
    if text.contains("\nread_cold ") {
        assert!(
            text.contains("* read_cold: KvikIO's is not cold: "),
            "{text}"
        );
        let row = text
            .lines()
            .skip_while(|l| !l.starts_with("against KvikIO"))
            .find(|l| l.starts_with("read_cold "))
            .unwrap();
        assert!(row.ends_with(" -"), "{row}");
    }
}

#[test]
fn a_signal_removes_what_the_bench_made_and_ends_it_by_that_signal() {
    use rustix::process::{Pid, Signal};
    use std::os::unix::process::ExitStatusExt;
    use std::time::{Duration, Instant};

    // Each case: where the bench runs, what it is given, what must appear before the signal,
    // and what must be left after it.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let in_made_dir = |name: &str| {
        names_in(d)
            .iter()
            .filter(|n| n.starts_with("hipfile-bench"))
            .any(|n| names_in(&d.join(n)).iter().any(|m| m.starts_with(name)))
    };
    for (signal, file, appeared, left) in [
        // The file it makes, in a directory of its own, while it is made or being read.
        (Signal::INT, None, "bench.dat", Vec::<&str>::new()),
        // The scratch file of the writes.
        (Signal::TERM, None, "hipfile-bench-scratch-", Vec::new()),
        // A file it was asked to make is kept once made; the scratch file beside it goes.
        (
            Signal::HUP,
            Some("kept.dat"),
            "hipfile-bench-scratch-",
            vec!["kept.dat"],
        ),
    ] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hipfile"));
        cmd.current_dir(d)
            .args([
                "bench",
                "--platform",
                "sim",
                "--size",
                "64M",
                "--repeat",
                "1000",
            ])
            .args(["--only", "write,hot"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        if let Some(f) = file {
            cmd.args(["--file", f]);
        }
        let mut child = cmd.spawn().unwrap();
        let start = Instant::now();
        loop {
            let seen = match file {
                Some(_) => names_in(d).iter().any(|n| n.starts_with(appeared)),
                None => in_made_dir(appeared),
            };
            if seen {
                break;
            }
            assert!(
                child.try_wait().unwrap().is_none(),
                "{signal:?}: it ended early"
            );
            assert!(
                start.elapsed() < Duration::from_secs(120),
                "{signal:?}: {:?}",
                names_in(d)
            );
            std::thread::sleep(Duration::from_millis(2));
        }
        let pid = Pid::from_raw(child.id() as i32).unwrap();
        rustix::process::kill_process(pid, signal).unwrap();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if start.elapsed() > Duration::from_secs(180) {
                child.kill().unwrap();
                panic!("{signal:?}: the bench did not end");
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(
            status.signal(),
            Some(signal.as_raw()),
            "{signal:?}: {status}"
        );
        assert_eq!(names_in(d), left, "{signal:?}");
    }
}
