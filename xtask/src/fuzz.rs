//! `cargo xtask fuzz [--seconds N] [--seed S] [--stable]`: a longer run of what CI fuzzes briefly.
//!
//! 1. The C ABI sequences (`hipfile/tests/capi_model.rs`): the fixed seeds CI runs, then random
//!    seeds for N seconds (`HIPFILE_FUZZ_SECONDS`, `HIPFILE_FUZZ_SEED`).
//! 2. The fuzz targets of `fuzz/` (`io_arguments`, `chunking`), N seconds each: with cargo-fuzz
//!    (libFuzzer, AddressSanitizer, debug assertions) when `cargo +nightly` and `cargo fuzz` are
//!    installed, else their bodies through the stable corpus runners (the tests that run them
//!    in CI, given the same N seconds). `--stable` asks for the stable runners regardless.
//!
//! The report says which engine ran each part and how many executions it made, then ends with
//! `N passed, M failed`. A failing part keeps what reproduces it: libFuzzer leaves the input in
//! `fuzz/artifacts/<target>/`, the stable runners print the seed and the input in hex, the C
//! ABI test prints the shortest call sequence it found.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::workspace;

/// The cargo-fuzz targets, with the stable test that runs the same body:
/// (target, package, test binary, test filter).
const TARGETS: &[(&str, &str, &str, &str)] = &[
    (
        "io_arguments",
        "hipfile-testkit",
        "it",
        "fuzz::io_arguments",
    ),
    ("chunking", "hipfile", "it", "chunking::"),
];

const DEFAULT_SECONDS: u64 = 60;

struct Options {
    seconds: u64,
    seed: Option<u64>,
    stable: bool,
}

fn parse(args: &[&str]) -> Result<Options, String> {
    let mut options = Options {
        seconds: DEFAULT_SECONDS,
        seed: None,
        stable: false,
    };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        let mut number = |name: &str| -> Result<u64, String> {
            args.next()
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| format!("fuzz: {name} takes a number"))
        };
        match *arg {
            "--seconds" => options.seconds = number("--seconds")?.max(1),
            "--seed" => options.seed = Some(number("--seed")?),
            "--stable" => options.stable = true,
            other => return Err(format!("fuzz: unknown argument {other:?}")),
        }
    }
    Ok(options)
}

/// One part of the run, as reported.
struct Outcome {
    part: String,
    engine: String,
    executions: Option<String>,
    result: Result<(), String>,
}

/// `cargo xtask fuzz`.
pub fn run(args: &[&str]) -> Result<(), String> {
    let options = parse(args)?;
    let mut outcomes = Vec::new();

    println!("\n==== fuzz: C ABI call sequences against the model ====");
    outcomes.push(capi_sequences(&options));

    println!("\n==== fuzz: the core driver against the model, {MODEL_CASES} sequences ====");
    outcomes.push(model_sequences());

    let cargo_fuzz = if options.stable {
        Err("--stable asked for the stable runners".to_string())
    } else {
        cargo_fuzz_version()
    };
    match &cargo_fuzz {
        Ok(version) => {
            println!("\nfuzz: cargo-fuzz found ({version}): the targets run under libFuzzer")
        }
        Err(why) => println!(
            "\nfuzz: NOT running cargo-fuzz ({why}); the targets' bodies run through the stable \
             corpus runners instead"
        ),
    }
    for (target, package, test, filter) in TARGETS {
        println!("\n==== fuzz: target {target} ====");
        outcomes.push(match &cargo_fuzz {
            Ok(_) => libfuzzer(target, &options),
            Err(_) => stable_runner(target, package, test, filter, &options),
        });
    }

    println!("\n==== fuzz summary ({} s per part) ====", options.seconds);
    for o in &outcomes {
        println!(
            "  {:<28} {:<44} {:<28} {}",
            o.part,
            o.engine,
            o.executions.as_deref().unwrap_or("executions unknown"),
            match &o.result {
                Ok(()) => "ok".to_string(),
                Err(why) => format!("FAILED: {why}"),
            }
        );
    }
    let failed = outcomes.iter().filter(|o| o.result.is_err()).count();
    println!("{} passed, {failed} failed", outcomes.len() - failed);
    if failed == 0 {
        Ok(())
    } else {
        Err(String::new())
    }
}

fn fuzz_env(command: &mut Command, options: &Options) {
    command.env("HIPFILE_FUZZ_SECONDS", options.seconds.to_string());
    match options.seed {
        Some(seed) => command.env("HIPFILE_FUZZ_SEED", seed.to_string()),
        None => command.env_remove("HIPFILE_FUZZ_SEED"),
    };
}

fn capi_sequences(options: &Options) -> Outcome {
    let mut command = workspace::cargo();
    command.args([
        "test",
        "-p",
        "hipfile",
        "--test",
        "capi_model",
        "--",
        "--nocapture",
    ]);
    fuzz_env(&mut command, options);
    let (result, text) = run_streaming(command);
    // "capi model: 412 sequences, 52736 operations (...), ..."
    let executions = text
        .lines()
        .filter_map(|l| l.strip_prefix("capi model: "))
        .find(|l| l.contains(" sequences, "))
        .map(|l| l.split(" (").next().unwrap_or(l).to_string());
    Outcome {
        part: "C ABI sequences".into(),
        engine: "stable test capi_model (fixed + random seeds)".into(),
        executions,
        result,
    }
}

/// Sequences the model proptest tries here (CI tries 1,000).
const MODEL_CASES: u32 = 10_000;

/// The registration state machine of the core driver against the reference model
/// (`hipfile-testkit/tests/it/model.rs`), with ten times the sequences CI tries.
fn model_sequences() -> Outcome {
    let mut command = workspace::cargo();
    command
        .args([
            "test",
            "-p",
            "hipfile-testkit",
            "--test",
            "it",
            "--",
            "--exact",
            "model::the_driver_follows_the_reference_model",
        ])
        .env("HIPFILE_MODEL_CASES", MODEL_CASES.to_string());
    let (result, text) = run_streaming(command);
    let ran = text.contains("1 passed");
    Outcome {
        part: "core driver sequences".into(),
        engine: "proptest (model.rs)".into(),
        executions: Some(format!("{MODEL_CASES} sequences")),
        result: match result {
            Ok(()) if !ran => Err("the model test did not run".into()),
            other => other,
        },
    }
}

/// `cargo +nightly fuzz --version`, through rustup so that it works from any cargo.
fn cargo_fuzz_version() -> Result<String, String> {
    let nightly = Command::new("rustup")
        .args(["run", "nightly", "cargo", "--version"])
        .output();
    match nightly {
        Ok(out) if out.status.success() => {}
        Ok(_) => return Err("no nightly toolchain (`rustup toolchain install nightly`)".into()),
        Err(e) => return Err(format!("no rustup to find a nightly toolchain ({e})")),
    }
    match Command::new("rustup")
        .args(["run", "nightly", "cargo", "fuzz", "--version"])
        .output()
    {
        Ok(out) if out.status.success() => {
            Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
        }
        _ => Err("cargo-fuzz is not installed (`cargo install cargo-fuzz`)".into()),
    }
}

fn libfuzzer(target: &str, options: &Options) -> Outcome {
    let mut command = Command::new("rustup");
    command
        .current_dir(workspace::root())
        .args([
            "run",
            "nightly",
            "cargo",
            "fuzz",
            "run",
            "--fuzz-dir",
            "fuzz",
        ])
        // Debug assertions, so arithmetic overflow panics as it does in the stable tests.
        .args(["--debug-assertions", target, "--"])
        .arg(format!("-max_total_time={}", options.seconds));
    if let Some(seed) = options.seed {
        command.arg(format!("-seed={}", seed % (1 << 31)));
    }
    // The cargo that runs xtask must not leak its toolchain into the nightly build.
    for var in [
        "CARGO",
        "RUSTC",
        "RUSTDOC",
        "RUSTUP_TOOLCHAIN",
        "CARGO_TARGET_DIR",
    ] {
        command.env_remove(var);
    }
    let (result, text) = run_streaming(command);
    // libFuzzer ends with "Done 123456 runs in 60 second(s)".
    let executions = text
        .lines()
        .find_map(|l| l.strip_prefix("Done "))
        .and_then(|l| l.split(" runs").next())
        .map(|n| format!("{n} executions"));
    let result = result
        .map_err(|why| format!("{why}; the input that failed is under fuzz/artifacts/{target}/"));
    Outcome {
        part: format!("target {target}"),
        engine: "cargo-fuzz (libFuzzer, nightly)".into(),
        executions,
        result,
    }
}

fn stable_runner(
    target: &str,
    package: &str,
    test: &str,
    filter: &str,
    options: &Options,
) -> Outcome {
    let mut command = workspace::cargo();
    command.args([
        "test",
        "-p",
        package,
        "--test",
        test,
        filter,
        "--",
        "--nocapture",
    ]);
    fuzz_env(&mut command, options);
    let (result, text) = run_streaming(command);
    // "fuzz io_arguments: 123456 executions in 60.2 s, no failure"
    let prefix = format!("fuzz {target}: ");
    let executions = text
        .lines()
        .filter_map(|l| l.strip_prefix(prefix.as_str()))
        .find(|l| l.contains(" executions in "))
        .map(|l| l.split(" in ").next().unwrap_or(l).to_string());
    Outcome {
        part: format!("target {target}"),
        engine: format!("stable corpus runner ({package} --test {test})"),
        executions,
        result,
    }
}

/// Run `command`, printing its output as it comes, and return its outcome and everything it
/// printed.
pub fn run_streaming(mut command: Command) -> (Result<(), String>, String) {
    println!("$ {command:?}");
    let started = Instant::now();
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => return (Err(format!("cannot start {command:?}: {e}")), String::new()),
    };
    let stderr = child.stderr.take();
    let stderr_thread =
        std::thread::spawn(move || stderr.map(|e| pump(e, true)).unwrap_or_default());
    let mut text = child
        .stdout
        .take()
        .map(|o| pump(o, false))
        .unwrap_or_default();
    let status = child.wait();
    text.push_str(&stderr_thread.join().unwrap_or_default());
    let result = match status {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!(
            "exited with {s} after {:.0} s",
            started.elapsed().as_secs_f64()
        )),
        Err(e) => Err(format!("cannot wait: {e}")),
    };
    (result, text)
}

/// Copy a child's output line by line to ours (stdout, or stderr), and return it. Bytes that are
/// not UTF-8 are replaced, never a reason to stop reading (the child would block on a full pipe).
fn pump(from: impl Read, to_stderr: bool) -> String {
    let mut reader = BufReader::new(from);
    let mut text = String::new();
    let mut bytes = Vec::new();
    while matches!(reader.read_until(b'\n', &mut bytes), Ok(n) if n > 0) {
        let line = String::from_utf8_lossy(&bytes);
        if to_stderr {
            eprint!("{line}");
        } else {
            print!("{line}");
        }
        text.push_str(&line);
        bytes.clear();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_parse() {
        let o = parse(&["--seconds", "5", "--stable", "--seed", "9"]).unwrap();
        assert_eq!((o.seconds, o.seed, o.stable), (5, Some(9), true));
        assert_eq!(parse(&[]).unwrap().seconds, DEFAULT_SECONDS);
        assert!(parse(&["--seconds"]).is_err());
        assert!(parse(&["--bogus"]).is_err());
    }
}
