//! `cargo xtask sanitize [address|thread|c]`: the Rust tests of `hipfile-core`,
//! `hipfile-fallback` and the facade `hipfile` under AddressSanitizer and ThreadSanitizer, and
//! the C ABI tests compiled with `-fsanitize=address`. Not part of CI: it needs nightly Rust.
//!
//! - Rust: `cargo +nightly test -Zbuild-std --target x86_64-unknown-linux-gnu --lib --tests`
//!   with `RUSTFLAGS=-Zsanitizer=<name>`, in `target/sanitize/<name>/` so that the instrumented
//!   build never replaces the normal one. The standard library is rebuilt with the sanitizer
//!   (`-Zbuild-std`, which needs the nightly `rust-src` component): ThreadSanitizer requires
//!   it (an uninstrumented std is an ABI mismatch, and its atomics would be invisible), and it
//!   lets AddressSanitizer see inside std's collections. Without `rust-src` the address run goes
//!   on with the prebuilt std and the thread run is refused, saying how to install it.
//!   `--target` keeps build scripts and proc macros uninstrumented. Doctests are left out (they
//!   do not build for an explicit target).
//! - C: `cargo xtask c-tests` with the programs compiled and linked with
//!   `-fsanitize=address -fno-omit-frame-pointer` (`libhipfile.so` stays a normal build; the
//!   sanitizer runtime in each program still checks every heap block the library allocates and
//!   every `memcpy`), into `target/c-tests-asan/`.
//!
//! A few tests are left out of the instrumented runs, each named with its reason in [`SKIPPED`]
//! and in the output (a resident-memory rule measures the sanitizer, not the library).
//!
//! Each run's output lands in `target/sanitize/<run>.log`. The report counts sanitizer reports
//! (`ERROR: AddressSanitizer`, `ERROR: LeakSanitizer`, `WARNING: ThreadSanitizer`) apart from
//! plain test failures, and ends with `N passed, M failed`. Without a nightly toolchain it exits
//! non-zero at once and says so.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::ctests;
use crate::fuzz::run_streaming;
use crate::workspace::{self, Workspace};

/// The packages whose Rust tests run instrumented.
const PACKAGES: &[&str] = &["hipfile-core", "hipfile-fallback", "hipfile"];

const TARGET: &str = "x86_64-unknown-linux-gnu";

/// Tests left out of the instrumented runs, and why: rules that measure the process rather
/// than the library, which a sanitizer's own memory changes.
const SKIPPED: &[(&str, &str)] = &[(
    "leaks::ten_thousand_cycles_and_driver_close_leak_nothing",
    "its resident-memory rule measures the sanitizer's allocator (ASan keeps freed memory in \
     quarantine, TSan grows its shadow), not the library; its descriptor, thread and pinned \
     memory counts run in every normal test run, and LeakSanitizer checks the heap here",
)];

/// Sanitizer report headers, and what they are.
const REPORTS: &[(&str, &str)] = &[
    ("ERROR: AddressSanitizer", "AddressSanitizer error"),
    ("ERROR: LeakSanitizer", "leak"),
    ("WARNING: ThreadSanitizer", "ThreadSanitizer warning"),
];

/// One run's verdict.
struct Outcome {
    run: String,
    summary: String,
    ok: bool,
}

/// `cargo xtask sanitize`.
pub fn run(args: &[&str]) -> Result<(), String> {
    let runs: Vec<&str> = match args {
        [] => vec!["address", "thread", "c"],
        [one @ ("address" | "thread" | "c")] => vec![*one],
        _ => {
            return Err(format!(
                "sanitize: unknown arguments {args:?} (address, thread or c)"
            ))
        }
    };
    let nightly = nightly_sysroot().map_err(|why| {
        format!(
            "sanitize needs a nightly Rust toolchain (-Zsanitizer and -Zbuild-std are unstable), \
             and {why}. Install one with `rustup toolchain install nightly --component rust-src`."
        )
    })?;
    let rust_src = nightly
        .join("lib/rustlib/src/rust/library/Cargo.toml")
        .is_file();
    if !rust_src {
        println!(
            "sanitize: the nightly toolchain at {} has no rust-src component, so std cannot be \
             rebuilt instrumented (`rustup component add rust-src --toolchain nightly`)",
            nightly.display()
        );
    }
    let ws = Workspace::load()?;
    let logs = ws.target_dir.join("sanitize");
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;

    let mut outcomes = Vec::new();
    for run in runs {
        println!("\n==== sanitize: {run} ====");
        outcomes.push(match run {
            "c" => c_tests(&logs),
            sanitizer if sanitizer == "thread" && !rust_src => Outcome {
                run: "thread (Rust)".into(),
                summary: "not run: ThreadSanitizer needs -Zbuild-std, which needs rust-src".into(),
                ok: false,
            },
            sanitizer => rust_tests(sanitizer, rust_src, &ws.target_dir, &logs),
        });
    }

    println!("\n==== sanitize summary ====");
    for o in &outcomes {
        println!(
            "  {:<16} {} {}",
            o.run,
            if o.ok { "ok    " } else { "FAILED" },
            o.summary
        );
    }
    println!("logs: {}", logs.display());
    let failed = outcomes.iter().filter(|o| !o.ok).count();
    println!("{} passed, {failed} failed", outcomes.len() - failed);
    if failed == 0 {
        Ok(())
    } else {
        Err(String::new())
    }
}

/// The nightly toolchain's sysroot, or why there is none.
fn nightly_sysroot() -> Result<PathBuf, String> {
    let out = Command::new("rustup")
        .args(["run", "nightly", "rustc", "--print", "sysroot"])
        .output()
        .map_err(|e| format!("rustup cannot be run ({e})"))?;
    if !out.status.success() {
        return Err("`rustup run nightly rustc` fails: no nightly toolchain is installed".into());
    }
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

fn rust_tests(sanitizer: &str, build_std: bool, target_dir: &Path, logs: &Path) -> Outcome {
    // `--export-dynamic`: a test that loads an instrumented cdylib (the facade's C ABI model test
    // loads the simulated HIP library) resolves its sanitizer symbols in the test executable.
    let mut flags = format!(
        "-Zsanitizer={sanitizer} -Cdebuginfo=1 -Cforce-frame-pointers=yes \
         -Clink-arg=-Wl,--export-dynamic"
    );
    if !build_std {
        // The prebuilt std is not instrumented; AddressSanitizer works with it all the same.
        flags.push_str(" -Cunsafe-allow-abi-mismatch=sanitizer");
    }
    let mut command = Command::new("rustup");
    command
        .current_dir(workspace::root())
        .args(["run", "nightly", "cargo", "test"])
        .args(build_std.then_some("-Zbuild-std"))
        .args(["--target", TARGET, "--lib", "--tests", "--no-fail-fast"]);
    for package in PACKAGES {
        command.args(["-p", package]);
    }
    command.arg("--");
    for (test, why) in SKIPPED {
        println!("sanitize: leaving out {test}: {why}");
        command.args(["--skip", test]);
    }
    // The cargo that runs xtask must not leak its toolchain into the nightly build.
    for var in [
        "CARGO",
        "RUSTC",
        "RUSTDOC",
        "RUSTUP_TOOLCHAIN",
        "RUSTC_WRAPPER",
    ] {
        command.env_remove(var);
    }
    command
        .env(
            "CARGO_TARGET_DIR",
            target_dir.join("sanitize").join(sanitizer),
        )
        .env("RUSTFLAGS", &flags)
        .env("RUSTDOCFLAGS", &flags)
        // Every report, not just the first; leaks are reported at exit.
        .env(
            "ASAN_OPTIONS",
            "detect_leaks=1:halt_on_error=0:detect_stack_use_after_return=1",
        )
        .env("TSAN_OPTIONS", "halt_on_error=0:second_deadlock_stack=1");
    let (result, text) = run_streaming(command);
    save(logs, &format!("{sanitizer}.log"), &text);
    verdict(&format!("{sanitizer} (Rust)"), result, &text)
}

fn c_tests(logs: &Path) -> Outcome {
    let build = ctests::Build {
        flags: &["-fsanitize=address", "-fno-omit-frame-pointer", "-g"],
        env: &[("ASAN_OPTIONS", "detect_leaks=1:halt_on_error=0")],
        out: "c-tests-asan",
    };
    let result = ctests::run_with(&build, None).into_result();
    // The programs' stderr, sanitizer reports included, is in their logs.
    let mut text = String::new();
    if let Ok(ws) = Workspace::load() {
        let dir = ws.target_dir.join(build.out).join("logs");
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .collect();
        entries.sort();
        for path in entries {
            let log = std::fs::read_to_string(&path).unwrap_or_default();
            if REPORTS.iter().any(|(header, _)| log.contains(header)) {
                text.push_str(&format!("==== {} ====\n{log}\n", path.display()));
            }
        }
    }
    save(logs, "c-address.log", &text);
    verdict("address (C ABI)", result, &text)
}

fn save(dir: &Path, name: &str, text: &str) {
    let path = dir.join(name);
    if let Err(e) = std::fs::write(&path, text) {
        println!("sanitize: cannot write {}: {e}", path.display());
    }
}

/// Count the sanitizer reports in `text`, and sum the libtest results.
fn verdict(run: &str, result: Result<(), String>, text: &str) -> Outcome {
    let mut parts = Vec::new();
    let mut reports = 0;
    for (header, what) in REPORTS {
        let n = text.matches(header).count();
        if n > 0 {
            parts.push(format!("{n} {what}(s)"));
            reports += n;
        }
    }
    if reports == 0 {
        parts.push("no sanitizer report".into());
    }
    let (mut passed, mut failed) = (0, 0);
    for line in text.lines().filter(|l| l.starts_with("test result: ")) {
        // "test result: ok. 12 passed; 0 failed; 0 ignored; ..."
        for part in line.split([';', '.']) {
            let mut words = part.split_whitespace();
            match (words.next().map(str::parse::<u64>), words.next()) {
                (Some(Ok(n)), Some("passed")) => passed += n,
                (Some(Ok(n)), Some("failed")) => failed += n,
                _ => {}
            }
        }
    }
    if passed + failed > 0 {
        parts.push(format!("tests: {passed} passed, {failed} failed"));
    }
    if let Err(why) = &result {
        parts.push(why.lines().next().unwrap_or("").to_string());
    }
    Outcome {
        run: run.into(),
        summary: parts.join("; "),
        ok: result.is_ok() && reports == 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_and_test_results_are_counted() {
        let text = "test result: ok. 12 passed; 0 failed; 0 ignored\n\
                    WARNING: ThreadSanitizer: data race (pid=1)\n\
                    test result: FAILED. 3 passed; 2 failed; 0 ignored\n";
        let o = verdict("thread", Ok(()), text);
        assert!(!o.ok);
        assert_eq!(
            o.summary,
            "1 ThreadSanitizer warning(s); tests: 15 passed, 2 failed"
        );
        let clean = verdict("address", Ok(()), "test result: ok. 1 passed; 0 failed\n");
        assert!(clean.ok, "{}", clean.summary);
    }
}
