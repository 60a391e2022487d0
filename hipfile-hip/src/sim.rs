//! `sim`: a simulated GPU in host memory.
//!
//! Not a mock: device allocations are real host memory (page aligned, so O_DIRECT can DMA into
//! them as a P2P driver would), tracked by base and length so pointer queries answer exactly like a
//! GPU runtime; streams are in-order worker threads; events and host functions work; copies check
//! their device ranges and fail with `hipErrorInvalidValue` where a GPU would fault. Several
//! simulated devices can exist at once, each allocation remembering its owner.
//!
//! Streams follow the legacy default stream semantics of HIP and CUDA, so that code which would
//! deadlock or race on a GPU does so here too:
//! - the null stream (handle 0) of each device is a queue of its own, with its own worker: work
//!   queued on it runs asynchronously, in order;
//! - streams made by [`GpuRuntime::stream_create`] are *blocking*: their work starts only after
//!   all work queued earlier on their device's null stream has completed, and work queued on the
//!   null stream starts only after all work queued earlier on every blocking stream of the device;
//! - streams made by [`GpuRuntime::stream_create_independent`] (`hipStreamNonBlocking`) never
//!   wait for the null stream, nor it for them;
//! - the special handles name streams by the calling thread: 1 (`cudaStreamLegacy`) is the null
//!   stream of its current device, as 0 is; 2 (`hipStreamPerThread`, `cudaStreamPerThread`) is
//!   the thread's own default stream on its current device, one per thread and device, made at
//!   its first use and ordered with the null stream as a blocking stream is. Code that hands
//!   such a handle to another thread reaches another stream there, as on a GPU;
//! - synchronous copies and fills run as work on the null stream, waited for;
//! - frees synchronize every stream first, as `hipFree` and `cudaFree` do;
//! - [`GpuRuntime::stream_wait_value`] holds a stream until a word of host memory reaches a value
//!   (on unless [`SimConfig::memops`] is false).
//!
//! Its P2P driver ([`SimP2p`], on unless [`SimConfig::p2p`] is false) does what a P2P DMA does:
//! O_DIRECT `pread`/`pwrite` straight between the file and simulated device memory, after checking
//! that the range lies inside one device allocation. Tests script its faults deterministically
//! through [`SimRuntime::p2p_faults`] ("the 2nd call fails with ENODEV", "the 1st call is short by
//! 4096 bytes").
//!
//! The same engine backs the HIP- and CUDA-compatible shared libraries built by `hipfile-testkit`,
//! which is why the ROCm ABI generation it imitates ([`SimAbi`]) and what those libraries share
//! ([`capi`]: copy and fill checks, C host functions, handle conversions) live here.

use std::alloc::Layout;
use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock};
use std::thread;

use crossbeam_channel::{Receiver, Sender};

use crate::error::{HipError, HipErrorCode, HipResult};
use crate::p2p::{errno_error, P2pDriver, MAX_P2P_TRANSFER};
use crate::runtime::{
    ContextHandle, EventHandle, GpuRuntime, HostFn, MemoryKind, Platform, PointerInfo, RuntimeInfo,
    StreamHandle,
};

pub mod capi;

/// Alignment of every simulated allocation: a page, so O_DIRECT accepts device buffers.
pub const SIM_ALIGN: usize = 4096;

/// Which ROCm ABI generation the simulator imitates (matters to the C library built from it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimAbi {
    /// ROCm 5.x: `hipMemoryType` Host=0, Device=1, Array=2, Unified=3, Managed=4.
    Rocm5,
    /// ROCm 6 and later: Unregistered=0, Host=1, Device=2, Managed=3, Array=10, Unified=11.
    Rocm6,
}

impl SimAbi {
    /// What `hipRuntimeGetVersion` reports for this generation.
    pub fn runtime_version(self) -> i32 {
        match self {
            SimAbi::Rocm5 => 50_221_153,
            SimAbi::Rocm6 => 60_342_134,
        }
    }
}

/// How to build a simulated GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SimConfig {
    /// Number of simulated devices (at least 1).
    pub devices: i32,
    /// The ABI generation reported.
    pub abi: SimAbi,
    /// Whether the simulated platform offers a P2P driver ([`SimP2p`]).
    pub p2p: bool,
    /// Whether its streams can wait for a value in host memory
    /// ([`GpuRuntime::stream_wait_value`]); without, that call fails with `hipErrorNotSupported`.
    pub memops: bool,
    /// Whether it makes contexts of the library's own ([`GpuRuntime::context_create`]), as the
    /// CUDA platform does; without, that call answers `None`, as the HIP platform does.
    pub own_contexts: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            devices: 1,
            abi: SimAbi::Rocm6,
            p2p: true,
            memops: true,
            own_contexts: true,
        }
    }
}

impl SimConfig {
    /// The configuration that `lookup` (a variable's name to its value) gives:
    /// `HIPFILE_SIM_DEVICES` (a count from 1 to 64, default 1), `HIPFILE_SIM_ROCM` (`5` or `6`,
    /// default 6), `HIPFILE_SIM_P2P` (`false` turns the P2P driver off; default on) and
    /// `HIPFILE_SIM_MEMOPS` (`false` or `0` turns stream memory operations off; default on).
    /// Unparseable values fall back to the defaults. [`crate::PlatformOptions`] reads these with
    /// the rest of the platform options.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let mut cfg = SimConfig::default();
        if let Some(n) = lookup("HIPFILE_SIM_DEVICES")
            .and_then(|v| v.trim().parse::<i32>().ok())
            .filter(|n| *n >= 1 && *n <= 64)
        {
            cfg.devices = n;
        }
        if lookup("HIPFILE_SIM_ROCM").is_some_and(|v| v.trim() == "5") {
            cfg.abi = SimAbi::Rocm5;
        }
        if lookup("HIPFILE_SIM_P2P").is_some_and(|v| v.trim().eq_ignore_ascii_case("false")) {
            cfg.p2p = false;
        }
        if lookup("HIPFILE_SIM_MEMOPS").is_some_and(|v| {
            let v = v.trim();
            v == "0" || v.eq_ignore_ascii_case("false")
        }) {
            cfg.memops = false;
        }
        cfg
    }
}

#[derive(Clone, Copy, Debug)]
struct Allocation {
    len: usize,
    kind: MemoryKind,
    device: i32,
    /// Allocated by the simulator (freed by it) rather than registered host memory.
    owned: bool,
    /// Registered read-only: memory the process may only read, such as a mapping of a file.
    /// Copies out of it read it with `process_vm_readv`, which answers `EFAULT` where a page
    /// is gone (a file truncated under its mapping) instead of raising `SIGBUS`; a real GPU
    /// reads the pinned pages it holds.
    read_only: bool,
    /// The context of the library's own it was registered in (0: the device's primary one);
    /// the sim unregisters it only in that context.
    context: usize,
}

/// Words of a runtime's handle arena: handles are reused only after this many more were made.
const HANDLE_ARENA_WORDS: usize = 1 << 14;

/// `cudaStreamLegacy`: the null stream of the calling thread's current device, by name.
const LEGACY_STREAM: usize = 1;
/// `hipStreamPerThread` / `cudaStreamPerThread`: the calling thread's default stream on its
/// current device.
const PER_THREAD_STREAM: usize = 2;

type Job = Box<dyn FnOnce() -> HipResult<()> + Send>;

/// How a simulated stream is ordered with the null stream of its device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamKind {
    /// The null stream itself.
    Null,
    /// Ordered with the null stream (`hipStreamDefault`).
    Blocking,
    /// Not ordered with the null stream (`hipStreamNonBlocking`).
    Independent,
}

#[derive(Debug, Default)]
struct Counts {
    /// Jobs queued so far.
    submitted: u64,
    /// Jobs run so far; they run in the order queued.
    completed: u64,
}

/// How far a stream got: the `n`th job queued has run once `completed >= n`.
#[derive(Debug, Default)]
struct Progress {
    counts: Mutex<Counts>,
    advanced: Condvar,
}

impl Progress {
    fn submitted(&self) -> u64 {
        lock(&self.counts).submitted
    }

    /// Count one more job queued; its ticket.
    fn submit(&self) -> u64 {
        let mut c = lock(&self.counts);
        c.submitted += 1;
        c.submitted
    }

    fn complete_one(&self) {
        lock(&self.counts).completed += 1;
        self.advanced.notify_all();
    }

    /// Wait until the job with ticket `n` (and every one before it) has run.
    fn wait_for(&self, n: u64) {
        let mut c = lock(&self.counts);
        while c.completed < n {
            c = self
                .advanced
                .wait(c)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

#[derive(Debug)]
struct SimStream {
    jobs: Sender<Job>,
    /// The first failure of queued work, reported (and cleared) by the next synchronize.
    failure: Arc<Mutex<Option<HipError>>>,
    kind: StreamKind,
    /// The device current when the stream was made.
    device: i32,
    progress: Arc<Progress>,
}

#[derive(Debug, Default)]
struct EventState {
    recorded: u64,
    completed: u64,
    /// The failure of the work its stream ran before the last completed recording, if any: as
    /// on a real GPU, where a failed copy's error is sticky, waiting for the event reports it.
    failure: Option<HipErrorCode>,
}

#[derive(Debug, Default)]
struct SimEvent {
    state: Mutex<EventState>,
    done: Condvar,
}

thread_local! {
    static CURRENT_DEVICE: Cell<i32> = const { Cell::new(0) };
    /// The context of the library's own current on the thread (0: none, the primary one).
    static CURRENT_CONTEXT: Cell<usize> = const { Cell::new(0) };
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

type AllocationTable = Arc<RwLock<BTreeMap<usize, Allocation>>>;

/// One scripted fault of the sim's P2P driver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SimP2pFault {
    /// The call fails with this errno and moves nothing.
    Errno(i32),
    /// The call moves this many bytes fewer than asked (at least one byte still moves).
    Short(usize),
}

#[derive(Debug, Default)]
struct ScriptState {
    calls: u64,
    faults: Vec<(u64, SimP2pFault)>,
}

/// The fault script of a simulated P2P driver: which calls fail or come back short. Calls are
/// counted from the runtime's creation, reads and writes together; faults are armed relative to
/// the calls made so far, so a test says "the next call" without knowing what ran before.
#[derive(Debug, Default)]
pub struct SimP2pScript {
    state: Mutex<ScriptState>,
}

impl SimP2pScript {
    /// The `nth` call from now (1 = the next one) fails with `errno`.
    pub fn fail_call(&self, nth: u64, errno: i32) {
        self.arm(nth, SimP2pFault::Errno(errno));
    }

    /// The `nth` call from now (1 = the next one) moves `by` bytes fewer than asked.
    pub fn short_call(&self, nth: u64, by: usize) {
        self.arm(nth, SimP2pFault::Short(by));
    }

    /// Calls made so far.
    pub fn calls(&self) -> u64 {
        lock(&self.state).calls
    }

    /// Forget every fault not yet fired.
    pub fn clear(&self) {
        lock(&self.state).faults.clear();
    }

    fn arm(&self, nth: u64, fault: SimP2pFault) {
        let mut st = lock(&self.state);
        let at = st.calls + nth.max(1);
        st.faults.push((at, fault));
    }

    /// Count a call; the fault armed for it, if any.
    fn next_call(&self) -> Option<SimP2pFault> {
        let mut st = lock(&self.state);
        st.calls += 1;
        let now = st.calls;
        let i = st.faults.iter().position(|(at, _)| *at == now)?;
        Some(st.faults.swap_remove(i).1)
    }
}

/// The sim's P2P driver: O_DIRECT `pread`/`pwrite` between a file and simulated device memory,
/// which is exactly what a P2P DMA does. Refuses (EFAULT) a range that is not inside one device
/// allocation, as a GPU's DMA engine faults on it.
#[derive(Debug)]
pub struct SimP2p {
    allocations: AllocationTable,
    script: Arc<SimP2pScript>,
}

impl SimP2p {
    fn check_device(&self, ptr: usize, len: usize) -> io::Result<()> {
        let allocs = self
            .allocations
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        match SimRuntime::find(&allocs, ptr) {
            Some((base, a)) if a.kind == MemoryKind::Device && ptr + len <= base + a.len => Ok(()),
            _ => Err(errno_error(libc::EFAULT)),
        }
    }

    /// The size this call moves after the script had its say.
    fn scripted_size(&self, size: usize) -> io::Result<usize> {
        let size = size.min(MAX_P2P_TRANSFER);
        match self.script.next_call() {
            None => Ok(size),
            Some(SimP2pFault::Errno(e)) => Err(errno_error(e)),
            Some(SimP2pFault::Short(by)) => Ok(size.saturating_sub(by).max(1).min(size)),
        }
    }
}

fn os_result(n: isize) -> io::Result<usize> {
    usize::try_from(n).map_err(|_| io::Error::last_os_error())
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
        self.check_device(device_ptr, size.min(MAX_P2P_TRANSFER))?;
        let size = self.scripted_size(size)?;
        let offset = libc::off_t::try_from(file_offset).map_err(|_| errno_error(libc::EINVAL))?;
        // SAFETY: the range lies inside a live device allocation (checked above), which is host
        // memory in the sim, and the caller guarantees nothing else accesses it meanwhile.
        let n = unsafe {
            libc::pread(
                fd.as_raw_fd(),
                device_ptr as *mut libc::c_void,
                size,
                offset,
            )
        };
        os_result(n)
    }

    unsafe fn write(
        &self,
        fd: BorrowedFd<'_>,
        device_ptr: usize,
        size: usize,
        file_offset: u64,
    ) -> io::Result<usize> {
        self.check_device(device_ptr, size.min(MAX_P2P_TRANSFER))?;
        let size = self.scripted_size(size)?;
        let offset = libc::off_t::try_from(file_offset).map_err(|_| errno_error(libc::EINVAL))?;
        // SAFETY: the range lies inside a live device allocation (checked above); it is only read.
        let n = unsafe {
            libc::pwrite(
                fd.as_raw_fd(),
                device_ptr as *const libc::c_void,
                size,
                offset,
            )
        };
        os_result(n)
    }
}

/// The simulated GPU runtime.
#[derive(Debug)]
pub struct SimRuntime {
    config: SimConfig,
    allocations: AllocationTable,
    p2p: Arc<SimP2p>,
    /// The streams made by the application, by handle.
    streams: Mutex<HashMap<usize, Arc<SimStream>>>,
    /// The null stream of each device, made at its first use.
    null_streams: Mutex<HashMap<i32, Arc<SimStream>>>,
    /// The per-thread default stream of each thread and device, made at its first use and kept
    /// while the runtime lives.
    per_thread_streams: Mutex<HashMap<(thread::ThreadId, i32), Arc<SimStream>>>,
    /// Held while work is queued, so that the work a new job waits for (captured then) and the
    /// job's own place in its queue form one consistent order: no two jobs wait for each other.
    queue_order: Mutex<()>,
    events: Mutex<HashMap<usize, Arc<SimEvent>>>,
    /// Stream and event handles are addresses of words of this arena: like a real runtime's
    /// handles they point to mapped memory (the library refuses a handle that does not), and
    /// stay unique while the runtime lives (see [`SimRuntime::new_handle`]).
    handle_arena: Box<[u64]>,
    next_handle: AtomicUsize,
    /// The most live allocations of each kind seen at once.
    peaks: Mutex<HashMap<MemoryKind, usize>>,
    /// The contexts of the library's own, by handle: their device.
    contexts: Mutex<HashMap<usize, i32>>,
}

impl Default for SimRuntime {
    fn default() -> Self {
        SimRuntime::new(SimConfig::default())
    }
}

impl SimRuntime {
    /// A simulated GPU with `config`.
    pub fn new(config: SimConfig) -> Self {
        let allocations: AllocationTable = Arc::new(RwLock::new(BTreeMap::new()));
        SimRuntime {
            config: SimConfig {
                devices: config.devices.max(1),
                ..config
            },
            p2p: Arc::new(SimP2p {
                allocations: Arc::clone(&allocations),
                script: Arc::new(SimP2pScript::default()),
            }),
            allocations,
            streams: Mutex::new(HashMap::new()),
            null_streams: Mutex::new(HashMap::new()),
            per_thread_streams: Mutex::new(HashMap::new()),
            queue_order: Mutex::new(()),
            events: Mutex::new(HashMap::new()),
            handle_arena: vec![0u64; HANDLE_ARENA_WORDS].into_boxed_slice(),
            next_handle: AtomicUsize::new(0),
            peaks: Mutex::new(HashMap::new()),
            contexts: Mutex::new(HashMap::new()),
        }
    }

    /// The configuration in force.
    pub fn config(&self) -> SimConfig {
        self.config
    }

    /// The fault script of this runtime's P2P driver.
    pub fn p2p_faults(&self) -> &SimP2pScript {
        &self.p2p.script
    }

    /// Number of live allocations of `kind` (leak checks in tests).
    pub fn live_allocations(&self, kind: MemoryKind) -> usize {
        self.allocations
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .filter(|a| a.kind == kind)
            .count()
    }

    /// The most allocations of `kind` that were live at once since the runtime was made (bounds
    /// checks in tests: a pool that grows past its bound and shrinks back is caught).
    pub fn peak_allocations(&self, kind: MemoryKind) -> usize {
        lock(&self.peaks).get(&kind).copied().unwrap_or(0)
    }

    /// Number of live contexts of the library's own (leak checks in tests).
    pub fn live_contexts(&self) -> usize {
        lock(&self.contexts).len()
    }

    /// Whether host memory registered at `ptr` was registered in a context of the library's own.
    pub fn registered_in_own_context(&self, ptr: usize) -> bool {
        let allocs = self
            .allocations
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        Self::find(&allocs, ptr).is_some_and(|(_, a)| a.context != 0)
    }

    /// Number of live streams (leak checks in tests).
    pub fn live_streams(&self) -> usize {
        lock(&self.streams).len()
    }

    /// Track caller-owned host memory as registered (`hipHostRegister`).
    pub fn host_register(&self, ptr: usize, len: usize) -> HipResult<()> {
        self.register_host(ptr, len, false)
    }

    /// [`SimRuntime::host_register`], read-only when `read_only` (the runtimes' read-only flag):
    /// copies out of such memory fail where a page is gone instead of raising `SIGBUS`.
    pub fn register_host(&self, ptr: usize, len: usize, read_only: bool) -> HipResult<()> {
        if ptr == 0 || len == 0 {
            return Err(HipError::call(
                "hipHostRegister",
                HipErrorCode::INVALID_VALUE,
            ));
        }
        let mut allocs = self
            .allocations
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if Self::find(&allocs, ptr).is_some() {
            return Err(HipError::call("hipHostRegister", HipErrorCode(712)));
        }
        allocs.insert(
            ptr,
            Allocation {
                len,
                kind: MemoryKind::Host,
                device: self.current(),
                owned: false,
                read_only,
                context: CURRENT_CONTEXT.with(Cell::get),
            },
        );
        Ok(())
    }

    /// Forget host memory registered with [`SimRuntime::host_register`].
    pub fn host_unregister(&self, ptr: usize) -> HipResult<()> {
        let mut allocs = self
            .allocations
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        match allocs.get(&ptr) {
            Some(a) if a.context != CURRENT_CONTEXT.with(Cell::get) => Err(HipError::call(
                "hipHostUnregister",
                HipErrorCode::INVALID_CONTEXT,
            )),
            Some(a) if !a.owned && a.kind == MemoryKind::Host => {
                allocs.remove(&ptr);
                Ok(())
            }
            _ => Err(HipError::call("hipHostUnregister", HipErrorCode(713))),
        }
    }

    /// Wait until every stream, null streams included, has run the work queued so far
    /// (`hipDeviceSynchronize`); the first failure of that work.
    pub fn synchronize_all(&self) -> HipResult<()> {
        let mut first = Ok(());
        for s in self.drain_all() {
            if let Some(e) = lock(&s.failure).take() {
                if first.is_ok() {
                    first = Err(e);
                }
            }
        }
        first
    }

    /// Wait until every stream has run the work queued so far; the streams waited for.
    fn drain_all(&self) -> Vec<Arc<SimStream>> {
        let mut all: Vec<Arc<SimStream>> = lock(&self.null_streams).values().cloned().collect();
        all.extend(lock(&self.streams).values().cloned());
        all.extend(lock(&self.per_thread_streams).values().cloned());
        for s in &all {
            s.progress.wait_for(s.progress.submitted());
        }
        all
    }

    fn current(&self) -> i32 {
        CURRENT_DEVICE.with(Cell::get)
    }

    fn find(allocs: &BTreeMap<usize, Allocation>, ptr: usize) -> Option<(usize, Allocation)> {
        let (&base, &a) = allocs.range(..=ptr).next_back()?;
        (ptr < base + a.len.max(1)).then_some((base, a))
    }

    fn alloc(&self, len: usize, kind: MemoryKind, call: &'static str) -> HipResult<usize> {
        let layout = Layout::from_size_align(len.max(1), SIM_ALIGN)
            .map_err(|_| HipError::call(call, HipErrorCode::OUT_OF_MEMORY))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(HipError::call(call, HipErrorCode::OUT_OF_MEMORY));
        }
        let base = ptr as usize;
        let mut allocs = self
            .allocations
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        allocs.insert(
            base,
            Allocation {
                len,
                kind,
                device: self.current(),
                owned: true,
                read_only: false,
                context: 0,
            },
        );
        let live = allocs.values().filter(|a| a.kind == kind).count();
        drop(allocs);
        let mut peaks = lock(&self.peaks);
        let peak = peaks.entry(kind).or_insert(0);
        *peak = (*peak).max(live);
        Ok(base)
    }

    fn free(&self, ptr: usize, kinds: &[MemoryKind], call: &'static str) -> HipResult<()> {
        if ptr == 0 {
            return Ok(());
        }
        // As hipFree and cudaFree do: no queued work may still use the memory.
        self.drain_all();
        let a = {
            let mut allocs = self
                .allocations
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            match allocs.get(&ptr) {
                Some(a) if a.owned && kinds.contains(&a.kind) => {
                    let a = *a;
                    allocs.remove(&ptr);
                    a
                }
                _ => return Err(HipError::call(call, HipErrorCode::INVALID_VALUE)),
            }
        };
        let layout = Layout::from_size_align(a.len.max(1), SIM_ALIGN)
            .map_err(|_| HipError::call(call, HipErrorCode::INVALID_VALUE))?;
        // SAFETY: `ptr` was returned by `alloc_zeroed` with this very layout and is now untracked.
        unsafe { std::alloc::dealloc(ptr as *mut u8, layout) };
        Ok(())
    }

    /// Check that `[ptr, ptr + len)` lies inside one tracked allocation.
    fn check_range(&self, ptr: usize, len: usize, call: &'static str) -> HipResult<()> {
        Self::check_range_in(&self.allocations, ptr, len, call)
    }

    /// [`SimRuntime::check_range`] against `allocations`, for queued work that outlives `&self`.
    fn check_range_in(
        allocations: &AllocationTable,
        ptr: usize,
        len: usize,
        call: &'static str,
    ) -> HipResult<()> {
        if len == 0 {
            return Ok(());
        }
        let allocs = allocations.read().unwrap_or_else(PoisonError::into_inner);
        match Self::find(&allocs, ptr) {
            Some((base, a)) if ptr + len <= base + a.len => Ok(()),
            _ => Err(HipError::call(call, HipErrorCode::INVALID_VALUE)),
        }
    }

    /// Run `f` while `[ptr, ptr + len)` is known to lie inside one live allocation: the table's
    /// read lock is held meanwhile, and memory is deallocated only after its entry is removed
    /// under the write lock. `hipErrorInvalidValue` (and `f` not run) otherwise.
    fn with_range(
        allocations: &AllocationTable,
        ptr: usize,
        len: usize,
        call: &'static str,
        f: impl FnOnce(),
    ) -> HipResult<()> {
        if len == 0 {
            return Ok(());
        }
        let allocs = allocations.read().unwrap_or_else(PoisonError::into_inner);
        match Self::find(&allocs, ptr) {
            Some((base, a)) if ptr + len <= base + a.len => {
                f();
                Ok(())
            }
            _ => Err(HipError::call(call, HipErrorCode::INVALID_VALUE)),
        }
    }

    /// Synchronous work `f` on the device memory `[ptr, ptr + len)`: checked now, then run on the
    /// null stream of the current device (so after its earlier work, and that of the blocking
    /// streams) with the range checked again, and waited for.
    ///
    /// # Safety
    /// `f` is sound to run while the range lies inside a live allocation; it may use memory the
    /// caller borrows for the length of this call.
    unsafe fn device_work(
        &self,
        ptr: usize,
        len: usize,
        call: &'static str,
        f: impl FnOnce() + Send + 'static,
    ) -> HipResult<()> {
        self.check_range(ptr, len, call)?;
        let allocations = Arc::clone(&self.allocations);
        // SAFETY: the caller's contract: `f` may borrow for the length of this call, which
        // `run_on_null` keeps.
        unsafe {
            self.run_on_null(Box::new(move || {
                Self::with_range(&allocations, ptr, len, call, f)
            }))
        }
    }

    /// Stream number `id`; 0 and 1 are the null stream of the calling thread's current device,
    /// 2 the thread's per-thread default stream there.
    fn stream(&self, id: usize) -> HipResult<Arc<SimStream>> {
        match id {
            0 | LEGACY_STREAM => return self.null_stream(self.current()),
            PER_THREAD_STREAM => return self.per_thread_stream(self.current()),
            _ => {}
        }
        lock(&self.streams)
            .get(&id)
            .cloned()
            .ok_or_else(|| HipError::call("stream lookup", HipErrorCode::INVALID_HANDLE))
    }

    /// The null stream of `device`, made (with its worker) at its first use.
    fn null_stream(&self, device: i32) -> HipResult<Arc<SimStream>> {
        let mut nulls = lock(&self.null_streams);
        if let Some(s) = nulls.get(&device) {
            return Ok(Arc::clone(s));
        }
        let s = Self::spawn_stream(StreamKind::Null, device, format!("sim-null-{device}"))?;
        nulls.insert(device, Arc::clone(&s));
        Ok(s)
    }

    /// The calling thread's per-thread default stream on `device`, made (with its worker) at
    /// its first use; a blocking stream, as CUDA's and HIP's per-thread streams are.
    fn per_thread_stream(&self, device: i32) -> HipResult<Arc<SimStream>> {
        let mut streams = lock(&self.per_thread_streams);
        let key = (thread::current().id(), device);
        if let Some(s) = streams.get(&key) {
            return Ok(Arc::clone(s));
        }
        let name = format!("sim-per-thread-{device}");
        let s = Self::spawn_stream(StreamKind::Blocking, device, name)?;
        streams.insert(key, Arc::clone(&s));
        Ok(s)
    }

    fn event(&self, id: usize) -> HipResult<Arc<SimEvent>> {
        lock(&self.events)
            .get(&id)
            .cloned()
            .ok_or_else(|| HipError::call("event lookup", HipErrorCode::INVALID_HANDLE))
    }

    /// Queue `job` on stream number `stream` (0: the null stream of the current device).
    fn enqueue(&self, stream: usize, job: Job) -> HipResult<()> {
        let s = self.stream(stream)?;
        self.enqueue_on(&s, job).map(drop)
    }

    /// Queue `job` on `s`, behind the work it must wait for by the legacy default stream rules;
    /// the job's ticket ([`Progress::wait_for`]).
    fn enqueue_on(&self, s: &SimStream, job: Job) -> HipResult<u64> {
        let _order = lock(&self.queue_order);
        let waits_for: Vec<Arc<SimStream>> = match s.kind {
            StreamKind::Independent => Vec::new(),
            StreamKind::Blocking => lock(&self.null_streams)
                .get(&s.device)
                .cloned()
                .into_iter()
                .collect(),
            StreamKind::Null => lock(&self.streams)
                .values()
                .chain(lock(&self.per_thread_streams).values())
                .filter(|b| b.kind == StreamKind::Blocking && b.device == s.device)
                .cloned()
                .collect(),
        };
        let earlier: Vec<(Arc<Progress>, u64)> = waits_for
            .iter()
            .map(|w| (Arc::clone(&w.progress), w.progress.submitted()))
            .filter(|(p, n)| lock(&p.counts).completed < *n)
            .collect();
        let ticket = s.progress.submit();
        let sent = s.jobs.send(Box::new(move || {
            for (progress, n) in &earlier {
                progress.wait_for(*n);
            }
            job()
        }));
        if sent.is_err() {
            // The worker is gone; count the job as run, so nothing waits for it.
            s.progress.complete_one();
            return Err(HipError::call(
                "stream enqueue",
                HipErrorCode::INVALID_HANDLE,
            ));
        }
        Ok(ticket)
    }

    /// Run `job` as work on the null stream of the current device and wait for it: what a
    /// synchronous copy or fill is on the legacy default stream. Its failure is returned here,
    /// not kept for the stream's next synchronize.
    ///
    /// # Safety
    /// `job` may use memory borrowed by the caller for as long as this call lasts: it runs before
    /// this returns, or never.
    unsafe fn run_on_null(&self, job: Job) -> HipResult<()> {
        let s = self.stream(0)?;
        let (tx, rx) = crossbeam_channel::bounded::<HipResult<()>>(1);
        self.enqueue_on(
            &s,
            Box::new(move || {
                let _ = tx.send(job());
                Ok(())
            }),
        )?;
        rx.recv()
            .map_err(|_| HipError::call("null stream", HipErrorCode::UNKNOWN))?
    }

    /// Queue a copy of `len` bytes from `src` to `dst` on stream number `stream`, after checking
    /// that `[device, device + len)` (the device side) lies inside one allocation.
    ///
    /// # Safety
    /// Both ranges stay valid and untouched by others until the copy completes.
    unsafe fn copy_async(
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

    /// Whether `ptr` lies in host memory registered read-only.
    fn read_only_host(&self, ptr: usize) -> bool {
        let allocs = self
            .allocations
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        Self::find(&allocs, ptr).is_some_and(|(_, a)| a.read_only)
    }

    /// A handle not live in `table`: the address of the next word of the handle arena, taken
    /// in turn (after the arena's last word, the first again), skipping words whose handle is
    /// still live. With every word's handle live (as many as the arena has words), `call` fails
    /// with `hipErrorOutOfMemory`, as a GPU runtime out of resources for one more does.
    fn new_handle<T>(&self, table: &HashMap<usize, T>, call: &'static str) -> HipResult<usize> {
        if table.len() >= HANDLE_ARENA_WORDS {
            return Err(HipError::call(call, HipErrorCode::OUT_OF_MEMORY));
        }
        let base = self.handle_arena.as_ptr() as usize;
        loop {
            let n = self.next_handle.fetch_add(1, Ordering::Relaxed) % HANDLE_ARENA_WORDS;
            let id = base + n * std::mem::size_of::<u64>();
            if !table.contains_key(&id) {
                return Ok(id);
            }
        }
    }

    /// A new stream of `kind` on the current device, with its worker thread; its number.
    fn create_stream(&self, kind: StreamKind) -> HipResult<usize> {
        let mut streams = lock(&self.streams);
        let id = self.new_handle(&streams, "hipStreamCreate")?;
        let s = Self::spawn_stream(kind, self.current(), format!("sim-stream-{id:#x}"))?;
        streams.insert(id, s);
        Ok(id)
    }

    fn spawn_stream(kind: StreamKind, device: i32, name: String) -> HipResult<Arc<SimStream>> {
        let (tx, rx) = crossbeam_channel::unbounded::<Job>();
        let failure = Arc::new(Mutex::new(None));
        let progress = Arc::new(Progress::default());
        let (worker_failure, worker_progress) = (Arc::clone(&failure), Arc::clone(&progress));
        thread::Builder::new()
            .name(name)
            .spawn(move || Self::stream_worker(rx, worker_failure, worker_progress))
            .map_err(|_| HipError::call("hipStreamCreate", HipErrorCode::OUT_OF_MEMORY))?;
        Ok(Arc::new(SimStream {
            jobs: tx,
            failure,
            kind,
            device,
            progress,
        }))
    }

    /// Forget stream number `stream`; its worker drains what is queued and exits.
    fn destroy_stream(&self, stream: usize) -> HipResult<()> {
        // Dropping the sender lets the worker drain what is queued and exit.
        lock(&self.streams)
            .remove(&stream)
            .map(|_| ())
            .ok_or_else(|| HipError::call("hipStreamDestroy", HipErrorCode::INVALID_HANDLE))
    }

    /// Wait for the work queued on stream number `stream`; the first failure of that work. On
    /// the null stream that is a job of its own, so it also waits for the earlier work of the
    /// blocking streams, as `hipStreamSynchronize(0)` does.
    fn synchronize_stream(&self, stream: usize) -> HipResult<()> {
        let s = self.stream(stream)?;
        let ticket = match s.kind {
            StreamKind::Null => self.enqueue_on(&s, Box::new(|| Ok(())))?,
            StreamKind::Blocking | StreamKind::Independent => s.progress.submitted(),
        };
        s.progress.wait_for(ticket);
        let failure = lock(&s.failure).take();
        failure.map_or(Ok(()), Err)
    }

    /// Whether the work queued so far on stream number `stream` has run (`hipStreamQuery`).
    fn stream_idle(&self, stream: usize) -> HipResult<bool> {
        let s = self.stream(stream)?;
        let c = lock(&s.progress.counts);
        Ok(c.completed >= c.submitted)
    }

    /// The device of stream number `stream`; the current device for the special handles (the
    /// null, legacy and per-thread streams).
    fn device_of_stream(&self, stream: usize) -> HipResult<i32> {
        if stream <= PER_THREAD_STREAM {
            return Ok(self.current());
        }
        lock(&self.streams)
            .get(&stream)
            .map(|s| s.device)
            .ok_or_else(|| HipError::call("hipStreamGetDevice", HipErrorCode::INVALID_HANDLE))
    }

    /// Queue on stream number `stream` a wait until the `u32` at `addr` satisfies `ready`. The
    /// word must lie inside memory the simulator tracks (4-byte aligned); the wait ends with
    /// `hipErrorInvalidValue` (the stream's failure) if that memory goes away. Without stream
    /// memory operations ([`SimConfig::memops`]) it is `hipErrorNotSupported`.
    fn queue_value_wait(
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
    fn queue_value_write(&self, stream: usize, addr: usize, value: u32) -> HipResult<()> {
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

    /// A new event; its number.
    fn create_event(&self) -> HipResult<usize> {
        let mut events = lock(&self.events);
        let id = self.new_handle(&events, "hipEventCreate")?;
        events.insert(id, Arc::new(SimEvent::default()));
        Ok(id)
    }

    /// Record event number `event` on stream number `stream`.
    fn record_event(&self, event: usize, stream: usize) -> HipResult<()> {
        let ev = self.event(event)?;
        let s = self.stream(stream)?;
        let failure = Arc::clone(&s.failure);
        let generation = {
            let mut st = lock(&ev.state);
            st.recorded += 1;
            st.recorded
        };
        self.enqueue_on(
            &s,
            Box::new(move || {
                let failed = lock(&failure).as_ref().map(HipError::code);
                let mut st = lock(&ev.state);
                if generation >= st.completed {
                    st.failure = failed;
                }
                st.completed = st.completed.max(generation);
                ev.done.notify_all();
                Ok(())
            }),
        )
        .map(drop)
    }

    /// Wait until every recording of event number `event` so far has completed.
    fn synchronize_event(&self, event: usize) -> HipResult<()> {
        let ev = self.event(event)?;
        let mut st = lock(&ev.state);
        let target = st.recorded;
        while st.completed < target {
            st = ev.done.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        match st.failure {
            Some(code) => Err(HipError::call("hipEventSynchronize", code)),
            None => Ok(()),
        }
    }

    /// Whether every recording of event number `event` has completed.
    fn query_event(&self, event: usize) -> HipResult<bool> {
        let ev = self.event(event)?;
        let st = lock(&ev.state);
        match st.failure {
            Some(code) if st.completed >= st.recorded => Err(HipError::call("hipEventQuery", code)),
            _ => Ok(st.completed >= st.recorded),
        }
    }

    /// Forget event number `event`.
    fn destroy_event(&self, event: usize) -> HipResult<()> {
        lock(&self.events)
            .remove(&event)
            .map(|_| ())
            .ok_or_else(|| HipError::call("hipEventDestroy", HipErrorCode::INVALID_HANDLE))
    }

    /// Run `f` on stream number `stream` once the work queued before it is done. As the AMD and
    /// NVIDIA platforms do, a panic stays in the host function and the stream goes on (the runtime
    /// contract, `contract::a_panicking_host_function_...`).
    fn queue_host_fn(&self, stream: usize, f: HostFn) -> HipResult<()> {
        self.enqueue(
            stream,
            Box::new(move || {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
                Ok(())
            }),
        )
    }

    fn stream_worker(
        jobs: Receiver<Job>,
        failure: Arc<Mutex<Option<HipError>>>,
        progress: Arc<Progress>,
    ) {
        for job in jobs {
            let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job))
                .unwrap_or_else(|_| Err(HipError::call("stream work", HipErrorCode::UNKNOWN)));
            if let Err(e) = outcome {
                let mut slot = lock(&failure);
                if slot.is_none() {
                    *slot = Some(e);
                }
            }
            progress.complete_one();
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
        // SAFETY: `run_on_null` runs the job before returning (or never), so `src` outlives it;
        // the device side is checked by `device_work`, and the caller guarantees exclusive access
        // to it; `src` is a valid slice that cannot overlap device memory the caller owns
        // exclusively.
        unsafe {
            self.device_work(dst, len, "hipMemcpy", move || {
                std::ptr::copy(from as *const u8, dst as *mut u8, len)
            })
        }
    }

    unsafe fn copy_from_device(&self, dst: &mut [u8], src: usize) -> HipResult<()> {
        let (to, len) = (dst.as_mut_ptr() as usize, dst.len());
        // SAFETY: as in `copy_to_device`: `dst` is a valid, exclusive slice that outlives the job.
        unsafe {
            self.device_work(src, len, "hipMemcpy", move || {
                std::ptr::copy(src as *const u8, to as *mut u8, len)
            })
        }
    }

    unsafe fn memset_device(&self, dst: usize, value: u8, len: usize) -> HipResult<()> {
        // SAFETY: the range is checked by `device_work`; the caller guarantees exclusive access.
        unsafe {
            self.device_work(dst, len, "hipMemset", move || {
                std::ptr::write_bytes(dst as *mut u8, value, len)
            })
        }
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
    use super::*;
    use crate::runtime::{DeviceBuffer, DeviceGuard, OwnedEvent, OwnedStream, PinnedBuffer};

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

    use crate::stream_gate::HostFlags;
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
