//! Stream-ordered IO: `hipFileReadAsync`, `hipFileWriteAsync`, `hipFileStreamRegister` and
//! `hipFileStreamDeregister`.
//!
//! The C side checks the pointers upstream checks, vouches for the caller's stream handle for the
//! length of the call, and hands hipfile-core the caller's four slots ([`CallerSlots`]), which
//! the op reads when the stream reaches it and writes its result into. The semantics are
//! hipfile-core's `stream` module's.

use std::ffi::{c_uint, c_void};
use std::sync::Arc;

use hipfile_core::{AsyncCall, AsyncSlots, IoOp};
use hipfile_hip::StreamRef;

use super::conventions::{
    guarded_pair, handle_id, pair, result_pair, ssize, Door, HipFile, StatusPair,
};
use super::types::*;

/// The caller's size, offsets and result of one op, and how the result is encoded
/// (the door's `ssize_t` convention).
///
/// By upstream's contract the four pointers stay valid until the stream has passed the op, and
/// the caller does not touch the result slot meanwhile; the size and offsets may be written by
/// work earlier on the stream (a kernel, a host function), which is why every access is volatile.
#[derive(Debug)]
struct CallerSlots {
    size: *const usize,
    file_offset: *const hoff_t,
    buffer_offset: *const hoff_t,
    result: *mut ssize_t,
    encode: fn(hipfile_core::Result<usize>) -> ssize_t,
}

// SAFETY: the pointers name the caller's memory, which upstream's contract keeps valid until the
// stream has passed the op; the op reads and writes them from one thread at a time (the
// submitter, then one runner), ordered by the engine's hand-over.
unsafe impl Send for CallerSlots {}
// SAFETY: as for `Send`; shared access only reads the slots or writes the result volatilely.
unsafe impl Sync for CallerSlots {}

impl AsyncSlots for CallerSlots {
    fn size(&self) -> usize {
        // SAFETY: non-null (checked at submission) and valid by the caller's contract.
        unsafe { self.size.read_volatile() }
    }

    fn file_offset(&self) -> i64 {
        // SAFETY: as in `size`.
        unsafe { self.file_offset.read_volatile() }
    }

    fn buffer_offset(&self) -> i64 {
        // SAFETY: as in `size`.
        unsafe { self.buffer_offset.read_volatile() }
    }

    fn clear_result(&self) {
        // SAFETY: as in `size`; the result slot is the caller's `ssize_t`.
        unsafe { self.result.write_volatile(0) };
    }

    fn set_result(&self, result: &hipfile_core::Result<usize>) {
        let value = match result {
            Ok(n) => *n as ssize_t,
            // Upstream's async encoding: -1 for an OS failure, else the negative code.
            Err(e) => (self.encode)(Err(e.clone())),
        };
        // SAFETY: as in `size`; the result slot is the caller's `ssize_t`.
        unsafe { self.result.write_volatile(value) };
    }
}

/// `hipFileReadAsync` and `hipFileWriteAsync` (and cuFile's twins) on door `D`'s driver.
///
/// # Safety
/// Upstream's contract: non-null pointers are valid until `stream` has passed the op, and
/// `stream` is NULL or a live stream of the process's GPU runtime.
#[allow(clippy::too_many_arguments)]
pub unsafe fn io_async<D: Door>(
    op: IoOp,
    fh: hipFileHandle_t,
    buffer_base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut hoff_t,
    buffer_offset_p: *mut hoff_t,
    bytes_p: *mut ssize_t,
    stream: hipStream_t,
) -> D::Pair {
    let driver = D::driver();
    let session = match driver.async_session() {
        Ok(session) => session,
        Err(e) => return pair(&e),
    };
    if buffer_base.is_null()
        || size_p.is_null()
        || file_offset_p.is_null()
        || buffer_offset_p.is_null()
        || bytes_p.is_null()
    {
        return D::Pair::op(hipFileInvalidValue);
    }
    // SAFETY: the caller's contract: `stream` is NULL or a live stream of the GPU runtime the
    // library loaded (the one the session holds), for at least the length of this call, which
    // is all the reference is used for.
    let stream = unsafe { StreamRef::from_raw(session.runtime(), stream as usize) };
    let call = AsyncCall {
        op,
        handle: handle_id(fh),
        buffer: buffer_base as usize,
        stream: &stream,
        slots: Arc::new(CallerSlots {
            size: size_p,
            file_offset: file_offset_p,
            buffer_offset: buffer_offset_p,
            result: bytes_p,
            encode: ssize::<D>,
        }),
    };
    result_pair(driver.submit_async(&session, call))
}

/// Queue a read of `*size_p` bytes at `*file_offset_p` into `buffer_base + *buffer_offset_p` on
/// `stream`; `*bytes_read_p` holds the result once the stream has passed it.
#[no_mangle]
pub unsafe extern "C" fn hipFileReadAsync(
    fh: hipFileHandle_t,
    buffer_base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut hoff_t,
    buffer_offset_p: *mut hoff_t,
    bytes_read_p: *mut ssize_t,
    stream: hipStream_t,
) -> hipFileError_t {
    guarded_pair(|| {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            io_async::<HipFile>(
                IoOp::Read,
                fh,
                buffer_base,
                size_p,
                file_offset_p,
                buffer_offset_p,
                bytes_read_p,
                stream,
            )
        }
    })
}

/// Queue a write on `stream`; see [`hipFileReadAsync`].
#[no_mangle]
pub unsafe extern "C" fn hipFileWriteAsync(
    fh: hipFileHandle_t,
    buffer_base: *mut c_void,
    size_p: *mut usize,
    file_offset_p: *mut hoff_t,
    buffer_offset_p: *mut hoff_t,
    bytes_written_p: *mut ssize_t,
    stream: hipStream_t,
) -> hipFileError_t {
    guarded_pair(|| {
        // SAFETY: the caller's contract, passed on.
        unsafe {
            io_async::<HipFile>(
                IoOp::Write,
                fh,
                buffer_base,
                size_p,
                file_offset_p,
                buffer_offset_p,
                bytes_written_p,
                stream,
            )
        }
    })
}

/// Register `stream` with `flags` on door `D`'s driver. With the driver open, the handle is
/// first checked with the GPU runtime: a handle it does not know is the GPU runtime's error.
///
/// # Safety
/// `stream` is NULL or a stream of the process's GPU runtime.
pub unsafe fn stream_register<D: Door>(stream: hipStream_t, flags: c_uint) -> D::Pair {
    let driver = D::driver();
    if let Some(session) = driver.session() {
        // SAFETY: the caller's contract: `stream` is NULL or a stream of the process's GPU
        // runtime; asking its device is how a handle the runtime does not know is refused.
        let stream = unsafe { StreamRef::from_raw(session.runtime(), stream as usize) };
        if let Err(e) = stream.device() {
            return pair(&hipfile_core::Error::hip(&e, "asking the stream's device"));
        }
    }
    result_pair(driver.stream_register(stream as usize, flags))
}

/// Forget a registered stream of door `D`'s driver.
pub fn stream_deregister<D: Door>(stream: hipStream_t) -> D::Pair {
    result_pair(D::driver().stream_deregister(stream as usize))
}

/// Register `stream` with `flags` (`HIPFILE_STREAM_*`). With the driver open, the handle is
/// first checked with the GPU runtime: a handle it does not know is `hipFileHipDriverError` with
/// the runtime's error.
#[no_mangle]
pub unsafe extern "C" fn hipFileStreamRegister(
    stream: hipStream_t,
    flags: c_uint,
) -> hipFileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { stream_register::<HipFile>(stream, flags) })
}

/// Forget a registered stream.
#[no_mangle]
pub extern "C" fn hipFileStreamDeregister(stream: hipStream_t) -> hipFileError_t {
    guarded_pair(|| stream_deregister::<HipFile>(stream))
}
