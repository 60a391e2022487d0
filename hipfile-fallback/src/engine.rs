//! The transfer loop: a request cut into chunks, each staged through a pinned buffer.
//!
//! Reads: `pread` a chunk into the staging buffer (EINTR retried, short reads continued), copy it
//! to the device; a short chunk means end of file and ends the request with a short count. Writes:
//! copy a chunk from the device, `pwrite` all of it (EINTR retried, short writes continued; a write
//! that makes no progress is ENOSPC). Any failure fails the whole request with the bytes already
//! moved reported, so nothing is ever claimed that did not land.

use std::os::fd::BorrowedFd;

use hipfile_core::{pread_full, pwrite_full, Error, FileIo, IoFailure, IoOp, IoRequest};
use hipfile_hip::GpuRuntime;

use crate::staging::StagingLease;

/// Move `req` through `lease`'s buffer in chunks of at most `chunk` bytes.
pub fn transfer(
    runtime: &dyn GpuRuntime,
    io: &dyn FileIo,
    fd: BorrowedFd<'_>,
    req: &IoRequest<'_>,
    lease: &mut StagingLease,
    chunk: usize,
) -> Result<usize, IoFailure> {
    let staging = lease.buffer();
    let chunk = chunk.min(staging.len()).max(1);
    let mut done = 0usize;
    while done < req.size {
        let n = chunk.min(req.size - done);
        let file_offset = req.file_offset + done as u64;
        let device_ptr = req.device_ptr + done;
        let host = &mut staging.as_mut_slice()[..n];
        match req.op {
            IoOp::Read => {
                let got = pread_full(io, fd, host, file_offset).map_err(|e| {
                    IoFailure::new(
                        Error::from_io(&e, format!("reading {n} bytes at offset {file_offset}")),
                        done,
                    )
                })?;
                if got > 0 {
                    // SAFETY: the dispatcher validated that [device_ptr, device_ptr + req.size) lies
                    // inside one device allocation; this chunk is within that range.
                    unsafe { runtime.copy_to_device(device_ptr, &host[..got]) }.map_err(|e| {
                        IoFailure::new(Error::hip(&e, "copying a chunk to the device"), done)
                    })?;
                }
                done += got;
                if got < n {
                    break;
                }
            }
            IoOp::Write => {
                // SAFETY: as for reads, the range was validated by the dispatcher.
                unsafe { runtime.copy_from_device(host, device_ptr) }.map_err(|e| {
                    IoFailure::new(Error::hip(&e, "copying a chunk from the device"), done)
                })?;
                pwrite_full(io, fd, host, file_offset).map_err(|e| {
                    IoFailure::new(
                        Error::from_io(&e, format!("writing {n} bytes at offset {file_offset}")),
                        done,
                    )
                })?;
                done += n;
            }
        }
    }
    Ok(done)
}
