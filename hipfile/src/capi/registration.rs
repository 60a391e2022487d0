//! Registration of files and GPU buffers, and the reads and writes between them.

use std::ffi::{c_int, c_void};
use std::ptr;

use hipfile_core::{HostLoan, IoCall, IoOp};

use super::conventions::{
    driver, guarded_pair, guarded_ssize, guarded_void, handle_id, lent, pair, result_pair, ssize,
};
use super::types::*;

/// Register a file descriptor.
#[no_mangle]
pub unsafe extern "C" fn hipFileHandleRegister(
    fh: *mut hipFileHandle_t,
    descr: *mut hipFileDescr_t,
) -> hipFileError_t {
    guarded_pair(|| {
        if fh.is_null() || descr.is_null() {
            return hipFileError_t::op(hipFileInvalidValue);
        }
        // SAFETY: `descr` is non-null and points to a caller's hipFileDescr_t. Only `type` and,
        // for descriptors, `handle.fd` are read, field by field: real programs leave `fs_ops`
        // and the rest of the union uninitialised.
        let kind = unsafe { ptr::addr_of!((*descr).type_).read() };
        if kind != hipFileHandleTypeOpaqueFD {
            return hipFileError_t::op(hipFileIONotSupported);
        }
        // SAFETY: as above; for an OpaqueFD handle the caller wrote `handle.fd`.
        let fd = unsafe { ptr::addr_of!((*descr).handle.fd).read() };
        match driver().handle_register(fd) {
            Ok(id) => {
                // SAFETY: `fh` is non-null and points to the caller's handle slot.
                unsafe { fh.write(id.0 as usize as hipFileHandle_t) };
                hipFileError_t::SUCCESS
            }
            Err(e) => pair(&e),
        }
    })
}

/// Forget a registered file.
#[no_mangle]
pub extern "C" fn hipFileHandleDeregister(fh: hipFileHandle_t) {
    guarded_void(|| {
        if !fh.is_null() {
            // `void` in C: an unknown handle or a busy file has no way to report back.
            let _ = driver().handle_deregister(handle_id(fh));
        }
    })
}

/// Register device memory.
#[no_mangle]
pub extern "C" fn hipFileBufRegister(
    buffer_base: *const c_void,
    length: usize,
    flags: c_int,
) -> hipFileError_t {
    guarded_pair(|| {
        // SAFETY: hipFile's contract for registration (hipfile.h, "Host memory"): the
        // registered bytes are the caller's and stay allocated, and untouched by anything but
        // the requests on them, until hipFileBufDeregister returns; the registration keeps the
        // loan until then.
        let loan = unsafe { HostLoan::lend_mut(buffer_base as usize, length) };
        result_pair(driver().buf_register_lent(loan, flags))
    })
}

/// Forget registered device memory.
#[no_mangle]
pub extern "C" fn hipFileBufDeregister(buffer_base: *const c_void) -> hipFileError_t {
    guarded_pair(|| result_pair(driver().buf_deregister(buffer_base as usize)))
}

fn io(
    op: IoOp,
    fh: hipFileHandle_t,
    buffer: usize,
    size: usize,
    file_offset: hoff_t,
    buffer_offset: hoff_t,
) -> ssize_t {
    ssize(driver().io(IoCall {
        op,
        handle: handle_id(fh),
        buffer,
        size,
        file_offset,
        buffer_offset,
        loan: lent(op, buffer, buffer_offset, size),
    }))
}

/// Read from a registered file into GPU memory.
#[no_mangle]
pub extern "C" fn hipFileRead(
    fh: hipFileHandle_t,
    buffer_base: *mut c_void,
    size: usize,
    file_offset: hoff_t,
    buffer_offset: hoff_t,
) -> ssize_t {
    guarded_ssize(|| {
        io(
            IoOp::Read,
            fh,
            buffer_base as usize,
            size,
            file_offset,
            buffer_offset,
        )
    })
}

/// Write GPU memory to a registered file.
#[no_mangle]
pub extern "C" fn hipFileWrite(
    fh: hipFileHandle_t,
    buffer_base: *const c_void,
    size: usize,
    file_offset: hoff_t,
    buffer_offset: hoff_t,
) -> ssize_t {
    guarded_ssize(|| {
        io(
            IoOp::Write,
            fh,
            buffer_base as usize,
            size,
            file_offset,
            buffer_offset,
        )
    })
}
