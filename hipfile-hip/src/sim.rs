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
//!
//! Module map: [`SimConfig`] and [`SimAbi`] (`config`); the memory table and its range checks
//! (`memory`); streams, the legacy default stream rules and host functions (`streams`); events
//! (`events`); the P2P driver and its fault script (`p2p`); the platform traits' entry points,
//! stream memory operations and every other access through an address, which is all of the
//! simulator's `unsafe` (`runtime`); what the C libraries share ([`capi`]).
//!
//! [`GpuRuntime::stream_create`]: crate::GpuRuntime::stream_create
//! [`GpuRuntime::stream_create_independent`]: crate::GpuRuntime::stream_create_independent
//! [`GpuRuntime::stream_wait_value`]: crate::GpuRuntime::stream_wait_value

use std::cell::Cell;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::thread;

use crate::error::{HipError, HipErrorCode, HipResult};
use crate::runtime::MemoryKind;

pub mod capi;
mod config;
mod events;
mod memory;
mod p2p;
mod runtime;
mod streams;

pub use config::{SimAbi, SimConfig};
pub use memory::SIM_ALIGN;
pub use p2p::{SimP2p, SimP2pFault, SimP2pScript};

use events::SimEvent;
use memory::AllocationTable;
use streams::SimStream;

/// Words of a runtime's handle arena: handles are reused only after this many more were made.
const HANDLE_ARENA_WORDS: usize = 1 << 14;

thread_local! {
    static CURRENT_DEVICE: Cell<i32> = const { Cell::new(0) };
    /// The context of the library's own current on the thread (0: none, the primary one).
    static CURRENT_CONTEXT: Cell<usize> = const { Cell::new(0) };
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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

    /// Number of live contexts of the library's own (leak checks in tests).
    pub fn live_contexts(&self) -> usize {
        lock(&self.contexts).len()
    }

    pub(super) fn current(&self) -> i32 {
        CURRENT_DEVICE.with(Cell::get)
    }

    /// A handle not live in `table`: the address of the next word of the handle arena, taken
    /// in turn (after the arena's last word, the first again), skipping words whose handle is
    /// still live. With every word's handle live (as many as the arena has words), `call` fails
    /// with `hipErrorOutOfMemory`, as a GPU runtime out of resources for one more does.
    pub(super) fn new_handle<T>(
        &self,
        table: &HashMap<usize, T>,
        call: &'static str,
    ) -> HipResult<usize> {
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
}
