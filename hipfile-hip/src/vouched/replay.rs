//! Upstream hipFile's design of stream-ordered reads, replayed so that ours can be measured
//! against it: each op is a host function on the application's stream that `pread`s its piece
//! into pinned host memory, followed on the same stream by an asynchronous host-to-device copy of
//! that piece. Host functions run on the runtime's callback thread (one per process on the GPU
//! runtimes), so every op's `pread` waits for the ones queued before it, on any stream.
//!
//! [`HostFunctionReader`] owns the pinned memory, cut into pieces (slots), and never hands out a
//! slice of it. [`HostFunctionReader::read_on`] claims a free piece (waiting for one when all are
//! in flight: the pieces are the window of ops in flight) and queues, on the stream:
//!
//! 1. a host function that reads the file's bytes into the piece;
//! 2. an asynchronous copy of the piece to the device range;
//! 3. a host function that gives the piece back and drops its share of the memory.
//!
//! Why that is sound:
//! - the piece is written only by step 1 and read only by step 2, both stream-ordered: the copy
//!   starts after the host function returned, and step 3 runs after the copy completed, so no
//!   other op can claim the piece before its copy is done;
//! - the memory lives until the last share is dropped, and each queued op holds a share until
//!   its step 3 ran (after the stream passed its last use of the piece), so dropping the reader
//!   with ops in flight frees nothing they use;
//! - a share dropped last inside a host function would free pinned memory on the runtime's
//!   callback thread, and freeing pinned memory synchronizes the device (`hipHostFree`,
//!   `cudaFreeHost`): runtime calls are forbidden there. The last share is dropped on a thread of
//!   its own instead (or leaked when no thread can be made);
//! - where step 3 cannot be queued, the piece is never given back and its share is leaked: the
//!   memory is then never freed, rather than freed under a host function that may still write it.
//!
//! A host function cannot report a failure to the stream: a read that fails (or meets the end of
//! the file before its piece is full) is counted ([`HostFunctionReader::failed_reads`]) and its
//! copy still moves the piece, so a caller that checks the bytes sees the failure too.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use crate::error::{HipError, HipErrorCode, HipResult};
use crate::runtime::{GpuRuntime, PinnedBuffer};

/// Reads a file into device memory as upstream hipFile's stream-ordered ops do: a `pread` in a
/// host function into pinned memory, then an asynchronous copy, both on the caller's stream. See
/// the module docs.
pub struct HostFunctionReader {
    pub(super) shared: Arc<Shared>,
}

/// What the reader and its queued ops share.
pub(super) struct Shared {
    /// `slots * piece` bytes; never borrowed as a slice after it was made (only through
    /// `piece_ptr`, under the slot discipline of the module docs).
    pub(super) pinned: PinnedBuffer,
    pub(super) piece: usize,
    slots: usize,
    /// `true` for a piece that no queued op holds.
    free: Mutex<Vec<bool>>,
    given_back: Condvar,
    /// Pieces that can never be given back (their last step could not be queued).
    pub(super) lost: AtomicUsize,
    failed: AtomicUsize,
    first_failure: Mutex<Option<String>>,
}

impl Shared {
    /// The first byte of piece `slot`.
    pub(super) fn piece_ptr(&self, slot: usize) -> *mut u8 {
        // `as_ptr` is the raw allocation address, not a pointer derived from a Rust borrow.
        self.pinned
            .as_ptr()
            .cast_mut()
            .wrapping_add(slot * self.piece)
    }

    /// Claim a free piece, waiting while every piece is held by a queued op.
    pub(super) fn claim(&self) -> HipResult<usize> {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(slot) = free.iter().position(|f| *f) {
                free[slot] = false;
                return Ok(slot);
            }
            if self.lost.load(Ordering::Acquire) >= self.slots {
                return Err(HipError::call(
                    "HostFunctionReader: every piece is lost",
                    HipErrorCode::UNKNOWN,
                ));
            }
            free = self
                .given_back
                .wait(free)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    pub(super) fn give_back(&self, slot: usize) {
        let mut free = self.free.lock().unwrap_or_else(PoisonError::into_inner);
        free[slot] = true;
        drop(free);
        self.given_back.notify_all();
    }

    pub(crate) fn fail(&self, why: String) {
        self.failed.fetch_add(1, Ordering::AcqRel);
        let mut first = self
            .first_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        first.get_or_insert(why);
    }
}

impl HostFunctionReader {
    /// A reader with `slots` pieces of `piece` bytes of pinned memory of `runtime` (touched, so
    /// the first read into it pays no page faults). At most `slots` ops are in flight at once.
    /// Zero slots or pieces, or a size that overflows, are `hipErrorInvalidValue`.
    pub fn new(runtime: Arc<dyn GpuRuntime>, piece: usize, slots: usize) -> HipResult<Self> {
        let bytes = match piece.checked_mul(slots) {
            Some(b) if b > 0 => b,
            _ => {
                return Err(HipError::call(
                    "HostFunctionReader::new: no pinned memory asked",
                    HipErrorCode::INVALID_VALUE,
                ))
            }
        };
        let pinned = PinnedBuffer::new(runtime, bytes)?;
        Ok(HostFunctionReader {
            shared: Arc::new(Shared {
                pinned,
                piece,
                slots,
                free: Mutex::new(vec![true; slots]),
                given_back: Condvar::new(),
                lost: AtomicUsize::new(0),
                failed: AtomicUsize::new(0),
                first_failure: Mutex::new(None),
            }),
        })
    }

    /// Bytes of one piece: the most one op moves.
    pub fn piece(&self) -> usize {
        self.shared.piece
    }

    /// Pieces: the most ops in flight at once.
    pub fn slots(&self) -> usize {
        self.shared.slots
    }

    /// Ops queued whose piece has not been given back yet.
    pub fn in_flight(&self) -> usize {
        let free = self
            .shared
            .free
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        free.iter().filter(|f| !**f).count()
    }

    /// Reads that failed or found fewer bytes than their piece asked, since the reader was made.
    pub fn failed_reads(&self) -> usize {
        self.shared.failed.load(Ordering::Acquire)
    }

    /// The first of those failures, described.
    pub fn first_failure(&self) -> Option<String> {
        self.shared
            .first_failure
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl fmt::Debug for HostFunctionReader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostFunctionReader")
            .field("piece", &self.shared.piece)
            .field("slots", &self.shared.slots)
            .field("in_flight", &self.in_flight())
            .field("failed_reads", &self.failed_reads())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{DeviceBuffer, OwnedStream};
    use crate::sim::SimRuntime;
    use crate::{DeviceRange, StreamRef};
    use std::fs::File;
    use std::io::Write;
    use std::sync::mpsc;

    fn file_of(bytes: &[u8]) -> (tempfile::NamedTempFile, Arc<File>) {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(bytes).unwrap();
        let file = Arc::new(File::open(f.path()).unwrap());
        (f, file)
    }

    fn pattern(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 13 + i / 251) as u8).collect()
    }

    fn code<T: fmt::Debug>(r: HipResult<T>) -> HipErrorCode {
        match r {
            Err(HipError::Call { code, .. }) => code,
            other => panic!("expected a failed call, got {other:?}"),
        }
    }

    #[test]
    fn pieces_read_on_several_streams_land_where_asked() {
        let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
        let bytes = pattern(16 * 4096);
        let (_keep, file) = file_of(&bytes);
        let dst = DeviceBuffer::new(Arc::clone(&rt), bytes.len()).unwrap();
        let range = DeviceRange::query(&rt, dst.ptr(), bytes.len()).unwrap();
        // Two pieces for sixteen ops on two streams: ops wait for pieces given back.
        let reader = HostFunctionReader::new(Arc::clone(&rt), 4096, 2).unwrap();
        let streams = [
            OwnedStream::new_independent(Arc::clone(&rt)).unwrap(),
            OwnedStream::new_independent(Arc::clone(&rt)).unwrap(),
        ];
        let refs = [StreamRef::of(&streams[0]), StreamRef::of(&streams[1])];
        for i in 0..16 {
            let piece = range.slice(i * 4096, 4096).unwrap();
            reader
                .read_on(&refs[i % 2], Arc::clone(&file), (i * 4096) as u64, &piece)
                .unwrap();
        }
        for s in &refs {
            s.synchronize().unwrap();
        }
        assert_eq!(dst.to_vec().unwrap(), bytes);
        assert_eq!(reader.failed_reads(), 0);
        assert_eq!(reader.in_flight(), 0);
    }

    #[test]
    fn a_read_past_the_end_is_counted_and_refusals_queue_nothing() {
        let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
        let (_keep, file) = file_of(&pattern(4096));
        let dst = DeviceBuffer::new(Arc::clone(&rt), 8192).unwrap();
        let range = DeviceRange::query(&rt, dst.ptr(), 8192).unwrap();
        let reader = HostFunctionReader::new(Arc::clone(&rt), 4096, 1).unwrap();
        let stream = OwnedStream::new(Arc::clone(&rt)).unwrap();
        let s = StreamRef::of(&stream);
        reader
            .read_on(&s, Arc::clone(&file), 2048, &range.slice(0, 4096).unwrap())
            .unwrap();
        s.synchronize().unwrap();
        assert_eq!(reader.failed_reads(), 1);
        let why = reader.first_failure().unwrap();
        assert!(why.starts_with("pread of 4096 bytes at 2048"), "{why}");

        assert_eq!(
            code(reader.read_on(&s, Arc::clone(&file), 0, &range)),
            HipErrorCode::INVALID_VALUE
        );
        let other: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
        let theirs = DeviceBuffer::new(Arc::clone(&other), 4096).unwrap();
        let theirs = DeviceRange::query(&other, theirs.ptr(), 4096).unwrap();
        assert_eq!(
            code(reader.read_on(&s, Arc::clone(&file), 0, &theirs)),
            HipErrorCode::INVALID_VALUE
        );
        assert_eq!(reader.in_flight(), 0);
        assert!(HostFunctionReader::new(Arc::clone(&rt), 0, 4).is_err());
        assert!(HostFunctionReader::new(rt, usize::MAX, 2).is_err());
    }

    #[test]
    fn ops_queued_behind_held_work_outlive_the_reader() {
        let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
        let bytes = pattern(3 * 4096);
        let (_keep, file) = file_of(&bytes);
        let dst = DeviceBuffer::new(Arc::clone(&rt), bytes.len()).unwrap();
        let range = DeviceRange::query(&rt, dst.ptr(), bytes.len()).unwrap();
        let stream = OwnedStream::new_independent(Arc::clone(&rt)).unwrap();
        let s = StreamRef::of(&stream);
        // Hold the stream until the reader is gone.
        let (go, wait) = mpsc::channel::<()>();
        s.launch_host_func(Box::new(move || {
            let _ = wait.recv();
        }))
        .unwrap();
        let reader = HostFunctionReader::new(Arc::clone(&rt), 4096, 3).unwrap();
        for i in 0..3 {
            reader
                .read_on(
                    &s,
                    Arc::clone(&file),
                    (i * 4096) as u64,
                    &range.slice(i * 4096, 4096).unwrap(),
                )
                .unwrap();
        }
        assert_eq!(reader.in_flight(), 3);
        drop(reader);
        go.send(()).unwrap();
        s.synchronize().unwrap();
        assert_eq!(dst.to_vec().unwrap(), bytes);
    }
}
