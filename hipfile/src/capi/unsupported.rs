//! Batch, async and stream IO, which are not part of this build: their functions exist so every
//! upstream program links, and answer exactly what upstream documents for "not supported"
//! (`hipFileIONotSupported` for batch IO, `hipFileAsyncNotSupported` for async and stream IO;
//! upstream's Python bindings probe `hipFileStreamRegister` for the latter).

use std::ffi::{c_uint, c_void};

use super::conventions::{guarded_pair, guarded_void};
use super::types::*;

const IO_NOT_SUPPORTED: hipFileError_t = hipFileError_t::op(hipFileIONotSupported);
const ASYNC_NOT_SUPPORTED: hipFileError_t = hipFileError_t::op(hipFileAsyncNotSupported);

/// Batch IO is not part of this build.
#[no_mangle]
pub extern "C" fn hipFileBatchIOSetUp(
    _batch_idp: *mut hipFileBatchHandle_t,
    _max_nr: c_uint,
) -> hipFileError_t {
    guarded_pair(|| IO_NOT_SUPPORTED)
}

/// Batch IO is not part of this build.
#[no_mangle]
pub extern "C" fn hipFileBatchIOSubmit(
    _batch_idp: hipFileBatchHandle_t,
    _nr: c_uint,
    _iocbp: *mut hipFileIOParams_t,
    _flags: c_uint,
) -> hipFileError_t {
    guarded_pair(|| IO_NOT_SUPPORTED)
}

/// Batch IO is not part of this build.
#[no_mangle]
pub extern "C" fn hipFileBatchIOGetStatus(
    _batch_idp: hipFileBatchHandle_t,
    _min_nr: c_uint,
    _nr: *mut c_uint,
    _iocbp: *mut hipFileIOEvents_t,
    _timeout: *mut libc::timespec,
) -> hipFileError_t {
    guarded_pair(|| IO_NOT_SUPPORTED)
}

/// Batch IO is not part of this build.
#[no_mangle]
pub extern "C" fn hipFileBatchIOCancel(_batch_idp: hipFileBatchHandle_t) -> hipFileError_t {
    guarded_pair(|| IO_NOT_SUPPORTED)
}

/// Batch IO is not part of this build: no batch can exist, so there is nothing to destroy.
#[no_mangle]
pub extern "C" fn hipFileBatchIODestroy(_batch_idp: hipFileBatchHandle_t) {
    guarded_void(|| {})
}

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
