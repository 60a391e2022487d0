//! One object's HTTP client: its connection pool, its requests, and their retries.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use md5::{Digest, Md5};
use ureq::http::Response;
use ureq::{Agent, Body};

use crate::error::{RemoteError, Result};
use crate::location::{Action, Object};
use crate::options::RemoteOptions;
use crate::stats::RemoteCounters;

/// How one attempt of a request failed.
#[derive(Debug)]
pub(crate) enum Failure {
    /// The server answered with an HTTP error status.
    Status { status: u16, detail: String },
    /// Connecting, or waiting for the answer, took longer than the timeouts.
    Timeout,
    /// The connection failed: refused, reset, closed before the answer was whole.
    Connection(String),
    /// The server refused an upload whose bytes do not hash to its `Content-MD5` (S3's
    /// `BadDigest`): they changed on the way, and the same bytes sent again may arrive whole.
    BadDigest(String),
    /// Not worth repeating, and already an error.
    Fatal(RemoteError),
}

impl Failure {
    /// Whether another attempt may succeed: server errors (5xx), throttling (429), timeouts
    /// and broken connections; never another 4xx, which the same request would get again.
    pub(crate) fn retryable(&self) -> bool {
        match self {
            Failure::Status { status, .. } => *status >= 500 || *status == 429,
            Failure::Timeout | Failure::Connection(_) | Failure::BadDigest(_) => true,
            Failure::Fatal(_) => false,
        }
    }

    /// The error after `attempts` attempts of a request on `url` for the bytes `range`.
    fn into_error(self, url: &str, attempts: u32, range: Option<(u64, u64)>) -> RemoteError {
        let url = url.to_string();
        match self {
            Failure::Status {
                status: 404,
                detail,
            } => RemoteError::NotFound { url, detail },
            Failure::Status {
                status: 401 | 403,
                detail,
            } => RemoteError::AccessDenied { url, detail },
            Failure::Status { status: 416, .. } => {
                let (start, end) = range.unwrap_or((0, 0));
                RemoteError::RangeNotSatisfiable { url, start, end }
            }
            Failure::Status { status, detail } => RemoteError::Server {
                url,
                status,
                attempts,
                detail,
            },
            Failure::Timeout => RemoteError::Timeout { url, attempts },
            Failure::BadDigest(detail) => RemoteError::ChecksumMismatch {
                url,
                detail: format!(
                    "the server's MD5 of the bytes sent is not their Content-MD5 on all \
                     {attempts} attempt(s) ({detail})"
                ),
            },
            Failure::Connection(detail) => RemoteError::Connection {
                url,
                attempts,
                detail,
            },
            Failure::Fatal(e) => e,
        }
    }
}

impl From<ureq::Error> for Failure {
    fn from(e: ureq::Error) -> Self {
        match e {
            ureq::Error::Timeout(_) | ureq::Error::BodyStalled => Failure::Timeout,
            ureq::Error::Io(io) => match io.kind() {
                std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock => Failure::Timeout,
                _ => Failure::Connection(io.to_string()),
            },
            e @ (ureq::Error::ConnectionFailed | ureq::Error::Protocol(_)) => {
                Failure::Connection(e.to_string())
            }
            ureq::Error::StatusCode(status) => Failure::Status {
                status,
                detail: String::new(),
            },
            other => Failure::Fatal(RemoteError::Connection {
                url: String::new(),
                attempts: 1,
                detail: other.to_string(),
            }),
        }
    }
}

impl From<std::io::Error> for Failure {
    fn from(e: std::io::Error) -> Self {
        Failure::from(ureq::Error::from(e))
    }
}

type Attempt<T> = std::result::Result<T, Failure>;

/// The wait before retry number `retry` (1 for the first): `base` doubled each time up to 64
/// times, then a random point in its upper half, so clients that failed together do not retry
/// together.
pub(crate) fn backoff(base: Duration, retry: u32) -> Duration {
    let full = base.saturating_mul(1 << retry.saturating_sub(1).min(6));
    let half = full / 2;
    let nanos = u64::try_from(half.as_nanos()).unwrap_or(u64::MAX);
    half + Duration::from_nanos(random() % nanos.saturating_add(1))
}

fn random() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    );
    h.finish()
}

/// The S3 error code (`<Code>NoSuchKey</Code>`) of an error answer, else its start.
fn detail_of(response: &mut Response<Body>) -> String {
    let mut text = String::new();
    let _ = response
        .body_mut()
        .as_reader()
        .take(4096)
        .read_to_string(&mut text);
    let between = |open: &str, close: &str| {
        let from = text.find(open)? + open.len();
        let to = text[from..].find(close)? + from;
        Some(text[from..to].to_string())
    };
    match (
        between("<Code>", "</Code>"),
        between("<Message>", "</Message>"),
    ) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code,
        _ => text
            .chars()
            .take(200)
            .collect::<String>()
            .trim()
            .to_string(),
    }
}

/// A failure for an answer with status `status` where success was expected.
fn status_failure(mut response: Response<Body>) -> Failure {
    let status = response.status().as_u16();
    Failure::Status {
        status,
        detail: detail_of(&mut response),
    }
}

fn header<'r>(response: &'r Response<Body>, name: &str) -> Option<&'r str> {
    response.headers().get(name).and_then(|v| v.to_str().ok())
}

/// `bytes first-last/total` of a `Content-Range` header.
pub(crate) fn content_range(value: &str) -> Option<(u64, u64, Option<u64>)> {
    let rest = value.trim().strip_prefix("bytes ")?;
    let (span, total) = rest.split_once('/')?;
    let total = if total == "*" {
        None
    } else {
        Some(total.parse().ok()?)
    };
    if span == "*" {
        return Some((0, 0, total));
    }
    let (first, last) = span.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?, total))
}

/// The base64 MD5 (`Content-MD5`) and hex MD5 (an S3 ETag) of `bytes`.
pub(crate) fn md5_of(bytes: &[u8]) -> (String, String) {
    let digest = Md5::digest(bytes);
    let hex = digest.iter().map(|b| format!("{b:02x}")).collect();
    (
        base64::engine::general_purpose::STANDARD.encode(digest),
        hex,
    )
}

/// What a HEAD tells of an object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ObjectInfo {
    /// Its size in bytes.
    pub(crate) size: u64,
    /// The hex MD5 of its bytes, where its ETag is one ([`Client::info`]).
    pub(crate) md5: Option<String>,
}

/// One object's client: its connections, its settings, its counters.
#[derive(Debug)]
pub(crate) struct Client {
    agent: Agent,
    object: Object,
    name: String,
    options: RemoteOptions,
    counters: Arc<RemoteCounters>,
}

impl Client {
    pub(crate) fn new(
        object: Object,
        name: String,
        options: RemoteOptions,
        counters: Arc<RemoteCounters>,
    ) -> Self {
        let config = Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(options.connect_timeout))
            .timeout_per_read(Some(options.read_timeout))
            .timeout_recv_response(Some(options.read_timeout))
            .max_idle_connections(options.connections.max(1) * 2)
            .max_idle_connections_per_host(options.connections.max(1))
            .build();
        Client {
            agent: Agent::new_with_config(config),
            object,
            name,
            options,
            counters,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn options(&self) -> &RemoteOptions {
        &self.options
    }

    pub(crate) fn counters(&self) -> &Arc<RemoteCounters> {
        &self.counters
    }

    /// Run `attempt` until it succeeds, fails in a way not worth repeating, or the retries are
    /// spent, waiting [`backoff`] between attempts. `range` names the bytes for a 416's error.
    fn retrying<T>(
        &self,
        range: Option<(u64, u64)>,
        mut attempt: impl FnMut() -> Attempt<T>,
    ) -> Result<T> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            self.counters.request();
            match attempt() {
                Ok(v) => return Ok(v),
                Err(f) if f.retryable() && attempts <= self.options.retries => {
                    log::debug!("{}: attempt {attempts} failed ({f:?}); retrying", self.name);
                    self.counters.retry();
                    std::thread::sleep(backoff(self.options.backoff, attempts));
                }
                Err(f) => {
                    self.counters.error();
                    return Err(f.into_error(&self.name, attempts, range));
                }
            }
        }
    }

    fn url(&self, action: Action<'_>) -> Attempt<String> {
        self.object
            .url(action)
            .map(String::from)
            .map_err(Failure::Fatal)
    }

    /// The object's size: `Content-Length` of a HEAD, else the total of a one-byte ranged GET's
    /// `Content-Range` (an empty object answers that with 416 and `bytes */0`); and for an S3
    /// object whose ETag is the MD5 of its bytes, that MD5.
    pub(crate) fn info(&self) -> Result<ObjectInfo> {
        self.retrying(None, || {
            let response = self.agent.head(self.url(Action::Head)?).call()?;
            match response.status().as_u16() {
                200 => {
                    if let Some(n) =
                        header(&response, "content-length").and_then(|v| v.parse().ok())
                    {
                        return Ok(ObjectInfo {
                            size: n,
                            md5: self.etag_md5(&response),
                        });
                    }
                }
                404 | 401 | 403 => return Err(status_failure(response)),
                s if s >= 500 || s == 429 => return Err(status_failure(response)),
                _ => {}
            }
            let mut response = self
                .agent
                .get(self.url(Action::Get)?)
                .header("Range", "bytes=0-0")
                .call()?;
            let status = response.status().as_u16();
            let total = header(&response, "content-range")
                .and_then(content_range)
                .and_then(|(_, _, total)| total);
            match (status, total) {
                (206 | 416, Some(total)) => {
                    let _ =
                        std::io::copy(&mut response.body_mut().as_reader(), &mut std::io::sink());
                    Ok(ObjectInfo {
                        size: total,
                        md5: None,
                    })
                }
                (200, _) => Err(Failure::Fatal(RemoteError::RangeIgnored {
                    url: self.name.clone(),
                    status,
                })),
                (206 | 416, None) => Err(Failure::Fatal(RemoteError::Protocol {
                    url: self.name.clone(),
                    detail: "no size in Content-Range".into(),
                })),
                _ => Err(status_failure(response)),
            }
        })
    }

    /// The MD5 an S3 answer's ETag gives: S3 (and Ceph RGW) make the ETag of an object written
    /// by one PUT the hex MD5 of its bytes, unless it is encrypted with SSE-KMS or SSE-C (then
    /// the answer names the encryption); a multipart object's ETag is `MD5-of-MD5s-PARTS`, not 32
    /// hex digits. Plain HTTP servers make ETags their own way: none is taken for an MD5.
    fn etag_md5(&self, response: &Response<Body>) -> Option<String> {
        if !matches!(self.object, Object::S3 { .. }) {
            return None;
        }
        let encrypted = header(response, "x-amz-server-side-encryption")
            .is_some_and(|v| v.starts_with("aws:kms"))
            || header(response, "x-amz-server-side-encryption-customer-algorithm").is_some();
        let etag = header(response, "etag")?.trim().trim_matches('"');
        let is_md5 = etag.len() == 32 && etag.bytes().all(|b| b.is_ascii_hexdigit());
        (is_md5 && !encrypted).then(|| etag.to_ascii_lowercase())
    }

    /// Fill `buf` with the object's bytes from `start`, in one ranged GET (and its retries,
    /// each asking only for what has not arrived). The range must lie within the object.
    pub(crate) fn get_into(&self, start: u64, buf: &mut [u8]) -> Result<()> {
        let len = buf.len();
        if len == 0 {
            return Ok(());
        }
        let end = start + len as u64;
        let mut got = 0usize;
        self.retrying(Some((start, end)), || {
            let from = start + got as u64;
            let mut response = self
                .agent
                .get(self.url(Action::Get)?)
                .header("Range", format!("bytes={from}-{}", end - 1))
                .call()?;
            match response.status().as_u16() {
                206 => {}
                s @ 200 => {
                    return Err(Failure::Fatal(RemoteError::RangeIgnored {
                        url: self.name.clone(),
                        status: s,
                    }))
                }
                _ => return Err(status_failure(response)),
            }
            let answered = header(&response, "content-range").and_then(content_range);
            if !matches!(answered, Some((f, l, _)) if f == from && l == end - 1) {
                return Err(Failure::Fatal(RemoteError::Protocol {
                    url: self.name.clone(),
                    detail: format!(
                        "asked for bytes {from}-{}, the answer holds {:?}",
                        end - 1,
                        header(&response, "content-range")
                    ),
                }));
            }
            let mut body = response.body_mut().as_reader();
            while got < len {
                match body.read(&mut buf[got..]) {
                    Ok(0) => return Err(Failure::Connection("the body ended early".into())),
                    Ok(n) => {
                        got += n;
                        self.counters.read_bytes(n);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e.into()),
                }
            }
            // Read to the end, so the connection goes back to the pool.
            match body.read(&mut [0u8; 1]) {
                Ok(0) => Ok(()),
                Ok(_) => Err(Failure::Fatal(RemoteError::Protocol {
                    url: self.name.clone(),
                    detail: "the body is longer than its range".into(),
                })),
                Err(e) => Err(e.into()),
            }
        })
    }

    /// PUT `body` as `action` (a whole object or a part), with `Content-MD5` when checksums are
    /// on; the answer's ETag, checked against the MD5 when it is one.
    pub(crate) fn put(&self, action: Action<'_>, body: &[u8]) -> Result<String> {
        let md5 = self.options.checksums.then(|| md5_of(body));
        self.retrying(None, || {
            let mut request = self.agent.put(self.url(action)?);
            if let Some((b64, _)) = &md5 {
                request = request.header("Content-MD5", b64);
            }
            let response = request.send(body)?;
            if response.status().as_u16() != 200 {
                return Err(match status_failure(response) {
                    Failure::Status {
                        status: 400,
                        detail,
                    } if detail.starts_with("BadDigest") => Failure::BadDigest(detail),
                    other => other,
                });
            }
            let etag = header(&response, "etag").unwrap_or("").to_string();
            if let Some((_, hex)) = &md5 {
                let bare = etag.trim_matches('"');
                let is_md5 = bare.len() == 32 && bare.bytes().all(|b| b.is_ascii_hexdigit());
                if is_md5 && !bare.eq_ignore_ascii_case(hex) {
                    return Err(Failure::Fatal(RemoteError::ChecksumMismatch {
                        url: self.name.clone(),
                        detail: format!("sent MD5 {hex}, the server stored {bare}"),
                    }));
                }
            }
            self.counters.written_bytes(body.len());
            Ok(etag)
        })
    }

    /// Start a multipart upload; its id.
    pub(crate) fn create_upload(&self) -> Result<String> {
        self.retrying(None, || {
            let mut response = self
                .agent
                .post(self.url(Action::CreateUpload)?)
                .send_empty()?;
            if response.status().as_u16() != 200 {
                return Err(status_failure(response));
            }
            let text = response.body_mut().read_to_string()?;
            rusty_s3::actions::CreateMultipartUpload::parse_response(&text)
                .map(|r| r.upload_id().to_string())
                .map_err(|e| {
                    Failure::Fatal(RemoteError::Protocol {
                        url: self.name.clone(),
                        detail: format!("CreateMultipartUpload answer: {e}"),
                    })
                })
        })
    }

    /// Complete upload `upload_id` of the parts with `etags`, in part order.
    pub(crate) fn complete_upload(&self, upload_id: &str, etags: &[String]) -> Result<()> {
        let body = self.object.complete_body(upload_id, etags);
        self.retrying(None, || {
            let mut response = self
                .agent
                .post(self.url(Action::Complete { upload_id })?)
                .send(body.as_bytes())?;
            if response.status().as_u16() != 200 {
                return Err(status_failure(response));
            }
            // S3 may answer 200 and report the failure in the body.
            let text = response.body_mut().read_to_string()?;
            if text.contains("<Error>") {
                let status = if text.contains("InternalError") {
                    500
                } else {
                    400
                };
                return Err(Failure::Status {
                    status,
                    detail: text.chars().take(300).collect(),
                });
            }
            Ok(())
        })
    }

    /// Abort upload `upload_id`: its parts are deleted and no object appears.
    pub(crate) fn abort_upload(&self, upload_id: &str) -> Result<()> {
        self.retrying(None, || {
            let response = self
                .agent
                .delete(self.url(Action::Abort { upload_id })?)
                .call()?;
            match response.status().as_u16() {
                // 404 (NoSuchUpload): gone already, as after an attempt whose answer was lost.
                200 | 204 | 404 => Ok(()),
                _ => Err(status_failure(response)),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn server_errors_throttling_and_broken_connections_are_retried_other_4xx_never() {
        let status = |status| Failure::Status {
            status,
            detail: String::new(),
        };
        for s in [500, 502, 503, 504, 429] {
            assert!(status(s).retryable(), "{s}");
        }
        for s in [400, 401, 403, 404, 409, 416] {
            assert!(!status(s).retryable(), "{s}");
        }
        assert!(Failure::Timeout.retryable());
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(matches!(Failure::from(reset), Failure::Connection(_)));
        let timed_out = std::io::Error::from(std::io::ErrorKind::TimedOut);
        assert!(matches!(Failure::from(timed_out), Failure::Timeout));
        assert!(Failure::from(ureq::Error::ConnectionFailed).retryable());
        assert!(!Failure::from(ureq::Error::HostNotFound).retryable());
        assert!(!Failure::Fatal(RemoteError::Config(String::new())).retryable());
    }

    #[test]
    fn failures_become_the_error_their_status_names() {
        let f = |status| Failure::Status {
            status,
            detail: "d".into(),
        };
        assert!(matches!(
            f(404).into_error("u", 1, None),
            RemoteError::NotFound { .. }
        ));
        assert!(matches!(
            f(403).into_error("u", 1, None),
            RemoteError::AccessDenied { .. }
        ));
        assert!(matches!(
            f(416).into_error("u", 1, Some((10, 20))),
            RemoteError::RangeNotSatisfiable {
                start: 10,
                end: 20,
                ..
            }
        ));
        assert!(matches!(
            f(503).into_error("u", 6, None),
            RemoteError::Server {
                status: 503,
                attempts: 6,
                ..
            }
        ));
        assert!(matches!(
            Failure::Timeout.into_error("u", 6, None),
            RemoteError::Timeout { attempts: 6, .. }
        ));
    }

    #[test]
    fn backoff_doubles_up_to_64_times_the_base_with_jitter_in_the_upper_half() {
        let base = Duration::from_millis(100);
        for retry in 1..12 {
            let full = base * (1 << (retry - 1).min(6));
            for _ in 0..20 {
                let d = backoff(base, retry);
                assert!(d >= full / 2 && d <= full, "retry {retry}: {d:?}");
            }
        }
        assert_eq!(backoff(Duration::ZERO, 3), Duration::ZERO);
    }

    #[test]
    fn content_range_headers_parse() {
        assert_eq!(content_range("bytes 0-0/100"), Some((0, 0, Some(100))));
        assert_eq!(
            content_range("bytes 8388608-16777215/67108864"),
            Some((8388608, 16777215, Some(67108864)))
        );
        assert_eq!(content_range("bytes 5-9/*"), Some((5, 9, None)));
        assert_eq!(content_range("bytes */0").map(|r| r.2), Some(Some(0)));
        assert_eq!(content_range("items 0-1/2"), None);
        assert_eq!(content_range("bytes x-1/2"), None);
    }

    #[test]
    fn md5_is_given_as_base64_for_the_header_and_hex_for_the_etag() {
        // RFC 1321's test suite: MD5("abc").
        let (b64, hex) = md5_of(b"abc");
        assert_eq!(hex, "900150983cd24fb0d6963f7d28e17f72");
        assert_eq!(b64, "kAFQmDzST7DWlj99KOF/cg==");
    }
}
