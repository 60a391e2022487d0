//! Batch IO: `hipFileBatchIO{SetUp,Submit,GetStatus,Cancel,Destroy}`.
//!
//! The C side only converts: the parameter array is copied entry by entry into core
//! [`BatchEntry`]s before anything is queued, and terminal entries come back as
//! `hipFileIOEvents_t`, whose `ret` is the bytes moved or the negative error as upstream encodes
//! it: `-errno` for OS failures, `-hipFileOpError_t` otherwise.

use std::ffi::{c_uint, c_void};
use std::time::Duration;

use hipfile_core::{BatchEntry, BatchId, BatchStatus, ErrorKind, IoCall, IoOp};

use super::conventions::{
    guarded_pair, guarded_void, handle_id, op_code, pair, result_pair, Door, HipFile, StatusPair,
};
use super::types::*;

fn invalid<D: Door>() -> D::Pair {
    D::Pair::op(hipFileInvalidValue)
}

fn batch_id(h: hipFileBatchHandle_t) -> BatchId {
    BatchId(h as usize as u64)
}

/// Set up a batch of up to `max_nr` requests on door `D`'s driver.
///
/// # Safety
/// `batch_idp` is NULL or the caller's handle slot.
pub unsafe fn batch_setup<D: Door>(
    batch_idp: *mut hipFileBatchHandle_t,
    max_nr: c_uint,
) -> D::Pair {
    if batch_idp.is_null() {
        return invalid::<D>();
    }
    match D::driver().batch_setup(max_nr as usize) {
        Ok(id) => {
            // SAFETY: `batch_idp` is non-null and points to the caller's handle slot.
            unsafe { batch_idp.write(id.0 as usize as hipFileBatchHandle_t) };
            D::Pair::SUCCESS
        }
        Err(e) => pair(&e),
    }
}

/// Set up a batch of up to `max_nr` requests.
#[no_mangle]
pub unsafe extern "C" fn hipFileBatchIOSetUp(
    batch_idp: *mut hipFileBatchHandle_t,
    max_nr: c_uint,
) -> hipFileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { batch_setup::<HipFile>(batch_idp, max_nr) })
}

/// One parameter entry as a core entry; `None` for a mode or opcode upstream does not know.
pub fn entry(p: &hipFileIOParams_t) -> Option<BatchEntry> {
    if p.mode != hipFileBatch {
        return None;
    }
    let op = match p.opcode {
        hipFileBatchRead => IoOp::Read,
        hipFileBatchWrite => IoOp::Write,
        _ => return None,
    };
    // SAFETY: mode `hipFileBatch` says the union holds its `batch` member.
    let b = unsafe { p.u.batch };
    Some(BatchEntry {
        call: IoCall {
            op,
            handle: handle_id(p.fh),
            buffer: b.devPtr_base as usize,
            size: b.size,
            file_offset: b.file_offset,
            buffer_offset: b.devPtr_offset,
        },
        cookie: p.cookie as usize,
    })
}

/// Submit `nr` requests of the caller's array `iocbp` to a batch of door `D`'s driver.
///
/// # Safety
/// `iocbp` is NULL or holds `nr` readable entries (as many as the batch has room for are read).
pub unsafe fn batch_submit<D: Door>(
    batch_idp: hipFileBatchHandle_t,
    nr: c_uint,
    iocbp: *const hipFileIOParams_t,
) -> D::Pair {
    if nr == 0 || iocbp.is_null() {
        return invalid::<D>();
    }
    // As upstream: the handle, then the room left, before any entry is read, so a count
    // larger than the batch never reads past the caller's array.
    let id = batch_id(batch_idp);
    match D::driver().batch_room(id) {
        Err(e) => return pair(&e),
        Ok(room) if nr as usize > room => return D::Pair::op(hipFileBatchFull),
        Ok(_) => {}
    }
    let mut entries = Vec::new();
    for i in 0..nr as usize {
        // SAFETY: the caller passes `nr` readable entries at `iocbp`, and `nr` is within the
        // batch's capacity; each is copied here, so the caller may reuse the array as soon
        // as this returns.
        let p = unsafe { iocbp.add(i).read() };
        match entry(&p) {
            Some(e) => entries.push(e),
            None => return invalid::<D>(),
        }
    }
    result_pair(D::driver().batch_submit(id, &entries))
}

/// Submit `nr` requests; `flags` is reserved.
#[no_mangle]
pub unsafe extern "C" fn hipFileBatchIOSubmit(
    batch_idp: hipFileBatchHandle_t,
    nr: c_uint,
    iocbp: *mut hipFileIOParams_t,
    _flags: c_uint,
) -> hipFileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { batch_submit::<HipFile>(batch_idp, nr, iocbp) })
}

/// `timeout` as a duration; `None` inside for NULL (wait forever), `Err` for a bad timespec.
fn timeout_of(timeout: *const libc::timespec) -> Result<Option<Duration>, ()> {
    if timeout.is_null() {
        return Ok(None);
    }
    // SAFETY: non-null: the caller's timespec.
    let t = unsafe { timeout.read() };
    if t.tv_sec < 0 || !(0..1_000_000_000).contains(&t.tv_nsec) {
        return Err(());
    }
    Ok(Some(Duration::new(t.tv_sec as u64, t.tv_nsec as u32)))
}

fn status_code(status: BatchStatus) -> hipFileStatus_t {
    match status {
        BatchStatus::Complete => hipFileComplete,
        BatchStatus::Failed => hipFileFailed,
        BatchStatus::Canceled => hipFileCanceled,
        BatchStatus::Timeout => hipFileTimeout,
    }
}

/// The event `ret` of a batch entry's result: the bytes moved, or the negative error as upstream
/// encodes it (`-errno` for OS failures, `-hipFileOpError_t` otherwise), cast to `size_t`.
pub fn event_ret(result: &hipfile_core::Result<usize>) -> usize {
    match result {
        Ok(bytes) => *bytes,
        Err(e) => match (e.kind(), e.errno()) {
            (ErrorKind::Os, Some(errno)) => (-(errno as isize)) as usize,
            (kind, _) => (-(op_code(kind) as isize)) as usize,
        },
    }
}

/// Collect between `min_nr` and `*nr` terminal requests of a batch of door `D`'s driver.
///
/// # Safety
/// `nr`, `iocbp` and `timeout` are NULL or the caller's: `iocbp` with room for `*nr` events.
pub unsafe fn batch_get_status<D: Door>(
    batch_idp: hipFileBatchHandle_t,
    min_nr: c_uint,
    nr: *mut c_uint,
    iocbp: *mut hipFileIOEvents_t,
    timeout: *const libc::timespec,
) -> D::Pair {
    if nr.is_null() || iocbp.is_null() {
        return invalid::<D>();
    }
    // SAFETY: non-null: the caller's count.
    let max = unsafe { nr.read() };
    if max == 0 || min_nr > max {
        return invalid::<D>();
    }
    let Ok(timeout) = timeout_of(timeout) else {
        return invalid::<D>();
    };
    let events =
        match D::driver().batch_status(batch_id(batch_idp), min_nr as usize, max as usize, timeout)
        {
            Ok(events) => events,
            Err(e) => return pair(&e),
        };
    for (i, event) in events.iter().enumerate() {
        // SAFETY: the caller's array holds `*nr` events and at most that many are answered.
        unsafe {
            iocbp.add(i).write(hipFileIOEvents_t {
                cookie: event.cookie as *mut c_void,
                status: status_code(event.status),
                ret: event_ret(&event.result),
            })
        };
    }
    // SAFETY: non-null: the caller's count; `events.len() <= max`, which came from it.
    unsafe { nr.write(events.len() as c_uint) };
    D::Pair::SUCCESS
}

/// Cancel what no thread has started in a batch of door `D`'s driver and wait for the rest.
pub fn batch_cancel<D: Door>(batch_idp: hipFileBatchHandle_t) -> D::Pair {
    result_pair(D::driver().batch_cancel(batch_id(batch_idp)))
}

/// Cancel, wait and release a batch of door `D`'s driver; NULL or an unknown handle is ignored.
pub fn batch_destroy<D: Door>(batch_idp: hipFileBatchHandle_t) {
    // `void` in C: an unknown handle has no way to report back.
    let _ = D::driver().batch_destroy(batch_id(batch_idp));
}

/// Collect between `min_nr` and `*nr` terminal requests, waiting at most `timeout`.
#[no_mangle]
pub unsafe extern "C" fn hipFileBatchIOGetStatus(
    batch_idp: hipFileBatchHandle_t,
    min_nr: c_uint,
    nr: *mut c_uint,
    iocbp: *mut hipFileIOEvents_t,
    timeout: *mut libc::timespec,
) -> hipFileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { batch_get_status::<HipFile>(batch_idp, min_nr, nr, iocbp, timeout) })
}

/// Cancel the requests no thread has started and wait for the rest.
#[no_mangle]
pub extern "C" fn hipFileBatchIOCancel(batch_idp: hipFileBatchHandle_t) -> hipFileError_t {
    guarded_pair(|| batch_cancel::<HipFile>(batch_idp))
}

/// Cancel, wait and release a batch; NULL or an unknown handle is ignored.
#[no_mangle]
pub extern "C" fn hipFileBatchIODestroy(batch_idp: hipFileBatchHandle_t) {
    guarded_void(|| batch_destroy::<HipFile>(batch_idp))
}
