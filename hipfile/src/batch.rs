//! Batches: many reads and writes in flight at once, collected as they finish.
//!
//! [`crate::Driver::batch`] sets a batch up, hands it to a closure and destroys it when the
//! closure returns: what has not started is cancelled, the rest is waited for
//! (`hipFileBatchIODestroy`). The files and device memory of its requests are borrowed for the
//! whole call, so no request outlives what it reads into or writes from. The batch exists only
//! inside the call, as a `&mut Batch`: it cannot be leaked past it (a batch value that could be
//! `mem::forget`-ten would leave its requests running into memory its owner has freed).
//!
#![cfg_attr(feature = "fallback", doc = "```")]
#![cfg_attr(not(feature = "fallback"), doc = "```text")]
//! use hipfile::{BatchRequest, BatchStatus, Driver, DriverOptions};
//! use hipfile_hip::sim::SimRuntime;
//! use std::sync::Arc;
//!
//! let driver = Driver::with_options(DriverOptions::with_runtime(Arc::new(SimRuntime::default())))?;
//! let dir = tempfile::tempdir().unwrap();
//! let path = dir.path().join("data");
//! std::fs::write(&path, (0..64 * 1024).map(|i| i as u8).collect::<Vec<u8>>()).unwrap();
//! let file = std::fs::File::open(&path).unwrap();
//! let handle = driver.register_file(&file)?;
//! let mut a = driver.alloc(4096)?;
//! let mut b = driver.alloc(4096)?;
//!
//! let done = driver.batch(8, |batch| {
//!     batch.submit([
//!         BatchRequest::read(&handle, &mut a, 0)?.cookie(1),
//!         BatchRequest::read(&handle, &mut b, 8192)?.cookie(2),
//!     ])?;
//!     let mut done = 0;
//!     for event in batch.completions() {
//!         let event = event?;
//!         assert_eq!(event.status, BatchStatus::Complete);
//!         assert_eq!(*event.result.as_ref().unwrap(), 4096);
//!         done += event.cookie;
//!     }
//!     Ok::<_, hipfile::Error>(done)
//! })??;
//! assert_eq!(done, 3);
//! let expected: Vec<u8> = (8192..12288).map(|i| i as u8).collect();
//! assert_eq!(b.to_vec().unwrap(), expected);
//! # Ok::<(), hipfile::Error>(())
//! ```
//!
//! The batch cannot leave the closure:
//!
//! ```compile_fail
//! fn escape(driver: &hipfile::Driver) {
//!     let escaped = driver.batch(8, |batch| batch);
//! }
//! ```
//!
//! Nor can a request borrow memory that dies inside the closure, before the batch is destroyed:
//!
//! ```compile_fail
//! use hipfile::{BatchRequest, Driver, FileHandle};
//! fn dangle(driver: &Driver, handle: &FileHandle) {
//!     driver.batch(8, |batch| {
//!         let mut short_lived = driver.alloc(4096).unwrap();
//!         batch.submit([BatchRequest::read(handle, &mut short_lived, 0).unwrap()])
//!     });
//! }
//! ```

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use hipfile_core::{BatchEntry, BatchEvent, BatchId, IoOp, Result};

use crate::call::{io_call, Place};
use crate::file::FileHandle;
use crate::memory::{AsDevice, AsDeviceMut};
use crate::open::OpenReference;

/// One request of a batch: a read into or a write from device memory the batch borrows for
/// `'buf`, and a cookie that comes back with its completion.
#[derive(Debug)]
pub struct BatchRequest<'buf> {
    entry: BatchEntry,
    _borrows: PhantomData<&'buf mut ()>,
}

impl<'buf> BatchRequest<'buf> {
    /// Read `dst.len()` bytes of `file` at `file_offset` into `dst`.
    pub fn read<M: AsDeviceMut + ?Sized>(
        file: &'buf FileHandle,
        dst: &'buf mut M,
        file_offset: u64,
    ) -> Result<Self> {
        Self::new(IoOp::Read, file, Place::of_mut(dst), file_offset)
    }

    /// Write all of `src` to `file` at `file_offset`.
    pub fn write<M: AsDevice + ?Sized>(
        file: &'buf FileHandle,
        src: &'buf M,
        file_offset: u64,
    ) -> Result<Self> {
        Self::new(IoOp::Write, file, Place::of(src), file_offset)
    }

    fn new(op: IoOp, file: &FileHandle, place: Place, file_offset: u64) -> Result<Self> {
        Ok(BatchRequest {
            entry: BatchEntry {
                call: io_call(op, file.id(), place, file_offset)?,
                cookie: 0,
            },
            _borrows: PhantomData,
        })
    }

    /// Tag the request: its completion carries `cookie` (0 by default).
    pub fn cookie(mut self, cookie: usize) -> Self {
        self.entry.cookie = cookie;
        self
    }
}

/// A batch of requests in flight at once (`hipFileBatchIO*`), lent to the closure of
/// [`crate::Driver::batch`]; see the module docs.
#[derive(Debug)]
pub struct Batch<'buf> {
    driver: Arc<OpenReference>,
    id: BatchId,
    capacity: usize,
    outstanding: usize,
    _borrows: PhantomData<&'buf mut ()>,
}

impl<'buf> Batch<'buf> {
    /// Set a batch up, lend it to `f`, destroy it when `f` returns (or unwinds).
    pub(crate) fn scope<R>(
        driver: Arc<OpenReference>,
        capacity: usize,
        f: impl FnOnce(&mut Batch<'buf>) -> R,
    ) -> Result<R> {
        let id = driver.core.batch_setup(capacity)?;
        let mut batch = Batch {
            driver,
            id,
            capacity,
            outstanding: 0,
            _borrows: PhantomData,
        };
        Ok(f(&mut batch))
    }

    /// The most requests the batch holds at once (finished ones count until collected).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Requests submitted and not yet collected.
    pub fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Queue every request at once. All or nothing: an invalid request fails the call and
    /// queues none; more than the batch has room for is `BatchFull`.
    pub fn submit(&mut self, requests: impl IntoIterator<Item = BatchRequest<'buf>>) -> Result<()> {
        let entries: Vec<BatchEntry> = requests.into_iter().map(|r| r.entry).collect();
        self.driver.core.batch_submit(self.id, &entries)?;
        self.outstanding += entries.len();
        Ok(())
    }

    /// Wait until at least `min` requests have finished or `timeout` passed (`None`: no
    /// limit), and collect up to `max` finished ones, in submission order.
    pub fn wait(
        &mut self,
        min: usize,
        max: usize,
        timeout: Option<Duration>,
    ) -> Result<Vec<BatchEvent>> {
        let events = self.driver.core.batch_status(self.id, min, max, timeout)?;
        self.outstanding -= events.len();
        Ok(events)
    }

    /// The completions of every outstanding request, each as soon as it finishes.
    pub fn completions(&mut self) -> Completions<'_, 'buf> {
        Completions {
            batch: self,
            ready: Vec::new().into_iter(),
        }
    }

    /// Withdraw the requests no thread has started (they complete as canceled) and wait for
    /// the others to finish; their completions are still collected as usual.
    pub fn cancel(&mut self) -> Result<()> {
        self.driver.core.batch_cancel(self.id)
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        // Fails only when the driver already destroyed the batch (closed to zero by a C caller):
        // nothing is left running then.
        let _ = self.driver.core.batch_destroy(self.id);
    }
}

/// Iterator over a batch's completions ([`Batch::completions`]); ends when none is outstanding,
/// or after the one error that says the batch is gone.
#[derive(Debug)]
pub struct Completions<'b, 'buf> {
    batch: &'b mut Batch<'buf>,
    ready: std::vec::IntoIter<BatchEvent>,
}

impl Iterator for Completions<'_, '_> {
    type Item = Result<BatchEvent>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(event) = self.ready.next() {
            return Some(Ok(event));
        }
        if self.batch.outstanding == 0 {
            return None;
        }
        let max = self.batch.outstanding;
        match self.batch.wait(1, max, None) {
            Ok(events) => {
                if events.is_empty() {
                    // The driver forgot the batch's entries (it was closed to zero): none will
                    // come back.
                    self.batch.outstanding = 0;
                }
                self.ready = events.into_iter();
                self.ready.next().map(Ok)
            }
            Err(e) => {
                // The batch is gone (destroyed with the driver): say so once, then end.
                self.batch.outstanding = 0;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use hipfile_hip::sim::SimRuntime;

    use crate::{BatchRequest, Driver, DriverOptions};

    #[test]
    fn completions_end_once_the_driver_forgot_the_batch() {
        let sim = Arc::new(SimRuntime::default());
        let driver = Driver::with_options(DriverOptions::with_runtime(sim)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data");
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        let file = std::fs::File::open(&path).unwrap();
        let handle = driver.register_file(&file).unwrap();
        let mut dst = driver.alloc(4096).unwrap();
        driver
            .batch(2, |batch| {
                batch
                    .submit([BatchRequest::read(&handle, &mut dst, 0).unwrap()])
                    .unwrap();
                // A C caller closes the driver to zero under the Rust one: the batch is
                // destroyed with everything else the driver held.
                while driver.core().use_count() > 0 {
                    driver.core().close().unwrap();
                }
                let seen: Vec<_> = batch.completions().collect();
                assert_eq!(seen.len(), 1, "{seen:?}");
                assert!(seen[0].is_err());
                assert_eq!(batch.outstanding(), 0);
            })
            .unwrap();
    }
}
