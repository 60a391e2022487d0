//! The pinned staging pool: lanes of page-locked host memory, per device, bounded, reused.
//!
//! A lane ([`StagingLane`], from `hipfile-hip`, which owns the asynchronous copies) is what one
//! thread needs to stage a stream of chunks: one pinned buffer cut in two halves (so reading
//! chunk k+1 overlaps copying chunk k), a private stream on the lane's device, and one event per
//! half. Lanes are made on first need (the driver opens with
//! some made and touched, so the first request pays no allocation or page faults), returned to
//! the pool after each request, and bounded in pinned bytes. A lane's buffer is allocated in one
//! piece, so a thread never holds half of what it needs while waiting for the other half.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use hipfile_core::{Error, ErrorKind, Result};
use hipfile_hip::{EventWait, GpuRuntime, HipErrorCode, LaneError, StagingLane, StreamOrder};

fn lane_error(e: LaneError, chunk: usize) -> Error {
    match e {
        LaneError::Device(e) => Error::hip(&e, "selecting the staging lane's device"),
        LaneError::Pinned(e) => {
            let context = format!(
                "allocating {} bytes of pinned memory",
                chunk.saturating_mul(2)
            );
            if e.code() == HipErrorCode::OUT_OF_MEMORY {
                Error::new(ErrorKind::GpuMemoryPinningFailed, format!("{context}: {e}"))
            } else {
                Error::hip(&e, context)
            }
        }
        LaneError::Stream(e) => Error::hip(&e, "creating a stream or event"),
    }
}

#[derive(Debug, Default)]
struct PoolState {
    free: HashMap<i32, Vec<StagingLane>>,
    /// Pinned bytes held by all lanes, free or leased.
    held: usize,
    /// Threads waiting in `take` for a lane to come back: a lane given back wakes them only
    /// when there are some (a wake-up is a system call even when nobody waits).
    waiting: usize,
}

/// A bounded pool of staging lanes.
#[derive(Debug)]
pub struct StagingPool {
    runtime: Arc<dyn GpuRuntime>,
    wait: EventWait,
    order: StreamOrder,
    state: Mutex<PoolState>,
    returned: Condvar,
}

impl StagingPool {
    /// An empty pool over `runtime` whose lanes wait for their copies as `wait` says and whose
    /// streams are ordered as `order` says.
    pub fn new(runtime: Arc<dyn GpuRuntime>, wait: EventWait, order: StreamOrder) -> Self {
        StagingPool {
            runtime,
            wait,
            order,
            state: Mutex::new(PoolState::default()),
            returned: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Pinned bytes the pool holds now.
    pub fn held_bytes(&self) -> usize {
        self.lock().held
    }

    /// Make `count` lanes for `device` now (as far as `bound` allows) and keep them free.
    pub fn prefill(
        self: &Arc<Self>,
        device: i32,
        chunk: usize,
        bound: usize,
        count: usize,
    ) -> Result<()> {
        let mut made = Vec::new();
        for _ in 0..count {
            match self.take(device, chunk, bound, false)? {
                Some(lane) => made.push(lane),
                None => break,
            }
        }
        drop(made);
        Ok(())
    }

    /// A lane for `device` with halves of at least `chunk` bytes, keeping all lanes within
    /// `bound` pinned bytes. With `wait`, blocks until one is returned when the bound is reached;
    /// without, answers `None` then. A lane bigger than the bound on its own is refused.
    pub fn take(
        self: &Arc<Self>,
        device: i32,
        chunk: usize,
        bound: usize,
        wait: bool,
    ) -> Result<Option<LaneLease>> {
        let need = chunk.saturating_mul(2);
        if need > bound {
            return Err(Error::new(
                ErrorKind::InvalidMappingSize,
                format!("a staging lane of {need} bytes exceeds the pinned memory bound of {bound} bytes"),
            ));
        }
        let mut evicted = Vec::new();
        let mut state = self.lock();
        loop {
            if let Some(list) = state.free.get_mut(&device) {
                // The lane given back last first: one request after another reuses one lane
                // (its stream, its events and its pinned halves warm) instead of rotating.
                if let Some(i) = list.iter().rposition(|l| l.chunk() >= chunk) {
                    let lane = list.swap_remove(i);
                    return Ok(Some(LaneLease {
                        pool: Arc::clone(self),
                        lane: Some(lane),
                    }));
                }
            }
            // Free lanes of another device or a smaller chunk make room for this one, if enough
            // of them are free to make the room (lanes on loan cannot be made to). They are freed
            // after the pool's lock is released: freeing pinned memory can wait on the device.
            let evictable: usize = state.free.values().flatten().map(StagingLane::bytes).sum();
            if state.held.saturating_add(need) > bound && state.held - evictable + need <= bound {
                while state.held.saturating_add(need) > bound {
                    let Some(victim) = state.free.values_mut().find_map(Vec::pop) else {
                        break;
                    };
                    state.held -= victim.bytes();
                    evicted.push(victim);
                }
            }
            if state.held.saturating_add(need) <= bound {
                state.held += need;
                drop(state);
                return match StagingLane::new(&self.runtime, device, chunk, self.wait, self.order) {
                    Ok(lane) => Ok(Some(LaneLease {
                        pool: Arc::clone(self),
                        lane: Some(lane),
                    })),
                    Err(e) => {
                        self.lock().held -= need;
                        self.returned.notify_all();
                        Err(lane_error(e, chunk))
                    }
                };
            }
            if !wait {
                return Ok(None);
            }
            state.waiting += 1;
            state = self
                .returned
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
            state.waiting -= 1;
        }
    }

    fn give_back(&self, lane: StagingLane) {
        let mut state = self.lock();
        state.free.entry(lane.device()).or_default().push(lane);
        // A waiter counts itself under the lock before it waits, so one that is not counted
        // here finds this lane when it looks.
        let waiting = state.waiting > 0;
        drop(state);
        if waiting {
            self.returned.notify_all();
        }
    }
}

/// A lane on loan; goes back to the pool on drop.
#[derive(Debug)]
pub struct LaneLease {
    pool: Arc<StagingPool>,
    lane: Option<StagingLane>,
}

impl std::ops::Deref for LaneLease {
    type Target = StagingLane;
    fn deref(&self) -> &StagingLane {
        self.lane
            .as_ref()
            .expect("a lease holds its lane until dropped")
    }
}

impl std::ops::DerefMut for LaneLease {
    fn deref_mut(&mut self) -> &mut StagingLane {
        self.lane
            .as_mut()
            .expect("a lease holds its lane until dropped")
    }
}

impl Drop for LaneLease {
    fn drop(&mut self) {
        if let Some(mut lane) = self.lane.take() {
            // Normally drained by the engine already (then this returns at once). Unwinding
            // past it, copies may still be queued on the lane's halves, and the next user must
            // not find them in flight; a lane that cannot be drained is dropped, not reused.
            if lane.finish().is_ok() {
                self.pool.give_back(lane);
            } else {
                // Its pinned memory is freed with it: the pool no longer holds those bytes, and
                // a take waiting for room must see them gone.
                let bytes = lane.bytes();
                drop(lane);
                let mut state = self.pool.lock();
                state.held -= bytes;
                drop(state);
                self.pool.returned.notify_all();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipfile_hip::sim::SimRuntime;
    use hipfile_hip::MemoryKind;
    use hipfile_testkit::faults::{RuntimeOp, ScriptedRuntime, Trigger};

    /// A pool on `rt` whose lanes poll for their copies, ordered with the default stream.
    fn pool_on(rt: Arc<dyn GpuRuntime>) -> Arc<StagingPool> {
        Arc::new(StagingPool::new(
            rt,
            EventWait::Yield,
            StreamOrder::WithDefaultStream,
        ))
    }

    /// A file holding `bytes`.
    fn file_of(bytes: &[u8]) -> (tempfile::TempDir, std::fs::File) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, bytes).unwrap();
        (dir, std::fs::File::open(&path).unwrap())
    }

    /// The first `len` bytes of `file`, mapped and pinned on device 0.
    fn pin(
        rt: &Arc<dyn GpuRuntime>,
        file: &std::fs::File,
        len: usize,
        ledger: &Arc<std::sync::atomic::AtomicUsize>,
    ) -> hipfile_hip::PinnedFileRange {
        use std::os::fd::AsFd;
        let mapping = hipfile_hip::FileMapping::map(file.as_fd(), 0, len).unwrap();
        hipfile_hip::PinnedFileRange::register(rt, 0, mapping, Some(Arc::clone(ledger))).unwrap()
    }

    #[test]
    fn lanes_are_reused_and_the_bound_holds() {
        let sim = Arc::new(SimRuntime::default());
        let pool = pool_on(sim.clone());
        let a = pool.take(0, 4096, 16384, true).unwrap().unwrap();
        let b = pool.take(0, 4096, 16384, true).unwrap().unwrap();
        assert_eq!(pool.held_bytes(), 16384);
        assert!(pool.take(0, 4096, 16384, false).unwrap().is_none());
        assert!(
            pool.take(0, 16384, 16384, true).is_err(),
            "a lane above the bound is refused"
        );
        drop(a);
        let c = pool.take(0, 2048, 16384, false).unwrap().unwrap();
        assert_eq!(c.chunk(), 4096, "the returned lane is reused");
        assert_eq!(pool.held_bytes(), 16384);
        drop((b, c));
        assert_eq!(sim.live_allocations(MemoryKind::Host), 2);
        assert_eq!(sim.live_streams(), 2);
        drop(pool);
        assert_eq!(sim.live_allocations(MemoryKind::Host), 0);
        assert_eq!(sim.live_streams(), 0);
    }

    #[test]
    fn a_full_pool_makes_a_waiting_take_wait_for_a_return() {
        let sim = Arc::new(SimRuntime::default());
        let pool = pool_on(sim);
        let held = pool.take(0, 4096, 8192, true).unwrap().unwrap();
        let p2 = Arc::clone(&pool);
        let waiter = std::thread::spawn(move || p2.take(0, 4096, 8192, true).map(|l| l.is_some()));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!waiter.is_finished());
        drop(held);
        assert!(waiter.join().unwrap().unwrap());
    }

    #[test]
    fn a_lane_that_cannot_be_drained_is_freed_and_no_longer_counted() {
        let sim = Arc::new(SimRuntime::default());
        // The wait for the first staged copy fails, as when the copy failed on the device.
        let rt: Arc<dyn GpuRuntime> = Arc::new(ScriptedRuntime::new(sim.clone()).rule(
            RuntimeOp::EventWait,
            Trigger::Nth(1),
            HipErrorCode::ILLEGAL_ADDRESS,
        ));
        let pool = pool_on(Arc::clone(&rt));
        let dev = hipfile_hip::DeviceBuffer::new(Arc::clone(&rt), 4096).unwrap();
        let range = hipfile_hip::DeviceRange::query(&rt, dev.ptr(), 4096).unwrap();
        let mut lane = pool.take(0, 4096, 8192, true).unwrap().unwrap();
        lane.upload(0, &range).unwrap();
        drop(lane);
        assert_eq!(
            sim.live_allocations(MemoryKind::Host),
            0,
            "the lane was freed"
        );
        assert_eq!(pool.held_bytes(), 0);
        assert!(
            pool.take(0, 4096, 8192, false).unwrap().is_some(),
            "the bound has room for a new lane"
        );
    }

    #[test]
    fn the_lane_given_back_last_is_taken_first() {
        let sim = Arc::new(SimRuntime::default());
        let pool = pool_on(sim);
        let address = |lane: &mut LaneLease| lane.half(0).unwrap().as_ptr() as usize;
        let mut a = pool.take(0, 4096, 1 << 20, true).unwrap().unwrap();
        let mut b = pool.take(0, 4096, 1 << 20, true).unwrap().unwrap();
        let (at_a, at_b) = (address(&mut a), address(&mut b));
        drop(a);
        drop(b);
        // One request after another keeps reusing one lane rather than rotating through them.
        for _ in 0..3 {
            let mut lane = pool.take(0, 4096, 1 << 20, true).unwrap().unwrap();
            assert_eq!(address(&mut lane), at_b);
        }
        let mut first = pool.take(0, 4096, 1 << 20, true).unwrap().unwrap();
        let mut second = pool.take(0, 4096, 1 << 20, true).unwrap().unwrap();
        assert_eq!((address(&mut first), address(&mut second)), (at_b, at_a));
    }

    #[test]
    fn a_lane_waits_for_copies_out_of_pinned_pages_by_event_not_by_draining_its_stream() {
        let sim = Arc::new(SimRuntime::default());
        let scripted = Arc::new(ScriptedRuntime::new(sim));
        let rt: Arc<dyn GpuRuntime> = scripted.clone();
        let page = 64 << 10;
        let bytes: Vec<u8> = (0..2 * page).map(|i| (i % 13) as u8).collect();
        let (_dir, file) = file_of(&bytes);
        let ledger = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let pin = Arc::new(pin(&rt, &file, bytes.len(), &ledger));
        let dev = hipfile_hip::DeviceBuffer::new(rt.clone(), bytes.len()).unwrap();
        let range = hipfile_hip::DeviceRange::query(&rt, dev.ptr(), bytes.len()).unwrap();
        for wait in [EventWait::Yield, EventWait::Runtime] {
            let mut lane = StagingLane::new(&rt, 0, page, wait, StreamOrder::Independent).unwrap();
            let (syncs, waits) = (
                scripted.calls(RuntimeOp::StreamSynchronize),
                scripted.calls(RuntimeOp::EventWait),
            );
            lane.upload_pinned(&pin, 0, &range).unwrap();
            lane.finish().unwrap();
            assert_eq!(
                scripted.calls(RuntimeOp::StreamSynchronize),
                syncs,
                "{wait:?}"
            );
            assert!(scripted.calls(RuntimeOp::EventWait) > waits, "{wait:?}");
            assert_eq!(dev.to_vec().unwrap(), bytes);
        }
        drop(pin);
        assert_eq!(
            ledger.load(std::sync::atomic::Ordering::Acquire),
            0,
            "the lanes let go of the pin"
        );
    }

    #[test]
    fn a_lane_whose_wait_for_pinned_copies_fails_drains_its_stream_and_reports_it() {
        let sim = Arc::new(SimRuntime::default());
        let scripted = Arc::new(ScriptedRuntime::new(sim).rule(
            RuntimeOp::EventWait,
            Trigger::Nth(1),
            hipfile_hip::HipErrorCode::ILLEGAL_ADDRESS,
        ));
        let rt: Arc<dyn GpuRuntime> = scripted.clone();
        let page = 64 << 10;
        let (_dir, file) = file_of(&vec![6u8; page]);
        let ledger = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let pin = Arc::new(pin(&rt, &file, page, &ledger));
        let dev = hipfile_hip::DeviceBuffer::new(rt.clone(), page).unwrap();
        let range = hipfile_hip::DeviceRange::query(&rt, dev.ptr(), page).unwrap();
        let mut lane =
            StagingLane::new(&rt, 0, page, EventWait::Yield, StreamOrder::Independent).unwrap();
        lane.upload_pinned(&pin, 0, &range).unwrap();
        drop(pin);
        assert!(lane.finish().is_err(), "the failed wait is the answer");
        assert_eq!(
            scripted.calls(RuntimeOp::StreamSynchronize),
            1,
            "and the stream was drained"
        );
        assert_eq!(ledger.load(std::sync::atomic::Ordering::Acquire), 0);
    }
}
