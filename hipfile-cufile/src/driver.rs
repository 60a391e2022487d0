//! The driver: open and close, use count, version, properties and the `cuFileDriverSet*` knobs.

use std::ffi::{c_int, c_long};

use hipfile::capi::{self, guarded, guarded_pair, write_out, StatusPair};

use crate::door::CuFile;
use crate::types::*;

/// What `cuFileGetVersion` answers: cuFile encodes 1000 x major + 10 x minor, and this library
/// answers as the cuFile release whose interface it implements, 1.15 (CUDA 13.0's), so programs
/// that gate the batch (1.6) and stream (1.7) APIs on the version take them.
pub const CUFILE_VERSION: c_int = 1150;

/// Open the driver or add a reference.
#[no_mangle]
pub extern "C" fn cuFileDriverOpen() -> CUfileError_t {
    guarded_pair(capi::driver_open::<CuFile>)
}

/// Drop a reference to the driver; the final close also forgets the P2P flags
/// ([`crate::policy::forget_p2p_flags`]), as cuFile.
pub fn driver_close() -> CUfileError_t {
    let answer = capi::driver_close::<CuFile>();
    if answer == CUfileError_t::SUCCESS && capi::use_count::<CuFile>() == 0 {
        crate::policy::forget_p2p_flags();
    }
    answer
}

/// Drop a reference to the driver (the name programs built against older headers call).
#[no_mangle]
pub extern "C" fn cuFileDriverClose() -> CUfileError_t {
    guarded_pair(driver_close)
}

/// Drop a reference to the driver (the header's `cuFileDriverClose` is this name).
#[no_mangle]
pub extern "C" fn cuFileDriverClose_v2() -> CUfileError_t {
    guarded_pair(driver_close)
}

/// References held on the driver.
#[no_mangle]
pub extern "C" fn cuFileUseCount() -> c_long {
    guarded(-1, || capi::use_count::<CuFile>() as c_long)
}

/// The library version, [`CUFILE_VERSION`].
#[no_mangle]
pub unsafe extern "C" fn cuFileGetVersion(version: *mut c_int) -> CUfileError_t {
    // SAFETY: the C caller passes NULL or its own int.
    guarded_pair(|| unsafe { write_out(version, CUFILE_VERSION) })
}

/// The driver's properties, converted from the facade's (see [`CUfileDrvProps_t`]'s `From`).
pub fn driver_props() -> CUfileDrvProps_t {
    capi::door_driver_props::<CuFile>().into()
}

/// Fill `props` with the driver's properties.
#[no_mangle]
pub unsafe extern "C" fn cuFileDriverGetProperties(props: *mut CUfileDrvProps_t) -> CUfileError_t {
    // SAFETY: the C caller passes NULL or its own struct.
    guarded_pair(|| unsafe { write_out(props, driver_props()) })
}

/// Poll mode and threshold (KiB) of the open driver.
#[no_mangle]
pub extern "C" fn cuFileDriverSetPollMode(poll: bool, poll_threshold_size: usize) -> CUfileError_t {
    guarded_pair(|| capi::set_poll_mode::<CuFile>(poll, poll_threshold_size))
}

/// Largest single transfer (KiB) of the open driver.
#[no_mangle]
pub extern "C" fn cuFileDriverSetMaxDirectIOSize(max_direct_io_size: usize) -> CUfileError_t {
    guarded_pair(|| capi::set_max_direct_io_size::<CuFile>(max_direct_io_size))
}

/// GPU bounce-buffer budget (KiB) of the open driver.
#[no_mangle]
pub extern "C" fn cuFileDriverSetMaxCacheSize(max_cache_size: usize) -> CUfileError_t {
    guarded_pair(|| capi::set_max_cache_size::<CuFile>(max_cache_size))
}

/// Pinned memory bound (KiB) of the open driver.
#[no_mangle]
pub extern "C" fn cuFileDriverSetMaxPinnedMemSize(max_pinned_size: usize) -> CUfileError_t {
    guarded_pair(|| capi::set_max_pinned_mem_size::<CuFile>(max_pinned_size))
}
