//! `cargo xtask python`: the `hipfile` Python package, built and tested on the sim.
//!
//! A virtual environment under the target directory (`target/python/venv`, made with
//! `python3 -m venv` and kept between runs) gets the pinned [`TOOLS`] from PyPI; maturin builds
//! the wheel of `hipfile-py/` (dev profile: CI time matters more than speed on the sim, and the
//! dev profile shares the workspace's build artifacts) into `target/python/wheels/`; the wheel is
//! installed into the venv, and pytest runs `hipfile-py/tests` with `HIPFILE_PLATFORM=sim`. The
//! tests include a run of the benchmark script at 64 MiB, so it cannot rot unseen. The tests are
//! counted one by one from pytest's JUnit XML report (`target/python/pytest.xml`).
//!
//! [`build_wheel`] also serves `gpu-bundle`, which ships a release wheel.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::counts::{Counts, Report};
use crate::workspace::{self, Workspace};

/// What the venv gets from PyPI, pinned. Maturin builds the wheel; pytest and NumPy run the
/// tests (NumPy is the host-array library the tests use).
pub const TOOLS: &[&str] = &["maturin==1.7.4", "pytest==8.3.4", "numpy==2.1.3"];

/// The crate that holds the package.
pub const PACKAGE_DIR: &str = "hipfile-py";

/// `cargo xtask python`: counts one per pytest test.
pub fn run() -> Report {
    let base = match Workspace::load() {
        Ok(ws) => ws.target_dir.join("python"),
        Err(why) => return Report::failed(why),
    };
    let junit = base.join("pytest.xml");
    let _ = std::fs::remove_file(&junit);
    let result = build_and_test(&base, &junit);
    // No report: pytest never ran, and `result` says why, or it ran and wrote none.
    let Ok(xml) = std::fs::read_to_string(&junit) else {
        let why = result
            .err()
            .unwrap_or_else(|| format!("pytest wrote no report to {}", junit.display()));
        return Report::failed(why);
    };
    match pytest_counts(&xml) {
        Ok(counts) => Report::new(counts, result),
        Err(why) => Report::failed(format!("{}: {why}", junit.display())),
    }
}

/// The wheel built into `base` and installed there, then pytest, which writes its JUnit XML
/// report to `junit`.
fn build_and_test(base: &Path, junit: &Path) -> Result<(), String> {
    let python = venv(&base.join("venv"))?;
    let wheel = build_wheel(&python, &base.join("wheels"), "dev")?;
    pip_install(
        &python,
        &["--force-reinstall", "--no-deps"],
        &[wheel.as_os_str()],
    )?;
    run_command(
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml"])
            .arg(junit)
            .arg("tests")
            .current_dir(workspace::root().join(PACKAGE_DIR))
            .env("HIPFILE_PLATFORM", "sim"),
    )
}

/// The tests in pytest's JUnit XML report (`--junitxml`), from the counts on its `<testsuite>`
/// elements: `tests` counts them all, `failures`, `errors` and `skipped` (xfails included) the
/// ones that did not pass. A test that failed and then errored in its teardown is one of `tests`
/// but counted in both `failures` and `errors`, and so here twice as a failure.
pub fn pytest_counts(xml: &str) -> Result<Counts, String> {
    let mut counts = Counts::default();
    let mut suites = 0;
    for (at, _) in xml.match_indices("<testsuite ") {
        let tag = &xml[at..];
        let tag = &tag[..tag.find('>').ok_or("a <testsuite> tag is not closed")?];
        let count = |name: &str| -> Result<usize, String> {
            let key = format!(" {name}=\"");
            let start = tag
                .find(&key)
                .ok_or_else(|| format!("<testsuite> has no {name} count"))?
                + key.len();
            let value = &tag[start..];
            let value = &value[..value.find('"').unwrap_or(value.len())];
            value
                .parse()
                .map_err(|_| format!("<testsuite {name}=\"{value}\"> is not a count"))
        };
        let tests = count("tests")?;
        let failed = count("failures")? + count("errors")?;
        let skipped = count("skipped")?;
        counts.add(Counts {
            passed: tests.saturating_sub(failed + skipped),
            skipped,
            failed,
        });
        suites += 1;
    }
    if suites == 0 {
        return Err("no <testsuite> element".into());
    }
    Ok(counts)
}

/// The Python of the venv at `dir` with [`TOOLS`] installed; made when missing.
pub fn venv(dir: &Path) -> Result<PathBuf, String> {
    let python = dir.join("bin/python");
    if !python.is_file() {
        run_command(Command::new("python3").args(["-m", "venv"]).arg(dir)).map_err(|e| {
            format!(
                "{e}\n(python3 -m venv needs Python 3.9 or later with venv and ensurepip; on \
                 Debian: apt-get install python3-venv)"
            )
        })?;
    }
    let tools: Vec<&std::ffi::OsStr> = TOOLS.iter().map(std::ffi::OsStr::new).collect();
    pip_install(&python, &["--disable-pip-version-check"], &tools)?;
    Ok(python)
}

/// Builds the wheel with `python`'s maturin in `profile` (`dev` or `release`) into `out`
/// (emptied of older wheels first); returns its path.
pub fn build_wheel(python: &Path, out: &Path, profile: &str) -> Result<PathBuf, String> {
    if out.exists() {
        std::fs::remove_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    let ws = Workspace::load()?;
    let maturin = python.with_file_name("maturin");
    run_command(
        Command::new(&maturin)
            .args(["build", "--quiet", "--profile", profile, "--out"])
            .arg(out)
            .current_dir(workspace::root().join(PACKAGE_DIR))
            .env("CARGO_TARGET_DIR", &ws.target_dir),
    )?;
    let wheels: Vec<PathBuf> = std::fs::read_dir(out)
        .map_err(|e| format!("{}: {e}", out.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    match wheels.as_slice() {
        [wheel] => Ok(wheel.clone()),
        _ => Err(format!(
            "maturin left {} wheels in {}, not one",
            wheels.len(),
            out.display()
        )),
    }
}

/// `python -m pip install --quiet` with `flags`, of `what`.
fn pip_install(python: &Path, flags: &[&str], what: &[&std::ffi::OsStr]) -> Result<(), String> {
    run_command(
        Command::new(python)
            .args(["-m", "pip", "install", "--quiet"])
            .args(flags)
            .args(what),
    )
}

fn run_command(command: &mut Command) -> Result<(), String> {
    let shown = format!(
        "{} {}",
        command.get_program().to_string_lossy(),
        command
            .get_args()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("$ {shown}");
    workspace::run_to_end(command, &shown, &shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytest_tests_are_counted_from_the_junit_report() {
        let xml = concat!(
            r#"<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests">"#,
            r#"<testsuite name="pytest" errors="1" failures="2" skipped="3" tests="40" "#,
            r#"time="3.210" timestamp="2025-01-01T00:00:00" hostname="h">"#,
            r#"<testcase classname="tests.test_io" name="test_read" time="0.01" />"#,
            r#"</testsuite></testsuites>"#
        );
        assert_eq!(
            pytest_counts(xml),
            Ok(Counts {
                passed: 34,
                skipped: 3,
                failed: 3
            })
        );
        assert_eq!(
            pytest_counts("<testsuites></testsuites>"),
            Err("no <testsuite> element".to_string())
        );
        let unreadable = r#"<testsuite errors="0" failures="0" skipped="0" tests="many">"#;
        assert!(pytest_counts(unreadable).is_err_and(|e| e.contains("tests=\"many\"")));
        let partial = r#"<testsuite name="pytest" errors="0" tests="4">"#;
        assert!(pytest_counts(partial).is_err_and(|e| e.contains("no failures count")));
    }
}
