//! Async and stream IO, which are not part of this build: their functions exist so every
//! upstream program links, and answer exactly what upstream documents for "not supported"
//! (`hipFileAsyncNotSupported`; upstream's Python bindings probe `hipFileStreamRegister`).

use std::ffi::{c_uint, c_void};

use super::conventions::guarded_pair;
use super::types::*;

const ASYNC_NOT_SUPPORTED: hipFileError_t = hipFileError_t::op(hipFileAsyncNotSupported);

/// Async IO is not part of this build.
#[no_mangle]
pub extern "C" fn hipFileReadAsync(
    _fh: hipFileHandle_t,
    _buffer_base: *mut c_void,
    _size_p: *mut usize,
    _file_offset_p: *mut hoff_t,
    _buffer_offset_p: *mut hoff_t,
    _bytes_read_p: *mut ssize_t,
    _stream: hipStream_t,
) -> hipFileError_t {
    guarded_pair(|| ASYNC_NOT_SUPPORTED)
}

/// Async IO is not part of this build.
#[no_mangle]
pub extern "C" fn hipFileWriteAsync(
    _fh: hipFileHandle_t,
    _buffer_base: *mut c_void,
    _size_p: *mut usize,
    _file_offset_p: *mut hoff_t,
    _buffer_offset_p: *mut hoff_t,
    _bytes_written_p: *mut ssize_t,
    _stream: hipStream_t,
) -> hipFileError_t {
    guarded_pair(|| ASYNC_NOT_SUPPORTED)
}

/// Stream IO is not part of this build.
#[no_mangle]
pub extern "C" fn hipFileStreamRegister(_stream: hipStream_t, _flags: c_uint) -> hipFileError_t {
    guarded_pair(|| ASYNC_NOT_SUPPORTED)
}

/// Stream IO is not part of this build.
#[no_mangle]
pub extern "C" fn hipFileStreamDeregister(_stream: hipStream_t) -> hipFileError_t {
    guarded_pair(|| ASYNC_NOT_SUPPORTED)
}
