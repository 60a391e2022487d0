//! The runtime trait every platform implements, and the RAII types built on it.

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::Arc;

use crate::error::HipResult;

pub use crate::info::{MemoryKind, Platform, PointerInfo, RuntimeInfo};

/// A platform's direct storage <-> GPU memory path.
///
/// Calls may come from any thread, concurrently. A call may move fewer bytes than asked (a read at
/// end of file, a transfer capped at [`crate::MAX_P2P_TRANSFER`], a driver that splits work); the caller
/// continues from where it stopped. `Ok(0)` from a read means end of file.
pub trait P2pDriver: Send + Sync + fmt::Debug {
    /// A short name for reports (`amd-kfd`, `cufile`, `sim`).
    fn name(&self) -> &'static str;

    /// Read up to `size` bytes at `file_offset` of `fd` into device memory at `device_ptr`.
    ///
    /// # Safety
    /// `fd` is an open O_DIRECT descriptor; `[device_ptr, device_ptr + size)` is device memory of
    /// this driver's runtime, inside one allocation (the caller validated it with the runtime's
    /// pointer query), and nothing else accesses it until the call returns.
    unsafe fn read(
        &self,
        fd: BorrowedFd<'_>,
        device_ptr: usize,
        size: usize,
        file_offset: u64,
    ) -> io::Result<usize>;

    /// Write up to `size` bytes from device memory at `device_ptr` to `file_offset` of `fd`.
    ///
    /// # Safety
    /// As for [`P2pDriver::read`], except that the device range is only read.
    unsafe fn write(
        &self,
        fd: BorrowedFd<'_>,
        device_ptr: usize,
        size: usize,
        file_offset: u64,
    ) -> io::Result<usize>;
}

/// An opaque stream handle of a runtime (`hipStream_t`).
///
/// Only a runtime makes one ([`GpuRuntime::stream_create`]) or code that vouches for a raw value
/// ([`StreamHandle::from_raw`]); the runtime calls that take one are `unsafe`, because a GPU
/// runtime need not check that a handle is alive (CUDA does not: a destroyed stream is undefined
/// behaviour). [`OwnedStream`] is the safe way to hold and use one.
///
/// A stream is *live* for a runtime from its [`GpuRuntime::stream_create`] until its
/// [`GpuRuntime::stream_destroy`]. The null stream (raw value 0, the legacy default stream) is
/// live for every runtime, but is never destroyed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct StreamHandle(usize);

impl StreamHandle {
    /// The handle whose raw value (the C `hipStream_t` as an address) is `raw`.
    ///
    /// # Safety
    /// `raw` is a stream handle of the runtime the value will be handed to: returned by its
    /// [`GpuRuntime::stream_create`] (or its C `hipStreamCreate`/`cudaStreamCreate`) and not
    /// destroyed for as long as the value is used, or 0, the null stream.
    pub unsafe fn from_raw(raw: usize) -> Self {
        StreamHandle(raw)
    }

    /// The raw value, for the C call that takes the handle and for printing.
    pub fn as_raw(&self) -> usize {
        self.0
    }
}

/// An opaque handle of a context hipfile-rs made for itself ([`GpuRuntime::context_create`]);
/// [`OwnedContext`] is the safe way to hold and use one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ContextHandle(usize);

impl ContextHandle {
    /// The handle whose raw value (the C `CUcontext` as an address) is `raw`.
    ///
    /// # Safety
    /// `raw` came from the [`GpuRuntime::context_create`] of the runtime the value is handed to
    /// and is not destroyed for as long as the value is used.
    pub unsafe fn from_raw(raw: usize) -> Self {
        ContextHandle(raw)
    }

    /// The raw value, for the C call that takes the handle.
    pub fn as_raw(&self) -> usize {
        self.0
    }
}

/// An opaque event handle of a runtime (`hipEvent_t`).
///
/// As for [`StreamHandle`]: made by [`GpuRuntime::event_create`] or vouched for with
/// [`EventHandle::from_raw`], used through `unsafe` runtime calls; [`OwnedEvent`] is the safe way
/// to hold and use one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct EventHandle(usize);

impl EventHandle {
    /// The handle whose raw value (the C `hipEvent_t` as an address) is `raw`.
    ///
    /// # Safety
    /// `raw` is an event handle of the runtime the value will be handed to: returned by its
    /// [`GpuRuntime::event_create`] (or its C `hipEventCreate`/`cudaEventCreate`) and not destroyed
    /// for as long as the value is used.
    pub unsafe fn from_raw(raw: usize) -> Self {
        EventHandle(raw)
    }

    /// The raw value, for the C call that takes the handle and for printing.
    pub fn as_raw(&self) -> usize {
        self.0
    }
}

/// A host function queued on a stream.
pub type HostFn = Box<dyn FnOnce() + Send + 'static>;

/// One GPU runtime: the mechanism hipfile-rs needs from HIP, CUDA or the simulator.
///
/// Implementations are thread-safe. Device pointers are plain addresses (`usize`); the copy entry
/// points that write to or read from them are `unsafe` because the runtime cannot always tell a
/// device address from a host one: callers check the range with [`GpuRuntime::pointer_info`] first.
pub trait GpuRuntime: Send + Sync + fmt::Debug {
    /// Facts about this runtime.
    fn info(&self) -> RuntimeInfo;
    /// Number of devices.
    fn device_count(&self) -> HipResult<i32>;
    /// The calling thread's current device.
    fn current_device(&self) -> HipResult<i32>;
    /// Make `device` the calling thread's current device.
    fn set_device(&self, device: i32) -> HipResult<()>;
    /// What the runtime knows about `ptr`.
    fn pointer_info(&self, ptr: usize) -> HipResult<PointerInfo>;

    /// Allocate `len` bytes of device memory on the current device.
    fn device_alloc(&self, len: usize) -> HipResult<usize>;
    /// Allocate `len` bytes of managed memory.
    fn managed_alloc(&self, len: usize) -> HipResult<usize>;
    /// Free device or managed memory.
    ///
    /// # Safety
    /// `ptr` came from [`GpuRuntime::device_alloc`] or [`GpuRuntime::managed_alloc`] of this runtime
    /// and no copy into or out of it is in flight.
    unsafe fn device_free(&self, ptr: usize) -> HipResult<()>;
    /// Allocate `len` bytes of pinned host memory.
    fn host_alloc(&self, len: usize) -> HipResult<NonNull<u8>>;
    /// Free pinned host memory.
    ///
    /// # Safety
    /// `ptr` came from [`GpuRuntime::host_alloc`] of this runtime and is no longer used.
    unsafe fn host_free(&self, ptr: NonNull<u8>) -> HipResult<()>;

    /// Pin `len` bytes of host memory the caller mapped at `ptr` (`hipHostRegister` /
    /// `cudaHostRegister`, portable), so copies to the device read them by DMA. `read_only` adds
    /// the runtime's read-only flag, which pins memory the process may only read (a `PROT_READ`
    /// mapping of a file) and lets the device only read it.
    ///
    /// # Safety
    /// `[ptr, ptr + len)` is mapped in this process and stays mapped until
    /// [`GpuRuntime::host_unregister`] of `ptr`.
    unsafe fn host_register(&self, ptr: NonNull<u8>, len: usize, read_only: bool) -> HipResult<()>;
    /// Unpin memory pinned with [`GpuRuntime::host_register`].
    ///
    /// # Safety
    /// `ptr` was registered with this runtime and no copy out of it is queued or running.
    unsafe fn host_unregister(&self, ptr: NonNull<u8>) -> HipResult<()>;

    /// Create a context of hipfile-rs's own on `device`, beside the device's primary context
    /// that the application's work and the library's copies run in; `None` where the runtime
    /// has no such contexts. Work in it never waits for locks the primary context holds: on
    /// CUDA, pinning host memory holds its context's lock for as long as it takes (64 MiB of
    /// page cache: ~2 ms on the H200 host), and every call the application or the library makes
    /// in that context meanwhile waits. Memory pinned in it with the portable flag (as
    /// [`GpuRuntime::host_register`] pins) is usable from every context. It costs device memory
    /// (~0.5 GiB measured on the H200).
    fn context_create(&self, device: i32) -> HipResult<Option<ContextHandle>> {
        let _ = device;
        Ok(None)
    }

    /// Whether [`GpuRuntime::context_create`] can answer a context (making one may still fail).
    fn offers_contexts(&self) -> bool {
        false
    }

    /// Run `f` with `ctx` current on the calling thread (its device current with it); what was
    /// current before is current again afterwards, also when `f` fails.
    ///
    /// # Safety
    /// `ctx` came from this runtime's [`GpuRuntime::context_create`] and is not destroyed
    /// before the call returns.
    unsafe fn in_context(
        &self,
        ctx: ContextHandle,
        f: &mut dyn FnMut() -> HipResult<()>,
    ) -> HipResult<()> {
        let _ = (ctx, f);
        Err(crate::HipError::call(
            "in_context",
            crate::HipErrorCode::NOT_SUPPORTED,
        ))
    }

    /// Destroy a context made by [`GpuRuntime::context_create`].
    ///
    /// # Safety
    /// `ctx` came from this runtime's [`GpuRuntime::context_create`], no memory pinned in it is
    /// still pinned, and nothing uses it after the call.
    unsafe fn context_destroy(&self, ctx: ContextHandle) -> HipResult<()> {
        let _ = ctx;
        Ok(())
    }

    /// Copy host bytes to device memory, synchronously.
    ///
    /// # Safety
    /// `[dst, dst + src.len())` is device memory of this runtime that nothing else accesses meanwhile.
    unsafe fn copy_to_device(&self, dst: usize, src: &[u8]) -> HipResult<()>;
    /// Copy device bytes to host memory, synchronously.
    ///
    /// # Safety
    /// `[src, src + dst.len())` is device memory of this runtime.
    unsafe fn copy_from_device(&self, dst: &mut [u8], src: usize) -> HipResult<()>;
    /// Fill device memory with `value`, synchronously.
    ///
    /// # Safety
    /// `[dst, dst + len)` is device memory of this runtime that nothing else accesses meanwhile.
    unsafe fn memset_device(&self, dst: usize, value: u8, len: usize) -> HipResult<()>;
    /// Queue a host-to-device copy on `stream`.
    ///
    /// # Safety
    /// `[dst, dst + len)` is device memory and `[src, src + len)` readable host memory (pinned for
    /// an asynchronous copy to overlap); both stay valid and untouched until the copy completes.
    /// `stream` is a live stream of this runtime (see [`GpuRuntime::stream_destroy`]).
    unsafe fn copy_to_device_async(
        &self,
        dst: usize,
        src: *const u8,
        len: usize,
        stream: StreamHandle,
    ) -> HipResult<()>;
    /// Queue a device-to-host copy on `stream`.
    ///
    /// # Safety
    /// `[src, src + len)` is device memory and `[dst, dst + len)` writable host memory; both stay
    /// valid until the copy completes and nothing reads `dst` before then. `stream` is a live
    /// stream of this runtime.
    unsafe fn copy_from_device_async(
        &self,
        dst: *mut u8,
        src: usize,
        len: usize,
        stream: StreamHandle,
    ) -> HipResult<()>;

    /// Create a stream on the current device, ordered with the legacy default stream: work queued
    /// on it waits for the application's earlier work there (a kernel still writing a buffer), as
    /// upstream hipFile's synchronous copies do, and never for other streams.
    fn stream_create(&self) -> HipResult<StreamHandle>;
    /// Create a stream on the current device that is NOT ordered with the legacy default stream
    /// (`hipStreamNonBlocking` / `cudaStreamNonBlocking`): its work never waits for work queued
    /// on the null stream, nor the null stream's for its. Engines that run while an application's
    /// stream is held for them use these, so they never queue behind that stream.
    fn stream_create_independent(&self) -> HipResult<StreamHandle>;
    /// The device `stream` belongs to; for the null stream, the calling thread's current device.
    /// The first call made with a stream an application hands in: the loaded platforms refuse a
    /// handle that points to no mapped memory with `hipErrorInvalidHandle` (HIP and CUDA would
    /// dereference it), the sim any handle it did not make.
    ///
    /// # Safety
    /// `stream` is a live stream of this runtime (see [`GpuRuntime::stream_destroy`]).
    unsafe fn stream_device(&self, stream: StreamHandle) -> HipResult<i32>;
    /// Whether streams of `device` can wait for a 32-bit value in host-mapped memory
    /// ([`GpuRuntime::stream_wait_value`]). `false` when the runtime cannot say.
    fn stream_memops(&self, device: i32) -> bool;
    /// Whether streams of `device` can store a 32-bit value into host-mapped memory
    /// ([`GpuRuntime::stream_write_value`]). A platform may offer the store where it does not
    /// hold streams with waits (NVIDIA: a store stalls no other stream). `false` when the
    /// runtime cannot say.
    fn stream_writes(&self, device: i32) -> bool;
    /// Queue on `stream` a wait until the `u32` at device-visible address `addr` is at least
    /// `value`: work queued on `stream` after it starts only then. Fails with
    /// `hipErrorNotSupported` where the platform has no stream memory operations
    /// ([`GpuRuntime::stream_memops`]).
    ///
    /// # Safety
    /// `stream` is a live stream of this runtime; `addr` is a 4-byte aligned device address of
    /// host-mapped memory of this runtime ([`GpuRuntime::host_device_pointer`]) that stays
    /// allocated until the wait has completed.
    unsafe fn stream_wait_value(
        &self,
        stream: StreamHandle,
        addr: usize,
        value: u32,
    ) -> HipResult<()>;
    /// Queue on `stream` a store of `value` into the `u32` at device-visible address `addr`,
    /// made once the work queued on `stream` before it is done (`hipStreamWriteValue32`,
    /// `cuStreamWriteValue32_v2`): how the host learns that a stream reached a point without an
    /// event per point. Fails with `hipErrorNotSupported` where the platform has no stream memory
    /// operations ([`GpuRuntime::stream_memops`]).
    ///
    /// # Safety
    /// `stream` is a live stream of this runtime; `addr` is a 4-byte aligned device address of
    /// host-mapped memory of this runtime ([`GpuRuntime::host_device_pointer`]) that stays
    /// allocated until the store has been made, and that the host only accesses atomically.
    unsafe fn stream_write_value(
        &self,
        stream: StreamHandle,
        addr: usize,
        value: u32,
    ) -> HipResult<()>;
    /// Allocate `len` bytes of pinned host memory mapped into the address space of every device
    /// (`hipHostMallocMapped | hipHostMallocPortable`); freed with [`GpuRuntime::host_free`].
    fn host_alloc_mapped(&self, len: usize) -> HipResult<NonNull<u8>>;
    /// The device address of host-mapped memory at `ptr`.
    ///
    /// # Safety
    /// `ptr` lies in memory from this runtime's [`GpuRuntime::host_alloc_mapped`] that has not
    /// been freed.
    unsafe fn host_device_pointer(&self, ptr: NonNull<u8>) -> HipResult<usize>;
    /// Queue on `stream` a fill of `[dst, dst + len)` with `value`.
    ///
    /// # Safety
    /// `[dst, dst + len)` is device memory of this runtime that nothing else accesses until the
    /// fill completes; `stream` is a live stream of this runtime.
    unsafe fn memset_device_async(
        &self,
        dst: usize,
        value: u8,
        len: usize,
        stream: StreamHandle,
    ) -> HipResult<()>;
    /// Destroy a stream after its queued work completes.
    ///
    /// # Safety
    /// `stream` is live: it came from this runtime's [`GpuRuntime::stream_create`] and has not been
    /// destroyed. Afterwards it is not, and no copy of the handle may be used again. (A GPU
    /// runtime need not detect a destroyed or foreign handle; CUDA does not.)
    unsafe fn stream_destroy(&self, stream: StreamHandle) -> HipResult<()>;
    /// Wait for everything queued on `stream`; reports the first failure of its queued work.
    ///
    /// # Safety
    /// `stream` is a live stream of this runtime (see [`GpuRuntime::stream_destroy`]).
    unsafe fn stream_synchronize(&self, stream: StreamHandle) -> HipResult<()>;
    /// Create an event.
    fn event_create(&self) -> HipResult<EventHandle>;
    /// Record `event` on `stream`.
    ///
    /// # Safety
    /// `event` is a live event of this runtime (see [`GpuRuntime::event_destroy`]) and `stream` a
    /// live stream of it (see [`GpuRuntime::stream_destroy`]).
    unsafe fn event_record(&self, event: EventHandle, stream: StreamHandle) -> HipResult<()>;
    /// Wait until `event` has completed.
    ///
    /// # Safety
    /// `event` is a live event of this runtime (see [`GpuRuntime::event_destroy`]).
    unsafe fn event_synchronize(&self, event: EventHandle) -> HipResult<()>;
    /// Whether `event` has completed (no waiting).
    ///
    /// # Safety
    /// `event` is a live event of this runtime (see [`GpuRuntime::event_destroy`]).
    unsafe fn event_query(&self, event: EventHandle) -> HipResult<bool>;
    /// Destroy an event.
    ///
    /// # Safety
    /// `event` is live: it came from this runtime's [`GpuRuntime::event_create`] and has not been
    /// destroyed. Afterwards it is not, and no copy of the handle may be used again.
    unsafe fn event_destroy(&self, event: EventHandle) -> HipResult<()>;
    /// Run `f` on a runtime thread once the work queued before it on `stream` is done.
    ///
    /// # Safety
    /// `stream` is a live stream of this runtime (see [`GpuRuntime::stream_destroy`]).
    unsafe fn launch_host_func(&self, stream: StreamHandle, f: HostFn) -> HipResult<()>;

    /// The platform's direct storage <-> GPU memory driver, when it has one. Provided (answering
    /// `None`) so a runtime without a P2P path needs to say nothing.
    fn p2p(&self) -> Option<Arc<dyn P2pDriver>> {
        None
    }

    /// The PCI bus id of `device` (`domain:bus:device.function`, as `lspci -D` prints it), when
    /// the device is a PCI device and the runtime says which. Provided (answering `None`) so a
    /// runtime without PCI devices (the sim) needs to say nothing.
    fn pci_bus_id(&self, device: i32) -> HipResult<Option<String>> {
        let _ = device;
        Ok(None)
    }
}

/// `impl GpuRuntime for $ty` that passes every call on to the runtime in field `$inner`, after
/// asking `self.$admit($calls::...)` about each fallible one (`$calls` names the wrapper's enum
/// of the fallible calls, one variant each, as the method's name in upper camel case): an `Err` from it is the
/// call's answer and the inner runtime never sees the call. The wrapper writes only what it
/// changes, in `$admit`, and restates no signature or `unsafe` contract: each `unsafe fn` passes
/// its caller's contract on unchanged, which holds because every call that makes a handle or an
/// address is forwarded too, so the wrapper's handles and addresses are the inner runtime's.
///
/// Every method of [`GpuRuntime`] is listed here, those with a provided body included (a wrapper
/// must not fall back to the provided answer where its inner runtime has its own): a method
/// added to the trait is added here. Built with the wrapper that uses it, the fault decorator
/// (feature `faults`).
#[cfg(feature = "faults")]
macro_rules! forward_gpu_runtime {
    ($ty:ty, inner: $inner:ident, admit: $admit:ident, calls: $calls:ident) => {
        impl $crate::runtime::GpuRuntime for $ty {
            $crate::runtime::forward_gpu_runtime! { @plain $inner;
                info() -> $crate::runtime::RuntimeInfo;
                offers_contexts() -> bool;
                stream_memops(device: i32) -> bool;
                stream_writes(device: i32) -> bool;
                p2p() -> Option<::std::sync::Arc<dyn $crate::p2p::P2pDriver>>;
                pci_bus_id(device: i32) -> $crate::HipResult<Option<String>>;
            }
            $crate::runtime::forward_gpu_runtime! { @safe $inner, $admit, $calls;
                device_count() -> i32 = DeviceCount;
                current_device() -> i32 = CurrentDevice;
                set_device(device: i32) -> () = SetDevice;
                pointer_info(ptr: usize) -> $crate::runtime::PointerInfo = PointerInfo;
                device_alloc(len: usize) -> usize = DeviceAlloc;
                managed_alloc(len: usize) -> usize = ManagedAlloc;
                host_alloc(len: usize) -> ::std::ptr::NonNull<u8> = HostAlloc;
                host_alloc_mapped(len: usize) -> ::std::ptr::NonNull<u8> = HostAllocMapped;
                context_create(device: i32)
                    -> Option<$crate::runtime::ContextHandle> = ContextCreate;
                stream_create() -> $crate::runtime::StreamHandle = StreamCreate;
                stream_create_independent()
                    -> $crate::runtime::StreamHandle = StreamCreateIndependent;
                event_create() -> $crate::runtime::EventHandle = EventCreate;
            }
            $crate::runtime::forward_gpu_runtime! { @unsafe $inner, $admit, $calls;
                device_free(ptr: usize) -> () = DeviceFree;
                host_free(ptr: ::std::ptr::NonNull<u8>) -> () = HostFree;
                host_register(ptr: ::std::ptr::NonNull<u8>, len: usize, read_only: bool)
                    -> () = HostRegister;
                host_unregister(ptr: ::std::ptr::NonNull<u8>) -> () = HostUnregister;
                in_context(
                    ctx: $crate::runtime::ContextHandle,
                    f: &mut dyn FnMut() -> $crate::HipResult<()>
                ) -> () = InContext;
                context_destroy(ctx: $crate::runtime::ContextHandle) -> () = ContextDestroy;
                copy_to_device(dst: usize, src: &[u8]) -> () = CopyToDevice;
                copy_from_device(dst: &mut [u8], src: usize) -> () = CopyFromDevice;
                memset_device(dst: usize, value: u8, len: usize) -> () = MemsetDevice;
                copy_to_device_async(
                    dst: usize,
                    src: *const u8,
                    len: usize,
                    stream: $crate::runtime::StreamHandle
                ) -> () = CopyToDeviceAsync;
                copy_from_device_async(
                    dst: *mut u8,
                    src: usize,
                    len: usize,
                    stream: $crate::runtime::StreamHandle
                ) -> () = CopyFromDeviceAsync;
                stream_device(stream: $crate::runtime::StreamHandle) -> i32 = StreamDevice;
                stream_wait_value(stream: $crate::runtime::StreamHandle, addr: usize, value: u32)
                    -> () = StreamWaitValue;
                stream_write_value(stream: $crate::runtime::StreamHandle, addr: usize, value: u32)
                    -> () = StreamWriteValue;
                host_device_pointer(ptr: ::std::ptr::NonNull<u8>) -> usize = HostDevicePointer;
                memset_device_async(
                    dst: usize,
                    value: u8,
                    len: usize,
                    stream: $crate::runtime::StreamHandle
                ) -> () = MemsetDeviceAsync;
                stream_destroy(stream: $crate::runtime::StreamHandle) -> () = StreamDestroy;
                stream_synchronize(stream: $crate::runtime::StreamHandle)
                    -> () = StreamSynchronize;
                event_record(
                    event: $crate::runtime::EventHandle,
                    stream: $crate::runtime::StreamHandle
                ) -> () = EventRecord;
                event_synchronize(event: $crate::runtime::EventHandle) -> () = EventSynchronize;
                event_query(event: $crate::runtime::EventHandle) -> bool = EventQuery;
                event_destroy(event: $crate::runtime::EventHandle) -> () = EventDestroy;
                launch_host_func(stream: $crate::runtime::StreamHandle, f: $crate::runtime::HostFn)
                    -> () = LaunchHostFunc;
            }
        }
    };
    (@plain $inner:ident; $($name:ident($($arg:ident: $t:ty),*) -> $ret:ty;)*) => {
        $(
            fn $name(&self, $($arg: $t),*) -> $ret {
                self.$inner.$name($($arg),*)
            }
        )*
    };
    (@safe $inner:ident, $admit:ident, $calls:ident;
        $($name:ident($($arg:ident: $t:ty),*) -> $ret:ty = $call:ident;)*) => {
        $(
            fn $name(&self, $($arg: $t),*) -> $crate::HipResult<$ret> {
                self.$admit($calls::$call)?;
                self.$inner.$name($($arg),*)
            }
        )*
    };
    (@unsafe $inner:ident, $admit:ident, $calls:ident;
        $($name:ident($($arg:ident: $t:ty),*) -> $ret:ty = $call:ident;)*) => {
        $(
            unsafe fn $name(&self, $($arg: $t),*) -> $crate::HipResult<$ret> {
                self.$admit($calls::$call)?;
                // SAFETY: the caller's contract for this call, passed on unchanged: the wrapper's
                // handles and addresses are the inner runtime's (see the macro's documentation).
                unsafe { self.$inner.$name($($arg),*) }
            }
        )*
    };
}
#[cfg(feature = "faults")]
pub(crate) use forward_gpu_runtime;

/// Pinned host memory owned by Rust; freed on drop.
pub struct PinnedBuffer {
    runtime: Arc<dyn GpuRuntime>,
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the buffer is plain host memory owned exclusively by this value; the runtime is Sync.
unsafe impl Send for PinnedBuffer {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for PinnedBuffer {}

impl PinnedBuffer {
    /// Allocate `len` bytes of pinned memory and touch every page, so that the first IO through it
    /// does not pay for page faults.
    pub fn new(runtime: Arc<dyn GpuRuntime>, len: usize) -> HipResult<Self> {
        let ptr = runtime.host_alloc(len.max(1))?;
        let mut buf = PinnedBuffer { runtime, ptr, len };
        buf.as_mut_slice().fill(0);
        Ok(buf)
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The runtime that allocated the buffer.
    pub(crate) fn runtime(&self) -> &Arc<dyn GpuRuntime> {
        &self.runtime
    }

    /// Raw address, for asynchronous copies.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Raw mutable address, for asynchronous copies.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` points to `len` bytes owned by this buffer, initialised in `new`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`, and `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl fmt::Debug for PinnedBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PinnedBuffer")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for PinnedBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from `host_alloc` of this runtime and the buffer is going away.
        // A failure to free cannot be reported from drop; the memory is then leaked, not reused.
        let _ = unsafe { self.runtime.host_free(self.ptr) };
    }
}

/// A stream owned by Rust; destroyed on drop.
///
/// The safe way to use a stream: the handle it holds came from its runtime's
/// [`GpuRuntime::stream_create`] and is destroyed only by its drop, so every call it makes passes
/// a live handle to the runtime that made it.
pub struct OwnedStream {
    runtime: Arc<dyn GpuRuntime>,
    handle: StreamHandle,
}

/// How a stream is ordered with the legacy default stream (the null stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StreamOrder {
    /// Ordered with the null stream ([`GpuRuntime::stream_create`]): work queued on it waits for
    /// the application's earlier work there, and the null stream's later work waits for it.
    WithDefaultStream,
    /// Not ordered with the null stream ([`GpuRuntime::stream_create_independent`]).
    Independent,
}

impl OwnedStream {
    /// Create a stream on the current device, ordered with the null stream (see
    /// [`GpuRuntime::stream_create`]).
    pub fn new(runtime: Arc<dyn GpuRuntime>) -> HipResult<Self> {
        Self::with_order(runtime, StreamOrder::WithDefaultStream)
    }

    /// Create a stream on the current device that is not ordered with the null stream (see
    /// [`GpuRuntime::stream_create_independent`]).
    pub fn new_independent(runtime: Arc<dyn GpuRuntime>) -> HipResult<Self> {
        Self::with_order(runtime, StreamOrder::Independent)
    }

    /// Create a stream on the current device ordered as `order` says.
    pub fn with_order(runtime: Arc<dyn GpuRuntime>, order: StreamOrder) -> HipResult<Self> {
        let handle = match order {
            StreamOrder::WithDefaultStream => runtime.stream_create()?,
            StreamOrder::Independent => runtime.stream_create_independent()?,
        };
        Ok(OwnedStream { runtime, handle })
    }

    /// The runtime that made the stream.
    pub fn runtime(&self) -> &Arc<dyn GpuRuntime> {
        &self.runtime
    }

    /// The runtime handle, for the asynchronous copies
    /// ([`GpuRuntime::copy_to_device_async`]); it is live while `self` is.
    pub fn handle(&self) -> StreamHandle {
        self.handle
    }

    /// Wait for the queued work.
    pub fn synchronize(&self) -> HipResult<()> {
        // SAFETY: `handle` came from this runtime's `stream_create` and only `drop` destroys it.
        unsafe { self.runtime.stream_synchronize(self.handle) }
    }

    /// Run `f` on a runtime thread once the work queued before it is done (see
    /// [`GpuRuntime::launch_host_func`]).
    pub fn launch_host_func(&self, f: HostFn) -> HipResult<()> {
        // SAFETY: as in `synchronize`.
        unsafe { self.runtime.launch_host_func(self.handle, f) }
    }
}

impl fmt::Debug for OwnedStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("OwnedStream").field(&self.handle).finish()
    }
}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        // SAFETY: `handle` came from this runtime's `stream_create`, has not been destroyed, and
        // dies with `self`: no call uses it after this one. A failure cannot be reported from drop.
        let _ = unsafe { self.runtime.stream_destroy(self.handle) };
    }
}

/// A context of hipfile-rs's own on one device ([`GpuRuntime::context_create`]), destroyed on
/// drop: the safe way to hold one and run work in it.
pub struct OwnedContext {
    runtime: Arc<dyn GpuRuntime>,
    handle: ContextHandle,
    device: i32,
}

impl OwnedContext {
    /// A context of its own on `device`; `None` where the runtime has none to offer.
    pub fn new(runtime: &Arc<dyn GpuRuntime>, device: i32) -> HipResult<Option<Self>> {
        Ok(runtime.context_create(device)?.map(|handle| OwnedContext {
            runtime: Arc::clone(runtime),
            handle,
            device,
        }))
    }

    /// The device the context is on.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// The runtime that made the context.
    pub fn runtime(&self) -> &Arc<dyn GpuRuntime> {
        &self.runtime
    }

    /// Run `f` with the context current on the calling thread; what was current before is
    /// current again afterwards.
    pub fn run<R>(&self, f: impl FnOnce() -> HipResult<R>) -> HipResult<R> {
        let mut f = Some(f);
        let mut out = None;
        let mut call = || {
            let f = f.take().ok_or_else(|| {
                crate::HipError::call("OwnedContext::run", crate::HipErrorCode::INVALID_VALUE)
            })?;
            out = Some(f()?);
            Ok(())
        };
        // SAFETY: `handle` came from this runtime's `context_create` and only `drop` destroys
        // it, which `&self` prevents for the length of the call.
        unsafe { self.runtime.in_context(self.handle, &mut call) }?;
        out.ok_or_else(|| {
            crate::HipError::call("OwnedContext::run", crate::HipErrorCode::INVALID_VALUE)
        })
    }
}

impl fmt::Debug for OwnedContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedContext")
            .field("handle", &self.handle)
            .field("device", &self.device)
            .finish()
    }
}

impl Drop for OwnedContext {
    fn drop(&mut self) {
        // SAFETY: `handle` came from this runtime's `context_create` and dies with `self`; what
        // was pinned in it held the context (an `Arc`) until it was unpinned. A failure cannot
        // be reported from drop.
        let _ = unsafe { self.runtime.context_destroy(self.handle) };
    }
}

/// An event owned by Rust; destroyed on drop.
///
/// The safe way to use an event, as [`OwnedStream`] is for streams.
pub struct OwnedEvent {
    runtime: Arc<dyn GpuRuntime>,
    handle: EventHandle,
}

impl OwnedEvent {
    /// Create an event on the current device.
    pub fn new(runtime: Arc<dyn GpuRuntime>) -> HipResult<Self> {
        let handle = runtime.event_create()?;
        Ok(OwnedEvent { runtime, handle })
    }

    /// Create an event on `device`, leaving the caller's current device as it was. CUDA records
    /// an event only on a stream of the event's own context, so an event meant for a stream of
    /// another device must be made there.
    pub fn on_device(runtime: Arc<dyn GpuRuntime>, device: i32) -> HipResult<Self> {
        let _on_device = DeviceGuard::switch(&*runtime, device)?;
        let handle = runtime.event_create()?;
        Ok(OwnedEvent {
            runtime: Arc::clone(&runtime),
            handle,
        })
    }

    /// Record the event on `stream`, which must belong to the same runtime: a stream of another
    /// runtime is refused with `hipErrorInvalidHandle` before any runtime call.
    pub fn record(&self, stream: &OwnedStream) -> HipResult<()> {
        self.check_runtime(&stream.runtime, "OwnedEvent::record")?;
        // SAFETY: both handles came from this runtime's create calls (checked just above for the
        // stream) and are destroyed only when their owners drop, which `&self` and `stream`
        // prevent for the length of the call.
        unsafe { self.runtime.event_record(self.handle, stream.handle) }
    }

    /// `hipErrorInvalidHandle` unless `runtime` is this event's runtime.
    pub(crate) fn check_runtime(
        &self,
        runtime: &Arc<dyn GpuRuntime>,
        call: &'static str,
    ) -> HipResult<()> {
        if Arc::ptr_eq(&self.runtime, runtime) {
            Ok(())
        } else {
            Err(crate::HipError::call(
                call,
                crate::HipErrorCode::INVALID_HANDLE,
            ))
        }
    }

    /// The runtime handle; it is live while `self` is.
    pub fn handle(&self) -> EventHandle {
        self.handle
    }

    /// Wait for the event.
    pub fn synchronize(&self) -> HipResult<()> {
        // SAFETY: `handle` came from this runtime's `event_create` and only `drop` destroys it.
        unsafe { self.runtime.event_synchronize(self.handle) }
    }

    /// Whether the event has completed.
    pub fn query(&self) -> HipResult<bool> {
        // SAFETY: as in `synchronize`.
        unsafe { self.runtime.event_query(self.handle) }
    }
}

impl fmt::Debug for OwnedEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("OwnedEvent").field(&self.handle).finish()
    }
}

impl Drop for OwnedEvent {
    fn drop(&mut self) {
        // SAFETY: `handle` came from this runtime's `event_create`, has not been destroyed, and
        // dies with `self`. A failure cannot be reported from drop.
        let _ = unsafe { self.runtime.event_destroy(self.handle) };
    }
}

/// Device memory owned by Rust (tests, tools, examples); freed on drop.
pub struct DeviceBuffer {
    runtime: Arc<dyn GpuRuntime>,
    ptr: usize,
    len: usize,
}

impl DeviceBuffer {
    /// Allocate `len` bytes on the current device.
    pub fn new(runtime: Arc<dyn GpuRuntime>, len: usize) -> HipResult<Self> {
        let ptr = runtime.device_alloc(len)?;
        Ok(DeviceBuffer { runtime, ptr, len })
    }

    /// Allocate `len` bytes of managed memory.
    pub fn new_managed(runtime: Arc<dyn GpuRuntime>, len: usize) -> HipResult<Self> {
        let ptr = runtime.managed_alloc(len)?;
        Ok(DeviceBuffer { runtime, ptr, len })
    }

    /// The device address.
    pub fn ptr(&self) -> usize {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the buffer is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Copy `src` into the buffer at `offset`.
    pub fn write_at(&mut self, offset: usize, src: &[u8]) -> HipResult<()> {
        self.check(offset, src.len())?;
        // SAFETY: range checked against this allocation; `&mut self` makes the access exclusive.
        unsafe { self.runtime.copy_to_device(self.ptr + offset, src) }
    }

    /// Copy bytes at `offset` out of the buffer into `dst`.
    pub fn read_at(&self, offset: usize, dst: &mut [u8]) -> HipResult<()> {
        self.check(offset, dst.len())?;
        // SAFETY: range checked against this allocation.
        unsafe { self.runtime.copy_from_device(dst, self.ptr + offset) }
    }

    /// Fill the whole buffer with `value`.
    pub fn fill(&mut self, value: u8) -> HipResult<()> {
        // SAFETY: the whole allocation, exclusively borrowed.
        unsafe { self.runtime.memset_device(self.ptr, value, self.len) }
    }

    /// The whole buffer, copied to the host.
    pub fn to_vec(&self) -> HipResult<Vec<u8>> {
        let mut out = vec![0u8; self.len];
        self.read_at(0, &mut out)?;
        Ok(out)
    }

    fn check(&self, offset: usize, len: usize) -> HipResult<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(crate::HipError::call(
                "DeviceBuffer range",
                crate::HipErrorCode::INVALID_VALUE,
            )),
        }
    }
}

impl fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("ptr", &format_args!("{:#x}", self.ptr))
            .field("len", &self.len)
            .finish()
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        // SAFETY: `ptr` came from this runtime's allocator and no copy borrows it past `&self`.
        let _ = unsafe { self.runtime.device_free(self.ptr) };
    }
}

/// Keeps the calling thread's current device while work runs on another: made by
/// [`DeviceGuard::switch`] or [`DeviceGuard::keep`], it puts the device that was current back
/// when it drops (the caller's current device must never change under it). A failure to restore
/// cannot be reported from drop; short of a runtime teardown, making current a device that was
/// current a moment ago does not fail.
pub struct DeviceGuard<'a> {
    runtime: &'a dyn GpuRuntime,
    /// The device to put back, if any.
    previous: Option<i32>,
    /// Ask for the current device before restoring, and restore only if it moved.
    only_if_moved: bool,
}

impl<'a> DeviceGuard<'a> {
    /// Make `device` current until the guard drops, unless it already is (then nothing is
    /// changed, nor restored).
    pub fn switch(runtime: &'a dyn GpuRuntime, device: i32) -> HipResult<Self> {
        let current = runtime.current_device()?;
        if current == device {
            return Ok(DeviceGuard {
                runtime,
                previous: None,
                only_if_moved: false,
            });
        }
        runtime.set_device(device)?;
        Ok(DeviceGuard {
            runtime,
            previous: Some(current),
            only_if_moved: false,
        })
    }

    /// Put the current device back when the guard drops, if something in between moved it (on
    /// NVIDIA, making a driver context current moves the runtime's current device with it).
    pub fn keep(runtime: &'a dyn GpuRuntime) -> HipResult<Self> {
        Ok(DeviceGuard {
            runtime,
            previous: Some(runtime.current_device()?),
            only_if_moved: true,
        })
    }
}

impl fmt::Debug for DeviceGuard<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceGuard")
            .field("previous", &self.previous)
            .field("only_if_moved", &self.only_if_moved)
            .finish()
    }
}

impl Drop for DeviceGuard<'_> {
    fn drop(&mut self) {
        let Some(device) = self.previous else {
            return;
        };
        if self.only_if_moved && self.runtime.current_device().ok() == Some(device) {
            return;
        }
        // A failure cannot be reported from drop.
        let _ = self.runtime.set_device(device);
    }
}
