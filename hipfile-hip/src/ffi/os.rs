//! The kernel calls `rustix` does not offer (or offers in a form that cannot hold every answer),
//! as typed operations: what [`crate::os`] and the file pins ([`crate::FileMapping`]) ask of the
//! kernel, and nothing more.

use std::io;
use std::os::fd::RawFd;

/// `fstat(2)` of the descriptor number `fd`, as the kernel's own `fstat` call where the
/// architecture has one. glibc (2.33 on) implements `fstat` as `fstatat(fd, "", AT_EMPTY_PATH)`,
/// which copies and checks the empty path before it reaches the same answer: 410 ns against 367
/// on a 6.18 kernel, more on kernels without the empty-path shortcut. Every request asks once
/// ([`crate::os::descriptor_state`]).
pub(crate) fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    let mut st = std::mem::MaybeUninit::<libc::stat>::zeroed();
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    // SAFETY: `st` is a writable `struct stat` for the duration of the call, which is what the
    // kernel's fstat of these architectures writes (libc's `stat` is the kernel's layout there);
    // fstat on any number only reads the descriptor table.
    let rc = unsafe { libc::syscall(libc::SYS_fstat, fd, st.as_mut_ptr()) };
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    // SAFETY: `st` is a writable stat buffer for the duration of the call; fstat on any number
    // only reads the descriptor table.
    let rc = unsafe { libc::fstat(fd, st.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the call succeeded, so it filled the buffer (which started zeroed anyway).
    Ok(unsafe { st.assume_init() })
}
