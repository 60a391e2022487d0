//! # hipfile-remote: remote objects into and out of GPU memory
//!
//! Reads objects named `s3://bucket/key` or `http(s)://host/path` into device memory (and host
//! memory) with parallel ranged GETs on a connection pool, each response body received straight
//! into a pinned staging lane and copied to the GPU while the next one arrives; writes device or
//! host memory to `s3://` objects as multipart uploads.
//!
//! ```no_run
//! use hipfile::{Driver, AsDeviceMut};
//! use hipfile_remote::{RemoteFile, RemoteOptions, RemoteWriter};
//!
//! let driver = Driver::open()?;
//! let file = RemoteFile::open(&driver, "s3://models/llama.bin", RemoteOptions::from_env()?)?;
//! let mut weights = driver.alloc(file.nbytes() as usize)?;
//! let n = file.read(&mut weights, 0)?;
//! assert_eq!(n as u64, file.nbytes());
//!
//! // Start a read on its own thread; the buffer travels with it and comes back.
//! let pending = file.pread(driver.alloc(1 << 20)?, 4096);
//! let (_buffer, n) = pending.wait_with_buffer()?;
//!
//! let mut out = RemoteWriter::create(&driver, "s3://models/copy.bin", RemoteOptions::default())?;
//! out.write(&weights)?;
//! out.finish()?; // the object appears now, whole; a drop without finish aborts it
//! # Ok::<(), hipfile::Error>(())
//! ```
//!
//! ## Design
//!
//! - **Beside the session, not a backend.** A backend serves requests on registered file
//!   descriptors (`pread`/`pwrite` semantics, the C ABIs' `hipFileRead`); a remote object has no
//!   descriptor, and its errors, retries and sizes are HTTP's. So this crate is a reader and a
//!   writer over the facade's types ([`hipfile::Driver`], [`hipfile::AsDeviceMut`],
//!   [`hipfile::AsDevice`]), and the facade, `libhipfile.so` and `libcufile.so.0` do not depend on
//!   it: builds that want remote objects depend on this crate (the CLI and the Python package
//!   through their feature `remote`).
//! - **The staged engine's lanes.** Device reads and writes go through
//!   [`hipfile_fallback::staging::StagingPool`] lanes: two pinned halves, a private stream, an
//!   event per half. Each worker thread holds one lane: the body of request k+1 is read from the
//!   socket straight into one half (`&mut [u8]`, no intermediate buffer) while the copy of request
//!   k to the device runs from the other; uploads copy part k+1 from the device into one half
//!   while part k is sent from the other. The pool is the remote path's own, one per open driver
//!   (every object of that driver shares it, so lanes are reused across objects and reads), not
//!   the fallback backend's: that one lives inside the registry behind `dyn Backend`, sized for
//!   file IO's chunks, and a long HTTP request holding a file lane would stall file IO behind the
//!   network. Pinned memory is bounded at `2 x request_size x connections`, made on first use.
//! - **Host memory** is read straight into the caller's slice, each request into its own part,
//!   in parallel; host writes upload whole parts straight from the caller's slice. Bytes that do
//!   not fill a part (the head and tail of a write) wait in the writer's pageable buffer.
//! - **Defaults** ([`RemoteOptions`], also `HIPFILE_REMOTE_*`): 8 MiB per request, 16 requests in
//!   flight. One request per connection at a time; 16 connections of 8 MiB keep 128 MiB in
//!   flight, enough to fill a 10-25 GbE link at S3-like latencies (tens of ms to first byte)
//!   while each request stays long enough that its latency is small beside its transfer; 8 MiB is
//!   also above S3's 5 MiB part minimum, so one setting sizes GETs, parts and lane halves
//!   (256 MiB of pinned memory at most). Retries: 5, backoff from 100 ms doubling with jitter.
//! - **HTTP stack**: [`ureq`] 3 (blocking, one `Agent` per object as its connection pool,
//!   rustls, no async runtime: the engine is thread-based, and a tokio stack such as the AWS SDK
//!   would bring a runtime and a second threading model for what is a loop of blocking requests)
//!   and [`rusty_s3`] for S3: SigV4 presigned URLs of each action (HeadObject, GetObject,
//!   PutObject, the multipart calls), so the request itself carries no signed headers and
//!   `Range` or `Content-MD5` can be added freely, and the parsing of S3's XML answers. Neither
//!   needs a GPU runtime or a C library at build time. `md-5` for `Content-MD5`.
//! - **Addressing**: see [`AwsConfig`] for how an `s3://` URL finds its endpoint, region and
//!   credentials as the AWS CLI does; a configured endpoint (Ceph RGW, MinIO) is addressed by
//!   path, AWS by virtual host. `http(s)://` objects are read only; their size comes from a HEAD's
//!   `Content-Length`, or a `Range: bytes=0-0` GET's `Content-Range`.
//!
//! ## Contract
//!
//! - A read returns the bytes read: the destination's length, fewer only at the end of the
//!   object, 0 for a read starting at or past its end (as `pread`; the size is the one read at
//!   open). Any request failing for good fails the whole read: no count is reported for bytes
//!   that did not arrive, and the destination's contents are then unspecified.
//! - A server that answers a ranged GET with 200 (it ignores `Range`) fails the read with
//!   [`RemoteError::RangeIgnored`]; an answer whose `Content-Range` is not the range asked for is
//!   [`RemoteError::Protocol`]. Neither is retried.
//! - Retries (with the request re-signed, and a GET resuming after the bytes already received)
//!   are for 5xx, 429, timeouts and broken connections, and for an upload the server refuses as
//!   `BadDigest` (its bytes changed on the way: the writer still holds them, so they are sent
//!   again); never for other 4xx. Retries spent, a `BadDigest` is
//!   [`RemoteError::ChecksumMismatch`].
//! - A write's object appears only at [`RemoteWriter::finish`], whole; any failure aborts the
//!   upload and a writer dropped unfinished aborts it too. Where the abort cannot reach the
//!   server either (it is down), the error says so: [`RemoteError::UploadLeft`] names the upload
//!   whose parts stay on the server until it is aborted or a lifecycle rule expires it (a drop
//!   can only log it). No object is made either way.
//! - The server kept a part only if its MD5 is the part's `Content-MD5` (sent when
//!   [`RemoteOptions::checksums`] is on, the default): S3 and Ceph RGW refuse a part whose bytes
//!   do not hash to it, so a byte changed on the way never reaches an object.
//! - Everything is `Send + Sync`; [`RemoteFile`] clones share one connection pool.
//! - Counters ([`RemoteCounts`]: requests, bytes read and written, retries, errors) are kept
//!   per open driver and shown in its statistics as the path `remote` beside the backends
//!   ([`hipfile_core::SidePath`], `hipfile stats`).
//!
//! ## Checking what is read
//!
//! S3 gives no checksum of a byte range: a ranged GET is trusted as TCP (and TLS) deliver it.
//! What it gives is the object's ETag, which for an object written by one PUT (and not encrypted
//! with SSE-KMS or SSE-C) is the MD5 of its bytes; a multipart object's is an MD5 of the parts'
//! MD5s (`...-N`), which cannot be checked without knowing the part boundaries. So with
//! [`RemoteOptions::verify_reads`] a read of a whole `s3://` object whose ETag (from the HEAD at
//! open) is a plain MD5 is checked against it, and a mismatch fails the read with
//! [`RemoteError::ChecksumMismatch`] (counted as an error); reads of part of an object, of
//! multipart objects and of `http(s)://` objects (whose ETags are the server's own) are not
//! checked. MD5 is a running hash over the bytes in object order, while the pieces of a read
//! arrive in parallel and out of order: a host read hashes its destination in one pass once all
//! pieces are in; a device read hashes each piece in its staging half before the half is reused,
//! a piece waiting for those before it (pieces are taken in order, so the wait is only for
//! pieces already being received). Either way the read goes no faster than one core's MD5
//! (about 0.5 to 1 GB/s), below what the parallel requests reach on a fast link, so the check is
//! off by default and the default path does no hashing. A whole read that must be trusted
//! end to end turns it on; it also catches an object replaced between open and read.
//!
//! ## Errors
//!
//! [`RemoteError`] names what failed; `From<RemoteError> for hipfile::Error` gives callers of the
//! facade one error type: storage failures are [`hipfile::ErrorKind::Os`] with the errno a file
//! would give for the like failure, the remote error's text as the context:
//!
//! | [`RemoteError`] | errno |
//! |---|---|
//! | `NotFound` (404) | `ENOENT` |
//! | `AccessDenied` (401, 403) | `EACCES` |
//! | `RangeNotSatisfiable` (416: the object shrank) | `EINVAL` |
//! | `Timeout` | `ETIMEDOUT` |
//! | `Server` (5xx, 429 after retries, other 4xx), `Protocol` | `EIO` |
//! | `Connection` | `ECONNRESET` |
//! | `ChecksumMismatch` (a part the server refused as `BadDigest`, a whole read whose MD5 is not the ETag) | `EBADMSG` |
//! | `UploadLeft` (a write failed and its abort too) | that of the write's failure |
//! | `RangeIgnored` | `EOPNOTSUPP` |
//!
//! `InvalidUrl` and `Config` are [`hipfile::ErrorKind::InvalidValue`], `Unsupported` (a write to
//! an `http(s)://` URL, a writer used after a failure) [`hipfile::ErrorKind::IoNotSupported`], and
//! `Device` carries hipfile's own error unchanged.

#![forbid(unsafe_code)]

mod aws;
mod client;
mod error;
mod lanes;
mod location;
mod options;
mod plan;
mod read;
mod stats;
mod write;

pub use aws::AwsConfig;
pub use error::{RemoteError, Result};
pub use location::ObjectUrl;
pub use options::{RemoteOptions, MIN_PART_SIZE};
pub use read::{PendingRead, RemoteFile};
pub use stats::{RemoteCounters, RemoteCounts, COUNTER_NAMES, PATH_NAME};
pub use write::RemoteWriter;
