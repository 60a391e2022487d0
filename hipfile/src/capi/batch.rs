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
    driver, guarded_pair, guarded_void, handle_id, lent, op_code, pair, result_pair,
};
use super::types::*;

const INVALID: hipFileError_t = hipFileError_t::op(hipFileInvalidValue);

fn batch_id(h: hipFileBatchHandle_t) -> BatchId {
    BatchId(h as usize as u64)
}

/// Set up a batch of up to `max_nr` requests.
#[no_mangle]
pub unsafe extern "C" fn hipFileBatchIOSetUp(
    batch_idp: *mut hipFileBatchHandle_t,
    max_nr: c_uint,
) -> hipFileError_t {
    guarded_pair(|| {
        if batch_idp.is_null() {
            return INVALID;
        }
        match driver().batch_setup(max_nr as usize) {
            Ok(id) => {
                // SAFETY: `batch_idp` is non-null and points to the caller's handle slot.
                unsafe { batch_idp.write(id.0 as usize as hipFileBatchHandle_t) };
                hipFileError_t::SUCCESS
            }
            Err(e) => pair(&e),
        }
    })
}

/// One parameter entry as a core entry; `None` for a mode or opcode upstream does not know.
fn entry(p: &hipFileIOParams_t) -> Option<BatchEntry> {
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
            loan: lent(op, b.devPtr_base as usize, b.devPtr_offset, b.size),
        },
        cookie: p.cookie as usize,
    })
}

/// Submit `nr` requests; `flags` is reserved.
#[no_mangle]
pub unsafe extern "C" fn hipFileBatchIOSubmit(
    batch_idp: hipFileBatchHandle_t,
    nr: c_uint,
    iocbp: *mut hipFileIOParams_t,
    _flags: c_uint,
) -> hipFileError_t {
    guarded_pair(|| {
        if nr == 0 || iocbp.is_null() {
            return INVALID;
        }
        // As upstream: the handle, then the room left, before any entry is read, so a count
        // larger than the batch never reads past the caller's array.
        let id = batch_id(batch_idp);
        match driver().batch_room(id) {
            Err(e) => return pair(&e),
            Ok(room) if nr as usize > room => return hipFileError_t::op(hipFileBatchFull),
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
                None => return INVALID,
            }
        }
        result_pair(driver().batch_submit(id, &entries))
    })
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

/// Collect between `min_nr` and `*nr` terminal requests, waiting at most `timeout`.
#[no_mangle]
pub unsafe extern "C" fn hipFileBatchIOGetStatus(
    batch_idp: hipFileBatchHandle_t,
    min_nr: c_uint,
    nr: *mut c_uint,
    iocbp: *mut hipFileIOEvents_t,
    timeout: *mut libc::timespec,
) -> hipFileError_t {
    guarded_pair(|| {
        if nr.is_null() || iocbp.is_null() {
            return INVALID;
        }
        // SAFETY: non-null: the caller's count.
        let max = unsafe { nr.read() };
        if max == 0 || min_nr > max {
            return INVALID;
        }
        let Ok(timeout) = timeout_of(timeout) else {
            return INVALID;
        };
        let events = match driver().batch_status(
            batch_id(batch_idp),
            min_nr as usize,
            max as usize,
            timeout,
        ) {
            Ok(events) => events,
            Err(e) => return pair(&e),
        };
        for (i, event) in events.iter().enumerate() {
            let ret = match &event.result {
                Ok(bytes) => *bytes,
                Err(e) => match (e.kind(), e.errno()) {
                    (ErrorKind::Os, Some(errno)) => (-(errno as isize)) as usize,
                    (kind, _) => (-(op_code(kind) as isize)) as usize,
                },
            };
            // SAFETY: the caller's array holds `*nr` events and at most that many are answered.
            unsafe {
                iocbp.add(i).write(hipFileIOEvents_t {
                    cookie: event.cookie as *mut c_void,
                    status: status_code(event.status),
                    ret,
                })
            };
        }
        // SAFETY: non-null: the caller's count; `events.len() <= max`, which came from it.
        unsafe { nr.write(events.len() as c_uint) };
        hipFileError_t::SUCCESS
    })
}

/// Cancel the requests no thread has started and wait for the rest.
#[no_mangle]
pub extern "C" fn hipFileBatchIOCancel(batch_idp: hipFileBatchHandle_t) -> hipFileError_t {
    guarded_pair(|| result_pair(driver().batch_cancel(batch_id(batch_idp))))
}

/// Cancel, wait and release a batch; NULL or an unknown handle is ignored.
#[no_mangle]
pub extern "C" fn hipFileBatchIODestroy(batch_idp: hipFileBatchHandle_t) {
    guarded_void(|| {
        // `void` in C: an unknown handle has no way to report back.
        let _ = driver().batch_destroy(batch_id(batch_idp));
    })
}
