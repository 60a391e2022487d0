//! `cargo xtask gpu-bundle [--out DIR]`: everything needed to test hipfile-rs on a GPU machine that
//! has no cargo and no network, built here (release) and collected into one folder, by default
//! `target/gpu-bundle/`:
//!
//! ```text
//! target/gpu-bundle/
//!   run.sh               runs it all there; last line `G passed on the GPU, M on the sim, S skipped, F failed`
//!   MANIFEST.txt         what was built, from which commit
//!   tests/<pkg>-<target> release test binaries (`cargo test --release --no-run`), stripped
//!   lib/libhipfile.so    the C library
//!   bin/hipfile          the CLI (`hipfile bench`)
//!   include/hipfile.h    the C header; include/hip_on_cuda.h maps the few HIP names our C
//!                        tests use onto the CUDA runtime (the GPU machine has no HIP headers)
//!   include/tap.h        the C tests' `ok - ...` / `not ok - ...` lines and plan
//!                        (hipfile/tests/c/tap.h), found by every C program through `-I include`
//!   include/cases.h      the one-case-per-process harness of the `*_cases.c` programs
//!                        (hipfile/tests/c/cases.h)
//!   harness/line_buffered.c linked into every C program: stdout line-buffered, so that a
//!                        program killed at its time limit leaves every line it printed in its log
//!                        (hipfile/tests/c/harness/line_buffered.c)
//!   c/cuda/*.c           plain CUDA programs (hipfile/tests/c_cuda), built with only CUDA headers
//!   c/hip/*.c            the C ABI tests (hipfile/tests/c), built through hip_on_cuda.h
//!   c/examples/*.c       the C examples (examples/c), built through hip_on_cuda.h
//!   py/frameworks.py     the C ABI from Python on CuPy and PyTorch allocations
//!   python/hipfile-*.whl the `hipfile` Python package (release wheel, built by maturin)
//!   python/tests/*.py    its pytest suite (hipfile-py/tests)
//!   python/bench/bench.py its benchmark (hipfile-py/bench), run beside shared/bench/kvikio_anchor.py
//!   lib/libcufile.so.0   the cuFile drop-in (crate `hipfile-cufile`, release), once the
//!                        workspace has it
//!   cufile/clients/      real cuFile clients and the figures (hipfile-cufile/clients)
//!   cufile/wheels/*.whl  KvikIO's wheels (default `../shared/wheels` beside the repository,
//!                        else `$HIPFILE_KVIKIO_WHEELS`), when there are any
//!   cufile/fio.tar.gz    fio's sources (`.ab/fio.tar.gz`, else `$HIPFILE_FIO_TARBALL`), when
//!                        present: built there with its libcufile engine
//!   remote/figures.py    remote reads over HTTP against KvikIO's RemoteFile and curl
//!                        (hipfile-remote/bench/figures.py; see [`crate::remote_bundle`])
//!   remote/nginx/        the HTTP server it reads from: the build machine's nginx and its
//!                        libraries, when it has nginx
//! ```
//!
//! The test binaries are those of the packages that run GPU code: `hipfile-hip`, `hipfile-core`,
//! `hipfile-fallback`, `hipfile`, `hipfile-testkit`, and `hipfile-fastpath` once the workspace has
//! it. Their names come from cargo's `compiler-artifact` messages (`profile.test` and an
//! `executable`), not from guessing at `target/release/deps`. The bundle must travel through the
//! device tool, whose limit is 64 MiB for everything together, so binaries are stripped, the test
//! binaries travel packed in `tests.tar.gz` (run.sh unpacks them), and the command fails when
//! the bundle passes [`SIZE_LIMIT`].
//!
//! ## Running it on the GPU machine
//!
//! With the device tool, from this repository (the bundle lies under the ignored `target/`):
//!
//! ```text
//! run  carry: ["target/gpu-bundle"]
//!      command: "cd target/gpu-bundle && ./run.sh"
//! ```
//!
//! `run.sh` (source: `xtask/bundle/run.sh`) exports `HIPFILE_PLATFORM=nvidia` and
//! `HIPFILE_GPU_TESTS=1`, puts `TMPDIR` on the real disk (`./scratch`, not a tmpfs `/tmp`), runs
//! every test binary, compiles every C program as C11 and as C++17 against the CUDA headers it finds
//! (`$CUDA_HOME/include`, `/usr/local/cuda/include`, `nvcc`'s `../include`) and runs it, then runs
//! `bin/hipfile bench --size 1G` (`--no-bench` skips it). Tests that compile C against
//! `env!("CARGO_MANIFEST_DIR")/include` find the header there through a link to the bundle's
//! `include/` that `run.sh` makes when the build machine's path (`source root` in the manifest) is
//! missing on the GPU machine. Logs go to `$OUT` when set (the device
//! tool brings `$OUT` back): `run.log`, `summary.txt`, and `logs.tar.gz` with every full log.
//!
//! ## The cuFile door
//!
//! `run.sh --cufile` runs only `cufile/clients/run_clients.sh`: KvikIO (compatibility mode off),
//! `torch.cuda.gds`, `cuda.bindings.cufile` and fio's libcufile engine (verify job), each unchanged
//! and in a process of its own, once on ours (`LD_PRELOAD=lib/libcufile.so.0`, whose soname
//! answers every `DT_NEEDED` and `dlopen` of `libcufile.so.0`) and once on NVIDIA's, every result
//! a JSON line in `$OUT/cufile-clients.jsonl`; NVIDIA's refusals (it cannot register a file on a
//! machine without nvidia-fs) are recorded, not failures. `run.sh --cufile-figures` runs only
//! `cufile/clients/figures.py`: KvikIO over ours against KvikIO's POSIX path, `torch.cuda.gds`
//! against `torch.load`, and `bin/hipfile bench` (our hipFile door) on one 8 GiB file, with
//! ratios. Each fits one device call (600 s); without these flags run.sh runs its stages as
//! before. fio's sources are never committed; the tarball (1 MiB without fio's examples and docs)
//! is made with `git -C <fio checkout> archive --prefix=fio/ HEAD -- . ':(exclude)examples'
//! ':(exclude)doc' | gzip -9 > .ab/fio.tar.gz` (`.ab/` is ignored).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::json::{self, Value};
use crate::remote_bundle::RemoteExtras;
use crate::workspace::{self, Workspace};

/// Packages whose tests exercise GPU code; all must be workspace members.
const TEST_PACKAGES: &[&str] = &[
    "hipfile-hip",
    "hipfile-core",
    "hipfile-fallback",
    "hipfile",
    "hipfile-testkit",
];

/// Packages whose tests join the bundle when the workspace has them.
const OPTIONAL_TEST_PACKAGES: &[&str] = &["hipfile-fastpath"];

/// The crate of `libcufile.so.0`; its library joins the bundle when the workspace has it.
const CUFILE_PACKAGE: &str = "hipfile-cufile";

/// The cuFile clients and figures: (folder in the repo, folder in the bundle).
const CUFILE_CLIENTS: (&str, &str) = ("hipfile-cufile/clients", "cufile/clients");

/// Where KvikIO's wheels are looked for, relative to the repository, unless
/// `$HIPFILE_KVIKIO_WHEELS` names a folder.
const DEFAULT_WHEELS: &str = "../shared/wheels";

/// fio's source tarball, relative to the repository (an ignored folder), unless
/// `$HIPFILE_FIO_TARBALL` names a file.
const DEFAULT_FIO_TARBALL: &str = ".ab/fio.tar.gz";

/// The device tool carries at most 64 MiB; the rest of the working tree travels too.
pub const SIZE_LIMIT: u64 = 60 * 1024 * 1024;

/// The default bundle folder, relative to the workspace's target directory.
const DEFAULT_DIR: &str = "gpu-bundle";

/// Written into every bundle; a folder without it is never emptied by `--out`.
const MANIFEST: &str = "MANIFEST.txt";

/// C sources to ship: (source folder in the repo, folder in the bundle).
const C_SOURCES: &[(&str, &str)] = &[
    ("hipfile/tests/c_cuda", "c/cuda"),
    ("hipfile/tests/c", "c/hip"),
    ("examples/c", "c/examples"),
];

/// Headers the C programs include: (file in the repo, place in the bundle). `run.sh` compiles
/// every program with `-I include`, so the C ABI tests and the plain CUDA programs alike find them.
const C_HEADERS: &[(&str, &str)] = &[
    ("hipfile/include/hipfile.h", "include/hipfile.h"),
    ("hipfile/tests/c/tap.h", "include/tap.h"),
    ("hipfile/tests/c/cases.h", "include/cases.h"),
];

/// The source `run.sh` links into every C program (its place in the bundle is outside `c/`,
/// whose `*/*.c` are the programs).
const C_HARNESS: (&str, &str) = (crate::ctests::HARNESS_SOURCE, "harness/line_buffered.c");

/// Files of `xtask/bundle/` to ship: (file name, place in the bundle).
const SHIPPED: &[(&str, &str)] = &[
    ("run.sh", "run.sh"),
    ("hip_on_cuda.h", "include/hip_on_cuda.h"),
    ("frameworks.py", "py/frameworks.py"),
];

/// A test executable named by cargo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TestBinary {
    pub package: String,
    pub target: String,
    pub executable: PathBuf,
}

impl TestBinary {
    /// Its file name in the bundle's `tests/`.
    pub fn bundle_name(&self) -> String {
        format!("{}-{}", self.package, self.target)
    }
}

/// `cargo xtask gpu-bundle [--out DIR]`.
pub fn run(args: &[&str]) -> Result<(), String> {
    let ws = Workspace::load()?;
    let root = workspace::root();
    let out = match args {
        [] => ws.target_dir.join(DEFAULT_DIR),
        ["--out", dir] => PathBuf::from(dir),
        [arg] if arg.starts_with("--out=") => PathBuf::from(&arg["--out=".len()..]),
        _ => return Err(format!("gpu-bundle: unknown arguments {args:?}")),
    };
    let out = std::path::absolute(&out).map_err(|e| format!("{}: {e}", out.display()))?;

    let mut packages: Vec<&str> = TEST_PACKAGES.to_vec();
    for package in OPTIONAL_TEST_PACKAGES {
        if ws.member(package).is_some() {
            packages.push(package);
        } else {
            println!("gpu-bundle: {package} is not in the workspace; its tests are left out");
        }
    }
    let cufile = ws.member(CUFILE_PACKAGE).is_some();
    if !cufile {
        println!(
            "gpu-bundle: {CUFILE_PACKAGE} is not in the workspace; libcufile.so.0 is left out"
        );
    }
    let extras = CufileExtras::find(&root, |name| std::env::var_os(name))?;
    let remote = RemoteExtras::find(|name| std::env::var_os(name))?;
    // Refuse a wrong --out before minutes of building, not after.
    check_out_dir(&out)?;
    let tests = build_tests(&packages)?;
    build_artifacts(cufile)?;
    let wheel = build_python_wheel(&ws)?;

    prepare_out_dir(&out)?;
    let release = ws.target_dir.join("release");
    for test in &tests {
        install_binary(
            &test.executable,
            &out.join("tests").join(test.bundle_name()),
        )?;
    }
    install_binary(&release.join("hipfile"), &out.join("bin/hipfile"))?;
    install_binary(
        &release.join("libhipfile.so"),
        &out.join("lib/libhipfile.so"),
    )?;
    for (file, place) in C_HEADERS.iter().chain([&C_HARNESS]) {
        copy(&root.join(file), &out.join(place))?;
    }
    for (file, place) in SHIPPED {
        copy(&root.join("xtask/bundle").join(file), &out.join(place))?;
    }
    let python_files = install_python(&root, &wheel, &out)?;
    let mut cufile_files = Vec::new();
    if cufile {
        install_binary(
            &release.join("libcufile.so"),
            &out.join("lib/libcufile.so.0"),
        )?;
        cufile_files.push("lib/libcufile.so.0".to_string());
    }
    cufile_files.extend(extras.install(&root, &out)?);
    let remote_files = remote.install(&root, &out, copy)?;
    let mut c_programs = Vec::new();
    for (from, to) in C_SOURCES {
        for source in workspace::c_files(&root.join(from))? {
            let name = source.file_name().unwrap_or_default().to_string_lossy();
            let place = format!("{to}/{name}");
            copy(&source, &out.join(&place))?;
            c_programs.push(place);
        }
    }
    let listed = Listed {
        c_programs: &c_programs,
        python_files: &python_files,
        cufile_files: &cufile_files,
        remote_files: &remote_files,
    };
    write_manifest(&out, &packages, &tests, &listed)?;
    pack_tests(&out)?;

    let (files, bytes) = measure(&out)?;
    println!(
        "\ngpu-bundle: {} test binaries, {} C programs; {files} files, {:.1} MiB in {}",
        tests.len(),
        c_programs.len(),
        bytes as f64 / (1024.0 * 1024.0),
        out.display()
    );
    if bytes > SIZE_LIMIT {
        return Err(format!(
            "the bundle is {bytes} bytes, over the {SIZE_LIMIT}-byte limit: the device tool \
             carries 64 MiB at most"
        ));
    }
    print_instructions(&root, &out);
    Ok(())
}

/// Packs `tests/` into `tests.tar.gz` (stripped binaries shrink about threefold), which run.sh
/// unpacks before it runs them: the device tool carries 64 MiB at most, the binaries alone are
/// over 40 MiB, and the bundle also carries the CLI, the Python wheel and the remote figures'
/// server.
fn pack_tests(out: &Path) -> Result<(), String> {
    let shown = "tar -czf tests.tar.gz tests";
    workspace::run_to_end(
        Command::new("tar")
            .args(["-czf", "tests.tar.gz", "tests"])
            .current_dir(out),
        "tar",
        shown,
    )?;
    std::fs::remove_dir_all(out.join("tests"))
        .map_err(|e| format!("{}: {e}", out.join("tests").display()))
}

/// Builds the release test binaries and returns them, as cargo names them.
fn build_tests(packages: &[&str]) -> Result<Vec<TestBinary>, String> {
    let mut args = vec!["test", "--release", "--no-run", "--message-format=json"];
    for package in packages {
        args.extend(["-p", package]);
    }
    println!("$ cargo {}", args.join(" "));
    // stdout carries the JSON messages; stderr (progress, errors) goes to the terminal.
    let output = workspace::cargo()
        .args(&args)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !output.status.success() {
        return Err(workspace::cargo_failed(&args, output.status));
    }
    let text = String::from_utf8_lossy(&output.stdout);
    let tests = test_binaries(&text)?;
    if tests.is_empty() {
        return Err("cargo named no test executables".into());
    }
    let mut names: Vec<String> = tests.iter().map(TestBinary::bundle_name).collect();
    names.sort();
    if let Some(pair) = names.windows(2).find(|w| w[0] == w[1]) {
        return Err(format!("two test binaries would both be tests/{}", pair[0]));
    }
    Ok(tests)
}

/// The test executables among cargo's JSON messages, one message per line.
pub fn test_binaries(messages: &str) -> Result<Vec<TestBinary>, String> {
    let mut tests = Vec::new();
    for line in messages.lines().filter(|l| l.starts_with('{')) {
        let message = json::parse(line)?;
        if message.str_at("reason") != Some("compiler-artifact") {
            continue;
        }
        let is_test =
            message.get("profile").and_then(|p| p.get("test")) == Some(&Value::Bool(true));
        let (Some(executable), true) = (message.str_at("executable"), is_test) else {
            continue;
        };
        let package_id = message.str_at("package_id").unwrap_or_default();
        let package = package_name(package_id)
            .ok_or_else(|| format!("cannot read a package name from {package_id:?}"))?;
        let target = message
            .get("target")
            .and_then(|t| t.str_at("name"))
            .ok_or_else(|| format!("artifact {executable} has no target name"))?;
        tests.push(TestBinary {
            package,
            target: target.to_string(),
            executable: PathBuf::from(executable),
        });
    }
    Ok(tests)
}

/// The package name in a cargo package id: `path+file:///w/hipfile-core#0.1.0` (name = last path
/// segment), `path+file:///w/testkit/simhip#hipfile-simhip@0.1.0` (name before `@`), or the old
/// form `hipfile-core 0.1.0 (path+file:///w/hipfile-core)`.
pub fn package_name(package_id: &str) -> Option<String> {
    let name = match package_id.split_once('#') {
        Some((_, fragment)) if fragment.contains('@') => fragment.split('@').next()?,
        Some((url, _)) => url.trim_end_matches('/').rsplit('/').next()?,
        None => package_id.split(' ').next()?,
    };
    (!name.is_empty()).then(|| name.to_string())
}

/// The library and the CLI, and `libcufile.so` when `cufile`.
fn build_artifacts(cufile: bool) -> Result<(), String> {
    let mut args = vec!["build", "--release", "-p", "hipfile", "-p", "hipfile-cli"];
    if cufile {
        args.extend(["-p", CUFILE_PACKAGE]);
    }
    workspace::run_cargo(&args)
}

/// What the cuFile stages take along besides the library: the client scripts, KvikIO's wheels
/// and fio's sources, the last two only where this machine has them.
#[derive(Debug, PartialEq, Eq)]
pub struct CufileExtras {
    /// The `*.whl` files of the wheel folder, sorted; empty when there is none.
    pub wheels: Vec<PathBuf>,
    /// fio's source tarball, when there is one.
    pub fio: Option<PathBuf>,
}

impl CufileExtras {
    /// Looks in `$HIPFILE_KVIKIO_WHEELS` (else [`DEFAULT_WHEELS`]) and `$HIPFILE_FIO_TARBALL`
    /// (else [`DEFAULT_FIO_TARBALL`]); `var` reads the environment. A folder or file named by
    /// its variable must exist (a typo is an error, not a silent omission); the defaults may be
    /// missing.
    pub fn find(
        root: &Path,
        var: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<CufileExtras, String> {
        let wheels = match var("HIPFILE_KVIKIO_WHEELS") {
            Some(dir) => {
                let dir = PathBuf::from(dir);
                if !dir.is_dir() {
                    return Err(format!(
                        "HIPFILE_KVIKIO_WHEELS={}: not a folder",
                        dir.display()
                    ));
                }
                dir
            }
            None => root.join(DEFAULT_WHEELS),
        };
        let wheels = if wheels.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(&wheels)
                .map_err(|e| format!("{}: {e}", wheels.display()))?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "whl"))
                .collect();
            found.sort();
            found
        } else {
            Vec::new()
        };
        let fio = match var("HIPFILE_FIO_TARBALL") {
            Some(file) => {
                let file = PathBuf::from(file);
                if !file.is_file() {
                    return Err(format!(
                        "HIPFILE_FIO_TARBALL={}: no such file",
                        file.display()
                    ));
                }
                Some(file)
            }
            None => Some(root.join(DEFAULT_FIO_TARBALL)).filter(|p| p.is_file()),
        };
        Ok(CufileExtras { wheels, fio })
    }

    /// Copies the clients, the wheels and the tarball into `out`; returns their places.
    fn install(&self, root: &Path, out: &Path) -> Result<Vec<String>, String> {
        let mut placed = Vec::new();
        let (from, to) = CUFILE_CLIENTS;
        for file in client_files(&root.join(from))? {
            let name = file.file_name().unwrap_or_default().to_string_lossy();
            let place = format!("{to}/{name}");
            copy(&file, &out.join(&place))?;
            placed.push(place);
        }
        for wheel in &self.wheels {
            let name = wheel.file_name().unwrap_or_default().to_string_lossy();
            let place = format!("cufile/wheels/{name}");
            copy(wheel, &out.join(&place))?;
            placed.push(place);
        }
        if let Some(tarball) = &self.fio {
            let place = "cufile/fio.tar.gz".to_string();
            copy(tarball, &out.join(&place))?;
            placed.push(place);
        }
        Ok(placed)
    }
}

/// The files of the clients folder, sorted (not its subfolders, such as `__pycache__`).
fn client_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// The release wheel of the Python package, built by maturin from the venv of
/// `cargo xtask python`.
fn build_python_wheel(ws: &Workspace) -> Result<PathBuf, String> {
    let base = ws.target_dir.join("python");
    let python = crate::python::venv(&base.join("venv"))?;
    crate::python::build_wheel(&python, &base.join("release-wheels"), "release")
}

/// Puts the wheel, the pytest files and the benchmark under `out/python/`; returns their
/// places in the bundle.
fn install_python(root: &Path, wheel: &Path, out: &Path) -> Result<Vec<String>, String> {
    let mut placed = Vec::new();
    let name = wheel.file_name().unwrap_or_default().to_string_lossy();
    let place = format!("python/{name}");
    copy(wheel, &out.join(&place))?;
    placed.push(place);
    let package = root.join(crate::python::PACKAGE_DIR);
    let mut tests: Vec<PathBuf> = std::fs::read_dir(package.join("tests"))
        .map_err(|e| format!("{}: {e}", package.join("tests").display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "py"))
        .collect();
    tests.sort();
    for test in tests {
        let name = test.file_name().unwrap_or_default().to_string_lossy();
        let place = format!("python/tests/{name}");
        copy(&test, &out.join(&place))?;
        placed.push(place);
    }
    let place = "python/bench/bench.py".to_string();
    copy(&package.join("bench/bench.py"), &out.join(&place))?;
    placed.push(place);
    Ok(placed)
}

/// Refuses a non-empty folder that is not an earlier bundle: `--out` must never empty one.
fn check_out_dir(out: &Path) -> Result<(), String> {
    if !out.exists() {
        return Ok(());
    }
    let empty = std::fs::read_dir(out)
        .map_err(|e| format!("{}: {e}", out.display()))?
        .next()
        .is_none();
    if empty || out.join(MANIFEST).is_file() {
        Ok(())
    } else {
        Err(format!(
            "{} exists and holds no {MANIFEST}: not a bundle, so it is left alone",
            out.display()
        ))
    }
}

/// Empties `out` (checked by [`check_out_dir`]) and creates it afresh.
fn prepare_out_dir(out: &Path) -> Result<(), String> {
    check_out_dir(out)?;
    if out.exists() {
        std::fs::remove_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    }
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))
}

fn copy(from: &Path, to: &Path) -> Result<(), String> {
    if let Some(dir) = to.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::copy(from, to)
        .map(drop)
        .map_err(|e| format!("copy {} -> {}: {e}", from.display(), to.display()))
}

/// Copies a binary and strips it; without a `strip` on the PATH it stays as built (the release
/// profile already drops symbols).
fn install_binary(from: &Path, to: &Path) -> Result<(), String> {
    if !from.is_file() {
        return Err(format!("{} was not built", from.display()));
    }
    copy(from, to)?;
    match Command::new("strip")
        .arg("--strip-unneeded")
        .arg(to)
        .status()
    {
        Ok(status) if status.success() => Ok(()),
        Ok(status) => Err(format!("strip {} failed ({status})", to.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(format!("cannot run strip: {e}")),
    }
}

/// The files of the bundle the manifest lists by kind.
struct Listed<'a> {
    c_programs: &'a [String],
    python_files: &'a [String],
    cufile_files: &'a [String],
    remote_files: &'a [String],
}

fn write_manifest(
    out: &Path,
    packages: &[&str],
    tests: &[TestBinary],
    listed: &Listed<'_>,
) -> Result<(), String> {
    let commit = Command::new("git")
        .args(["describe", "--always", "--dirty", "--abbrev=40"])
        .current_dir(workspace::root())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    let mut text = format!(
        "hipfile-rs GPU bundle, built by `cargo xtask gpu-bundle`\ncommit: {commit}\n\
         source root: {}\ntest packages: {}\n\ntests:\n",
        workspace::root().display(),
        packages.join(" ")
    );
    for test in tests {
        text.push_str(&format!("  tests/{}\n", test.bundle_name()));
    }
    for (title, files) in [
        ("C programs", listed.c_programs),
        ("Python", listed.python_files),
        ("cuFile door", listed.cufile_files),
        ("remote figures", listed.remote_files),
    ] {
        text.push_str(&format!("\n{title}:\n"));
        for file in files {
            text.push_str(&format!("  {file}\n"));
        }
    }
    let path = out.join(MANIFEST);
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Files and bytes under `dir`.
fn measure(dir: &Path) -> Result<(usize, u64), String> {
    let mut files = 0;
    let mut bytes = 0;
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let meta = entry
            .metadata()
            .map_err(|e| format!("{}: {e}", entry.path().display()))?;
        if meta.is_dir() {
            let (f, b) = measure(&entry.path())?;
            files += f;
            bytes += b;
        } else {
            files += 1;
            bytes += meta.len();
        }
    }
    Ok((files, bytes))
}

fn print_instructions(root: &Path, out: &Path) {
    match out.strip_prefix(root) {
        Ok(relative) => {
            let relative = relative.display();
            println!(
                "gpu-bundle: to run it on the GPU machine, call the device tool's `run` with\n  \
                 carry: [\"{relative}\"]\n  command: \"cd {relative} && ./run.sh\"\n\
                 (logs come back from $OUT: run.log, summary.txt, logs.tar.gz)"
            );
        }
        Err(_) => println!(
            "gpu-bundle: {} is outside the repository; the device tool carries only paths \
             inside it",
            out.display()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_package_names_from_every_id_form() {
        let name = |id| package_name(id);
        assert_eq!(
            name("path+file:///w/hipfile-core#0.1.0").as_deref(),
            Some("hipfile-core")
        );
        assert_eq!(
            name("path+file:///w/hipfile-testkit/simhip#hipfile-simhip@0.1.0").as_deref(),
            Some("hipfile-simhip")
        );
        assert_eq!(
            name("hipfile 0.1.0 (path+file:///w/hipfile)").as_deref(),
            Some("hipfile")
        );
        assert_eq!(name(""), None);
    }

    #[test]
    fn keeps_only_test_executables() {
        let messages = concat!(
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/hipfile#0.1.0","#,
            r#""target":{"kind":["test"],"name":"it"},"profile":{"test":true},"#,
            r#""executable":"/w/target/release/deps/it-1"}"#,
            "\n",
            r#"{"reason":"compiler-artifact","package_id":"path+file:///w/hipfile-hip#0.1.0","#,
            r#""target":{"kind":["lib"],"name":"hipfile_hip"},"profile":{"test":false},"#,
            r#""executable":null}"#,
            "\n",
            r#"{"reason":"build-finished","success":true}"#,
            "\n",
            "   Compiling noise that is not JSON\n",
        );
        let tests = test_binaries(messages).expect("valid messages");
        assert_eq!(
            tests,
            [TestBinary {
                package: "hipfile".into(),
                target: "it".into(),
                executable: PathBuf::from("/w/target/release/deps/it-1"),
            }]
        );
        assert_eq!(tests[0].bundle_name(), "hipfile-it");
    }

    /// run.sh links the harness, from where the bundle puts it, into every program: beside the
    /// program's source in its one compile command.
    #[test]
    fn run_sh_links_the_harness_into_every_c_program() {
        let run_sh = include_str!("../bundle/run.sh");
        let sources: Vec<&str> = run_sh
            .lines()
            .filter(|l| l.contains("\"$source\"") && l.contains("-x none"))
            .collect();
        let harness = format!("\"$source\" \"$BUNDLE/{}\" -x none", C_HARNESS.1);
        assert!(
            matches!(sources.as_slice(), [line] if line.contains(&harness)),
            "the compile command's sources: {sources:?}"
        );
    }

    /// A scratch repository root with `../shared/wheels` beside it, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Scratch {
            let dir = std::env::temp_dir().join(format!("xtask-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("repo")).expect("scratch folder");
            Scratch(dir)
        }

        fn root(&self) -> PathBuf {
            self.0.join("repo")
        }

        fn file(&self, relative: &str) -> PathBuf {
            let path = self.0.join(relative);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("folder");
            std::fs::write(&path, b"x").expect("file");
            path
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn cufile_extras_default_to_the_shared_wheels_and_the_ignored_tarball() {
        let scratch = Scratch::new("extras-default");
        let none = |_: &str| None;
        assert_eq!(
            CufileExtras::find(&scratch.root(), none),
            Ok(CufileExtras {
                wheels: Vec::new(),
                fio: None
            }),
            "nothing there: nothing taken, no error"
        );
        let b = scratch.file("shared/wheels/b-1.whl");
        let a = scratch.file("shared/wheels/a-1.whl");
        scratch.file("shared/wheels/README.txt");
        let tarball = scratch.file("repo/.ab/fio.tar.gz");
        let found = CufileExtras::find(&scratch.root(), none).expect("found");
        let names = |paths: &[PathBuf]| -> Vec<PathBuf> {
            paths
                .iter()
                .map(|p| p.canonicalize().expect("exists"))
                .collect()
        };
        assert_eq!(names(&found.wheels), names(&[a, b]), "only wheels, sorted");
        assert_eq!(
            found.fio.map(|p| p.canonicalize().expect("exists")),
            Some(tarball.canonicalize().expect("exists"))
        );
    }

    #[test]
    fn cufile_extras_follow_their_variables_and_refuse_a_wrong_one() {
        let scratch = Scratch::new("extras-vars");
        scratch.file("shared/wheels/default-1.whl");
        let wheel = scratch.file("elsewhere/k-1.whl");
        let tarball = scratch.file("elsewhere/fio-src.tar.gz");
        let vars = |wheels: PathBuf, fio: PathBuf| {
            move |name: &str| match name {
                "HIPFILE_KVIKIO_WHEELS" => Some(wheels.clone().into_os_string()),
                "HIPFILE_FIO_TARBALL" => Some(fio.clone().into_os_string()),
                _ => None,
            }
        };
        let found = CufileExtras::find(
            &scratch.root(),
            vars(scratch.0.join("elsewhere"), tarball.clone()),
        )
        .expect("found");
        assert_eq!(found.wheels, [wheel]);
        assert_eq!(found.fio, Some(tarball.clone()));
        let wrong_dir = CufileExtras::find(&scratch.root(), vars(scratch.0.join("nope"), tarball));
        assert!(
            matches!(&wrong_dir, Err(e) if e.contains("HIPFILE_KVIKIO_WHEELS")),
            "{wrong_dir:?}"
        );
        let wrong_file = CufileExtras::find(
            &scratch.root(),
            vars(scratch.0.join("elsewhere"), scratch.0.join("nope.tar.gz")),
        );
        assert!(
            matches!(&wrong_file, Err(e) if e.contains("HIPFILE_FIO_TARBALL")),
            "{wrong_file:?}"
        );
    }

    /// `--cufile` and `--cufile-figures` each run only their script, from where the bundle puts
    /// the clients, and every script run_clients.sh names is shipped.
    #[test]
    fn run_sh_runs_the_cufile_stages_from_the_shipped_clients() {
        let run_sh = include_str!("../bundle/run.sh");
        let (_, to) = CUFILE_CLIENTS;
        for (flag, script) in [
            ("--cufile)", "run_clients.sh"),
            ("--cufile-figures)", "figures.py"),
        ] {
            assert!(run_sh.contains(flag), "run.sh lacks {flag}");
            assert!(
                run_sh.contains(&format!("\"$BUNDLE/{to}/{script}\"")),
                "run.sh does not run {to}/{script}"
            );
        }
        let root = workspace::root();
        let clients = client_files(&root.join(CUFILE_CLIENTS.0)).expect("the clients folder");
        let names: Vec<String> = clients
            .iter()
            .map(|p| {
                p.file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        let runner = std::fs::read_to_string(root.join(CUFILE_CLIENTS.0).join("run_clients.sh"))
            .expect("run_clients.sh");
        for script in runner
            .split_whitespace()
            .map(|w| w.trim_matches('"'))
            .filter(|w| w.ends_with(".py") || w.ends_with(".sh") || w.ends_with(".fio"))
            .filter_map(|w| w.rsplit('/').next())
        {
            assert!(
                names.iter().any(|n| n == script),
                "{script} is not in the clients folder"
            );
        }
        assert!(names.iter().any(|n| n == "figures.py"));
    }

    #[test]
    fn ships_what_the_bundle_needs() {
        let root = workspace::root();
        for (file, _) in SHIPPED {
            assert!(root.join("xtask/bundle").join(file).is_file(), "{file}");
        }
        for (file, _) in C_HEADERS.iter().chain([&C_HARNESS]) {
            assert!(root.join(file).is_file(), "{file}");
        }
        assert!(!workspace::c_files(&root.join(C_SOURCES[0].0))
            .expect("readable")
            .is_empty());
    }
}
