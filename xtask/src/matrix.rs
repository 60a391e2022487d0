//! `cargo xtask test-matrix`: every row of [`MATRIX`] is built and tested on its own package with
//! its own features (`cargo test -p <pkg> ...`, never `--workspace`, which unifies features and so
//! hides a crate that only builds thanks to a neighbour). After each facade row the registration
//! smoke test checks that the registered backends are exactly what the features imply. All rows
//! run; a summary table follows; the command fails if any row failed.

use std::process::Command;

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
    row(FACADE, Features::Only("fastpath,fallback")),
    row(FACADE, Features::Only("fastpath")),
    row(FACADE, Features::Only("fallback")),
    row(FACADE, Features::Only("")),
    row("hipfile-cli", Features::Default),
    row("xtask", Features::Default),
];

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

enum Outcome {
    Passed,
    Failed(String),
    Skipped(&'static str),
}

struct Line {
    package: &'static str,
    features: &'static str,
    step: &'static str,
    outcome: Outcome,
}

fn run_cargo(args: &[String], env: &[(&str, String)], unset: &[&str]) -> Outcome {
    let mut command: Command = workspace::cargo();
    command.args(args);
    for (key, value) in env {
        command.env(key, value);
    }
    for key in unset {
        command.env_remove(key);
    }
    println!("\n$ {}cargo {}", env_prefix(env), args.join(" "));
    match command.status() {
        Ok(status) if status.success() => Outcome::Passed,
        Ok(status) => Outcome::Failed(status.to_string()),
        Err(e) => Outcome::Failed(format!("cannot run cargo: {e}")),
    }
}

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
                "\ntest-matrix: {} [{features}] skipped (not in workspace)",
                row.package
            );
            lines.push(Line {
                package: row.package,
                features,
                step: "test",
                outcome: Outcome::Skipped("not in workspace"),
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
            args.extend(["--test", "it", "registration"].map(String::from));
            // HIPFILE_BACKENDS filters the registry; the smoke test must see the unfiltered one.
            let env = [(EXPECT_BACKENDS_VAR, expected_backends(list))];
            let outcome = run_cargo(&args, &env, &["HIPFILE_BACKENDS"]);
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
        "  {:<18} {:<20} {:<13} RESULT",
        "PACKAGE", "FEATURES", "STEP"
    );
    let mut failed = 0;
    let mut passed = 0;
    for line in lines {
        let result = match &line.outcome {
            Outcome::Passed => {
                passed += 1;
                "ok".to_string()
            }
            Outcome::Failed(why) => {
                failed += 1;
                format!("FAILED ({why})")
            }
            Outcome::Skipped(why) => format!("skipped ({why})"),
        };
        println!(
            "  {:<18} {:<20} {:<13} {result}",
            line.package, line.features, line.step
        );
    }
    let skipped = lines.len() - passed - failed;
    println!("test-matrix: {passed} passed, {failed} failed, {skipped} skipped");
    if failed == 0 {
        Ok(())
    } else {
        Err(format!("{failed} test-matrix row(s) failed"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
