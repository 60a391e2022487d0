//! Finding and opening the library under test.

use std::path::PathBuf;
use std::sync::Arc;

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

/// The built `libsimcuda.so`. `cargo test` writes the fresh cdylib into `deps/` (next to this
/// binary) and only `cargo build` copies it up to `target/<profile>/`, where it may be stale; so
/// `deps/` comes first.
pub fn sim_library() -> PathBuf {
    let dir = target_dir();
    [
        dir.join("deps").join("libsimcuda.so"),
        dir.join("libsimcuda.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
    .unwrap_or_else(|| {
        panic!(
            "libsimcuda.so not found in {}: build it with `cargo build -p hipfile-simcuda`",
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

/// The NVIDIA platform over the library under test: through `HIPFILE_CUDART_LIBRARY` and
/// `HIPFILE_CUDA_LIBRARY` when the environment names them (the child process), else through
/// explicit paths.
pub fn runtime() -> Arc<dyn GpuRuntime> {
    let options = PlatformOptions::from_env();
    if options.cudart_library.is_some() && options.cuda_library.is_some() {
        return hipfile_hip::open_platform(hipfile_hip::Platform::Nvidia, &options)
            .expect("the libraries the environment names load");
    }
    let path = sim_library_str();
    hipfile_hip::nvidia_open_libraries(&path, &path).expect("the simulated CUDA library loads")
}
