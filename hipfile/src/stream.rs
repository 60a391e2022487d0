//! Stream-ordered IO: reads and writes that run in a GPU stream's order, without blocking the
//! thread that queues them (`hipFileReadAsync` / `hipFileWriteAsync`).
//!
//! [`crate::Driver::on_stream`] lends a [`StreamIo`] to a closure; each read or write queued
//! through it runs when the stream reaches it, and the stream's later work runs once its bytes
//! are in place. The call returns when every op queued through it has ended, so the files and
//! device memory the ops borrow outlive them; the `StreamIo` cannot leave the closure (a value
//! that could be `mem::forget`-ten would leave ops running into memory its owner has freed).
//! Each op answers a [`StreamOp`], which owns the op's slots: its result once it ended, and its
//! size and file offset, which may change until the stream reaches the op (late binding, for
//! streams whose flags do not fix them). The buffer offset is fixed: an op never moves out of
//! the memory it borrows.
//!
#![cfg_attr(feature = "fallback", doc = "```")]
#![cfg_attr(not(feature = "fallback"), doc = "```text")]
//! use hipfile::{Driver, DriverOptions};
//! use hipfile_hip::{sim::SimRuntime, GpuRuntime, OwnedStream, StreamRef};
//! use std::sync::Arc;
//!
//! let gpu: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
//! let driver = Driver::with_options(DriverOptions::with_runtime(Arc::clone(&gpu)))?;
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("data");
//! std::fs::write(&path, (0..8192).map(|i| i as u8).collect::<Vec<u8>>()).unwrap();
//! let file = std::fs::File::open(&path).unwrap();
//! let handle = driver.register_file(&file)?;
//! let mut first = driver.alloc(4096)?;
//! let mut second = driver.alloc(4096)?;
//! let stream = OwnedStream::new(Arc::clone(&gpu)).unwrap();
//!
//! let (a, b) = driver.on_stream(&StreamRef::of(&stream), |io| {
//!     let a = io.read(&handle, &mut first, 0)?;
//!     let b = io.read(&handle, &mut second, 4096)?;
//!     Ok::<_, hipfile::Error>((a, b))
//! })?;
//! assert_eq!(a.wait()?, 4096);
//! assert_eq!(b.wait()?, 4096);
//! assert_eq!(second.to_vec().unwrap()[0], (4096 % 256) as u8);
//! # Ok::<(), hipfile::Error>(())
//! ```
//!
//! The `StreamIo` cannot leave the closure:
//!
//! ```compile_fail
//! fn escape(driver: &hipfile::Driver, stream: &hipfile_hip::StreamRef<'_>) {
//!     let escaped = driver.on_stream(stream, |io| io);
//! }
//! ```
//!
//! An op whose file and memory are owned rather than borrowed needs no scope:
//! [`crate::Driver::read_on_stream`] and [`crate::Driver::write_on_stream`] queue it from the
//! calling thread and return an [`OwningStreamOp`], which holds them until the op ended. That is
//! the way for a caller that must not wait where it queues (a language binding): the queueing
//! still happens on its own thread, the one whose current device the null stream (0, or the
//! legacy handle 1) belongs to and whose per-thread default stream (2) the op is ordered on.

use std::borrow::Borrow;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use hipfile_core::{AsyncCall, AsyncSlots, Driver as CoreDriver, IoOp, Result};
use hipfile_hip::StreamRef;

use crate::call::{signed, Place};
use crate::file::FileHandle;
use crate::memory::{AsDevice, AsDeviceMut};
use crate::open::OpenReference;

/// The slots of one op: its arguments, which may change until the stream reaches it, and its
/// result.
#[derive(Debug, Default)]
struct Slots {
    size: AtomicUsize,
    file_offset: AtomicI64,
    buffer_offset: AtomicI64,
    result: Mutex<Option<Result<usize>>>,
    ended: Condvar,
}

impl AsyncSlots for Slots {
    fn size(&self) -> usize {
        self.size.load(Ordering::Acquire)
    }

    fn file_offset(&self) -> i64 {
        self.file_offset.load(Ordering::Acquire)
    }

    fn buffer_offset(&self) -> i64 {
        self.buffer_offset.load(Ordering::Acquire)
    }

    fn clear_result(&self) {}

    fn set_result(&self, result: &Result<usize>) {
        *self.result.lock().unwrap_or_else(PoisonError::into_inner) = Some(result.clone());
        self.ended.notify_all();
    }
}

/// One op queued on a stream: its result once the stream passed it, and its late-bound size and
/// file offset until the stream reaches it.
#[derive(Clone, Debug)]
pub struct StreamOp(Arc<Slots>);

impl StreamOp {
    /// The result, once the op ended: the bytes moved (fewer than asked only at the end of the
    /// file for a read) or the error.
    pub fn result(&self) -> Option<Result<usize>> {
        self.0
            .result
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Wait until the op ended, and answer its result. The op ends only after its stream reached
    /// it: waiting for an op behind work that never finishes waits forever, as synchronizing
    /// the stream would.
    pub fn wait(&self) -> Result<usize> {
        let mut result = self.0.result.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if let Some(result) = result.as_ref() {
                return result.clone();
            }
            result = self
                .0
                .ended
                .wait(result)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// Move fewer bytes than queued: read when the stream reaches the op, unless the stream is
    /// registered with `FIXED_FILE_SIZE`. A size larger than queued fails the op with
    /// `InvalidValue`, as upstream's does.
    pub fn set_size(&self, size: usize) {
        self.0.size.store(size, Ordering::Release);
    }

    /// Move the op's file offset: read when the stream reaches the op, unless the stream is
    /// registered with `FIXED_FILE_OFFSET`.
    pub fn set_file_offset(&self, file_offset: u64) -> Result<()> {
        self.0
            .file_offset
            .store(signed(file_offset)?, Ordering::Release);
        Ok(())
    }
}

/// Stream-ordered reads and writes on one stream, lent to the closure of
/// [`crate::Driver::on_stream`]; see the module docs.
#[derive(Debug)]
pub struct StreamIo<'buf, 's> {
    driver: Arc<OpenReference>,
    stream: &'s StreamRef<'s>,
    ops: Vec<StreamOp>,
    _borrows: PhantomData<&'buf mut ()>,
}

impl<'buf, 's> StreamIo<'buf, 's> {
    /// Lend a `StreamIo` on `stream` to `f`; wait for every op it queued when `f` returns (or
    /// unwinds).
    pub(crate) fn scope<R>(
        driver: Arc<OpenReference>,
        stream: &'s StreamRef<'s>,
        f: impl FnOnce(&mut StreamIo<'buf, 's>) -> R,
    ) -> R {
        let mut io = StreamIo {
            driver,
            stream,
            ops: Vec::new(),
            _borrows: PhantomData,
        };
        f(&mut io)
    }

    /// Queue a read of `dst.len()` bytes of `file` at `file_offset` into `dst`.
    pub fn read<M: AsDeviceMut + ?Sized>(
        &mut self,
        file: &'buf FileHandle,
        dst: &'buf mut M,
        file_offset: u64,
    ) -> Result<StreamOp> {
        self.queue(IoOp::Read, file, Place::of_mut(dst), file_offset)
    }

    /// Queue a write of all of `src` to `file` at `file_offset`.
    pub fn write<M: AsDevice + ?Sized>(
        &mut self,
        file: &'buf FileHandle,
        src: &'buf M,
        file_offset: u64,
    ) -> Result<StreamOp> {
        self.queue(IoOp::Write, file, Place::of(src), file_offset)
    }

    fn queue(
        &mut self,
        op: IoOp,
        file: &FileHandle,
        place: Place,
        file_offset: u64,
    ) -> Result<StreamOp> {
        let op = queue(&self.driver.core, self.stream, op, file, place, file_offset)?;
        self.ops.push(op.clone());
        Ok(op)
    }

    /// Ops queued through this `StreamIo` that have not ended.
    pub fn outstanding(&self) -> usize {
        self.ops.iter().filter(|op| op.result().is_none()).count()
    }
}

/// Queue `op` of the bytes at `place` to or from `file` at `file_offset` on `stream` through
/// `core`, from the calling thread.
fn queue(
    core: &CoreDriver,
    stream: &StreamRef<'_>,
    op: IoOp,
    file: &FileHandle,
    place: Place,
    file_offset: u64,
) -> Result<StreamOp> {
    let slots = Arc::new(Slots {
        size: AtomicUsize::new(place.size),
        file_offset: AtomicI64::new(signed(file_offset)?),
        buffer_offset: AtomicI64::new(place.signed_offset()?),
        ..Slots::default()
    });
    let session = core.async_session()?;
    core.submit_async(
        &session,
        AsyncCall {
            op,
            handle: file.id(),
            buffer: place.base,
            stream,
            slots: Arc::clone(&slots) as Arc<dyn AsyncSlots>,
            loan: None,
        },
    )?;
    Ok(StreamOp(slots))
}

/// A stream-ordered op that owns the file `F` and the memory `M` it uses, queued with no scope
/// around it by [`crate::Driver::read_on_stream`] or [`crate::Driver::write_on_stream`].
/// [`OwningStreamOp::op`] answers its result and late-bound arguments; dropping the value waits
/// until the op ended, then lets the file and the memory go.
///
/// Both are owned and `'static` because the op outlives the call that queued it: a borrow could
/// end while the op runs, and a value that `mem::forget` skips then keeps (leaks) what it owns
/// rather than freeing memory under the op.
pub struct OwningStreamOp<F, M> {
    op: StreamOp,
    _file: F,
    _memory: M,
}

impl<F, M> OwningStreamOp<F, M> {
    /// The op: its result once it ended, its size and file offset until the stream reaches it.
    pub fn op(&self) -> &StreamOp {
        &self.op
    }
}

impl<F, M> fmt::Debug for OwningStreamOp<F, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwningStreamOp")
            .field("op", &self.op)
            .finish_non_exhaustive()
    }
}

impl<F, M> Drop for OwningStreamOp<F, M> {
    fn drop(&mut self) {
        // The op uses the memory and the file until it ended; they drop after this returns.
        let _ = self.op.wait();
    }
}

impl<F: Borrow<FileHandle> + 'static, M: 'static> OwningStreamOp<F, M> {
    /// Queue `op` of the bytes at `place` (in `memory`) to or from `file` at `file_offset` on
    /// `stream` through `core`, owning file and memory until it ended.
    pub(crate) fn queue(
        core: &CoreDriver,
        stream: &StreamRef<'_>,
        op: IoOp,
        file: F,
        memory: M,
        place: Place,
        file_offset: u64,
    ) -> Result<Self> {
        let op = queue(core, stream, op, file.borrow(), place, file_offset)?;
        Ok(OwningStreamOp {
            op,
            _file: file,
            _memory: memory,
        })
    }
}

impl Drop for StreamIo<'_, '_> {
    fn drop(&mut self) {
        // The ops borrow memory that outlives only this value: each must have ended. Their
        // results stay in their `StreamOp`s.
        for op in &self.ops {
            let _ = op.wait();
        }
    }
}
