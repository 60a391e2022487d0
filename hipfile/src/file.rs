//! Files registered with a driver, and their synchronous reads and writes.

use std::sync::Arc;

use hipfile_core::{FileHandleId, IoOp, IoPolicy, Result};

use crate::call::{io_call, Place};
use crate::memory::{AsDevice, AsDeviceMut};
use crate::open::OpenReference;

/// A registered file; deregistered on drop. It keeps its driver open.
///
/// Reads land in device memory that [`AsDeviceMut`] names (a buffer, an exclusive slice, a
/// registered buffer); writes take their bytes from memory that [`AsDevice`] names. The request's
/// size is the memory's length; file offsets are `u64`, and one past `i64::MAX` is `EINVAL`, as
/// `pread(2)` answers.
///
#[cfg_attr(feature = "fallback", doc = "```")]
#[cfg_attr(not(feature = "fallback"), doc = "```text")]
/// use std::sync::Arc;
/// use hipfile::{AsDevice, AsDeviceMut, Driver, DriverOptions};
/// use hipfile_hip::sim::SimRuntime;
///
/// let gpu = Arc::new(SimRuntime::default());
/// let driver = Driver::with_options(DriverOptions::with_runtime(gpu))?;
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::write(dir.path().join("data"), b"0123456789").unwrap();
/// let file = std::fs::OpenOptions::new().read(true).write(true)
///     .open(dir.path().join("data")).unwrap();
/// let handle = driver.register_file(&file)?;
///
/// let mut buf = driver.alloc(4096)?;
/// // A read is short at the end of the file.
/// assert_eq!(handle.read(&mut buf, 4)?, 6);
/// assert_eq!(buf.to_vec().unwrap()[..6], *b"456789");
/// // Write the first two bytes read back at offset 0.
/// assert_eq!(handle.write(buf.slice(..2)?, 0)?, 2);
/// assert_eq!(std::fs::read(dir.path().join("data")).unwrap(), b"4523456789");
/// # Ok::<(), hipfile::Error>(())
/// ```
#[derive(Debug)]
pub struct FileHandle {
    driver: Arc<OpenReference>,
    id: FileHandleId,
}

impl FileHandle {
    /// The handle of the file registered as `id` with the driver behind `driver`.
    pub(crate) fn new(driver: Arc<OpenReference>, id: FileHandleId) -> FileHandle {
        FileHandle { driver, id }
    }

    /// The handle's identity.
    pub fn id(&self) -> FileHandleId {
        self.id
    }

    /// Read `dst.len()` bytes of the file at `file_offset` into `dst`. Returns the bytes read,
    /// fewer only at the end of the file.
    pub fn read(&self, mut dst: impl AsDeviceMut, file_offset: u64) -> Result<usize> {
        self.io(IoOp::Read, Place::of_mut(&mut dst), file_offset)
    }

    /// Write the bytes of `src` to the file at `file_offset`. Returns the bytes written: all of
    /// them, or an error.
    pub fn write(&self, src: impl AsDevice, file_offset: u64) -> Result<usize> {
        self.io(IoOp::Write, Place::of(&src), file_offset)
    }

    fn io(&self, op: IoOp, place: Place, file_offset: u64) -> Result<usize> {
        self.driver
            .core
            .io(io_call(op, self.id, place, file_offset)?)
    }

    /// Choose how this file's requests are served, from the next one on (reads, writes, batch
    /// entries and stream-ordered ops alike): [`IoPolicy::Fallback`] (the default) lets the
    /// staged engine run what the direct path declines; [`IoPolicy::DirectOnly`] runs them on
    /// the direct path or fails them with [`ErrorKind::IoNotSupported`](crate::ErrorKind) and
    /// no byte moved.
    pub fn set_policy(&self, policy: IoPolicy) -> Result<()> {
        self.driver.core.handle_set_policy(self.id, policy)
    }

    /// How this file's requests are served ([`FileHandle::set_policy`]).
    pub fn policy(&self) -> Result<IoPolicy> {
        self.driver.core.handle_policy(self.id)
    }

    /// The registered file's facts (alignment, filesystem, descriptors).
    pub fn file(&self) -> Result<Arc<hipfile_core::RegisteredFile>> {
        self.driver.core.file(self.id)
    }
}

impl Drop for FileHandle {
    fn drop(&mut self) {
        // Fails only when the driver already forgot the file (closed to zero): nothing to undo.
        let _ = self.driver.core.handle_deregister(self.id);
    }
}
