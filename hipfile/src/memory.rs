//! Device memory as the Rust API names it: owned buffers, borrowed slices and registered buffers.
//!
//! - [`DeviceBuffer`] owns an allocation (made with [`Driver::alloc`](crate::Driver::alloc) or
//!   [`DeviceBuffer::new`] on any runtime) and frees it on drop.
//! - [`DeviceSlice`] and [`DeviceSliceMut`] borrow part of some device memory, shared or
//!   exclusive, as `&[u8]` and `&mut [u8]` borrow host memory. A file read lands in an exclusive
//!   slice; a file write takes its bytes from a shared one. A slice is an address range and a
//!   lifetime: passing one to a request allocates nothing and calls nothing.
//! - [`RegisteredBuffer`] holds device memory registered with a driver (`hipFileBufRegister`),
//!   owned or borrowed, so the memory cannot be freed while it is registered. Requests through it
//!   (or through its slices) take the registered path: the driver finds the buffer by its base
//!   and skips the runtime's pointer query.
//!
//! [`AsDevice`] and [`AsDeviceMut`] are what requests accept, and they cut slices with range
//! syntax: `buf.slice(..)`, `buf.slice_mut(4096..8192)`. A range that does not lie within the
//! memory is an [`Error`] of kind [`ErrorKind::InvalidValue`], never a panic.
//!
//! Memory allocated elsewhere (a framework's tensor, a pointer from C) enters through the `unsafe`
//! [`DeviceSliceMut::from_raw_parts`] and [`DeviceSlice::from_raw_parts`]. They are defined in
//! `hipfile-hip` beside `DeviceBuffer`, the crate that holds hipfile-rs's `unsafe` outside the C
//! ABI, and re-exported here.

use std::borrow::{Borrow, BorrowMut};
use std::ops::RangeBounds;
use std::sync::Arc;

use hipfile_core::{Error, ErrorKind, Result};
pub use hipfile_hip::{DeviceBuffer, DeviceSlice, DeviceSliceMut};

use crate::open::OpenReference;

fn out_of_range(len: usize) -> Error {
    Error::new(
        ErrorKind::InvalidValue,
        format!("the range does not lie within the {len} bytes of device memory"),
    )
}

/// Device memory that requests may read: what [`FileHandle::write`](crate::FileHandle::write)
/// takes its bytes from.
///
/// Implemented by [`DeviceBuffer`], both slice types, [`RegisteredBuffer`] and references to
/// them. An implementation returns the same memory from every call.
///
#[cfg_attr(feature = "fallback", doc = "```")]
#[cfg_attr(not(feature = "fallback"), doc = "```text")]
/// use std::sync::Arc;
/// use hipfile::{AsDevice, Driver, DriverOptions, ErrorKind};
/// use hipfile_hip::sim::SimRuntime;
///
/// let gpu = Arc::new(SimRuntime::default());
/// let driver = Driver::with_options(DriverOptions::with_runtime(gpu))?;
/// let mut buf = driver.alloc(8192)?;
/// buf.write_at(4096, b"tail").unwrap();
/// let tail = buf.slice(4096..4100)?;
/// assert_eq!((tail.offset(), tail.len()), (4096, 4));
/// assert_eq!(buf.slice(..=8192).unwrap_err().kind(), ErrorKind::InvalidValue);
///
/// let dir = tempfile::tempdir().unwrap();
/// let file = std::fs::File::create(dir.path().join("tail")).unwrap();
/// assert_eq!(driver.register_file(&file)?.write(tail, 0)?, 4);
/// assert_eq!(std::fs::read(dir.path().join("tail")).unwrap(), b"tail");
/// # Ok::<(), hipfile::Error>(())
/// ```
pub trait AsDevice {
    /// The whole memory, shared.
    fn as_device(&self) -> DeviceSlice<'_>;

    /// The bytes `range` of the memory, shared. A range that does not lie within it is
    /// [`ErrorKind::InvalidValue`].
    fn slice(&self, range: impl RangeBounds<usize>) -> Result<DeviceSlice<'_>> {
        let whole = self.as_device();
        let len = whole.len();
        whole.get(range).ok_or_else(|| out_of_range(len))
    }
}

/// Device memory that requests may write: what [`FileHandle::read`](crate::FileHandle::read)
/// lands in.
///
#[cfg_attr(feature = "fallback", doc = "```")]
#[cfg_attr(not(feature = "fallback"), doc = "```text")]
/// use std::sync::Arc;
/// use hipfile::{AsDeviceMut, Driver, DriverOptions, ErrorKind};
/// use hipfile_hip::sim::SimRuntime;
///
/// let gpu = Arc::new(SimRuntime::default());
/// let driver = Driver::with_options(DriverOptions::with_runtime(gpu))?;
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::write(dir.path().join("data"), vec![9u8; 4096]).unwrap();
/// let file = std::fs::File::open(dir.path().join("data")).unwrap();
/// let handle = driver.register_file(&file)?;
///
/// let mut buf = driver.alloc(8192)?;
/// // The second half of the buffer receives the file's first 4096 bytes.
/// assert_eq!(handle.read(buf.slice_mut(4096..)?, 0)?, 4096);
/// assert_eq!(buf.to_vec().unwrap()[4096..], [9u8; 4096]);
/// assert_eq!(buf.slice_mut(8000..9000).unwrap_err().kind(), ErrorKind::InvalidValue);
/// # Ok::<(), hipfile::Error>(())
/// ```
pub trait AsDeviceMut: AsDevice {
    /// The whole memory, exclusive.
    fn as_device_mut(&mut self) -> DeviceSliceMut<'_>;

    /// The bytes `range` of the memory, exclusive. A range that does not lie within it is
    /// [`ErrorKind::InvalidValue`].
    fn slice_mut(&mut self, range: impl RangeBounds<usize>) -> Result<DeviceSliceMut<'_>> {
        let whole = self.as_device_mut();
        let len = whole.len();
        whole.get_mut(range).ok_or_else(|| out_of_range(len))
    }
}

impl AsDevice for DeviceBuffer {
    fn as_device(&self) -> DeviceSlice<'_> {
        DeviceSlice::from(self)
    }
}

impl AsDeviceMut for DeviceBuffer {
    fn as_device_mut(&mut self) -> DeviceSliceMut<'_> {
        DeviceSliceMut::from(self)
    }
}

impl AsDevice for DeviceSlice<'_> {
    fn as_device(&self) -> DeviceSlice<'_> {
        *self
    }
}

impl AsDevice for DeviceSliceMut<'_> {
    fn as_device(&self) -> DeviceSlice<'_> {
        self.as_slice()
    }
}

impl AsDeviceMut for DeviceSliceMut<'_> {
    fn as_device_mut(&mut self) -> DeviceSliceMut<'_> {
        self.reborrow()
    }
}

impl<T: AsDevice + ?Sized> AsDevice for &T {
    fn as_device(&self) -> DeviceSlice<'_> {
        (**self).as_device()
    }
}

impl<T: AsDevice + ?Sized> AsDevice for &mut T {
    fn as_device(&self) -> DeviceSlice<'_> {
        (**self).as_device()
    }
}

impl<T: AsDeviceMut + ?Sized> AsDeviceMut for &mut T {
    fn as_device_mut(&mut self) -> DeviceSliceMut<'_> {
        (**self).as_device_mut()
    }
}

/// Device memory registered with a driver (`hipFileBufRegister`); deregistered on drop, before
/// the memory it holds is dropped.
///
/// `M` is the memory: an owned [`DeviceBuffer`] (the default), a `&mut DeviceBuffer`, or a
/// [`DeviceSliceMut`] (part of a buffer, or memory from elsewhere). Holding it keeps the memory
/// allocated for as long as it is registered, and keeps the driver open. The registered region
/// is `M`'s memory from its first byte: its slices name that first byte as their base, so every
/// request through them is one the driver recognises as registered.
///
/// While registered, the memory is reached through this value: its slices for IO, and for an
/// owned or borrowed [`DeviceBuffer`] the host copies [`write_at`](Self::write_at),
/// [`fill`](Self::fill), [`read_at`](Self::read_at) and [`to_vec`](Self::to_vec). Nothing hands
/// out `&mut M`, which could swap the allocation out from under the registration.
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
/// let file = std::fs::OpenOptions::new().create(true).read(true).write(true)
///     .open(dir.path().join("data")).unwrap();
/// let handle = driver.register_file(&file)?;
///
/// let mut staging = driver.register_buffer(driver.alloc(1 << 20)?)?;
/// staging.fill(5).unwrap();
/// assert_eq!(handle.write(&staging, 0)?, 1 << 20);
/// // Part of the registered buffer: still the registered path.
/// assert_eq!(handle.read(staging.slice_mut(4096..8192)?, 0)?, 4096);
///
/// // Deregister and take the buffer back.
/// let buffer = staging.into_inner();
/// assert_eq!(buffer.len(), 1 << 20);
/// # Ok::<(), hipfile::Error>(())
/// ```
#[derive(Debug)]
pub struct RegisteredBuffer<M = DeviceBuffer> {
    // Declared first: dropped, and so deregistered, before the memory.
    registration: Registration,
    memory: M,
}

/// The registration of `[ptr, ptr + len)`; dropping it deregisters.
#[derive(Debug)]
struct Registration {
    driver: Arc<OpenReference>,
    ptr: usize,
    len: usize,
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Fails only when the driver already forgot the buffer (closed to zero by a C caller):
        // nothing to undo.
        let _ = self.driver.core.buf_deregister(self.ptr);
    }
}

impl<M: AsDevice> RegisteredBuffer<M> {
    /// Register `memory` with the driver behind `driver`.
    pub(crate) fn register(driver: Arc<OpenReference>, memory: M) -> Result<Self> {
        let whole = memory.as_device();
        let (ptr, len) = (whole.ptr(), whole.len());
        driver.core.buf_register(ptr, len, 0)?;
        Ok(RegisteredBuffer {
            registration: Registration { driver, ptr, len },
            memory,
        })
    }

    /// The device address the buffer is registered at.
    pub fn ptr(&self) -> usize {
        self.registration.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.registration.len
    }

    /// Whether the length is zero (never, for a registered buffer).
    pub fn is_empty(&self) -> bool {
        self.registration.len == 0
    }

    /// The memory, shared.
    pub fn memory(&self) -> &M {
        &self.memory
    }

    /// Deregister and give the memory back.
    pub fn into_inner(self) -> M {
        let RegisteredBuffer {
            registration,
            memory,
        } = self;
        drop(registration);
        memory
    }
}

impl<M: AsDevice + Borrow<DeviceBuffer>> RegisteredBuffer<M> {
    /// Copy bytes at `offset` out of the buffer into `dst` ([`DeviceBuffer::read_at`]).
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> hipfile_hip::HipResult<()> {
        self.memory.borrow().read_at(offset, dst)
    }

    /// The whole buffer, copied to the host ([`DeviceBuffer::to_vec`]).
    pub fn to_vec(&self) -> hipfile_hip::HipResult<Vec<u8>> {
        self.memory.borrow().to_vec()
    }
}

impl<M: AsDevice + BorrowMut<DeviceBuffer>> RegisteredBuffer<M> {
    /// Copy `src` into the buffer at `offset` ([`DeviceBuffer::write_at`]).
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> hipfile_hip::HipResult<()> {
        self.memory.borrow_mut().write_at(offset, src)
    }

    /// Fill the whole buffer with `value` ([`DeviceBuffer::fill`]).
    pub fn fill(&mut self, value: u8) -> hipfile_hip::HipResult<()> {
        self.memory.borrow_mut().fill(value)
    }
}

impl<M: AsDevice> AsDevice for RegisteredBuffer<M> {
    fn as_device(&self) -> DeviceSlice<'_> {
        self.memory.as_device().rebased()
    }
}

impl<M: AsDeviceMut> AsDeviceMut for RegisteredBuffer<M> {
    fn as_device_mut(&mut self) -> DeviceSliceMut<'_> {
        self.memory.as_device_mut().rebased()
    }
}
