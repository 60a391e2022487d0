//! Finding and opening the library under test.

use std::path::PathBuf;
use std::sync::Arc;

use hipfile_hip::amd::AmdRuntime;
use hipfile_hip::sim::SimConfig;
use hipfile_hip::{GpuRuntime, PlatformOptions};

/// `target/<profile>`: the test binary is `target/<profile>/deps/it-<hash>`.
pub fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary knows its own path");
    exe.parent()
        .and_then(|deps| deps.parent())
        .expect("the test binary lives in target/<profile>/deps")
        .to_path_buf()
}

/// The built `libamdhip64.so`. `cargo test` writes the fresh cdylib into `deps/` (next to this
/// binary) and only `cargo build` copies it up to `target/<profile>/`, where it may be stale; so
/// `deps/` comes first.
pub fn sim_library() -> PathBuf {
    let dir = target_dir();
    [
        dir.join("deps").join("libamdhip64.so"),
        dir.join("libamdhip64.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .unwrap_or_else(|| {
        panic!(
            "libamdhip64.so not found in {}: build it with `cargo build -p hipfile-simhip`",
            dir.display()
        )
    })
}

pub fn sim_library_str() -> String {
    sim_library().to_string_lossy().into_owned()
}

/// The configuration the library in this process was built from (the same environment).
pub fn expected_config() -> SimConfig {
    PlatformOptions::from_env().sim
}

/// The AMD platform over the library under test: through `HIPFILE_HIP_LIBRARY` when the
/// environment names it (the child process), else through the explicit path.
pub fn amd() -> AmdRuntime {
    let options = PlatformOptions::from_env();
    match options.hip_library {
        Some(_) => AmdRuntime::open(&options).expect("HIPFILE_HIP_LIBRARY loads"),
        None => AmdRuntime::load(&sim_library_str()).expect("the simulated HIP library loads"),
    }
}

/// [`amd`] as the trait object the rest of hipfile-rs sees.
pub fn runtime() -> Arc<dyn GpuRuntime> {
    let options = PlatformOptions::from_env();
    match options.hip_library {
        Some(_) => hipfile_hip::amd::open(&options).expect("HIPFILE_HIP_LIBRARY loads"),
        None => hipfile_hip::amd_open_library(&sim_library_str())
            .expect("the simulated HIP library loads"),
    }
}
