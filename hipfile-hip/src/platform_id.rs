//! Which GPU platform a runtime drives: the one name every layer uses (errors report which
//! platforms were passed over, options pick one, runtimes say which they are), so it depends on
//! nothing else of the crate.

use std::fmt;

/// Which GPU platform a runtime drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Platform {
    /// AMD GPUs through the HIP runtime (`libamdhip64.so`).
    Amd,
    /// NVIDIA GPUs through the CUDA runtime, with HIP semantics.
    Nvidia,
    /// The simulated GPU in host memory.
    Sim,
}

impl Platform {
    /// The name used by `HIPFILE_PLATFORM` and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Platform::Amd => "amd",
            Platform::Nvidia => "nvidia",
            Platform::Sim => "sim",
        }
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
