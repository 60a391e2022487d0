//! The driver: opening and closing it, its use count and version, and its properties, read and
//! changed while it is open (`hipFileDriverSet*`).

use std::ffi::{c_int, c_uint};

use hipfile_core::{IoPath, Settings};

use super::conventions::{guarded, guarded_pair, result_pair, Door, HipFile, StatusPair};
use super::types::*;

/// Open door `D`'s driver or add a reference.
pub fn driver_open<D: Door>() -> D::Pair {
    result_pair(D::driver().open())
}

/// Drop a reference to door `D`'s driver.
pub fn driver_close<D: Door>() -> D::Pair {
    result_pair(D::driver().close())
}

/// References held on door `D`'s driver.
pub fn use_count<D: Door>() -> i64 {
    D::driver().use_count() as i64
}

/// Open the driver or add a reference.
#[no_mangle]
pub extern "C" fn hipFileDriverOpen() -> hipFileError_t {
    guarded_pair(driver_open::<HipFile>)
}

/// Drop a reference to the driver.
#[no_mangle]
pub extern "C" fn hipFileDriverClose() -> hipFileError_t {
    guarded_pair(driver_close::<HipFile>)
}

/// References held on the driver.
#[no_mangle]
pub extern "C" fn hipFileUseCount() -> i64 {
    guarded(-1, use_count::<HipFile>)
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
    door_direct_io_available::<HipFile>()
}

/// [`direct_io_available`] of door `D`'s driver.
pub fn door_direct_io_available<D: Door>() -> bool {
    D::driver().session().is_some_and(|s| {
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

/// Door `D`'s driver properties as hipFile lays them out; a door with another layout converts
/// from these.
pub fn door_driver_props<D: Door>() -> hipFileDriverProps_t {
    let settings = D::driver().settings();
    let compat = settings.compat_mode(&hipfile_core::EnvConfig::cached());
    driver_props(&settings, compat.allowed, door_direct_io_available::<D>())
}

/// Fill `props` with the driver's properties.
#[no_mangle]
pub unsafe extern "C" fn hipFileDriverGetProperties(
    props: *mut hipFileDriverProps_t,
) -> hipFileError_t {
    // SAFETY: the C caller passes NULL or its own struct.
    guarded_pair(|| unsafe { write_out(props, door_driver_props::<HipFile>()) })
}

/// Write `value` to the caller's `out`: `InvalidValue` for NULL.
///
/// # Safety
/// `out` is NULL or valid for writing a `T`.
pub unsafe fn write_out<T, P: StatusPair>(out: *mut T, value: T) -> P {
    if out.is_null() {
        return P::op(hipFileInvalidValue);
    }
    // SAFETY: non-null, and by the caller's contract valid for writing a `T`.
    unsafe { out.write(value) };
    P::SUCCESS
}

fn live<D: Door>(change: impl FnOnce(&mut Settings)) -> D::Pair {
    result_pair(D::driver().update_live_settings(change))
}

fn kib(value: usize) -> u64 {
    value as u64
}

/// Poll mode and threshold (KiB) of door `D`'s open driver.
pub fn set_poll_mode<D: Door>(poll: bool, poll_threshold_size: usize) -> D::Pair {
    live::<D>(|s| {
        s.poll_mode = poll;
        s.poll_thresh_size_kb = kib(poll_threshold_size);
    })
}

/// Largest single transfer (KiB) of door `D`'s open driver; 0 is `InvalidValue`.
pub fn set_max_direct_io_size<D: Door>(max_direct_io_size: usize) -> D::Pair {
    if max_direct_io_size == 0 {
        return D::Pair::op(hipFileInvalidValue);
    }
    live::<D>(|s| s.max_direct_io_size_kb = kib(max_direct_io_size))
}

/// GPU bounce-buffer budget (KiB) of door `D`'s open driver.
pub fn set_max_cache_size<D: Door>(max_cache_size: usize) -> D::Pair {
    live::<D>(|s| s.max_device_cache_size_kb = kib(max_cache_size))
}

/// Pinned memory bound (KiB) of door `D`'s open driver; 0 is `InvalidValue`.
pub fn set_max_pinned_mem_size<D: Door>(max_pinned_size: usize) -> D::Pair {
    if max_pinned_size == 0 {
        return D::Pair::op(hipFileInvalidValue);
    }
    live::<D>(|s| s.max_pinned_mem_size_kb = kib(max_pinned_size))
}

/// Poll mode and threshold (KiB) of the open driver.
#[no_mangle]
pub extern "C" fn hipFileDriverSetPollMode(
    poll: bool,
    poll_threshold_size: usize,
) -> hipFileError_t {
    guarded_pair(|| set_poll_mode::<HipFile>(poll, poll_threshold_size))
}

/// Largest single transfer (KiB) of the open driver.
#[no_mangle]
pub extern "C" fn hipFileDriverSetMaxDirectIOSize(max_direct_io_size: usize) -> hipFileError_t {
    guarded_pair(|| set_max_direct_io_size::<HipFile>(max_direct_io_size))
}

/// GPU bounce-buffer budget (KiB) of the open driver.
#[no_mangle]
pub extern "C" fn hipFileDriverSetMaxCacheSize(max_cache_size: usize) -> hipFileError_t {
    guarded_pair(|| set_max_cache_size::<HipFile>(max_cache_size))
}

/// Pinned memory bound (KiB) of the open driver.
#[no_mangle]
pub extern "C" fn hipFileDriverSetMaxPinnedMemSize(max_pinned_size: usize) -> hipFileError_t {
    guarded_pair(|| set_max_pinned_mem_size::<HipFile>(max_pinned_size))
}
