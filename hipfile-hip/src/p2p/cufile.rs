//! NVIDIA GPUDirect Storage through `libcufile.so.0`, as a [`P2pDriver`].
//!
//! cuFile is only a direct path when the `nvidia-fs` kernel driver is loaded (it shows up as
//! `/proc/driver/nvidia-fs`). Without it cuFile runs in its own compat mode, a staged engine that
//! is slower than hipfile-rs's fallback, so [`cufile_driver`] offers nothing and
//! [`cufile_probe`] says why. Forcing it (`HIPFILE_CUFILE_FORCE=true`, read into
//! [`crate::PlatformOptions::cufile_force`]) skips the nvidia-fs check, for testing.
//!
//! The library is loaded at run time (never linked); every entry point is resolved at load and a
//! missing one refuses the driver. hipfile-rs's own `libcufile.so.0` (the crate hipfile-cufile,
//! which the loader returns for that name when it is on the library path) is refused too, before
//! any of its functions runs: it is no GPUDirect Storage, and opening its driver from inside its
//! own open would never return ([`CuFileDriver::load_from`]). `cuFileDriverOpen` runs once per process. Each descriptor is
//! registered with `cuFileHandleRegister` at its first transfer and kept in a cache keyed by the
//! descriptor and the identity (device, inode) of the file behind it, so a descriptor number
//! reused for another file gets a fresh handle; the stale one is deregistered then.
//!
//! Errors: `cuFileRead/Write` answer `-1` with `errno`, or the negated `CUfileOpError`. The cuFile
//! errors that mean "this device or platform cannot do it" (driver not initialised, platform, IO
//! or device not supported) become ENODEV, so the request fails over to the fallback; the others
//! EIO.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use super::P2pDriver;

pub use crate::ffi::cuda::{CuFileDriver, CUFILE_LIBRARY};

/// `true` offers cuFile even without nvidia-fs (testing only: it is then a staged engine).
pub const FORCE_ENV: &str = "HIPFILE_CUFILE_FORCE";

/// Present when the nvidia-fs kernel driver is loaded.
pub const NVIDIA_FS_PROC: &str = "/proc/driver/nvidia-fs";

/// The cuFile driver when this machine offers GPUDirect Storage (or `force` asks for it without
/// nvidia-fs), else `None`. Loaded and opened once per process; later calls share it.
pub fn cufile_driver(force: bool) -> Option<Arc<dyn P2pDriver>> {
    let driver: Arc<dyn P2pDriver> = offered(force).ok()?.clone();
    Some(driver)
}

/// `Ok(())` when [`cufile_driver`] offers a driver for the same `force`, else why not (for
/// `hipfile check`).
pub fn cufile_probe(force: bool) -> Result<(), String> {
    offered(force).map(|_| ()).map_err(Clone::clone)
}

/// The driver offered, or why none is: nvidia-fs is absent and not forced past, or cuFile did not
/// load. Neither answer changes during the life of the process, so both are asked once.
fn offered(force: bool) -> Result<&'static Arc<CuFileDriver>, &'static String> {
    static NVIDIA_FS: OnceLock<bool> = OnceLock::new();
    static ABSENT: OnceLock<String> = OnceLock::new();
    static DRIVER: OnceLock<Result<Arc<CuFileDriver>, String>> = OnceLock::new();
    let nvidia_fs = *NVIDIA_FS.get_or_init(|| Path::new(NVIDIA_FS_PROC).exists());
    if !worth_offering(force, nvidia_fs) {
        return Err(ABSENT.get_or_init(|| {
            format!(
                "{NVIDIA_FS_PROC} is absent: without the nvidia-fs driver cuFile only stages \
                 through host memory ({FORCE_ENV}=true offers it anyway)"
            )
        }));
    }
    DRIVER
        .get_or_init(|| CuFileDriver::load().map(Arc::new))
        .as_ref()
}

/// Whether cuFile is worth offering: with the nvidia-fs driver it is a direct path; without, only
/// when forced.
fn worth_offering(force: bool, nvidia_fs: bool) -> bool {
    force || nvidia_fs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_gives_a_reason_when_nothing_is_offered() {
        match (cufile_probe(false), cufile_driver(false)) {
            (Ok(()), Some(d)) => assert_eq!(d.name(), "cufile"),
            (Err(why), None) => assert!(!why.is_empty()),
            (probe, driver) => panic!("probe {probe:?} disagrees with driver {driver:?}"),
        }
    }

    #[test]
    fn only_nvidia_fs_or_forcing_offers_cufile() {
        assert!(worth_offering(false, true));
        assert!(worth_offering(true, false));
        assert!(!worth_offering(false, false));
    }
}
