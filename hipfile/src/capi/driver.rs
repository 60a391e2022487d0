//! The driver: opening and closing it, its use count and version, and its properties, read and
//! changed while it is open (`hipFileDriverSet*`).

use std::ffi::{c_int, c_uint};

use hipfile_core::{IoPath, Settings};

use super::conventions::{driver, guarded, guarded_pair, result_pair};
use super::types::*;

/// Open the driver or add a reference.
#[no_mangle]
pub extern "C" fn hipFileDriverOpen() -> hipFileError_t {
    guarded_pair(|| result_pair(driver().open()))
}

/// Drop a reference to the driver.
#[no_mangle]
pub extern "C" fn hipFileDriverClose() -> hipFileError_t {
    guarded_pair(|| result_pair(driver().close()))
}

/// References held on the driver.
#[no_mangle]
pub extern "C" fn hipFileUseCount() -> i64 {
    guarded(-1, || driver().use_count() as i64)
}

/// The library version. Any of the three pointers may be NULL: that part is not written (as
/// upstream).
#[no_mangle]
pub unsafe extern "C" fn hipFileGetVersion(
    major: *mut c_uint,
    minor: *mut c_uint,
    patch: *mut c_uint,
) -> hipFileError_t {
    guarded_pair(|| {
        for (out, value) in [
            (major, HIPFILE_VERSION_MAJOR),
            (minor, HIPFILE_VERSION_MINOR),
            (patch, HIPFILE_VERSION_PATCH),
        ] {
            if !out.is_null() {
                // SAFETY: a non-null pointer to the caller's integer.
                unsafe { out.write(value) };
            }
        }
        hipFileError_t::SUCCESS
    })
}

fn bit(flag: c_int) -> c_uint {
    1u32 << flag
}

/// Whether the open process-wide driver serves requests by direct IO: a backend of the direct
/// path is registered and the platform offers a P2P driver. A closed driver has no platform yet:
/// false. (What `driver_status_flags` reports; the Python binding asks it too.)
pub fn direct_io_available() -> bool {
    driver().session().is_some_and(|s| {
        s.runtime().p2p().is_some()
            && s.registry()
                .paths()
                .iter()
                .any(|(_, path)| *path == IoPath::Direct)
    })
}

/// The driver's properties: the settings in force (the open driver's, else the staged ones).
/// `direct_io` says whether the fastpath can serve local storage (NVMe and other block devices
/// under ext4, xfs or raw), which is what `driver_status_flags` reports.
pub fn driver_props(s: &Settings, compat_allowed: bool, direct_io: bool) -> hipFileDriverProps_t {
    let mut control = 0;
    if s.poll_mode {
        control |= bit(hipFileUsePollMode);
    }
    if compat_allowed {
        control |= bit(hipFileAllowCompatMode);
    }
    hipFileDriverProps_t {
        nvfs: hipFileDriverProps_nvfs_t {
            major_version: HIPFILE_VERSION_MAJOR,
            minor_version: HIPFILE_VERSION_MINOR,
            poll_thresh_size: s.poll_thresh_size_kb,
            max_direct_io_size: s.max_direct_io_size_kb,
            driver_status_flags: if direct_io {
                bit(hipFileNVMeSupported)
            } else {
                0
            },
            driver_control_flags: control,
        },
        // Batch and stream IO are; cuFile's parallel IO switch is not in this build.
        feature_flags: (1 << hipFileBatchIOSupported) | (1 << hipFileStreamsSupported),
        max_device_cache_size: s.max_device_cache_size_kb,
        per_buffer_cache_size: s.per_buffer_cache_size_kb,
        max_device_pinned_mem_size: s.max_pinned_mem_size_kb,
        max_batch_io_count: c_uint::try_from(s.max_batch_io_size).unwrap_or(c_uint::MAX),
        max_batch_io_timeout_msecs: c_uint::try_from(s.batch_io_timeout_ms).unwrap_or(c_uint::MAX),
    }
}

/// Fill `props` with the driver's properties.
#[no_mangle]
pub unsafe extern "C" fn hipFileDriverGetProperties(
    props: *mut hipFileDriverProps_t,
) -> hipFileError_t {
    guarded_pair(|| {
        if props.is_null() {
            return hipFileError_t::op(hipFileInvalidValue);
        }
        let settings = driver().settings();
        let compat = settings.compat_mode(&hipfile_core::EnvConfig::cached());
        let direct_io = direct_io_available();
        // SAFETY: `props` is non-null and points to the caller's struct.
        unsafe { props.write(driver_props(&settings, compat.allowed, direct_io)) };
        hipFileError_t::SUCCESS
    })
}

fn live(change: impl FnOnce(&mut Settings)) -> hipFileError_t {
    result_pair(driver().update_live_settings(change))
}

fn kib(value: usize) -> u64 {
    value as u64
}

/// Poll mode and threshold (KiB) of the open driver.
#[no_mangle]
pub extern "C" fn hipFileDriverSetPollMode(
    poll: bool,
    poll_threshold_size: usize,
) -> hipFileError_t {
    guarded_pair(|| {
        live(|s| {
            s.poll_mode = poll;
            s.poll_thresh_size_kb = kib(poll_threshold_size);
        })
    })
}

/// Largest single transfer (KiB) of the open driver.
#[no_mangle]
pub extern "C" fn hipFileDriverSetMaxDirectIOSize(max_direct_io_size: usize) -> hipFileError_t {
    guarded_pair(|| {
        if max_direct_io_size == 0 {
            return hipFileError_t::op(hipFileInvalidValue);
        }
        live(|s| s.max_direct_io_size_kb = kib(max_direct_io_size))
    })
}

/// GPU bounce-buffer budget (KiB) of the open driver.
#[no_mangle]
pub extern "C" fn hipFileDriverSetMaxCacheSize(max_cache_size: usize) -> hipFileError_t {
    guarded_pair(|| live(|s| s.max_device_cache_size_kb = kib(max_cache_size)))
}

/// Pinned memory bound (KiB) of the open driver.
#[no_mangle]
pub extern "C" fn hipFileDriverSetMaxPinnedMemSize(max_pinned_size: usize) -> hipFileError_t {
    guarded_pair(|| {
        if max_pinned_size == 0 {
            return hipFileError_t::op(hipFileInvalidValue);
        }
        live(|s| s.max_pinned_mem_size_kb = kib(max_pinned_size))
    })
}
