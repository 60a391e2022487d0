//! Staging through pinned host memory: the asynchronous copies of the staged engine, with the
//! memory and the stream they need owned in one place.
//!
//! A [`StagingLane`] is what one thread needs to stage a stream of pieces: one pinned buffer cut
//! in two halves (so reading piece k+1 overlaps copying piece k), a private stream on the lane's
//! device, and one event per half. Asynchronous copies are `unsafe` at the runtime level because
//! both sides must stay valid and untouched until the copy completes; the lane keeps that promise
//! itself, which is why its operations are safe:
//!
//! - a half with a copy in flight cannot be borrowed: [`StagingLane::half_mut`] and
//!   [`StagingLane::half`] first wait for that half's event;
//! - the device side is a [`DeviceRange`], checked by the runtime's pointer query and bounded;
//! - the pinned memory is freed only after the stream has drained ([`Drop`]).

use std::fmt;
use std::sync::Arc;

use crate::error::{HipError, HipErrorCode, HipResult};
use crate::runtime::{DeviceGuard, GpuRuntime, OwnedEvent, OwnedStream, PinnedBuffer, StreamOrder};
use crate::vouched::device_range::DeviceRange;
use crate::vouched::file_pins::PinnedFileRange;

/// Which step of making a lane failed, so the caller can name the resource.
#[derive(Debug)]
pub enum LaneError {
    /// Selecting the lane's device.
    Device(HipError),
    /// Allocating the pinned halves.
    Pinned(HipError),
    /// Creating the stream or an event.
    Stream(HipError),
}

/// How a lane waits for a staged copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum EventWait {
    /// Poll the copy's event and yield the core between polls (the default). GPU runtimes spin
    /// in their own wait calls; with as many IO threads as cores, a spinning waiter takes the
    /// core a reader needs.
    #[default]
    Yield,
    /// The runtime's own blocking wait (`hipEventSynchronize`).
    Runtime,
}

/// Two pinned staging halves, a stream and an event per half (and one for copies out of pinned
/// file pages), on one device.
pub struct StagingLane {
    device: i32,
    chunk: usize,
    wait: EventWait,
    order: StreamOrder,
    buffer: PinnedBuffer,
    pub(super) stream: OwnedStream,
    events: [OwnedEvent; 2],
    pending: [bool; 2],
    /// Recorded after copies out of pinned file pages, so `finish` waits for them the way the
    /// lane waits for its halves ([`EventWait`]) rather than always with the runtime's blocking
    /// stream wait.
    tail: OwnedEvent,
    /// Whether work was queued on the stream since it last drained.
    queued: bool,
    /// Whether work was queued after the last event recorded (a copy out of pinned file pages,
    /// or a copy whose event could not be recorded): only draining the stream covers it.
    untracked: bool,
    /// The pinned file ranges that copies queued since the last drain read from; kept until the
    /// stream has drained, so none is unpinned under a running copy.
    pub(super) held: Vec<Arc<PinnedFileRange>>,
}

impl StagingLane {
    /// A lane on `device` with halves of `chunk` bytes; the pinned memory is touched, so the
    /// first piece staged through it pays no page faults. The caller's current device is left
    /// as it was. `wait` says how the lane waits for its copies; `order` how its stream is
    /// ordered with the null stream ([`StreamOrder::Independent`] for work that must never queue
    /// behind an application's stream).
    pub fn new(
        runtime: &Arc<dyn GpuRuntime>,
        device: i32,
        chunk: usize,
        wait: EventWait,
        order: StreamOrder,
    ) -> Result<Self, LaneError> {
        let _on_device = DeviceGuard::switch(&**runtime, device).map_err(LaneError::Device)?;
        let buffer = PinnedBuffer::new(Arc::clone(runtime), chunk.saturating_mul(2))
            .map_err(LaneError::Pinned)?;
        let stream =
            OwnedStream::with_order(Arc::clone(runtime), order).map_err(LaneError::Stream)?;
        let event = || OwnedEvent::new(Arc::clone(runtime)).map_err(LaneError::Stream);
        Ok(StagingLane {
            device,
            chunk,
            wait,
            order,
            buffer,
            stream,
            events: [event()?, event()?],
            pending: [false; 2],
            tail: event()?,
            queued: false,
            untracked: false,
            held: Vec::new(),
        })
    }

    /// The device this lane copies to and from.
    pub fn device(&self) -> i32 {
        self.device
    }

    /// How the lane's stream is ordered with the null stream.
    pub fn order(&self) -> StreamOrder {
        self.order
    }

    /// Bytes in each half.
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// Pinned bytes the lane holds (both halves).
    pub fn bytes(&self) -> usize {
        self.chunk.saturating_mul(2)
    }

    /// Whether half `slot` (0 or 1) has a copy queued that has not been waited for.
    pub fn is_pending(&self, slot: usize) -> bool {
        self.pending[slot]
    }

    /// Wait for the copy queued on half `slot`, if any; reports its failure.
    pub fn wait(&mut self, slot: usize) -> HipResult<()> {
        if self.pending[slot] {
            wait_for(&self.events[slot], self.wait)?;
            self.pending[slot] = false;
        }
        Ok(())
    }

    /// Half `slot` (0 or 1), to fill before [`StagingLane::upload`]: waits for a copy still
    /// queued on it first.
    pub fn half_mut(&mut self, slot: usize) -> HipResult<&mut [u8]> {
        self.wait(slot)?;
        let chunk = self.chunk;
        Ok(&mut self.buffer.as_mut_slice()[slot * chunk..(slot + 1) * chunk])
    }

    /// Half `slot`, to read after [`StagingLane::download`]: waits for its copy first.
    pub fn half(&mut self, slot: usize) -> HipResult<&[u8]> {
        self.wait(slot)?;
        let chunk = self.chunk;
        Ok(&self.buffer.as_slice()[slot * chunk..(slot + 1) * chunk])
    }

    /// Wait for both halves, and drain the stream where work was queued after the last event
    /// (copies out of pinned file pages): afterwards nothing of this lane is in flight. Reports
    /// the first failure of the queued work; returns at once when nothing was queued since the
    /// last drain. A stream that could not be drained still counts as busy (dropping the lane
    /// tries again).
    pub fn finish(&mut self) -> HipResult<()> {
        if !self.queued {
            return Ok(());
        }
        let halves = self.wait(0).and(self.wait(1));
        self.pending = [false; 2];
        // An event completes once all work queued before it has: when the last work queued was
        // followed by one, waiting for the halves drained the stream; otherwise an event recorded
        // now covers the rest. A failure, or an event that could not be recorded, drains the
        // stream itself.
        let mut failed = halves.err();
        let drained = if failed.is_some() {
            self.stream.synchronize()
        } else if self.untracked {
            match self.tail.record(&self.stream) {
                Ok(()) => wait_for(&self.tail, self.wait).or_else(|e| {
                    // The copies failed: drain what may still run, and report the failure.
                    failed = Some(e);
                    self.stream.synchronize()
                }),
                Err(_) => self.stream.synchronize(),
            }
        } else {
            Ok(())
        };
        if drained.is_ok() {
            self.queued = false;
            self.untracked = false;
            self.held.clear();
        }
        match failed {
            Some(e) => Err(e),
            None => drained,
        }
    }

    pub(super) fn mark_queued(&mut self) {
        self.queued = true;
        self.untracked = true;
    }

    pub(crate) fn runtime(&self) -> &Arc<dyn GpuRuntime> {
        self.buffer.runtime()
    }

    pub(super) fn half_ptr(&mut self, slot: usize) -> *mut u8 {
        // In bounds: `slot` is 0 or 1 (checked by the caller) and the buffer holds two halves.
        self.buffer.as_mut_ptr().wrapping_add(slot * self.chunk)
    }

    pub(crate) fn check(&self, slot: usize, range: &DeviceRange) -> HipResult<()> {
        if slot > 1 || range.len() > self.chunk {
            return Err(HipError::call(
                "StagingLane: piece larger than a half",
                HipErrorCode::INVALID_VALUE,
            ));
        }
        if !range.belongs_to(self.runtime()) {
            return Err(HipError::call(
                "StagingLane: memory of another runtime",
                HipErrorCode::INVALID_VALUE,
            ));
        }
        Ok(())
    }

    pub(super) fn record(&mut self, slot: usize) -> HipResult<()> {
        // Marked before recording: if recording fails, the copy may still be queued, and the
        // half must still be waited for (the stream drain in `finish` and drop covers it).
        self.pending[slot] = true;
        self.events[slot].record(&self.stream)?;
        self.untracked = false;
        Ok(())
    }
}

/// Wait for `event` the way `how` says.
fn wait_for(event: &OwnedEvent, how: EventWait) -> HipResult<()> {
    match how {
        EventWait::Runtime => event.synchronize(),
        EventWait::Yield => {
            while !event.query()? {
                std::thread::yield_now();
            }
            Ok(())
        }
    }
}

impl fmt::Debug for StagingLane {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StagingLane")
            .field("device", &self.device)
            .field("chunk", &self.chunk)
            .field("order", &self.order)
            .field("pending", &self.pending)
            .finish()
    }
}

impl Drop for StagingLane {
    fn drop(&mut self) {
        // The pinned halves are freed right after this: no copy may still use them. A failure
        // here was (or will be) reported by `finish`; there is no caller to tell from drop.
        if self.queued {
            let _ = self.stream.synchronize();
        }
        // Only now may the pinned file ranges copies read from be unpinned.
        self.held.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::{SimConfig, SimRuntime};
    use crate::{DeviceBuffer, MemoryKind};

    #[test]
    fn pieces_round_trip_through_a_lane() {
        let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
        let dev = DeviceBuffer::new(rt.clone(), 8192).unwrap();
        let range = DeviceRange::query(&rt, dev.ptr(), 8192).unwrap();
        let mut lane = StagingLane::new(
            &rt,
            0,
            4096,
            EventWait::Yield,
            StreamOrder::WithDefaultStream,
        )
        .unwrap();
        for (slot, byte) in [(0, 1u8), (1, 2u8)] {
            lane.half_mut(slot).unwrap().fill(byte);
            lane.upload(slot, &range.slice(slot * 4096, 4096).unwrap())
                .unwrap();
            assert!(lane.is_pending(slot));
        }
        lane.finish().unwrap();
        let host = dev.to_vec().unwrap();
        assert!(host[..4096].iter().all(|b| *b == 1) && host[4096..].iter().all(|b| *b == 2));
        lane.download(0, &range.slice(4096, 100).unwrap()).unwrap();
        assert_eq!(lane.half(0).unwrap()[..100], [2u8; 100]);
        assert!(!lane.is_pending(0), "reading a half waits for its copy");
    }

    #[test]
    fn a_lane_refuses_pieces_it_cannot_hold_and_memory_of_another_runtime() {
        let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
        let other: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
        let dev = DeviceBuffer::new(rt.clone(), 8192).unwrap();
        let foreign = DeviceBuffer::new(other.clone(), 4096).unwrap();
        let mut lane = StagingLane::new(
            &rt,
            0,
            4096,
            EventWait::Yield,
            StreamOrder::WithDefaultStream,
        )
        .unwrap();
        let big = DeviceRange::query(&rt, dev.ptr(), 8192).unwrap();
        assert!(lane.upload(0, &big).is_err());
        assert!(lane.upload(2, &big.slice(0, 16).unwrap()).is_err());
        let theirs = DeviceRange::query(&other, foreign.ptr(), 4096).unwrap();
        assert!(lane.download(0, &theirs).is_err());
        assert!(!lane.is_pending(0));
    }

    #[test]
    fn lanes_live_on_their_device_and_leave_the_current_device_alone() {
        let sim = Arc::new(SimRuntime::new(SimConfig {
            devices: 2,
            ..SimConfig::default()
        }));
        let rt: Arc<dyn GpuRuntime> = sim.clone();
        let lane =
            StagingLane::new(&rt, 1, 4096, EventWait::Runtime, StreamOrder::Independent).unwrap();
        assert_eq!(lane.device(), 1);
        assert_eq!(lane.order(), StreamOrder::Independent);
        assert_eq!(rt.current_device().unwrap(), 0);
        assert_eq!(sim.live_allocations(MemoryKind::Host), 1);
        drop(lane);
        assert_eq!(sim.live_allocations(MemoryKind::Host), 0);
        assert_eq!(sim.live_streams(), 0);
    }
}
