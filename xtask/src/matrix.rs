//! `cargo xtask test-matrix`: every row of [`MATRIX`] is built and tested on its own package with
//! its own features (`cargo test -p <pkg> ...`, never `--workspace`, which unifies features and so
//! hides a crate that only builds thanks to a neighbour). After each facade row the registration
//! smoke test checks that the registered backends are exactly what the features imply. All rows
//! run; a summary table follows; the command fails if any row failed or names a package the
//! workspace lacks, and a test checks that every member with tests has a row.
//!
//! Tests are counted one by one from libtest's `test NAME ... ok` lines, next to the test ledger
//! (`hipfile_testkit::ledger`, through `HIPFILE_TEST_LEDGER`): a test that recorded a skip counts
//! as skipped, not passed, and every summary line reads `N passed, S skipped, M failed`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

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

/// The env var the facade's `it` test `registration` compares the registered backend names with.
pub const EXPECT_BACKENDS_VAR: &str = "HIPFILE_EXPECT_BACKENDS";

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
    row("hipfile-cli", Features::Default),
    row("hipfile-examples", Features::Default),
    row("xtask", Features::Default),
];

/// The registration smoke test, by its exact name in the facade's `it` binary.
pub const REGISTRATION_TEST: &str = "registration::registration";

/// The variable the test ledger is named by (as `hipfile_testkit::ledger::LEDGER_VAR`).
pub const LEDGER_VAR: &str = "HIPFILE_TEST_LEDGER";

/// The comma-separated backend names a feature list implies, fastpath first.
pub fn expected_backends(features: &str) -> String {
    let enabled: Vec<&str> = features.split(',').map(str::trim).collect();
    BACKEND_FEATURES
        .iter()
        .copied()
        .filter(|backend| enabled.contains(backend))
        .collect::<Vec<_>>()
        .join(",")
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

/// Tests counted in one step.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub passed: usize,
    pub skipped: usize,
    pub failed: usize,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.passed += other.passed;
        self.skipped += other.skipped;
        self.failed += other.failed;
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} passed, {} skipped, {} failed",
            self.passed, self.skipped, self.failed
        )
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

static LEDGER_SERIAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

fn env_prefix(env: &[(&str, String)]) -> String {
    env.iter().map(|(k, v)| format!("{k}={v:?} ")).collect()
}

/// `cargo xtask test-matrix`.
pub fn run() -> Result<(), String> {
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

        if let (FACADE, Features::Only(list)) = (row.package, row.features) {
            let mut args = args.clone();
            args.extend(["--test", "it", "--", "--exact", REGISTRATION_TEST].map(String::from));
            // HIPFILE_BACKENDS filters the registry; the smoke test must see the unfiltered one.
            let env = [(EXPECT_BACKENDS_VAR, expected_backends(list))];
            let outcome = match run_cargo(&args, &env, &["HIPFILE_BACKENDS"]) {
                // A renamed test would run nothing and pass: exactly one must have run.
                Outcome::Passed(c) if c.passed != 1 => Outcome::Failed(
                    format!("{REGISTRATION_TEST} ran {} time(s), not once", c.passed),
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
    print_summary(&lines)
}

fn print_summary(lines: &[Line]) -> Result<(), String> {
    println!("\ntest-matrix summary:");
    println!(
        "  {:<18} {:<20} {:<13} {:<40} RESULT",
        "PACKAGE", "FEATURES", "STEP", "TESTS"
    );
    let mut failed_rows = 0;
    let mut total = Counts::default();
    for line in lines {
        let (counts, result) = match &line.outcome {
            Outcome::Passed(c) => (*c, "ok".to_string()),
            Outcome::Failed(why, c) => {
                failed_rows += 1;
                (*c, format!("FAILED ({why})"))
            }
        };
        total.add(counts);
        println!(
            "  {:<18} {:<20} {:<13} {:<40} {result}",
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
    if failed_rows == 0 {
        Ok(())
    } else {
        Err(format!("{failed_rows} test-matrix row(s) failed"))
    }
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
    fn features_imply_backends_in_priority_order() {
        assert_eq!(expected_backends("fallback"), "fallback");
        assert_eq!(expected_backends("fallback,fastpath"), "fastpath,fallback");
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
}
