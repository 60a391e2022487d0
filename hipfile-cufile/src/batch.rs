//! Batch IO: `cuFileBatchIO{SetUp,Submit,GetStatus,Cancel,Destroy}`, the facade's bodies.
//!
//! An event's `ret` is the bytes moved, or the negative error cast to `size_t` as cuFile encodes
//! it: `-errno` for OS failures, `-CUfileOpError` otherwise (a CUDA failure is
//! `-CU_FILE_CUDA_DRIVER_ERROR`). `flags` of `cuFileBatchIOSubmit` is reserved (cuFile defines
//! no flag for it) and ignored, as NVIDIA's library does.

use std::ffi::c_uint;

use hipfile::capi::{self, guarded_pair, guarded_void};

use crate::door::CuFile;
use crate::types::*;

/// Set up a batch of up to `max_nr` requests.
#[no_mangle]
pub unsafe extern "C" fn cuFileBatchIOSetUp(
    batch_idp: *mut CUfileBatchHandle_t,
    max_nr: c_uint,
) -> CUfileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { capi::batch_setup::<CuFile>(batch_idp, max_nr) })
}

/// Submit `nr` requests.
#[no_mangle]
pub unsafe extern "C" fn cuFileBatchIOSubmit(
    batch_idp: CUfileBatchHandle_t,
    nr: c_uint,
    iocbp: *mut CUfileIOParams_t,
    _flags: c_uint,
) -> CUfileError_t {
    // SAFETY: the C caller's contract for the entries (cufile.h, "Host memory": each entry's
    // bytes are the library's until the entry is reaped or its batch canceled), passed on.
    guarded_pair(|| unsafe { capi::batch_submit::<CuFile>(batch_idp, nr, iocbp) })
}

/// Collect between `min_nr` and `*nr` terminal requests, waiting at most `timeout`.
#[no_mangle]
pub unsafe extern "C" fn cuFileBatchIOGetStatus(
    batch_idp: CUfileBatchHandle_t,
    min_nr: c_uint,
    nr: *mut c_uint,
    iocbp: *mut CUfileIOEvents_t,
    timeout: *mut libc::timespec,
) -> CUfileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe {
        capi::batch_get_status::<CuFile>(batch_idp, min_nr, nr, iocbp, timeout)
    })
}

/// Cancel the requests no thread has started and wait for the rest.
#[no_mangle]
pub extern "C" fn cuFileBatchIOCancel(batch_idp: CUfileBatchHandle_t) -> CUfileError_t {
    guarded_pair(|| capi::batch_cancel::<CuFile>(batch_idp))
}

/// Cancel, wait and release a batch; NULL or an unknown handle is ignored.
#[no_mangle]
pub extern "C" fn cuFileBatchIODestroy(batch_idp: CUfileBatchHandle_t) {
    guarded_void(|| capi::batch_destroy::<CuFile>(batch_idp))
}
