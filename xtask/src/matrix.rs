//! `cargo xtask test-matrix`: every row of [`MATRIX`] is built and tested on its own package with
//! its own features (`cargo test -p <pkg> ...`, never `--workspace`, which unifies features and so
//! hides a crate that only builds thanks to a neighbour). After each facade row the registration
//! smoke test checks that the registered backends are exactly what the features imply; after each
//! row of a [`LinkedBackend`] (a backend crate outside the built-in set, whose tests link the
//! facade) its own registration test checks that the facade found it through `inventory`, ranked
//! after the built-in backends. All rows run; a summary table follows; the command fails if any
//! row failed or names a package the workspace lacks, and a test checks that every member with
//! tests has a row.
//!
//! Tests are counted one by one from libtest's `test NAME ... ok` lines, next to the test ledger
//! (`hipfile_testkit::ledger`, through `HIPFILE_TEST_LEDGER`): a test that recorded a skip counts
//! as skipped, not passed, and every summary line reads `N passed, S skipped, M failed`. A row
//! that failed without a failed test (it did not build, or its test binary crashed) counts one
//! failure, so the total never reads 0 failed when a row failed.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use crate::counts::{Counts, Report};
use crate::workspace::{self, Workspace};

/// The features a row builds with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Features {
    /// The package's default features: plain `cargo test -p <pkg>`.
    Default,
    /// `--no-default-features` plus this comma-separated list (empty: no features at all).
    Only(&'static str),
}

/// One row of the matrix.
#[derive(Debug, Clone, Copy)]
pub struct Row {
    pub package: &'static str,
    pub features: Features,
}

const fn row(package: &'static str, features: Features) -> Row {
    Row { package, features }
}

/// The facade: its rows are followed by the registration smoke test.
pub const FACADE: &str = "hipfile";

/// Backend features of the facade, in the order the registry lists their backends
/// (highest priority first). The registration smoke test expects exactly the enabled ones.
pub const BACKEND_FEATURES: &[&str] = &["fastpath", "fallback"];

/// The env var the registration tests compare the registered backend names with.
pub const EXPECT_BACKENDS_VAR: &str = "HIPFILE_EXPECT_BACKENDS";

/// A backend crate outside the built-in set (an example of a third party's crate) whose tests
/// link the facade: its rows' features are the facade's backend features (the crate forwards them
/// to its dev-dependency on the facade), and after each of its rows the registration step runs
/// its test `test` of the test target `target`, which expects the built-in backends the features
/// imply, then `backend`, whose priority ranks it below both.
#[derive(Debug, Clone, Copy)]
pub struct LinkedBackend {
    pub package: &'static str,
    pub backend: &'static str,
    pub target: &'static str,
    pub test: &'static str,
}

pub const LINKED_BACKENDS: &[LinkedBackend] = &[LinkedBackend {
    package: "hipfile-backend-bounce",
    backend: "bounce",
    target: "facade",
    test: "registration",
}];

pub const MATRIX: &[Row] = &[
    row("hipfile-hip", Features::Default),
    row("hipfile-core", Features::Default),
    row("hipfile-fallback", Features::Default),
    row("hipfile-fastpath", Features::Default),
    row("hipfile-testkit", Features::Default),
    row("hipfile-simhip", Features::Default),
    row("hipfile-simcuda", Features::Default),
    row(FACADE, Features::Only("fastpath,fallback")),
    row(FACADE, Features::Only("fastpath")),
    row(FACADE, Features::Only("fallback")),
    row(FACADE, Features::Only("")),
    row("hipfile-cufile", Features::Default),
    row("hipfile-cli", Features::Default),
    // Its tests against real servers (feature `server-tests`) run where the servers are.
    row("hipfile-remote", Features::Default),
    row("hipfile-examples", Features::Default),
    // With both built-in backends `bounce` ranks last; with the fastpath alone it is the staged
    // path, and serves what the fastpath declines.
    row(
        "hipfile-backend-bounce",
        Features::Only("fastpath,fallback"),
    ),
    row("hipfile-backend-bounce", Features::Only("fastpath")),
    row("xtask", Features::Default),
];

/// The facade's test target that holds the registration smoke test.
pub const FACADE_TEST_TARGET: &str = "it";

/// The registration smoke test, by its exact name in the facade's `it` binary.
pub const REGISTRATION_TEST: &str = "registration::registration";

/// The variable the test ledger is named by (as `hipfile_testkit::ledger::LEDGER_VAR`).
pub const LEDGER_VAR: &str = "HIPFILE_TEST_LEDGER";

/// The comma-separated backend names a feature list implies, fastpath first: the feature
/// `fallback` brings the staged engine and, from the same crate, the engine of host memory
/// (`host`).
pub fn expected_backends(features: &str) -> String {
    let enabled: Vec<&str> = features.split(',').map(str::trim).collect();
    BACKEND_FEATURES
        .iter()
        .copied()
        .filter(|backend| enabled.contains(backend))
        .flat_map(|backend| match backend {
            "fallback" => vec!["fallback", "host"],
            other => vec![other],
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// The backend names a facade with `features` registers when `backend` is linked into it too:
/// the built-in ones, then `backend`.
pub fn expected_with_linked(features: &str, backend: &str) -> String {
    let builtin = expected_backends(features);
    if builtin.is_empty() {
        backend.to_string()
    } else {
        format!("{builtin},{backend}")
    }
}

/// The registration test that follows a row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationStep {
    /// The test target (`--test <target>`).
    pub target: &'static str,
    /// The test's exact name.
    pub test: &'static str,
    /// What [`EXPECT_BACKENDS_VAR`] says: the comma-separated backend names in rank order.
    pub expected: String,
}

/// The registration step after `row`: for the facade and for a [`LinkedBackend`], on rows that
/// name their features; `None` for every other row.
pub fn registration_step(row: &Row) -> Option<RegistrationStep> {
    let Features::Only(list) = row.features else {
        return None;
    };
    if row.package == FACADE {
        return Some(RegistrationStep {
            target: FACADE_TEST_TARGET,
            test: REGISTRATION_TEST,
            expected: expected_backends(list),
        });
    }
    let linked = LINKED_BACKENDS.iter().find(|l| l.package == row.package)?;
    Some(RegistrationStep {
        target: linked.target,
        test: linked.test,
        expected: expected_with_linked(list, linked.backend),
    })
}

fn feature_args(features: Features) -> Vec<String> {
    match features {
        Features::Default => Vec::new(),
        Features::Only("") => vec!["--no-default-features".into()],
        Features::Only(list) => {
            vec![
                "--no-default-features".into(),
                "--features".into(),
                list.into(),
            ]
        }
    }
}

fn describe(features: Features) -> &'static str {
    match features {
        Features::Default => "(default)",
        Features::Only("") => "(none)",
        Features::Only(list) => list,
    }
}

/// Count libtest's per-test lines, with the ledger's skips (`skip<TAB>name<TAB>reason` lines)
/// taken out of the passes.
pub fn count_tests(output: &str, ledger: &str) -> Counts {
    let skipped: std::collections::BTreeSet<&str> = ledger
        .lines()
        .filter_map(|l| l.strip_prefix("skip\t"))
        .filter_map(|l| l.split('\t').next())
        .collect();
    let mut counts = Counts::default();
    for line in output.lines() {
        let Some(rest) = line.strip_prefix("test ") else {
            continue;
        };
        if let Some(name) = rest.strip_suffix(" ... ok") {
            if skipped.contains(name) {
                counts.skipped += 1;
            } else {
                counts.passed += 1;
            }
        } else if rest.ends_with(" ... FAILED") {
            counts.failed += 1;
        } else if rest.ends_with(" ... ignored") {
            counts.skipped += 1;
        }
    }
    counts
}

enum Outcome {
    Passed(Counts),
    Failed(String, Counts),
}

struct Line {
    package: &'static str,
    features: &'static str,
    step: &'static str,
    outcome: Outcome,
}

/// Run cargo, echoing its standard output while keeping it, with a fresh test ledger; the
/// outcome carries the tests counted.
fn run_cargo(args: &[String], env: &[(&str, String)], unset: &[&str]) -> Outcome {
    let ledger = std::env::temp_dir().join(format!(
        "hipfile-test-ledger-{}-{}",
        std::process::id(),
        LEDGER_SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&ledger);
    let mut command: Command = workspace::cargo();
    command.args(args).env(LEDGER_VAR, &ledger);
    for (key, value) in env {
        command.env(key, value);
    }
    for key in unset {
        command.env_remove(key);
    }
    println!("\n$ {}cargo {}", env_prefix(env), args.join(" "));
    let mut child = match command.stdout(Stdio::piped()).spawn() {
        Ok(child) => child,
        Err(e) => return Outcome::Failed(format!("cannot run cargo: {e}"), Counts::default()),
    };
    let mut output = String::new();
    if let Some(stdout) = child.stdout.take() {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            println!("{line}");
            output.push_str(&line);
            output.push('\n');
        }
    }
    let status = child.wait();
    let counts = count_tests(
        &output,
        &std::fs::read_to_string(&ledger).unwrap_or_default(),
    );
    let _ = std::fs::remove_file(&ledger);
    match status {
        Ok(status) if status.success() => Outcome::Passed(counts),
        Ok(status) => Outcome::Failed(status.to_string(), counts),
        Err(e) => Outcome::Failed(format!("cannot wait for cargo: {e}"), counts),
    }
}

/// One cargo command whose libtest lines are counted (for steps outside the matrix).
pub fn run_counted(args: &[String], env: &[(&str, String)]) -> (Counts, Result<(), String>) {
    match run_cargo(args, env, &[]) {
        Outcome::Passed(counts) => (counts, Ok(())),
        Outcome::Failed(why, counts) => (counts, Err(format!("cargo {}: {why}", args.join(" ")))),
    }
}

static LEDGER_SERIAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The variables as a shell would show them, secrets (`*SECRET*`, `*TOKEN*`) left out.
fn env_prefix(env: &[(&str, String)]) -> String {
    env.iter()
        .map(|(k, v)| {
            if k.contains("SECRET") || k.contains("TOKEN") {
                format!("{k}=... ")
            } else {
                format!("{k}={v:?} ")
            }
        })
        .collect()
}

/// `cargo xtask test-matrix`.
pub fn run() -> Report {
    match run_rows() {
        Ok(report) => report,
        Err(why) => Report::failed(why),
    }
}

fn run_rows() -> Result<Report, String> {
    let ws = Workspace::load()?;
    let mut lines = Vec::new();
    for row in MATRIX {
        let features = describe(row.features);
        if ws.member(row.package).is_none() {
            println!(
                "\ntest-matrix: {} [{features}] FAILED: not in the workspace",
                row.package
            );
            lines.push(Line {
                package: row.package,
                features,
                step: "test",
                outcome: Outcome::Failed("not in the workspace".into(), Counts::default()),
            });
            continue;
        }
        let mut args = vec![
            "test".to_string(),
            "-p".to_string(),
            row.package.to_string(),
        ];
        args.extend(feature_args(row.features));
        let outcome = run_cargo(&args, &[], &[]);
        lines.push(Line {
            package: row.package,
            features,
            step: "test",
            outcome,
        });

        if let Some(step) = registration_step(row) {
            let mut args = args.clone();
            args.extend(["--test", step.target, "--", "--exact", step.test].map(String::from));
            // HIPFILE_BACKENDS filters the registry; the smoke test must see the unfiltered one.
            let env = [(EXPECT_BACKENDS_VAR, step.expected)];
            let outcome = match run_cargo(&args, &env, &["HIPFILE_BACKENDS"]) {
                // A renamed test would run nothing and pass: exactly one must have run.
                Outcome::Passed(c) if c.passed != 1 => Outcome::Failed(
                    format!("{} ran {} time(s), not once", step.test, c.passed),
                    c,
                ),
                other => other,
            };
            lines.push(Line {
                package: row.package,
                features,
                step: "registration",
                outcome,
            });
        }
    }
    Ok(print_summary(&lines))
}

fn print_summary(lines: &[Line]) -> Report {
    println!("\ntest-matrix summary:");
    println!(
        "  {:<22} {:<20} {:<13} {:<40} RESULT",
        "PACKAGE", "FEATURES", "STEP", "TESTS"
    );
    let mut failed_rows = 0;
    let mut total = Counts::default();
    for line in lines {
        let (counts, result) = match &line.outcome {
            Outcome::Passed(c) => (*c, "ok".to_string()),
            Outcome::Failed(why, c) => {
                failed_rows += 1;
                let counts = Report::new(*c, Err(why.clone())).counts();
                (counts, format!("FAILED ({why})"))
            }
        };
        total.add(counts);
        println!(
            "  {:<22} {:<20} {:<13} {:<40} {result}",
            line.package,
            line.features,
            line.step,
            counts.to_string()
        );
    }
    println!(
        "test-matrix: {} row(s), {failed_rows} failed; tests: {total}",
        lines.len()
    );
    let result = if failed_rows == 0 {
        Ok(())
    } else {
        Err(format!("{failed_rows} test-matrix row(s) failed"))
    };
    Report::new(total, result)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `member` has tests: a test target, or a `#[test]` in a file under its crate roots'
    /// directories.
    fn has_tests(member: &crate::workspace::Member) -> bool {
        if member
            .targets
            .iter()
            .any(|t| t.kinds.iter().any(|k| k == "test"))
        {
            return true;
        }
        let marker = concat!("#[", "test]");
        member
            .targets
            .iter()
            .filter_map(|t| t.src_path.parent())
            .any(|dir| dir_contains(dir, marker))
    }

    fn dir_contains(dir: &std::path::Path, needle: &str) -> bool {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        entries.flatten().any(|e| {
            let path = e.path();
            if path.is_dir() {
                dir_contains(&path, needle)
            } else {
                path.extension().is_some_and(|x| x == "rs")
                    && std::fs::read_to_string(&path).is_ok_and(|t| t.contains(needle))
            }
        })
    }

    #[test]
    fn every_member_with_tests_has_a_row() {
        let ws = Workspace::load().unwrap();
        for member in &ws.members {
            if has_tests(member) {
                assert!(
                    MATRIX.iter().any(|r| r.package == member.name),
                    "{} has tests but no row in the test matrix",
                    member.name
                );
            }
        }
        for row in MATRIX {
            assert!(
                ws.member(row.package).is_some(),
                "{} is not a member",
                row.package
            );
        }
    }

    #[test]
    fn tests_are_counted_one_by_one_and_ledger_skips_are_not_passes() {
        let output = "\
running 4 tests
test a::one ... ok
test a::two ... ok
test a::three ... FAILED
test a::four ... ignored
test result: FAILED. 2 passed; 1 failed; 1 ignored; 0 measured; 0 filtered out
test src/lib.rs - (line 5) ... ok
";
        let ledger = "gpu\ta::one\nskip\ta::two\tno headers\n";
        assert_eq!(
            count_tests(output, ledger),
            Counts {
                passed: 2,
                skipped: 2,
                failed: 1
            }
        );
        assert_eq!(
            count_tests(output, "").to_string(),
            "3 passed, 1 skipped, 1 failed"
        );
    }

    #[test]
    fn a_row_that_failed_without_a_failed_test_counts_one_failure() {
        let line = |package, outcome| Line {
            package,
            features: "(default)",
            step: "test",
            outcome,
        };
        let some = Counts {
            passed: 3,
            skipped: 1,
            failed: 0,
        };
        let two_failed = Counts {
            passed: 2,
            skipped: 0,
            failed: 2,
        };
        let lines = [
            line("a", Outcome::Passed(some)),
            line(
                "b",
                Outcome::Failed("exit status: 101".into(), Counts::default()),
            ),
            line("c", Outcome::Failed("exit status: 101".into(), two_failed)),
        ];
        let report = print_summary(&lines);
        assert_eq!(report.counts().to_string(), "5 passed, 1 skipped, 3 failed");
        assert_eq!(
            report.result(),
            &Err("2 test-matrix row(s) failed".to_string())
        );
    }

    #[test]
    fn features_imply_backends_in_priority_order() {
        assert_eq!(expected_backends("fallback"), "fallback,host");
        assert_eq!(
            expected_backends("fallback,fastpath"),
            "fastpath,fallback,host"
        );
        assert_eq!(expected_backends(""), "");
    }

    #[test]
    fn rows_never_ask_for_the_whole_workspace() {
        for row in MATRIX {
            let args = feature_args(row.features);
            assert!(!args.iter().any(|a| a == "--workspace" || a == "--all"));
        }
        assert_eq!(feature_args(Features::Only("")), ["--no-default-features"]);
    }

    #[test]
    fn the_facade_is_tested_with_each_backend_alone_both_and_none() {
        let facade: Vec<Features> = MATRIX
            .iter()
            .filter(|r| r.package == FACADE)
            .map(|r| r.features)
            .collect();
        for list in ["fastpath,fallback", "fastpath", "fallback", ""] {
            assert!(facade.contains(&Features::Only(list)), "{list:?}");
        }
        assert!(MATRIX.iter().any(|r| r.package == "hipfile-fastpath"));
        assert_eq!(expected_backends("fastpath"), "fastpath");
    }

    #[test]
    fn every_facade_row_is_followed_by_the_facade_registration_test() {
        for r in MATRIX.iter().filter(|r| r.package == FACADE) {
            let Features::Only(list) = r.features else {
                panic!("a facade row names its features: {r:?}");
            };
            assert_eq!(
                registration_step(r),
                Some(RegistrationStep {
                    target: FACADE_TEST_TARGET,
                    test: REGISTRATION_TEST,
                    expected: expected_backends(list),
                })
            );
        }
        assert_eq!(
            registration_step(&row("hipfile-core", Features::Default)),
            None
        );
    }

    #[test]
    fn linked_backends_rank_after_the_built_in_ones() {
        assert_eq!(
            expected_with_linked("fallback,fastpath", "bounce"),
            "fastpath,fallback,host,bounce"
        );
        assert_eq!(
            expected_with_linked("fastpath", "bounce"),
            "fastpath,bounce"
        );
        assert_eq!(expected_with_linked("", "bounce"), "bounce");
    }

    /// Each linked backend has rows, each followed by its registration test, which exists; one
    /// row leaves the fallback out, so that requests reach the backend by priority.
    #[test]
    fn every_linked_backend_row_is_followed_by_its_registration_test() {
        let ws = Workspace::load().unwrap();
        for linked in LINKED_BACKENDS {
            let rows: Vec<&Row> = MATRIX
                .iter()
                .filter(|r| r.package == linked.package)
                .collect();
            assert!(!rows.is_empty(), "{} has no row", linked.package);
            for r in &rows {
                let step = registration_step(r)
                    .unwrap_or_else(|| panic!("no registration step after {r:?}"));
                assert_eq!((step.target, step.test), (linked.target, linked.test));
                assert!(
                    step.expected.ends_with(&format!(",{}", linked.backend))
                        || step.expected == linked.backend,
                    "{r:?}: {}",
                    step.expected
                );
            }
            assert!(
                rows.iter()
                    .any(|r| !registration_step(r).unwrap().expected.contains("fallback")),
                "{}: no row leaves the fallback out",
                linked.package
            );
            let member = ws.member(linked.package).unwrap();
            let target = member
                .targets
                .iter()
                .find(|t| {
                    t.kinds.iter().any(|k| k == "test")
                        && t.src_path.file_stem().is_some_and(|s| s == linked.target)
                })
                .unwrap_or_else(|| panic!("{} has no test target {}", member.name, linked.target));
            let source = std::fs::read_to_string(&target.src_path).unwrap();
            assert!(
                source.contains(&format!("fn {}()", linked.test)),
                "{} does not define {}",
                target.src_path.display(),
                linked.test
            );
        }
    }
}
