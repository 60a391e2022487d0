//! Where the simulator takes an address on trust: its implementations of the platform traits
//! ([`GpuRuntime`] for [`SimRuntime`], [`P2pDriver`] for [`SimP2p`]) and the few functions that
//! make, free and touch simulated memory through an address (allocation, asynchronous copies,
//! fills, the flag words of stream memory operations, guarded reads of read-only host memory).
//! Every `unsafe` of the simulator outside its C ABI helpers (`capi`) is in this file; the
//! modules it builds on (memory table, streams, events) are safe code.

use std::alloc::Layout;
use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, PoisonError};
use std::thread;

use super::memory::{AllocationTable, SIM_ALIGN};
use super::p2p::os_result;
use super::streams::StreamKind;
use super::{lock, SimP2p, SimRuntime, CURRENT_CONTEXT, CURRENT_DEVICE};
use crate::error::{HipError, HipErrorCode, HipResult};
use crate::p2p::P2pDriver;
use crate::runtime::{
    ContextHandle, EventHandle, GpuRuntime, HostFn, MemoryKind, Platform, PointerInfo, RuntimeInfo,
    StreamHandle,
};

impl SimRuntime {
    /// Allocate `len` zeroed, page-aligned bytes of `kind` on the current device and track them.
    fn alloc(&self, len: usize, kind: MemoryKind, call: &'static str) -> HipResult<usize> {
        let layout = Layout::from_size_align(len.max(1), SIM_ALIGN)
            .map_err(|_| HipError::call(call, HipErrorCode::OUT_OF_MEMORY))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(HipError::call(call, HipErrorCode::OUT_OF_MEMORY));
        }
        let base = ptr as usize;
        self.track(base, len, kind);
        Ok(base)
    }

    /// Free memory the simulator allocated as one of `kinds`; 0 is a no-op.
    fn free(&self, ptr: usize, kinds: &[MemoryKind], call: &'static str) -> HipResult<()> {
        if ptr == 0 {
            return Ok(());
        }
        // As hipFree and cudaFree do: no queued work may still use the memory.
        self.drain_all();
        let a = self.untrack(ptr, kinds, call)?;
        let layout = Layout::from_size_align(a.len.max(1), SIM_ALIGN)
            .map_err(|_| HipError::call(call, HipErrorCode::INVALID_VALUE))?;
        // SAFETY: `ptr` was returned by `alloc_zeroed` with this very layout and is now untracked.
        unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
        Ok(())
    }

    /// Queue a copy of `len` bytes from `src` to `dst` on stream number `stream`, after checking
    /// that `[device, device + len)` (the device side) lies inside one allocation.
    ///
    /// # Safety
    /// Both ranges stay valid and untouched by others until the copy completes.
    pub(super) unsafe fn copy_async(
        &self,
        dst: usize,
        src: usize,
        len: usize,
        device: usize,
        stream: usize,
    ) -> HipResult<()> {
        self.check_range(device, len, "hipMemcpyAsync")?;
        let guarded = self.read_only_host(src);
        self.enqueue(
            stream,
            Box::new(move || {
                if guarded {
                    return read_guarded(src, dst, len);
                }
                // SAFETY: the caller guarantees both ranges stay valid until the copy completes,
                // which is when this job has run.
                unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
                Ok(())
            }),
        )
    }

    /// Queue on stream number `stream` a wait until the `u32` at `addr` satisfies `ready`. The
    /// word must lie inside memory the simulator tracks (4-byte aligned); the wait ends with
    /// `hipErrorInvalidValue` (the stream's failure) if that memory goes away. Without stream
    /// memory operations ([`SimConfig::memops`]) it is `hipErrorNotSupported`.
    pub(super) fn queue_value_wait(
        &self,
        stream: usize,
        addr: usize,
        ready: impl Fn(u32) -> bool + Send + 'static,
    ) -> HipResult<()> {
        self.check_memop_word(addr, "hipStreamWaitValue32")?;
        let allocations = Arc::clone(&self.allocations);
        self.enqueue(
            stream,
            Box::new(move || Self::wait_for_word(&allocations, addr, ready)),
        )
    }

    /// What a stream memory operation `call` on the word at `addr` needs: stream memory
    /// operations ([`SimConfig::memops`]), else `hipErrorNotSupported`; a 4-byte aligned word
    /// inside memory the simulator tracks, else `hipErrorInvalidValue`.
    fn check_memop_word(&self, addr: usize, call: &'static str) -> HipResult<()> {
        if !self.config.memops {
            return Err(HipError::call(call, HipErrorCode::NOT_SUPPORTED));
        }
        if addr % 4 != 0 {
            return Err(HipError::call(call, HipErrorCode::INVALID_VALUE));
        }
        self.check_range(addr, 4, call)
    }

    /// Queue on stream number `stream` an atomic store of `value` into the `u32` at `addr`, made
    /// once the stream's earlier work has run (`hipStreamWriteValue32`).
    pub(super) fn queue_value_write(
        &self,
        stream: usize,
        addr: usize,
        value: u32,
    ) -> HipResult<()> {
        const CALL: &str = "hipStreamWriteValue32";
        self.check_memop_word(addr, CALL)?;
        let allocations = Arc::clone(&self.allocations);
        self.enqueue(
            stream,
            Box::new(move || {
                Self::with_range(&allocations, addr, 4, CALL, || {
                    // SAFETY: the word is 4-byte aligned (checked when queued) and lies inside a
                    // live allocation (held by `with_range`); the host accesses such words only
                    // atomically (the caller's contract).
                    unsafe { AtomicU32::from_ptr(addr as *mut u32) }.store(value, Ordering::Release)
                })
            }),
        )
    }

    /// Poll the `u32` at `addr` until `ready` says so: yield a few times, then sleep in steps of
    /// at most 100 µs. No lock is held between polls (another thread stores the value).
    fn wait_for_word(
        allocations: &AllocationTable,
        addr: usize,
        ready: impl Fn(u32) -> bool,
    ) -> HipResult<()> {
        let mut polls = 0u32;
        loop {
            let value = {
                let allocs = allocations.read().unwrap_or_else(PoisonError::into_inner);
                match Self::find(&allocs, addr) {
                    Some((base, a)) if addr + 4 <= base + a.len => {
                        // SAFETY: the word is 4-byte aligned (checked when queued) and lies inside
                        // a live allocation: it is in the table, and memory is deallocated only
                        // after its entry is removed, under the write lock that this read lock
                        // excludes. Every Rust writer of a flag word stores atomically
                        // (`HostFlags`); the word is only read here.
                        unsafe { AtomicU32::from_ptr(addr as *mut u32) }.load(Ordering::Acquire)
                    }
                    _ => {
                        return Err(HipError::call(
                            "hipStreamWaitValue32",
                            HipErrorCode::INVALID_VALUE,
                        ))
                    }
                }
            };
            if ready(value) {
                return Ok(());
            }
            polls = polls.saturating_add(1);
            if polls < 64 {
                thread::yield_now();
            } else {
                let micros = u64::from(polls - 63).min(100);
                thread::sleep(std::time::Duration::from_micros(micros));
            }
        }
    }
}

impl Drop for SimRuntime {
    fn drop(&mut self) {
        let allocs = std::mem::take(
            &mut *self
                .allocations
                .write()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for (base, a) in allocs {
            if !a.owned {
                continue;
            }
            if let Ok(layout) = Layout::from_size_align(a.len.max(1), SIM_ALIGN) {
                // SAFETY: every owned allocation was made by `alloc_zeroed` with this layout, and
                // the runtime that handed it out is going away.
                unsafe { std::alloc::dealloc(base as *mut u8, layout) };
            }
        }
    }
}

impl GpuRuntime for SimRuntime {
    fn info(&self) -> RuntimeInfo {
        RuntimeInfo {
            platform: Platform::Sim,
            runtime_version: self.config.abi.runtime_version(),
            library: "built-in".to_string(),
        }
    }

    fn device_count(&self) -> HipResult<i32> {
        Ok(self.config.devices)
    }

    fn current_device(&self) -> HipResult<i32> {
        Ok(self.current())
    }

    fn set_device(&self, device: i32) -> HipResult<()> {
        if device < 0 || device >= self.config.devices {
            return Err(HipError::call("hipSetDevice", HipErrorCode::INVALID_DEVICE));
        }
        CURRENT_DEVICE.with(|c| c.set(device));
        Ok(())
    }

    fn pointer_info(&self, ptr: usize) -> HipResult<PointerInfo> {
        let allocs = self
            .allocations
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        Ok(match Self::find(&allocs, ptr) {
            Some((base, a)) => PointerInfo {
                kind: a.kind,
                device: a.device,
                base,
                len: a.len,
            },
            None => PointerInfo {
                kind: MemoryKind::Unregistered,
                device: -1,
                base: 0,
                len: 0,
            },
        })
    }

    fn device_alloc(&self, len: usize) -> HipResult<usize> {
        self.alloc(len, MemoryKind::Device, "hipMalloc")
    }

    fn managed_alloc(&self, len: usize) -> HipResult<usize> {
        self.alloc(len, MemoryKind::Managed, "hipMallocManaged")
    }

    unsafe fn device_free(&self, ptr: usize) -> HipResult<()> {
        self.free(ptr, &[MemoryKind::Device, MemoryKind::Managed], "hipFree")
    }

    fn host_alloc(&self, len: usize) -> HipResult<NonNull<u8>> {
        let ptr = self.alloc(len, MemoryKind::Host, "hipHostMalloc")?;
        NonNull::new(ptr as *mut u8)
            .ok_or_else(|| HipError::call("hipHostMalloc", HipErrorCode::OUT_OF_MEMORY))
    }

    unsafe fn host_free(&self, ptr: NonNull<u8>) -> HipResult<()> {
        self.free(ptr.as_ptr() as usize, &[MemoryKind::Host], "hipHostFree")
    }

    unsafe fn host_register(&self, ptr: NonNull<u8>, len: usize, read_only: bool) -> HipResult<()> {
        self.register_host(ptr.as_ptr() as usize, len, read_only)
    }

    unsafe fn host_unregister(&self, ptr: NonNull<u8>) -> HipResult<()> {
        SimRuntime::host_unregister(self, ptr.as_ptr() as usize)
    }

    fn offers_contexts(&self) -> bool {
        self.config.own_contexts
    }

    fn context_create(&self, device: i32) -> HipResult<Option<ContextHandle>> {
        if !self.config.own_contexts {
            return Ok(None);
        }
        if device < 0 || device >= self.config.devices {
            return Err(HipError::call("hipCtxCreate", HipErrorCode::INVALID_DEVICE));
        }
        let mut contexts = lock(&self.contexts);
        let id = self.new_handle(&contexts, "hipCtxCreate")?;
        contexts.insert(id, device);
        // SAFETY: made just above; it lives until `context_destroy`.
        Ok(Some(unsafe { ContextHandle::from_raw(id) }))
    }

    unsafe fn in_context(
        &self,
        ctx: ContextHandle,
        f: &mut dyn FnMut() -> HipResult<()>,
    ) -> HipResult<()> {
        let Some(device) = lock(&self.contexts).get(&ctx.as_raw()).copied() else {
            return Err(HipError::call(
                "hipCtxPushCurrent",
                HipErrorCode::INVALID_CONTEXT,
            ));
        };
        let before = (CURRENT_CONTEXT.with(Cell::get), self.current());
        CURRENT_CONTEXT.with(|c| c.set(ctx.as_raw()));
        CURRENT_DEVICE.with(|c| c.set(device));
        let out = f();
        CURRENT_CONTEXT.with(|c| c.set(before.0));
        CURRENT_DEVICE.with(|c| c.set(before.1));
        out
    }

    unsafe fn context_destroy(&self, ctx: ContextHandle) -> HipResult<()> {
        let id = ctx.as_raw();
        let in_use = self
            .allocations
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .any(|a| a.context == id);
        if in_use {
            // What was pinned in a context must be unpinned before it goes.
            return Err(HipError::call(
                "hipCtxDestroy",
                HipErrorCode::INVALID_CONTEXT,
            ));
        }
        match lock(&self.contexts).remove(&id) {
            Some(_) => Ok(()),
            None => Err(HipError::call(
                "hipCtxDestroy",
                HipErrorCode::INVALID_CONTEXT,
            )),
        }
    }

    unsafe fn copy_to_device(&self, dst: usize, src: &[u8]) -> HipResult<()> {
        let (from, len) = (src.as_ptr() as usize, src.len());
        self.device_work(dst, len, "hipMemcpy", move || {
            // SAFETY: `device_work` runs this before returning (or never), so `src` outlives it,
            // and while the device side lies inside a live allocation; the caller guarantees
            // exclusive access to it. `src` is a valid slice that cannot overlap device memory
            // the caller owns exclusively.
            unsafe { std::ptr::copy(from as *const u8, dst as *mut u8, len) }
        })
    }

    unsafe fn copy_from_device(&self, dst: &mut [u8], src: usize) -> HipResult<()> {
        let (to, len) = (dst.as_mut_ptr() as usize, dst.len());
        self.device_work(src, len, "hipMemcpy", move || {
            // SAFETY: as in `copy_to_device`: `dst` is a valid, exclusive slice that outlives
            // the job.
            unsafe { std::ptr::copy(src as *const u8, to as *mut u8, len) }
        })
    }

    unsafe fn memset_device(&self, dst: usize, value: u8, len: usize) -> HipResult<()> {
        self.device_work(dst, len, "hipMemset", move || {
            // SAFETY: the range lies inside a live allocation while this runs (`device_work`);
            // the caller guarantees exclusive access.
            unsafe { std::ptr::write_bytes(dst as *mut u8, value, len) }
        })
    }

    unsafe fn copy_to_device_async(
        &self,
        dst: usize,
        src: *const u8,
        len: usize,
        stream: StreamHandle,
    ) -> HipResult<()> {
        // SAFETY: the caller guarantees both ranges stay valid until the copy completes.
        unsafe { self.copy_async(dst, src as usize, len, dst, stream.as_raw()) }
    }

    unsafe fn copy_from_device_async(
        &self,
        dst: *mut u8,
        src: usize,
        len: usize,
        stream: StreamHandle,
    ) -> HipResult<()> {
        // SAFETY: the caller guarantees both ranges stay valid until the copy completes.
        unsafe { self.copy_async(dst as usize, src, len, src, stream.as_raw()) }
    }

    fn stream_create(&self) -> HipResult<StreamHandle> {
        let id = self.create_stream(StreamKind::Blocking)?;
        // SAFETY: the stream was just made and is used with this runtime only.
        Ok(unsafe { StreamHandle::from_raw(id) })
    }

    fn stream_create_independent(&self) -> HipResult<StreamHandle> {
        let id = self.create_stream(StreamKind::Independent)?;
        // SAFETY: the stream was just made and is used with this runtime only.
        Ok(unsafe { StreamHandle::from_raw(id) })
    }

    fn stream_memops(&self, device: i32) -> bool {
        self.config.memops && device >= 0 && device < self.config.devices
    }

    fn stream_writes(&self, device: i32) -> bool {
        self.stream_memops(device)
    }

    fn host_alloc_mapped(&self, len: usize) -> HipResult<NonNull<u8>> {
        // Every pinned allocation of the simulator is reachable from its devices.
        self.host_alloc(len)
    }

    unsafe fn host_device_pointer(&self, ptr: NonNull<u8>) -> HipResult<usize> {
        let addr = ptr.as_ptr() as usize;
        match self.pointer_info(addr)?.kind {
            // The simulated devices see host memory at its host address.
            MemoryKind::Host => Ok(addr),
            _ => Err(HipError::call(
                "hipHostGetDevicePointer",
                HipErrorCode::INVALID_VALUE,
            )),
        }
    }

    // The simulator looks every handle up in its tables, so the handle calls below are sound for
    // any handle: a destroyed or foreign one is `hipErrorInvalidHandle`.

    unsafe fn stream_destroy(&self, stream: StreamHandle) -> HipResult<()> {
        self.destroy_stream(stream.as_raw())
    }

    unsafe fn stream_synchronize(&self, stream: StreamHandle) -> HipResult<()> {
        self.synchronize_stream(stream.as_raw())
    }

    unsafe fn stream_device(&self, stream: StreamHandle) -> HipResult<i32> {
        self.device_of_stream(stream.as_raw())
    }

    unsafe fn stream_wait_value(
        &self,
        stream: StreamHandle,
        addr: usize,
        value: u32,
    ) -> HipResult<()> {
        self.queue_value_wait(stream.as_raw(), addr, move |v| v >= value)
    }

    unsafe fn stream_write_value(
        &self,
        stream: StreamHandle,
        addr: usize,
        value: u32,
    ) -> HipResult<()> {
        self.queue_value_write(stream.as_raw(), addr, value)
    }

    unsafe fn memset_device_async(
        &self,
        dst: usize,
        value: u8,
        len: usize,
        stream: StreamHandle,
    ) -> HipResult<()> {
        self.check_range(dst, len, "hipMemsetAsync")?;
        let allocations = Arc::clone(&self.allocations);
        self.enqueue(
            stream.as_raw(),
            Box::new(move || {
                Self::with_range(&allocations, dst, len, "hipMemsetAsync", || {
                    // SAFETY: the range lies inside a live allocation (held by `with_range`) and
                    // the caller guarantees exclusive access until the fill completes.
                    unsafe { std::ptr::write_bytes(dst as *mut u8, value, len) }
                })
            }),
        )
    }

    fn event_create(&self) -> HipResult<EventHandle> {
        let id = self.create_event()?;
        // SAFETY: the event was just made and is used with this runtime only.
        Ok(unsafe { EventHandle::from_raw(id) })
    }

    unsafe fn event_record(&self, event: EventHandle, stream: StreamHandle) -> HipResult<()> {
        self.record_event(event.as_raw(), stream.as_raw())
    }

    unsafe fn event_synchronize(&self, event: EventHandle) -> HipResult<()> {
        self.synchronize_event(event.as_raw())
    }

    unsafe fn event_query(&self, event: EventHandle) -> HipResult<bool> {
        self.query_event(event.as_raw())
    }

    unsafe fn event_destroy(&self, event: EventHandle) -> HipResult<()> {
        self.destroy_event(event.as_raw())
    }

    unsafe fn launch_host_func(&self, stream: StreamHandle, f: HostFn) -> HipResult<()> {
        self.queue_host_fn(stream.as_raw(), f)
    }

    fn p2p(&self) -> Option<Arc<dyn P2pDriver>> {
        let driver: Arc<dyn P2pDriver> = self.p2p.clone();
        self.config.p2p.then_some(driver)
    }
}

impl P2pDriver for SimP2p {
    fn name(&self) -> &'static str {
        "sim"
    }

    unsafe fn read(
        &self,
        fd: BorrowedFd<'_>,
        device_ptr: usize,
        size: usize,
        file_offset: u64,
    ) -> io::Result<usize> {
        let (size, offset) = self.admit(device_ptr, size, file_offset)?;
        let buf = device_ptr as *mut libc::c_void;
        // SAFETY: the range lies inside a live device allocation (`admit`), which is host memory
        // in the sim, and the caller guarantees nothing else accesses it meanwhile.
        os_result(unsafe { libc::pread(fd.as_raw_fd(), buf, size, offset) })
    }

    unsafe fn write(
        &self,
        fd: BorrowedFd<'_>,
        device_ptr: usize,
        size: usize,
        file_offset: u64,
    ) -> io::Result<usize> {
        let (size, offset) = self.admit(device_ptr, size, file_offset)?;
        let buf = device_ptr as *const libc::c_void;
        // SAFETY: the range lies inside a live device allocation (`admit`); it is only read.
        os_result(unsafe { libc::pwrite(fd.as_raw_fd(), buf, size, offset) })
    }
}

/// Copy `len` bytes at `src` of this process to `dst` with `process_vm_readv`: a page that is
/// gone (a file mapping past the file's end) fails the copy with `hipErrorInvalidValue` instead
/// of raising `SIGBUS` in the stream's thread.
fn read_guarded(src: usize, dst: usize, len: usize) -> HipResult<()> {
    let mut done = 0;
    while done < len {
        let local = libc::iovec {
            iov_base: (dst + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        let remote = libc::iovec {
            iov_base: (src + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: `local` is device memory of the simulator (host memory it owns) that the
        // caller of the copy vouched for; `remote` is only read, by the kernel, which checks it.
        let n = unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) };
        if n <= 0 {
            return Err(HipError::Call {
                call: "hipMemcpyAsync",
                code: HipErrorCode::INVALID_VALUE,
                detail: Some(format!(
                    "reading registered host memory at {:#x}: {}",
                    src + done,
                    std::io::Error::last_os_error()
                )),
            });
        }
        done += n as usize;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::runtime::{DeviceBuffer, DeviceGuard, OwnedEvent, OwnedStream, PinnedBuffer};
    use crate::sim::{SimConfig, HANDLE_ARENA_WORDS};

    fn rt() -> Arc<dyn GpuRuntime> {
        Arc::new(SimRuntime::default())
    }

    #[test]
    fn an_event_past_the_last_handle_is_out_of_memory_not_a_hang() {
        let sim = SimRuntime::default();
        let made: Vec<EventHandle> = (0..HANDLE_ARENA_WORDS)
            .map(|_| sim.event_create().unwrap())
            .collect();
        let err = sim.event_create().unwrap_err();
        assert_eq!(err.code(), HipErrorCode::OUT_OF_MEMORY, "{err}");
        // SAFETY: made above by this runtime and destroyed once.
        unsafe { sim.event_destroy(made[7]) }.unwrap();
        assert!(
            sim.event_create().is_ok(),
            "a handle given back is taken again"
        );
    }

    #[test]
    fn pointer_queries_answer_like_a_gpu() {
        let rt = rt();
        let buf = DeviceBuffer::new(Arc::clone(&rt), 10_000).unwrap();
        let info = rt.pointer_info(buf.ptr() + 123).unwrap();
        assert_eq!(info.kind, MemoryKind::Device);
        assert_eq!(info.base, buf.ptr());
        assert_eq!(info.len, 10_000);
        assert_eq!(info.remaining_from(buf.ptr() + 123), Some(10_000 - 123));
        let host = [0u8; 16];
        assert_eq!(
            rt.pointer_info(host.as_ptr() as usize).unwrap().kind,
            MemoryKind::Unregistered
        );
        let pinned = PinnedBuffer::new(Arc::clone(&rt), 64).unwrap();
        assert_eq!(
            rt.pointer_info(pinned.as_ptr() as usize).unwrap().kind,
            MemoryKind::Host
        );
        let managed = DeviceBuffer::new_managed(Arc::clone(&rt), 64).unwrap();
        assert_eq!(
            rt.pointer_info(managed.ptr()).unwrap().kind,
            MemoryKind::Managed
        );
    }

    #[test]
    fn copies_outside_an_allocation_fail_instead_of_corrupting() {
        let rt = rt();
        let mut buf = DeviceBuffer::new(Arc::clone(&rt), 4096).unwrap();
        buf.write_at(0, &[7u8; 4096]).unwrap();
        // SAFETY: the sim checks the range and refuses it; nothing is written.
        let r = unsafe { rt.copy_to_device(buf.ptr() + 4000, &[1u8; 200]) };
        assert!(r.is_err());
        assert_eq!(buf.to_vec().unwrap(), vec![7u8; 4096]);
    }

    #[test]
    fn streams_run_in_order_with_events_and_host_functions() {
        let rt = rt();
        let dev = DeviceBuffer::new(Arc::clone(&rt), 1 << 20).unwrap();
        let mut src = PinnedBuffer::new(Arc::clone(&rt), 1 << 20).unwrap();
        for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        let stream = OwnedStream::new(Arc::clone(&rt)).unwrap();
        let event = OwnedEvent::new(Arc::clone(&rt)).unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        for i in 0..4usize {
            // SAFETY: both buffers outlive the stream synchronisation below; `stream` is a live
            // stream of `rt`.
            unsafe {
                rt.copy_to_device_async(
                    dev.ptr() + i * (1 << 18),
                    src.as_ptr().add(i * (1 << 18)),
                    1 << 18,
                    stream.handle(),
                )
                .unwrap();
            }
            let order = Arc::clone(&order);
            stream
                .launch_host_func(Box::new(move || lock(&order).push(i)))
                .unwrap();
        }
        event.record(&stream).unwrap();
        event.synchronize().unwrap();
        assert!(event.query().unwrap());
        assert_eq!(*lock(&order), vec![0, 1, 2, 3]);
        assert_eq!(dev.to_vec().unwrap(), src.as_slice());
        stream.synchronize().unwrap();
    }

    #[test]
    fn failed_async_work_is_reported_by_synchronize() {
        let rt = rt();
        let stream = OwnedStream::new(Arc::clone(&rt)).unwrap();
        let dev = DeviceBuffer::new(Arc::clone(&rt), 64).unwrap();
        let host = [0u8; 64];
        // SAFETY: the range is invalid and the sim rejects it before queuing anything.
        let r =
            unsafe { rt.copy_to_device_async(dev.ptr() + 32, host.as_ptr(), 64, stream.handle()) };
        assert!(r.is_err());
        stream.synchronize().unwrap();
    }

    #[test]
    fn devices_are_selected_per_thread_and_allocations_remember_their_owner() {
        let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::new(SimConfig {
            devices: 2,
            ..SimConfig::default()
        }));
        assert!(rt.set_device(2).is_err());
        rt.set_device(1).unwrap();
        let b1 = DeviceBuffer::new(Arc::clone(&rt), 64).unwrap();
        let rt2 = Arc::clone(&rt);
        let other = thread::spawn(move || rt2.current_device().unwrap())
            .join()
            .unwrap();
        assert_eq!(other, 0);
        assert_eq!(rt.pointer_info(b1.ptr()).unwrap().device, 1);
        rt.set_device(0).unwrap();
    }

    #[test]
    fn the_p2p_driver_moves_bytes_between_a_file_and_device_memory_with_scripted_faults() {
        use std::os::fd::AsFd;
        let sim = SimRuntime::default();
        let p2p = sim.p2p().unwrap();
        let file = tempfile::tempfile().unwrap();
        let src = sim.device_alloc(8192).unwrap();
        // SAFETY: `src` is an 8192-byte device allocation of this runtime.
        unsafe { sim.memset_device(src, 0x5a, 8192).unwrap() };
        // SAFETY: the ranges are inside device allocations of this runtime, used by nobody else.
        unsafe {
            assert_eq!(p2p.write(file.as_fd(), src, 8192, 0).unwrap(), 8192);
            sim.p2p_faults().fail_call(2, libc::ENODEV);
            sim.p2p_faults().short_call(1, 4096);
            let dst = sim.device_alloc(8192).unwrap();
            assert_eq!(p2p.read(file.as_fd(), dst, 8192, 0).unwrap(), 4096);
            let e = p2p.read(file.as_fd(), dst, 8192, 0).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ENODEV));
            assert_eq!(p2p.read(file.as_fd(), dst, 8192, 0).unwrap(), 8192);
            assert_eq!(p2p.read(file.as_fd(), dst, 8192, 8192).unwrap(), 0, "EOF");
            let mut back = vec![0u8; 8192];
            sim.copy_from_device(&mut back, dst).unwrap();
            assert_eq!(back, vec![0x5a; 8192]);
            let host = [0u8; 64];
            let e = p2p
                .read(file.as_fd(), host.as_ptr() as usize, 64, 0)
                .unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EFAULT));
            let e = p2p.read(file.as_fd(), dst + 4096, 8192, 0).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EFAULT));
        }
        assert_eq!(sim.p2p_faults().calls(), 5);
        let off = SimRuntime::new(SimConfig {
            p2p: false,
            ..SimConfig::default()
        });
        assert!(off.p2p().is_none());
    }

    #[test]
    fn destroyed_and_made_up_handles_are_invalid_handle() {
        let rt = rt();
        let invalid = |r: HipResult<()>| matches!(r, Err(HipError::Call { code, .. }) if code == HipErrorCode::INVALID_HANDLE);
        let s = rt.stream_create().unwrap();
        let e = rt.event_create().unwrap();
        // SAFETY: the simulator looks every handle up in its tables, so a destroyed or made-up
        // handle is refused with an error code; that refusal is what this test checks.
        unsafe {
            rt.stream_destroy(s).unwrap();
            rt.event_destroy(e).unwrap();
            assert!(invalid(rt.stream_synchronize(s)));
            assert!(invalid(rt.stream_destroy(s)));
            assert!(invalid(rt.launch_host_func(s, Box::new(|| ()))));
            assert!(invalid(rt.event_synchronize(e)));
            assert!(invalid(rt.event_query(e).map(drop)));
            assert!(invalid(rt.event_destroy(e)));
            let made_up = StreamHandle::from_raw(0xdead);
            assert!(invalid(rt.stream_synchronize(made_up)));
        }
    }

    #[test]
    fn an_event_is_recorded_only_on_a_stream_of_its_own_runtime() {
        let (a, b) = (rt(), rt());
        let event = OwnedEvent::new(Arc::clone(&a)).unwrap();
        let foreign = OwnedStream::new(Arc::clone(&b)).unwrap();
        match event.record(&foreign) {
            Err(HipError::Call { code, .. }) => assert_eq!(code, HipErrorCode::INVALID_HANDLE),
            other => panic!("recording on another runtime's stream gave {other:?}"),
        }
        let own = OwnedStream::new(Arc::clone(&a)).unwrap();
        event.record(&own).unwrap();
        event.synchronize().unwrap();
    }

    #[test]
    fn a_device_guard_puts_the_callers_device_back() {
        let rt = SimRuntime::new(SimConfig {
            devices: 2,
            ..SimConfig::default()
        });
        rt.set_device(0).unwrap();
        {
            let _on_other = DeviceGuard::switch(&rt, 1).unwrap();
            assert_eq!(rt.current_device().unwrap(), 1);
        }
        assert_eq!(rt.current_device().unwrap(), 0);
        {
            let _kept = DeviceGuard::keep(&rt).unwrap();
            rt.set_device(1).unwrap();
        }
        assert_eq!(
            rt.current_device().unwrap(),
            0,
            "a moved device is put back"
        );
        assert!(DeviceGuard::switch(&rt, 2).is_err());
        assert_eq!(rt.current_device().unwrap(), 0);
    }

    use crate::HostFlags;
    use std::time::Duration;

    /// Long enough for a worker that is free to run queued work to have run it.
    const SETTLE: Duration = Duration::from_millis(60);

    /// A stream of `rt` (0: the null stream) held until word `slot` of `flags` is 1.
    fn hold(rt: &Arc<dyn GpuRuntime>, stream: usize, flags: &HostFlags, slot: usize) {
        // SAFETY: `stream` is 0 or a live stream of `rt`; the word is host-mapped memory of `rt`
        // that the test stores before dropping the flags.
        unsafe {
            rt.stream_wait_value(
                StreamHandle::from_raw(stream),
                flags.device_addr(slot).unwrap(),
                1,
            )
            .unwrap();
        }
    }

    /// Queue on `stream` a copy of `byte` x 64 into `dev` (from a pinned source that lives until
    /// the runtime drains) and a record of `event`.
    fn queue_copy(
        rt: &Arc<dyn GpuRuntime>,
        stream: usize,
        dev: &DeviceBuffer,
        src: &PinnedBuffer,
        event: &OwnedEvent,
    ) {
        // SAFETY: `src` and `dev` outlive every synchronisation of the test; `stream` is 0 or a
        // live stream of `rt`; `event` is a live event of `rt`.
        unsafe {
            let s = StreamHandle::from_raw(stream);
            rt.copy_to_device_async(dev.ptr(), src.as_ptr(), 64, s)
                .unwrap();
            rt.event_record(event.handle(), s).unwrap();
        }
    }

    fn pinned_bytes(rt: &Arc<dyn GpuRuntime>, byte: u8) -> PinnedBuffer {
        let mut p = PinnedBuffer::new(Arc::clone(rt), 64).unwrap();
        p.as_mut_slice().fill(byte);
        p
    }

    #[test]
    fn the_null_stream_is_asynchronous_and_ordered() {
        let rt = rt();
        let flags = HostFlags::new(Arc::clone(&rt), 1).unwrap();
        let dev = DeviceBuffer::new(Arc::clone(&rt), 64).unwrap();
        let src = pinned_bytes(&rt, 7);
        let done = OwnedEvent::new(Arc::clone(&rt)).unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        hold(&rt, 0, &flags, 0);
        queue_copy(&rt, 0, &dev, &src, &done);
        let seen = Arc::clone(&order);
        // SAFETY: the null stream is live for every runtime.
        unsafe {
            rt.launch_host_func(
                StreamHandle::from_raw(0),
                Box::new(move || lock(&seen).push(1)),
            )
            .unwrap();
        }
        thread::sleep(SETTLE);
        assert!(
            !done.query().unwrap(),
            "work on the null stream waits behind the hold"
        );
        assert!(lock(&order).is_empty());
        flags.store(0, 1).unwrap();
        // SAFETY: the null stream is live for every runtime.
        unsafe { rt.stream_synchronize(StreamHandle::from_raw(0)).unwrap() };
        assert!(done.query().unwrap());
        assert_eq!(*lock(&order), vec![1]);
        assert_eq!(dev.to_vec().unwrap(), vec![7u8; 64]);
    }

    #[test]
    fn blocking_streams_wait_for_earlier_null_work_and_independent_ones_do_not() {
        let rt = rt();
        let flags = HostFlags::new(Arc::clone(&rt), 1).unwrap();
        let blocking = OwnedStream::new(Arc::clone(&rt)).unwrap();
        let independent = OwnedStream::new_independent(Arc::clone(&rt)).unwrap();
        let (dev_b, dev_i) = (
            DeviceBuffer::new(Arc::clone(&rt), 64).unwrap(),
            DeviceBuffer::new(Arc::clone(&rt), 64).unwrap(),
        );
        let src = pinned_bytes(&rt, 3);
        let (done_b, done_i) = (
            OwnedEvent::new(Arc::clone(&rt)).unwrap(),
            OwnedEvent::new(Arc::clone(&rt)).unwrap(),
        );
        hold(&rt, 0, &flags, 0);
        queue_copy(&rt, blocking.handle().as_raw(), &dev_b, &src, &done_b);
        queue_copy(&rt, independent.handle().as_raw(), &dev_i, &src, &done_i);
        independent.synchronize().unwrap();
        assert!(
            done_i.query().unwrap(),
            "an independent stream runs past a held null stream"
        );
        thread::sleep(SETTLE);
        assert!(
            !done_b.query().unwrap(),
            "a blocking stream waits for earlier null work"
        );
        flags.store(0, 1).unwrap();
        blocking.synchronize().unwrap();
        assert_eq!(dev_b.to_vec().unwrap(), vec![3u8; 64]);
        assert_eq!(dev_i.to_vec().unwrap(), vec![3u8; 64]);
    }

    #[test]
    fn the_null_stream_and_synchronous_copies_wait_for_earlier_blocking_work() {
        let rt = rt();
        let flags = HostFlags::new(Arc::clone(&rt), 1).unwrap();
        let blocking = OwnedStream::new(Arc::clone(&rt)).unwrap();
        let independent = OwnedStream::new_independent(Arc::clone(&rt)).unwrap();
        let (dev_n, dev_i) = (
            DeviceBuffer::new(Arc::clone(&rt), 64).unwrap(),
            DeviceBuffer::new(Arc::clone(&rt), 64).unwrap(),
        );
        let src = pinned_bytes(&rt, 9);
        let done_n = OwnedEvent::new(Arc::clone(&rt)).unwrap();
        hold(&rt, blocking.handle().as_raw(), &flags, 0);
        queue_copy(&rt, 0, &dev_n, &src, &done_n);
        // A held independent stream does not hold the null stream.
        let other = HostFlags::new(Arc::clone(&rt), 1).unwrap();
        hold(&rt, independent.handle().as_raw(), &other, 0);
        let sync_copy = {
            let (rt, ptr) = (Arc::clone(&rt), dev_i.ptr());
            thread::spawn(move || {
                // SAFETY: `dev_i` outlives the join below; nothing else writes it meanwhile.
                unsafe { rt.copy_to_device(ptr, &[5u8; 64]) }
            })
        };
        thread::sleep(SETTLE);
        assert!(
            !done_n.query().unwrap(),
            "null-stream work waits for earlier blocking work"
        );
        assert!(
            !sync_copy.is_finished(),
            "a synchronous copy runs on the null stream"
        );
        flags.store(0, 1).unwrap();
        sync_copy.join().unwrap().unwrap();
        done_n.synchronize().unwrap();
        assert_eq!(dev_n.to_vec().unwrap(), vec![9u8; 64]);
        assert_eq!(dev_i.to_vec().unwrap(), vec![5u8; 64]);
        other.store(0, 1).unwrap();
        independent.synchronize().unwrap();
    }

    #[test]
    fn special_handles_name_the_streams_of_the_calling_thread_and_its_device() {
        let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::new(SimConfig {
            devices: 2,
            ..SimConfig::default()
        }));
        rt.set_device(1).unwrap();
        // SAFETY: the special handles are live for every runtime.
        unsafe {
            assert_eq!(rt.stream_device(StreamHandle::from_raw(1)).unwrap(), 1);
            assert_eq!(rt.stream_device(StreamHandle::from_raw(2)).unwrap(), 1);
            assert!(rt.stream_destroy(StreamHandle::from_raw(2)).is_err());
        }
        let flags = HostFlags::new(Arc::clone(&rt), 1).unwrap();
        let bufs: Vec<DeviceBuffer> = (0..3)
            .map(|_| DeviceBuffer::new(Arc::clone(&rt), 64).unwrap())
            .collect();
        let src = pinned_bytes(&rt, 4);
        let done: Vec<OwnedEvent> = (0..3)
            .map(|_| OwnedEvent::new(Arc::clone(&rt)).unwrap())
            .collect();
        hold(&rt, 2, &flags, 0);
        queue_copy(&rt, 2, &bufs[0], &src, &done[0]);
        thread::scope(|scope| {
            scope.spawn(|| {
                rt.set_device(1).unwrap();
                let other = OwnedStream::new_independent(Arc::clone(&rt)).unwrap();
                queue_copy(&rt, other.handle().as_raw(), &bufs[2], &src, &done[2]);
                other.synchronize().unwrap();
                let mine = OwnedEvent::new(Arc::clone(&rt)).unwrap();
                // SAFETY: the per-thread stream and the event are live for the runtime.
                unsafe {
                    rt.event_record(mine.handle(), StreamHandle::from_raw(2))
                        .unwrap();
                }
                mine.synchronize().unwrap();
            });
        });
        // Device 0's per-thread stream of this thread is another stream, not held.
        rt.set_device(0).unwrap();
        let zero = OwnedEvent::new(Arc::clone(&rt)).unwrap();
        // SAFETY: the per-thread stream and the event are live for the runtime.
        unsafe {
            rt.event_record(zero.handle(), StreamHandle::from_raw(2))
                .unwrap();
        }
        zero.synchronize().unwrap();
        rt.set_device(1).unwrap();
        // 1 is the null stream of device 1, which waits for earlier work of the blocking
        // per-thread stream held above.
        queue_copy(&rt, 1, &bufs[1], &src, &done[1]);
        thread::sleep(SETTLE);
        assert!(
            !done[0].query().unwrap(),
            "work queued on this thread's per-thread stream waits behind its hold"
        );
        assert!(
            !done[1].query().unwrap(),
            "the legacy stream waits for earlier work of the per-thread stream"
        );
        assert!(done[2].query().unwrap());
        flags.store(0, 1).unwrap();
        // SAFETY: the legacy stream is live for every runtime.
        unsafe { rt.stream_synchronize(StreamHandle::from_raw(1)).unwrap() };
        for (buf, event) in bufs.iter().zip(&done) {
            assert!(event.query().unwrap());
            assert_eq!(buf.to_vec().unwrap(), vec![4u8; 64]);
        }
        rt.set_device(0).unwrap();
    }

    #[test]
    fn a_value_wait_holds_its_stream_until_the_value_is_reached_and_frees_wait_for_it() {
        let sim = Arc::new(SimRuntime::default());
        let rt: Arc<dyn GpuRuntime> = sim.clone();
        assert!(rt.stream_memops(0));
        let flags = HostFlags::new(Arc::clone(&rt), 2).unwrap();
        let stream = OwnedStream::new_independent(Arc::clone(&rt)).unwrap();
        let passed = OwnedEvent::new(Arc::clone(&rt)).unwrap();
        // SAFETY: the stream is live, the word is host-mapped memory of `rt` stored below.
        unsafe {
            rt.stream_wait_value(stream.handle(), flags.device_addr(1).unwrap(), 5)
                .unwrap();
        }
        passed.record(&stream).unwrap();
        let scratch = rt.device_alloc(64).unwrap();
        let free = {
            let rt = Arc::clone(&rt);
            // SAFETY: `scratch` came from `device_alloc` and nothing uses it.
            thread::spawn(move || unsafe { rt.device_free(scratch) })
        };
        flags.store(1, 4).unwrap();
        thread::sleep(SETTLE);
        assert!(!passed.query().unwrap(), "4 < 5: still held");
        assert!(
            !free.is_finished(),
            "a free synchronizes every stream first"
        );
        flags.store(1, 6).unwrap();
        passed.synchronize().unwrap();
        free.join().unwrap().unwrap();
        assert_eq!(sim.live_allocations(MemoryKind::Device), 0);
    }

    #[test]
    fn without_memops_value_waits_are_not_supported() {
        let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::new(SimConfig {
            memops: false,
            ..SimConfig::default()
        }));
        assert!(!rt.stream_memops(0));
        let flags = HostFlags::new(Arc::clone(&rt), 1).unwrap();
        let stream = OwnedStream::new(Arc::clone(&rt)).unwrap();
        // SAFETY: the stream is live; the word is host-mapped memory of `rt`.
        let r = unsafe { rt.stream_wait_value(stream.handle(), flags.device_addr(0).unwrap(), 1) };
        assert!(
            matches!(r, Err(HipError::Call { code, .. }) if code == HipErrorCode::NOT_SUPPORTED)
        );
        let off = SimConfig::from_lookup(|k| (k == "HIPFILE_SIM_MEMOPS").then(|| "false".into()));
        assert!(!off.memops);
    }

    #[test]
    fn value_waits_refuse_words_the_simulator_does_not_track() {
        let rt = rt();
        let stream = OwnedStream::new(Arc::clone(&rt)).unwrap();
        let pageable = Box::new(0u32);
        let flags = HostFlags::new(Arc::clone(&rt), 1).unwrap();
        for addr in [
            &*pageable as *const u32 as usize,
            flags.device_addr(0).unwrap() + 2,
        ] {
            // SAFETY: the simulator checks the word and refuses it before queuing anything.
            let r = unsafe { rt.stream_wait_value(stream.handle(), addr, 1) };
            assert!(
                matches!(r, Err(HipError::Call { code, .. }) if code == HipErrorCode::INVALID_VALUE)
            );
        }
        stream.synchronize().unwrap();
    }

    #[test]
    fn streams_know_their_device_and_bogus_handles_are_invalid() {
        let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::new(SimConfig {
            devices: 2,
            ..SimConfig::default()
        }));
        rt.set_device(1).unwrap();
        let blocking = OwnedStream::new(Arc::clone(&rt)).unwrap();
        let independent = OwnedStream::new_independent(Arc::clone(&rt)).unwrap();
        rt.set_device(0).unwrap();
        let on_zero = rt.stream_create().unwrap();
        let invalid = |r: HipResult<i32>| matches!(r, Err(HipError::Call { code, .. }) if code == HipErrorCode::INVALID_HANDLE);
        // SAFETY: the simulator looks every handle up; stale and made-up ones are refused.
        unsafe {
            assert_eq!(rt.stream_device(blocking.handle()).unwrap(), 1);
            assert_eq!(rt.stream_device(independent.handle()).unwrap(), 1);
            assert_eq!(rt.stream_device(on_zero).unwrap(), 0);
            assert_eq!(rt.stream_device(StreamHandle::from_raw(0)).unwrap(), 0);
            rt.set_device(1).unwrap();
            assert_eq!(
                rt.stream_device(StreamHandle::from_raw(0)).unwrap(),
                1,
                "null: the current device"
            );
            rt.set_device(0).unwrap();
            rt.stream_destroy(on_zero).unwrap();
            assert!(invalid(rt.stream_device(on_zero)));
            assert!(invalid(rt.stream_device(StreamHandle::from_raw(0xdead))));
        }
    }

    #[test]
    fn host_mapped_memory_is_seen_by_the_device_at_its_host_address() {
        let rt = rt();
        let p = rt.host_alloc_mapped(64).unwrap();
        // SAFETY: `p` is live host-mapped memory of `rt`; the device buffer's address is not
        // pinned host memory and is refused.
        unsafe {
            assert_eq!(rt.host_device_pointer(p).unwrap(), p.as_ptr() as usize);
            let dev = DeviceBuffer::new(Arc::clone(&rt), 64).unwrap();
            let not_host = NonNull::new(dev.ptr() as *mut u8).unwrap();
            assert!(rt.host_device_pointer(not_host).is_err());
            rt.host_free(p).unwrap();
        }
    }

    #[test]
    fn asynchronous_fills_run_on_their_stream() {
        let rt = rt();
        let dev = DeviceBuffer::new(Arc::clone(&rt), 4096).unwrap();
        let stream = OwnedStream::new_independent(Arc::clone(&rt)).unwrap();
        // SAFETY: the range is `dev`'s allocation; the second one runs past it and is refused.
        unsafe {
            rt.memset_device_async(dev.ptr() + 100, 0xee, 200, stream.handle())
                .unwrap();
            assert!(rt
                .memset_device_async(dev.ptr() + 4000, 1, 200, stream.handle())
                .is_err());
        }
        stream.synchronize().unwrap();
        let bytes = dev.to_vec().unwrap();
        assert!(bytes[..100].iter().all(|b| *b == 0));
        assert!(bytes[100..300].iter().all(|b| *b == 0xee));
        assert!(bytes[300..].iter().all(|b| *b == 0));
    }

    #[test]
    fn frees_are_checked_and_leaks_are_visible() {
        let sim = Arc::new(SimRuntime::default());
        let rt: Arc<dyn GpuRuntime> = sim.clone();
        let p = rt.device_alloc(100).unwrap();
        assert_eq!(sim.live_allocations(MemoryKind::Device), 1);
        // SAFETY: `p` came from device_alloc; the second free is refused, not executed.
        unsafe {
            rt.device_free(p).unwrap();
            assert!(rt.device_free(p).is_err());
        }
        assert_eq!(sim.live_allocations(MemoryKind::Device), 0);
    }
}
