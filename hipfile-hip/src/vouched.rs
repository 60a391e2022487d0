//! Where the crate vouches for raw addresses and handles: the safe types' side of the boundary's
//! `unsafe` contracts ([`GpuRuntime`]'s and [`P2pDriver`]'s), so that no other module of the
//! crate but the raw layer (`ffi`) needs `unsafe`.
//!
//! Each `impl` block here says which invariant of its type makes its calls sound; the types, their
//! fields and their other methods live in their own modules:
//! - the public entry points that take a caller's word: [`DeviceSlice::from_raw_parts`],
//!   [`DeviceSliceMut::from_raw_parts`], [`HostLoan::lend_mut`], [`HostLoan::lend`],
//!   [`StreamRef::from_raw`] and
//!   [`NvidiaRuntime::stream_device_through_driver`];
//! - [`DeviceRange`]'s copies and direct IO (the runtime's pointer query vouched for the range);
//! - [`StagingLane`]'s asynchronous copies (a half is never handed out with a copy in flight);
//! - [`PinnedFileRange`]'s registration (the mapping outlives it);
//! - [`HostRange`]'s reads and writes (only the kernel touches its bytes, while their loan holds);
//! - [`HostFunctionReader::read_on`] (a claimed piece is touched by its op alone);
//! - and, whole, the two types of stream-ordered IO below, which are raw memory and a raw handle.
//!
//! ## Holding an application's stream until the library has done its part
//!
//! When an application queues a read on its stream S, the library records an event on S (its
//! workers poll it to learn that S reached the read), then *holds* S: later work on S waits until
//! a word of [`HostFlags`] reaches a value, which a worker stores once the bytes are in place.
//! [`StreamRef::hold`] queues that wait in one of two ways ([`Hold`]):
//! - [`Hold::Memop`]: a stream memory operation (`hipStreamWaitValue32`,
//!   `cuStreamWaitValue32_v2`); the GPU itself waits for the word, nothing runs on the host;
//! - [`Hold::HostFunction`]: where the device has no stream memory operations
//!   ([`crate::GpuRuntime::stream_memops`] is false), a host function queued on S that polls the
//!   word until it is reached. It does no IO, it only waits.
//!
//! [`StreamRef`] names a stream the caller vouches for (the application's, or the null stream)
//! for the length of a borrow, so that the calls on it are safe. Engines that serve held streams
//! use streams NOT ordered with the null stream ([`crate::OwnedStream::new_independent`]):
//! otherwise their work would queue behind the held stream and never run.

use std::fmt;
use std::fs::File;
use std::io;
use std::marker::PhantomData;
use std::os::fd::BorrowedFd;
use std::os::unix::fs::FileExt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::Duration;

use crate::error::{HipError, HipErrorCode, HipResult};
use crate::ffi::os::FileMapping;
use crate::ffi::runtime_api::LiveStream;
use crate::nvidia::NvidiaRuntime;
use crate::p2p::P2pDriver;
use crate::runtime::{
    DeviceGuard, GpuRuntime, HostFn, OwnedContext, OwnedEvent, OwnedStream, StreamHandle,
};
use crate::vouched::device_range::DeviceRange;
use crate::vouched::file_pins::PinnedFileRange;
use crate::vouched::host_range::{HostLoan, HostRange};
use crate::vouched::replay::HostFunctionReader;
use crate::vouched::slice::{DeviceSlice, DeviceSliceMut};
use crate::vouched::staging::StagingLane;

pub(crate) mod device_range;
pub(crate) mod file_pins;
pub(crate) mod host_range;
pub mod replay;
pub(crate) mod slice;
pub(crate) mod staging;

/// 32-bit flag words in pinned host memory mapped into every device's address space: the host
/// stores them, a stream waits for them. Zeroed when made; freed on drop.
///
/// Drop the flags only once every hold on them has been released (its value stored): freeing
/// pinned memory synchronizes the device (`hipHostFree`, `cudaFreeHost`), so dropping the flags
/// while a stream still waits for one of its words waits for that stream.
pub struct HostFlags {
    runtime: Arc<dyn GpuRuntime>,
    words: NonNull<AtomicU32>,
    len: usize,
    device_base: usize,
    /// Wakes host functions waiting for a word ([`Hold::HostFunction`]) when one is stored: a
    /// waiter checks its word under the lock, a store notifies under it, so no wake is lost.
    stored: Mutex<()>,
    wake: Condvar,
}

// SAFETY: the words are pinned host memory owned by this value and only ever accessed through
// `AtomicU32`; the runtime is `Send + Sync`.
unsafe impl Send for HostFlags {}
// SAFETY: as for `Send`: shared access is atomic loads and stores.
unsafe impl Sync for HostFlags {}

impl HostFlags {
    /// `slots` flag words, all 0, in host-mapped pinned memory of `runtime`.
    pub fn new(runtime: Arc<dyn GpuRuntime>, slots: usize) -> HipResult<Self> {
        let bytes = slots
            .max(1)
            .checked_mul(std::mem::size_of::<AtomicU32>())
            .ok_or_else(|| HipError::call("HostFlags", HipErrorCode::OUT_OF_MEMORY))?;
        let ptr = runtime.host_alloc_mapped(bytes)?;
        let free = |e: HipError| {
            // SAFETY: `ptr` came from this runtime's `host_alloc_mapped` and was never handed out.
            let _ = unsafe { runtime.host_free(ptr) };
            e
        };
        if ptr.as_ptr().align_offset(std::mem::align_of::<AtomicU32>()) != 0 {
            return Err(free(HipError::call(
                "HostFlags: misaligned pinned memory",
                HipErrorCode::UNKNOWN,
            )));
        }
        // SAFETY: `ptr` is live memory of this runtime's `host_alloc_mapped`.
        let device_base = match unsafe { runtime.host_device_pointer(ptr) } {
            Ok(addr) => addr,
            Err(e) => return Err(free(e)),
        };
        // SAFETY: `bytes` bytes at `ptr` were just allocated for this value alone; no device work
        // knows them yet.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 0, bytes) };
        Ok(HostFlags {
            runtime,
            words: ptr.cast::<AtomicU32>(),
            len: slots,
            device_base,
            stored: Mutex::new(()),
            wake: Condvar::new(),
        })
    }

    /// Number of flag words.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no flag words.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The runtime whose pinned memory holds the words.
    pub fn runtime(&self) -> &Arc<dyn GpuRuntime> {
        &self.runtime
    }

    fn word(&self, i: usize) -> Option<&AtomicU32> {
        // SAFETY: `i < len`, so the word lies inside the allocation made in `new` (aligned there),
        // which lives as long as `self`; it is only accessed atomically.
        (i < self.len).then(|| unsafe { &*self.words.as_ptr().add(i) })
    }

    /// Word `i` (acquire ordering); `None` when `i >= len()`.
    pub fn load(&self, i: usize) -> Option<u32> {
        self.word(i).map(|w| w.load(Ordering::Acquire))
    }

    /// Store `value` into word `i` (release ordering: what the host wrote before is visible to
    /// whoever sees the value); `hipErrorInvalidValue` when `i >= len()`.
    pub fn store(&self, i: usize, value: u32) -> HipResult<()> {
        let w = self.word(i).ok_or_else(|| {
            HipError::call(
                "HostFlags::store: no such slot",
                HipErrorCode::INVALID_VALUE,
            )
        })?;
        w.store(value, Ordering::Release);
        let _stored = self.stored.lock().unwrap_or_else(PoisonError::into_inner);
        self.wake.notify_all();
        Ok(())
    }

    /// The device address of word `i`; `None` when `i >= len()`.
    pub fn device_addr(&self, i: usize) -> Option<usize> {
        (i < self.len).then(|| self.device_base + i * std::mem::size_of::<AtomicU32>())
    }

    /// Wait on the calling thread until word `i` is at least `value`: yield a few times, then
    /// sleep until a store wakes it (checked every millisecond besides). Returns at once for a
    /// word that does not exist.
    fn wait_until(&self, i: usize, value: u32) {
        let reached = |flags: &Self| !flags.load(i).is_some_and(|v| v < value);
        for _ in 0..64 {
            if reached(self) {
                return;
            }
            std::thread::yield_now();
        }
        let mut guard = self.stored.lock().unwrap_or_else(PoisonError::into_inner);
        while !reached(self) {
            guard = self
                .wake
                .wait_timeout(guard, Duration::from_millis(1))
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

impl fmt::Debug for HostFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostFlags")
            .field("len", &self.len)
            .field("device_base", &format_args!("{:#x}", self.device_base))
            .finish()
    }
}

impl Drop for HostFlags {
    fn drop(&mut self) {
        // SAFETY: the words came from this runtime's `host_alloc_mapped` and die with `self`. The
        // free synchronizes the device first, so no queued wait still reads them afterwards. A
        // failure cannot be reported from drop.
        let _ = unsafe { self.runtime.host_free(self.words.cast::<u8>()) };
    }
}

/// How [`StreamRef::hold`] holds a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hold {
    /// A stream memory operation: the device waits for the word.
    Memop,
    /// A host function queued on the stream that polls the word (no stream memory operations).
    HostFunction,
}

/// A stream the caller vouches for while the value lives: an application's stream, the null
/// stream, or one of ours. The calls on it are safe because its constructor's contract keeps the
/// handle live for the borrow.
#[derive(Clone, Copy)]
pub struct StreamRef<'a> {
    runtime: &'a Arc<dyn GpuRuntime>,
    handle: StreamHandle,
}

impl<'a> StreamRef<'a> {
    /// The stream whose raw handle (the C `hipStream_t` as an address) is `raw`.
    ///
    /// # Safety
    /// `raw` is 0 (the null stream) or a live stream of `runtime` (made by it and not destroyed),
    /// and stays live for as long as the value (and any copy of it) is used.
    pub unsafe fn from_raw(runtime: &'a Arc<dyn GpuRuntime>, raw: usize) -> Self {
        StreamRef {
            runtime,
            // SAFETY: the caller's contract.
            handle: unsafe { StreamHandle::from_raw(raw) },
        }
    }

    /// The null stream (the legacy default stream of the calling thread's current device).
    pub fn null(runtime: &'a Arc<dyn GpuRuntime>) -> Self {
        // SAFETY: the null stream is live for every runtime and is never destroyed.
        unsafe { Self::from_raw(runtime, 0) }
    }

    /// A stream we own; the borrow keeps it from being destroyed.
    pub fn of(stream: &'a OwnedStream) -> Self {
        StreamRef {
            runtime: stream.runtime(),
            handle: stream.handle(),
        }
    }

    /// The raw handle.
    pub fn raw(&self) -> usize {
        self.handle.as_raw()
    }

    /// The runtime the stream belongs to.
    pub fn runtime(&self) -> &Arc<dyn GpuRuntime> {
        self.runtime
    }

    /// The device the stream belongs to (see [`GpuRuntime::stream_device`]).
    pub fn device(&self) -> HipResult<i32> {
        // SAFETY: the handle is live for the borrow (constructor contract).
        unsafe { self.runtime.stream_device(self.handle) }
    }

    /// Record `event` on the stream. The event must belong to the same runtime (else
    /// `hipErrorInvalidHandle`, before any runtime call); on NVIDIA it must also have been made on
    /// the stream's device ([`OwnedEvent::on_device`]).
    pub fn record(&self, event: &OwnedEvent) -> HipResult<()> {
        event.check_runtime(self.runtime, "StreamRef::record")?;
        // SAFETY: the event is live while borrowed and belongs to this runtime (checked above);
        // the stream is live for the borrow.
        unsafe { self.runtime.event_record(event.handle(), self.handle) }
    }

    /// Hold the stream until word `slot` of `flags` is at least `value`: work queued on it
    /// afterwards starts only then. `flags` must belong to the stream's runtime (else
    /// `hipErrorInvalidHandle`) and have the slot (else `hipErrorInvalidValue`). With
    /// [`Hold::Memop`] the runtime must offer stream memory operations (else
    /// `hipErrorNotSupported`); with [`Hold::HostFunction`] a host function waits, keeping the
    /// flags alive until it returns.
    pub fn hold(
        &self,
        flags: &Arc<HostFlags>,
        slot: usize,
        value: u32,
        how: Hold,
    ) -> HipResult<()> {
        if !Arc::ptr_eq(flags.runtime(), self.runtime) {
            return Err(HipError::call(
                "StreamRef::hold: flags of another runtime",
                HipErrorCode::INVALID_HANDLE,
            ));
        }
        let addr = flags.device_addr(slot).ok_or_else(|| {
            HipError::call("StreamRef::hold: no such slot", HipErrorCode::INVALID_VALUE)
        })?;
        match how {
            // SAFETY: the stream is live for the borrow; `addr` is the device address of an
            // aligned word of host-mapped memory of this runtime (checked above), which stays
            // allocated until the wait has completed because freeing it (`HostFlags::drop`)
            // synchronizes the device first. The wait only reads the word.
            Hold::Memop => unsafe { self.runtime.stream_wait_value(self.handle, addr, value) },
            Hold::HostFunction => {
                let flags = Arc::clone(flags);
                self.launch_host_func(Box::new(move || {
                    flags.wait_until(slot, value);
                    drop_off_the_runtime_thread(flags, "hipfile-flags-free");
                }))
            }
        }
    }

    /// Mark the stream's position, then hold it: once the work queued before this point is done,
    /// the stream itself stores `value` into word `slot` of `marks` (a stream memory write,
    /// [`GpuRuntime::stream_write_value`]: the host learns that the stream reached the point with
    /// no event per point and no runtime thread), and later work waits until word `slot` of
    /// `flags` is at least `value`, as [`StreamRef::hold`]. Both word sets must belong to the
    /// stream's runtime and have the slot, else nothing is queued; a failure of the hold leaves
    /// the store queued.
    pub fn mark_and_hold(
        &self,
        marks: &Arc<HostFlags>,
        flags: &Arc<HostFlags>,
        slot: usize,
        value: u32,
        how: Hold,
    ) -> HipResult<()> {
        for words in [marks, flags] {
            if !Arc::ptr_eq(words.runtime(), self.runtime) {
                return Err(HipError::call(
                    "StreamRef::mark_and_hold: words of another runtime",
                    HipErrorCode::INVALID_HANDLE,
                ));
            }
        }
        let (Some(at), Some(_)) = (marks.device_addr(slot), flags.device_addr(slot)) else {
            return Err(HipError::call(
                "StreamRef::mark_and_hold: no such slot",
                HipErrorCode::INVALID_VALUE,
            ));
        };
        // SAFETY: the stream is live for the borrow; `at` is the device address of an aligned
        // word of host-mapped memory of this runtime (checked above), which the host only
        // accesses atomically and which stays allocated until the store has run because freeing
        // it (`HostFlags::drop`) synchronizes the device first.
        unsafe { self.runtime.stream_write_value(self.handle, at, value) }?;
        self.hold(flags, slot, value, how)
    }

    /// Run `f` on a runtime thread once the work queued before it on the stream is done. `f`
    /// must make no runtime call (GPU runtimes forbid it in host functions).
    pub fn launch_host_func(&self, f: HostFn) -> HipResult<()> {
        // SAFETY: the handle is live for the borrow.
        unsafe { self.runtime.launch_host_func(self.handle, f) }
    }

    /// Wait for the work queued on the stream; the first failure of that work.
    pub fn synchronize(&self) -> HipResult<()> {
        // SAFETY: the handle is live for the borrow.
        unsafe { self.runtime.stream_synchronize(self.handle) }
    }

    /// Queue a fill of `range` with `value` on the stream (a GPU workload of known size, for
    /// benchmarks). `range` must belong to the stream's runtime (else `hipErrorInvalidValue`).
    ///
    /// Sound without `unsafe` for the reasons [`DeviceRange`] is: the range covers memory the
    /// runtime reports as device memory, never memory Rust code holds references to. The memory
    /// stays allocated until the fill has run, because freeing device memory synchronizes the
    /// device first (`hipFree` and `cudaFree` do so implicitly; the simulator too).
    pub fn fill_async(&self, range: &DeviceRange, value: u8) -> HipResult<()> {
        if !range.belongs_to(self.runtime) {
            return Err(HipError::call(
                "StreamRef::fill_async: memory of another runtime",
                HipErrorCode::INVALID_VALUE,
            ));
        }
        // SAFETY: `range` is device memory of this runtime inside one allocation (its
        // constructor's check), which outlives the fill as explained above; the stream is live
        // for the borrow.
        unsafe {
            self.runtime
                .memset_device_async(range.ptr(), value, range.len(), self.handle)
        }
    }
}

/// The first address of the `len` bytes at `offset` into the `whole` bytes at `ptr`, or `None`
/// when they do not fit inside them: the one bounds check of every range's `slice`.
pub(crate) fn sub_range(ptr: usize, whole: usize, offset: usize, len: usize) -> Option<usize> {
    let end = offset.checked_add(len)?;
    (end <= whole).then(|| ptr + offset)
}

/// Drop a host function's share of `shared`. If it is the last one, what it owns would be freed
/// on the runtime's own thread, and freeing pinned memory synchronizes the device: GPU runtimes
/// forbid runtime calls in host functions (the stream running this one would wait for itself).
/// The last share is dropped on a thread of its own (named `name`) instead; if no thread can be
/// made, it is leaked.
pub(crate) fn drop_off_the_runtime_thread<T: Send + 'static>(shared: Arc<T>, name: &str) {
    let Some(last) = Arc::into_inner(shared) else {
        return;
    };
    let (tx, rx) = std::sync::mpsc::channel::<T>();
    let spawned = std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || drop(rx.recv()));
    match spawned {
        Ok(_) => {
            if let Err(unsent) = tx.send(last) {
                std::mem::forget(unsent.0);
            }
        }
        Err(_) => std::mem::forget(last),
    }
}

impl fmt::Debug for StreamRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("StreamRef").field(&self.handle).finish()
    }
}

impl<'a> DeviceSlice<'a> {
    /// A shared view of `len` bytes of device memory at `ptr`, allocated by someone else (a
    /// framework's tensor, a C caller). Its base is `ptr`.
    ///
    /// # Safety
    ///
    /// For `'a`, `[ptr, ptr + len)` must be device memory that stays allocated (it is not freed,
    /// nor freed and allocated again), that no kernel, copy or other view writes, and whose end
    /// `ptr + len` does not overflow. hipfile-rs still checks the range against the GPU runtime
    /// before moving a byte, so an address the runtime does not know is refused; what it cannot
    /// check is how long the memory stays allocated and who else uses it.
    pub unsafe fn from_raw_parts(ptr: usize, len: usize) -> DeviceSlice<'a> {
        DeviceSlice {
            base: ptr,
            offset: 0,
            len,
            memory: PhantomData,
        }
    }
}

impl<'a> DeviceSliceMut<'a> {
    /// An exclusive view of `len` bytes of device memory at `ptr`, allocated by someone else (a
    /// framework's tensor, a C caller). Its base is `ptr`.
    ///
    /// # Safety
    ///
    /// For `'a`, `[ptr, ptr + len)` must be device memory that stays allocated (it is not freed,
    /// nor freed and allocated again), that no kernel, copy or other view reads or writes, and
    /// whose end `ptr + len` does not overflow. hipfile-rs still checks the range against the GPU
    /// runtime before moving a byte, so an address the runtime does not know is refused; what it
    /// cannot check is how long the memory stays allocated and who else uses it.
    pub unsafe fn from_raw_parts(ptr: usize, len: usize) -> DeviceSliceMut<'a> {
        DeviceSliceMut {
            base: ptr,
            offset: 0,
            len,
            memory: PhantomData,
        }
    }
}

/// The synchronous copies and the direct IO of a [`DeviceRange`]: sound without an `unsafe`
/// constructor because the range covers memory the runtime's pointer query vouched for (device or
/// managed memory inside one allocation), never memory Rust code references.
impl DeviceRange {
    /// Copy `src` to the start of the range, synchronously; `src` may be shorter than the range,
    /// not longer.
    pub fn copy_from_host(&self, src: &[u8]) -> HipResult<()> {
        self.check_len(src.len(), "DeviceRange::copy_from_host")?;
        // SAFETY: `[ptr, ptr + src.len())` lies inside one device allocation of this runtime
        // (checked by `query`/`slice` and just above); it is GPU memory, never memory Rust code
        // references, so the copy cannot alias a Rust borrow (see the module docs).
        unsafe { self.runtime.copy_to_device(self.ptr, src) }
    }

    /// Copy the start of the range into `dst`, synchronously; `dst` may be shorter than the
    /// range, not longer.
    pub fn copy_to_host(&self, dst: &mut [u8]) -> HipResult<()> {
        self.check_len(dst.len(), "DeviceRange::copy_to_host")?;
        // SAFETY: as in `copy_from_host`; only the device range is read.
        unsafe { self.runtime.copy_from_device(dst, self.ptr) }
    }

    /// Fill the range with `value`, synchronously.
    pub fn fill(&self, value: u8) -> HipResult<()> {
        // SAFETY: the whole range, checked at construction (see `copy_from_host`).
        unsafe { self.runtime.memset_device(self.ptr, value, self.len) }
    }

    /// Read from `fd` at `file_offset` into this range with the platform's direct path, as
    /// [`crate::P2pDriver::read`] does: up to `len()` bytes, fewer at end of file or when the driver
    /// stops short (the caller continues). `driver` must be the P2P driver of this range's
    /// runtime ([`GpuRuntime::p2p`]).
    pub fn p2p_read(
        &self,
        driver: &dyn P2pDriver,
        fd: BorrowedFd<'_>,
        file_offset: u64,
    ) -> io::Result<usize> {
        // SAFETY: `[ptr, ptr + len)` is device memory inside one allocation of the runtime whose
        // driver this is (module docs); the driver writes only inside it.
        unsafe { driver.read(fd, self.ptr, self.len, file_offset) }
    }

    /// Write this range to `fd` at `file_offset` with the platform's direct path, as
    /// [`crate::P2pDriver::write`] does: up to `len()` bytes.
    pub fn p2p_write(
        &self,
        driver: &dyn P2pDriver,
        fd: BorrowedFd<'_>,
        file_offset: u64,
    ) -> io::Result<usize> {
        // SAFETY: as in `p2p_read`; the device range is only read.
        unsafe { driver.write(fd, self.ptr, self.len, file_offset) }
    }
}

/// Loans the application makes with its word for the bytes (the C ABIs, whose callers' contract
/// is that word).
impl HostLoan {
    /// Lend the `len` bytes at `ptr` to the library for reading and writing: a file read into
    /// them, a file write from them, or a registration that serves both.
    ///
    /// # Safety
    ///
    /// Until the request (or registration) this loan is given to has finished (every request
    /// that carries it, or uses a registration made with it, has ended and the registration is
    /// gone), the bytes stay allocated and nothing else reads or writes them: no Rust reference
    /// to any of them is used, and no other thread or device touches them. An address that is
    /// not mapped is allowed (the kernel answers `EFAULT`); memory that is mapped but belongs to
    /// someone else is not.
    pub unsafe fn lend_mut(ptr: usize, len: usize) -> HostLoan {
        HostLoan {
            ptr,
            len,
            writable: true,
            scope: None,
        }
    }

    /// Lend the `len` bytes at `ptr` to the library for reading only (a file write from them).
    ///
    /// # Safety
    ///
    /// Until the request this loan is given to has finished, the bytes stay allocated and nothing
    /// writes them (reading them elsewhere is allowed). An unmapped address is `EFAULT`.
    pub unsafe fn lend(ptr: usize, len: usize) -> HostLoan {
        HostLoan {
            ptr,
            len,
            writable: false,
            scope: None,
        }
    }
}

/// The reads and writes of a [`HostRange`]: the bytes are moved by the kernel alone, which
/// checks every page, while the loan the range was made in holds (a scoped loan cannot be
/// revoked meanwhile; see [`HostRange`]'s module docs).
impl HostRange {
    /// One `pread(2)` from `fd` at `file_offset` into the range: up to `len()` bytes, fewer at
    /// end of file or when the kernel stops short (the caller continues). `EFAULT` for an address
    /// the process cannot write, a range lent for reading only, or a loan that was revoked.
    pub fn read_from(&self, fd: BorrowedFd<'_>, file_offset: u64) -> io::Result<usize> {
        if !self.writable() {
            return Err(io::Error::from_raw_os_error(libc::EFAULT));
        }
        self.while_lent(|| {
            // SAFETY: the range lies inside a loan lent for writing that holds for this call
            // (`while_lent`): its maker vouched that nothing else reads or writes the bytes
            // meanwhile. The kernel checks the pages.
            unsafe { crate::ffi::os::pread_raw(fd, self.ptr, self.len, file_offset) }
        })
    }

    /// One `pwrite(2)` of the range to `fd` at `file_offset`, or with `None` at the end of the
    /// file (`RWF_APPEND`): up to `len()` bytes (the caller continues a short write). `EFAULT`
    /// for an address the process cannot read or a loan that was revoked.
    pub fn write_to(&self, fd: BorrowedFd<'_>, file_offset: Option<u64>) -> io::Result<usize> {
        self.while_lent(|| crate::ffi::os::pwrite_raw(fd, self.ptr, self.len, file_offset))
    }
}

/// The lane's copies: a half is marked pending before its copy is queued and handed out again
/// only after the copy's event completed, and pinned file ranges are held until the stream
/// drained, which is what the runtime's asynchronous copies ask of their host memory.
impl StagingLane {
    /// Queue a copy of the first `dst.len()` bytes of half `slot` to `dst` on the lane's stream
    /// and record the half's event; the half stays borrowed by the copy until it is waited for.
    pub fn upload(&mut self, slot: usize, dst: &DeviceRange) -> HipResult<()> {
        self.check(slot, dst)?;
        let src = self.half_ptr(slot);
        self.mark_queued();
        // SAFETY: `dst` is device memory inside one allocation of this lane's runtime, checked by
        // its constructor and `check`; the source is the first `dst.len()` bytes of the half,
        // owned by the lane, and marked pending below, so no borrow of it is handed out (and
        // the buffer is not freed) before the copy's event has completed. The stream is the
        // lane's own, made by the same runtime, and lives as long as the lane.
        unsafe {
            self.runtime().copy_to_device_async(
                dst.ptr(),
                src.cast_const(),
                dst.len(),
                self.stream.handle(),
            )
        }?;
        self.record(slot)
    }

    /// Queue a copy of `src` into the first `src.len()` bytes of half `slot` and record the
    /// half's event; read the bytes with [`StagingLane::half`], which waits for the copy.
    pub fn download(&mut self, slot: usize, src: &DeviceRange) -> HipResult<()> {
        self.check(slot, src)?;
        // A copy still queued into this half must finish before another one is queued into it.
        self.wait(slot)?;
        let dst = self.half_ptr(slot);
        self.mark_queued();
        // SAFETY: as in `upload`, the other way round: the half is written by the copy and no
        // borrow of it is handed out until its event has completed.
        unsafe {
            self.runtime()
                .copy_from_device_async(dst, src.ptr(), src.len(), self.stream.handle())
        }?;
        self.record(slot)
    }

    /// Queue a copy of `dst.len()` bytes of the file at `file_offset` out of the pinned pages of
    /// `src` to `dst`, on the lane's stream; `src` is kept until [`StagingLane::finish`] has
    /// drained the stream. The halves are not involved, so any number of these may be queued
    /// between two drains.
    pub fn upload_pinned(
        &mut self,
        src: &Arc<PinnedFileRange>,
        file_offset: u64,
        dst: &DeviceRange,
    ) -> HipResult<()> {
        if !dst.belongs_to(self.runtime()) || !src.belongs_to(self.runtime()) {
            return Err(HipError::call(
                "StagingLane: memory of another runtime",
                HipErrorCode::INVALID_VALUE,
            ));
        }
        let from = src.source(file_offset, dst.len())?;
        self.mark_queued();
        self.held.push(Arc::clone(src));
        // SAFETY: `dst` is device memory inside one allocation of this lane's runtime (checked by
        // its constructor and above); the source lies inside the pinned mapping of `src`
        // (checked by `source`), which the lane holds until its stream has drained. The stream
        // is the lane's own.
        unsafe {
            self.runtime()
                .copy_to_device_async(dst.ptr(), from, dst.len(), self.stream.handle())
        }
    }
}

/// Registration with the runtime: the mapping lives as long as the range, and the drop
/// unregisters it before the mapping goes.
impl PinnedFileRange {
    /// Pin `mapping` with the runtime's read-only registration, made on `device` (the calling
    /// thread's current device is left as it was: a thread with none would otherwise bring up
    /// device 0's context); every page must lie inside the file (the kernel brings in any page
    /// that is not cached). While the range lives its bytes are added to `ledger`.
    pub fn register(
        runtime: &Arc<dyn GpuRuntime>,
        device: i32,
        mapping: FileMapping,
        ledger: Option<Arc<AtomicUsize>>,
    ) -> HipResult<Self> {
        let _on_device = DeviceGuard::switch(&**runtime, device)?;
        // SAFETY: `[map, map + len)` is mapped for as long as `mapping` lives, and `Drop`
        // unregisters it before the mapping goes.
        unsafe { runtime.host_register(mapping.ptr(), mapping.len(), true) }?;
        Ok(Self::pinned(runtime, device, None, mapping, ledger))
    }

    /// [`PinnedFileRange::register`] in `context`, a context of the library's own on its
    /// device: pinning there leaves the device's primary context (the application's work and
    /// the library's copies) free meanwhile, and the pages are unpinned there too.
    pub fn register_in(
        context: &Arc<OwnedContext>,
        mapping: FileMapping,
        ledger: Option<Arc<AtomicUsize>>,
    ) -> HipResult<Self> {
        let runtime = context.runtime();
        // SAFETY: as in `register`.
        context.run(|| unsafe { runtime.host_register(mapping.ptr(), mapping.len(), true) })?;
        Ok(Self::pinned(
            runtime,
            context.device(),
            Some(Arc::clone(context)),
            mapping,
            ledger,
        ))
    }
}

impl PinnedFileRange {
    /// Undo the registration on the calling thread as it is, whatever context it was made in:
    /// for tests of a runtime that keeps registrations per context.
    #[cfg(test)]
    pub(crate) fn unregister_outside_its_context(&self) -> HipResult<()> {
        // SAFETY: the tests that call this copy nothing out of the range.
        unsafe { self.runtime.host_unregister(self.mapping.ptr()) }
    }
}

impl Drop for PinnedFileRange {
    fn drop(&mut self) {
        // Every copy out of the range held it until the copy completed (`StagingLane`), so
        // nothing reads it now. An unregistration that fails leaves the pages pinned; the
        // mapping goes either way (after this, with the field), and the runtime forgets the pin
        // with the address space.
        let map = self.mapping.ptr();
        // SAFETY: registered in `register` or `register_in` (in the same context); no copy out
        // of it is queued (see above).
        let unregister = || unsafe { self.runtime.host_unregister(map) };
        let _ = match &self.context {
            Some(context) => context.run(unregister),
            None => {
                let _on_device = DeviceGuard::switch(&*self.runtime, self.device);
                unregister()
            }
        };
        if let Some(l) = &self.ledger {
            l.fetch_sub(self.mapping.len(), Ordering::AcqRel);
        }
    }
}

/// A raw piece address that a host function may carry to the runtime's thread.
struct Piece(*mut u8);

// SAFETY: the address is only dereferenced by the one host function that owns the piece (the
// slot discipline of the module docs); the memory is pinned host memory, valid on any thread.
unsafe impl Send for Piece {}

impl HostFunctionReader {
    /// Queue on `stream` a read of `dst.len()` bytes of `file` at `offset` into `dst`: a host
    /// function that `pread`s them into a piece of this reader's pinned memory, then an
    /// asynchronous copy of the piece to `dst`. Waits for a free piece when all are in flight.
    /// Returns once both are queued; the bytes are in `dst` when the stream passed them.
    ///
    /// `dst` longer than a piece, or memory or a stream of another runtime than the reader's,
    /// is `hipErrorInvalidValue`, before anything is queued. A failure to queue is returned;
    /// a failure of the read itself is counted ([`HostFunctionReader::failed_reads`]).
    pub fn read_on(
        &self,
        stream: &StreamRef<'_>,
        file: Arc<File>,
        offset: u64,
        dst: &DeviceRange,
    ) -> HipResult<()> {
        let runtime = stream.runtime();
        let len = dst.len();
        if len > self.shared.piece {
            return Err(HipError::call(
                "HostFunctionReader::read_on: longer than a piece",
                HipErrorCode::INVALID_VALUE,
            ));
        }
        if !dst.belongs_to(runtime)
            || !std::ptr::addr_eq(
                Arc::as_ptr(self.shared.pinned.runtime()),
                Arc::as_ptr(runtime),
            )
        {
            return Err(HipError::call(
                "HostFunctionReader::read_on: memory or stream of another runtime",
                HipErrorCode::INVALID_VALUE,
            ));
        }
        let slot = self.shared.claim()?;
        let piece = Piece(self.shared.piece_ptr(slot));
        let src = piece.0.cast_const();

        let reader = Arc::clone(&self.shared);
        let read = Box::new(move || {
            let piece = piece;
            // SAFETY: the first `len` bytes of piece `slot` (`len <= piece` was checked) are
            // pinned memory of `reader`, alive while this share is. This op claimed the slot, so
            // nothing else touches the piece until the op gives it back (step 3, after the copy
            // that follows this function on the stream); the copy starts only after this
            // function returned. No Rust borrow of the pinned memory exists (module docs).
            let bytes = unsafe { std::slice::from_raw_parts_mut(piece.0, len) };
            if let Err(e) = file.read_exact_at(bytes, offset) {
                reader.fail(format!("pread of {len} bytes at {offset}: {e}"));
            }
            drop_off_the_runtime_thread(reader, "hipfile-replay-free");
        });
        if let Err(e) = stream.launch_host_func(read) {
            // Nothing was queued: the piece is free again.
            self.shared.give_back(slot);
            return Err(e);
        }

        // SAFETY: `stream` is live for its borrow (`StreamRef`'s contract), and the handle is
        // used only during this call. `dst` is device memory of this runtime inside one
        // allocation (its constructor's check, and `belongs_to` above); the source is the first
        // `len` bytes of piece `slot`, pinned memory of the same runtime, which stays allocated
        // and untouched by anything but this op until step 3 below has run, after this copy
        // completed (module docs).
        let copied = unsafe {
            runtime.copy_to_device_async(dst.ptr(), src, len, StreamHandle::from_raw(stream.raw()))
        };

        let reader = Arc::clone(&self.shared);
        let release = Box::new(move || {
            reader.give_back(slot);
            drop_off_the_runtime_thread(reader, "hipfile-replay-free");
        });
        match stream.launch_host_func(release) {
            Ok(()) => copied,
            Err(e) => {
                // The read queued above may still write the piece: it is never given back, and
                // the memory is never freed.
                self.shared.lost.fetch_add(1, Ordering::AcqRel);
                std::mem::forget(Arc::clone(&self.shared));
                Err(copied.err().unwrap_or(e))
            }
        }
    }
}

impl NvidiaRuntime {
    /// The device of a live stream asked of the driver: `cuStreamGetCtx`, then `cuCtxGetDevice`
    /// in that context. What [`GpuRuntime::stream_device`] does where the runtime has no
    /// `cudaStreamGetDevice`; public so that both ways can be checked against each other.
    ///
    /// # Safety
    /// `stream` is a live stream of this runtime.
    pub unsafe fn stream_device_through_driver(&self, stream: StreamHandle) -> HipResult<i32> {
        // SAFETY: the caller guarantees a live stream of this runtime.
        self.device_through_driver(unsafe { LiveStream::vouch(stream) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{SimConfig, SimRuntime};
    use crate::{DeviceBuffer, MemoryKind};

    /// Long enough for a worker that is free to run queued work to have run it.
    const SETTLE: Duration = Duration::from_millis(60);

    fn sim() -> (Arc<SimRuntime>, Arc<dyn GpuRuntime>) {
        let sim = Arc::new(SimRuntime::new(SimConfig {
            devices: 2,
            ..SimConfig::default()
        }));
        let rt: Arc<dyn GpuRuntime> = sim.clone();
        (sim, rt)
    }

    fn code<T: fmt::Debug>(r: HipResult<T>) -> HipErrorCode {
        match r {
            Err(HipError::Call { code, .. }) => code,
            other => panic!("expected a failed call, got {other:?}"),
        }
    }

    #[test]
    fn host_flags_are_zeroed_words_with_device_addresses_and_checked_slots() {
        let (sim, rt) = sim();
        let flags = HostFlags::new(Arc::clone(&rt), 3).unwrap();
        assert_eq!(flags.len(), 3);
        assert_eq!(
            (0..3).map(|i| flags.load(i)).collect::<Vec<_>>(),
            [Some(0); 3]
        );
        flags.store(2, 17).unwrap();
        assert_eq!(flags.load(2), Some(17));
        assert_eq!(flags.load(3), None);
        assert_eq!(code(flags.store(3, 1)), HipErrorCode::INVALID_VALUE);
        let base = flags.device_addr(0).unwrap();
        assert_eq!(flags.device_addr(2), Some(base + 8));
        assert_eq!(flags.device_addr(3), None);
        assert_eq!(sim.live_allocations(MemoryKind::Host), 1);
        drop(flags);
        assert_eq!(sim.live_allocations(MemoryKind::Host), 0);
    }

    /// The mark is stored only once the stream reached it (after the work queued before it),
    /// and the stream goes on only once the flag is stored.
    fn a_mark_tells_the_stream_reached_it_and_the_hold_keeps_it(how: Hold) {
        let (_sim, rt) = sim();
        let flags = Arc::new(HostFlags::new(Arc::clone(&rt), 2).unwrap());
        let marks = Arc::new(HostFlags::new(Arc::clone(&rt), 2).unwrap());
        let stream = OwnedStream::new_independent(Arc::clone(&rt)).unwrap();
        let s = StreamRef::of(&stream);
        let before = Arc::new(HostFlags::new(Arc::clone(&rt), 1).unwrap());
        // Earlier work on the stream: held on a word of its own.
        s.hold(&before, 0, 1, how).unwrap();
        s.mark_and_hold(&marks, &flags, 1, 5, how).unwrap();
        let passed = OwnedEvent::new(Arc::clone(&rt)).unwrap();
        s.record(&passed).unwrap();
        std::thread::sleep(SETTLE);
        assert_eq!(
            marks.load(1),
            Some(0),
            "{how:?}: not reached while earlier work waits"
        );
        before.store(0, 1).unwrap();
        let since = std::time::Instant::now();
        while marks.load(1) != Some(5) {
            assert!(
                since.elapsed() < Duration::from_secs(10),
                "{how:?}: never marked"
            );
            std::thread::yield_now();
        }
        std::thread::sleep(SETTLE);
        assert!(!passed.query().unwrap(), "{how:?}: marked, still held");
        flags.store(1, 5).unwrap();
        passed.synchronize().unwrap();
        s.synchronize().unwrap();
        assert_eq!(marks.load(0), Some(0), "other marks untouched");
    }

    #[test]
    fn a_mark_lands_when_reached_and_either_hold_keeps_the_stream_until_let_go() {
        for how in [Hold::Memop, Hold::HostFunction] {
            a_mark_tells_the_stream_reached_it_and_the_hold_keeps_it(how);
        }
    }

    fn a_hold_keeps_the_stream_until_the_value_is_stored(how: Hold) {
        let (_sim, rt) = sim();
        let flags = Arc::new(HostFlags::new(Arc::clone(&rt), 2).unwrap());
        let stream = OwnedStream::new_independent(Arc::clone(&rt)).unwrap();
        let passed = OwnedEvent::new(Arc::clone(&rt)).unwrap();
        let s = StreamRef::of(&stream);
        s.hold(&flags, 1, 3, how).unwrap();
        s.record(&passed).unwrap();
        flags.store(1, 2).unwrap();
        std::thread::sleep(SETTLE);
        assert!(!passed.query().unwrap(), "{how:?}: 2 < 3, still held");
        flags.store(1, 3).unwrap();
        passed.synchronize().unwrap();
        s.synchronize().unwrap();
    }

    #[test]
    fn a_memop_hold_keeps_the_stream_until_the_value_is_stored() {
        a_hold_keeps_the_stream_until_the_value_is_stored(Hold::Memop);
    }

    #[test]
    fn a_host_function_hold_keeps_the_stream_until_the_value_is_stored() {
        a_hold_keeps_the_stream_until_the_value_is_stored(Hold::HostFunction);
    }

    #[test]
    fn a_host_function_hold_never_frees_the_flags_on_the_runtime_thread() {
        let (sim, rt) = sim();
        let stream = OwnedStream::new(Arc::clone(&rt)).unwrap();
        let flags = Arc::new(HostFlags::new(Arc::clone(&rt), 1).unwrap());
        StreamRef::of(&stream)
            .hold(&flags, 0, 1, Hold::HostFunction)
            .unwrap();
        flags.store(0, 1).unwrap();
        // Whoever drops the last share, no free runs on the stream's own thread (it would wait
        // for the stream running it).
        drop(flags);
        stream.synchronize().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while sim.live_allocations(MemoryKind::Host) != 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the flags were never freed"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn holds_refuse_foreign_flags_missing_slots_and_absent_memops() {
        let (_sim, rt) = sim();
        let (_other_sim, other) = sim();
        let foreign = Arc::new(HostFlags::new(Arc::clone(&other), 1).unwrap());
        let flags = Arc::new(HostFlags::new(Arc::clone(&rt), 1).unwrap());
        let s = StreamRef::null(&rt);
        assert_eq!(
            code(s.hold(&foreign, 0, 1, Hold::HostFunction)),
            HipErrorCode::INVALID_HANDLE
        );
        assert_eq!(
            code(s.hold(&flags, 1, 1, Hold::Memop)),
            HipErrorCode::INVALID_VALUE
        );
        let no_memops: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::new(SimConfig {
            memops: false,
            ..SimConfig::default()
        }));
        let flags = Arc::new(HostFlags::new(Arc::clone(&no_memops), 1).unwrap());
        let s = StreamRef::null(&no_memops);
        assert_eq!(
            code(s.hold(&flags, 0, 1, Hold::Memop)),
            HipErrorCode::NOT_SUPPORTED
        );
        s.hold(&flags, 0, 1, Hold::HostFunction).unwrap();
        flags.store(0, 1).unwrap();
        s.synchronize().unwrap();
    }

    #[test]
    fn stream_refs_know_their_device_record_events_of_their_runtime_and_fill() {
        let (_sim, rt) = sim();
        let (_other_sim, other) = sim();
        rt.set_device(1).unwrap();
        let stream = OwnedStream::new_independent(Arc::clone(&rt)).unwrap();
        let dev = DeviceBuffer::new(Arc::clone(&rt), 4096).unwrap();
        rt.set_device(0).unwrap();
        let s = StreamRef::of(&stream);
        assert_eq!(s.device().unwrap(), 1);
        assert_eq!(StreamRef::null(&rt).device().unwrap(), 0);
        assert_eq!(s.raw(), stream.handle().as_raw());
        assert!(Arc::ptr_eq(s.runtime(), &rt));

        let event = OwnedEvent::on_device(Arc::clone(&rt), 1).unwrap();
        assert_eq!(
            rt.current_device().unwrap(),
            0,
            "on_device restores the device"
        );
        assert_eq!(
            code(OwnedEvent::on_device(Arc::clone(&rt), 2)),
            HipErrorCode::INVALID_DEVICE
        );
        assert_eq!(rt.current_device().unwrap(), 0);
        let foreign = OwnedEvent::new(Arc::clone(&other)).unwrap();
        assert_eq!(code(s.record(&foreign)), HipErrorCode::INVALID_HANDLE);

        let range = DeviceRange::query(&rt, dev.ptr(), 4096).unwrap();
        s.fill_async(&range.slice(1000, 24).unwrap(), 0x42).unwrap();
        s.record(&event).unwrap();
        event.synchronize().unwrap();
        let bytes = dev.to_vec().unwrap();
        assert!(bytes[1000..1024].iter().all(|b| *b == 0x42));
        assert!(bytes[..1000].iter().chain(&bytes[1024..]).all(|b| *b == 0));
        let theirs = DeviceBuffer::new(Arc::clone(&other), 64).unwrap();
        let theirs = DeviceRange::query(&other, theirs.ptr(), 64).unwrap();
        assert_eq!(code(s.fill_async(&theirs, 1)), HipErrorCode::INVALID_VALUE);
    }

    #[test]
    fn raw_parts_name_their_pointer_as_the_base() {
        let buf = DeviceBuffer::new(Arc::new(SimRuntime::default()), 4096).unwrap();
        // SAFETY: the buffer lives to the end of the test and nothing else touches it meanwhile.
        let raw = unsafe { DeviceSliceMut::from_raw_parts(buf.ptr() + 512, 1024) };
        assert_eq!(
            (raw.base(), raw.offset(), raw.len()),
            (buf.ptr() + 512, 0, 1024)
        );
        // SAFETY: as above; the shared view only reads.
        let shared = unsafe { DeviceSlice::from_raw_parts(buf.ptr(), 16) };
        assert_eq!(shared.get(4..).map(|s| s.ptr()), Some(buf.ptr() + 4));
    }
}
