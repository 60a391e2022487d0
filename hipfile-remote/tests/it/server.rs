//! A loopback HTTP/1.1 object server for the tests that run everywhere, speaking as much of S3's
//! protocol as the reader and writer use, with path-style addressing and no signature checks:
//! HEAD, ranged GET (206 with `Content-Range`, 416 past the end), PUT of a whole object, and
//! multipart uploads (`POST ?uploads`, `PUT ?partNumber&uploadId`, `POST ?uploadId` with the
//! part list, `DELETE ?uploadId`). It can be told to ignore `Range` (answering 200 with the
//! whole object), and to answer parts with an ETag that is not their MD5.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use md5::{Digest, Md5};

/// What the server holds and how it behaves.
#[derive(Default)]
pub struct Store {
    pub objects: Mutex<HashMap<String, Vec<u8>>>,
    pub uploads: Mutex<HashMap<String, BTreeMap<u16, Vec<u8>>>>,
    pub gets: AtomicUsize,
    pub parts: AtomicUsize,
    pub aborts: AtomicUsize,
    pub ignores_range: AtomicBool,
    /// GETs still to answer with 503 before serving.
    pub fail_gets: AtomicUsize,
    /// GETs still to cut after half their body (the connection closed early).
    pub cut_gets: AtomicUsize,
    pub wrong_etags: AtomicBool,
    next_upload: AtomicUsize,
}

/// A server on a loopback port; its threads end with the test process.
pub struct ObjectServer {
    /// `http://127.0.0.1:port`.
    pub endpoint: String,
    pub store: Arc<Store>,
}

impl ObjectServer {
    pub fn start() -> ObjectServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let store = Arc::new(Store::default());
        let shared = Arc::clone(&store);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let store = Arc::clone(&shared);
                std::thread::spawn(move || serve(stream, &store));
            }
        });
        ObjectServer { endpoint, store }
    }

    /// A server holding `object` at `/bucket/object.bin`; its plain HTTP URL.
    pub fn with_object(object: Vec<u8>) -> (ObjectServer, String) {
        let server = ObjectServer::start();
        server.put("/bucket/object.bin", object);
        let url = format!("{}/bucket/object.bin", server.endpoint);
        (server, url)
    }

    pub fn put(&self, path: &str, bytes: Vec<u8>) {
        self.store
            .objects
            .lock()
            .unwrap()
            .insert(path.to_string(), bytes);
    }

    pub fn object(&self, path: &str) -> Option<Vec<u8>> {
        self.store.objects.lock().unwrap().get(path).cloned()
    }
}

struct Request {
    method: String,
    path: String,
    query: HashMap<String, String>,
    range: Option<(usize, usize)>,
    body: Vec<u8>,
}

fn read_request(reader: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    if reader.read_line(&mut line).ok()? == 0 {
        return None;
    }
    let mut words = line.split_whitespace();
    let method = words.next()?.to_string();
    let target = words.next()?.to_string();
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let query = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (k.to_string(), v.to_string())
        })
        .collect();
    let (mut range, mut length) = (None, 0usize);
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 {
            return None;
        }
        let header = header.trim_end();
        if header.is_empty() {
            break;
        }
        let (name, value) = header.split_once(':')?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("range") {
            range = value.strip_prefix("bytes=").and_then(|r| {
                let (a, b) = r.split_once('-')?;
                Some((a.parse().ok()?, b.parse().ok()?))
            });
        } else if name.eq_ignore_ascii_case("content-length") {
            length = value.parse().ok()?;
        }
    }
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path: path.to_string(),
        query,
        range,
        body,
    })
}

fn etag_of(bytes: &[u8]) -> String {
    let hex: String = Md5::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("\"{hex}\"")
}

/// Take one from `budget` if any is left.
fn take_one(budget: &AtomicUsize) -> bool {
    budget
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
        .is_ok()
}

/// Status line, extra headers, body.
type Answer = (&'static str, String, Vec<u8>);

fn answer(store: &Store, req: &Request) -> Answer {
    let not_found = || {
        (
            "404 Not Found",
            String::new(),
            b"<Error><Code>NoSuchKey</Code></Error>".to_vec(),
        )
    };
    match req.method.as_str() {
        "HEAD" | "GET" => {
            let objects = store.objects.lock().unwrap();
            let Some(object) = objects.get(&req.path) else {
                return not_found();
            };
            let len = object.len();
            if req.method == "HEAD" {
                return ("200 OK", format!("Content-Length: {len}\r\n"), Vec::new());
            }
            store.gets.fetch_add(1, Ordering::Relaxed);
            if take_one(&store.fail_gets) {
                return (
                    "503 Service Unavailable",
                    String::new(),
                    b"<Error><Code>SlowDown</Code></Error>".to_vec(),
                );
            }
            match req.range {
                Some(_) if store.ignores_range.load(Ordering::Relaxed) => {
                    ("200 OK", String::new(), object.clone())
                }
                Some((first, _)) if first >= len => (
                    "416 Range Not Satisfiable",
                    format!("Content-Range: bytes */{len}\r\n"),
                    Vec::new(),
                ),
                Some((first, last)) => {
                    let last = last.min(len - 1);
                    (
                        "206 Partial Content",
                        format!("Content-Range: bytes {first}-{last}/{len}\r\n"),
                        object[first..=last].to_vec(),
                    )
                }
                None => ("200 OK", String::new(), object.clone()),
            }
        }
        "PUT" => match (req.query.get("partNumber"), req.query.get("uploadId")) {
            (Some(n), Some(id)) => {
                let mut uploads = store.uploads.lock().unwrap();
                let Some(parts) = uploads.get_mut(id) else {
                    return (
                        "404 Not Found",
                        String::new(),
                        b"<Error><Code>NoSuchUpload</Code></Error>".to_vec(),
                    );
                };
                store.parts.fetch_add(1, Ordering::Relaxed);
                parts.insert(n.parse().unwrap(), req.body.clone());
                let etag = if store.wrong_etags.load(Ordering::Relaxed) {
                    etag_of(b"something else")
                } else {
                    etag_of(&req.body)
                };
                ("200 OK", format!("ETag: {etag}\r\n"), Vec::new())
            }
            _ => {
                let etag = etag_of(&req.body);
                store
                    .objects
                    .lock()
                    .unwrap()
                    .insert(req.path.clone(), req.body.clone());
                ("200 OK", format!("ETag: {etag}\r\n"), Vec::new())
            }
        },
        "POST" if req.query.contains_key("uploads") => {
            let id = format!("up-{}", store.next_upload.fetch_add(1, Ordering::Relaxed));
            store
                .uploads
                .lock()
                .unwrap()
                .insert(id.clone(), BTreeMap::new());
            let body = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\
                 <InitiateMultipartUploadResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
                 <Bucket>bucket</Bucket><Key>{}</Key><UploadId>{id}</UploadId>\
                 </InitiateMultipartUploadResult>",
                req.path
            );
            ("200 OK", String::new(), body.into_bytes())
        }
        "POST" => {
            let Some(id) = req.query.get("uploadId") else {
                return ("400 Bad Request", String::new(), Vec::new());
            };
            let Some(parts) = store.uploads.lock().unwrap().remove(id) else {
                return (
                    "404 Not Found",
                    String::new(),
                    b"<Error><Code>NoSuchUpload</Code></Error>".to_vec(),
                );
            };
            // The part list names every part, numbered from 1 without gaps.
            let listed = String::from_utf8_lossy(&req.body)
                .matches("<PartNumber>")
                .count();
            if listed != parts.len() || parts.keys().copied().ne(1..=parts.len() as u16) {
                return (
                    "400 Bad Request",
                    String::new(),
                    b"<Error><Code>InvalidPart</Code></Error>".to_vec(),
                );
            }
            let object: Vec<u8> = parts.into_values().flatten().collect();
            store
                .objects
                .lock()
                .unwrap()
                .insert(req.path.clone(), object);
            (
                "200 OK",
                String::new(),
                b"<CompleteMultipartUploadResult><ETag>\"x-1\"</ETag></CompleteMultipartUploadResult>"
                    .to_vec(),
            )
        }
        "DELETE" => {
            if let Some(id) = req.query.get("uploadId") {
                store.uploads.lock().unwrap().remove(id);
                store.aborts.fetch_add(1, Ordering::Relaxed);
            }
            ("204 No Content", String::new(), Vec::new())
        }
        _ => ("405 Method Not Allowed", String::new(), Vec::new()),
    }
}

fn serve(stream: TcpStream, store: &Store) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    while let Some(req) = read_request(&mut reader) {
        let (status, headers, body) = answer(store, &req);
        let length = if req.method == "HEAD" {
            String::new()
        } else {
            format!("Content-Length: {}\r\n", body.len())
        };
        let cut = req.method == "GET" && status.starts_with("206") && take_one(&store.cut_gets);
        let body = if req.method == "HEAD" {
            &[][..]
        } else if cut {
            &body[..body.len() / 2]
        } else {
            &body[..]
        };
        let sent = write!(out, "HTTP/1.1 {status}\r\n{headers}{length}\r\n")
            .and_then(|_| out.write_all(body))
            .and_then(|_| out.flush());
        if sent.is_err() || cut {
            return;
        }
    }
}
