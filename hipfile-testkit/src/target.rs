//! Which GPU the tests run on.
//!
//! Every test built on this kit runs on a fresh simulated GPU by default, so plain `cargo test`
//! needs no GPU. With `HIPFILE_GPU_TESTS=1` the same tests run on the machine's real GPU: the
//! platform `HIPFILE_PLATFORM` names (for example `nvidia`), else the first one found. That is how
//! the GPU bundle (`cargo xtask gpu-bundle`) proves the conformance suite on real device memory.

use std::sync::{Arc, OnceLock};

use hipfile_hip::sim::SimRuntime;
use hipfile_hip::GpuRuntime;

/// The runtime a test uses, and the simulator behind it when it is one (for leak counts that
/// only the simulator can give).
#[derive(Debug, Clone)]
pub struct RuntimeUnderTest {
    /// The runtime.
    pub runtime: Arc<dyn GpuRuntime>,
    /// The simulator, when the runtime is one.
    pub sim: Option<Arc<SimRuntime>>,
}

/// Whether `HIPFILE_GPU_TESTS=1` asks for the real GPU.
pub fn real_gpu_requested() -> bool {
    std::env::var("HIPFILE_GPU_TESTS").is_ok_and(|v| v.trim() == "1")
}

/// A fresh simulated GPU, or the process's real GPU runtime (opened once, then shared) when
/// [`real_gpu_requested`]. Failing to open the real one is an error, never a silent fall back to
/// the simulator, and so is a "real" platform that turns out to be the simulator
/// (`HIPFILE_PLATFORM=sim` with `HIPFILE_GPU_TESTS=1`). A test handed the real GPU is recorded
/// as such in the test ledger ([`crate::ledger`]).
pub fn runtime_under_test() -> Result<RuntimeUnderTest, String> {
    if !real_gpu_requested() {
        let sim = Arc::new(SimRuntime::default());
        return Ok(RuntimeUnderTest {
            runtime: sim.clone(),
            sim: Some(sim),
        });
    }
    static REAL: OnceLock<Result<Arc<dyn GpuRuntime>, String>> = OnceLock::new();
    let runtime = REAL
        .get_or_init(|| {
            let rt = hipfile_hip::open_default(&hipfile_hip::PlatformOptions::from_env())
                .map_err(|e| e.to_string())?;
            match rt.info().platform {
                hipfile_hip::Platform::Sim => Err(
                    "HIPFILE_GPU_TESTS=1 asks for a GPU, but the platform found is the simulator"
                        .to_string(),
                ),
                _ => Ok(rt),
            }
        })
        .clone()?;
    crate::ledger::record_gpu();
    Ok(RuntimeUnderTest { runtime, sim: None })
}

/// The runtime of a test of the C ABI, whose process-wide driver opens its platform from the
/// environment: the machine's GPU under `HIPFILE_GPU_TESTS=1` ([`runtime_under_test`]), else the
/// simulated HIP runtime library (`libamdhip64.so` of `hipfile-simhip`, a dev-dependency built
/// next to the test binary in `target/<profile>/deps`). For the latter it points the driver at
/// that library (`HIPFILE_PLATFORM=amd`, its path, every filesystem allowed on the direct path),
/// so the driver and the test share one simulated GPU: call it before the driver first reads
/// the environment.
pub fn c_abi_runtime() -> Result<Arc<dyn GpuRuntime>, String> {
    if real_gpu_requested() {
        return runtime_under_test().map(|r| r.runtime);
    }
    let exe = std::env::current_exe().map_err(|e| format!("the test binary's path: {e}"))?;
    let lib = exe
        .parent()
        .ok_or("the test binary lives in target/<profile>/deps")?
        .join("libamdhip64.so");
    if !lib.is_file() {
        return Err(format!(
            "{} is missing: hipfile-simhip (a dev-dependency) builds it",
            lib.display()
        ));
    }
    std::env::set_var("HIPFILE_PLATFORM", "amd");
    std::env::set_var(hipfile_hip::amd::LIBRARY_ENV, &lib);
    std::env::set_var("HIPFILE_UNSUPPORTED_FILE_SYSTEMS", "true");
    hipfile_hip::amd_open_library(&lib.to_string_lossy())
        .map_err(|e| format!("the simulated HIP library {}: {e:?}", lib.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_the_switch_the_tests_get_a_fresh_simulator() {
        if real_gpu_requested() {
            // Under HIPFILE_GPU_TESTS=1 the other arm is what runs; it is checked there.
            let rut = runtime_under_test().unwrap();
            assert!(rut.sim.is_none());
            assert_ne!(rut.runtime.info().platform, hipfile_hip::Platform::Sim);
            return;
        }
        let a = runtime_under_test().unwrap();
        let b = runtime_under_test().unwrap();
        assert!(a.sim.is_some() && b.sim.is_some());
        assert!(
            !Arc::ptr_eq(&a.runtime, &b.runtime),
            "each test gets its own"
        );
    }
}
