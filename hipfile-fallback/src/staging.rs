//! The pinned staging pool: page-locked host buffers, per device, bounded in total, reused.
//!
//! Buffers are allocated on first need (one per device up front when the driver opens, touched so
//! the first request pays no page faults) and returned to the pool when a lease drops. When the
//! bound is reached, a request waits for a buffer to come back instead of allocating more.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use hipfile_core::{Error, ErrorKind, Result};
use hipfile_hip::{GpuRuntime, PinnedBuffer};

#[derive(Debug, Default)]
struct PoolState {
    free: HashMap<i32, Vec<PinnedBuffer>>,
    /// Bytes of pinned memory held, free or leased.
    held: usize,
}

/// A bounded pool of pinned staging buffers.
#[derive(Debug)]
pub struct StagingPool {
    runtime: Arc<dyn GpuRuntime>,
    state: Mutex<PoolState>,
    returned: Condvar,
}

impl StagingPool {
    /// An empty pool over `runtime`.
    pub fn new(runtime: Arc<dyn GpuRuntime>) -> Self {
        StagingPool {
            runtime,
            state: Mutex::new(PoolState::default()),
            returned: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Bytes of pinned memory the pool holds now.
    pub fn held_bytes(&self) -> usize {
        self.lock().held
    }

    /// Allocate one buffer of `len` bytes for `device` now, if the bound allows.
    pub fn prefill(self: &Arc<Self>, device: i32, len: usize, bound: usize) -> Result<()> {
        let lease = self.lease(device, len, bound)?;
        drop(lease);
        Ok(())
    }

    /// Lease a buffer of at least `len` bytes for `device`, holding at most `bound` bytes of
    /// pinned memory in all. A buffer that would exceed the bound on its own is refused.
    pub fn lease(self: &Arc<Self>, device: i32, len: usize, bound: usize) -> Result<StagingLease> {
        if len > bound {
            return Err(Error::new(
                ErrorKind::InvalidMappingSize,
                format!(
                    "a {len}-byte staging buffer exceeds the pinned memory bound of {bound} bytes"
                ),
            ));
        }
        let mut state = self.lock();
        loop {
            if let Some(buf) = take_fitting(&mut state, device, len) {
                return Ok(StagingLease {
                    pool: Arc::clone(self),
                    device,
                    buf: Some(buf),
                });
            }
            // Free buffers of the wrong size or device are released to make room.
            while state.held + len > bound {
                let Some(victim) = take_any(&mut state) else {
                    break;
                };
                state.held -= victim.len();
                drop(victim);
            }
            if state.held + len <= bound {
                state.held += len;
                drop(state);
                return match self.allocate(device, len) {
                    Ok(buf) => Ok(StagingLease {
                        pool: Arc::clone(self),
                        device,
                        buf: Some(buf),
                    }),
                    Err(e) => {
                        self.lock().held -= len;
                        self.returned.notify_all();
                        Err(e)
                    }
                };
            }
            state = self
                .returned
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    fn allocate(&self, device: i32, len: usize) -> Result<PinnedBuffer> {
        let rt = &self.runtime;
        let previous = rt
            .current_device()
            .map_err(|e| Error::hip(&e, "reading the current device"))?;
        if previous != device {
            rt.set_device(device)
                .map_err(|e| Error::hip(&e, "selecting the staging device"))?;
        }
        let buf = PinnedBuffer::new(Arc::clone(rt), len);
        if previous != device {
            rt.set_device(previous)
                .map_err(|e| Error::hip(&e, "restoring the current device"))?;
        }
        buf.map_err(|e| {
            let mut err = Error::hip(&e, format!("allocating {len} bytes of pinned memory"));
            if e.code() == hipfile_hip::HipErrorCode::OUT_OF_MEMORY {
                err = Error::new(ErrorKind::GpuMemoryPinningFailed, err.context().to_string());
            }
            err
        })
    }

    fn give_back(&self, device: i32, buf: PinnedBuffer) {
        self.lock().free.entry(device).or_default().push(buf);
        self.returned.notify_all();
    }
}

fn take_fitting(state: &mut PoolState, device: i32, len: usize) -> Option<PinnedBuffer> {
    let list = state.free.get_mut(&device)?;
    let i = list.iter().position(|b| b.len() >= len)?;
    Some(list.swap_remove(i))
}

fn take_any(state: &mut PoolState) -> Option<PinnedBuffer> {
    state.free.values_mut().find_map(Vec::pop)
}

/// A staging buffer on loan; goes back to the pool on drop.
#[derive(Debug)]
pub struct StagingLease {
    pool: Arc<StagingPool>,
    device: i32,
    buf: Option<PinnedBuffer>,
}

impl StagingLease {
    /// The buffer.
    pub fn buffer(&mut self) -> &mut PinnedBuffer {
        self.buf
            .as_mut()
            .expect("a lease holds its buffer until dropped")
    }
}

impl Drop for StagingLease {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            self.pool.give_back(self.device, buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hipfile_hip::sim::SimRuntime;
    use hipfile_hip::MemoryKind;

    #[test]
    fn buffers_are_reused_and_the_bound_holds() {
        let sim = Arc::new(SimRuntime::default());
        let pool = Arc::new(StagingPool::new(sim.clone()));
        let a = pool.lease(0, 8192, 16384).unwrap();
        let b = pool.lease(0, 8192, 16384).unwrap();
        assert_eq!(pool.held_bytes(), 16384);
        assert!(pool.lease(0, 32768, 16384).is_err());
        drop(a);
        let c = pool.lease(0, 4096, 16384).unwrap();
        assert_eq!(pool.held_bytes(), 16384, "the returned buffer is reused");
        drop((b, c));
        assert_eq!(sim.live_allocations(MemoryKind::Host), 2);
        drop(pool);
        assert_eq!(sim.live_allocations(MemoryKind::Host), 0);
    }

    #[test]
    fn a_full_pool_makes_the_next_lease_wait_for_a_return() {
        let sim = Arc::new(SimRuntime::default());
        let pool = Arc::new(StagingPool::new(sim));
        let held = pool.lease(0, 4096, 4096).unwrap();
        let p2 = Arc::clone(&pool);
        let waiter = std::thread::spawn(move || p2.lease(0, 4096, 4096).map(|_| ()));
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!waiter.is_finished());
        drop(held);
        waiter.join().unwrap().unwrap();
        assert_eq!(pool.held_bytes(), 4096);
    }
}
