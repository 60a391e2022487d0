//! Streams: in-order queues, each with a worker thread, ordered with each device's null stream
//! by the legacy default stream rules (see the module `sim`); the special handles (null, legacy,
//! per-thread); synchronous work on the null stream; host functions.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;

use crossbeam_channel::{Receiver, Sender};

use super::{lock, SimRuntime};
use crate::error::{HipError, HipErrorCode, HipResult};
use crate::runtime::HostFn;

/// `cudaStreamLegacy`: the null stream of the calling thread's current device, by name.
const LEGACY_STREAM: usize = 1;
/// `hipStreamPerThread` / `cudaStreamPerThread`: the calling thread's default stream on its
/// current device.
const PER_THREAD_STREAM: usize = 2;

/// Work queued on a stream.
pub(super) type Job = Box<dyn FnOnce() -> HipResult<()> + Send>;

/// How a simulated stream is ordered with the null stream of its device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StreamKind {
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
pub(super) struct SimStream {
    jobs: Sender<Job>,
    /// The first failure of queued work, reported (and cleared) by the next synchronize.
    pub(super) failure: Arc<Mutex<Option<HipError>>>,
    kind: StreamKind,
    /// The device current when the stream was made.
    device: i32,
    progress: Arc<Progress>,
}

impl SimRuntime {
    /// Number of live streams (leak checks in tests).
    pub fn live_streams(&self) -> usize {
        lock(&self.streams).len()
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
    pub(super) fn drain_all(&self) -> Vec<Arc<SimStream>> {
        let mut all: Vec<Arc<SimStream>> = lock(&self.null_streams).values().cloned().collect();
        all.extend(lock(&self.streams).values().cloned());
        all.extend(lock(&self.per_thread_streams).values().cloned());
        for s in &all {
            s.progress.wait_for(s.progress.submitted());
        }
        all
    }

    /// Synchronous work `f` on the device memory `[ptr, ptr + len)`: checked now, then run on the
    /// null stream of the current device (so after its earlier work, and that of the blocking
    /// streams) with the range checked again, and waited for. What `f` may rely on: it runs
    /// before this returns or never, and while the range lies inside a live allocation (the
    /// memory table's read lock is held meanwhile), so it may use memory the caller borrows for
    /// the length of the call.
    pub(super) fn device_work(
        &self,
        ptr: usize,
        len: usize,
        call: &'static str,
        f: impl FnOnce() + Send + 'static,
    ) -> HipResult<()> {
        self.check_range(ptr, len, call)?;
        let allocations = Arc::clone(&self.allocations);
        self.run_on_null(Box::new(move || {
            Self::with_range(&allocations, ptr, len, call, f)
        }))
    }

    /// Stream number `id`; 0 and 1 are the null stream of the calling thread's current device,
    /// 2 the thread's per-thread default stream there.
    pub(super) fn stream(&self, id: usize) -> HipResult<Arc<SimStream>> {
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

    /// Queue `job` on stream number `stream` (0: the null stream of the current device).
    pub(super) fn enqueue(&self, stream: usize, job: Job) -> HipResult<()> {
        let s = self.stream(stream)?;
        self.enqueue_on(&s, job).map(drop)
    }

    /// Queue `job` on `s`, behind the work it must wait for by the legacy default stream rules;
    /// the job's ticket ([`Progress::wait_for`]).
    pub(super) fn enqueue_on(&self, s: &SimStream, job: Job) -> HipResult<u64> {
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
    /// not kept for the stream's next synchronize. What `job` may rely on: it runs before this
    /// returns, or never, so it may use memory the caller borrows for the length of the call.
    pub(super) fn run_on_null(&self, job: Job) -> HipResult<()> {
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

    /// A new stream of `kind` on the current device, with its worker thread; its number.
    pub(super) fn create_stream(&self, kind: StreamKind) -> HipResult<usize> {
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
    pub(super) fn destroy_stream(&self, stream: usize) -> HipResult<()> {
        // Dropping the sender lets the worker drain what is queued and exit.
        lock(&self.streams)
            .remove(&stream)
            .map(|_| ())
            .ok_or_else(|| HipError::call("hipStreamDestroy", HipErrorCode::INVALID_HANDLE))
    }

    /// Wait for the work queued on stream number `stream`; the first failure of that work. On
    /// the null stream that is a job of its own, so it also waits for the earlier work of the
    /// blocking streams, as `hipStreamSynchronize(0)` does.
    pub(super) fn synchronize_stream(&self, stream: usize) -> HipResult<()> {
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
    pub(super) fn stream_idle(&self, stream: usize) -> HipResult<bool> {
        let s = self.stream(stream)?;
        let c = lock(&s.progress.counts);
        Ok(c.completed >= c.submitted)
    }

    /// The device of stream number `stream`; the current device for the special handles (the
    /// null, legacy and per-thread streams).
    pub(super) fn device_of_stream(&self, stream: usize) -> HipResult<i32> {
        if stream <= PER_THREAD_STREAM {
            return Ok(self.current());
        }
        lock(&self.streams)
            .get(&stream)
            .map(|s| s.device)
            .ok_or_else(|| HipError::call("hipStreamGetDevice", HipErrorCode::INVALID_HANDLE))
    }

    /// Run `f` on stream number `stream` once the work queued before it is done. As the AMD and
    /// NVIDIA platforms do, a panic stays in the host function and the stream goes on (the runtime
    /// contract, `contract::a_panicking_host_function_...`).
    pub(super) fn queue_host_fn(&self, stream: usize, f: HostFn) -> HipResult<()> {
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
