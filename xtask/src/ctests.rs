//! `cargo xtask c-tests`: the C ABI, tested the way C programs use it. Every `*.c` in
//! `hipfile/tests/c/` and `examples/c/` is compiled against `hipfile/include/hipfile.h` and real
//! HIP headers, once as C11 and once as C++17, linked with `libhipfile.so` and the simulated HIP
//! runtime (`libamdhip64.so` from `hipfile-simhip`, soname `libamdhip64.so.6`), with the
//! [`HARNESS_SOURCE`] linked in (stdout line-buffered, so that a killed run's log keeps every line
//! it printed), and run on it:
//! with `HIPFILE_PLATFORM` unset the library finds the sim through the ordinary AMD loader path.
//! Each binary runs under every [`VARIANTS`] entry: the sim's default ABI (aligned IO takes the
//! fastpath through the sim's `hipAmdFileRead/Write`), `HIPFILE_SIM_ROCM=5`, the sim without a
//! P2P driver (`HIPFILE_SIM_P2P=false`: everything staged), `HIPFILE_FORCE_COMPAT_MODE=true`
//! (everything staged), `HIPFILE_ALLOW_COMPAT_MODE=false` (only the fastpath may serve: aligned
//! IO must still work, and what it declines fails with `-hipFileInternalError`), and both switches
//! (forcing wins: everything staged). The test programs read the two switches themselves to know
//! which answer an unaligned request must get; the examples copy files of any size, whose
//! unaligned tail needs compat mode, so they skip the compat-disallowed run.
//!
//! Programs take one argument, a fresh scratch directory, and print TAP-like lines `ok - name` /
//! `not ok - name` and, last, their plan `1..N`, which must count them; a failure is a `not ok`
//! line, a non-zero exit, a crash, a timeout, a program that printed no result line or no plan
//! (or one that does not match its results), "panicked" on stderr (a panic the library caught on
//! one of its own threads still prints there), or a compile error.
//!
//! A program whose name ends in `_cases.c` (the bad-input suite, `bad_input_cases.c`) holds a
//! table of cases instead and runs one case per process: `prog --list` names them (`class/case`),
//! `prog SCRATCH CASE` runs one and prints one `ok - CASE` / `not ok - CASE: why` line and the
//! plan `1..1`, exiting 0 or 1. Each case runs in its own process under every variant (the C++ build under the default
//! variant only: its cases make the same calls as the C build's), a few at a time. A case run is
//! passed, failed (a `not ok` line and exit 1) or crashed: a signal, any other exit, a timeout,
//! no result line, or "panicked" on stderr, which is how a panic caught at the C boundary shows.
//! The report gives cases tried, failed and crashed per class; logs of the runs that did not pass
//! stay under `logs/<binary>-<variant>/`.
//!
//! A run is killed at its time limit, 120 s for a whole program and 60 s for a case on an idle
//! machine, stretched on a loaded one by the load per core, up to 5x (see [`process::TimeLimit`]); a run
//! that needed the stretch to finish says so on its report line, a killed one names its limit.
//!
//! `cargo xtask c-tests FILTER` runs only the programs whose `TAG/FILE` name contains FILTER (tags:
//! `tests`, `examples`, `cufile`; `cargo xtask c-tests cufile/` runs the cuFile programs).

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::counts::{Counts, Report};
use crate::workspace::{self, Workspace};

mod cufile;
mod process;

use process::{execute, with_suffix, Finished, Invocation};

/// Where the C programs live, with the tag that keeps their binary names apart.
const PROGRAM_DIRS: &[(&str, &str)] = &[("hipfile/tests/c", "tests"), ("examples/c", "examples")];

/// Linked into every program: it makes stdout line-buffered, so that the log of a run killed at
/// its time limit holds every line the program printed (stdio would keep up to 4 KiB back).
pub const HARNESS_SOURCE: &str = "hipfile/tests/c/harness/line_buffered.c";

/// Set to a directory holding `hip/hip_runtime_api.h` to skip the header search.
pub const HIP_INCLUDE_VAR: &str = "HIPFILE_HIP_INCLUDE";

/// Limit of one whole program's run on an idle machine (see [`process::TimeLimit`]).
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// File-name ending (before `.c`) of the programs that run one case per process.
const CASE_PROGRAM_SUFFIX: &str = "_cases";

/// Limit of one case run on an idle machine (see [`process::TimeLimit`]); a case that takes longer hangs.
const CASE_TIMEOUT: Duration = Duration::from_secs(60);

/// Case runs at once, at most (fewer on a machine with fewer cores).
const CASE_WORKERS: usize = 4;

/// Env vars that would steer the library away from the sim found on the loader path, or change
/// which backend serves a request; each variant sets the ones it is about.
const CLEARED_VARS: &[&str] = &[
    "HIPFILE_PLATFORM",
    "HIPFILE_HIP_LIBRARY",
    "HIPFILE_CUDART_LIBRARY",
    "HIPFILE_CUDA_LIBRARY",
    "CUFILE_ENV_PATH_JSON",
    "HIPFILE_SIM_ROCM",
    "HIPFILE_SIM_P2P",
    "HIPFILE_BACKENDS",
    "HIPFILE_ALLOW_COMPAT_MODE",
    "HIPFILE_FORCE_COMPAT_MODE",
    "HIPFILE_UNSUPPORTED_FILE_SYSTEMS",
];

/// Which programs a variant runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Runs {
    /// Every program.
    All,
    /// The tests only: examples copy files of any size, which needs compat mode.
    TestsOnly,
}

/// Extra environment of a run.
pub type Env = &'static [(&'static str, &'static str)];

/// The runs of each binary: a label, the extra environment and which programs run.
const VARIANTS: &[(&str, Env, Runs)] = &[
    ("default", &[], Runs::All),
    ("rocm5", &[("HIPFILE_SIM_ROCM", "5")], Runs::All),
    ("no-p2p", &[("HIPFILE_SIM_P2P", "false")], Runs::All),
    (
        "force-compat",
        &[("HIPFILE_FORCE_COMPAT_MODE", "true")],
        Runs::All,
    ),
    (
        "compat-disallowed",
        &[("HIPFILE_ALLOW_COMPAT_MODE", "false")],
        Runs::TestsOnly,
    ),
    (
        "forced-and-disallowed",
        &[
            ("HIPFILE_ALLOW_COMPAT_MODE", "false"),
            ("HIPFILE_FORCE_COMPAT_MODE", "true"),
        ],
        Runs::All,
    ),
];

#[derive(Clone, Copy)]
enum Language {
    C,
    Cxx,
}

impl Language {
    fn suffix(self) -> &'static str {
        match self {
            Language::C => "c",
            Language::Cxx => "cxx",
        }
    }

    fn compiler(self) -> Command {
        let (var, fallback, args): (_, _, &[&str]) = match self {
            Language::C => ("CC", "cc", &["-std=c11"]),
            Language::Cxx => ("CXX", "c++", &["-std=c++17", "-x", "c++"]),
        };
        let mut command = Command::new(std::env::var_os(var).unwrap_or_else(|| fallback.into()));
        command.args(args);
        command
    }
}

#[derive(Default)]
struct Tally {
    passed: usize,
    /// `ok - NAME # SKIP REASON` lines, and program runs a variant leaves out.
    skipped: usize,
    failures: Vec<String>,
    /// Failed case runs reported on another run's line (the same answer under several variants).
    merged: usize,
}

impl Tally {
    fn fail(&mut self, failure: String) {
        println!("c-tests: FAIL {failure}");
        self.failures.push(failure);
    }

    /// Failed checks and runs, counting each merged run.
    fn failed(&self) -> usize {
        self.failures.len() + self.merged
    }

    fn counts(&self) -> Counts {
        Counts {
            passed: self.passed,
            skipped: self.skipped,
            failed: self.failed(),
        }
    }
}

/// How the C programs are built and run: plainly for `cargo xtask c-tests`, instrumented for
/// `cargo xtask sanitize`.
pub struct Build {
    /// Extra compiler and linker flags (`-fsanitize=address`).
    pub flags: &'static [&'static str],
    /// Extra environment of every run (`ASAN_OPTIONS`).
    pub env: Env,
    /// Folder under the target directory for binaries, scratch and logs.
    pub out: &'static str,
}

/// `cargo xtask c-tests`.
pub fn run() -> Report {
    run_matching(None)
}

/// `cargo xtask c-tests [FILTER]`: the programs whose `TAG/FILE` name contains `filter`, or all.
pub fn run_matching(filter: Option<&str>) -> Report {
    run_with(
        &Build {
            flags: &[],
            env: &[],
            out: "c-tests",
        },
        filter,
    )
}

/// The C ABI tests whose `TAG/FILE` name contains `filter` (all without one), built and run as
/// `build` says; counts one per check line of a whole program, one per case run of a `*_cases`
/// program.
pub fn run_with(build: &Build, filter: Option<&str>) -> Report {
    match build_and_run(build, filter) {
        Ok(report) => report,
        Err(why) => Report::failed(why),
    }
}

/// The packages the C programs need built: the two C ABIs and the two simulated runtimes.
const PACKAGES: &[&str] = &[
    "hipfile",
    "hipfile-simhip",
    "hipfile-cufile",
    "hipfile-simcuda",
];

/// A family of C programs: what they include and link, and how they run.
struct Suite {
    programs: Vec<(&'static str, PathBuf)>,
    includes: Vec<PathBuf>,
    defines: &'static [&'static str],
    libs: &'static [&'static str],
    variants: &'static [(&'static str, Env, Runs)],
    /// Environment of every run of the suite, before the variant's.
    env: Vec<(&'static str, String)>,
}

fn build_and_run(build: &Build, filter: Option<&str>) -> Result<Report, String> {
    let root = workspace::root();
    let mut programs = find_programs(&root)?;
    let mut cufile_programs = find_cufile_programs(&root)?;
    if let Some(filter) = filter {
        // `TAG/FILE`: `cufile/` selects the cuFile programs, `api_surface` both ABIs' programs.
        let matches = |(tag, p): &(&str, PathBuf)| {
            p.file_name()
                .is_some_and(|n| format!("{tag}/{}", n.to_string_lossy()).contains(filter))
        };
        programs.retain(matches);
        cufile_programs.retain(matches);
        if programs.is_empty() && cufile_programs.is_empty() {
            return Err(format!("no C program's file name contains {filter:?}"));
        }
    }
    let ws = Workspace::load()?;

    let mut args = vec!["build"];
    for package in PACKAGES {
        args.extend(["-p", package]);
    }
    println!("$ cargo {}", args.join(" "));
    let built = workspace::cargo()
        .args(&args)
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !built.success() {
        return Err(workspace::cargo_failed(&args, built));
    }

    let out_dir = ws.target_dir.join(build.out);
    let lib_dir = link_libraries(&ws.target_dir.join("debug"), &out_dir.join("lib"))?;
    let mut tally = Tally::default();

    if !programs.is_empty() {
        let hip_include = hip_include(&ws.target_dir)?;
        println!("c-tests: HIP headers from {}", hip_include.display());
        let suite = Suite {
            programs,
            includes: vec![root.join("hipfile/include"), hip_include],
            defines: &["-D__HIP_PLATFORM_AMD__"],
            libs: &["-lhipfile", "-lamdhip64"],
            variants: VARIANTS,
            env: Vec::new(),
        };
        run_suite(&suite, build, &root, &lib_dir, &out_dir, &mut tally);
    }

    if filter.is_none() || !cufile_programs.is_empty() {
        let mut checks = cufile::check_exports(
            &lib_dir.join("libcufile.so"),
            &root.join(cufile::SYMBOLS_FILE),
        );
        checks.push((
            "status texts",
            cufile::check_status_texts(
                &root.join(cufile::HEADER),
                &root.join(cufile::STATUS_TEXTS_FILE),
            ),
        ));
        for (check, result) in checks {
            match result {
                Ok(()) => {
                    println!("c-tests: libcufile.so.0 {check}: ok");
                    tally.passed += 1;
                }
                Err(why) => tally.fail(format!("libcufile.so.0 {check}: {why}")),
            }
        }
    }
    if !cufile_programs.is_empty() {
        let suite = Suite {
            programs: cufile_programs,
            includes: cufile::INCLUDE_DIRS.iter().map(|d| root.join(d)).collect(),
            defines: &[],
            libs: cufile::LIBS,
            variants: cufile::VARIANTS,
            env: cufile::platform_env(&lib_dir.join("libsimcuda.so")),
        };
        run_suite(&suite, build, &root, &lib_dir, &out_dir, &mut tally);
    }

    if !tally.failures.is_empty() {
        println!("\nc-tests failures:");
        for failure in &tally.failures {
            println!("  {failure}");
        }
    }
    println!("c-tests: {}", tally.counts());
    let result = if tally.failures.is_empty() {
        Ok(())
    } else {
        Err(format!("{} C test failure(s)", tally.failed()))
    };
    Ok(Report::new(tally.counts(), result))
}

/// Compiles each program of `suite` as C and as C++ and runs it under each of its variants.
fn run_suite(
    suite: &Suite,
    build: &Build,
    root: &Path,
    lib_dir: &Path,
    out_dir: &Path,
    tally: &mut Tally,
) {
    let suite_env: Vec<(&str, &str)> = suite
        .env
        .iter()
        .map(|(k, v)| (*k, v.as_str()))
        .chain(build.env.iter().copied())
        .collect();
    for (tag, program) in &suite.programs {
        for language in [Language::C, Language::Cxx] {
            let stem = program.file_stem().unwrap_or_default().to_string_lossy();
            let name = format!("{tag}-{stem}-{}", language.suffix());
            let binary = out_dir.join("bin").join(&name);
            let compiled = compile(
                language,
                root,
                program,
                suite,
                lib_dir,
                &binary,
                build.flags,
            );
            if let Err(why) = compiled {
                tally.fail(format!("{name}: compile failed\n{why}"));
                continue;
            }
            if stem.ends_with(CASE_PROGRAM_SUFFIX) {
                let variants = match language {
                    Language::C => suite.variants,
                    Language::Cxx => &suite.variants[..1],
                };
                run_cases(
                    &binary, &name, variants, &suite_env, lib_dir, out_dir, tally,
                );
                continue;
            }
            for (variant, env, runs) in suite.variants {
                if *runs == Runs::TestsOnly && *tag != "tests" {
                    println!("c-tests: {name} [{variant}]: skipped (examples need compat mode)");
                    tally.skipped += 1;
                    continue;
                }
                let env: Vec<(&str, &str)> = suite_env.iter().chain(env.iter()).copied().collect();
                let run = execute(&binary, &name, variant, &env, lib_dir, out_dir);
                tally_program(&format!("{name} [{variant}]"), run, tally);
            }
        }
    }
}

/// The cuFile ABI's C programs (see [`cufile`]).
fn find_cufile_programs(root: &Path) -> Result<Vec<(&'static str, PathBuf)>, String> {
    let (dir, tag) = cufile::PROGRAM_DIR;
    let found = workspace::c_files(&root.join(dir))?;
    Ok(found.into_iter().map(|p| (tag, p)).collect())
}

fn find_programs(root: &Path) -> Result<Vec<(&'static str, PathBuf)>, String> {
    let mut programs = Vec::new();
    for (dir, tag) in PROGRAM_DIRS {
        let found = workspace::c_files(&root.join(dir))?;
        programs.extend(found.into_iter().map(|p| (*tag, p)));
    }
    if !programs.iter().any(|(tag, _)| *tag == "tests") {
        return Err(format!(
            "no C tests: {} holds no *.c files; the C ABI tests live there",
            root.join(PROGRAM_DIRS[0].0).display()
        ));
    }
    Ok(programs)
}

/// Makes `lib_dir` hold what the programs link and load: `libhipfile.so`, the sim HIP runtime
/// under its link name `libamdhip64.so` and its soname `libamdhip64.so.6`, `libcufile.so` under
/// its link name and its soname `libcufile.so.0`, and `libsimcuda.so`.
fn link_libraries(build_dir: &Path, lib_dir: &Path) -> Result<PathBuf, String> {
    let hipfile = build_dir.join("libhipfile.so");
    let sim = build_dir.join("libamdhip64.so");
    let cufile = build_dir.join("libcufile.so");
    let simcuda = build_dir.join("libsimcuda.so");
    for (path, who) in [
        (&hipfile, "hipfile (crate-type cdylib)"),
        (&sim, "hipfile-simhip (cdylib named amdhip64)"),
        (&cufile, "hipfile-cufile (cdylib named cufile)"),
        (&simcuda, "hipfile-simcuda (cdylib named simcuda)"),
    ] {
        if !path.is_file() {
            return Err(format!(
                "{} is missing: {who} must build it",
                path.display()
            ));
        }
    }
    std::fs::create_dir_all(lib_dir).map_err(|e| format!("{}: {e}", lib_dir.display()))?;
    for (link, target) in [
        ("libhipfile.so", &hipfile),
        ("libamdhip64.so", &sim),
        ("libamdhip64.so.6", &sim),
        ("libcufile.so", &cufile),
        (cufile::SONAME, &cufile),
        ("libsimcuda.so", &simcuda),
    ] {
        let link = lib_dir.join(link);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(target, &link)
            .map_err(|e| format!("symlink {} -> {}: {e}", link.display(), target.display()))?;
    }
    std::path::absolute(lib_dir).map_err(|e| format!("{}: {e}", lib_dir.display()))
}

fn has_hip_headers(dir: &Path) -> bool {
    dir.join("hip/hip_runtime_api.h").is_file()
}

/// `HIPFILE_HIP_INCLUDE`, else the system headers, else `libamdhip64-dev` unpacked (not installed:
/// installing it pulls in the real HIP runtime and LLVM) under `<target>/hip-headers`.
fn hip_include(target_dir: &Path) -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os(HIP_INCLUDE_VAR) {
        let dir = PathBuf::from(dir);
        return if has_hip_headers(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "{HIP_INCLUDE_VAR}={} holds no hip/hip_runtime_api.h",
                dir.display()
            ))
        };
    }
    let system = PathBuf::from("/usr/include");
    if has_hip_headers(&system) {
        return Ok(system);
    }
    let unpack_dir = target_dir.join("hip-headers");
    let unpacked = unpack_dir.join("usr/include");
    if has_hip_headers(&unpacked) {
        return Ok(unpacked);
    }
    println!("c-tests: fetching HIP headers: apt-get download libamdhip64-dev");
    match download_headers(&unpack_dir) {
        Ok(()) if has_hip_headers(&unpacked) => Ok(unpacked),
        Ok(()) => Err(format!(
            "libamdhip64-dev unpacked into {} has no hip headers",
            unpack_dir.display()
        )),
        Err(why) => Err(format!(
            "no HIP headers found ({why}). Set {HIP_INCLUDE_VAR} to a directory holding \
             hip/hip_runtime_api.h, or on Debian/Ubuntu run `apt-get download libamdhip64-dev` \
             and `dpkg -x` it into {}",
            unpack_dir.display()
        )),
    }
}

fn download_headers(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let status = Command::new("apt-get")
        .args(["download", "libamdhip64-dev"])
        .current_dir(dir)
        .status()
        .map_err(|e| format!("cannot run apt-get: {e}"))?;
    if !status.success() {
        return Err(format!(
            "apt-get download libamdhip64-dev failed ({status})"
        ));
    }
    let deb = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "deb"))
        .ok_or("apt-get download left no .deb")?;
    let status = Command::new("dpkg")
        .arg("-x")
        .arg(&deb)
        .arg(dir)
        .status()
        .map_err(|e| format!("cannot run dpkg: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("dpkg -x {} failed ({status})", deb.display()))
    }
}

fn compile(
    language: Language,
    root: &Path,
    program: &Path,
    suite: &Suite,
    lib_dir: &Path,
    binary: &Path,
    flags: &[&str],
) -> Result<(), String> {
    if let Some(dir) = binary.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut command = harness_compiler(language, root, program, flags);
    command.args(suite.defines);
    for include in &suite.includes {
        command.arg("-I").arg(include);
    }
    command
        .arg("-L")
        .arg(lib_dir)
        .args(suite.libs)
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-o")
        .arg(binary);
    let output = command
        .output()
        .map_err(|e| format!("cannot run {command:?}: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?}\n{}",
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// The compiler for `language` with the warnings every program must pass, `flags`, and the
/// sources: `program` and the [`HARNESS_SOURCE`] linked into it.
fn harness_compiler(language: Language, root: &Path, program: &Path, flags: &[&str]) -> Command {
    let mut command = language.compiler();
    command
        .args(["-Wall", "-Wextra", "-Werror"])
        .args(flags)
        .arg(program)
        .arg(root.join(HARNESS_SOURCE));
    command
}

/// Counts one whole program's run, named `label`: its result lines, and what else went wrong.
fn tally_program(label: &str, run: Result<Finished, String>, tally: &mut Tally) {
    match run {
        Err(why) => tally.fail(format!("{label}: {why}")),
        Ok(run) => {
            let results = tally_results(label, &run.stdout, tally);
            if let Some(why) = program_trouble(&run, results) {
                tally.fail(format!("{label}: {why}{}", tail(&run.stderr)));
            }
            match &run.stretched {
                Some(note) => println!("c-tests: {label}: {results} result line(s); {note}"),
                None => println!("c-tests: {label}: {results} result line(s)"),
            }
        }
    }
}

/// Counts the result lines of a whole program's `stdout` into `tally`: `ok` passed, `ok ... # SKIP`
/// skipped, `not ok` failed; returns how many there were.
fn tally_results(label: &str, stdout: &str, tally: &mut Tally) -> usize {
    let mut results = 0;
    for line in stdout.lines().map(str::trim) {
        if line.starts_with("not ok") {
            results += 1;
            tally.fail(format!("{label}: {line}"));
        } else if line == "ok" || line.starts_with("ok ") {
            results += 1;
            if line.contains(" # SKIP") {
                tally.skipped += 1;
            } else {
                tally.passed += 1;
            }
        }
    }
    results
}

/// What is wrong with a whole program's run beyond its `not ok` lines, which printed `results`
/// result lines: its exit, a missing or wrong plan, or a panic on stderr. A panic the library
/// caught inside (on one of its threads, say) still prints its message there, and is a bug even
/// when every check passed.
fn program_trouble(run: &Finished, results: usize) -> Option<String> {
    let trouble = match (&run.exit, results, plan(&run.stdout)) {
        (Some(why), _, _) => Some(why.clone()),
        (None, 0, _) => Some("printed no `ok`/`not ok` line".to_string()),
        (None, _, None) => Some("printed no plan `1..N`: it stopped before its end".into()),
        (None, n, Some(planned)) if n != planned => Some(format!(
            "its plan says 1..{planned}, but it printed {n} result line(s)"
        )),
        (None, _, Some(_)) => None,
    };
    if run.stderr.contains("panicked") {
        let why = "printed a panic on stderr";
        return Some(trouble.map_or_else(|| why.to_string(), |t| format!("{t}; {why}")));
    }
    trouble
}

/// The plan `1..N` a program printed (its last one), which its result lines must match.
fn plan(stdout: &str) -> Option<usize> {
    stdout
        .lines()
        .filter_map(|l| l.trim().strip_prefix("1.."))
        .filter_map(|n| n.parse().ok())
        .next_back()
}

/// How one case run ended.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Passed,
    /// The case printed `not ok` and exited 1: the library answered something else.
    Failed(String),
    /// Anything else: a signal, another exit, a timeout, no result line, a panic message.
    Crashed(String),
}

/// Judge the run of case `case` from its output and exit.
fn judge(case: &str, run: &Finished) -> Verdict {
    let ok = format!("ok - {case}");
    let not_ok = format!("not ok - {case}");
    let result = run
        .stdout
        .lines()
        .map(str::trim)
        .find(|l| *l == ok || l.starts_with(&not_ok));
    if run.stderr.contains("panicked") {
        return Verdict::Crashed(format!("printed a panic on stderr{}", tail(&run.stderr)));
    }
    let planned = run.stdout.lines().map(str::trim).any(|l| l == "1..1");
    if run.exit.is_none() && !planned {
        return Verdict::Crashed(format!(
            "printed no plan `1..1`: it stopped before its end{}",
            tail(&run.stderr)
        ));
    }
    match (result, run.code, &run.exit) {
        (Some(line), Some(0), None) if line == ok => Verdict::Passed,
        (Some(line), Some(1), _) if line.starts_with(&not_ok) && planned => {
            Verdict::Failed(line.to_string())
        }
        (_, _, Some(why)) => Verdict::Crashed(format!("{why}{}", tail(&run.stderr))),
        (_, _, None) => Verdict::Crashed(format!("exited 0 without `{ok}`{}", tail(&run.stderr))),
    }
}

/// Cases tried, failed and crashed in one class.
#[derive(Default)]
struct ClassCount {
    tried: usize,
    failed: usize,
    crashed: usize,
}

/// The class of a case named `class/case`.
fn case_class(case: &str) -> &str {
    case.split_once('/').map_or(case, |(class, _)| class)
}

/// A case name as a file name.
fn case_slug(case: &str) -> String {
    case.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The cases of a `*_cases` program, from `binary --list`.
fn list_cases(binary: &Path, lib_dir: &Path) -> Result<Vec<String>, String> {
    let output = Command::new(binary)
        .arg("--list")
        .env("LD_LIBRARY_PATH", lib_dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {} --list: {e}", binary.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{} --list failed ({}){}",
            binary.display(),
            output.status,
            tail(&String::from_utf8_lossy(&output.stderr))
        ));
    }
    let cases: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    if cases.is_empty() {
        return Err(format!("{} --list names no case", binary.display()));
    }
    Ok(cases)
}

/// Run every case of a `*_cases` program in its own process under each of `variants`, a few at
/// a time, and report passed, failed and crashed runs per class.
fn run_cases(
    binary: &Path,
    name: &str,
    variants: &[(&str, Env, Runs)],
    extra_env: &[(&str, &str)],
    lib_dir: &Path,
    out_dir: &Path,
    tally: &mut Tally,
) {
    let cases = match list_cases(binary, lib_dir) {
        Ok(cases) => cases,
        Err(why) => return tally.fail(format!("{name}: {why}")),
    };
    let jobs: Vec<(&str, Env, &str)> = variants
        .iter()
        .flat_map(|(variant, env, _)| cases.iter().map(move |c| (*variant, *env, c.as_str())))
        .collect();
    for (variant, _, _) in variants {
        let _ = std::fs::remove_dir_all(out_dir.join("scratch").join(format!("{name}-{variant}")));
        let _ = std::fs::remove_dir_all(out_dir.join("logs").join(format!("{name}-{variant}")));
    }
    let workers = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .clamp(1, CASE_WORKERS);
    let next = AtomicUsize::new(0);
    let verdicts: Mutex<Vec<(usize, Verdict)>> = Mutex::new(Vec::with_capacity(jobs.len()));
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&(variant, env, case)) = jobs.get(i) else {
                    break;
                };
                let dir = format!("{name}-{variant}");
                let scratch = out_dir.join("scratch").join(&dir).join(case_slug(case));
                let log = out_dir.join("logs").join(&dir).join(case_slug(case));
                let env: Vec<(&str, &str)> = env.iter().chain(extra_env).copied().collect();
                let run = Invocation {
                    binary,
                    args: &[scratch.as_os_str(), OsStr::new(case)],
                    env: &env,
                    lib_dir,
                    timeout: CASE_TIMEOUT,
                };
                let verdict = match run.execute(&scratch, &log) {
                    Ok(finished) => {
                        if let Some(note) = &finished.stretched {
                            println!("c-tests: {name} [{variant}] {case}: {note}");
                        }
                        judge(case, &finished)
                    }
                    Err(why) => Verdict::Crashed(why),
                };
                if verdict == Verdict::Passed {
                    let _ = std::fs::remove_dir_all(&scratch);
                    let _ = std::fs::remove_file(with_suffix(&log, ".out"));
                    let _ = std::fs::remove_file(with_suffix(&log, ".err"));
                }
                verdicts
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .push((i, verdict));
            });
        }
    });
    let mut verdicts = verdicts
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    verdicts.sort_by_key(|(i, _)| *i);

    let mut classes: BTreeMap<&str, ClassCount> = BTreeMap::new();
    // One report line per (case, verdict text), naming the variants it happened under.
    let mut trouble: BTreeMap<(String, String), Vec<&str>> = BTreeMap::new();
    for (i, verdict) in &verdicts {
        let (variant, _, case) = jobs[*i];
        let count = classes.entry(case_class(case)).or_default();
        count.tried += 1;
        match verdict {
            Verdict::Passed => tally.passed += 1,
            Verdict::Failed(line) => {
                count.failed += 1;
                trouble
                    .entry((case.to_string(), line.clone()))
                    .or_default()
                    .push(variant);
            }
            Verdict::Crashed(why) => {
                count.crashed += 1;
                trouble
                    .entry((case.to_string(), format!("CRASH {case}: {why}")))
                    .or_default()
                    .push(variant);
            }
        }
    }
    for ((_, what), in_variants) in trouble {
        tally.merged += in_variants.len() - 1;
        tally.fail(format!("{name} [{}]: {what}", in_variants.join(", ")));
    }
    let totals = classes
        .values()
        .fold(ClassCount::default(), |t, c| ClassCount {
            tried: t.tried + c.tried,
            failed: t.failed + c.failed,
            crashed: t.crashed + c.crashed,
        });
    println!(
        "c-tests: {name}: {} cases x {} variant(s) in {:.1}s: {} runs, {} passed, {} failed, {} crashed",
        cases.len(),
        variants.len(),
        started.elapsed().as_secs_f64(),
        totals.tried,
        totals.tried - totals.failed - totals.crashed,
        totals.failed,
        totals.crashed
    );
    println!(
        "c-tests: {name}:   {:<10} {:>6} {:>7} {:>8}",
        "class", "tried", "failed", "crashed"
    );
    for (class, c) in &classes {
        println!(
            "c-tests: {name}:   {class:<10} {:>6} {:>7} {:>8}",
            c.tried, c.failed, c.crashed
        );
    }
}

/// The last lines of a program's stderr, indented, for a failure report.
fn tail(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().collect();
    let start = lines.len().saturating_sub(20);
    lines[start..]
        .iter()
        .map(|l| format!("\n      | {l}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::process::{load_stretch, TimeLimit, MAX_LOAD_STRETCH};
    use super::*;

    fn finished(stdout: &str, stderr: &str, code: Option<i32>) -> Finished {
        Finished {
            stdout: stdout.to_string(),
            stderr: stderr.to_string(),
            exit: match code {
                Some(0) => None,
                Some(c) => Some(format!("exited with exit status: {c}")),
                None => Some("killed by signal 11".to_string()),
            },
            code,
            stretched: None,
        }
    }

    #[test]
    fn a_case_passes_only_with_its_ok_line_exit_0_and_no_panic() {
        let case = "fd/minus-one";
        assert_eq!(
            judge(case, &finished("ok - fd/minus-one\n1..1\n", "", Some(0))),
            Verdict::Passed
        );
        let line = "not ok - fd/minus-one: got 5022, want 5030";
        assert_eq!(
            judge(case, &finished(&format!("{line}\n1..1\n"), "", Some(1))),
            Verdict::Failed(line.to_string())
        );
        let crashes = [
            finished(
                "ok - fd/minus-one\n",
                "thread 'main' panicked at x",
                Some(0),
            ),
            finished("not ok - fd/minus-one: x\n", "", None),
            finished("", "", Some(0)),
            finished("ok - fd/minus-one\n", "", Some(1)),
            finished("not ok - fd/minus-one: x\n", "", Some(134)),
            finished("ok - fd/other\n", "", Some(0)),
            finished("ok - fd/minus-one-and-more\n1..1\n", "", Some(0)),
            finished("ok - fd/minus-one\n", "", Some(0)),
            finished("not ok - fd/minus-one: x\n", "", Some(1)),
        ];
        for run in &crashes {
            assert!(
                matches!(judge(case, run), Verdict::Crashed(_)),
                "{:?} / {:?} / {:?} counts as a crash",
                run.stdout,
                run.stderr,
                run.code
            );
        }
    }

    #[test]
    fn a_whole_program_fails_on_its_exit_its_plan_or_a_panic_on_stderr() {
        let clean = finished("ok - a\nok - b\n1..2\n", "", Some(0));
        assert_eq!(program_trouble(&clean, 2), None);
        let panicked = finished(
            "ok - a\nok - b\n1..2\n",
            "thread 'hipfile-io-3' panicked at x.rs:1:2:\nattempt to add with overflow\n",
            Some(0),
        );
        assert_eq!(
            program_trouble(&panicked, 2).as_deref(),
            Some("printed a panic on stderr")
        );
        let short = finished("ok - a\n1..2\n", "", Some(0));
        assert!(program_trouble(&short, 1).is_some_and(|t| t.contains("plan says 1..2")));
        let unplanned = finished("ok - a\n", "", Some(0));
        assert!(program_trouble(&unplanned, 1).is_some_and(|t| t.contains("no plan")));
        let failed = finished("not ok - a\n1..1\n", "panicked", Some(1));
        assert_eq!(
            program_trouble(&failed, 1).as_deref(),
            Some("exited with exit status: 1; printed a panic on stderr")
        );
    }

    #[test]
    fn check_lines_count_as_passed_skipped_or_failed() {
        let mut tally = Tally::default();
        let stdout = "ok - a\nok - b # SKIP one device\n  not ok - c (got 1)\nok\n\
                      # 1 check(s) failed\n1..4\n";
        assert_eq!(tally_results("p [default]", stdout, &mut tally), 4);
        assert_eq!(
            tally.counts(),
            Counts {
                passed: 2,
                skipped: 1,
                failed: 1
            }
        );
        assert_eq!(tally.failures, ["p [default]: not ok - c (got 1)"]);
    }

    #[test]
    fn a_program_must_print_a_plan_that_matches_its_results() {
        assert_eq!(plan("ok - a\nok - b\n1..2\n# 0 check(s) failed\n"), Some(2));
        assert_eq!(plan("ok - a\n"), None);
        assert_eq!(plan("1..x\n"), None);
    }

    #[test]
    fn case_names_give_their_class_and_a_file_name() {
        assert_eq!(case_class("range/read-file-offset-2^62"), "range");
        assert_eq!(case_class("plain"), "plain");
        assert_eq!(
            case_slug("range/read-file-offset-2^62"),
            "range_read-file-offset-2_62"
        );
    }

    #[test]
    fn the_load_per_core_stretches_a_limit_from_1x_to_5x() {
        assert_eq!(load_stretch(0.4, 2), 1.0);
        assert_eq!(load_stretch(6.0, 2), 3.0);
        assert_eq!(load_stretch(50.0, 2), MAX_LOAD_STRETCH);
        assert_eq!(load_stretch(3.0, 0), 3.0, "no cores known: one");
        assert_eq!(load_stretch(f64::NAN, 2), 1.0);
    }

    #[test]
    fn a_time_limit_keeps_the_largest_stretch_seen_and_says_where_it_came_from() {
        let mut limit = TimeLimit::new(Duration::from_secs(120));
        assert!(
            !limit.observe(Some(1.5), 2),
            "an idle machine stretches nothing"
        );
        assert!(!limit.observe(None, 2), "an unknown load stretches nothing");
        assert_eq!(limit.allowed(), Duration::from_secs(120));
        assert_eq!(limit.describe(), "120s");

        assert!(limit.observe(Some(6.0), 2), "busier than at the start");
        assert_eq!(limit.allowed(), Duration::from_secs(360));
        assert_eq!(
            limit.describe(),
            "360s (the 120s limit stretched x3.0 for load 6.0 on 2 core(s))"
        );
        assert!(
            !limit.observe(Some(4.0), 2),
            "a lighter load takes nothing back"
        );
        assert_eq!(limit.allowed(), Duration::from_secs(360));

        assert!(limit.observe(Some(80.0), 2));
        assert_eq!(limit.allowed(), Duration::from_secs(600), "at most 5x");
        assert!(!limit.observe(Some(90.0), 2), "a hang is killed at 5x");
    }

    /// A run past its base limit goes on while the load stretches the limit, and says so; on an
    /// idle machine the same run is killed at the base limit.
    #[test]
    fn a_run_on_a_loaded_machine_gets_the_stretched_limit_and_says_so() {
        let dir = std::env::temp_dir().join(format!("xtask-stretched-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let slow = Invocation {
            binary: Path::new("/bin/sh"),
            args: &[OsStr::new("-c"), OsStr::new("sleep 1.5; echo ok - slow")],
            env: &[],
            lib_dir: &dir,
            timeout: Duration::from_secs(1),
        };
        let loaded = slow
            .execute_under(&dir.join("scratch"), &dir.join("loaded"), || {
                (Some(10.0), 2)
            })
            .expect("sh starts");
        assert_eq!(
            (loaded.exit.as_deref(), loaded.stdout.as_str()),
            (None, "ok - slow\n")
        );
        let note = loaded.stretched.expect("the stretch is noted");
        assert!(
            note.contains("past its 1s limit, within 5s (the 1s limit stretched x5.0 for load 10.0 on 2 core(s))"),
            "{note}"
        );

        let idle = slow
            .execute_under(&dir.join("scratch"), &dir.join("idle"), || (Some(0.1), 2))
            .expect("sh starts");
        assert_eq!(
            idle.exit.as_deref(),
            Some("timed out after 1s and was killed")
        );
        assert_eq!(idle.stretched, None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Prints three checks, then hangs until it is killed.
    const PRINTS_THEN_HANGS: &str = r#"#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <unistd.h>

int main(void)
{
    for (int i = 1; i <= 3; i++) {
        printf("ok - %d\n", i);
    }
    sleep(600);
    return 0;
}
"#;

    /// The log of a program killed at its time limit holds every line it printed: the harness
    /// linked into every program makes stdout line-buffered, where stdio would keep up to 4 KiB
    /// of a redirected stdout back and lose it with the kill.
    #[test]
    fn a_killed_program_leaves_every_line_it_printed_in_its_log() {
        let dir = std::env::temp_dir().join(format!("xtask-killed-log-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let source = dir.join("prints_then_hangs.c");
        std::fs::write(&source, PRINTS_THEN_HANGS).expect("write the program");
        for language in [Language::C, Language::Cxx] {
            let binary = dir.join(format!("prints-then-hangs-{}", language.suffix()));
            let built = harness_compiler(language, &workspace::root(), &source, &[])
                .arg("-o")
                .arg(&binary)
                .output()
                .expect("the C compiler runs (CC / CXX, else cc / c++)");
            assert!(
                built.status.success(),
                "{}",
                String::from_utf8_lossy(&built.stderr)
            );
            let run = Invocation {
                binary: &binary,
                args: &[],
                env: &[],
                lib_dir: &dir,
                timeout: Duration::from_millis(300),
            };
            let log = dir.join(format!("log-{}", language.suffix()));
            let finished = run
                .execute(&dir.join("scratch"), &log)
                .expect("the program starts");
            assert!(
                finished
                    .exit
                    .as_deref()
                    .is_some_and(|why| why.contains("timed out")),
                "{:?}",
                finished.exit
            );
            assert_eq!(finished.stdout, "ok - 1\nok - 2\nok - 3\n");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A stand-in case program (a shell script) with one case of each ending.
    const FAKE_CASES: &str = r#"#!/bin/sh
if [ "$1" = --list ]; then printf 'a/ok\na/bad\nb/segv\nb/panic\nb/silent\n'; exit 0; fi
case $2 in
  a/ok) echo "ok - a/ok"; echo "1..1" ;;
  a/bad) echo "not ok - a/bad: got 1, want 2"; echo "1..1"; exit 1 ;;
  b/segv) kill -SEGV $$ ;;
  b/panic) echo "ok - b/panic"; echo "1..1"; echo "thread 'x' panicked at y" >&2 ;;
  b/silent) exit 0 ;;
esac
"#;

    #[test]
    fn run_cases_runs_each_case_under_each_variant_and_counts_every_ending() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("xtask-run-cases-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let script = dir.join("fake_cases");
        std::fs::write(&script, FAKE_CASES).expect("write the script");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        // Another test thread forking at the moment the script was written holds its writable
        // descriptor until that child execs: until then, running it is ETXTBSY.
        for _ in 0..100 {
            match std::process::Command::new(&script).arg("--list").output() {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                    std::thread::sleep(std::time::Duration::from_millis(20))
                }
                _ => break,
            }
        }

        let mut tally = Tally::default();
        run_cases(
            &script,
            "fake",
            &VARIANTS[..2],
            &[],
            &dir,
            &dir.join("out"),
            &mut tally,
        );

        // 5 cases x 2 variants: a/ok passes twice; each other case is one line naming both
        // variants, the second run counted as merged.
        assert_eq!(tally.passed, 2);
        assert_eq!(tally.failures.len(), 4, "{:#?}", tally.failures);
        assert_eq!(tally.failed(), 8);
        assert!(tally
            .failures
            .iter()
            .all(|f| f.contains("[default, rocm5]")));
        assert_eq!(
            tally
                .failures
                .iter()
                .filter(|f| f.contains("CRASH"))
                .count(),
            3
        );
        // Logs stay for the runs that did not pass, and only for them.
        let logs = dir.join("out/logs/fake-default");
        assert!(logs.join("b_segv.out").is_file());
        assert!(!logs.join("a_ok.out").exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
