//! [`ScriptedRuntime`]: a [`GpuRuntime`] decorator that fails chosen copies and pinned allocations.
//!
//! It lives here, beside the runtimes, because [`GpuRuntime`] declares its copy, free, stream and
//! event entry points `unsafe fn`: the forwarding impl, made by `forward_gpu_runtime!` next to
//! the trait, declares them, and this crate is where the GPU boundary's `unsafe` belongs. This
//! module writes only what it changes (which calls it counts and fails) and no `unsafe` of its
//! own; a scripted failure touches no memory at all. `hipfile-testkit` re-exports it with its
//! other fault-injection decorators. Built with the
//! `faults` feature only, which the test kit turns on: the shipping library does not contain it.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::runtime::forward_gpu_runtime;
use crate::{GpuRuntime, HipError, HipErrorCode, HipResult};

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

/// One fallible method of [`GpuRuntime`](crate::GpuRuntime), as the forwarding impl names it
/// when it asks [`ScriptedRuntime::admit`] about a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum RuntimeCall {
    DeviceCount,
    CurrentDevice,
    SetDevice,
    PointerInfo,
    DeviceAlloc,
    ManagedAlloc,
    DeviceFree,
    HostAlloc,
    HostFree,
    HostRegister,
    HostUnregister,
    ContextCreate,
    InContext,
    ContextDestroy,
    CopyToDevice,
    CopyFromDevice,
    MemsetDevice,
    CopyToDeviceAsync,
    CopyFromDeviceAsync,
    StreamCreate,
    StreamCreateIndependent,
    StreamDevice,
    StreamWaitValue,
    StreamWriteValue,
    HostAllocMapped,
    HostDevicePointer,
    MemsetDeviceAsync,
    StreamDestroy,
    StreamSynchronize,
    EventCreate,
    EventRecord,
    EventSynchronize,
    EventQuery,
    EventDestroy,
    LaunchHostFunc,
}

forward_gpu_runtime!(ScriptedRuntime, inner: inner, admit: admit, calls: RuntimeCall);

impl ScriptedRuntime {
    /// The script's say on `call`: the calls it counts are numbered, and the numbers a rule
    /// selects fail; every other call passes.
    fn admit(&self, call: RuntimeCall) -> HipResult<()> {
        let (op, name) = match call {
            RuntimeCall::CopyToDevice => (RuntimeOp::CopyToDevice, "hipMemcpy"),
            RuntimeCall::CopyToDeviceAsync => (RuntimeOp::CopyToDevice, "hipMemcpyAsync"),
            RuntimeCall::CopyFromDevice => (RuntimeOp::CopyFromDevice, "hipMemcpy"),
            RuntimeCall::CopyFromDeviceAsync => (RuntimeOp::CopyFromDevice, "hipMemcpyAsync"),
            RuntimeCall::HostAlloc | RuntimeCall::HostAllocMapped => {
                (RuntimeOp::HostAlloc, "hipHostMalloc")
            }
            RuntimeCall::HostRegister => (RuntimeOp::HostRegister, "hipHostRegister"),
            RuntimeCall::StreamSynchronize => {
                (RuntimeOp::StreamSynchronize, "hipStreamSynchronize")
            }
            RuntimeCall::StreamWaitValue => (RuntimeOp::StreamWait, "hipStreamWaitValue32"),
            RuntimeCall::EventSynchronize => (RuntimeOp::EventWait, "hipEventSynchronize"),
            RuntimeCall::EventQuery => (RuntimeOp::EventWait, "hipEventQuery"),
            RuntimeCall::ContextCreate => (RuntimeOp::ContextCreate, "hipCtxCreate"),
            _ => return Ok(()),
        };
        self.check(op, name)
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
