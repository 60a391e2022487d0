//! # xtask: project automation for hipfile-rs
//!
//! Run as `cargo xtask <command>` (an alias in `.cargo/config.toml`). Automation is Rust, not shell
//! scripts, so it runs the same on every machine that builds the project; xtask itself uses only
//! std, so it builds in seconds.
//!
//! | command       | what it does |
//! |---------------|--------------|
//! | `test`        | everything CI runs: fmt check, clippy `-D warnings`, tidy, test-matrix, c-tests, python; every step runs, then a summary with each step's counts and a last line `N passed, S skipped, M failed` over every test and check of the run (see [`counts`]) |
//! | `tidy`        | the house rules (crate seams, no skipped tests, crate docs, `forbid(unsafe_code)` in the safe crates and every backend crate, `unsafe` only in hipfile-hip, the C ABI and the simulated runtimes, no unfinished code, no vague names, no panic across the C ABI, no import cycle between a crate's modules, no source file over 1,000 lines; see [`structure`]) |
//! | `test-matrix` | `cargo test -p <pkg>` per (package, features) row, plus the facade's backend registration smoke test |
//! | `c-tests`     | the C ABI tests: C programs compiled as C and C++ against `hipfile.h` run on the simulated HIP runtime, and against `cufile.h` on the simulated CUDA library, plus libcufile.so.0's exported-symbol check; `c-tests FILTER` runs the programs whose `TAG/FILE` name contains FILTER (`cufile/`: the cuFile ones) |
//! | `python`      | the `hipfile` Python package: a venv under the target directory with pinned maturin, pytest and NumPy, the wheel built by maturin and installed, pytest on the sim (see [`python`]) |
//! | `gpu-bundle`  | builds the release test binaries, `libhipfile.so`, the CLI, the C programs, the Python wheel with its tests and benchmark, `libcufile.so.0` with the cuFile clients, and `run.sh` into `target/gpu-bundle/` to carry to the GPU machine (see [`bundle`]) |
//! | `fuzz`        | a longer fuzzing run: the C ABI call sequences against the model, then the `fuzz/` targets under cargo-fuzz (nightly) or their stable corpus runners, reporting executions (see [`fuzz`]) |
//! | `ceph`        | `ceph up|down|status|test|install`: a single-node Ceph cluster (monitor, manager, one memstore OSD, CephFS mounted with ceph-fuse, RADOS Gateway with an S3 user) from the distribution's packages as background processes in `target/ceph/`, its environment in `target/ceph/env`, and the test targets that need it (see [`ceph`]) |
//! | `sanitize`    | the Rust tests of core, fallback and the facade under AddressSanitizer and ThreadSanitizer, and the C ABI tests with `-fsanitize=address`; needs nightly, not part of CI (see [`sanitize`]) |
//!
//! Every command exits non-zero when anything failed. The tidy checks also run as a unit test, so
//! `cargo test -p xtask` enforces them.
//!
//! ```text
//! $ cargo xtask tidy
//! tidy: crate-seams                          ok
//! ...
//! tidy: 8 checks passed, 0 failed
//! ```

mod bundle;
mod ceph;
mod counts;
mod ctests;
mod fuzz;
mod json;
mod matrix;
mod python;
mod remote_bundle;
mod sanitize;
mod sources;
mod structure;
mod tidy;
mod workspace;

use std::process::ExitCode;

use counts::{Counts, Report};

const USAGE: &str = "\
usage: cargo xtask <command>

commands:
  test         fmt check, clippy, tidy, test-matrix, c-tests and python (what CI runs); ends
               with `N passed, S skipped, M failed` over every test and check
  tidy         check the house rules
  test-matrix  test each package with each feature set of the matrix
  c-tests [FILTER]
               compile and run the C ABI tests: hipfile.h programs on the simulated HIP runtime,
               cufile.h programs on the simulated CUDA library, and check libcufile.so.0's exports
               (only the programs whose TAG/FILE name contains FILTER, when given: cufile/ for
               the cuFile ones)
  python       build the hipfile Python wheel (maturin, in a venv under the target directory
               with pinned maturin, pytest and numpy from PyPI), install it and run its pytest
               suite on the simulated GPU
  gpu-bundle [--out DIR]
               build the release test binaries, libhipfile.so, the hipfile CLI, the C programs,
               the hipfile Python wheel with its tests and bench.py, and run.sh into DIR (default
               target/gpu-bundle) for the GPU machine, which has no cargo. Carry it with the
               device tool and run it there:
                 run  carry: [\"target/gpu-bundle\"]
                      command: \"cd target/gpu-bundle && ./run.sh\"
               run.sh ends with `G passed on the GPU, M on the sim, S skipped, F failed`; its logs come back from $OUT
               With them go lib/libcufile.so.0 (when hipfile-cufile is in the workspace) and
               the cuFile clients (cufile/; KvikIO's wheels from ../shared/wheels or
               $HIPFILE_KVIKIO_WHEELS, fio's sources from .ab/fio.tar.gz or $HIPFILE_FIO_TARBALL):
               `./run.sh --cufile` runs the clients on ours and on NVIDIA's,
               `./run.sh --cufile-figures` the figures
  fuzz [--seconds N] [--seed S] [--stable]
               a longer fuzzing run, N seconds per part (default 60): the C ABI call sequences
               against the reference model (CI's fixed seeds, then random ones from S or the
               clock), then the fuzz/ targets io_arguments and chunking under cargo-fuzz when
               `cargo +nightly` and cargo-fuzz are installed, else (or with --stable) their bodies
               through the stable corpus runners. Says which engine ran and how many executions
               each part made; ends with `N passed, M failed`
  sanitize [address|thread|c]
               the Rust tests of hipfile-core, hipfile-fallback and hipfile under AddressSanitizer
               and ThreadSanitizer (nightly, -Zbuild-std, --target x86_64-unknown-linux-gnu, in
               target/sanitize/), and the C ABI tests built with -fsanitize=address; all three
               by default. Needs a nightly toolchain (with rust-src for -Zbuild-std) and exits
               non-zero without one. Not part of CI; logs in target/sanitize/
  ceph up|down|status|test [ARGS]|install
               a single-node Ceph cluster for the remote-storage tests, from Debian's packages,
               as plain processes in HIPFILE_CEPH_DIR (default target/ceph): `up` starts a
               monitor, a manager, one memstore OSD, an MDS with a CephFS mounted by ceph-fuse
               at target/ceph/mnt and a RADOS Gateway on a loopback port with an S3 user, and
               writes target/ceph/env (export lines: AWS_*, HIPFILE_CEPHFS_DIR, ...); `down`
               unmounts, stops every daemon and removes the directory; `status` says whether
               it is up; `test` runs the test targets that need it with that environment (ARGS
               go to cargo test); `install` apt-get installs the packages
  help         print this message";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["test"] => test(),
        ["tidy"] => tidy::run().into_result(),
        ["test-matrix"] => matrix::run().into_result(),
        ["c-tests"] => ctests::run().into_result(),
        ["c-tests", filter] => ctests::run_matching(Some(filter)).into_result(),
        ["python"] => python::run().into_result(),
        ["gpu-bundle", rest @ ..] => bundle::run(rest),
        ["fuzz", rest @ ..] => fuzz::run(rest),
        ["sanitize", rest @ ..] => sanitize::run(rest),
        ["ceph", rest @ ..] => ceph::run(rest),
        ["help" | "--help" | "-h"] => {
            println!("{USAGE}");
            Ok(())
        }
        [] => Err(format!("no command given\n\n{USAGE}")),
        _ => Err(format!("unknown arguments {args:?}\n\n{USAGE}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            // `test` ends with its own summary line, which must stay the last line of the log.
            if !why.is_empty() {
                eprintln!("xtask: {why}");
            }
            ExitCode::FAILURE
        }
    }
}

/// A step of `cargo xtask test`.
struct Step {
    name: &'static str,
    run: fn() -> Report,
}

const TEST_STEPS: &[Step] = &[
    Step {
        name: "fmt",
        run: || cargo_step(&["fmt", "--all", "--", "--check"]),
    },
    Step {
        name: "clippy",
        run: || {
            cargo_step(&[
                "clippy",
                "--workspace",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ])
        },
    },
    Step {
        name: "tidy",
        run: tidy::run,
    },
    Step {
        name: "test-matrix",
        run: matrix::run,
    },
    Step {
        name: "c-tests",
        run: ctests::run,
    },
    Step {
        name: "python",
        run: python::run,
    },
];

/// A cargo command that is one check.
fn cargo_step(args: &[&str]) -> Report {
    println!("$ cargo {}", args.join(" "));
    let result = match workspace::cargo().args(args).status() {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("cargo {} failed ({status})", args.join(" "))),
        Err(e) => Err(format!("cannot run cargo: {e}")),
    };
    Report::single(result)
}

/// `cargo xtask test`: every step runs even when an earlier one failed, so one CI log shows all.
fn test() -> Result<(), String> {
    let mut outcomes = Vec::new();
    for step in TEST_STEPS {
        println!("\n==== xtask test: {} ====", step.name);
        let report = (step.run)();
        if let Err(why) = report.result() {
            println!("xtask test: {} failed: {why}", step.name);
        }
        outcomes.push((step.name, report));
    }
    println!("\n==== xtask test summary ====");
    let (lines, total) = summary(&outcomes);
    for line in &lines {
        println!("{line}");
    }
    if total.failed == 0 {
        Ok(())
    } else {
        Err(String::new())
    }
}

/// One line per step, with what it counted, then the closing line: the counts of every step
/// summed. Returns the lines and the sum.
fn summary(outcomes: &[(&str, Report)]) -> (Vec<String>, Counts) {
    let mut total = Counts::default();
    let mut lines = Vec::new();
    for (name, report) in outcomes {
        total.add(report.counts());
        let counts = report.counts().to_string();
        lines.push(match report.result() {
            Ok(()) => format!("  {name:<12} ok      {counts}"),
            Err(why) => format!(
                "  {name:<12} FAILED  {counts:<36} {}",
                why.lines().next().unwrap_or("")
            ),
        });
    }
    lines.push(total.to_string());
    (lines, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The closing line sums what every step counted, and a failed step that counted no failure
    /// still counts one.
    #[test]
    fn the_closing_line_counts_every_test_and_check_of_the_run() {
        let counted = |passed, skipped, failed| Counts {
            passed,
            skipped,
            failed,
        };
        let outcomes = [
            ("fmt", Report::single(Ok(()))),
            ("clippy", Report::single(Err("cargo clippy failed".into()))),
            ("tidy", Report::new(counted(8, 0, 0), Ok(()))),
            (
                "test-matrix",
                Report::new(counted(1200, 30, 2), Err("2 row(s) failed".into())),
            ),
            ("c-tests", Report::failed("no HIP headers found".into())),
            ("python", Report::new(counted(40, 2, 0), Ok(()))),
        ];
        let (lines, total) = summary(&outcomes);
        assert_eq!(total, counted(1249, 32, 4));
        assert_eq!(lines.len(), outcomes.len() + 1);
        assert_eq!(
            lines.last().map(String::as_str),
            Some("1249 passed, 32 skipped, 4 failed")
        );
        assert_eq!(
            lines[2],
            "  tidy         ok      8 passed, 0 skipped, 0 failed"
        );
        assert!(
            lines[4].starts_with("  c-tests      FAILED  0 passed, 0 skipped, 1 failed")
                && lines[4].ends_with("no HIP headers found"),
            "{}",
            lines[4]
        );

        let clean = [("fmt", Report::single(Ok(())))];
        assert_eq!(
            summary(&clean).0.last().map(String::as_str),
            Some("1 passed, 0 skipped, 0 failed")
        );
    }

    /// The house rules, enforced by `cargo test` as well as by `cargo xtask tidy`.
    #[test]
    fn tidy_checks_pass_on_this_repository() {
        let repo = sources::Repo::load().expect("workspace metadata and sources load");
        let failures: Vec<String> = tidy::findings(&repo)
            .into_iter()
            .filter(|(_, violations)| !violations.is_empty())
            .map(|(name, violations)| format!("{name}:\n  {}", violations.join("\n  ")))
            .collect();
        assert!(
            failures.is_empty(),
            "tidy checks failed:\n{}",
            failures.join("\n")
        );
    }
}
