//! What can go wrong with a remote object, and how it reads as a [`hipfile::Error`].

use hipfile::{Error, ErrorKind};

/// A failure of a remote read or write.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// The object (or its bucket) does not exist: HTTP 404.
    #[error("{url}: not found ({detail})")]
    NotFound {
        /// The object's URL.
        url: String,
        /// The server's words (an S3 error code such as `NoSuchKey` or `NoSuchBucket`).
        detail: String,
    },
    /// The server refused the credentials or the request: HTTP 401 or 403 (S3's
    /// `InvalidAccessKeyId`, `SignatureDoesNotMatch`, `AccessDenied`).
    #[error("{url}: access denied ({detail})")]
    AccessDenied {
        /// The object's URL.
        url: String,
        /// The server's words.
        detail: String,
    },
    /// The server answered 416: the range starts at or past the end of the object (the object
    /// shrank since it was opened).
    #[error("{url}: range {start}..{end} not satisfiable (the object is shorter)")]
    RangeNotSatisfiable {
        /// The object's URL.
        url: String,
        /// First byte asked for.
        start: u64,
        /// One past the last byte asked for.
        end: u64,
    },
    /// A connection or a response stalled past the timeouts, on every attempt.
    #[error("{url}: timed out after {attempts} attempt(s)")]
    Timeout {
        /// The object's URL.
        url: String,
        /// Attempts made.
        attempts: u32,
    },
    /// The server kept failing (5xx, 429, or a 4xx outside the ones above, which is not retried).
    #[error("{url}: HTTP {status} after {attempts} attempt(s) ({detail})")]
    Server {
        /// The object's URL.
        url: String,
        /// The last HTTP status.
        status: u16,
        /// Attempts made.
        attempts: u32,
        /// The server's words.
        detail: String,
    },
    /// The connection failed (refused, reset, closed early), on every attempt.
    #[error("{url}: connection failed after {attempts} attempt(s): {detail}")]
    Connection {
        /// The object's URL.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// What failed last.
        detail: String,
    },
    /// What came back does not match its checksum (an uploaded part's ETag is not the MD5 of the
    /// bytes sent).
    #[error("{url}: checksum mismatch: {detail}")]
    ChecksumMismatch {
        /// The object's URL.
        url: String,
        /// Which checksum, expected and found.
        detail: String,
    },
    /// The server answered a ranged GET with the whole object (200, not 206): it does not honour
    /// `Range`, so no part of the object can be read at an offset.
    #[error("{url}: the server ignores Range (answered {status} to a ranged GET)")]
    RangeIgnored {
        /// The object's URL.
        url: String,
        /// The status it answered.
        status: u16,
    },
    /// The server answered something this client cannot use (a `Content-Range` that is not the
    /// range asked for, a body of the wrong length, an unparsable S3 answer).
    #[error("{url}: unexpected answer: {detail}")]
    Protocol {
        /// The object's URL.
        url: String,
        /// What was wrong.
        detail: String,
    },
    /// Not a URL this crate reads: `s3://bucket/key`, `http://...` or `https://...`.
    #[error("invalid remote URL {url:?}: {why}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// Why it is refused.
        why: String,
    },
    /// Settings or AWS configuration that cannot be used (a malformed `HIPFILE_REMOTE_*` value, no
    /// credentials for a write, an unreadable config file).
    #[error("remote configuration: {0}")]
    Config(String),
    /// A write failed, and aborting its multipart upload failed too (the server was gone): no
    /// object was made, but the parts uploaded so far stay on the server, in the upload named
    /// here, until it is aborted (`aws s3api abort-multipart-upload`) or a lifecycle rule expires
    /// it. Reads as `failure` in [`hipfile::Error`].
    #[error(
        "{failure}; aborting upload {upload_id} failed too ({abort}): no object was made, but \
         its parts stay on the server until the upload is aborted or expires"
    )]
    UploadLeft {
        /// What failed the write.
        failure: Box<RemoteError>,
        /// The multipart upload left behind.
        upload_id: String,
        /// Why the abort failed.
        abort: Box<RemoteError>,
    },
    /// A write used after it failed, or a request the object's kind does not support.
    #[error("{0}")]
    Unsupported(String),
    /// The GPU side failed (device memory, a staging lane's copy): hipfile's own error.
    #[error(transparent)]
    Device(#[from] Error),
}

impl RemoteError {
    /// The `errno` a reader of [`hipfile::Error`] sees for this failure, for those that are
    /// operating-system-like failures of the object's storage.
    fn errno(&self) -> Option<i32> {
        Some(match self {
            RemoteError::NotFound { .. } => libc::ENOENT,
            RemoteError::AccessDenied { .. } => libc::EACCES,
            RemoteError::RangeNotSatisfiable { .. } => libc::EINVAL,
            RemoteError::Timeout { .. } => libc::ETIMEDOUT,
            RemoteError::Server { .. } | RemoteError::Protocol { .. } => libc::EIO,
            RemoteError::Connection { .. } => libc::ECONNRESET,
            RemoteError::ChecksumMismatch { .. } => libc::EBADMSG,
            RemoteError::RangeIgnored { .. } => libc::EOPNOTSUPP,
            RemoteError::UploadLeft { failure, .. } => return failure.errno(),
            RemoteError::InvalidUrl { .. }
            | RemoteError::Config(_)
            | RemoteError::Unsupported(_)
            | RemoteError::Device(_) => return None,
        })
    }
}

/// One error type for callers of the facade: failures of the object's storage are
/// [`ErrorKind::Os`] with the errno a file read would give for the like failure (`ENOENT`,
/// `EACCES`, `ETIMEDOUT`, `EIO`, ...), the remote error's text as the context; bad URLs and
/// settings are [`ErrorKind::InvalidValue`]; device failures pass through unchanged.
impl From<RemoteError> for Error {
    fn from(e: RemoteError) -> Error {
        if let Some(errno) = e.errno() {
            return Error::os(errno, e.to_string());
        }
        match e {
            RemoteError::Device(inner) => inner,
            RemoteError::UploadLeft { failure, .. } => Error::from(*failure),
            RemoteError::Unsupported(s) => Error::new(ErrorKind::IoNotSupported, s),
            other => Error::new(ErrorKind::InvalidValue, other.to_string()),
        }
    }
}

/// Results of this crate.
pub type Result<T, E = RemoteError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_failures_read_as_the_errno_of_the_like_file_failure() {
        let url = || "s3://b/k".to_string();
        let cases = [
            (
                RemoteError::NotFound {
                    url: url(),
                    detail: "NoSuchKey".into(),
                },
                libc::ENOENT,
            ),
            (
                RemoteError::AccessDenied {
                    url: url(),
                    detail: "InvalidAccessKeyId".into(),
                },
                libc::EACCES,
            ),
            (
                RemoteError::Timeout {
                    url: url(),
                    attempts: 3,
                },
                libc::ETIMEDOUT,
            ),
            (
                RemoteError::RangeIgnored {
                    url: url(),
                    status: 200,
                },
                libc::EOPNOTSUPP,
            ),
        ];
        for (remote, errno) in cases {
            let text = remote.to_string();
            let e = Error::from(remote);
            assert_eq!((e.kind(), e.errno()), (ErrorKind::Os, Some(errno)));
            assert_eq!(e.context(), text);
        }
        let bad = Error::from(RemoteError::InvalidUrl {
            url: "ftp://x".into(),
            why: "scheme".into(),
        });
        assert_eq!(bad.kind(), ErrorKind::InvalidValue);
        let device = Error::new(ErrorKind::HipPointerInvalid, "not device memory");
        let back = Error::from(RemoteError::from(device));
        assert_eq!(back.kind(), ErrorKind::HipPointerInvalid);
    }
}
