//! The live view of an open driver's counters: what `hipfile stats -p PID` reads.
//!
//! While statistics are on (level 1 or more), an open driver listens on the abstract Unix
//! socket named [`socket_name`] (`hipfile-stats-<pid>`, no file on disk). Each connection gets
//! one JSON document ([`crate::StatsSnapshot::to_json`], `"version": 1`) on one line, and is closed.
//! Only a peer of the same user, or root, is answered: the listener reads the peer's
//! credentials (`SO_PEERCRED`) and sends others `{"version": 1, "error": "..."}` instead.
//!
//! One thread per driver accepts connections; it is started when the driver opens and stopped,
//! its descriptor closed, when the driver closes. A process that opens several drivers serves
//! the first one's counters: the others find the name taken and serve nothing.
//!
//! A driver that served the socket also sends its final counters, the same document, when it
//! closes, to the abstract socket named by [`REPORT_ENV`] if the environment sets it:
//! `hipfile stats -- PROGRAM` listens there, so its summary holds everything the program did,
//! however soon after its last request the program closed the driver. (A process that exits
//! with its driver still open sends nothing; the summary then holds the last document read.)

use std::io::Write;
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::driver::Session;

/// The version of the JSON document the socket serves.
pub const PROTOCOL_VERSION: u64 = 1;

/// The environment variable naming the abstract socket a closing driver sends its final
/// counters to (without the leading NUL).
pub const REPORT_ENV: &str = "HIPFILE_STATS_REPORT";

/// The abstract socket name of process `pid`'s counters (without the leading NUL).
pub fn socket_name(pid: u32) -> String {
    format!("hipfile-stats-{pid}")
}

/// The abstract socket address of process `pid`'s counters.
pub fn socket_address(pid: u32) -> std::io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(socket_name(pid).as_bytes())
}

/// Whether a peer of user `peer_uid` may read the counters of a process of user `own_uid`: the
/// same user, or root.
pub fn peer_allowed(peer_uid: u32, own_uid: u32) -> bool {
    peer_uid == own_uid || peer_uid == 0
}

/// A listening socket and the thread that answers it.
#[derive(Debug)]
pub struct StatsServer {
    listener: Arc<UnixListener>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl StatsServer {
    /// Listen for `session`'s counters on this process's name; `None` when the name is taken
    /// (another driver of the process serves it) or the socket cannot be made.
    pub(crate) fn start(session: Weak<Session>) -> Option<StatsServer> {
        let address = socket_address(std::process::id()).ok()?;
        let listener = Arc::new(UnixListener::bind_addr(&address).ok()?);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::Builder::new()
            .name("hipfile-stats".into())
            .spawn({
                let listener = Arc::clone(&listener);
                let stop = Arc::clone(&stop);
                move || serve(&listener, &stop, &session)
            })
            .ok()?;
        Some(StatsServer {
            listener,
            stop,
            thread: Some(thread),
        })
    }

    /// Stop answering: wake the thread out of `accept`, wait for it, close the socket.
    pub(crate) fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.stop.store(true, Ordering::SeqCst);
        // Shutting a listening socket down makes a blocked `accept` return at once (Linux).
        let _ = rustix::net::shutdown(self.listener.as_fd(), rustix::net::Shutdown::Both);
        // The listener thread itself drops the session when its answer held the last
        // reference (a driver dropped open while it answered): it ends on its own, unjoined.
        if thread.thread().id() != std::thread::current().id() {
            let _ = thread.join();
        }
    }
}

impl Drop for StatsServer {
    fn drop(&mut self) {
        self.halt();
    }
}

fn serve(listener: &UnixListener, stop: &AtomicBool, session: &Weak<Session>) {
    let own_uid = rustix::process::geteuid().as_raw();
    while !stop.load(Ordering::SeqCst) {
        let Ok((stream, _)) = listener.accept() else {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            // A failed accept (the peer left, out of descriptors) must not spin.
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if stop.load(Ordering::SeqCst) {
            break;
        }
        answer(stream, own_uid, session);
    }
}

/// Send one document to the peer of `stream`: the counters, or why it may not read them.
fn answer(mut stream: UnixStream, own_uid: u32, session: &Weak<Session>) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let peer = rustix::net::sockopt::socket_peercred(&stream).map(|c| c.uid.as_raw());
    let document = match peer {
        Ok(uid) if peer_allowed(uid, own_uid) => match session.upgrade() {
            Some(session) => session.stats_snapshot().to_json(std::process::id()),
            None => refusal("the driver is closing"),
        },
        Ok(uid) => refusal(&format!(
            "user {uid} may not read the statistics of user {own_uid}'s process"
        )),
        Err(e) => refusal(&format!("the peer's credentials are unknown: {e}")),
    };
    let mut line = document.to_string();
    line.push('\n');
    let _ = stream.write_all(line.as_bytes());
}

/// Send `session`'s counters, as a closing driver's last word, to the socket [`REPORT_ENV`]
/// names; nothing when it is unset or nobody listens there.
pub(crate) fn report_final(session: &Session) {
    let Some(name) = std::env::var_os(REPORT_ENV) else {
        return;
    };
    use std::os::unix::ffi::OsStrExt;
    let Ok(address) = SocketAddr::from_abstract_name(name.as_bytes()) else {
        return;
    };
    let Ok(mut stream) = UnixStream::connect_addr(&address) else {
        return;
    };
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let mut line = session
        .stats_snapshot()
        .to_json(std::process::id())
        .to_string();
    line.push('\n');
    let _ = stream.write_all(line.as_bytes());
}

fn refusal(why: &str) -> serde_json::Value {
    serde_json::json!({ "version": PROTOCOL_VERSION, "error": why })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_user_or_root_may_read() {
        assert!(peer_allowed(1000, 1000));
        assert!(peer_allowed(0, 1000));
        assert!(peer_allowed(0, 0));
        assert!(!peer_allowed(1001, 1000));
        assert!(!peer_allowed(1000, 0));
    }

    #[test]
    fn the_name_carries_the_pid() {
        assert_eq!(socket_name(4242), "hipfile-stats-4242");
        let address = socket_address(4242).unwrap();
        assert_eq!(address.as_abstract_name(), Some(&b"hipfile-stats-4242"[..]));
    }
}
