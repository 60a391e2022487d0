//! Events: each recording is a job on its stream that marks the event's generation complete,
//! keeping the failure of the work before it, as a GPU's sticky error does.

use std::sync::{Arc, Condvar, Mutex, PoisonError};

use super::{lock, SimRuntime};
use crate::error::{HipError, HipErrorCode, HipResult};

#[derive(Debug, Default)]
struct EventState {
    recorded: u64,
    completed: u64,
    /// The failure of the work its stream ran before the last completed recording, if any: as
    /// on a real GPU, where a failed copy's error is sticky, waiting for the event reports it.
    failure: Option<HipErrorCode>,
}

#[derive(Debug, Default)]
pub(super) struct SimEvent {
    state: Mutex<EventState>,
    done: Condvar,
}

impl SimRuntime {
    fn event(&self, id: usize) -> HipResult<Arc<SimEvent>> {
        lock(&self.events)
            .get(&id)
            .cloned()
            .ok_or_else(|| HipError::call("event lookup", HipErrorCode::INVALID_HANDLE))
    }

    /// A new event; its number.
    pub(super) fn create_event(&self) -> HipResult<usize> {
        let mut events = lock(&self.events);
        let id = self.new_handle(&events, "hipEventCreate")?;
        events.insert(id, Arc::new(SimEvent::default()));
        Ok(id)
    }

    /// Record event number `event` on stream number `stream`.
    pub(super) fn record_event(&self, event: usize, stream: usize) -> HipResult<()> {
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
    pub(super) fn synchronize_event(&self, event: usize) -> HipResult<()> {
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
    pub(super) fn query_event(&self, event: usize) -> HipResult<bool> {
        let ev = self.event(event)?;
        let st = lock(&ev.state);
        match st.failure {
            Some(code) if st.completed >= st.recorded => Err(HipError::call("hipEventQuery", code)),
            _ => Ok(st.completed >= st.recorded),
        }
    }

    /// Forget event number `event`.
    pub(super) fn destroy_event(&self, event: usize) -> HipResult<()> {
        lock(&self.events)
            .remove(&event)
            .map(|_| ())
            .ok_or_else(|| HipError::call("hipEventDestroy", HipErrorCode::INVALID_HANDLE))
    }
}
