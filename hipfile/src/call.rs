//! A request of the Rust API as the core driver takes it, whatever carries it (a file handle, a
//! batch, a stream): the operation, the device memory as its base and the offset into it (so a
//! registered buffer is found by its base), and offsets checked into the core's signed ones.

use hipfile_core::{Error, FileHandleId, IoCall, IoOp, Result};

use crate::memory::{AsDevice, AsDeviceMut};

/// Where a request's bytes lie in device memory: the allocation's base, the offset into it, and
/// the length. A read names memory it may write, a write memory it may read; past that, the two
/// are the same request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Place {
    pub(crate) base: usize,
    pub(crate) offset: usize,
    pub(crate) size: usize,
}

impl Place {
    /// The memory a read lands in.
    pub(crate) fn of_mut<M: AsDeviceMut + ?Sized>(memory: &mut M) -> Place {
        let view = memory.as_device_mut();
        Place {
            base: view.base(),
            offset: view.offset(),
            size: view.len(),
        }
    }

    /// The memory a write takes its bytes from.
    pub(crate) fn of<M: AsDevice + ?Sized>(memory: &M) -> Place {
        let view = memory.as_device();
        Place {
            base: view.base(),
            offset: view.offset(),
            size: view.len(),
        }
    }

    /// The buffer offset as the core driver's signed offset.
    pub(crate) fn signed_offset(&self) -> Result<i64> {
        signed(self.offset as u64)
    }
}

/// `op` of the bytes at `place` to or from `handle` at `file_offset`, as the core's call.
pub(crate) fn io_call(
    op: IoOp,
    handle: FileHandleId,
    place: Place,
    file_offset: u64,
) -> Result<IoCall> {
    Ok(IoCall {
        op,
        handle,
        buffer: place.base,
        size: place.size,
        file_offset: signed(file_offset)?,
        buffer_offset: place.signed_offset()?,
        loan: None,
    })
}

/// `offset` as the core driver's signed offset; past `i64::MAX` is `EINVAL`, as `pread(2)`.
pub(crate) fn signed(offset: u64) -> Result<i64> {
    i64::try_from(offset)
        .map_err(|_| Error::os(libc::EINVAL, "the offset is past the largest file offset"))
}
