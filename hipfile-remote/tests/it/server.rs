//! A loopback HTTP/1.1 server of one object, for the tests that run everywhere: answers HEAD
//! and ranged GETs as a static file server does (206 with `Content-Range`, 416 past the end),
//! or, told to, ignores `Range` and answers 200 with the whole object.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A server on a loopback port; stops with the test process.
pub struct ObjectServer {
    pub url: String,
    pub gets: Arc<AtomicUsize>,
}

impl ObjectServer {
    pub fn start(object: Vec<u8>, honours_range: bool) -> ObjectServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/object.bin", listener.local_addr().unwrap());
        let object = Arc::new(object);
        let gets = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&gets);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let object = Arc::clone(&object);
                let gets = Arc::clone(&counted);
                std::thread::spawn(move || serve(stream, &object, honours_range, &gets));
            }
        });
        ObjectServer { url, gets }
    }
}

fn serve(stream: TcpStream, object: &[u8], honours_range: bool, gets: &AtomicUsize) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut out = stream;
    loop {
        let mut request = String::new();
        if reader.read_line(&mut request).unwrap_or(0) == 0 {
            return;
        }
        let mut range = None;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("range") {
                    range = value.trim().strip_prefix("bytes=").and_then(|r| {
                        let (a, b) = r.split_once('-')?;
                        Some((a.parse::<usize>().ok()?, b.parse::<usize>().ok()?))
                    });
                }
            }
        }
        let head = request.starts_with("HEAD ");
        if !head {
            gets.fetch_add(1, Ordering::Relaxed);
        }
        let len = object.len();
        let (status, headers, body): (&str, String, &[u8]) = match range {
            Some((first, _)) if honours_range && first >= len => (
                "416 Range Not Satisfiable",
                format!("Content-Range: bytes */{len}\r\nContent-Length: 0\r\n"),
                &[],
            ),
            Some((first, last)) if honours_range => {
                let last = last.min(len - 1);
                let body = &object[first..=last];
                (
                    "206 Partial Content",
                    format!(
                        "Content-Range: bytes {first}-{last}/{len}\r\nContent-Length: {}\r\n",
                        body.len()
                    ),
                    body,
                )
            }
            _ => ("200 OK", format!("Content-Length: {len}\r\n"), object),
        };
        let body = if head { &[][..] } else { body };
        let sent = write!(out, "HTTP/1.1 {status}\r\n{headers}\r\n")
            .and_then(|_| out.write_all(body))
            .and_then(|_| out.flush());
        if sent.is_err() {
            return;
        }
    }
}
