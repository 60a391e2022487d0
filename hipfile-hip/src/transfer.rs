//! What every direct-IO driver ([`crate::P2pDriver`]) shares, the platforms' (in `ffi`) and the
//! simulator's: the largest transfer one call issues, and how a driver's answer becomes a byte
//! count or an errno. It depends on nothing else of the crate.

use std::io;

/// Which way a direct-IO transfer moves bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    /// From the file into device memory ([`crate::P2pDriver::read`]).
    Read,
    /// From device memory into the file ([`crate::P2pDriver::write`]).
    Write,
}

/// Largest transfer one driver call issues, as Linux caps `read(2)`/`write(2)` (`MAX_RW_COUNT`).
/// Drivers cap every call at this; larger requests come back short and the caller continues.
pub const MAX_P2P_TRANSFER: usize = 0x7fff_f000;

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
