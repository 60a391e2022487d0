//! Who is at the other end of a Unix socket: [`peer_credentials`].

use std::io;
use std::os::fd::BorrowedFd;

/// The process and user at the other end of a connected Unix socket, as the kernel recorded
/// them when that end connected (or, for the listening side, called `listen`): `SO_PEERCRED`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerCredentials {
    /// The peer's process id in this process's pid namespace; 0 when the peer's process is not
    /// visible from here (another namespace), which no process of ours can be.
    pub pid: i32,
    /// The peer's effective user id.
    pub uid: u32,
    /// The peer's effective group id.
    pub gid: u32,
}

/// `getsockopt(SO_PEERCRED)` on `fd`. The kernel answers pid 0 for a peer outside this pid
/// namespace: kept as it is, never turned into a "no process" that a typed process id would
/// have to assume away.
pub fn peer_credentials(fd: BorrowedFd<'_>) -> io::Result<PeerCredentials> {
    let (cred, len) = crate::ffi::os::peer_credentials(fd)?;
    if len != std::mem::size_of::<libc::ucred>() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("SO_PEERCRED answered {len} bytes"),
        ));
    }
    Ok(PeerCredentials {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::net::UnixStream;

    #[test]
    fn both_ends_of_a_pair_are_this_process() {
        let (a, _b) = UnixStream::pair().unwrap();
        let cred = peer_credentials(a.as_fd()).unwrap();
        assert_eq!(cred.pid, std::process::id() as i32);
        // A process's /proc directory belongs to its effective user and group.
        let me = std::fs::metadata("/proc/self").unwrap();
        assert_eq!((cred.uid, cred.gid), (me.uid(), me.gid()));
    }

    #[test]
    fn a_file_has_no_peer() {
        let file = std::fs::File::open("/dev/null").unwrap();
        assert!(peer_credentials(file.as_fd()).is_err());
    }
}
