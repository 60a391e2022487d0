//! `cargo xtask python`: the `hipfile` Python package, built and tested on the sim.
//!
//! A virtual environment under the target directory (`target/python/venv`, made with
//! `python3 -m venv` and kept between runs) gets the pinned [`TOOLS`] from PyPI; maturin builds
//! the wheel of `hipfile-py/` (dev profile: CI time matters more than speed on the sim, and the
//! dev profile shares the workspace's build artifacts) into `target/python/wheels/`; the wheel is
//! installed into the venv, and pytest runs `hipfile-py/tests` with `HIPFILE_PLATFORM=sim`. The
//! tests include a run of the benchmark script at 64 MiB, so it cannot rot unseen.
//!
//! [`build_wheel`] also serves `gpu-bundle`, which ships a release wheel.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::workspace::{self, Workspace};

/// What the venv gets from PyPI, pinned. Maturin builds the wheel; pytest and NumPy run the
/// tests (NumPy is the host-array library the tests use).
pub const TOOLS: &[&str] = &["maturin==1.7.4", "pytest==8.3.4", "numpy==2.1.3"];

/// The crate that holds the package.
pub const PACKAGE_DIR: &str = "hipfile-py";

/// `cargo xtask python`.
pub fn run() -> Result<(), String> {
    let ws = Workspace::load()?;
    let root = workspace::root();
    let base = ws.target_dir.join("python");
    let python = venv(&base.join("venv"))?;
    let wheel = build_wheel(&python, &base.join("wheels"), "dev")?;
    pip_install(
        &python,
        &["--force-reinstall", "--no-deps"],
        &[wheel.as_os_str()],
    )?;
    run_command(
        Command::new(&python)
            .args(["-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"])
            .current_dir(root.join(PACKAGE_DIR))
            .env("HIPFILE_PLATFORM", "sim"),
    )
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
    let status = command
        .status()
        .map_err(|e| format!("cannot run {shown}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{shown} failed ({status})"))
    }
}
