//! `cargo xtask test`'s `servers` step: the tests that need real servers, and the S3 figures.
//!
//! It brings up the single-node Ceph cluster ([`crate::ceph`]: RADOS Gateway for S3, CephFS on
//! ceph-fuse) unless one is up already, then runs with the cluster's environment:
//! - the server test targets of the crates that have them ([`TARGETS`]: nginx on loopback, which
//!   the tests start themselves, and the gateway), and the CephFS targets ([`crate::ceph::TESTS`]);
//! - the Python package's server tests (`hipfile-py/tests/server`, `HIPFILE_SERVER_TESTS=http,s3`)
//!   in the venv the `python` step made, which therefore runs first;
//! - the S3 figures on the simulated GPU: `s3_roundtrip` (hipfile-remote's example, release: an
//!   object written from device memory as a multipart upload and read back, byte-checked, GB/s
//!   each way) and `hipfile bench --remote` on that object (release);
//!
//! and takes the cluster down again when it started it. Without Ceph's packages (`cargo xtask
//! ceph install`) or nginx the step fails and says so: these tests never skip.

use std::process::Command;

use crate::counts::{Counts, Report};
use crate::workspace::{self, Workspace};
use crate::{ceph, matrix, python};

/// Server test targets: (package, feature, test target).
pub const TARGETS: &[(&str, &str, &str)] = &[
    ("hipfile-remote", "server-tests", "servers"),
    ("hipfile-cli", "server-tests", "server"),
];

/// Size of the figures' object, in MiB.
const FIGURES_MIB: &str = "256";

pub fn run() -> Report {
    let ceph::Running {
        cluster,
        started,
        vars,
    } = match ceph::ensure_up() {
        Ok(up) => up,
        Err(why) => {
            return Report::failed(format!(
                "the Ceph cluster: {why} (`cargo xtask ceph install` installs its packages)"
            ))
        }
    };
    let env: Vec<(&str, String)> = vars
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .chain([("HIPFILE_PLATFORM", "sim".to_string())])
        .collect();
    let mut counts = Counts::default();
    let mut failures = Vec::new();
    let ceph_targets = ceph::TESTS.iter().map(|(p, t)| (*p, "ceph", *t));
    for (package, feature, target) in TARGETS.iter().copied().chain(ceph_targets) {
        let args: Vec<String> = [
            "test",
            "-p",
            package,
            "--features",
            feature,
            "--test",
            target,
        ]
        .map(String::from)
        .to_vec();
        let (counted, result) = matrix::run_counted(&args, &env);
        counts.add(counted);
        if let Err(why) = result {
            failures.push(why);
        }
    }
    match python_server_tests(&env) {
        Ok(counted) => counts.add(counted),
        Err(why) => {
            counts.add(Counts {
                failed: 1,
                ..Counts::default()
            });
            failures.push(why);
        }
    }
    match figures(&env) {
        Ok(()) => counts.add(Counts {
            passed: 1,
            ..Counts::default()
        }),
        Err(why) => {
            counts.add(Counts {
                failed: 1,
                ..Counts::default()
            });
            failures.push(why);
        }
    }
    if started {
        if let Err(why) = ceph::take_down(&cluster) {
            failures.push(format!("ceph down: {why}"));
        }
    }
    let result = if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("; "))
    };
    Report::new(counts, result)
}

/// pytest on `hipfile-py/tests/server` in the `python` step's venv, with the wheel it installed.
fn python_server_tests(env: &[(&str, String)]) -> Result<Counts, String> {
    let base = Workspace::load()?.target_dir.join("python");
    let python = python::venv(&base.join("venv"))?;
    let junit = base.join("pytest-servers.xml");
    let _ = std::fs::remove_file(&junit);
    let mut command = Command::new(&python);
    command
        .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml"])
        .arg(&junit)
        .arg("tests/server")
        .current_dir(workspace::root().join(python::PACKAGE_DIR))
        .env("HIPFILE_SERVER_TESTS", "http,s3")
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())));
    println!(
        "\n$ HIPFILE_SERVER_TESTS=http,s3 {} -m pytest tests/server",
        python.display()
    );
    let status = command
        .status()
        .map_err(|e| format!("cannot run pytest: {e}"))?;
    let xml = std::fs::read_to_string(&junit)
        .map_err(|e| format!("pytest wrote no report to {}: {e}", junit.display()))?;
    let counts = python::pytest_counts(&xml)?;
    if status.success() {
        Ok(counts)
    } else {
        Err(format!("pytest tests/server: {status}"))
    }
}

/// The S3 figures: the roundtrip example, then `hipfile bench --remote` on its object.
fn figures(env: &[(&str, String)]) -> Result<(), String> {
    let build = [
        "build",
        "--release",
        "-p",
        "hipfile-remote",
        "--example",
        "s3_roundtrip",
        "-p",
        "hipfile-cli",
        // Target flags apply to every package named: without it, only the example is built.
        "--bin",
        "hipfile",
    ];
    println!("\n$ cargo {}", build.join(" "));
    workspace::run_to_end(
        workspace::cargo().args(build),
        "cargo",
        "cargo build --release",
    )?;
    let release = Workspace::load()?.target_dir.join("release");
    let example = release.join("examples/s3_roundtrip");
    println!("\n$ {} {FIGURES_MIB}", example.display());
    let output = Command::new(&example)
        .arg(FIGURES_MIB)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .map_err(|e| format!("cannot run {}: {e}", example.display()))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}{}", String::from_utf8_lossy(&output.stderr));
    if !output.status.success() {
        return Err(format!("s3_roundtrip: {}", output.status));
    }
    let url = stdout.lines().last().unwrap_or_default().trim().to_string();
    let bench = release.join("hipfile");
    let args = ["bench", "--remote", url.as_str(), "--repeat", "3"];
    println!("\n$ {} {}", bench.display(), args.join(" "));
    workspace::run_to_end(
        Command::new(&bench)
            .args(args)
            .envs(env.iter().map(|(k, v)| (*k, v.as_str()))),
        "hipfile bench",
        "hipfile bench --remote",
    )
}
