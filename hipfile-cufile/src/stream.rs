//! Stream-ordered IO and stream registration, the facade's bodies on the cuFile door.
//!
//! `cuFileStreamRegister` takes the `CU_FILE_STREAM_*` flags (values equal to hipFile's): an
//! op submitted on a stream registered with `FIXED_BUF_OFFSET`, `FIXED_FILE_OFFSET` or
//! `FIXED_FILE_SIZE` reads that value at submission instead of when the stream reaches it, and
//! `PAGE_ALIGNED_INPUTS` promises 4 KiB aligned values; other bits are `CU_FILE_INVALID_VALUE`.
//! `*bytes_read_p` receives the bytes moved, `-1` (errno of the thread that ran the op) for an
//! OS failure, or `-CUfileOpError`.

use std::ffi::{c_uint, c_void};

use hipfile::capi::{self, guarded_pair};
use hipfile_core::IoOp;

use crate::door::CuFile;
use crate::types::*;

/// Queue a read of `*size_p` bytes at `*file_offset_p` into `buffer_base + *buffer_offset_p`
/// on `stream`; `*bytes_read_p` holds the result once the stream has passed it.
#[no_mangle]
pub unsafe extern "C" fn cuFileReadAsync(
    fh: CUfileHandle_t,
    buffer_base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut libc::off_t,
    buffer_offset_p: *mut libc::off_t,
    bytes_read_p: *mut isize,
    stream: CUstream,
) -> CUfileError_t {
    // SAFETY: the C caller's contract for a stream-ordered op (cufile.h, "Host memory": the
    // buffer's bytes are the library's until the stream has passed the op), passed on.
    guarded_pair(|| unsafe {
        capi::io_async::<CuFile>(
            IoOp::Read,
            fh,
            buffer_base,
            size_p,
            file_offset_p,
            buffer_offset_p,
            bytes_read_p,
            stream,
        )
    })
}

/// Queue a write on `stream`; see [`cuFileReadAsync`].
#[no_mangle]
pub unsafe extern "C" fn cuFileWriteAsync(
    fh: CUfileHandle_t,
    buffer_base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut libc::off_t,
    buffer_offset_p: *mut libc::off_t,
    bytes_written_p: *mut isize,
    stream: CUstream,
) -> CUfileError_t {
    // SAFETY: the C caller's contract for a stream-ordered op (cufile.h, "Host memory": the
    // buffer's bytes are the library's until the stream has passed the op), passed on.
    guarded_pair(|| unsafe {
        capi::io_async::<CuFile>(
            IoOp::Write,
            fh,
            buffer_base,
            size_p,
            file_offset_p,
            buffer_offset_p,
            bytes_written_p,
            stream,
        )
    })
}

/// Register `stream` with `flags` (`CU_FILE_STREAM_*`).
#[no_mangle]
pub unsafe extern "C" fn cuFileStreamRegister(stream: CUstream, flags: c_uint) -> CUfileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { capi::stream_register::<CuFile>(stream, flags) })
}

/// Forget a registered stream.
#[no_mangle]
pub extern "C" fn cuFileStreamDeregister(stream: CUstream) -> CUfileError_t {
    guarded_pair(|| capi::stream_deregister::<CuFile>(stream))
}
