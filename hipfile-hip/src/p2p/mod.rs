//! Direct IO drivers: the kernel path that moves bytes between storage and GPU memory with no CPU
//! copy (AMD's KFD through `hipAmdFileRead/Write`, NVIDIA's GPUDirect Storage through cuFile, and
//! the simulator's O_DIRECT straight into simulated device memory).
//!
//! A [`P2pDriver`] is mechanism only: it issues one transfer on an O_DIRECT descriptor and reports
//! the bytes moved or an OS error with its errno. Whether a request may take this path (alignment,
//! filesystem, memory kind, compat mode) is decided by the fastpath backend before it calls here;
//! what to do with a failure (ENODEV and EREMOTEIO fail over) is decided by the dispatcher.

pub mod cufile;

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;

/// Largest transfer one driver call issues, as Linux caps `read(2)`/`write(2)` (`MAX_RW_COUNT`).
/// Drivers cap every call at this; larger requests come back short and the caller continues.
pub const MAX_P2P_TRANSFER: usize = 0x7fff_f000;

/// A platform's direct storage <-> GPU memory path.
///
/// Calls may come from any thread, concurrently. A call may move fewer bytes than asked (a read at
/// end of file, a transfer capped at [`MAX_P2P_TRANSFER`], a driver that splits work); the caller
/// continues from where it stopped. `Ok(0)` from a read means end of file.
pub trait P2pDriver: Send + Sync + fmt::Debug {
    /// A short name for reports (`amd-kfd`, `cufile`, `sim`).
    fn name(&self) -> &'static str;

    /// Read up to `size` bytes at `file_offset` of `fd` into device memory at `device_ptr`.
    ///
    /// # Safety
    /// `fd` is an open O_DIRECT descriptor; `[device_ptr, device_ptr + size)` is device memory of
    /// this driver's runtime, inside one allocation (the caller validated it with the runtime's
    /// pointer query), and nothing else accesses it until the call returns.
    unsafe fn read(
        &self,
        fd: BorrowedFd<'_>,
        device_ptr: usize,
        size: usize,
        file_offset: u64,
    ) -> io::Result<usize>;

    /// Write up to `size` bytes from device memory at `device_ptr` to `file_offset` of `fd`.
    ///
    /// # Safety
    /// As for [`P2pDriver::read`], except that the device range is only read.
    unsafe fn write(
        &self,
        fd: BorrowedFd<'_>,
        device_ptr: usize,
        size: usize,
        file_offset: u64,
    ) -> io::Result<usize>;
}

/// An `io::Error` carrying `errno`.
pub(crate) fn errno_error(errno: i32) -> io::Error {
    io::Error::from_raw_os_error(errno)
}

/// The byte count a driver reported for a transfer of `asked` bytes: a count that is negative,
/// or larger than asked, is EIO, never trusted.
pub(crate) fn checked_count(count: impl TryInto<usize>, asked: usize) -> io::Result<usize> {
    count
        .try_into()
        .ok()
        .filter(|n| *n <= asked)
        .ok_or_else(|| errno_error(libc::EIO))
}
