//! Registering a descriptor through the C ABI, shared by the test binaries that drive the
//! process-wide driver (each a binary of its own: the C ABI has one driver per process).

use std::os::fd::RawFd;
use std::ptr;

use hipfile::capi::{
    hipFileDescr_handle_t, hipFileDescr_t, hipFileError_t, hipFileHandleRegister,
    hipFileHandleTypeOpaqueFD, hipFileHandle_t,
};

/// `hipFileHandleRegister` of `fd` as an opaque descriptor: the handle it wrote (null when it
/// wrote none) and its answer.
pub fn register_fd(fd: RawFd) -> (hipFileHandle_t, hipFileError_t) {
    let mut descr = hipFileDescr_t {
        type_: hipFileHandleTypeOpaqueFD,
        handle: hipFileDescr_handle_t { fd },
        fs_ops: ptr::null(),
    };
    let mut fh: hipFileHandle_t = ptr::null_mut();
    // SAFETY: both pointers are live locals of the right types.
    let answer = unsafe { hipFileHandleRegister(&mut fh, &mut descr) };
    (fh, answer)
}
