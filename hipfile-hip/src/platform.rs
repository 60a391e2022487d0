//! Opening the platform a driver runs on, as the options ([`crate::options`]) say.

use std::sync::Arc;

use crate::error::{HipError, HipResult, PassedOver};
use crate::options::PlatformOptions;
use crate::runtime::{GpuRuntime, Platform};
use crate::sim::SimRuntime;

/// Open the runtime of `platform`, configured by `options`.
pub fn open_platform(
    platform: Platform,
    options: &PlatformOptions,
) -> HipResult<Arc<dyn GpuRuntime>> {
    match platform {
        Platform::Sim => Ok(Arc::new(SimRuntime::new(options.sim))),
        Platform::Amd => crate::amd::open(options),
        Platform::Nvidia => crate::nvidia::open(options),
    }
}

/// Open the platform `options` name, else the first one that reports a device: AMD, then NVIDIA.
/// The simulator is never picked automatically: a CPU-only machine has no device unless the user
/// asks for the sim.
pub fn open_default(options: &PlatformOptions) -> HipResult<Arc<dyn GpuRuntime>> {
    if let Some(p) = options.platform()? {
        return open_platform(p, options);
    }
    let mut misses = Vec::new();
    for p in [Platform::Amd, Platform::Nvidia] {
        match open_platform(p, options) {
            Ok(rt) => match rt.device_count() {
                Ok(n) if n > 0 => return Ok(rt),
                Ok(_) => misses.push((p, PassedOver::NoDevice)),
                Err(e) => misses.push((p, PassedOver::Failed(e))),
            },
            Err(e) => misses.push((p, PassedOver::Failed(e))),
        }
    }
    Err(HipError::NotDetected(misses))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::{parse_platform, PlatformChoice};
    use crate::sim::{SimAbi, SimConfig};
    use std::collections::HashMap;

    fn options(vars: &[(&str, &str)]) -> PlatformOptions {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        PlatformOptions::from_lookup(|name| vars.get(name).cloned())
    }

    #[test]
    fn platform_names_parse_strictly() {
        assert_eq!(parse_platform("SIM").unwrap(), Platform::Sim);
        assert_eq!(parse_platform(" amd ").unwrap(), Platform::Amd);
        assert!(parse_platform("cuda").is_err());
    }

    #[test]
    fn nothing_set_is_the_defaults() {
        let opts = options(&[]);
        assert_eq!(opts, PlatformOptions::default());
        assert_eq!(opts.platform, PlatformChoice::Detect);
        assert_eq!(opts.platform().unwrap(), None);
        assert_eq!(opts.sim, SimConfig::default());
        assert!(!opts.cufile_force);
    }

    #[test]
    fn every_variable_is_read_into_its_field() {
        let opts = options(&[
            ("HIPFILE_PLATFORM", " NVIDIA "),
            ("HIPFILE_HIP_LIBRARY", "/opt/rocm/lib/libamdhip64.so"),
            (
                "HIPFILE_CUDART_LIBRARY",
                "/usr/local/cuda/lib64/libcudart.so.13",
            ),
            ("HIPFILE_CUDA_LIBRARY", "/usr/lib/libcuda.so.1"),
            ("HIPFILE_CUFILE_FORCE", "TRUE"),
            ("HIPFILE_SIM_DEVICES", " 3 "),
            ("HIPFILE_SIM_ROCM", "5"),
            ("HIPFILE_SIM_P2P", "False"),
            ("HIPFILE_SIM_MEMOPS", " 0 "),
        ]);
        assert_eq!(opts.platform, PlatformChoice::Named(Platform::Nvidia));
        assert_eq!(
            opts.hip_library.as_deref(),
            Some("/opt/rocm/lib/libamdhip64.so")
        );
        assert_eq!(
            opts.cudart_library.as_deref(),
            Some("/usr/local/cuda/lib64/libcudart.so.13")
        );
        assert_eq!(opts.cuda_library.as_deref(), Some("/usr/lib/libcuda.so.1"));
        assert!(opts.cufile_force);
        assert_eq!(
            opts.sim,
            SimConfig {
                devices: 3,
                abi: SimAbi::Rocm5,
                p2p: false,
                memops: false,
                own_contexts: true,
            }
        );
    }

    #[test]
    fn a_name_that_names_no_platform_is_refused_when_opening() {
        let opts = options(&[("HIPFILE_PLATFORM", "cuda")]);
        assert_eq!(opts.platform, PlatformChoice::Unknown("cuda".to_string()));
        assert!(matches!(opts.platform(), Err(HipError::NoPlatform(_))));
        assert!(matches!(
            open_default(&opts),
            Err(HipError::NoPlatform(why)) if why.contains("cuda")
        ));
    }

    #[test]
    fn values_outside_their_range_fall_back_to_the_defaults() {
        for (name, value) in [
            ("HIPFILE_SIM_DEVICES", "0"),
            ("HIPFILE_SIM_DEVICES", "65"),
            ("HIPFILE_SIM_DEVICES", "two"),
            ("HIPFILE_SIM_ROCM", "4"),
            ("HIPFILE_SIM_P2P", "no"),
            ("HIPFILE_SIM_MEMOPS", "off"),
        ] {
            assert_eq!(
                options(&[(name, value)]).sim,
                SimConfig::default(),
                "{name}={value}"
            );
        }
        assert!(!options(&[("HIPFILE_CUFILE_FORCE", "1")]).cufile_force);
        assert!(!options(&[("HIPFILE_CUFILE_FORCE", " true")]).cufile_force);
    }

    #[test]
    fn the_simulator_is_built_from_the_options_given() {
        let opts = options(&[("HIPFILE_PLATFORM", "sim"), ("HIPFILE_SIM_DEVICES", "3")]);
        let rt = open_default(&opts).unwrap();
        assert_eq!(rt.info().platform, Platform::Sim);
        assert_eq!(rt.device_count().unwrap(), 3);
        let no_p2p = options(&[("HIPFILE_SIM_P2P", "false")]);
        assert!(open_platform(Platform::Sim, &no_p2p)
            .unwrap()
            .p2p()
            .is_none());
    }

    #[test]
    fn detection_keeps_why_each_platform_was_passed_over() {
        let opts = options(&[
            ("HIPFILE_HIP_LIBRARY", "/nonexistent/hip/libamdhip64.so"),
            ("HIPFILE_CUDART_LIBRARY", "/nonexistent/cuda/libcudart.so"),
        ]);
        match open_default(&opts) {
            Err(HipError::NotDetected(misses)) => {
                let got: Vec<_> = misses
                    .iter()
                    .map(|(p, why)| match why {
                        PassedOver::Failed(HipError::Load { library, .. }) => {
                            (*p, library.as_str())
                        }
                        other => panic!("{p}: {other:?}"),
                    })
                    .collect();
                assert_eq!(
                    got,
                    [
                        (Platform::Amd, "/nonexistent/hip/libamdhip64.so"),
                        (Platform::Nvidia, "/nonexistent/cuda/libcudart.so")
                    ]
                );
            }
            other => panic!("{:?}", other.map(|rt| rt.info())),
        }
    }

    #[test]
    fn the_libraries_named_in_the_options_are_the_ones_loaded() {
        let opts = options(&[
            ("HIPFILE_HIP_LIBRARY", "/nonexistent/hip/libamdhip64.so"),
            ("HIPFILE_CUDART_LIBRARY", "/nonexistent/cuda/libcudart.so"),
        ]);
        match open_platform(Platform::Amd, &opts) {
            Err(HipError::Load { library, .. }) => {
                assert_eq!(library, "/nonexistent/hip/libamdhip64.so")
            }
            other => panic!("{:?}", other.map(|rt| rt.info())),
        }
        match open_platform(Platform::Nvidia, &opts) {
            Err(HipError::Load { library, .. }) => {
                assert_eq!(library, "/nonexistent/cuda/libcudart.so")
            }
            other => panic!("{:?}", other.map(|rt| rt.info())),
        }
    }
}
