//! Registration of files and buffers, and the synchronous reads and writes between them.

use std::ffi::{c_int, c_void};

use hipfile::capi::{self, guarded_pair, guarded_ssize, guarded_void};
use hipfile_core::IoOp;

use crate::door::CuFile;
use crate::types::*;

/// Register a file (opens the driver if it is closed, after the descriptor's checks).
#[no_mangle]
pub unsafe extern "C" fn cuFileHandleRegister(
    fh: *mut CUfileHandle_t,
    descr: *mut CUfileDescr_t,
) -> CUfileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { capi::handle_register::<CuFile>(fh, descr) })
}

/// Forget a registered file.
#[no_mangle]
pub extern "C" fn cuFileHandleDeregister(fh: CUfileHandle_t) {
    guarded_void(|| capi::handle_deregister::<CuFile>(fh))
}

/// Register device or host memory (opens the driver if it is closed, before its checks, as
/// cuFile). `unsafe` for Rust callers: host memory is lent to the library until it is
/// deregistered (cufile.h, "Host memory"), which no borrow of safe Rust can promise. `flags` (`CU_FILE_RDMA_REGISTER`, `CU_FILE_RDMA_RELAXED_ORDERING`) concern RDMA
/// registration, which this library does not do: they are recorded with the buffer, nothing else.
///
/// ```compile_fail,E0133
/// // Safe Rust cannot lend the library memory it borrows.
/// let bytes = [0u8; 4096];
/// cufile::cuFileBufRegister(bytes.as_ptr().cast(), bytes.len(), 0);
/// ```
#[no_mangle]
pub unsafe extern "C" fn cuFileBufRegister(
    buffer_base: *const c_void,
    length: usize,
    flags: c_int,
) -> CUfileError_t {
    // SAFETY: the C caller's contract for registration (cufile.h, "Host memory"), passed on.
    guarded_pair(|| unsafe { capi::buf_register::<CuFile>(buffer_base, length, flags) })
}

/// Forget registered memory.
#[no_mangle]
pub extern "C" fn cuFileBufDeregister(buffer_base: *const c_void) -> CUfileError_t {
    guarded_pair(|| capi::buf_deregister::<CuFile>(buffer_base))
}

/// Read from a registered file: bytes read, `-1` with `errno`, or `-CUfileOpError`. `unsafe`
/// for Rust callers: the buffer may be host memory, written by the kernel during the call
/// (cufile.h, "Host memory").
///
/// ```compile_fail,E0133
/// let mut bytes = [0u8; 4096];
/// let fh = std::ptr::null_mut();
/// cufile::cuFileRead(fh, bytes.as_mut_ptr().cast(), bytes.len(), 0, 0);
/// ```
#[no_mangle]
pub unsafe extern "C" fn cuFileRead(
    fh: CUfileHandle_t,
    buffer_base: *mut c_void,
    size: usize,
    file_offset: libc::off_t,
    buffer_offset: libc::off_t,
) -> isize {
    // SAFETY: the C caller's contract for an IO call (cufile.h, "Host memory"), passed on.
    guarded_ssize(|| unsafe {
        capi::io::<CuFile>(
            IoOp::Read,
            fh,
            buffer_base as usize,
            size,
            file_offset,
            buffer_offset,
        )
    })
}

/// Write to a registered file: bytes written, `-1` with `errno`, or `-CUfileOpError`. `unsafe`
/// for Rust callers, as [`cuFileRead`].
///
/// ```compile_fail,E0133
/// let bytes = [0u8; 4096];
/// let fh = std::ptr::null_mut();
/// cufile::cuFileWrite(fh, bytes.as_ptr().cast(), bytes.len(), 0, 0);
/// ```
#[no_mangle]
pub unsafe extern "C" fn cuFileWrite(
    fh: CUfileHandle_t,
    buffer_base: *const c_void,
    size: usize,
    file_offset: libc::off_t,
    buffer_offset: libc::off_t,
) -> isize {
    // SAFETY: the C caller's contract for an IO call (cufile.h, "Host memory"), passed on.
    guarded_ssize(|| unsafe {
        capi::io::<CuFile>(
            IoOp::Write,
            fh,
            buffer_base as usize,
            size,
            file_offset,
            buffer_offset,
        )
    })
}
