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

use std::marker::PhantomData;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use hipfile_core::{AsyncCall, AsyncSlots, IoOp, Result};
use hipfile_hip::StreamRef;

use crate::driver::{signed, FileHandle, OpenReference};
use crate::memory::{AsDevice, AsDeviceMut};

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
        let dst = dst.as_device_mut();
        self.queue(
            IoOp::Read,
            file,
            dst.base(),
            dst.offset(),
            dst.len(),
            file_offset,
        )
    }

    /// Queue a write of all of `src` to `file` at `file_offset`.
    pub fn write<M: AsDevice + ?Sized>(
        &mut self,
        file: &'buf FileHandle,
        src: &'buf M,
        file_offset: u64,
    ) -> Result<StreamOp> {
        let src = src.as_device();
        self.queue(
            IoOp::Write,
            file,
            src.base(),
            src.offset(),
            src.len(),
            file_offset,
        )
    }

    fn queue(
        &mut self,
        op: IoOp,
        file: &FileHandle,
        base: usize,
        offset: usize,
        size: usize,
        file_offset: u64,
    ) -> Result<StreamOp> {
        let slots = Arc::new(Slots {
            size: AtomicUsize::new(size),
            file_offset: AtomicI64::new(signed(file_offset)?),
            buffer_offset: AtomicI64::new(signed(offset as u64)?),
            ..Slots::default()
        });
        let core = &self.driver.core;
        let session = core.async_session()?;
        core.submit_async(
            &session,
            AsyncCall {
                op,
                handle: file.id(),
                buffer: base,
                stream: self.stream,
                slots: Arc::clone(&slots) as Arc<dyn AsyncSlots>,
            },
        )?;
        let op = StreamOp(slots);
        self.ops.push(op.clone());
        Ok(op)
    }

    /// Ops queued through this `StreamIo` that have not ended.
    pub fn outstanding(&self) -> usize {
        self.ops.iter().filter(|op| op.result().is_none()).count()
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
