//! The options that pick and configure a platform, as plain data, and the names of the
//! environment variables they are read from: the one module that knows them
//! ([`PlatformOptions::from_env`]), so the platforms take options and never read the environment.

use crate::error::{HipError, HipResult};
use crate::info::Platform;
use crate::sim::SimConfig;

/// The environment variable naming the HIP runtime library to load instead of the defaults
/// (also `hipfile_hip::amd::LIBRARY_ENV`).
pub const HIP_LIBRARY_ENV: &str = "HIPFILE_HIP_LIBRARY";
/// The environment variable naming the CUDA runtime library to load instead of the defaults
/// (also `hipfile_hip::nvidia::RUNTIME_LIBRARY_ENV`).
pub const CUDART_LIBRARY_ENV: &str = "HIPFILE_CUDART_LIBRARY";
/// The environment variable naming the CUDA driver library to load instead of the default
/// (also `hipfile_hip::nvidia::DRIVER_LIBRARY_ENV`).
pub const CUDA_LIBRARY_ENV: &str = "HIPFILE_CUDA_LIBRARY";

/// The environment variable naming the platform (`amd`, `nvidia`, `sim`).
pub const PLATFORM_ENV: &str = "HIPFILE_PLATFORM";

/// Which platform to open.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PlatformChoice {
    /// The first platform that reports a device: AMD, then NVIDIA (never the simulator).
    #[default]
    Detect,
    /// This platform.
    Named(Platform),
    /// A name that names no platform. Opening refuses it, so a typo is never silently detected
    /// around.
    Unknown(String),
}

/// Everything hipfile-hip takes from the environment, as plain data: which platform to open,
/// which libraries to load for it, whether cuFile is offered without nvidia-fs, and how the
/// simulated GPU is built. [`PlatformOptions::from_env`] is the one place that reads the process
/// environment; everything that opens a platform takes the options it is given.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlatformOptions {
    /// `HIPFILE_PLATFORM`: `amd`, `nvidia` or `sim` (case-insensitive, surrounding blanks ignored).
    pub platform: PlatformChoice,
    /// `HIPFILE_HIP_LIBRARY`: the HIP runtime to load instead of
    /// [`crate::amd::DEFAULT_LIBRARIES`].
    pub hip_library: Option<String>,
    /// `HIPFILE_CUDART_LIBRARY`: the CUDA runtime to load instead of
    /// [`crate::nvidia::DEFAULT_RUNTIME_LIBRARIES`].
    pub cudart_library: Option<String>,
    /// `HIPFILE_CUDA_LIBRARY`: the CUDA driver to load instead of
    /// [`crate::nvidia::DEFAULT_DRIVER_LIBRARY`].
    pub cuda_library: Option<String>,
    /// `HIPFILE_CUFILE_FORCE=true`: offer cuFile without the nvidia-fs driver (testing only: it
    /// is then a staged engine). See [`crate::p2p::cufile`].
    pub cufile_force: bool,
    /// `HIPFILE_SIM_DEVICES`, `HIPFILE_SIM_ROCM`, `HIPFILE_SIM_P2P` and `HIPFILE_SIM_MEMOPS`:
    /// the simulated GPU (see [`SimConfig::from_lookup`]).
    pub sim: SimConfig,
}

impl PlatformOptions {
    /// The options that `lookup` (a variable's name to its value, `None` when unset) gives.
    /// Parsing never fails: a platform name that names none is kept as
    /// [`PlatformChoice::Unknown`] and refused when a platform is opened; unparseable simulator
    /// settings fall back to their defaults.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let platform = match lookup(PLATFORM_ENV) {
            None => PlatformChoice::Detect,
            Some(name) => match parse_platform(&name) {
                Ok(p) => PlatformChoice::Named(p),
                Err(_) => PlatformChoice::Unknown(name),
            },
        };
        PlatformOptions {
            platform,
            hip_library: lookup(HIP_LIBRARY_ENV),
            cudart_library: lookup(CUDART_LIBRARY_ENV),
            cuda_library: lookup(CUDA_LIBRARY_ENV),
            cufile_force: lookup(crate::p2p::cufile::FORCE_ENV)
                .is_some_and(|v| v.eq_ignore_ascii_case("true")),
            sim: SimConfig::from_lookup(&lookup),
        }
    }

    /// The options the process environment gives (a value that is not UTF-8 is read lossily).
    pub fn from_env() -> Self {
        Self::from_lookup(|name| {
            std::env::var_os(name).map(|value| value.to_string_lossy().into_owned())
        })
    }

    /// The platform asked for, `None` to detect one; an error for a name that names none.
    pub fn platform(&self) -> HipResult<Option<Platform>> {
        match &self.platform {
            PlatformChoice::Detect => Ok(None),
            PlatformChoice::Named(p) => Ok(Some(*p)),
            PlatformChoice::Unknown(name) => parse_platform(name).map(Some),
        }
    }
}

/// Parse a platform name.
pub fn parse_platform(name: &str) -> HipResult<Platform> {
    match name.trim().to_ascii_lowercase().as_str() {
        "amd" => Ok(Platform::Amd),
        "nvidia" => Ok(Platform::Nvidia),
        "sim" => Ok(Platform::Sim),
        other => Err(HipError::NoPlatform(format!(
            "{PLATFORM_ENV}={other:?} names no platform (amd, nvidia, sim)"
        ))),
    }
}
