//! `cargo xtask c-tests`: the C ABI, tested the way C programs use it. Every `*.c` in
//! `hipfile/tests/c/` and `examples/c/` is compiled against `hipfile/include/hipfile.h` and real
//! HIP headers, once as C11 and once as C++17, linked with `libhipfile.so` and the simulated HIP
//! runtime (`libamdhip64.so` from `hipfile-simhip`, soname `libamdhip64.so.6`), and run on it:
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
//! `not ok - name`; a failure is a `not ok` line, a non-zero exit, a crash, a timeout, a program
//! that printed no result line, or a compile error.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::workspace::{self, Workspace};

/// Where the C programs live, with the tag that keeps their binary names apart.
const PROGRAM_DIRS: &[(&str, &str)] = &[("hipfile/tests/c", "tests"), ("examples/c", "examples")];

/// Set to a directory holding `hip/hip_runtime_api.h` to skip the header search.
pub const HIP_INCLUDE_VAR: &str = "HIPFILE_HIP_INCLUDE";

const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// Env vars that would steer the library away from the sim found on the loader path, or change
/// which backend serves a request; each variant sets the ones it is about.
const CLEARED_VARS: &[&str] = &[
    "HIPFILE_PLATFORM",
    "HIPFILE_HIP_LIBRARY",
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
    failures: Vec<String>,
}

impl Tally {
    fn fail(&mut self, failure: String) {
        println!("c-tests: FAIL {failure}");
        self.failures.push(failure);
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
pub fn run() -> Result<(), String> {
    run_with(&Build {
        flags: &[],
        env: &[],
        out: "c-tests",
    })
}

/// The C ABI tests, built and run as `build` says.
pub fn run_with(build: &Build) -> Result<(), String> {
    let root = workspace::root();
    let programs = find_programs(&root)?;
    let ws = Workspace::load()?;

    println!("$ cargo build -p hipfile -p hipfile-simhip");
    let built = workspace::cargo()
        .args(["build", "-p", "hipfile", "-p", "hipfile-simhip"])
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !built.success() {
        return Err(format!(
            "cargo build -p hipfile -p hipfile-simhip failed ({built})"
        ));
    }

    let out_dir = ws.target_dir.join(build.out);
    let lib_dir = link_libraries(&ws.target_dir.join("debug"), &out_dir.join("lib"))?;
    let hip_include = hip_include(&ws.target_dir)?;
    println!("c-tests: HIP headers from {}", hip_include.display());

    let mut tally = Tally::default();
    for (tag, program) in &programs {
        for language in [Language::C, Language::Cxx] {
            let stem = program.file_stem().unwrap_or_default().to_string_lossy();
            let name = format!("{tag}-{stem}-{}", language.suffix());
            let binary = out_dir.join("bin").join(&name);
            let compiled = compile(
                language,
                &root,
                program,
                &hip_include,
                &lib_dir,
                &binary,
                build.flags,
            );
            if let Err(why) = compiled {
                tally.fail(format!("{name}: compile failed\n{why}"));
                continue;
            }
            for (variant, env, runs) in VARIANTS {
                if *runs == Runs::TestsOnly && *tag != "tests" {
                    println!("c-tests: {name} [{variant}]: skipped (examples need compat mode)");
                    continue;
                }
                let env: Vec<(&str, &str)> = env.iter().chain(build.env).copied().collect();
                run_program(
                    &binary, &name, variant, &env, &lib_dir, &out_dir, &mut tally,
                );
            }
        }
    }

    if !tally.failures.is_empty() {
        println!("\nc-tests failures:");
        for failure in &tally.failures {
            println!("  {failure}");
        }
    }
    println!(
        "c-tests: {} passed, {} failed",
        tally.passed,
        tally.failures.len()
    );
    if tally.failures.is_empty() {
        Ok(())
    } else {
        Err(format!("{} C test failure(s)", tally.failures.len()))
    }
}

fn find_programs(root: &Path) -> Result<Vec<(&'static str, PathBuf)>, String> {
    let mut programs = Vec::new();
    for (dir, tag) in PROGRAM_DIRS {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        let mut found: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "c"))
            .collect();
        found.sort();
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

/// Makes `lib_dir` hold what the programs link and load: `libhipfile.so`, and the sim HIP runtime
/// under its link name `libamdhip64.so` and its soname `libamdhip64.so.6`.
fn link_libraries(build_dir: &Path, lib_dir: &Path) -> Result<PathBuf, String> {
    let hipfile = build_dir.join("libhipfile.so");
    let sim = build_dir.join("libamdhip64.so");
    for (path, who) in [
        (&hipfile, "hipfile (crate-type cdylib)"),
        (&sim, "hipfile-simhip (cdylib named amdhip64)"),
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
    hip_include: &Path,
    lib_dir: &Path,
    binary: &Path,
    flags: &[&str],
) -> Result<(), String> {
    if let Some(dir) = binary.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    let mut command = language.compiler();
    command
        .args(["-Wall", "-Wextra", "-Werror", "-D__HIP_PLATFORM_AMD__"])
        .args(flags)
        .arg("-I")
        .arg(root.join("hipfile/include"))
        .arg("-I")
        .arg(hip_include)
        .arg(program)
        .arg("-L")
        .arg(lib_dir)
        .args(["-lhipfile", "-lamdhip64"])
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

fn run_program(
    binary: &Path,
    name: &str,
    variant: &str,
    env: &[(&str, &str)],
    lib_dir: &Path,
    out_dir: &Path,
    tally: &mut Tally,
) {
    let label = format!("{name} [{variant}]");
    match execute(binary, name, variant, env, lib_dir, out_dir) {
        Err(why) => tally.fail(format!("{label}: {why}")),
        Ok(run) => {
            let mut results = 0;
            for line in run.stdout.lines().map(str::trim) {
                if line.starts_with("not ok") {
                    results += 1;
                    tally.fail(format!("{label}: {line}"));
                } else if line == "ok" || line.starts_with("ok ") {
                    results += 1;
                    tally.passed += 1;
                }
            }
            let trouble = match (&run.exit, results) {
                (Some(why), _) => Some(why.clone()),
                (None, 0) => Some("printed no `ok`/`not ok` line".to_string()),
                (None, _) => None,
            };
            if let Some(why) = trouble {
                tally.fail(format!("{label}: {why}{}", tail(&run.stderr)));
            }
            println!("c-tests: {label}: {results} result line(s)");
        }
    }
}

struct Finished {
    stdout: String,
    stderr: String,
    /// Why the run counts as failed by its exit, or `None` for a clean exit 0.
    exit: Option<String>,
}

fn execute(
    binary: &Path,
    name: &str,
    variant: &str,
    env: &[(&str, &str)],
    lib_dir: &Path,
    out_dir: &Path,
) -> Result<Finished, String> {
    let scratch = out_dir.join("scratch").join(format!("{name}-{variant}"));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).map_err(|e| format!("{}: {e}", scratch.display()))?;
    let logs = out_dir.join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| format!("{}: {e}", logs.display()))?;
    let stdout_path = logs.join(format!("{name}-{variant}.out"));
    let stderr_path = logs.join(format!("{name}-{variant}.err"));
    let create = |p: &Path| std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()));

    let mut command = Command::new(binary);
    command
        .arg(&scratch)
        .env("LD_LIBRARY_PATH", lib_dir)
        .stdin(Stdio::null())
        .stdout(create(&stdout_path)?)
        .stderr(create(&stderr_path)?);
    for var in CLEARED_VARS {
        command.env_remove(var);
    }
    for (key, value) in env {
        command.env(key, value);
    }
    let mut child = command.spawn().map_err(|e| format!("cannot start: {e}"))?;
    let started = Instant::now();
    let exit = loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => break None,
            Ok(Some(status)) => break Some(format!("exited with {status}")),
            Ok(None) if started.elapsed() > RUN_TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                break Some(format!(
                    "timed out after {}s and was killed",
                    RUN_TIMEOUT.as_secs()
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => break Some(format!("cannot wait: {e}")),
        }
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    Ok(Finished {
        stdout: read(&stdout_path),
        stderr: read(&stderr_path),
        exit,
    })
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
