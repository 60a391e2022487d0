//! Settings of remote reads and writes, with their `HIPFILE_REMOTE_*` environment names.

use std::time::Duration;

use crate::error::{RemoteError, Result};

/// How remote objects are read and written.
///
/// | field | default | environment |
/// |---|---|---|
/// | `request_size` | 8 MiB | `HIPFILE_REMOTE_REQUEST_SIZE` (bytes, or with `K`/`M`/`G`) |
/// | `connections` | 16 | `HIPFILE_REMOTE_CONNECTIONS` |
/// | `connect_timeout` | 10 s | `HIPFILE_REMOTE_CONNECT_TIMEOUT_MS` |
/// | `read_timeout` | 30 s | `HIPFILE_REMOTE_READ_TIMEOUT_MS` |
/// | `retries` | 5 | `HIPFILE_REMOTE_RETRIES` |
/// | `backoff` | 100 ms | `HIPFILE_REMOTE_BACKOFF_MS` |
/// | `checksums` | on | `HIPFILE_REMOTE_CHECKSUM` (`true`/`false`, `1`/`0`, `on`/`off`) |
/// | `verify_reads` | off | `HIPFILE_REMOTE_VERIFY_READS` (as `HIPFILE_REMOTE_CHECKSUM`) |
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RemoteOptions {
    /// Bytes per ranged GET, and per uploaded part (at least 5 MiB for parts, S3's minimum). Also
    /// the size of each half of a staging lane.
    pub request_size: usize,
    /// Requests in flight at once for one read or write (threads, connections, staging lanes).
    pub connections: usize,
    /// How long establishing a connection may take.
    pub connect_timeout: Duration,
    /// How long a response may stay silent (per read of the socket, so a long transfer that keeps
    /// moving never times out).
    pub read_timeout: Duration,
    /// Attempts after the first for a request that failed in a way worth repeating (5xx, 429, a
    /// reset or refused connection, a timeout); never for other 4xx answers.
    pub retries: u32,
    /// The first wait before a retry; each later one doubles, with random jitter, up to 64 times
    /// this.
    pub backoff: Duration,
    /// Send `Content-MD5` with uploaded parts and check each part's ETag against it. Costs an
    /// MD5 of each part on the thread that sends it, beside the part's transfer.
    pub checksums: bool,
    /// Check a read of a whole object against the object's MD5, where its ETag is one (an
    /// object written by one PUT, not encrypted with SSE-KMS or SSE-C; see the crate docs).
    /// Off by default: the bytes are hashed in object order, one piece after the other, which
    /// bounds the read at one core's MD5 speed.
    pub verify_reads: bool,
}

/// S3's smallest part (but the last) of a multipart upload.
pub const MIN_PART_SIZE: usize = 5 << 20;

impl Default for RemoteOptions {
    fn default() -> Self {
        RemoteOptions {
            request_size: 8 << 20,
            connections: 16,
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            retries: 5,
            backoff: Duration::from_millis(100),
            checksums: true,
            verify_reads: false,
        }
    }
}

impl RemoteOptions {
    /// The defaults, overridden by the `HIPFILE_REMOTE_*` variables of the process environment.
    pub fn from_env() -> Result<Self> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// The defaults, overridden by the `HIPFILE_REMOTE_*` variables `lookup` answers.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self> {
        let mut o = RemoteOptions::default();
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        if let Some(v) = get("HIPFILE_REMOTE_REQUEST_SIZE") {
            o.request_size =
                parse_size(&v).ok_or_else(|| bad("HIPFILE_REMOTE_REQUEST_SIZE", &v))?;
        }
        if let Some(v) = get("HIPFILE_REMOTE_CONNECTIONS") {
            o.connections = number(&v).ok_or_else(|| bad("HIPFILE_REMOTE_CONNECTIONS", &v))?;
        }
        if let Some(v) = get("HIPFILE_REMOTE_CONNECT_TIMEOUT_MS") {
            o.connect_timeout = Duration::from_millis(
                number(&v).ok_or_else(|| bad("HIPFILE_REMOTE_CONNECT_TIMEOUT_MS", &v))?,
            );
        }
        if let Some(v) = get("HIPFILE_REMOTE_READ_TIMEOUT_MS") {
            o.read_timeout = Duration::from_millis(
                number(&v).ok_or_else(|| bad("HIPFILE_REMOTE_READ_TIMEOUT_MS", &v))?,
            );
        }
        if let Some(v) = get("HIPFILE_REMOTE_RETRIES") {
            o.retries = number(&v).ok_or_else(|| bad("HIPFILE_REMOTE_RETRIES", &v))?;
        }
        if let Some(v) = get("HIPFILE_REMOTE_BACKOFF_MS") {
            o.backoff = Duration::from_millis(
                number(&v).ok_or_else(|| bad("HIPFILE_REMOTE_BACKOFF_MS", &v))?,
            );
        }
        if let Some(v) = get("HIPFILE_REMOTE_CHECKSUM") {
            o.checksums = switch(&v).ok_or_else(|| bad("HIPFILE_REMOTE_CHECKSUM", &v))?;
        }
        if let Some(v) = get("HIPFILE_REMOTE_VERIFY_READS") {
            o.verify_reads = switch(&v).ok_or_else(|| bad("HIPFILE_REMOTE_VERIFY_READS", &v))?;
        }
        o.validate()?;
        Ok(o)
    }

    /// Refuse settings no request can run with.
    pub fn validate(&self) -> Result<()> {
        if self.request_size == 0 {
            return Err(RemoteError::Config("request_size must be above 0".into()));
        }
        if self.connections == 0 {
            return Err(RemoteError::Config("connections must be above 0".into()));
        }
        if self.connect_timeout.is_zero() || self.read_timeout.is_zero() {
            return Err(RemoteError::Config("timeouts must be above 0".into()));
        }
        Ok(())
    }

    /// The size of each uploaded part: the request size, raised to S3's minimum.
    pub fn part_size(&self) -> usize {
        self.request_size.max(MIN_PART_SIZE)
    }
}

fn bad(name: &str, value: &str) -> RemoteError {
    RemoteError::Config(format!("{name}={value:?} is not a valid value"))
}

fn switch(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
}

fn number<T: std::str::FromStr>(v: &str) -> Option<T> {
    v.trim().parse().ok()
}

/// `4096`, `64K`, `8M`, `1G` (binary units, case-insensitive, an optional trailing `iB`/`B`).
pub(crate) fn parse_size(v: &str) -> Option<usize> {
    let v = v.trim().to_ascii_uppercase();
    let v = v
        .strip_suffix("IB")
        .or_else(|| v.strip_suffix('B'))
        .unwrap_or(&v);
    let (digits, shift) = match v.chars().last()? {
        'K' => (&v[..v.len() - 1], 10),
        'M' => (&v[..v.len() - 1], 20),
        'G' => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    let n: usize = digits.trim().parse().ok()?;
    n.checked_mul(1usize.checked_shl(shift)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn the_environment_overrides_the_defaults() {
        assert_eq!(
            RemoteOptions::from_lookup(env(&[])).unwrap(),
            RemoteOptions::default()
        );
        let o = RemoteOptions::from_lookup(env(&[
            ("HIPFILE_REMOTE_REQUEST_SIZE", "4M"),
            ("HIPFILE_REMOTE_CONNECTIONS", "3"),
            ("HIPFILE_REMOTE_CONNECT_TIMEOUT_MS", "250"),
            ("HIPFILE_REMOTE_READ_TIMEOUT_MS", "1500"),
            ("HIPFILE_REMOTE_RETRIES", "0"),
            ("HIPFILE_REMOTE_BACKOFF_MS", "7"),
            ("HIPFILE_REMOTE_CHECKSUM", "off"),
            ("HIPFILE_REMOTE_VERIFY_READS", "on"),
        ]))
        .unwrap();
        assert_eq!(o.request_size, 4 << 20);
        assert_eq!(o.connections, 3);
        assert_eq!(o.connect_timeout, Duration::from_millis(250));
        assert_eq!(o.read_timeout, Duration::from_millis(1500));
        assert_eq!((o.retries, o.backoff), (0, Duration::from_millis(7)));
        assert!(!o.checksums);
        assert!(o.verify_reads);
        assert_eq!(o.part_size(), MIN_PART_SIZE, "parts are at least 5 MiB");
    }

    #[test]
    fn malformed_values_are_errors_naming_the_variable() {
        for (name, value) in [
            ("HIPFILE_REMOTE_REQUEST_SIZE", "lots"),
            ("HIPFILE_REMOTE_REQUEST_SIZE", "0"),
            ("HIPFILE_REMOTE_CONNECTIONS", "-1"),
            ("HIPFILE_REMOTE_CONNECTIONS", "0"),
            ("HIPFILE_REMOTE_CHECKSUM", "maybe"),
            ("HIPFILE_REMOTE_VERIFY_READS", "2"),
        ] {
            let e = RemoteOptions::from_lookup(env(&[(name, value)])).unwrap_err();
            assert!(matches!(e, RemoteError::Config(_)), "{name}={value}: {e}");
        }
    }

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64k"), Some(64 << 10));
        assert_eq!(parse_size("8MiB"), Some(8 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("M"), None);
        assert_eq!(parse_size("99999999999999999999G"), None);
    }
}
