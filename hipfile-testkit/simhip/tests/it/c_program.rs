//! A C program compiled with the system `cc` against the real HIP headers (Debian's
//! `libamdhip64-dev`) and linked with `-lamdhip64` runs on the simulated library.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{sim_library, target_dir};

const HOW_TO_GET_HEADERS: &str = "the HIP headers (hip/hip_runtime_api.h) were not found: set \
    HIPFILE_HIP_INCLUDE to a directory holding hip/hip_runtime_api.h, or install Debian's \
    libamdhip64-dev (`apt-get install libamdhip64-dev`, or without root: `apt-get download \
    libamdhip64-dev && dpkg -x libamdhip64-dev_*.deb <dir>` and HIPFILE_HIP_INCLUDE=<dir>/usr/include)";

fn has_headers(include: &Path) -> bool {
    include.join("hip").join("hip_runtime_api.h").is_file()
}

/// Fetch Debian's headers into `dir` with `apt-get download` + `dpkg -x`; errors say what failed.
fn fetch_headers(dir: &Path) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    let download = Command::new("apt-get")
        .args(["download", "libamdhip64-dev"])
        .current_dir(dir)
        .output()
        .map_err(|e| format!("apt-get: {e}"))?;
    if !download.status.success() {
        return Err(format!(
            "apt-get download libamdhip64-dev: {}",
            String::from_utf8_lossy(&download.stderr)
        ));
    }
    let deb = fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .ok_or("apt-get download left no .deb")?;
    let extract = Command::new("dpkg")
        .arg("-x")
        .arg(&deb)
        .arg(dir)
        .output()
        .map_err(|e| format!("dpkg: {e}"))?;
    if !extract.status.success() {
        return Err(format!(
            "dpkg -x: {}",
            String::from_utf8_lossy(&extract.stderr)
        ));
    }
    Ok(())
}

fn hip_include_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("HIPFILE_HIP_INCLUDE") {
        let dir = PathBuf::from(dir);
        return if has_headers(&dir) {
            Ok(dir)
        } else {
            Err(format!(
                "HIPFILE_HIP_INCLUDE={}: {HOW_TO_GET_HEADERS}",
                dir.display()
            ))
        };
    }
    let system = PathBuf::from("/usr/include");
    if has_headers(&system) {
        return Ok(system);
    }
    let fetched = target_dir().join("hip-headers");
    let include = fetched.join("usr").join("include");
    if !has_headers(&include) {
        let have_apt = Command::new("apt-get").arg("--version").output().is_ok();
        if !have_apt {
            return Err(format!("no apt-get to fetch them; {HOW_TO_GET_HEADERS}"));
        }
        fetch_headers(&fetched).map_err(|e| format!("{e}; {HOW_TO_GET_HEADERS}"))?;
    }
    if has_headers(&include) {
        Ok(include)
    } else {
        Err(HOW_TO_GET_HEADERS.to_string())
    }
}

/// The ROCm major version of the headers, which decides the `hipMemoryType` numbering the
/// program was compiled with and therefore the generation the library must imitate.
fn header_major_version(include: &Path) -> u32 {
    fs::read_to_string(include.join("hip").join("hip_version.h"))
        .ok()
        .and_then(|text| {
            text.lines().find_map(|l| {
                l.trim()
                    .strip_prefix("#define HIP_VERSION_MAJOR")
                    .and_then(|v| v.trim().parse().ok())
            })
        })
        .unwrap_or(6)
}

/// A folder where `-lamdhip64` finds the library and the loader finds its soname.
fn link_dir() -> PathBuf {
    let dir = target_dir().join("simhip-c");
    fs::create_dir_all(&dir).unwrap();
    for name in ["libamdhip64.so", "libamdhip64.so.6"] {
        let link = dir.join(name);
        let _ = fs::remove_file(&link);
        symlink(sim_library(), &link).unwrap();
    }
    dir
}

#[test]
fn a_c_program_built_against_the_hip_headers_runs_on_the_simulator() {
    let include = hip_include_dir().unwrap_or_else(|e| panic!("{e}"));
    let dir = link_dir();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/roundtrip.c");
    let exe = dir.join("roundtrip");
    let cc = Command::new("cc")
        .arg("-D__HIP_PLATFORM_AMD__")
        .arg("-std=c11")
        .arg("-Wall")
        .arg("-I")
        .arg(&include)
        .arg(&source)
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}", dir.display()))
        .arg("-lamdhip64")
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .output()
        .expect("the system C compiler `cc` runs");
    assert!(
        cc.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let rocm = if header_major_version(&include) >= 6 {
        "6"
    } else {
        "5"
    };
    let run = Command::new(&exe)
        .env("HIPFILE_SIM_ROCM", rocm)
        .env_remove("HIPFILE_SIM_DEVICES")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success() && stdout.contains("simhip C roundtrip ok"),
        "the C program failed ({}):\n{stdout}\n{}",
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    let readelf = Command::new("readelf").arg("-d").arg(&exe).output();
    if let Ok(out) = readelf {
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            !out.status.success() || text.contains("libamdhip64.so.6"),
            "the program should record the soname libamdhip64.so.6:\n{text}"
        );
    }
}
