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

    /// Read `buf.len()` bytes of the file at `file_offset` into host memory `buf`, straight from
    /// the file (`pread`, through O_DIRECT where `buf`, the offset and the size meet the file's
    /// alignment), no GPU involved. Returns the bytes read, fewer only at end of file. Needs the
    /// setting `allow_system_memory` (`HIPFILE_ALLOW_SYSTEM_MEMORY=true`); without it the answer
    /// is [`hipfile_core::ErrorKind::HipMemoryTypeInvalid`], as for any host memory.
    ///
    #[cfg_attr(feature = "fallback", doc = "```")]
    #[cfg_attr(not(feature = "fallback"), doc = "```text")]
    /// use std::sync::Arc;
    /// use hipfile::{Driver, DriverOptions, ErrorKind};
    /// use hipfile_hip::sim::SimRuntime;
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// std::fs::write(dir.path().join("data"), b"0123456789").unwrap();
    /// let file = std::fs::OpenOptions::new().read(true).write(true)
    ///     .open(dir.path().join("data")).unwrap();
    /// let mut buf = [0u8; 16];
    ///
    /// let mut options = DriverOptions::with_runtime(Arc::new(SimRuntime::default()));
    /// let refusing = Driver::with_options(options.clone())?;
    /// let err = refusing.register_file(&file)?.read_host(&mut buf, 0).unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::HipMemoryTypeInvalid);
    ///
    /// options.settings.allow_system_memory = true;
    /// let driver = Driver::with_options(options)?;
    /// let handle = driver.register_file(&file)?;
    /// assert_eq!(handle.read_host(&mut buf, 4)?, 6);
    /// assert_eq!(&buf[..6], b"456789");
    /// assert_eq!(handle.write_host(b"ab", 0)?, 2);
    /// assert_eq!(std::fs::read(dir.path().join("data")).unwrap(), b"ab23456789");
    /// # Ok::<(), hipfile::Error>(())
    /// ```
    pub fn read_host(&self, buf: &mut [u8], file_offset: u64) -> Result<usize> {
        // The exclusive borrow of `buf` lasts until the request has finished: no other
        // reference to those bytes exists while the kernel writes them (`HostRange`'s contract).
        let place = Place {
            base: buf.as_mut_ptr() as usize,
            offset: 0,
            size: buf.len(),
        };
        self.io(IoOp::Read, place, file_offset)
    }

    /// Write the bytes of host memory `buf` to the file at `file_offset`, straight to the file
    /// (`pwrite`, through O_DIRECT where aligned). Returns the bytes written: all of them, or an
    /// error. The same setting rule as [`FileHandle::read_host`].
    pub fn write_host(&self, buf: &[u8], file_offset: u64) -> Result<usize> {
        let place = Place {
            base: buf.as_ptr() as usize,
            offset: 0,
            size: buf.len(),
        };
        self.io(IoOp::Write, place, file_offset)
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
