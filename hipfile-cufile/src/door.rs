//! The cuFile door: its process-wide core driver and the answers in which cuFile differs from
//! hipFile.

use std::ffi::c_int;
use std::sync::{Arc, OnceLock};

use hipfile::capi::{DescriptorUse, Door};
use hipfile::{DriverOptions, Settings};

use crate::types::*;

/// The door of `libcufile.so.0`, over [`process_driver`].
#[derive(Debug)]
pub enum CuFile {}

impl Door for CuFile {
    type Pair = CUfileError_t;

    fn driver() -> &'static hipfile_core::Driver {
        process_driver()
    }

    /// cuFile reports a CUDA failure inside `cuFileRead`/`cuFileWrite` (and in the async result)
    /// as `-CU_FILE_CUDA_DRIVER_ERROR`: its IO results have no room for the `CUresult`.
    fn gpu_io_failure(_code: c_int) -> isize {
        -(CU_FILE_CUDA_DRIVER_ERROR as isize)
    }

    /// cuFile reads `handle.fd` for descriptors and for userspace filesystems (whose `fs_ops`
    /// callbacks it does not call: a registration of that type goes the descriptor's way, as
    /// NVIDIA's library is seen to do); a Windows handle is not supported on Linux.
    fn descriptor_use(kind: c_int) -> DescriptorUse {
        match kind {
            CU_FILE_HANDLE_TYPE_OPAQUE_FD | CU_FILE_HANDLE_TYPE_USERSPACE_FS => DescriptorUse::Fd,
            CU_FILE_HANDLE_TYPE_OPAQUE_WIN32 => DescriptorUse::Refuse(CU_FILE_IO_NOT_SUPPORTED),
            _ => DescriptorUse::Refuse(CU_FILE_INVALID_VALUE),
        }
    }

    /// cuFile's clients read and write whole objects in one call (`torch.cuda.gds` loads a
    /// tensor's storage with one `cuFileRead` and checks only for a negative answer), so a
    /// request larger than `MAX_RW_COUNT` is not cut short where `pread` would be: it moves its
    /// whole size, short only at the end of the file.
    const WHOLE_REQUESTS: bool = true;
}

/// The process-wide core driver behind every cuFile entry point: its own, not the one of
/// `libhipfile.so` (a process may load both; each library counts its own opens).
pub fn process_driver() -> &'static Arc<hipfile_core::Driver> {
    static DRIVER: OnceLock<Arc<hipfile_core::Driver>> = OnceLock::new();
    DRIVER.get_or_init(|| Arc::new(hipfile_core::Driver::new(driver_options())))
}

/// The options the cuFile door's driver is built with: hipfile's backends, the settings of
/// [`door_settings`], and cuFile's JSON configuration file (`CUFILE_ENV_PATH_JSON`, else
/// `/etc/cufile.json`), whose keys the core applies over these settings and under the
/// `HIPFILE_*` environment (`DriverOptions::with_cufile_json`); a file it cannot use makes every
/// open fail with `CU_FILE_DRIVER_INVALID_PROPS`.
pub fn driver_options() -> DriverOptions {
    let base = hipfile::default_options();
    DriverOptions {
        settings: door_settings(base.settings.clone()),
        ..base
    }
    .with_cufile_json(hipfile_core::Environment::process())
}

/// cuFile's defaults over `base`: host memory may be registered and used for IO, as cuFile
/// programs (torch.cuda.gds, KvikIO's host paths) expect of `libcufile.so.0`.
pub fn door_settings(base: Settings) -> Settings {
    Settings {
        allow_system_memory: true,
        ..base
    }
}
