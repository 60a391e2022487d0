//! Picking the platform a driver runs on.

use std::sync::Arc;

use crate::error::{HipError, HipResult};
use crate::runtime::{GpuRuntime, Platform};
use crate::sim::{SimConfig, SimRuntime};

/// The platform named by `HIPFILE_PLATFORM`, if it names one (`amd`, `nvidia`, `sim`,
/// case-insensitive). Any other value is an error, so a typo is not silently auto-detected.
pub fn platform_from_env() -> HipResult<Option<Platform>> {
    match std::env::var("HIPFILE_PLATFORM") {
        Err(_) => Ok(None),
        Ok(v) => parse_platform(&v).map(Some),
    }
}

/// Parse a platform name.
pub fn parse_platform(name: &str) -> HipResult<Platform> {
    match name.trim().to_ascii_lowercase().as_str() {
        "amd" => Ok(Platform::Amd),
        "nvidia" => Ok(Platform::Nvidia),
        "sim" => Ok(Platform::Sim),
        other => Err(HipError::NoPlatform(format!(
            "HIPFILE_PLATFORM={other:?} names no platform (amd, nvidia, sim)"
        ))),
    }
}

/// Open the runtime of `platform`.
pub fn open_platform(platform: Platform) -> HipResult<Arc<dyn GpuRuntime>> {
    match platform {
        Platform::Sim => Ok(Arc::new(SimRuntime::new(SimConfig::from_env()))),
        Platform::Amd => crate::amd::open(),
        Platform::Nvidia => crate::nvidia::open(),
    }
}

/// Open the platform the environment asks for, else the first one that reports a device: AMD,
/// then NVIDIA. The simulator is never picked automatically: a CPU-only machine has no device
/// unless the user asks for the sim.
pub fn open_default() -> HipResult<Arc<dyn GpuRuntime>> {
    if let Some(p) = platform_from_env()? {
        return open_platform(p);
    }
    let mut reasons = Vec::new();
    for p in [Platform::Amd, Platform::Nvidia] {
        match open_platform(p) {
            Ok(rt) => match rt.device_count() {
                Ok(n) if n > 0 => return Ok(rt),
                Ok(_) => reasons.push(format!("{p}: no device")),
                Err(e) => reasons.push(format!("{p}: {e}")),
            },
            Err(e) => reasons.push(format!("{p}: {e}")),
        }
    }
    Err(HipError::NoPlatform(reasons.join("; ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_names_parse_strictly() {
        assert_eq!(parse_platform("SIM").unwrap(), Platform::Sim);
        assert_eq!(parse_platform(" amd ").unwrap(), Platform::Amd);
        assert!(parse_platform("cuda").is_err());
    }
}
