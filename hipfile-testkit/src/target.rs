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
/// the simulator.
pub fn runtime_under_test() -> Result<RuntimeUnderTest, String> {
    if !real_gpu_requested() {
        let sim = Arc::new(SimRuntime::default());
        return Ok(RuntimeUnderTest {
            runtime: sim.clone(),
            sim: Some(sim),
        });
    }
    static REAL: OnceLock<Result<Arc<dyn GpuRuntime>, String>> = OnceLock::new();
    REAL.get_or_init(|| hipfile_hip::open_default().map_err(|e| e.to_string()))
        .clone()
        .map(|runtime| RuntimeUnderTest { runtime, sim: None })
}
