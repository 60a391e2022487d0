//! The fault-injecting HTTP proxy, between a raw client and a small server started here: bodies
//! of every framing pass through untouched on kept connections, and each fault does exactly
//! what it says to the requests its rule names.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use hipfile_testkit::http_proxy::{Counts, Fault, FaultProxy, Fired, Rule};

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// A server answering `GET /cl/N` with N bytes and a `Content-Length`, `GET /chunked/N` with
/// N bytes in chunks of 1000, `GET /close/N` with N bytes ended by closing, `GET /drop/N` like
/// `/cl/N` then closing, and any request with a body by `got N` (after `100 Continue` when asked,
/// unless the target starts with `/silent`), or by the body itself when the target starts with
/// `/echo`. It logs what it received, a body cut short included.
struct Upstream {
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
    connections: Arc<AtomicU64>,
}

impl Upstream {
    fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let log = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicU64::new(0));
        let (thread_log, thread_count) = (Arc::clone(&log), Arc::clone(&connections));
        thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                thread_count.fetch_add(1, Ordering::SeqCst);
                let log = Arc::clone(&thread_log);
                thread::spawn(move || {
                    let _ = serve_upstream(stream, &log);
                });
            }
        });
        Upstream {
            addr,
            log,
            connections,
        }
    }

    fn log(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }

    /// The log once it has `n` entries (the server thread writes after the proxy moved on).
    fn log_of(&self, n: usize) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.log().len() < n && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
        }
        self.log()
    }
}

fn read_head(src: &mut impl BufRead) -> io::Result<Option<Vec<String>>> {
    let mut lines = Vec::new();
    loop {
        let mut line = String::new();
        if src.read_line(&mut line)? == 0 {
            return Ok(None);
        }
        let line = line.trim_end().to_owned();
        if line.is_empty() {
            return Ok(Some(lines));
        }
        lines.push(line);
    }
}

fn header<'a>(head: &'a [String], name: &str) -> Option<&'a str> {
    head[1..].iter().find_map(|l| {
        let (n, v) = l.split_once(':')?;
        n.eq_ignore_ascii_case(name).then_some(v.trim())
    })
}

/// A body by its head's framing, and whether it came whole (false: the peer closed first).
fn read_body(src: &mut impl BufRead, head: &[String], until_close: bool) -> (Vec<u8>, bool) {
    let mut body = Vec::new();
    if header(head, "transfer-encoding") == Some("chunked") {
        loop {
            let mut line = String::new();
            if src.read_line(&mut line).unwrap_or(0) == 0 {
                return (body, false);
            }
            let digits = line.split(';').next().unwrap_or("").trim();
            let size = usize::from_str_radix(digits, 16).unwrap();
            let got = src
                .take(size as u64)
                .read_to_end(&mut body)
                .unwrap_or_default();
            if got < size {
                return (body, false);
            }
            // The line ending the chunk; after the last chunk, trailers up to an empty line.
            loop {
                line.clear();
                if src.read_line(&mut line).unwrap_or(0) == 0 {
                    return (body, false);
                }
                if size > 0 || line.trim().is_empty() {
                    break;
                }
            }
            if size == 0 {
                return (body, true);
            }
        }
    }
    match header(head, "content-length") {
        Some(n) => {
            let n: u64 = n.parse().unwrap();
            src.take(n).read_to_end(&mut body).unwrap_or_default();
            let whole = body.len() as u64 == n;
            (body, whole)
        }
        None if until_close => {
            let whole = src.read_to_end(&mut body).is_ok();
            (body, whole)
        }
        None => (body, true),
    }
}

fn serve_upstream(stream: TcpStream, log: &Mutex<Vec<String>>) -> io::Result<()> {
    let mut out = stream.try_clone()?;
    let mut src = BufReader::new(stream);
    while let Some(head) = read_head(&mut src)? {
        let mut parts = head[0].split(' ');
        let (method, target) = (parts.next().unwrap(), parts.next().unwrap());
        let has_body = header(&head, "content-length").is_some()
            || header(&head, "transfer-encoding").is_some();
        let silent = target.starts_with("/silent");
        if has_body && !silent && header(&head, "expect") == Some("100-continue") {
            out.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        }
        let (body, whole) = read_body(&mut src, &head, false);
        let entry = format!("{method} {target} {}", body.len());
        if !whole {
            log.lock().unwrap().push(format!("{entry} cut"));
            return Ok(());
        }
        log.lock().unwrap().push(entry);
        let size = |prefix: &str| target.strip_prefix(prefix).map(|n| n.parse().unwrap());
        if has_body && target.starts_with("/echo") {
            write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )?;
            out.write_all(&body)?;
        } else if has_body {
            let text = format!("got {}", body.len());
            write!(
                out,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{text}",
                text.len()
            )?;
        } else if let Some(n) = size("/cl/") {
            write!(out, "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n")?;
            if method != "HEAD" {
                out.write_all(&pattern(n))?;
            }
        } else if let Some(n) = size("/chunked/") {
            out.write_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")?;
            for chunk in pattern(n).chunks(1000) {
                write!(out, "{:x}\r\n", chunk.len())?;
                out.write_all(chunk)?;
                out.write_all(b"\r\n")?;
            }
            out.write_all(b"0\r\n\r\n")?;
        } else if let Some(n) = size("/drop/") {
            // A kept connection the server closes after the answer, as at its idle timeout.
            write!(out, "HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n")?;
            out.write_all(&pattern(n))?;
            return Ok(());
        } else if let Some(n) = size("/close/") {
            out.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")?;
            out.write_all(&pattern(n))?;
            return Ok(());
        } else {
            out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
        }
    }
    Ok(())
}

/// One client connection to the proxy, speaking raw HTTP/1.1.
struct Client {
    src: BufReader<TcpStream>,
}

#[derive(Debug)]
struct Response {
    status: u16,
    body: Vec<u8>,
    whole: bool,
}

impl Client {
    fn connect(proxy: &FaultProxy) -> Client {
        Client {
            src: BufReader::new(TcpStream::connect(proxy.addr()).unwrap()),
        }
    }

    fn send(&mut self, method: &str, target: &str, extra: &str, body: &[u8]) {
        let length = if body.is_empty() {
            String::new()
        } else {
            format!("Content-Length: {}\r\n", body.len())
        };
        let head = format!("{method} {target} HTTP/1.1\r\nHost: test\r\n{length}{extra}\r\n");
        let out = self.src.get_mut();
        // A cut upload may close the connection while the body is still being written.
        let _ = out
            .write_all(head.as_bytes())
            .and_then(|()| out.write_all(body));
    }

    fn response_to(&mut self, method: &str) -> Option<Response> {
        let head = read_head(&mut self.src).ok()??;
        let status = head[0].split(' ').nth(1).unwrap().parse().unwrap();
        let (body, whole) = if method == "HEAD" {
            (Vec::new(), true)
        } else {
            read_body(&mut self.src, &head, true)
        };
        Some(Response {
            status,
            body,
            whole,
        })
    }

    fn get(&mut self, target: &str) -> Response {
        self.send("GET", target, "", b"");
        self.response_to("GET").unwrap()
    }

    fn put(&mut self, target: &str, body: &[u8]) -> Response {
        self.send("PUT", target, "", body);
        self.response_to("PUT").unwrap()
    }

    /// Whether the proxy closed this connection (nothing more arrives within two seconds).
    fn closed(&mut self) -> bool {
        let stream = self.src.get_ref();
        stream
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        match self.src.fill_buf() {
            Ok(unread) => unread.is_empty(),
            Err(e) => !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ),
        }
    }
}

fn start() -> (Upstream, FaultProxy) {
    let upstream = Upstream::start();
    let proxy = FaultProxy::start(upstream.addr).unwrap();
    assert!(proxy.url().starts_with("http://127.0.0.1:"));
    (upstream, proxy)
}

fn counts(connections: u64, seen: u64, forwarded: u64, faulted: u64) -> Counts {
    Counts {
        connections,
        seen,
        forwarded,
        faulted,
    }
}

#[test]
fn every_framing_passes_through_on_kept_connections() {
    let (upstream, proxy) = start();
    let mut client = Client::connect(&proxy);
    let r = client.get("/cl/100000");
    assert_eq!((r.status, r.whole), (200, true));
    assert_eq!(r.body, pattern(100_000));
    let r = client.get("/chunked/5500");
    assert_eq!((r.body, r.whole), (pattern(5500), true));
    client.send("HEAD", "/cl/100", "", b"");
    let r = client.response_to("HEAD").unwrap();
    assert_eq!((r.status, r.body.len()), (200, 0));
    assert_eq!(client.put("/obj", &pattern(3000)).body, b"got 3000");
    client.send(
        "PUT",
        "/chunked-upload",
        "Transfer-Encoding: chunked\r\n",
        b"5\r\nhello\r\n3;ext=1\r\nabc\r\n0\r\nTrailer: x\r\n\r\n",
    );
    assert_eq!(client.response_to("PUT").unwrap().body, b"got 8");
    assert_eq!(upstream.connections.load(Ordering::SeqCst), 1);
    let r = client.get("/close/777");
    assert_eq!((r.body, r.whole), (pattern(777), true));
    assert!(client.closed());

    assert_eq!(proxy.counts(), counts(1, 6, 6, 0));
    assert_eq!(
        upstream.log(),
        [
            "GET /cl/100000 0",
            "GET /chunked/5500 0",
            "HEAD /cl/100 0",
            "PUT /obj 3000",
            "PUT /chunked-upload 8",
            "GET /close/777 0"
        ]
    );
    assert!(proxy.fired().is_empty());
}

#[test]
fn expect_100_continue_passes_through() {
    let (upstream, proxy) = start();
    let mut client = Client::connect(&proxy);
    // The head alone: the body goes only after the server's interim answer came back.
    client.send(
        "PUT",
        "/obj",
        "Content-Length: 5000\r\nExpect: 100-continue\r\n",
        b"",
    );
    let interim = read_head(&mut client.src).unwrap().unwrap();
    assert_eq!(interim, ["HTTP/1.1 100 Continue"]);
    client.src.get_mut().write_all(&pattern(5000)).unwrap();
    let r = client.response_to("PUT").unwrap();
    assert_eq!((r.status, r.body), (200, b"got 5000".to_vec()));
    assert_eq!(client.get("/cl/10").body, pattern(10));
    assert_eq!(upstream.log(), ["PUT /obj 5000", "GET /cl/10 0"]);
}

#[test]
fn a_server_closing_a_kept_connection_gets_a_new_one() {
    let (upstream, proxy) = start();
    let mut client = Client::connect(&proxy);
    assert_eq!(client.get("/drop/20").body, pattern(20));
    thread::sleep(Duration::from_millis(100));
    assert_eq!(client.get("/cl/20").body, pattern(20));
    assert_eq!(upstream.connections.load(Ordering::SeqCst), 2);
    assert_eq!(proxy.counts(), counts(1, 2, 2, 0));
}

#[test]
fn a_body_waiting_for_100_continue_goes_after_a_second_of_silence() {
    let (upstream, proxy) = start();
    let mut client = Client::connect(&proxy);
    client
        .src
        .get_ref()
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let t0 = Instant::now();
    client.send("PUT", "/silent", "Expect: 100-continue\r\n", &pattern(3000));
    let r = client.response_to("PUT").unwrap();
    assert_eq!((r.status, r.body), (200, b"got 3000".to_vec()));
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t0.elapsed()
    );
    assert_eq!(upstream.log(), ["PUT /silent 3000"]);
}

#[test]
fn transient_statuses_answer_without_forwarding() {
    let (upstream, proxy) = start();
    proxy.inject(Rule::new(Fault::status(503)).times(2).method("GET"));
    let slow_down = "<Error><Code>SlowDown</Code></Error>".to_owned();
    proxy.inject(
        Rule::new(Fault::Respond {
            status: 429,
            body: slow_down.clone(),
        })
        .method("PUT"),
    );
    let mut client = Client::connect(&proxy);
    let first = client.get("/cl/10");
    assert_eq!(first.status, 503);
    assert_eq!(first.body, b"hipfile-testkit proxy: injected 503\n");
    assert_eq!(client.get("/cl/10").status, 503);
    assert_eq!(client.get("/cl/10").body, pattern(10));
    // The refused upload's body is read and dropped: the same connection carries on.
    let refused = client.put("/obj", &pattern(4000));
    assert_eq!(
        (refused.status, refused.body),
        (429, slow_down.into_bytes())
    );
    assert_eq!(client.put("/obj", &pattern(4000)).body, b"got 4000");

    assert_eq!(proxy.counts(), counts(1, 5, 2, 3));
    assert_eq!(upstream.log(), ["GET /cl/10 0", "PUT /obj 4000"]);
    let fired: Vec<(u64, String)> = proxy
        .fired()
        .into_iter()
        .map(|f: Fired| (f.request, format!("{} {}", f.method, f.target)))
        .collect();
    assert_eq!(
        fired,
        [
            (1, "GET /cl/10".to_owned()),
            (2, "GET /cl/10".to_owned()),
            (4, "PUT /obj".to_owned())
        ]
    );
}

#[test]
fn a_refused_expect_100_continue_closes_the_connection() {
    let (upstream, proxy) = start();
    proxy.inject(Fault::status(500));
    let mut client = Client::connect(&proxy);
    client.send(
        "PUT",
        "/obj",
        "Content-Length: 5000\r\nExpect: 100-continue\r\n",
        b"",
    );
    assert_eq!(client.response_to("PUT").unwrap().status, 500);
    assert!(client.closed());
    assert!(upstream.log().is_empty());
}

#[test]
fn rules_match_method_and_target_and_can_be_cleared() {
    let (_upstream, proxy) = start();
    proxy.inject(
        Rule::new(Fault::status(500))
            .target_contains("/cl/7")
            .always(),
    );
    proxy.inject(Rule::new(Fault::status(503)).method("PUT").times(0));
    let mut client = Client::connect(&proxy);
    assert_eq!(client.get("/cl/6").status, 200);
    assert_eq!(client.get("/cl/7").status, 500);
    assert_eq!(client.get("/cl/77").status, 500);
    assert_eq!(client.put("/obj", b"x").status, 200);
    proxy.clear();
    assert_eq!(client.get("/cl/7").status, 200);
    assert_eq!(proxy.counts(), counts(1, 5, 3, 2));
}

#[test]
fn a_delayed_head_and_a_stalled_body_arrive_late_and_whole() {
    let (_upstream, proxy) = start();
    let pause = Duration::from_millis(400);
    let mut client = Client::connect(&proxy);

    proxy.inject(Fault::DelayHead(pause));
    let t0 = Instant::now();
    let r = client.get("/cl/5000");
    assert!(t0.elapsed() >= pause, "{:?}", t0.elapsed());
    assert_eq!(r.body, pattern(5000));

    proxy.inject(Fault::StallBody { after: 1000, pause });
    client.send("GET", "/cl/5000", "", b"");
    let t0 = Instant::now();
    read_head(&mut client.src).unwrap().unwrap();
    let mut body = vec![0u8; 5000];
    client.src.read_exact(&mut body[..1000]).unwrap();
    let before = t0.elapsed();
    client.src.read_exact(&mut body[1000..]).unwrap();
    let stalled = t0.elapsed() - before;
    assert!(before < pause, "the first 1000 bytes took {before:?}");
    assert!(stalled >= pause - Duration::from_millis(50), "{stalled:?}");
    assert_eq!(body, pattern(5000));
    assert_eq!(client.get("/cl/3").body, pattern(3));
}

#[test]
fn a_flipped_byte_differs_at_its_offset_only() {
    let (_upstream, proxy) = start();
    let mut client = Client::connect(&proxy);
    for (target, len, offset) in [
        ("/chunked/5500", 5500, 2600),
        ("/cl/100000", 100_000, 70_000),
    ] {
        proxy.inject(Fault::FlipBodyByte { offset });
        let r = client.get(target);
        let mut expected = pattern(len);
        expected[offset as usize] ^= 0xff;
        assert_eq!((r.body, r.whole), (expected, true), "{target}");
    }
    proxy.inject(Fault::FlipBodyByte { offset: 10 });
    assert_eq!(client.get("/cl/10").body, pattern(10));
}

#[test]
fn a_flipped_request_byte_reaches_the_server_inverted_and_the_answer_untouched() {
    let (upstream, proxy) = start();
    proxy.inject(Rule::new(Fault::FlipRequestBodyByte { offset: 70_000 }).method("PUT"));
    let mut client = Client::connect(&proxy);
    // The GET is not a PUT: its body passes as it is.
    assert_eq!(client.get("/cl/100000").body, pattern(100_000));
    let r = client.put("/echo/a", &pattern(100_000));
    let mut expected = pattern(100_000);
    expected[70_000] ^= 0xff;
    assert_eq!((r.status, r.whole), (200, true));
    assert!(
        r.body == expected,
        "the server got the byte at 70000 inverted, only it"
    );
    // The rule is spent; a body shorter than the offset passes untouched.
    assert!(client.put("/echo/b", &pattern(100_000)).body == pattern(100_000));
    proxy.inject(Fault::FlipRequestBodyByte { offset: 10 });
    assert_eq!(client.put("/echo/c", &pattern(10)).body, pattern(10));
    assert_eq!(upstream.log_of(4).len(), 4);
    assert_eq!(proxy.counts(), counts(1, 4, 4, 2));
}

#[test]
fn a_cut_response_ends_after_its_bytes() {
    let (_upstream, proxy) = start();
    for (target, len, after) in [
        ("/chunked/5500", 5500, 2500),
        ("/cl/100000", 100_000, 40_000),
    ] {
        proxy.inject(Fault::CutResponse { after });
        let mut client = Client::connect(&proxy);
        let r = client.get(target);
        assert_eq!(r.status, 200);
        assert!(!r.whole, "{target}");
        assert_eq!(r.body, pattern(len)[..after as usize], "{target}");
        assert!(client.closed());
    }
    let mut client = Client::connect(&proxy);
    assert_eq!(client.get("/cl/100000").body, pattern(100_000));
    assert_eq!(proxy.counts(), counts(3, 3, 3, 2));
}

#[test]
fn a_cut_upload_leaves_the_server_a_short_body() {
    let (upstream, proxy) = start();
    proxy.inject(Rule::new(Fault::CutRequest { after: 1000 }).method("PUT"));
    let mut client = Client::connect(&proxy);
    client.send("PUT", "/obj", "", &pattern(10_000));
    assert!(client.response_to("PUT").is_none());
    assert_eq!(upstream.log_of(1), ["PUT /obj 1000 cut"]);

    let mut client = Client::connect(&proxy);
    assert_eq!(client.put("/obj", &pattern(10_000)).body, b"got 10000");
}

#[test]
fn dropping_the_proxy_closes_its_listener_and_connections() {
    let (_upstream, proxy) = start();
    let addr = proxy.addr();
    let mut idle = Client::connect(&proxy);
    assert_eq!(idle.get("/cl/1").status, 200);
    proxy.inject(Fault::StallBody {
        after: 10,
        pause: Duration::from_secs(600),
    });
    let mut stalled = Client::connect(&proxy);
    stalled.send("GET", "/cl/1000", "", b"");
    read_head(&mut stalled.src).unwrap().unwrap();
    let mut first = [0u8; 10];
    stalled.src.read_exact(&mut first).unwrap();

    let t0 = Instant::now();
    drop(proxy);
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(stalled.closed());
    assert!(idle.closed());
    assert!(TcpStream::connect(addr).is_err());
}

#[test]
fn an_unreachable_upstream_answers_502() {
    let gone = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = gone.local_addr().unwrap();
    drop(gone);
    let proxy = FaultProxy::start(addr).unwrap();
    let mut client = Client::connect(&proxy);
    assert_eq!(client.get("/cl/1").status, 502);
    assert!(client.closed());
    assert_eq!(proxy.counts(), counts(1, 1, 0, 0));
}
