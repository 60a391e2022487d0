//! How a driver is built ([`DriverOptions`]): where its GPU runtime, file IO, backends and
//! settings come from.

use std::sync::Arc;

use hipfile_hip::GpuRuntime;

use crate::config::{EnvConfig, Environment, Settings};
use crate::cufile_config::CufileJsonSource;
use crate::error::{Error, ErrorKind, Result};
use crate::io::{FileIo, PosixIo};
use crate::registry::RegistryBuilder;

/// Where the GPU runtime comes from when the driver opens.
pub type RuntimeSource = Arc<dyn Fn() -> Result<Arc<dyn GpuRuntime>> + Send + Sync>;

/// How a driver is built. The facade builds the process-wide driver from the defaults, which come
/// from the process environment ([`Environment::process`]); tests build their own with a
/// simulated runtime, scripted IO and an explicit registry, or from an [`Environment`] read
/// through a lookup closure ([`DriverOptions::from_environment`]).
#[derive(Clone)]
pub struct DriverOptions {
    /// Opens the GPU runtime (default: the platform the environment's [`Environment::platform`]
    /// names, else auto-detected).
    pub runtime: RuntimeSource,
    /// File IO primitives (default: pread/pwrite).
    pub io: Arc<dyn FileIo>,
    /// Environment switches (default: the environment's [`Environment::switches`]).
    pub env: EnvConfig,
    /// The backends (default: what `inventory` collected).
    pub backends: Option<RegistryBuilder>,
    /// Backend selection and order (default: the environment's `HIPFILE_BACKENDS`).
    pub selection: Option<String>,
    /// The settings a new driver starts from, before the parameter API changes them (default:
    /// the environment's [`Environment::settings`], so the `HIPFILE_*` engine knobs apply).
    pub settings: Settings,
    /// cuFile's configuration file, read when the driver is made and applied between
    /// `settings` and the environment ([`crate::cufile_config`]); a file that cannot be used
    /// fails every open. Default `None`: the hipFile door reads no such file, as upstream
    /// hipFile; the cuFile door sets it ([`DriverOptions::with_cufile_json`]).
    pub cufile_json: Option<CufileJsonSource>,
}

impl std::fmt::Debug for DriverOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverOptions")
            .field("io", &self.io)
            .field("env", &self.env)
            .field("backends", &self.backends)
            .field("selection", &self.selection)
            .field("settings", &self.settings)
            .field("cufile_json", &self.cufile_json)
            .finish_non_exhaustive()
    }
}

impl Default for DriverOptions {
    /// [`DriverOptions::from_environment`] of the process environment.
    fn default() -> Self {
        DriverOptions::from_environment(Environment::process())
    }
}

impl DriverOptions {
    /// Everything `environment` says: its platform opens the runtime, its switches, backend
    /// selection and settings are the driver's; IO is pread/pwrite and the backends are what
    /// `inventory` collected.
    pub fn from_environment(environment: &Environment) -> Self {
        let platform = environment.platform.clone();
        DriverOptions {
            runtime: Arc::new(move || {
                hipfile_hip::open_default(&platform).map_err(|e| {
                    let err = Error::hip(&e, "no GPU platform");
                    Error::new(ErrorKind::DeviceNotFound, err.context().to_string())
                })
            }),
            io: Arc::new(PosixIo),
            env: environment.switches,
            backends: None,
            selection: environment.backends.clone(),
            settings: environment.settings.clone(),
            cufile_json: None,
        }
    }

    /// These options reading cuFile's configuration file where cuFile finds it under
    /// `environment` (`CUFILE_ENV_PATH_JSON`, else `/etc/cufile.json`), under the variables of
    /// `environment` that set the same things: what the cuFile door builds its driver with.
    pub fn with_cufile_json(self, environment: &Environment) -> Self {
        DriverOptions {
            cufile_json: Some(CufileJsonSource::from_environment(environment)),
            ..self
        }
    }

    /// Defaults, with a fixed runtime.
    pub fn with_runtime(runtime: Arc<dyn GpuRuntime>) -> Self {
        DriverOptions {
            runtime: Arc::new(move || Ok(Arc::clone(&runtime))),
            ..DriverOptions::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipfile_hip::Platform;

    #[test]
    fn driver_options_take_every_default_from_one_environment() {
        let pairs = [
            ("HIPFILE_PLATFORM", "sim"),
            ("HIPFILE_SIM_DEVICES", "3"),
            ("HIPFILE_BACKENDS", " b ,a"),
            ("HIPFILE_STATS_LEVEL", "true"),
            ("HIPFILE_IO_THREADS", "3"),
        ];
        let environment = Environment::from_lookup(|name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        });
        let options = DriverOptions::from_environment(&environment);
        assert_eq!(options.selection.as_deref(), Some(" b ,a"));
        assert_eq!(options.env.stats_level, Some(1));
        assert_eq!(options.settings.max_io_threads, 3);
        assert!(options.backends.is_none());
        let runtime = (options.runtime)().expect("the simulated platform opens");
        assert_eq!(runtime.info().platform, Platform::Sim);
        assert_eq!(runtime.device_count().unwrap(), 3);

        let unknown = Environment::from_lookup(|name| {
            (name == "HIPFILE_PLATFORM").then(|| "quantum".to_string())
        });
        let e = (DriverOptions::from_environment(&unknown).runtime)().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::DeviceNotFound);
        assert!(e.context().contains("quantum"), "{e}");
    }
}
