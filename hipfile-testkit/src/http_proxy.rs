//! A fault-injecting HTTP/1.1 proxy for the failure tests of remote reads and writes.
//!
//! The remote engine talks to real servers (Ceph's RADOS Gateway for S3, nginx for plain HTTP),
//! and neither can be told to fail on cue. [`FaultProxy`] sits between the client and such a
//! server: it listens on `127.0.0.1` (a port the OS picks, [`FaultProxy::url`]), forwards every
//! client connection to one upstream `host:port`, and applies scripted faults to chosen
//! requests:
//!
//! - answer with a status (503, 500, 429...) and a small body without forwarding
//!   ([`Fault::Respond`], [`Fault::status`]): a transiently failing server;
//! - hold the response head back ([`Fault::DelayHead`]) or pause in the middle of the body
//!   ([`Fault::StallBody`]): a slow server, for timeouts;
//! - invert one byte of the response body ([`Fault::FlipBodyByte`]) or of the request body
//!   ([`Fault::FlipRequestBodyByte`]): corruption on the wire, towards the client or the server;
//! - close both connections after some bytes of the response body ([`Fault::CutResponse`]) or of
//!   the request body ([`Fault::CutRequest`]): a gateway dying in the middle of a read or an
//!   upload.
//!
//! Rules ([`Rule`]) can be added while the proxy runs; each names how many requests it applies
//! to and optionally a method and a substring of the request target, and the first matching rule
//! with requests left applies (one fault per request). [`FaultProxy::counts`] counts connections
//! and requests seen, forwarded and faulted, and [`FaultProxy::fired`] lists which fault hit
//! which request, so a test can assert that retries happened. Dropping the proxy closes its
//! listener and every connection it holds, and wakes any delay in progress.
//!
//! The proxy understands just enough HTTP/1.1 to find where requests and responses end:
//! `Content-Length` and chunked bodies (offsets of the body faults count payload bytes, not
//! chunk framing), bodies delimited by the server closing, keep-alive on both sides (one upstream
//! connection per client connection, reopened when the server closed it), interim `1xx`
//! responses, and `Expect: 100-continue` passed through to the server (the body follows the
//! server's `100 Continue`, or one second of silence, as clients do). Heads are forwarded byte
//! for byte, so signed headers such as S3's `Host` stay valid when the client signs for the
//! proxy's address.
//!
//! It does not do TLS, HTTP/2, `CONNECT`, absolute-form targets, or protocol upgrades, and it is
//! not hardened against hostile peers beyond bounding head sizes. A request body is forwarded
//! whole before the response is read, so a server that answers early and closes without reading
//! the body ends the client's connection instead. One thread per client connection, blocking
//! `std::net`.
//!
//! ```
//! use std::io::{Read, Write};
//! use std::net::{TcpListener, TcpStream};
//! use hipfile_testkit::http_proxy::{Fault, FaultProxy, Rule};
//!
//! // A server that answers every request on a connection with "hello".
//! let server = TcpListener::bind("127.0.0.1:0")?;
//! let upstream = server.local_addr()?;
//! std::thread::spawn(move || {
//!     for mut conn in server.incoming().flatten() {
//!         let mut buf = [0u8; 1024];
//!         while conn.read(&mut buf).map_or(false, |n| n > 0) {
//!             let _ = conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello");
//!         }
//!     }
//! });
//!
//! let proxy = FaultProxy::start(upstream)?;
//! proxy.inject(Rule::new(Fault::status(503)).method("GET"));
//! let mut client = TcpStream::connect(proxy.addr())?;
//! client.write_all(b"GET /key HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
//! let mut answer = String::new();
//! client.read_to_string(&mut answer)?;
//! assert!(answer.starts_with("HTTP/1.1 503 "));
//! assert_eq!(proxy.counts().forwarded, 0);
//! assert_eq!(proxy.counts().faulted, 1);
//! # Ok::<(), std::io::Error>(())
//! ```

use std::collections::HashMap;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

/// The longest request or response head (start line and headers) the proxy reads.
const MAX_HEAD: u64 = 64 * 1024;
/// How long a client waits for `100 Continue` before sending its body anyway (curl's default).
const EXPECT_WAIT: Duration = Duration::from_secs(1);
const COPY_CHUNK: usize = 64 * 1024;

/// What the proxy does to a request a [`Rule`] matches.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Fault {
    /// Answer with `status` and `body` without forwarding the request (its body is read and
    /// dropped, so the connection stays usable unless the client asked for `100 Continue`).
    Respond {
        /// The status code, such as 503, 500 or 429.
        status: u16,
        /// The response body, sent with its `Content-Length`.
        body: String,
    },
    /// Forward the request, then hold the response head back this long.
    DelayHead(Duration),
    /// Forward the request, then pause `pause` after `after` bytes of the response body.
    StallBody {
        /// Body bytes sent before the pause.
        after: u64,
        /// How long the body stops.
        pause: Duration,
    },
    /// Forward the request and invert the response body's byte at `offset` (nothing happens to
    /// a shorter body).
    FlipBodyByte {
        /// The byte's offset in the body (in the payload of a chunked body).
        offset: u64,
    },
    /// Forward the request with its body's byte at `offset` inverted (nothing happens to a
    /// shorter body), and the response untouched: an upload corrupted on its way to the server.
    FlipRequestBodyByte {
        /// The byte's offset in the request body (in the payload of a chunked body).
        offset: u64,
    },
    /// Forward the request, send `after` bytes of the response body and close both connections
    /// (a body of at most `after` bytes goes through whole).
    CutResponse {
        /// Body bytes sent before the cut.
        after: u64,
    },
    /// Forward the request head and `after` bytes of its body, then close both connections (a
    /// body of at most `after` bytes goes through whole).
    CutRequest {
        /// Request body bytes forwarded before the cut.
        after: u64,
    },
}

impl Fault {
    /// [`Fault::Respond`] with `status` and a one-line plain-text body naming it.
    pub fn status(status: u16) -> Self {
        Fault::Respond {
            status,
            body: format!("hipfile-testkit proxy: injected {status}\n"),
        }
    }
}

/// A fault, how many requests it applies to, and which requests. A [`Fault`] converts into a
/// rule for the next request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    fault: Fault,
    times: Option<u64>,
    method: Option<String>,
    target_contains: Option<String>,
}

impl Rule {
    /// `fault` for the next matching request.
    pub fn new(fault: Fault) -> Self {
        Rule {
            fault,
            times: Some(1),
            method: None,
            target_contains: None,
        }
    }

    /// Apply to the next `n` matching requests.
    pub fn times(mut self, n: u64) -> Self {
        self.times = Some(n);
        self
    }

    /// Apply to every matching request until [`FaultProxy::clear`].
    pub fn always(mut self) -> Self {
        self.times = None;
        self
    }

    /// Match only requests with this method (`GET`, `PUT`, ...; compared exactly).
    pub fn method(mut self, method: impl Into<String>) -> Self {
        self.method = Some(method.into());
        self
    }

    /// Match only requests whose target (path and query) contains `part`.
    pub fn target_contains(mut self, part: impl Into<String>) -> Self {
        self.target_contains = Some(part.into());
        self
    }

    fn matches(&self, method: &str, target: &str) -> bool {
        self.times != Some(0)
            && self.method.as_deref().map_or(true, |m| m == method)
            && self
                .target_contains
                .as_deref()
                .map_or(true, |part| target.contains(part))
    }
}

impl From<Fault> for Rule {
    fn from(fault: Fault) -> Self {
        Rule::new(fault)
    }
}

/// What the proxy has seen since it started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Client connections accepted.
    pub connections: u64,
    /// Request heads read from clients.
    pub seen: u64,
    /// Request heads sent upstream.
    pub forwarded: u64,
    /// Requests a rule applied to.
    pub faulted: u64,
}

/// A fault that hit a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fired {
    /// The request's number among all the proxy has seen, from 1.
    pub request: u64,
    /// Its method.
    pub method: String,
    /// Its target (path and query).
    pub target: String,
    /// The fault applied.
    pub fault: Fault,
}

/// The proxy: listening from [`FaultProxy::start`] until dropped.
pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Listen on `127.0.0.1` at a port the OS picks and forward to `upstream`, resolved once
    /// here (each connection tries its addresses in order).
    pub fn start(upstream: impl ToSocketAddrs) -> io::Result<Self> {
        let upstream: Vec<SocketAddr> = upstream.to_socket_addrs()?.collect();
        if upstream.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the upstream address resolves to nothing",
            ));
        }
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            upstream,
            rules: Mutex::default(),
            fired: Mutex::default(),
            connections: AtomicU64::new(0),
            seen: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            faulted: AtomicU64::new(0),
            streams: Mutex::default(),
            stopped: Mutex::new(false),
            wake: Condvar::new(),
        });
        let acceptor = {
            let shared = Arc::clone(&shared);
            thread::Builder::new()
                .name("http-proxy-accept".into())
                .spawn(move || accept(listener, shared))?
        };
        Ok(FaultProxy {
            addr,
            shared,
            acceptor: Some(acceptor),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`, the endpoint to give a client.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Add a rule after those already pending; it applies from the next request head read.
    pub fn inject(&self, rule: impl Into<Rule>) {
        lock(&self.shared.rules).push(rule.into());
    }

    /// Drop every pending rule.
    pub fn clear(&self) {
        lock(&self.shared.rules).clear();
    }

    /// Connections and requests so far.
    pub fn counts(&self) -> Counts {
        let s = &self.shared;
        Counts {
            connections: s.connections.load(Ordering::SeqCst),
            seen: s.seen.load(Ordering::SeqCst),
            forwarded: s.forwarded.load(Ordering::SeqCst),
            faulted: s.faulted.load(Ordering::SeqCst),
        }
    }

    /// The faults applied so far, in order.
    pub fn fired(&self) -> Vec<Fired> {
        lock(&self.shared.fired).clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        *lock(&self.shared.stopped) = true;
        self.shared.wake.notify_all();
        // The acceptor blocks in accept(): one connection wakes it to see the flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
        for stream in lock(&self.shared.streams).values().flatten() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

struct Shared {
    upstream: Vec<SocketAddr>,
    rules: Mutex<Vec<Rule>>,
    fired: Mutex<Vec<Fired>>,
    connections: AtomicU64,
    seen: AtomicU64,
    forwarded: AtomicU64,
    faulted: AtomicU64,
    /// Clones of every open socket by client connection, for the drop to shut down.
    streams: Mutex<HashMap<u64, Vec<TcpStream>>>,
    stopped: Mutex<bool>,
    wake: Condvar,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn stopped(&self) -> bool {
        *lock(&self.stopped)
    }

    /// Sleep `pause`; an error if the proxy stops meanwhile, so nothing more is sent.
    fn pause(&self, pause: Duration) -> io::Result<()> {
        let guard = lock(&self.stopped);
        let (stopped, _) = self
            .wake
            .wait_timeout_while(guard, pause, |stopped| !*stopped)
            .unwrap_or_else(PoisonError::into_inner);
        if *stopped {
            return Err(io::ErrorKind::ConnectionAborted.into());
        }
        Ok(())
    }

    /// Keep a clone of `stream` for the drop; shut it at once if the proxy already stopped.
    fn track(&self, connection: u64, stream: &TcpStream) -> io::Result<()> {
        let mut streams = lock(&self.streams);
        if self.stopped() {
            let _ = stream.shutdown(Shutdown::Both);
            return Err(io::ErrorKind::ConnectionAborted.into());
        }
        streams
            .entry(connection)
            .or_default()
            .push(stream.try_clone()?);
        Ok(())
    }

    fn take_fault(&self, request: u64, method: &str, target: &str) -> Option<Fault> {
        let fault = {
            let mut rules = lock(&self.rules);
            let index = rules.iter().position(|r| r.matches(method, target))?;
            if let Some(left) = rules[index].times.as_mut() {
                *left -= 1;
            }
            let fault = rules[index].fault.clone();
            if rules[index].times == Some(0) {
                rules.remove(index);
            }
            fault
        };
        self.faulted.fetch_add(1, Ordering::SeqCst);
        lock(&self.fired).push(Fired {
            request,
            method: method.to_owned(),
            target: target.to_owned(),
            fault: fault.clone(),
        });
        Some(fault)
    }
}

fn accept(listener: TcpListener, shared: Arc<Shared>) {
    let mut next_id = 0u64;
    for client in listener.incoming() {
        if shared.stopped() {
            break;
        }
        let Ok(client) = client else { continue };
        next_id += 1;
        let id = next_id;
        shared.connections.fetch_add(1, Ordering::SeqCst);
        if shared.track(id, &client).is_err() {
            continue;
        }
        let for_thread = Arc::clone(&shared);
        let spawned = thread::Builder::new()
            .name(format!("http-proxy-{id}"))
            .spawn(move || {
                let shared = for_thread;
                let mut connection = Connection {
                    id,
                    shared: Arc::clone(&shared),
                    client: BufReader::new(client),
                    upstream: None,
                };
                connection.serve();
                drop(connection);
                lock(&shared.streams).remove(&id);
            });
        // A thread that could not start dropped its client; its clone goes too.
        if spawned.is_err() {
            lock(&shared.streams).remove(&id);
        }
    }
}

/// How a message's body ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Framing {
    Empty,
    Length(u64),
    Chunked,
    UntilClose,
}

/// Whether a body went through whole or a fault cut it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Whole,
    Cut,
}

struct Head {
    raw: Vec<u8>,
    start: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn field(&self, index: usize) -> &str {
        self.start.split_ascii_whitespace().nth(index).unwrap_or("")
    }

    fn status(&self) -> io::Result<u16> {
        self.field(1)
            .parse()
            .map_err(|_| invalid(format!("bad status line {:?}", self.start)))
    }

    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether a comma-separated header (`Connection`, `Transfer-Encoding`...) lists `token`.
    fn lists(&self, name: &str, token: &str) -> bool {
        self.values(name)
            .flat_map(|v| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }

    fn framing(&self) -> io::Result<Option<Framing>> {
        if self.lists("transfer-encoding", "chunked") {
            return Ok(Some(Framing::Chunked));
        }
        match self.values("content-length").next() {
            Some(v) => {
                let n = v
                    .trim()
                    .parse()
                    .map_err(|_| invalid(format!("bad Content-Length {v:?}")))?;
                Ok(Some(if n == 0 {
                    Framing::Empty
                } else {
                    Framing::Length(n)
                }))
            }
            None => Ok(None),
        }
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

fn eof(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, format!("{what} ended early"))
}

/// One line, at most `MAX_HEAD` bytes, with its line ending.
fn read_line(src: &mut BufReader<TcpStream>, line: &mut Vec<u8>) -> io::Result<usize> {
    let n = src.by_ref().take(MAX_HEAD).read_until(b'\n', line)?;
    if n as u64 == MAX_HEAD && line.last() != Some(&b'\n') {
        return Err(invalid("line too long".into()));
    }
    Ok(n)
}

/// The next head, or `None` when the peer closed before starting one.
fn read_head(src: &mut BufReader<TcpStream>) -> io::Result<Option<Head>> {
    let mut raw = Vec::new();
    let mut lines = Vec::new();
    loop {
        let mut line = Vec::new();
        if read_line(src, &mut line)? == 0 {
            return if raw.is_empty() && lines.is_empty() {
                Ok(None)
            } else {
                Err(eof("a head"))
            };
        }
        raw.extend_from_slice(&line);
        if raw.len() as u64 > MAX_HEAD {
            return Err(invalid("head too long".into()));
        }
        let text = String::from_utf8_lossy(&line).trim_end().to_owned();
        if text.is_empty() {
            if lines.is_empty() {
                // Empty lines before a start line are allowed and carry nothing.
                raw.clear();
                continue;
            }
            break;
        }
        lines.push(text);
    }
    let start = lines.remove(0);
    let headers = lines
        .into_iter()
        .filter_map(|l| {
            let (name, value) = l.split_once(':')?;
            Some((name.trim().to_owned(), value.trim().to_owned()))
        })
        .collect();
    Ok(Some(Head {
        raw,
        start,
        headers,
    }))
}

/// The response-side or request-side fault of a body, applied to its payload as it passes.
enum Tamper {
    Clean,
    Flip(u64),
    Stall(u64, Duration),
    Cut(u64),
}

struct Payload<'a> {
    tamper: Tamper,
    position: u64,
    shared: &'a Shared,
}

impl Payload<'_> {
    fn pass(&mut self, data: &mut [u8], out: &mut dyn Write) -> io::Result<Flow> {
        let start = self.position;
        let end = start + data.len() as u64;
        self.position = end;
        let split = |at: u64| (at.saturating_sub(start) as usize).min(data.len());
        match self.tamper {
            Tamper::Flip(offset) if (start..end).contains(&offset) => {
                data[split(offset)] ^= 0xff;
                out.write_all(data)?;
            }
            Tamper::Stall(after, pause) if after <= end => {
                let (before, rest) = data.split_at(split(after));
                out.write_all(before)?;
                out.flush()?;
                self.shared.pause(pause)?;
                self.tamper = Tamper::Clean;
                out.write_all(rest)?;
            }
            Tamper::Cut(after) if after < end => {
                out.write_all(&data[..split(after)])?;
                out.flush()?;
                return Ok(Flow::Cut);
            }
            _ => out.write_all(data)?,
        }
        Ok(Flow::Whole)
    }

    fn exactly(
        &mut self,
        src: &mut BufReader<TcpStream>,
        mut left: u64,
        out: &mut dyn Write,
    ) -> io::Result<Flow> {
        let mut buf = vec![0u8; COPY_CHUNK];
        while left > 0 {
            let want = left.min(COPY_CHUNK as u64) as usize;
            let n = src.read(&mut buf[..want])?;
            if n == 0 {
                return Err(eof("a body"));
            }
            left -= n as u64;
            if self.pass(&mut buf[..n], out)? == Flow::Cut {
                return Ok(Flow::Cut);
            }
        }
        Ok(Flow::Whole)
    }

    /// Copy one body from `src` to `out`, framing as it came, payload through the tamper.
    fn relay(
        &mut self,
        src: &mut BufReader<TcpStream>,
        framing: Framing,
        out: &mut dyn Write,
    ) -> io::Result<Flow> {
        match framing {
            Framing::Empty => Ok(Flow::Whole),
            Framing::Length(n) => self.exactly(src, n, out),
            Framing::UntilClose => {
                let mut buf = vec![0u8; COPY_CHUNK];
                loop {
                    let n = src.read(&mut buf)?;
                    if n == 0 {
                        return Ok(Flow::Whole);
                    }
                    if self.pass(&mut buf[..n], out)? == Flow::Cut {
                        return Ok(Flow::Cut);
                    }
                }
            }
            Framing::Chunked => loop {
                let mut line = Vec::new();
                if read_line(src, &mut line)? == 0 {
                    return Err(eof("a chunked body"));
                }
                out.write_all(&line)?;
                let text = String::from_utf8_lossy(&line);
                let digits = text.split(';').next().unwrap_or("").trim();
                let size = u64::from_str_radix(digits, 16)
                    .map_err(|_| invalid(format!("bad chunk size {digits:?}")))?;
                if size == 0 {
                    // Trailers, up to the empty line that ends the body.
                    loop {
                        line.clear();
                        if read_line(src, &mut line)? == 0 {
                            return Err(eof("chunked trailers"));
                        }
                        out.write_all(&line)?;
                        if line == b"\r\n" || line == b"\n" {
                            return Ok(Flow::Whole);
                        }
                    }
                }
                if self.exactly(src, size, out)? == Flow::Cut {
                    return Ok(Flow::Cut);
                }
                line.clear();
                read_line(src, &mut line)?;
                out.write_all(&line)?;
            },
        }
    }
}

struct Connection {
    id: u64,
    shared: Arc<Shared>,
    client: BufReader<TcpStream>,
    upstream: Option<BufReader<TcpStream>>,
}

impl Connection {
    fn serve(&mut self) {
        while let Ok(Some(request)) = read_head(&mut self.client) {
            match self.exchange(&request) {
                Ok(true) => {}
                Ok(false) | Err(_) => break,
            }
        }
        let _ = self.client.get_ref().shutdown(Shutdown::Both);
        if let Some(upstream) = self.upstream.take() {
            let _ = upstream.get_ref().shutdown(Shutdown::Both);
        }
    }

    /// The kept upstream connection if the server has not closed it, else a new one.
    fn upstream(&mut self) -> io::Result<BufReader<TcpStream>> {
        if let Some(kept) = self.upstream.take() {
            if kept.buffer().is_empty() && idle_and_open(kept.get_ref()) {
                return Ok(kept);
            }
        }
        let stream = TcpStream::connect(&self.shared.upstream[..])?;
        stream.set_nodelay(true)?;
        self.shared.track(self.id, &stream)?;
        Ok(BufReader::new(stream))
    }

    /// Carry one request and its response; `Ok(true)` when the client connection stays open.
    fn exchange(&mut self, request: &Head) -> io::Result<bool> {
        let shared = Arc::clone(&self.shared);
        let number = shared.seen.fetch_add(1, Ordering::SeqCst) + 1;
        let method = request.field(0).to_owned();
        let fault = shared.take_fault(number, &method, request.field(1));
        let framing = request.framing()?.unwrap_or(Framing::Empty);
        let expect = framing != Framing::Empty && request.lists("expect", "100-continue");
        let client_close = request.lists("connection", "close");
        let mut discard = Payload {
            tamper: Tamper::Clean,
            position: 0,
            shared: &shared,
        };

        if let Some(Fault::Respond { status, body }) = &fault {
            // Without forwarding, the body must still be read to find the next request, unless
            // the client waits for 100 Continue: then the connection ends after the answer.
            if !expect {
                discard.relay(&mut self.client, framing, &mut io::sink())?;
            }
            let close = client_close || expect;
            let body = if method == "HEAD" { "" } else { body };
            respond(self.client.get_mut(), *status, body, close)?;
            return Ok(!close);
        }

        let mut upstream = match self.upstream() {
            Ok(upstream) => upstream,
            Err(e) => {
                let message = format!("hipfile-testkit proxy: upstream unreachable: {e}\n");
                respond(self.client.get_mut(), 502, &message, true)?;
                return Ok(false);
            }
        };
        upstream.get_mut().write_all(&request.raw)?;
        shared.forwarded.fetch_add(1, Ordering::SeqCst);

        let mut early = None;
        if expect && answers_within(&mut upstream, EXPECT_WAIT)? {
            let interim = read_head(&mut upstream)?.ok_or_else(|| eof("the upstream"))?;
            if interim.status()? == 100 {
                self.client.get_mut().write_all(&interim.raw)?;
            } else {
                early = Some(interim);
            }
        }
        if early.is_none() {
            let mut body = Payload {
                tamper: match fault {
                    Some(Fault::CutRequest { after }) => Tamper::Cut(after),
                    Some(Fault::FlipRequestBodyByte { offset }) => Tamper::Flip(offset),
                    _ => Tamper::Clean,
                },
                position: 0,
                shared: &shared,
            };
            if body.relay(&mut self.client, framing, upstream.get_mut())? == Flow::Cut {
                let _ = upstream.get_ref().shutdown(Shutdown::Both);
                return Ok(false);
            }
        }
        let refused_body = early.is_some();
        let mut response = match early {
            Some(head) => head,
            None => read_head(&mut upstream)?.ok_or_else(|| eof("the upstream"))?,
        };
        while (100..200).contains(&response.status()?) && response.status()? != 101 {
            self.client.get_mut().write_all(&response.raw)?;
            response = read_head(&mut upstream)?.ok_or_else(|| eof("the upstream"))?;
        }

        let status = response.status()?;
        let framing = if method == "HEAD" || status == 204 || status == 304 {
            Framing::Empty
        } else {
            response.framing()?.unwrap_or(Framing::UntilClose)
        };
        if let Some(Fault::DelayHead(pause)) = fault {
            shared.pause(pause)?;
        }
        self.client.get_mut().write_all(&response.raw)?;
        let mut body = Payload {
            tamper: match fault {
                Some(Fault::FlipBodyByte { offset }) => Tamper::Flip(offset),
                Some(Fault::StallBody { after, pause }) => Tamper::Stall(after, pause),
                Some(Fault::CutResponse { after }) => Tamper::Cut(after),
                _ => Tamper::Clean,
            },
            position: 0,
            shared: &shared,
        };
        if body.relay(&mut upstream, framing, self.client.get_mut())? == Flow::Cut {
            let _ = upstream.get_ref().shutdown(Shutdown::Both);
            return Ok(false);
        }
        let upstream_close =
            framing == Framing::UntilClose || response.lists("connection", "close");
        if upstream_close || refused_body {
            let _ = upstream.get_ref().shutdown(Shutdown::Both);
        } else {
            self.upstream = Some(upstream);
        }
        Ok(!(client_close || upstream_close || refused_body))
    }
}

/// Whether the server starts answering within `wait` (an end of stream counts as an answer).
fn answers_within(upstream: &mut BufReader<TcpStream>, wait: Duration) -> io::Result<bool> {
    if !upstream.buffer().is_empty() {
        return Ok(true);
    }
    upstream.get_ref().set_read_timeout(Some(wait))?;
    let filled = upstream.fill_buf().map(|_| ());
    upstream.get_ref().set_read_timeout(None)?;
    match filled {
        Ok(()) => Ok(true),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            Ok(false)
        }
        Err(e) => Err(e),
    }
}

/// Whether a kept connection is still open with nothing unread: a server closes idle
/// keep-alive connections on its own schedule.
fn idle_and_open(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return false;
    }
    let probe = stream.peek(&mut [0u8; 1]);
    let restored = stream.set_nonblocking(false).is_ok();
    restored && matches!(probe, Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

fn respond(out: &mut TcpStream, status: u16, body: &str, close: bool) -> io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Injected",
    };
    let kind = if body.starts_with('<') {
        "application/xml"
    } else {
        "text/plain"
    };
    let connection = if close { "close" } else { "keep-alive" };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
         Connection: {connection}\r\n\r\n",
        body.len()
    );
    out.write_all(head.as_bytes())?;
    out.write_all(body.as_bytes())?;
    out.flush()
}
