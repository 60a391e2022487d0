//! What the remote path keeps per open driver: its pinned staging pool and its counters.
//!
//! Every remote object of one open driver (one core session) shares one [`StagingPool`] of the
//! staged engine's kind, so lanes made for one object's read serve the next object's, and one
//! set of [`RemoteCounters`], which the session's statistics show as the path `remote`. They
//! live as long as the session: a driver closed and opened again starts new ones.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use hipfile::{Driver, Error, ErrorKind};
use hipfile_core::Session;
use hipfile_fallback::staging::{LaneLease, StagingPool};
use hipfile_hip::{GpuRuntime, StreamOrder};

use crate::error::{RemoteError, Result};
use crate::stats::{RemoteCounters, COUNTER_NAMES, PATH_NAME};

/// The remote path's share of one open driver.
#[derive(Debug)]
pub(crate) struct DriverLanes {
    pub(crate) runtime: Arc<dyn GpuRuntime>,
    pool: Arc<StagingPool>,
    pub(crate) counters: Arc<RemoteCounters>,
}

static OPEN: Mutex<Vec<(Weak<Session>, Arc<DriverLanes>)>> = Mutex::new(Vec::new());

impl DriverLanes {
    /// The share of the driver's open session (made on first use).
    pub(crate) fn of(driver: &Driver) -> Result<Arc<DriverLanes>> {
        let session = driver.core().session().ok_or_else(|| {
            RemoteError::Device(Error::new(
                ErrorKind::DriverNotInitialized,
                "the driver is not open",
            ))
        })?;
        let mut open = OPEN.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|(s, _)| s.strong_count() > 0);
        if let Some((_, lanes)) = open
            .iter()
            .find(|(s, _)| std::ptr::eq(s.as_ptr(), Arc::as_ptr(&session)))
        {
            return Ok(Arc::clone(lanes));
        }
        let runtime = Arc::clone(session.runtime());
        // Ordered with the default stream, as the staged engine's synchronous lanes: a read
        // returns with its bytes in device memory, visible to work the caller queues next.
        let pool = Arc::new(StagingPool::new(
            Arc::clone(&runtime),
            session.settings().event_wait,
            StreamOrder::WithDefaultStream,
        ));
        let lanes = Arc::new(DriverLanes {
            runtime,
            pool,
            counters: Arc::new(RemoteCounters::new(Some(
                session.stats().side_path(PATH_NAME, COUNTER_NAMES),
            ))),
        });
        open.push((Arc::downgrade(&session), Arc::clone(&lanes)));
        Ok(lanes)
    }

    /// A lane on `device` with halves of `chunk` bytes, waiting while `bound` pinned bytes are on
    /// loan.
    pub(crate) fn lane(&self, device: i32, chunk: usize, bound: usize) -> Result<LaneLease> {
        self.pool.take(device, chunk, bound, true)?.ok_or_else(|| {
            RemoteError::Device(Error::new(
                ErrorKind::InternalError,
                "the staging pool answered no lane to a waiting take",
            ))
        })
    }

    /// Pinned bytes the remote path holds.
    pub(crate) fn pinned_bytes(&self) -> usize {
        self.pool.held_bytes()
    }
}
