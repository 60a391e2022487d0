//! Registration of files and GPU buffers, and the reads and writes between them.

use std::ffi::{c_int, c_void};
use std::ptr;

use hipfile_core::{HostLoan, IoCall, IoOp, MAX_RW_COUNT};

use super::conventions::{
    guarded_pair, guarded_ssize, guarded_void, handle_id, lent, pair, result_pair, ssize,
    DescriptorUse, Door, HipFile, StatusPair,
};
use super::types::*;

/// Register the descriptor `descr` describes with door `D`'s driver, writing the handle to `fh`.
///
/// # Safety
/// `fh` and `descr` are NULL or the caller's: `descr` a readable `hipFileDescr_t` (the same
/// layout as `CUfileDescr_t`) whose `type` is written and, for a descriptor, `handle.fd`.
pub unsafe fn handle_register<D: Door>(
    fh: *mut hipFileHandle_t,
    descr: *const hipFileDescr_t,
) -> D::Pair {
    if fh.is_null() || descr.is_null() {
        return D::Pair::op(hipFileInvalidValue);
    }
    // SAFETY: `descr` is non-null and points to a caller's hipFileDescr_t. Only `type` and,
    // for descriptors, `handle.fd` are read, field by field: real programs leave `fs_ops`
    // and the rest of the union uninitialised.
    let kind = unsafe { ptr::addr_of!((*descr).type_).read() };
    if let DescriptorUse::Refuse(code) = D::descriptor_use(kind) {
        return D::Pair::op(code);
    }
    // SAFETY: as above; for a descriptor handle the caller wrote `handle.fd`.
    let fd = unsafe { ptr::addr_of!((*descr).handle.fd).read() };
    match D::driver().handle_register(fd) {
        Ok(id) => {
            // SAFETY: `fh` is non-null and points to the caller's handle slot.
            unsafe { fh.write(id.0 as usize as hipFileHandle_t) };
            D::Pair::SUCCESS
        }
        Err(e) => pair(&e),
    }
}

/// Forget a registered file of door `D`'s driver; NULL and unknown handles are ignored.
pub fn handle_deregister<D: Door>(fh: hipFileHandle_t) {
    if !fh.is_null() {
        // `void` in C: an unknown handle or a busy file has no way to report back.
        let _ = D::driver().handle_deregister(handle_id(fh));
    }
}

/// Register memory with door `D`'s driver: device memory, or host memory where the driver's
/// `allow_system_memory` admits it, lent to the registration until it is deregistered.
///
/// # Safety
/// The C caller's contract for registration (hipfile.h and cufile.h, "Host memory"): the
/// `length` bytes at `buffer_base` are the application's and stay allocated, and untouched by
/// anything but the requests on them, until the buffer is deregistered.
pub unsafe fn buf_register<D: Door>(
    buffer_base: *const c_void,
    length: usize,
    flags: c_int,
) -> D::Pair {
    // SAFETY: this function's contract is the loan's, for the registration's life; the
    // registration keeps the loan until it is deregistered.
    let loan = unsafe { HostLoan::lend_mut(buffer_base as usize, length) };
    result_pair(D::driver().buf_register_lent(loan, flags))
}

/// Forget registered memory of door `D`'s driver.
pub fn buf_deregister<D: Door>(buffer_base: *const c_void) -> D::Pair {
    result_pair(D::driver().buf_deregister(buffer_base as usize))
}

/// One synchronous read or write through door `D`'s driver, in its `ssize_t` convention. A door
/// that moves whole requests ([`Door::WHOLE_REQUESTS`]) gets its size in calls of at most
/// [`MAX_RW_COUNT`] bytes ([`io_in_calls`]).
///
/// # Safety
/// The C caller's contract for an IO call (see [`lent`]): where `buffer` is host memory, its
/// bytes are the application's, untouched by anything else until the call returns.
pub unsafe fn io<D: Door>(
    op: IoOp,
    fh: hipFileHandle_t,
    buffer: usize,
    size: usize,
    file_offset: hoff_t,
    buffer_offset: hoff_t,
) -> ssize_t {
    let most = if D::WHOLE_REQUESTS {
        MAX_RW_COUNT
    } else {
        size
    };
    // SAFETY: this function's contract, passed on.
    unsafe { io_in_calls::<D>(op, fh, buffer, size, file_offset, buffer_offset, most) }
}

/// [`io`] as calls of at most `most` bytes (a multiple of 4 KiB, so pieces keep the alignment
/// of the first): the next call starts where the last ended, a short read (the end of the file)
/// ends the request with the bytes read, and a failure is the request's answer, with or without
/// bytes moved before it, so a request the caller sees succeed moved its whole size. A single
/// call (`most >= size`) answers as the driver does.
///
/// # Safety
/// As [`io`].
pub unsafe fn io_in_calls<D: Door>(
    op: IoOp,
    fh: hipFileHandle_t,
    buffer: usize,
    size: usize,
    file_offset: hoff_t,
    buffer_offset: hoff_t,
    most: usize,
) -> ssize_t {
    let one = |done: usize, len: usize| {
        // Offsets past i64 are refused by the driver's validation, as for any call.
        let at = |base: hoff_t| base.saturating_add(done as hoff_t);
        let (file_offset, buffer_offset) = (at(file_offset), at(buffer_offset));
        D::driver().io(IoCall {
            op,
            handle: handle_id(fh),
            buffer,
            size: len,
            file_offset,
            buffer_offset,
            // SAFETY: this function's contract, passed on, for this piece's bytes.
            loan: unsafe { lent(op, buffer, buffer_offset, len) },
        })
    };
    if most >= size || most == 0 {
        return ssize::<D>(one(0, size));
    }
    let mut done = 0;
    while done < size {
        let len = (size - done).min(most);
        match one(done, len) {
            Ok(n) => {
                done += n;
                if n < len {
                    break;
                }
            }
            Err(e) => return ssize::<D>(Err(e)),
        }
    }
    ssize::<D>(Ok(done))
}

/// Register a file descriptor.
#[no_mangle]
pub unsafe extern "C" fn hipFileHandleRegister(
    fh: *mut hipFileHandle_t,
    descr: *mut hipFileDescr_t,
) -> hipFileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { handle_register::<HipFile>(fh, descr) })
}

/// Forget a registered file.
#[no_mangle]
pub extern "C" fn hipFileHandleDeregister(fh: hipFileHandle_t) {
    guarded_void(|| handle_deregister::<HipFile>(fh))
}

/// Register device memory (or host memory where allowed: hipfile.h, "Host memory"; hence
/// `unsafe` for Rust callers, whose borrows cannot promise the loan).
///
/// ```compile_fail,E0133
/// // Safe Rust cannot lend the library memory it borrows.
/// let bytes = [0u8; 4096];
/// hipfile::capi::hipFileBufRegister(bytes.as_ptr().cast(), bytes.len(), 0);
/// ```
#[no_mangle]
pub unsafe extern "C" fn hipFileBufRegister(
    buffer_base: *const c_void,
    length: usize,
    flags: c_int,
) -> hipFileError_t {
    // SAFETY: the C caller's contract for registration (hipfile.h, "Host memory"), passed on.
    guarded_pair(|| unsafe { buf_register::<HipFile>(buffer_base, length, flags) })
}

/// Forget registered device memory.
#[no_mangle]
pub extern "C" fn hipFileBufDeregister(buffer_base: *const c_void) -> hipFileError_t {
    guarded_pair(|| buf_deregister::<HipFile>(buffer_base))
}

/// Read from a registered file into GPU memory (or host memory where allowed: hipfile.h,
/// "Host memory"; hence `unsafe` for Rust callers).
///
/// ```compile_fail,E0133
/// let mut bytes = [0u8; 4096];
/// let fh = std::ptr::null_mut();
/// hipfile::capi::hipFileRead(fh, bytes.as_mut_ptr().cast(), bytes.len(), 0, 0);
/// ```
#[no_mangle]
pub unsafe extern "C" fn hipFileRead(
    fh: hipFileHandle_t,
    buffer_base: *mut c_void,
    size: usize,
    file_offset: hoff_t,
    buffer_offset: hoff_t,
) -> ssize_t {
    // SAFETY: the C caller's contract for an IO call (hipfile.h, "Host memory"), passed on.
    guarded_ssize(|| unsafe {
        io::<HipFile>(
            IoOp::Read,
            fh,
            buffer_base as usize,
            size,
            file_offset,
            buffer_offset,
        )
    })
}

/// Write GPU memory (or host memory where allowed) to a registered file; `unsafe` as
/// [`hipFileRead`].
///
/// ```compile_fail,E0133
/// let bytes = [0u8; 4096];
/// let fh = std::ptr::null_mut();
/// hipfile::capi::hipFileWrite(fh, bytes.as_ptr().cast(), bytes.len(), 0, 0);
/// ```
#[no_mangle]
pub unsafe extern "C" fn hipFileWrite(
    fh: hipFileHandle_t,
    buffer_base: *const c_void,
    size: usize,
    file_offset: hoff_t,
    buffer_offset: hoff_t,
) -> ssize_t {
    // SAFETY: the C caller's contract for an IO call (hipfile.h, "Host memory"), passed on.
    guarded_ssize(|| unsafe {
        io::<HipFile>(
            IoOp::Write,
            fh,
            buffer_base as usize,
            size,
            file_offset,
            buffer_offset,
        )
    })
}
