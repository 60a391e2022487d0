//! [`ScriptedRuntime`]: a [`GpuRuntime`] decorator that fails chosen copies and pinned allocations.
//!
//! It lives here, beside the runtimes, because [`GpuRuntime`] declares its copy, free, stream and
//! event entry points `unsafe fn`: implementing the trait means declaring them, and this crate is
//! where the GPU boundary's `unsafe` belongs. Each forward passes the caller's own contract on
//! unchanged and adds no memory access of its own; a scripted failure touches no memory at all.
//! `hipfile-testkit` re-exports it with its other fault-injection decorators. Built with the
//! `faults` feature only, which the test kit turns on: the shipping library does not contain it.

use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::{
    EventHandle, GpuRuntime, HipError, HipErrorCode, HipResult, HostFn, PointerInfo, RuntimeInfo,
    StreamHandle,
};

/// Which runtime call a rule is about. Synchronous and asynchronous copies of one direction share
/// a counter: "the 3rd copy to the device" is the 3rd whichever entry point made it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RuntimeOp {
    /// `copy_to_device` and `copy_to_device_async` (host to device).
    CopyToDevice,
    /// `copy_from_device` and `copy_from_device_async` (device to host).
    CopyFromDevice,
    /// `host_alloc` and `host_alloc_mapped` (pinned host memory).
    HostAlloc,
    /// `stream_synchronize` (a failure stands for queued work that failed on the device).
    StreamSynchronize,
    /// `host_register` (pinning memory the caller mapped).
    HostRegister,
    /// `event_query` and `event_synchronize` (a failure stands for the work before the event
    /// failing on the device).
    EventWait,
    /// `context_create` (a context of the library's own: the device out of memory, or a GPU in
    /// a compute mode that allows one context).
    ContextCreate,
    /// `stream_wait_value` (queueing a stream memory wait).
    StreamWait,
}

/// One fault that fired.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FiredRuntimeFault {
    /// The kind of call.
    pub op: RuntimeOp,
    /// Its number among calls of that kind, counting from 1.
    pub call: u64,
    /// The HIP error returned.
    pub code: HipErrorCode,
}

#[derive(Clone, Copy, Debug)]
struct Rule {
    op: RuntimeOp,
    trigger: Trigger,
    code: HipErrorCode,
}

/// A [`GpuRuntime`] that runs a script of failures over another runtime.
///
/// A scripted failure is returned at the call (for asynchronous copies: at enqueue time, nothing
/// is queued) and the inner runtime never sees it. Everything else is forwarded unchanged.
pub struct ScriptedRuntime {
    inner: Arc<dyn GpuRuntime>,
    rules: Vec<Rule>,
    to_device: AtomicU64,
    from_device: AtomicU64,
    host_allocs: AtomicU64,
    stream_syncs: AtomicU64,
    host_registers: AtomicU64,
    event_waits: AtomicU64,
    stream_waits: AtomicU64,
    context_creates: AtomicU64,
    fired: Mutex<Vec<FiredRuntimeFault>>,
}

impl fmt::Debug for ScriptedRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ScriptedRuntime")
            .field("inner", &self.inner)
            .field("rules", &self.rules)
            .finish_non_exhaustive()
    }
}

impl ScriptedRuntime {
    /// An empty script over `inner`.
    pub fn new(inner: Arc<dyn GpuRuntime>) -> Self {
        ScriptedRuntime {
            inner,
            rules: Vec::new(),
            to_device: AtomicU64::new(0),
            from_device: AtomicU64::new(0),
            host_allocs: AtomicU64::new(0),
            stream_syncs: AtomicU64::new(0),
            host_registers: AtomicU64::new(0),
            event_waits: AtomicU64::new(0),
            stream_waits: AtomicU64::new(0),
            context_creates: AtomicU64::new(0),
            fired: Mutex::new(Vec::new()),
        }
    }

    /// Add a rule: calls of kind `op` selected by `trigger` fail with `code`. Earlier rules win.
    pub fn rule(mut self, op: RuntimeOp, trigger: Trigger, code: HipErrorCode) -> Self {
        self.rules.push(Rule { op, trigger, code });
        self
    }

    /// The `n`th copy to the device (sync or async, 1-based) fails with `code`.
    pub fn fail_copy_to_device(self, n: u64, code: HipErrorCode) -> Self {
        self.rule(RuntimeOp::CopyToDevice, Trigger::Nth(n), code)
    }

    /// The `n`th copy from the device (sync or async, 1-based) fails with `code`.
    pub fn fail_copy_from_device(self, n: u64, code: HipErrorCode) -> Self {
        self.rule(RuntimeOp::CopyFromDevice, Trigger::Nth(n), code)
    }

    /// The `n`th pinned host allocation fails with `hipErrorOutOfMemory` (pinning failure).
    pub fn fail_host_alloc(self, n: u64) -> Self {
        self.rule(
            RuntimeOp::HostAlloc,
            Trigger::Nth(n),
            HipErrorCode::OUT_OF_MEMORY,
        )
    }

    /// Every pinned host allocation from the `n`th on fails with `hipErrorOutOfMemory`.
    pub fn fail_host_allocs_from(self, n: u64) -> Self {
        self.rule(
            RuntimeOp::HostAlloc,
            Trigger::From(n),
            HipErrorCode::OUT_OF_MEMORY,
        )
    }

    /// The `n`th stream synchronisation (1-based) fails with `code`, as when work queued on the
    /// stream failed on the device.
    pub fn fail_stream_synchronize(self, n: u64, code: HipErrorCode) -> Self {
        self.rule(RuntimeOp::StreamSynchronize, Trigger::Nth(n), code)
    }

    /// Calls of kind `op` made so far (failed ones included).
    pub fn calls(&self, op: RuntimeOp) -> u64 {
        self.counter(op).load(Ordering::Acquire)
    }

    /// The faults that fired, in order.
    pub fn fired(&self) -> Vec<FiredRuntimeFault> {
        self.fired
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The runtime underneath.
    pub fn inner(&self) -> &Arc<dyn GpuRuntime> {
        &self.inner
    }

    fn counter(&self, op: RuntimeOp) -> &AtomicU64 {
        match op {
            RuntimeOp::CopyToDevice => &self.to_device,
            RuntimeOp::CopyFromDevice => &self.from_device,
            RuntimeOp::HostAlloc => &self.host_allocs,
            RuntimeOp::StreamSynchronize => &self.stream_syncs,
            RuntimeOp::HostRegister => &self.host_registers,
            RuntimeOp::EventWait => &self.event_waits,
            RuntimeOp::StreamWait => &self.stream_waits,
            RuntimeOp::ContextCreate => &self.context_creates,
        }
    }

    /// Number this call; `Err` when the script fails it.
    fn check(&self, op: RuntimeOp, name: &'static str) -> HipResult<()> {
        let call = self.counter(op).fetch_add(1, Ordering::AcqRel) + 1;
        match self
            .rules
            .iter()
            .find(|r| r.op == op && r.trigger.matches(call))
        {
            None => Ok(()),
            Some(rule) => {
                self.fired
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push(FiredRuntimeFault {
                        op,
                        call,
                        code: rule.code,
                    });
                Err(HipError::Call {
                    call: name,
                    code: rule.code,
                    detail: Some(format!("scripted failure of call {call}")),
                })
            }
        }
    }
}

impl GpuRuntime for ScriptedRuntime {
    fn info(&self) -> RuntimeInfo {
        self.inner.info()
    }

    fn p2p(&self) -> Option<Arc<dyn crate::P2pDriver>> {
        self.inner.p2p()
    }

    fn device_count(&self) -> HipResult<i32> {
        self.inner.device_count()
    }

    fn current_device(&self) -> HipResult<i32> {
        self.inner.current_device()
    }

    fn set_device(&self, device: i32) -> HipResult<()> {
        self.inner.set_device(device)
    }

    fn pointer_info(&self, ptr: usize) -> HipResult<PointerInfo> {
        self.inner.pointer_info(ptr)
    }

    fn device_alloc(&self, len: usize) -> HipResult<usize> {
        self.inner.device_alloc(len)
    }

    fn managed_alloc(&self, len: usize) -> HipResult<usize> {
        self.inner.managed_alloc(len)
    }

    unsafe fn device_free(&self, ptr: usize) -> HipResult<()> {
        // SAFETY: the caller's contract for `device_free` is the inner runtime's, passed on as is.
        unsafe { self.inner.device_free(ptr) }
    }

    fn host_alloc(&self, len: usize) -> HipResult<NonNull<u8>> {
        self.check(RuntimeOp::HostAlloc, "hipHostMalloc")?;
        self.inner.host_alloc(len)
    }

    unsafe fn host_free(&self, ptr: NonNull<u8>) -> HipResult<()> {
        // SAFETY: `ptr` came from `host_alloc` of this runtime, which is the inner one's.
        unsafe { self.inner.host_free(ptr) }
    }

    unsafe fn host_register(&self, ptr: NonNull<u8>, len: usize, read_only: bool) -> HipResult<()> {
        self.check(RuntimeOp::HostRegister, "hipHostRegister")?;
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.host_register(ptr, len, read_only) }
    }

    unsafe fn host_unregister(&self, ptr: NonNull<u8>) -> HipResult<()> {
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.host_unregister(ptr) }
    }

    unsafe fn copy_to_device(&self, dst: usize, src: &[u8]) -> HipResult<()> {
        self.check(RuntimeOp::CopyToDevice, "hipMemcpy")?;
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.copy_to_device(dst, src) }
    }

    unsafe fn copy_from_device(&self, dst: &mut [u8], src: usize) -> HipResult<()> {
        self.check(RuntimeOp::CopyFromDevice, "hipMemcpy")?;
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.copy_from_device(dst, src) }
    }

    unsafe fn memset_device(&self, dst: usize, value: u8, len: usize) -> HipResult<()> {
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.memset_device(dst, value, len) }
    }

    unsafe fn copy_to_device_async(
        &self,
        dst: usize,
        src: *const u8,
        len: usize,
        stream: StreamHandle,
    ) -> HipResult<()> {
        self.check(RuntimeOp::CopyToDevice, "hipMemcpyAsync")?;
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.copy_to_device_async(dst, src, len, stream) }
    }

    unsafe fn copy_from_device_async(
        &self,
        dst: *mut u8,
        src: usize,
        len: usize,
        stream: StreamHandle,
    ) -> HipResult<()> {
        self.check(RuntimeOp::CopyFromDevice, "hipMemcpyAsync")?;
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.copy_from_device_async(dst, src, len, stream) }
    }

    fn stream_create(&self) -> HipResult<StreamHandle> {
        self.inner.stream_create()
    }

    fn stream_create_independent(&self) -> HipResult<StreamHandle> {
        self.inner.stream_create_independent()
    }

    unsafe fn stream_device(&self, stream: StreamHandle) -> HipResult<i32> {
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.stream_device(stream) }
    }

    fn stream_memops(&self, device: i32) -> bool {
        self.inner.stream_memops(device)
    }

    fn stream_writes(&self, device: i32) -> bool {
        self.inner.stream_writes(device)
    }

    unsafe fn stream_wait_value(
        &self,
        stream: StreamHandle,
        addr: usize,
        value: u32,
    ) -> HipResult<()> {
        self.check(RuntimeOp::StreamWait, "hipStreamWaitValue32")?;
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.stream_wait_value(stream, addr, value) }
    }

    unsafe fn stream_write_value(
        &self,
        stream: StreamHandle,
        addr: usize,
        value: u32,
    ) -> HipResult<()> {
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.stream_write_value(stream, addr, value) }
    }

    fn host_alloc_mapped(&self, len: usize) -> HipResult<NonNull<u8>> {
        self.check(RuntimeOp::HostAlloc, "hipHostMalloc")?;
        self.inner.host_alloc_mapped(len)
    }

    unsafe fn host_device_pointer(&self, ptr: NonNull<u8>) -> HipResult<usize> {
        // SAFETY: the caller's contract, passed on unchanged: `host_alloc_mapped` forwards.
        unsafe { self.inner.host_device_pointer(ptr) }
    }

    unsafe fn memset_device_async(
        &self,
        dst: usize,
        value: u8,
        len: usize,
        stream: StreamHandle,
    ) -> HipResult<()> {
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.memset_device_async(dst, value, len, stream) }
    }

    unsafe fn stream_destroy(&self, stream: StreamHandle) -> HipResult<()> {
        // SAFETY: the caller's contract, passed on unchanged: the handles of this runtime are the
        // inner runtime's (`stream_create` and `event_create` forward).
        unsafe { self.inner.stream_destroy(stream) }
    }

    fn context_create(&self, device: i32) -> HipResult<Option<crate::ContextHandle>> {
        self.check(RuntimeOp::ContextCreate, "hipCtxCreate")?;
        self.inner.context_create(device)
    }

    fn offers_contexts(&self) -> bool {
        self.inner.offers_contexts()
    }

    unsafe fn in_context(
        &self,
        ctx: crate::ContextHandle,
        f: &mut dyn FnMut() -> HipResult<()>,
    ) -> HipResult<()> {
        // SAFETY: the caller's contract, passed on unchanged (the contexts are the inner
        // runtime's).
        unsafe { self.inner.in_context(ctx, f) }
    }

    unsafe fn context_destroy(&self, ctx: crate::ContextHandle) -> HipResult<()> {
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.context_destroy(ctx) }
    }

    unsafe fn stream_synchronize(&self, stream: StreamHandle) -> HipResult<()> {
        self.check(RuntimeOp::StreamSynchronize, "hipStreamSynchronize")?;
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.stream_synchronize(stream) }
    }

    fn event_create(&self) -> HipResult<EventHandle> {
        self.inner.event_create()
    }

    unsafe fn event_record(&self, event: EventHandle, stream: StreamHandle) -> HipResult<()> {
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.event_record(event, stream) }
    }

    unsafe fn event_synchronize(&self, event: EventHandle) -> HipResult<()> {
        self.check(RuntimeOp::EventWait, "hipEventSynchronize")?;
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.event_synchronize(event) }
    }

    unsafe fn event_query(&self, event: EventHandle) -> HipResult<bool> {
        self.check(RuntimeOp::EventWait, "hipEventQuery")?;
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.event_query(event) }
    }

    unsafe fn event_destroy(&self, event: EventHandle) -> HipResult<()> {
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.event_destroy(event) }
    }

    unsafe fn launch_host_func(&self, stream: StreamHandle, f: HostFn) -> HipResult<()> {
        // SAFETY: the caller's contract, passed on unchanged.
        unsafe { self.inner.launch_host_func(stream, f) }
    }
}

/// Which calls of a kind a rule selects, by their 1-based number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Exactly the `n`th call.
    Nth(u64),
    /// The `n`th call and every one after it.
    From(u64),
}

impl Trigger {
    /// Whether call number `call` (1-based) is selected.
    pub fn matches(self, call: u64) -> bool {
        match self {
            Trigger::Nth(n) => call == n,
            Trigger::From(n) => call >= n,
        }
    }
}
