//! The live view of an open driver's counters: what `hipfile stats -p PID` reads.
//!
//! While statistics are on (level 1 or more), an open driver listens for them at two addresses:
//! the socket file [`socket_path`] (`$XDG_RUNTIME_DIR/hipfile/stats-<pid>.sock`), when
//! `$XDG_RUNTIME_DIR` is a directory of this user's that nobody else may enter
//! ([`runtime_dir`]), and the abstract Unix socket named [`socket_name`] (`hipfile-stats-<pid>`,
//! no file on disk), which any local user could have bound first. Each connection gets one JSON
//! document ([`crate::StatsSnapshot::to_json`], `"version": 1`, and `"socket"`: where the driver
//! serves, [`StatsService::to_json`]) on one line, and is closed. Only a peer of the same user,
//! or root, is answered: the listener reads the peer's credentials (`SO_PEERCRED`) and sends
//! others `{"version": 1, "error": "..."}` instead.
//!
//! A reader ([`request`]) trusts an answer only from the process it asked for: the listening
//! socket's credentials must name that pid and the user expected to own it, whichever address
//! answered, so a squatter on the abstract name is refused, not believed. It reads at most
//! [`MAX_DOCUMENT_BYTES`] within [`ANSWER_DEADLINE`] for the whole answer.
//!
//! A driver that finds an address taken says so ([`StatsService`], a warning in the log): by
//! another process (a squatter, named with its pid and user), or, for the socket file, by an
//! earlier process of the same pid, whose file it replaces. Served at neither, the statistics
//! are requested but not served, and [`crate::Session::stats_service`] says why.
//!
//! One thread per address accepts connections; they start when the driver opens and stop, the
//! sockets closed and the socket file removed, when it closes. A process that opens several
//! drivers serves the first one's counters: the others find the process's claim taken and
//! serve nothing. A child forked from the process (without exec) gives the listening sockets up
//! as it starts ([`hipfile_hip::os::ForkReleased`]), so it cannot keep the parent's names bound
//! after the parent closed its driver; the parent's next driver binds them again.
//!
//! A driver whose counters were requested also sends its final counters, the same document,
//! when it closes, to the abstract socket named by [`REPORT_ENV`] if the environment sets it
//! and a process of the same user (or root) listens there: `hipfile stats -- PROGRAM` listens
//! there, so its summary holds everything the program did, however soon after its last request
//! the program closed the driver, and says when its statistics were not served. (A process that
//! exits with its driver still open sends nothing; the summary then holds the last document
//! read.)

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt};
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hipfile_hip::os::{peer_credentials, ForkReleased, PeerCredentials};

use crate::snapshot::StatsSnapshot;
pub use crate::snapshot::PROTOCOL_VERSION;

/// What a server answers with: the counters of the session it serves, read at each request.
pub(crate) trait CounterSource: Send + Sync {
    /// The counters now.
    fn snapshot(&self) -> StatsSnapshot;
}

/// The environment variable naming the abstract socket a closing driver sends its final
/// counters to (without the leading NUL).
pub const REPORT_ENV: &str = "HIPFILE_STATS_REPORT";

/// The largest document a reader accepts. A level-3 document takes about 2 KiB per GPU with
/// every counter at its largest, and a few KiB besides: 1024 GPUs take about half of this.
pub const MAX_DOCUMENT_BYTES: usize = 4 << 20;

/// How long a reader waits for a whole answer, from connecting to its last byte. A driver
/// answers in well under a millisecond.
pub const ANSWER_DEADLINE: Duration = Duration::from_secs(5);

/// The directory under [`runtime_dir`] that holds the socket files.
const SOCKET_DIR: &str = "hipfile";

/// The abstract socket name of process `pid`'s counters (without the leading NUL).
pub fn socket_name(pid: u32) -> String {
    format!("hipfile-stats-{pid}")
}

/// The abstract socket address of process `pid`'s counters.
pub fn socket_address(pid: u32) -> std::io::Result<SocketAddr> {
    SocketAddr::from_abstract_name(socket_name(pid).as_bytes())
}

/// The socket file of process `pid`'s counters under the runtime directory `dir` (see
/// [`runtime_dir`]).
pub fn socket_path(dir: &Path, pid: u32) -> PathBuf {
    dir.join(SOCKET_DIR).join(format!("stats-{pid}.sock"))
}

/// `$XDG_RUNTIME_DIR`, when it names a directory of this process's user that no one else may
/// enter; else why not.
pub fn runtime_dir() -> Result<PathBuf, String> {
    let dir = std::env::var_os("XDG_RUNTIME_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .ok_or("$XDG_RUNTIME_DIR is not set")?;
    if !dir.is_absolute() {
        return Err(format!(
            "$XDG_RUNTIME_DIR ({}) is not an absolute path",
            dir.display()
        ));
    }
    let meta = std::fs::metadata(&dir)
        .map_err(|e| format!("$XDG_RUNTIME_DIR ({}): {e}", dir.display()))?;
    private_to(meta.is_dir(), meta.uid(), meta.mode(), own_uid())
        .map_err(|why| format!("$XDG_RUNTIME_DIR ({}) {why}", dir.display()))?;
    Ok(dir)
}

/// Whether a file with these facts is a directory only user `uid` may use: a directory that
/// `uid` owns and that gives its group and others no access.
pub fn private_to(is_dir: bool, owner: u32, mode: u32, uid: u32) -> Result<(), String> {
    if !is_dir {
        Err("is not a directory".into())
    } else if owner != uid {
        Err(format!("belongs to user {owner}, not {uid}"))
    } else if mode & 0o077 != 0 {
        Err(format!(
            "lets other users in (mode {:03o}, not 700)",
            mode & 0o777
        ))
    } else {
        Ok(())
    }
}

/// Whether a peer of user `peer_uid` may read the counters of a process of user `own_uid`: the
/// same user, or root.
pub fn peer_allowed(peer_uid: u32, own_uid: u32) -> bool {
    peer_uid == own_uid || peer_uid == 0
}

/// The user that must own process `pid` for its answer to be trusted, asked by a process of
/// effective user `own_uid`: that user itself (a process answers only its own user and root,
/// so nothing else can be its answer), or, for root, the process's owner (`process_owner`, the
/// owner of `/proc/PID`; `None`: there is no such process).
pub fn owner_to_expect(own_uid: u32, process_owner: Option<u32>) -> Option<u32> {
    if own_uid == 0 {
        process_owner
    } else {
        Some(own_uid)
    }
}

/// Whether the socket whose listener is `peer` answers for process `pid` of user `uid`: only
/// that process itself does.
pub fn answers_for(pid: u32, uid: u32, peer: PeerCredentials) -> Result<(), String> {
    let peer_pid = u32::try_from(peer.pid).unwrap_or(0);
    if peer_pid == pid {
        if peer.uid == uid {
            return Ok(());
        }
        return Err(format!(
            "process {pid} runs as user {}, not {uid}: only its own user or root may read its \
             statistics",
            peer.uid
        ));
    }
    let who = if peer.pid == 0 {
        format!("a process outside this pid namespace, of user {}", peer.uid)
    } else {
        format!("process {} of user {}", peer.pid, peer.uid)
    };
    Err(format!(
        "it is held by {who}, not by process {pid} of user {uid}: its answer is refused \
         (another process took the name)"
    ))
}

fn own_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Where a driver serves its counters ([`crate::Session::stats_service`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatsService {
    /// Statistics are off (level 0): nothing to serve.
    Off,
    /// Served at `at` (socket files by path, abstract names as `@name`); `missed` says, one line
    /// each, at which addresses they could not be, and why (`no socket file: ...`,
    /// `@hipfile-stats-<pid> is held by ...`).
    Served {
        /// The addresses listened on.
        at: Vec<String>,
        /// The addresses that could not be taken, and why.
        missed: Vec<String>,
    },
    /// Another driver of this process serves the process's counters (the first one opened).
    ByAnotherDriver,
    /// Statistics are on, but served nowhere: why, one line per address.
    NotServed {
        /// Why each address could not be taken.
        why: Vec<String>,
    },
}

impl StatsService {
    /// As the `"socket"` member of a document: `state` (`off`, `served`, `another_driver`,
    /// `not_served`), `served_at` and `missed`.
    pub fn to_json(&self) -> serde_json::Value {
        let none: &[String] = &[];
        let (state, at, missed) = match self {
            StatsService::Off => ("off", none, none),
            StatsService::Served { at, missed } => ("served", &at[..], &missed[..]),
            StatsService::ByAnotherDriver => ("another_driver", none, none),
            StatsService::NotServed { why } => ("not_served", none, &why[..]),
        };
        serde_json::json!({ "state": state, "served_at": at, "missed": missed })
    }

    /// Whether this driver sends its final counters when it closes: it was asked to count and
    /// no other driver of the process speaks for it.
    fn reports_final(&self) -> bool {
        matches!(
            self,
            StatsService::Served { .. } | StatsService::NotServed { .. }
        )
    }
}

impl std::fmt::Display for StatsService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StatsService::Off => write!(f, "off (statistics level 0)"),
            StatsService::Served { at, missed } => {
                write!(f, "served at {}", at.join(", "))?;
                if !missed.is_empty() {
                    write!(f, "; {}", missed.join("; "))?;
                }
                Ok(())
            }
            StatsService::ByAnotherDriver => {
                write!(f, "served by another driver of this process")
            }
            StatsService::NotServed { why } => {
                write!(f, "requested but not served: {}", why.join("; "))
            }
        }
    }
}

/// The process whose statistics server holds the process's addresses (0: none). A forked
/// child finds its parent's pid here, and a claim of another process is no claim.
static SERVING_PID: AtomicU32 = AtomicU32::new(0);

fn claim(pid: u32) -> bool {
    SERVING_PID
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| {
            (held != pid).then_some(pid)
        })
        .is_ok()
}

fn release(pid: u32) {
    let _ = SERVING_PID.compare_exchange(pid, 0, Ordering::SeqCst, Ordering::SeqCst);
}

/// A socket file this server made: removed when it stops, if it is still the same file.
#[derive(Debug)]
struct SocketFile {
    path: PathBuf,
    /// Device and inode: a later process of the same pid may have replaced the file.
    id: (u64, u64),
}

/// The listening sockets and the threads that answer them.
#[derive(Debug)]
pub struct StatsServer {
    /// The process that bound the addresses: in a child forked from it, its copy of this value
    /// has no threads and no addresses to give back.
    pid: u32,
    listeners: Vec<Arc<ForkReleased<UnixListener>>>,
    file: Option<SocketFile>,
    /// Whether this server still holds the process's claim ([`SERVING_PID`]).
    claimed: bool,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl StatsServer {
    /// Listen for `session`'s counters at this process's addresses; the server (none when no
    /// address could be taken, or another driver of the process serves), and where it serves.
    pub(crate) fn start(session: Weak<dyn CounterSource>) -> (Option<StatsServer>, StatsService) {
        let pid = std::process::id();
        if !claim(pid) {
            log::info!(
                "statistics: another driver of this process serves them; this one's are read \
                 through Driver::stats only"
            );
            return (None, StatsService::ByAnotherDriver);
        }
        let mut listeners = Vec::new();
        let mut at = Vec::new();
        let mut missed = Vec::new();
        let mut file = None;
        match bind_file(pid) {
            Ok((listener, made)) => {
                at.push(made.path.display().to_string());
                listeners.push(listener);
                file = Some(made);
            }
            Err(why) => missed.push(format!("no socket file: {why}")),
        }
        match bind_abstract(pid) {
            Ok(listener) => {
                at.push(format!("@{}", socket_name(pid)));
                listeners.push(listener);
            }
            Err(why) => missed.push(why),
        }
        let mut server = StatsServer {
            pid,
            listeners: listeners
                .into_iter()
                .map(|l| Arc::new(ForkReleased::new(l)))
                .collect(),
            file,
            claimed: true,
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
        };
        let socket = Arc::new(OnceLock::new());
        for listener in &server.listeners {
            let spawned = std::thread::Builder::new()
                .name("hipfile-stats".into())
                .spawn({
                    let listener = Arc::clone(listener);
                    let stop = Arc::clone(&server.stop);
                    let session = session.clone();
                    let socket = Arc::clone(&socket);
                    move || serve(&listener, &stop, &session, &socket)
                });
            match spawned {
                Ok(thread) => server.threads.push(thread),
                Err(e) => {
                    missed.push(format!("no thread to answer: {e}"));
                    at.clear();
                    break;
                }
            }
        }
        if at.is_empty() {
            drop(server);
            log::warn!("statistics requested but not served: {}", missed.join("; "));
            return (None, StatsService::NotServed { why: missed });
        }
        if !missed.is_empty() {
            log::warn!(
                "statistics served at {}, but {}",
                at.join(", "),
                missed.join("; ")
            );
        }
        let service = StatsService::Served { at, missed };
        let _ = socket.set(service.to_json());
        (Some(server), service)
    }

    /// Stop answering: wake the threads out of `accept`, wait for them, close the sockets,
    /// remove the socket file.
    pub(crate) fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        let threads = std::mem::take(&mut self.threads);
        if std::process::id() != self.pid {
            // A forked child's copy: the threads live in the parent only (joining them would wait
            // forever), and the addresses and the claim are the parent's.
            std::mem::forget(threads);
            return;
        }
        if !std::mem::take(&mut self.claimed) {
            return;
        }
        self.stop.store(true, Ordering::SeqCst);
        for listener in &self.listeners {
            // Shutting a listening socket down makes a blocked `accept` return at once (Linux).
            let _ = rustix::net::shutdown(listener.as_fd(), rustix::net::Shutdown::Both);
        }
        if let Some(file) = self.file.take() {
            let same =
                std::fs::symlink_metadata(&file.path).is_ok_and(|m| (m.dev(), m.ino()) == file.id);
            if same {
                let _ = std::fs::remove_file(&file.path);
            }
        }
        // A listener thread itself drops the session when its answer held the last reference
        // (a driver dropped open while it answered): it ends on its own, unjoined.
        for thread in threads {
            if thread.thread().id() != std::thread::current().id() {
                let _ = thread.join();
            }
        }
        self.listeners.clear();
        release(self.pid);
    }
}

impl Drop for StatsServer {
    fn drop(&mut self) {
        self.halt();
    }
}

/// Bind the socket file of process `pid` under [`runtime_dir`], making its directory.
fn bind_file(pid: u32) -> Result<(UnixListener, SocketFile), String> {
    let runtime = runtime_dir()?;
    let path = socket_path(&runtime, pid);
    let dir = runtime.join(SOCKET_DIR);
    match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    }
    let meta = std::fs::symlink_metadata(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    private_to(meta.is_dir(), meta.uid(), meta.mode(), own_uid())
        .map_err(|why| format!("{} {why}", dir.display()))?;
    let listener = match UnixListener::bind(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
            // Left by an earlier process with this pid, or by an earlier driver of this one
            // (no driver of this process serves it now: the claim says so), and nobody else can
            // write in this directory. A file someone still answers on is a live process of
            // this user with our number (another pid namespace sharing the directory): left be.
            if UnixStream::connect(&path).is_ok() {
                return Err(format!(
                    "{}: a process of this user with the same number listens there",
                    path.display()
                ));
            }
            let _ = std::fs::remove_file(&path);
            UnixListener::bind(&path)
        }
        bound => bound,
    }
    .map_err(|e| format!("{}: {e}", path.display()))?;
    let made = std::fs::symlink_metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((
        listener,
        SocketFile {
            path,
            id: (made.dev(), made.ino()),
        },
    ))
}

/// Bind the abstract name of process `pid`; a taken name names its holder.
fn bind_abstract(pid: u32) -> Result<UnixListener, String> {
    let name = socket_name(pid);
    let address = socket_address(pid).map_err(|e| format!("@{name}: {e}"))?;
    UnixListener::bind_addr(&address).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            format!("@{name} is held by {}", holder_of(&name))
        } else {
            format!("@{name}: {e}")
        }
    })
}

/// Who listens on the abstract name `name`, in words.
fn holder_of(name: &str) -> String {
    let holder = rustix::net::SocketAddrUnix::new_abstract_name(name.as_bytes())
        .map_err(std::io::Error::from)
        .and_then(|address| connect(&address, Instant::now() + Duration::from_millis(200)))
        .and_then(|stream| peer_credentials(stream.as_fd()));
    match holder {
        Ok(peer) if u32::try_from(peer.pid) == Ok(std::process::id()) => {
            "a socket this process made earlier (a process forked from it keeps it)".to_string()
        }
        Ok(peer) if peer.pid == 0 => {
            format!("a process outside this pid namespace, of user {}", peer.uid)
        }
        Ok(peer) => format!("process {} of user {}", peer.pid, peer.uid),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            "a socket that no longer listens (a process forked from this one may keep a socket \
             this one closed)"
                .to_string()
        }
        Err(e) => format!("a socket that does not say whose it is ({e})"),
    }
}

fn serve(
    listener: &UnixListener,
    stop: &AtomicBool,
    session: &Weak<dyn CounterSource>,
    socket: &OnceLock<serde_json::Value>,
) {
    let own_uid = own_uid();
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
        answer(stream, own_uid, session, socket.get());
    }
}

/// Send one document to the peer of `stream`: the counters, or why it may not read them.
fn answer(
    mut stream: UnixStream,
    own_uid: u32,
    session: &Weak<dyn CounterSource>,
    socket: Option<&serde_json::Value>,
) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let peer = peer_credentials(stream.as_fd()).map(|c| c.uid);
    let document = match peer {
        Ok(uid) if peer_allowed(uid, own_uid) => match session.upgrade() {
            Some(session) => {
                let mut doc = session.snapshot().to_json(std::process::id());
                if let (Some(fields), Some(socket)) = (doc.as_object_mut(), socket) {
                    fields.insert("socket".into(), socket.clone());
                }
                doc
            }
            None => refusal("the driver is closing"),
        },
        Ok(uid) => refusal(&format!(
            "user {uid} may not read the statistics of user {own_uid}'s process"
        )),
        Err(e) => refusal(&format!("the peer's credentials are unknown: {e}")),
    };
    let mut line = document.to_string();
    line.push('\n');
    send_whole(&mut stream, &line);
}

/// Write `line` and end the connection's sending side: the reader sees its end at once, even
/// where a process forked meanwhile holds a copy of the descriptor (a shutdown acts on the
/// socket, not on one descriptor of it).
fn send_whole(stream: &mut UnixStream, line: &str) {
    let _ = stream.write_all(line.as_bytes());
    let _ = stream.shutdown(std::net::Shutdown::Write);
}

/// Send `session`'s counters, as a closing driver's last word, to the socket [`REPORT_ENV`]
/// names; nothing when it is unset, nobody listens there, a process of another user (not root)
/// does, or no other driver of the process was asked to count (`service` says where `session`
/// served them).
pub(crate) fn report_final(session: &dyn CounterSource, service: StatsService) {
    if !service.reports_final() {
        return;
    }
    let Some(name) = std::env::var_os(REPORT_ENV) else {
        return;
    };
    use std::os::unix::ffi::OsStrExt;
    let Ok(address) = rustix::net::SocketAddrUnix::new_abstract_name(name.as_bytes()) else {
        return;
    };
    let Ok(mut stream) = connect(&address, Instant::now() + Duration::from_secs(1)) else {
        return;
    };
    let listener_allowed =
        peer_credentials(stream.as_fd()).is_ok_and(|c| peer_allowed(c.uid, own_uid()));
    if !listener_allowed {
        log::warn!(
            "statistics: the final counters were not sent to {}: its listener is another user's",
            name.to_string_lossy()
        );
        return;
    }
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let mut doc = session.snapshot().to_json(std::process::id());
    if let Some(fields) = doc.as_object_mut() {
        fields.insert("socket".into(), service.to_json());
    }
    let mut line = doc.to_string();
    line.push('\n');
    send_whole(&mut stream, &line);
}

fn refusal(why: &str) -> serde_json::Value {
    serde_json::json!({ "version": PROTOCOL_VERSION, "error": why })
}

/// Connect to `address` before `deadline`: a listener whose queue is full (one that never
/// accepts) makes a blocking connect wait without end, so the attempt is non-blocking and
/// repeated. The stream returned blocks.
fn connect(
    address: &rustix::net::SocketAddrUnix,
    deadline: Instant,
) -> std::io::Result<UnixStream> {
    use rustix::net::{AddressFamily, SocketFlags, SocketType};
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::STREAM,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    loop {
        match rustix::net::connect(&fd, address) {
            Ok(()) => break,
            Err(rustix::io::Errno::INTR) => {}
            Err(rustix::io::Errno::AGAIN) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let stream = UnixStream::from(fd);
    stream.set_nonblocking(false)?;
    Ok(stream)
}

/// Why process `pid`'s counters could not be read ([`request`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RequestError {
    /// Nothing answers for the process: it is gone, or no driver of it counts statistics.
    NotServed(String),
    /// Something other than the process holds its address: its answer was not read.
    Impostor(String),
    /// The process answered, but not with a document: too large, too slow, not JSON.
    BadAnswer(String),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::NotServed(why)
            | RequestError::Impostor(why)
            | RequestError::BadAnswer(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for RequestError {}

/// Read process `pid`'s counters: the document it sends (a refusal document included, as it
/// came), from its socket file, else its abstract name, trusted only when the process itself
/// holds the address, at most [`MAX_DOCUMENT_BYTES`] within [`ANSWER_DEADLINE`].
pub fn request(pid: u32) -> Result<serde_json::Value, RequestError> {
    request_from(pid, None, ANSWER_DEADLINE)
}

/// [`request`], looking for socket files under `runtime_dirs` (`None`: this process's
/// [`runtime_dir`] when the process asked for is its own user's, and `/run/user/<uid>`, the
/// runtime directory systemd makes for each user) before the abstract name, with `limit` for
/// the whole answer.
pub fn request_from(
    pid: u32,
    runtime_dirs: Option<&[PathBuf]>,
    limit: Duration,
) -> Result<serde_json::Value, RequestError> {
    let deadline = Instant::now() + limit;
    let owner = std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid());
    let not_served = |why: &str| {
        RequestError::NotServed(format!(
            "process {pid} serves no statistics ({why}): is it running with a driver open and \
             HIPFILE_STATS_LEVEL set to 1 or more?"
        ))
    };
    if owner.is_none() {
        return Err(not_served("there is no such process"));
    }
    let Some(uid) = owner_to_expect(own_uid(), owner) else {
        return Err(not_served("there is no such process"));
    };
    let dirs = match runtime_dirs {
        Some(dirs) => dirs.to_vec(),
        None => usual_runtime_dirs(uid),
    };
    for path in dirs.iter().map(|dir| socket_path(dir, pid)) {
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if !meta.file_type().is_socket() || meta.uid() != uid {
            continue;
        }
        let Ok(address) = rustix::net::SocketAddrUnix::new(&path) else {
            continue;
        };
        // A file nobody listens on is one an earlier process left: the abstract name may answer.
        if let Ok(stream) = connect(&address, deadline) {
            return document_from(
                stream,
                pid,
                uid,
                &path.display().to_string(),
                deadline,
                limit,
            );
        }
    }
    let name = socket_name(pid);
    let address = rustix::net::SocketAddrUnix::new_abstract_name(name.as_bytes())
        .map_err(|e| not_served(&e.to_string()))?;
    match connect(&address, deadline) {
        Ok(stream) => document_from(stream, pid, uid, &format!("@{name}"), deadline, limit),
        Err(e) => Err(not_served(&e.to_string())),
    }
}

/// The runtime directories a process of user `uid` may keep its socket file under (see
/// [`request_from`]).
fn usual_runtime_dirs(uid: u32) -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if uid == own_uid() {
        if let Ok(dir) = runtime_dir() {
            dirs.push(dir);
        }
    }
    let systemd = PathBuf::from(format!("/run/user/{uid}"));
    if !dirs.contains(&systemd) {
        dirs.push(systemd);
    }
    dirs
}

/// The document on `stream`, which `at` names, once its listener proved to be process `pid` of
/// user `uid`.
fn document_from(
    mut stream: UnixStream,
    pid: u32,
    uid: u32,
    at: &str,
    deadline: Instant,
    limit: Duration,
) -> Result<serde_json::Value, RequestError> {
    let peer = peer_credentials(stream.as_fd()).map_err(|e| {
        RequestError::Impostor(format!(
            "the statistics socket of process {pid} ({at}) does not say whose it is ({e}): its \
             answer is refused"
        ))
    })?;
    answers_for(pid, uid, peer).map_err(|why| {
        RequestError::Impostor(format!(
            "the statistics socket of process {pid} ({at}): {why}"
        ))
    })?;
    let text = read_document(&mut stream, deadline, limit)
        .map_err(|why| RequestError::BadAnswer(format!("process {pid}: {why}")))?;
    serde_json::from_slice(&text).map_err(|e| {
        RequestError::BadAnswer(format!("process {pid} sent no statistics document: {e}"))
    })
}

/// Read `stream` to its end, at most [`MAX_DOCUMENT_BYTES`], before `deadline` (`limit` after
/// the reading began, for the message).
pub fn read_document(
    stream: &mut UnixStream,
    deadline: Instant,
    limit: Duration,
) -> Result<Vec<u8>, String> {
    let mut doc = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!(
                "its answer did not end within {:.1} s ({} bytes came)",
                limit.as_secs_f64(),
                doc.len()
            ));
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|e| format!("reading its answer: {e}"))?;
        match stream.read(&mut chunk) {
            Ok(0) => return Ok(doc),
            Ok(n) if doc.len() + n > MAX_DOCUMENT_BYTES => {
                return Err(format!(
                    "its answer is longer than {} MiB, the most a statistics document may be",
                    MAX_DOCUMENT_BYTES >> 20
                ))
            }
            Ok(n) => doc.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(format!("reading its answer: {e}")),
        }
    }
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
    fn the_names_carry_the_pid() {
        assert_eq!(socket_name(4242), "hipfile-stats-4242");
        let address = socket_address(4242).unwrap();
        assert_eq!(address.as_abstract_name(), Some(&b"hipfile-stats-4242"[..]));
        assert_eq!(
            socket_path(Path::new("/run/user/1000"), 4242),
            Path::new("/run/user/1000/hipfile/stats-4242.sock")
        );
    }

    #[test]
    fn only_a_directory_of_the_user_alone_holds_socket_files() {
        assert_eq!(private_to(true, 1000, 0o40700, 1000), Ok(()));
        assert!(private_to(false, 1000, 0o100600, 1000)
            .unwrap_err()
            .contains("not a directory"));
        assert!(private_to(true, 1001, 0o40700, 1000)
            .unwrap_err()
            .contains("belongs to user 1001"));
        assert!(private_to(true, 1000, 0o40770, 1000)
            .unwrap_err()
            .contains("mode 770"));
        assert!(private_to(true, 1000, 0o41777, 1000)
            .unwrap_err()
            .contains("mode 777"));
    }

    #[test]
    fn a_reader_expects_its_own_user_or_as_root_the_processs_owner() {
        assert_eq!(owner_to_expect(1000, Some(1000)), Some(1000));
        // A process of another user answers a non-root reader nothing: only its own user's
        // process can be the answer, whoever owns the pid now.
        assert_eq!(owner_to_expect(1000, Some(1001)), Some(1000));
        assert_eq!(owner_to_expect(1000, None), Some(1000));
        assert_eq!(owner_to_expect(0, Some(1001)), Some(1001));
        assert_eq!(owner_to_expect(0, None), None);
    }

    #[test]
    fn only_the_process_asked_for_answers_for_it() {
        let peer = |pid, uid| PeerCredentials { pid, uid, gid: 0 };
        assert_eq!(answers_for(42, 1000, peer(42, 1000)), Ok(()));
        let squatter = answers_for(42, 1000, peer(77, 1001)).unwrap_err();
        assert!(squatter.contains("process 77 of user 1001"), "{squatter}");
        assert!(
            squatter.contains("not by process 42 of user 1000"),
            "{squatter}"
        );
        let same_user = answers_for(42, 1000, peer(77, 1000)).unwrap_err();
        assert!(same_user.contains("process 77 of user 1000"), "{same_user}");
        let other_user = answers_for(42, 1000, peer(42, 1001)).unwrap_err();
        assert!(
            other_user.contains("process 42 runs as user 1001, not 1000"),
            "{other_user}"
        );
        let hidden = answers_for(42, 1000, peer(0, 1000)).unwrap_err();
        assert!(hidden.contains("outside this pid namespace"), "{hidden}");
    }

    #[test]
    fn a_reader_stops_at_the_size_bound() {
        let (mut reader, mut writer) = UnixStream::pair().unwrap();
        let flood = std::thread::spawn(move || {
            let block = vec![b'x'; 1 << 20];
            while writer.write_all(&block).is_ok() {}
        });
        let started = Instant::now();
        let e = read_document(
            &mut reader,
            started + Duration::from_secs(30),
            Duration::from_secs(30),
        )
        .unwrap_err();
        assert!(e.contains("longer than 4 MiB"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(10));
        drop(reader);
        flood.join().unwrap();
    }

    #[test]
    fn a_reader_stops_at_the_deadline_of_the_whole_answer() {
        let (mut reader, mut writer) = UnixStream::pair().unwrap();
        let (done, finished) = std::sync::mpsc::channel::<()>();
        let drip = std::thread::spawn(move || {
            // One byte every 100 ms: each read returns in time, the answer never ends.
            while finished.recv_timeout(Duration::from_millis(100)).is_err() {
                if writer.write_all(b"{").is_err() {
                    break;
                }
            }
        });
        let started = Instant::now();
        let limit = Duration::from_millis(700);
        let e = read_document(&mut reader, started + limit, limit).unwrap_err();
        let took = started.elapsed();
        assert!(e.contains("did not end within 0.7 s"), "{e}");
        assert!(
            took >= limit && took < limit + Duration::from_secs(1),
            "{took:?}"
        );
        let _ = done.send(());
        drip.join().unwrap();
    }

    #[test]
    fn a_complete_answer_is_read_to_its_end() {
        let (mut reader, mut writer) = UnixStream::pair().unwrap();
        writer.write_all(b"{\"version\": 1}\n").unwrap();
        drop(writer);
        let deadline = Instant::now() + Duration::from_secs(5);
        let text = read_document(&mut reader, deadline, Duration::from_secs(5)).unwrap();
        assert_eq!(text, b"{\"version\": 1}\n");
    }

    #[test]
    fn a_level_three_document_of_1024_gpus_at_their_largest_counts_fits_with_room() {
        use crate::{DirectionCounts, GpuCounts, OpCount, StatsSnapshot};
        let full = DirectionCounts {
            ok: u64::MAX,
            err: u64::MAX,
            bytes: u64::MAX,
            unaligned: u64::MAX,
            direct: u64::MAX,
            staged: u64::MAX,
            host: u64::MAX,
            latency_sum_us: u64::MAX,
            window_us: u64::MAX,
            size_kb_hist: [u64::MAX; 32],
        };
        let gpu = GpuCounts {
            device: i32::MAX,
            read: full,
            write: full,
            buf_register: OpCount {
                ok: u64::MAX,
                err: u64::MAX,
            },
            buf_deregister: u64::MAX,
            registered_bytes: u64::MAX,
        };
        let snapshot = StatsSnapshot {
            level: 3,
            read: full,
            write: full,
            batch_read: full,
            batch_write: full,
            gpus: vec![gpu; 1024],
            ..StatsSnapshot::default()
        };
        let len = snapshot.to_json(u32::MAX).to_string().len();
        assert!(len * 3 / 2 <= MAX_DOCUMENT_BYTES, "{len} bytes");
    }

    #[test]
    fn the_service_says_where_it_serves_and_where_not() {
        let served = StatsService::Served {
            at: vec!["/run/user/1000/hipfile/stats-7.sock".into()],
            missed: vec!["@hipfile-stats-7 is held by process 9 of user 1001".into()],
        };
        let json = served.to_json();
        assert_eq!(json["state"], "served");
        assert_eq!(json["served_at"][0], "/run/user/1000/hipfile/stats-7.sock");
        assert_eq!(
            served.to_string(),
            "served at /run/user/1000/hipfile/stats-7.sock; @hipfile-stats-7 is held by process \
             9 of user 1001"
        );
        let not = StatsService::NotServed {
            why: vec!["$XDG_RUNTIME_DIR is not set".into()],
        };
        assert_eq!(not.to_json()["state"], "not_served");
        assert!(not.to_string().starts_with("requested but not served"));
        assert!(not.reports_final() && served.reports_final());
        assert!(!StatsService::ByAnotherDriver.reports_final());
        assert!(!StatsService::Off.reports_final());
    }
}
