//! Proposals: the next operation of a random sequence, picked from the model's state so that
//! sequences reach IO and batches often, and never one whose outcome would depend on how far an
//! entry in flight has come ([`ApiModel::runnable`]).

use hipfile_core::{IoOp, MAX_RW_COUNT};

use super::batch::{
    BatchRef, BatchState, EntrySpec, Footprint, StatusFlaw, SubmitFlaw, Timeout, BATCH_SLOTS,
    MAX_BATCH,
};
use super::{
    ApiModel, ApiOp, HandleRef, IoArgs, Memory, RegisterArgs, Target, ALLOCATIONS, ALLOCATION_LEN,
    DESCRIPTORS, WRITE_OFFSET_MAX,
};
use crate::fuzz::SplitMix64;

impl ApiModel {
    /// The next operation of a random sequence, picked with the state in view: mostly
    /// registered handles and buffers and sizes that fit, sometimes everything else; never one
    /// that is not [`ApiModel::runnable`].
    pub fn propose(&self, rng: &mut SplitMix64) -> ApiOp {
        for _ in 0..32 {
            let op = self.propose_any(rng);
            if self.runnable(&op) {
                return op;
            }
        }
        ApiOp::DriverOpen
    }

    fn propose_any(&self, rng: &mut SplitMix64) -> ApiOp {
        let kind = rng.weighted(&[3, 3, 10, 4, 8, 4, 16, 16, 3, 14, 12, 3, 2]);
        // Without a live batch most batch calls set one up instead, so that batches see work.
        if kind > 8 && !self.has_live_batch() && rng.percent(75) {
            return self.propose_setup(rng);
        }
        match kind {
            0 => ApiOp::DriverOpen,
            1 => ApiOp::DriverClose,
            2 => ApiOp::HandleRegister {
                target: match rng.weighted(&[88, 3, 3, 3, 3]) {
                    0 => Target::Descriptor(rng.range(0..DESCRIPTORS.len())),
                    1 => Target::Negative,
                    2 => Target::Closed,
                    3 => Target::Socket,
                    _ => Target::Directory,
                },
                args: match rng.weighted(&[92, 3, 3, 2]) {
                    0 => RegisterArgs::Proper,
                    1 => RegisterArgs::NullHandle,
                    2 => RegisterArgs::NullDescriptor,
                    _ => RegisterArgs::UnsupportedType,
                },
            },
            3 => ApiOp::HandleDeregister {
                handle: self.pick_handle(rng),
            },
            4 => {
                let memory = match rng.weighted(&[90, 4, 4, 2]) {
                    0 => random_device(rng),
                    1 => Memory::PinnedHost,
                    2 => Memory::Managed,
                    _ => Memory::Null,
                };
                let rest = match memory {
                    Memory::Device { offset, .. } => ALLOCATION_LEN - offset,
                    _ => ALLOCATION_LEN,
                };
                let len = match rng.weighted(&[50, 37, 5, 3]) {
                    0 => rest,
                    1 => rng.range(1..rest + 1),
                    2 => rest + rng.range(1..4097),
                    _ => 0,
                };
                ApiOp::BufRegister { memory, len }
            }
            5 => ApiOp::BufDeregister {
                memory: match rng.weighted(&[70, 20, 5, 5]) {
                    0 => self
                        .pick_registered(rng)
                        .unwrap_or_else(|| random_device(rng)),
                    1 => random_device(rng),
                    2 => Memory::PinnedHost,
                    _ => Memory::Null,
                },
            },
            6 => ApiOp::Io(self.propose_io(IoOp::Read, rng)),
            7 => ApiOp::Io(self.propose_io(IoOp::Write, rng)),
            8 => self.propose_setup(rng),
            9 => self.propose_submit(rng),
            10 => self.propose_status(rng),
            11 => ApiOp::BatchCancel {
                batch: self.pick_batch(rng),
            },
            _ => ApiOp::BatchDestroy {
                batch: self.pick_batch(rng),
            },
        }
    }

    fn pick_handle(&self, rng: &mut SplitMix64) -> HandleRef {
        let registered: Vec<usize> = self.handles.iter().copied().collect();
        match rng.weighted(&[85, 8, 4, 3]) {
            0 if !registered.is_empty() => {
                HandleRef::Current(registered[rng.range(0..registered.len())])
            }
            0 | 1 => HandleRef::Current(rng.range(0..DESCRIPTORS.len())),
            2 => HandleRef::Previous(rng.range(0..DESCRIPTORS.len())),
            _ if rng.percent(50) => HandleRef::Null,
            _ => HandleRef::Bogus,
        }
    }

    fn pick_registered(&self, rng: &mut SplitMix64) -> Option<Memory> {
        let keys: Vec<(usize, usize)> = self.buffers.keys().copied().collect();
        if keys.is_empty() {
            return None;
        }
        let (allocation, offset) = keys[rng.range(0..keys.len())];
        Some(Memory::Device { allocation, offset })
    }

    /// The length of the file behind `handle` (0 for no file), and how far past it the file
    /// offsets of an `op` reach (writes stay below [`WRITE_OFFSET_MAX`]).
    fn file_len_and_reach(&self, handle: HandleRef, op: IoOp) -> (usize, usize) {
        let file_len = match handle {
            HandleRef::Current(d) | HandleRef::Previous(d) => self.files[DESCRIPTORS[d].file].len(),
            _ => 0,
        };
        let near = match op {
            IoOp::Read => file_len + 8192,
            IoOp::Write => (file_len + 8192).min(WRITE_OFFSET_MAX),
        };
        (file_len, near)
    }

    fn propose_io(&self, op: IoOp, rng: &mut SplitMix64) -> IoArgs {
        let handle = self.pick_handle(rng);
        let memory = match rng.weighted(&[60, 20, 12, 3, 3, 2]) {
            0 => self
                .pick_registered(rng)
                .unwrap_or_else(|| random_device(rng)),
            1 => Memory::Device {
                allocation: rng.range(0..ALLOCATIONS),
                offset: 0,
            },
            2 => random_device(rng),
            3 => Memory::PinnedHost,
            4 => Memory::Managed,
            _ => Memory::Null,
        };
        let room = self.room(memory).unwrap_or(ALLOCATION_LEN);
        let buffer_offset: i64 = match rng.weighted(&[45, 20, 25, 2, 3, 3, 2]) {
            0 => 0,
            1 => (4096 * rng.range(0..room / 4096 + 1)) as i64,
            2 => rng.range(0..room + 1) as i64,
            3 => room as i64,
            4 => room.saturating_sub(rng.range(1..64)) as i64,
            5 if rng.percent(50) => -1,
            5 => i64::MIN,
            _ => i64::MAX,
        };
        let avail = usize::try_from(buffer_offset).map_or(0, |b| room.saturating_sub(b));
        let size = match rng.weighted(&[4, 45, 25, 10, 5, 2, 2, 7]) {
            0 => 0,
            1 => rng.range(1..avail.min(32 * 1024) + 1),
            2 => 4096 * rng.range(0..avail / 4096 + 1),
            3 => avail,
            4 => avail + rng.range(1..4097),
            5 => usize::MAX,
            6 => MAX_RW_COUNT + 1,
            _ => rng.range(1..513),
        };
        let (file_len, near) = self.file_len_and_reach(handle, op);
        let file_offset: i64 = match rng.weighted(&[18, 27, 30, 10, 5, 4, 3]) {
            0 => 0,
            1 => (4096 * rng.range(0..near / 4096 + 1)) as i64,
            2 => rng.range(0..near + 1) as i64,
            3 => file_len.min(near) as i64,
            4 => (file_len + rng.range(1..8192)).min(near + 1) as i64,
            5 if rng.percent(50) => -1,
            5 => i64::MIN,
            _ if op == IoOp::Read && rng.percent(50) => 1 << 40,
            // Near the largest file offset: past it (EINVAL) or, for reads, past the end.
            _ if op == IoOp::Read => i64::MAX - rng.range(0..2 * size.min(1 << 20) + 1) as i64,
            // A write never lands there: the filesystem's own limit would decide (EFBIG).
            _ if rng.percent(50) => i64::MAX - rng.range(0..size.clamp(1, 1 << 20)) as i64,
            _ => 4096 * rng.range(0..WRITE_OFFSET_MAX / 4096) as i64,
        };
        IoArgs {
            op,
            handle,
            memory,
            size,
            file_offset,
            buffer_offset,
        }
    }

    fn has_live_batch(&self) -> bool {
        (0..BATCH_SLOTS).any(|slot| self.serial(BatchRef::Current(slot)).is_some())
    }

    fn pick_batch(&self, rng: &mut SplitMix64) -> BatchRef {
        let live: Vec<usize> = (0..BATCH_SLOTS)
            .filter(|&slot| self.serial(BatchRef::Current(slot)).is_some())
            .collect();
        match rng.weighted(&[85, 7, 4, 2, 2]) {
            0 if !live.is_empty() => BatchRef::Current(live[rng.range(0..live.len())]),
            0 | 1 => BatchRef::Current(rng.range(0..BATCH_SLOTS)),
            2 => BatchRef::Previous(rng.range(0..BATCH_SLOTS)),
            3 => BatchRef::Null,
            _ => BatchRef::Bogus,
        }
    }

    fn propose_setup(&self, rng: &mut SplitMix64) -> ApiOp {
        let empty: Vec<usize> = (0..BATCH_SLOTS)
            .filter(|&slot| self.serial(BatchRef::Current(slot)).is_none())
            .collect();
        let slot = if !empty.is_empty() && rng.percent(85) {
            empty[rng.range(0..empty.len())]
        } else {
            rng.range(0..BATCH_SLOTS)
        };
        let max_nr = match rng.weighted(&[80, 6, 5, 5, 4]) {
            0 => rng.range(1..9) as u32,
            1 => MAX_BATCH,
            2 => 0,
            3 => MAX_BATCH + 1,
            _ => u32::MAX,
        };
        ApiOp::BatchSetUp {
            slot,
            max_nr,
            null_out: rng.percent(2),
        }
    }

    fn propose_submit(&self, rng: &mut SplitMix64) -> ApiOp {
        let batch = self.pick_batch(rng);
        let room = self.live(batch).map_or(4, BatchState::room);
        let count = match rng.weighted(&[88, 8, 4]) {
            0 => rng.range(1..room.clamp(1, 6) + 1),
            1 => room + 1,
            _ => 0,
        };
        let mut entries: Vec<EntrySpec> = Vec::new();
        let mut claimed: Vec<Footprint> = Vec::new();
        for i in 0..count {
            let cookie = self.next_cookie + i as u64;
            let mut entry = self.propose_entry(rng, cookie);
            // Keep an entry that moves bytes clear of the others and of those in flight.
            for attempt in 0..6 {
                let Some(effect) = self.would_move(&entry) else {
                    break;
                };
                let footprint = self.footprint(&effect);
                if !self.conflicts(&footprint) && !claimed.iter().any(|c| c.meets(&footprint)) {
                    claimed.push(footprint);
                    break;
                }
                entry = if attempt < 5 {
                    self.propose_entry(rng, cookie)
                } else {
                    EntrySpec {
                        io: IoArgs {
                            size: 0,
                            ..entry.io
                        },
                        ..entry
                    }
                };
            }
            entries.push(entry);
        }
        let flaw = match rng.weighted(&[92, 2, 2, 2, 2]) {
            1 => SubmitFlaw::ZeroCount,
            2 => SubmitFlaw::NullParams,
            3 if !entries.is_empty() => SubmitFlaw::BadMode(rng.range(0..entries.len())),
            4 if !entries.is_empty() => SubmitFlaw::BadOpcode(rng.range(0..entries.len())),
            _ => SubmitFlaw::None,
        };
        ApiOp::BatchSubmit {
            batch,
            entries,
            flaw,
        }
    }

    /// One entry: mostly a registered handle, device memory and a size that fits, now and then
    /// anything `hipFileRead`/`hipFileWrite` is given.
    fn propose_entry(&self, rng: &mut SplitMix64, cookie: u64) -> EntrySpec {
        let op = if rng.percent(50) {
            IoOp::Read
        } else {
            IoOp::Write
        };
        if rng.percent(12) {
            return EntrySpec {
                io: self.propose_io(op, rng),
                cookie,
            };
        }
        let handle = self.pick_handle(rng);
        let memory = match self.pick_registered(rng) {
            Some(registered) if rng.percent(60) => registered,
            _ => random_device(rng),
        };
        let room = self.room(memory).unwrap_or(ALLOCATION_LEN).max(1);
        let buffer_offset = match rng.weighted(&[50, 25, 25]) {
            0 => 0,
            1 => 4096 * rng.range(0..room.div_ceil(4096)),
            _ => rng.range(0..room),
        };
        let avail = room - buffer_offset;
        let size = match rng.weighted(&[5, 50, 30, 15]) {
            0 => 0,
            1 => rng.range(1..avail.min(16 * 1024) + 1),
            2 => 4096 * rng.range(0..avail / 4096 + 1),
            _ => avail,
        };
        let (file_len, near) = self.file_len_and_reach(handle, op);
        let file_offset = match rng.weighted(&[20, 30, 30, 10, 10]) {
            0 => 0,
            1 => 4096 * rng.range(0..near / 4096 + 1),
            2 => rng.range(0..near + 1),
            3 => file_len.min(near),
            _ => (file_len + rng.range(1..8192)).min(near + 1),
        } as i64;
        let io = IoArgs {
            op,
            handle,
            memory,
            size,
            file_offset,
            buffer_offset: buffer_offset as i64,
        };
        EntrySpec { io, cookie }
    }

    fn propose_status(&self, rng: &mut SplitMix64) -> ApiOp {
        let batch = self.pick_batch(rng);
        let in_flight = self.live(batch).map_or(0, BatchState::in_flight);
        let nr = match rng.weighted(&[90, 5, 5]) {
            0 => rng.range(1..in_flight + 3),
            1 => in_flight.max(1),
            _ => 0,
        };
        let min_nr = match rng.weighted(&[60, 30, 5, 5]) {
            0 => rng.range(0..nr.min(in_flight) + 1),
            1 => nr.min(in_flight),
            2 => 0,
            _ => nr + 1,
        };
        let timeout = match rng.weighted(&[45, 30, 19, 3, 3]) {
            0 => Timeout::Forever,
            1 => Timeout::Zero,
            2 => Timeout::Millis(2),
            3 => Timeout::NegativeSeconds,
            _ => Timeout::NanosOutOfRange,
        };
        let flaw = match rng.weighted(&[96, 2, 2]) {
            0 => StatusFlaw::None,
            1 => StatusFlaw::NullCount,
            _ => StatusFlaw::NullEvents,
        };
        ApiOp::BatchGetStatus {
            batch,
            min_nr: min_nr as u32,
            nr: nr as u32,
            timeout,
            flaw,
        }
    }
}

fn random_device(rng: &mut SplitMix64) -> Memory {
    let allocation = rng.range(0..ALLOCATIONS);
    let offset = match rng.weighted(&[50, 25, 25]) {
        0 => 0,
        1 => 4096 * rng.range(0..ALLOCATION_LEN / 4096),
        _ => rng.range(0..ALLOCATION_LEN),
    };
    Memory::Device { allocation, offset }
}

/// A sequence of `len` operations from `seed`, each proposed by the model in the state the
/// previous ones left (the model is applied as it goes, every batch entry taken as completed
/// as soon as it can be: [`ApiModel::assume_completed`]). A test against the C ABI proposes
/// as it runs instead, from what the entries really did.
pub fn random_sequence(seed: u64, len: usize) -> Vec<ApiOp> {
    let mut model = ApiModel::random(seed);
    let mut rng = SplitMix64::new(seed);
    (0..len)
        .map(|_| {
            let op = model.propose(&mut rng);
            let _ = model.apply(&op);
            model.assume_completed();
            op
        })
        .collect()
}
