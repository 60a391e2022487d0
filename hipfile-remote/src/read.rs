//! Reading a remote object: [`RemoteFile`] and its pending reads.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use md5::{Digest, Md5};

use hipfile::{AsDeviceMut, Driver, Error, ErrorKind};
use hipfile_hip::DeviceRange;

use crate::aws::AwsConfig;
use crate::client::Client;
use crate::error::{RemoteError, Result};
use crate::lanes::DriverLanes;
use crate::location::{Object, ObjectUrl};
use crate::options::RemoteOptions;
use crate::plan::Pieces;
use crate::stats::RemoteCounts;

/// A remote object open for reading: its URL, its size (read once, at open), a connection pool.
///
/// Cheap to clone (clones share the connections); `Send + Sync`, so any number of threads may
/// read through one.
#[derive(Clone, Debug)]
pub struct RemoteFile {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    url: ObjectUrl,
    size: u64,
    /// The object's MD5, where its ETag is one.
    md5: Option<String>,
    lanes: Arc<DriverLanes>,
}

/// First failure of a read shared out among threads; the others stop at their next piece.
#[derive(Default)]
struct FirstError {
    failed: AtomicBool,
    error: Mutex<Option<RemoteError>>,
}

impl FirstError {
    fn stopped(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    fn record(&self, result: Result<()>) {
        if let Err(e) = result {
            self.failed.store(true, Ordering::Relaxed);
            self.error
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get_or_insert(e);
        }
    }

    fn into_result(self) -> Result<()> {
        match self
            .error
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner)
        {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The MD5 of a read's pieces taken in object order: the thread that received piece `i` waits
/// until pieces `0..i` are hashed, hashes its own, and lets the next one in.
struct InOrder {
    state: Mutex<(usize, Md5)>,
    turn: Condvar,
}

impl InOrder {
    fn new() -> Self {
        InOrder {
            state: Mutex::new((0, Md5::new())),
            turn: Condvar::new(),
        }
    }

    /// Hash `bytes`, piece `index`, in its turn; returns without hashing once the read failed
    /// (the piece before it may never come).
    fn hash(&self, index: usize, bytes: &[u8], first: &FirstError) {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while state.0 != index {
            if first.stopped() {
                return;
            }
            state = self
                .turn
                .wait_timeout(state, Duration::from_millis(20))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        state.1.update(bytes);
        state.0 += 1;
        self.turn.notify_all();
    }

    /// The hex MD5 of the pieces, if all `count` were hashed.
    fn finish(self, count: usize) -> Option<String> {
        let (hashed, md5) = self
            .state
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        (hashed == count).then(|| hex(&md5.finalize()))
    }
}

fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn hip(e: hipfile_hip::HipError, context: &str) -> RemoteError {
    RemoteError::Device(Error::hip(&e, context))
}

impl RemoteFile {
    /// Open the object at `url` (`s3://bucket/key`, `http(s)://...`) for reads into memory of
    /// `driver`'s GPU runtime; `s3://` takes its endpoint, region and credentials from the
    /// environment and the AWS files ([`AwsConfig::from_env`]). Asks the server for the size.
    pub fn open(driver: &Driver, url: &str, options: RemoteOptions) -> Result<RemoteFile> {
        Self::open_with(driver, url, options, None)
    }

    /// [`RemoteFile::open`] with the AWS configuration given rather than read from the
    /// environment (`None`: read it).
    pub fn open_with(
        driver: &Driver,
        url: &str,
        options: RemoteOptions,
        aws: Option<&AwsConfig>,
    ) -> Result<RemoteFile> {
        options.validate()?;
        let parsed = ObjectUrl::parse(url)?;
        let object = Object::resolve(&parsed, aws)?;
        let lanes = DriverLanes::of(driver)?;
        let client = Client::new(
            object,
            parsed.to_string(),
            options,
            Arc::clone(&lanes.counters),
        );
        let info = client.info()?;
        Ok(RemoteFile {
            inner: Arc::new(Inner {
                client,
                url: parsed,
                size: info.size,
                md5: info.md5,
                lanes,
            }),
        })
    }

    /// The object's size in bytes, as the server reported it at open.
    pub fn nbytes(&self) -> u64 {
        self.inner.size
    }

    /// The object's URL.
    pub fn url(&self) -> &ObjectUrl {
        &self.inner.url
    }

    /// The settings reads run with.
    pub fn options(&self) -> &RemoteOptions {
        self.inner.client.options()
    }

    /// The remote path's counters (of every object of this driver).
    pub fn counts(&self) -> RemoteCounts {
        self.inner.client.counters().snapshot()
    }

    /// Pinned host memory the remote path of this driver holds in staging lanes.
    pub fn pinned_bytes(&self) -> usize {
        self.inner.lanes.pinned_bytes()
    }

    /// The bytes a read of `len` at `offset` moves: fewer than `len` only at the end of the
    /// object, 0 from its end on (as `pread`).
    fn clamp(&self, offset: u64, len: usize) -> usize {
        let left = self.inner.size.saturating_sub(offset);
        usize::try_from(left).map_or(len, |left| len.min(left))
    }

    /// Read the object's bytes from `offset` into device memory `dst` (its whole length):
    /// ranged GETs of `request_size` bytes, up to `connections` at once, each received straight
    /// into a pinned staging half and copied to the device while the next one arrives. Returns
    /// the bytes read: `dst.len()`, fewer only at the end of the object, 0 at or past it. Any
    /// failed request fails the read; no count of bytes is reported that did not arrive.
    pub fn read(&self, mut dst: impl AsDeviceMut, offset: u64) -> Result<usize> {
        let slice = dst.as_device_mut();
        let n = self.clamp(offset, slice.len());
        if n == 0 {
            return Ok(0);
        }
        let range = DeviceRange::query(&self.inner.lanes.runtime, slice.ptr(), n)
            .map_err(|e| hip(e, "the read's destination"))?;
        let pieces = Pieces::new(offset, n, self.options().request_size);
        let next = AtomicUsize::new(0);
        let first = FirstError::default();
        let expected = self.expected_md5(offset, n);
        let in_order = expected.map(|_| InOrder::new());
        let threads = self.options().connections.min(pieces.count());
        let run = || self.stage(&range, &pieces, &next, &first, in_order.as_ref());
        std::thread::scope(|s| {
            for _ in 1..threads {
                s.spawn(|| first.record(run()));
            }
            first.record(run());
        });
        first.into_result()?;
        if let (Some(expected), Some(in_order)) = (expected, in_order) {
            let found = in_order.finish(pieces.count()).unwrap_or_default();
            self.check_md5(expected, &found)?;
        }
        Ok(n)
    }

    /// The MD5 a read of `n` bytes at `offset` is checked against: the object's, when the read
    /// is the whole object and reads are verified.
    fn expected_md5(&self, offset: u64, n: usize) -> Option<&str> {
        let whole = offset == 0 && n as u64 == self.inner.size;
        if !(whole && self.options().verify_reads) {
            return None;
        }
        self.inner.md5.as_deref()
    }

    fn check_md5(&self, expected: &str, found: &str) -> Result<()> {
        if expected == found {
            return Ok(());
        }
        self.inner.client.counters().error();
        Err(RemoteError::ChecksumMismatch {
            url: self.inner.client.name().to_string(),
            detail: format!("the object's ETag is MD5 {expected}, the bytes read hash to {found}"),
        })
    }

    /// One thread's share of a device read: take pieces until none are left, each received into
    /// one half of the thread's lane while the other half's copy to the device runs.
    fn stage(
        &self,
        dst: &DeviceRange,
        pieces: &Pieces,
        next: &AtomicUsize,
        first: &FirstError,
        in_order: Option<&InOrder>,
    ) -> Result<()> {
        let options = self.options();
        let chunk = options.request_size;
        let bound = chunk
            .saturating_mul(2)
            .saturating_mul(options.connections.max(1));
        let mut lane = self.inner.lanes.lane(dst.device(), chunk, bound)?;
        let mut slot = 0;
        let staged = loop {
            if first.stopped() {
                break Ok(());
            }
            let index = next.fetch_add(1, Ordering::Relaxed);
            let Some(piece) = pieces.get(index) else {
                break Ok(());
            };
            let half = match lane.half_mut(slot) {
                Ok(h) => h,
                Err(e) => break Err(hip(e, "waiting for a staging half")),
            };
            if let Err(e) = self
                .inner
                .client
                .get_into(piece.object_offset, &mut half[..piece.len])
            {
                break Err(e);
            }
            if let Some(in_order) = in_order {
                in_order.hash(index, &half[..piece.len], first);
            }
            let Some(target) = dst.slice(piece.buffer_offset, piece.len) else {
                break Err(RemoteError::Device(Error::new(
                    ErrorKind::InternalError,
                    "a piece outside its read's memory",
                )));
            };
            if let Err(e) = lane.upload(slot, &target) {
                break Err(hip(e, "copying a staged piece to the device"));
            }
            slot ^= 1;
        };
        let drained = lane
            .finish()
            .map_err(|e| hip(e, "finishing the staged copies"));
        staged.and(drained)
    }

    /// Read the object's bytes from `offset` into host memory `dst`, each ranged GET received
    /// straight into its part of `dst`, up to `connections` at once. Returns the bytes read, as
    /// [`RemoteFile::read`].
    pub fn read_host(&self, dst: &mut [u8], offset: u64) -> Result<usize> {
        let n = self.clamp(offset, dst.len());
        if n == 0 {
            return Ok(0);
        }
        let size = self.options().request_size;
        let mut parts: Vec<(u64, &mut [u8])> = dst[..n]
            .chunks_mut(size)
            .enumerate()
            .map(|(i, part)| (offset + (i * size) as u64, part))
            .collect();
        parts.reverse();
        let threads = self.options().connections.min(parts.len());
        let parts = Mutex::new(parts);
        let first = FirstError::default();
        let work = || -> Result<()> {
            loop {
                if first.stopped() {
                    return Ok(());
                }
                let part = parts.lock().unwrap_or_else(PoisonError::into_inner).pop();
                let Some((at, buf)) = part else {
                    return Ok(());
                };
                self.inner.client.get_into(at, buf)?;
            }
        };
        std::thread::scope(|s| {
            for _ in 1..threads {
                s.spawn(|| first.record(work()));
            }
            first.record(work());
        });
        first.into_result()?;
        if let Some(expected) = self.expected_md5(offset, n) {
            // The parts are all in place, in object order: one pass over them.
            self.check_md5(expected, &hex(&Md5::digest(&dst[..n])))?;
        }
        Ok(n)
    }

    /// Start reading from `offset` into `dst`, which the read owns until it is waited for, on a
    /// thread of its own; the answer is [`PendingRead::wait`]'s. `dst` may be a
    /// [`hipfile::DeviceBuffer`], a [`hipfile::RegisteredBuffer`], or a
    /// `DeviceSliceMut<'static>` of memory made elsewhere.
    pub fn pread<M>(&self, dst: M, offset: u64) -> PendingRead<M>
    where
        M: AsDeviceMut + Send + 'static,
    {
        let file = self.clone();
        let thread = std::thread::Builder::new()
            .name("hipfile-remote-read".into())
            .spawn(move || {
                let mut dst = dst;
                let result = file.read(&mut dst, offset);
                (dst, result)
            });
        PendingRead { thread }
    }
}

impl RemoteFile {
    /// [`RemoteFile::pread`] into host memory: `dst` (a `Vec<u8>`, a `Box<[u8]>`) is read as
    /// [`RemoteFile::read_host`] reads, on a thread of its own.
    pub fn pread_host<B>(&self, dst: B, offset: u64) -> PendingRead<B>
    where
        B: AsMut<[u8]> + Send + 'static,
    {
        let file = self.clone();
        let thread = std::thread::Builder::new()
            .name("hipfile-remote-read".into())
            .spawn(move || {
                let mut dst = dst;
                let result = file.read_host(dst.as_mut(), offset);
                (dst, result)
            });
        PendingRead { thread }
    }
}

/// A read started by [`RemoteFile::pread`] or [`RemoteFile::pread_host`]; owns its destination until waited for. Dropping it
/// without waiting lets the read finish on its own and drops the destination then.
#[derive(Debug)]
pub struct PendingRead<M> {
    thread: std::io::Result<JoinHandle<(M, Result<usize>)>>,
}

impl<M> PendingRead<M> {
    /// Whether the read has finished (so [`PendingRead::wait`] returns at once).
    pub fn is_done(&self) -> bool {
        self.thread.as_ref().map_or(true, JoinHandle::is_finished)
    }

    /// Wait for the read: the bytes read, as [`RemoteFile::read`].
    pub fn wait(self) -> Result<usize> {
        self.wait_with_buffer().map(|(_, n)| n)
    }

    /// Wait for the read, and take the destination back with the bytes read.
    pub fn wait_with_buffer(self) -> Result<(M, usize)> {
        let thread = self
            .thread
            .map_err(|e| RemoteError::Device(Error::from_io(&e, "starting the read's thread")))?;
        match thread.join() {
            Ok((dst, result)) => result.map(|n| (dst, n)),
            Err(_) => Err(RemoteError::Device(Error::new(
                ErrorKind::InternalError,
                "the read's thread panicked",
            ))),
        }
    }
}
