//! The C API of one process as a model: the registration rules of [`super::Model`] widened to
//! what a program sees through `libhipfile.so`, with the bytes of the files and of device memory.
//!
//! The world behind the model (built by the test that drives the real entry points) holds
//! [`FILES`] files, the descriptors of [`DESCRIPTORS`] on them (duplicated, read-only,
//! write-only, `O_APPEND` and `O_PATH` ones among them), a socket, a directory, and
//! [`ALLOCATIONS`] device allocations of [`ALLOCATION_LEN`] bytes, plus pinned host and managed
//! memory. Operations name these things, never raw numbers, so a sequence replays on a fresh
//! world. [`ApiModel::propose`] picks the next operation from the model's state (mostly handles
//! and buffers that are registered, sizes that fit), so random sequences reach IO often.
//!
//! Rules, in the order the entry points check them (upstream hipFile's; where hipfile-rs is
//! being brought in line, the rule is the target):
//! - `hipFileDriverOpen` adds a reference; `hipFileDriverClose` of a closed driver is
//!   `DriverNotInitialized`, and closing to zero forgets every handle and buffer.
//! - `hipFileHandleRegister`: NULL `fh` or `descr` is `InvalidValue` and a handle type other
//!   than `OpaqueFD` `IONotSupported`, both leaving the driver as it was. Then the descriptor:
//!   a number that names no open descriptor (negative, closed) is `InternalError`, a socket or a
//!   directory `InvalidFileType`, still leaving a closed driver closed. Then the driver opens
//!   implicitly (0 -> 1), and a descriptor number already registered is
//!   `HandleAlreadyRegistered`. A duplicated descriptor is another number: it registers on its
//!   own. `O_PATH` descriptors register.
//! - `hipFileHandleDeregister` returns nothing; it forgets a registered handle of an open driver
//!   and ignores anything else.
//! - `hipFileBufRegister` opens the driver first, then refuses NULL or a zero length
//!   (`InvalidValue`), memory that is not device memory (`HipMemoryTypeInvalid`), a range past
//!   the allocation (`HipPointerRangeError`) and a pointer already registered
//!   (`MemoryAlreadyRegistered`). Registration is keyed by pointer: an interior pointer of a
//!   registered allocation registers on its own.
//! - `hipFileBufDeregister` on a closed driver is `DriverClosing`, of a pointer not registered
//!   `MemoryNotRegistered`.
//! - `hipFileRead`/`hipFileWrite`: a closed driver is `-1`/`EINVAL`; a handle not registered
//!   `HandleNotRegistered`; a negative file or buffer offset `-1`/`EINVAL`; the size is capped at
//!   `MAX_RW_COUNT`; a file range that ends past the largest file offset is `-1`/`EINVAL`, as
//!   for `pread(2)`; a NULL buffer is `InvalidValue`. The buffer: a registered pointer bounds the request by its registered
//!   length, any other pointer by its allocation; past that is `InvalidValue`, and memory that is
//!   not device memory `HipMemoryTypeInvalid`. Then the descriptor, as it is now: `O_PATH`,
//!   reads through `O_WRONLY` and writes through `O_RDONLY` are `-1`/`EBADF`. Zero bytes return
//!   0. A read returns the bytes up to the end of the file (0 at or past it) and puts them in
//!   device memory; after a short read the buffer keeps what it held, except up to the end of
//!   the file's last block (counted in the file's direct IO alignment from the read's offset),
//!   where the direct path's O_DIRECT transfer may leave the zeroes it read past the end of the
//!   file: [`ApiModel::take_unspecified`] names those bytes. A write puts all of them in the file at the offset (zeroes fill a hole), or at
//!   its end for an `O_APPEND` descriptor, as `pwrite(2)` does.
//! - Batches (`hipFileBatchIO*`): the rules of [`batch`]. Their entries run while the sequence
//!   goes on, so the model learns how each ended from the events `hipFileBatchIOGetStatus`
//!   returns ([`ApiModel::reap`]), and, for the entries of a batch destroyed before they were
//!   collected, from the bytes they left ([`ApiModel::resolve`]). Until then a file or an
//!   allocation an entry may touch is not compared ([`ApiModel::take_comparable`]), and an
//!   operation whose outcome would depend on how far such an entry has come is not run
//!   ([`ApiModel::runnable`]).
//!
//! Who owns what: this module the calls ([`ApiOp`]), their answers and the model's state with
//! the driver and registration rules; `world` the things calls name (re-exported here); `io`
//! the checks and bytes of a read or write; [`batch`] the batch rules and the judging of
//! entries in flight; `propose` the random sequences.

pub mod batch;
mod io;
mod propose;
mod world;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use hipfile_core::{ErrorKind, IoOp};
use rustix::io::Errno;

use self::batch::{BatchRef, BatchState, EntrySpec, StatusCall, StatusFlaw, SubmitFlaw, Timeout};
use self::io::Effect;
pub use self::propose::random_sequence;
pub use self::world::{
    Access, DescriptorSpec, HandleRef, Memory, RegisterArgs, Target, ALLOCATIONS, ALLOCATION_LEN,
    DESCRIPTORS, FILES, INITIAL_FILE_MAX, WRITE_OFFSET_MAX,
};
use super::{Answer, UseCount};
use crate::fuzz::SplitMix64;

/// One call of the C API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApiOp {
    /// `hipFileDriverOpen`.
    DriverOpen,
    /// `hipFileDriverClose`.
    DriverClose,
    /// `hipFileHandleRegister`.
    HandleRegister {
        /// The descriptor.
        target: Target,
        /// How the call's arguments are built.
        args: RegisterArgs,
    },
    /// `hipFileHandleDeregister`.
    HandleDeregister {
        /// The handle.
        handle: HandleRef,
    },
    /// `hipFileBufRegister(ptr, len, 0)`.
    BufRegister {
        /// The pointer.
        memory: Memory,
        /// The length.
        len: usize,
    },
    /// `hipFileBufDeregister`.
    BufDeregister {
        /// The pointer.
        memory: Memory,
    },
    /// `hipFileRead` or `hipFileWrite`.
    Io(IoArgs),
    /// `hipFileBatchIOSetUp`: a batch in slot `slot` (`0..`[`batch::BATCH_SLOTS`]).
    BatchSetUp {
        /// Where the sequence keeps the handle.
        slot: usize,
        /// `max_nr`.
        max_nr: u32,
        /// The out-pointer is NULL.
        null_out: bool,
    },
    /// `hipFileBatchIOSubmit`.
    BatchSubmit {
        /// The batch.
        batch: BatchRef,
        /// The parameter array's entries.
        entries: Vec<EntrySpec>,
        /// How the call's arguments are broken, if they are.
        flaw: SubmitFlaw,
    },
    /// `hipFileBatchIOGetStatus`.
    BatchGetStatus {
        /// The batch.
        batch: BatchRef,
        /// `min_nr`.
        min_nr: u32,
        /// `*nr` on entry: room for this many events.
        nr: u32,
        /// The timeout.
        timeout: Timeout,
        /// How the call's arguments are broken, if they are.
        flaw: StatusFlaw,
    },
    /// `hipFileBatchIOCancel`.
    BatchCancel {
        /// The batch.
        batch: BatchRef,
    },
    /// `hipFileBatchIODestroy`.
    BatchDestroy {
        /// The batch.
        batch: BatchRef,
    },
}

impl ApiOp {
    /// The entry point's name, for tallies.
    pub fn name(&self) -> &'static str {
        match self {
            ApiOp::DriverOpen => "hipFileDriverOpen",
            ApiOp::DriverClose => "hipFileDriverClose",
            ApiOp::HandleRegister { .. } => "hipFileHandleRegister",
            ApiOp::HandleDeregister { .. } => "hipFileHandleDeregister",
            ApiOp::BufRegister { .. } => "hipFileBufRegister",
            ApiOp::BufDeregister { .. } => "hipFileBufDeregister",
            ApiOp::Io(IoArgs { op: IoOp::Read, .. }) => "hipFileRead",
            ApiOp::Io(IoArgs {
                op: IoOp::Write, ..
            }) => "hipFileWrite",
            ApiOp::BatchSetUp { .. } => "hipFileBatchIOSetUp",
            ApiOp::BatchSubmit { .. } => "hipFileBatchIOSubmit",
            ApiOp::BatchGetStatus { .. } => "hipFileBatchIOGetStatus",
            ApiOp::BatchCancel { .. } => "hipFileBatchIOCancel",
            ApiOp::BatchDestroy { .. } => "hipFileBatchIODestroy",
        }
    }
}

/// What a read or write is given: the arguments of `hipFileRead`/`hipFileWrite`, and of a batch
/// entry ([`EntrySpec`]) but its cookie.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoArgs {
    /// Read or write.
    pub op: IoOp,
    /// The file.
    pub handle: HandleRef,
    /// The buffer base (a batch entry's `devPtr_base`).
    pub memory: Memory,
    /// Bytes.
    pub size: usize,
    /// File offset.
    pub file_offset: i64,
    /// Offset from the buffer base (a batch entry's `devPtr_offset`).
    pub buffer_offset: i64,
}

/// A failed call: the kind, and the errno for [`ErrorKind::Os`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Failure {
    /// What failed.
    pub kind: ErrorKind,
    /// The errno of an OS failure.
    pub errno: Option<i32>,
}

impl Failure {
    fn of(kind: ErrorKind) -> Self {
        Failure { kind, errno: None }
    }

    fn os(errno: Errno) -> Self {
        Failure {
            kind: ErrorKind::Os,
            errno: Some(errno.raw_os_error()),
        }
    }

    /// As a batch event's `ret` carries it: `-errno` for an OS failure, else `-hipFileOpError_t`.
    pub fn negative_code(&self) -> i64 {
        match (self.kind, self.errno) {
            (ErrorKind::Os, Some(errno)) => -i64::from(errno),
            (kind, _) => -i64::from(
                kind.code()
                    .or(ErrorKind::InternalError.code())
                    .unwrap_or(i32::MAX),
            ),
        }
    }
}

/// What the model expects of one call.
pub type ApiExpected = Result<Answer, Failure>;

/// The model's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiModel {
    refs: UseCount,
    /// Descriptors (indices into [`DESCRIPTORS`]) whose current handle is registered.
    handles: BTreeSet<usize>,
    /// Registered buffers: (allocation, offset) -> registered length.
    buffers: BTreeMap<(usize, usize), usize>,
    files: Vec<Vec<u8>>,
    device: Vec<Vec<u8>>,
    /// Device bytes short reads left unspecified, not yet taken.
    unspecified: Vec<(usize, Range<usize>)>,
    /// The files' direct IO offset alignment.
    block: usize,
    /// Files and allocations operations touched since they were last compared.
    dirty_files: BTreeSet<usize>,
    dirty_allocations: BTreeSet<usize>,
    /// Live batches by serial number.
    batches: BTreeMap<u64, BatchState>,
    /// Per batch slot: the serial of the latest batch set up there and of the one before.
    batch_slots: Vec<[Option<u64>; 2]>,
    next_batch: u64,
    /// The lowest cookie not yet used.
    next_cookie: u64,
    /// Entries of destroyed batches that were never collected: did they run?
    undetermined: Vec<Effect>,
    /// The `hipFileBatchIOGetStatus` just applied, whose events [`ApiModel::reap`] takes.
    awaiting: Option<StatusCall>,
}

impl ApiModel {
    /// A closed driver and a world with these file and device contents.
    pub fn new(files: Vec<Vec<u8>>, device: Vec<Vec<u8>>) -> Self {
        assert_eq!(files.len(), FILES);
        assert_eq!(device.len(), ALLOCATIONS);
        ApiModel {
            refs: UseCount::default(),
            handles: BTreeSet::new(),
            buffers: BTreeMap::new(),
            files,
            device,
            unspecified: Vec::new(),
            block: 4096,
            dirty_files: BTreeSet::new(),
            dirty_allocations: BTreeSet::new(),
            batches: BTreeMap::new(),
            batch_slots: vec![[None; 2]; batch::BATCH_SLOTS],
            next_batch: 1,
            next_cookie: 1,
            undetermined: Vec::new(),
            awaiting: None,
        }
    }

    /// Random initial contents for a world: files of random length, device memory of random
    /// bytes.
    pub fn random(seed: u64) -> Self {
        let mut rng = SplitMix64::new(seed ^ 0x5EED_F11E);
        let files = (0..FILES)
            .map(|_| {
                let len = match rng.below(4) {
                    0 => rng.range(0..4096),
                    1 => 4096 * rng.range(0..INITIAL_FILE_MAX / 4096 + 1),
                    _ => rng.range(0..INITIAL_FILE_MAX + 1),
                };
                rng.bytes(len)
            })
            .collect();
        let device = (0..ALLOCATIONS)
            .map(|_| rng.bytes(ALLOCATION_LEN))
            .collect();
        ApiModel::new(files, device)
    }

    /// The files' direct IO offset alignment (what statx reports; 4096 unless told).
    pub fn set_block(&mut self, block: usize) {
        self.block = block.max(1);
    }

    /// `hipFileUseCount`.
    pub fn use_count(&self) -> usize {
        self.refs.get()
    }

    /// The files' contents.
    pub fn files(&self) -> &[Vec<u8>] {
        &self.files
    }

    /// The device allocations' contents.
    pub fn device(&self) -> &[Vec<u8>] {
        &self.device
    }

    /// Take the world's contents of a file after a disagreement, so later steps are judged on
    /// their own.
    pub fn set_file(&mut self, file: usize, bytes: Vec<u8>) {
        self.files[file] = bytes;
    }

    /// Take the world's contents of a device allocation, as [`ApiModel::set_file`].
    pub fn set_device(&mut self, allocation: usize, bytes: Vec<u8>) {
        self.device[allocation] = bytes;
    }

    fn handle_file(&self, handle: HandleRef) -> Option<usize> {
        match handle {
            HandleRef::Current(d) if self.refs.is_open() && self.handles.contains(&d) => Some(d),
            _ => None,
        }
    }

    /// Mark what an IO names as to be compared: the file behind its handle, its allocation.
    fn touch(&mut self, handle: HandleRef, memory: Memory) {
        if let HandleRef::Current(d) | HandleRef::Previous(d) = handle {
            self.dirty_files.insert(DESCRIPTORS[d].file);
        }
        if let Memory::Device { allocation, .. } = memory {
            self.dirty_allocations.insert(allocation);
        }
    }

    /// The files and allocations to compare with the world now, forgotten as dirty: those
    /// operations touched, where no batch entry in flight may be changing them.
    pub fn take_comparable(&mut self) -> (Vec<usize>, Vec<usize>) {
        let busy: Vec<(usize, usize)> =
            self.busy().iter().map(|e| (e.file, e.allocation)).collect();
        let files = take_clean(&mut self.dirty_files, |f| busy.iter().any(|b| b.0 == f));
        let allocations = take_clean(&mut self.dirty_allocations, |a| {
            busy.iter().any(|b| b.1 == a)
        });
        (files, allocations)
    }

    /// The bytes of `allocation` that short reads left unspecified since they were last taken:
    /// past the bytes a read returned, up to the end of the file's last block. Take them, and
    /// the world's bytes there, after every operation, whether or not the allocation is
    /// comparable ([`ApiModel::take_comparable`]): the read that left them has finished and no
    /// entry in flight touches them, so they are final, and a later write from them moves
    /// what the model holds there.
    pub fn take_unspecified(&mut self, allocation: usize) -> Vec<Range<usize>> {
        let (taken, kept) = std::mem::take(&mut self.unspecified)
            .into_iter()
            .partition(|(a, _)| *a == allocation);
        self.unspecified = kept;
        taken.into_iter().map(|(_, r)| r).collect()
    }

    /// Apply `op`; returns what the entry point must answer.
    pub fn apply(&mut self, op: &ApiOp) -> ApiExpected {
        self.awaiting = None;
        match *op {
            ApiOp::DriverOpen => {
                self.refs.open();
                Ok(Answer::Done)
            }
            ApiOp::DriverClose => {
                if self.refs.close().map_err(Failure::of)? {
                    self.handles.clear();
                    self.buffers.clear();
                    self.destroy_all_batches();
                }
                Ok(Answer::Done)
            }
            ApiOp::HandleRegister { target, args } => self.handle_register(target, args),
            ApiOp::HandleDeregister { handle } => {
                if let Some(d) = self.handle_file(handle) {
                    self.handles.remove(&d);
                }
                Ok(Answer::Done)
            }
            ApiOp::BufRegister { memory, len } => self.buf_register(memory, len),
            ApiOp::BufDeregister { memory } => {
                if !self.refs.is_open() {
                    return Err(Failure::of(ErrorKind::DriverClosing));
                }
                let key = match memory {
                    Memory::Device { allocation, offset } => (allocation, offset),
                    _ => return Err(Failure::of(ErrorKind::MemoryNotRegistered)),
                };
                match self.buffers.remove(&key) {
                    Some(_) => Ok(Answer::Done),
                    None => Err(Failure::of(ErrorKind::MemoryNotRegistered)),
                }
            }
            ApiOp::Io(ref io) => {
                self.touch(io.handle, io.memory);
                match self.check_io(io)? {
                    Some(effect) => Ok(Answer::Bytes(self.apply_effect(&effect))),
                    None => Ok(Answer::Bytes(0)),
                }
            }
            ApiOp::BatchSetUp {
                slot,
                max_nr,
                null_out,
            } => self.batch_setup(slot, max_nr, null_out),
            ApiOp::BatchSubmit {
                batch,
                ref entries,
                flaw,
            } => self.batch_submit(batch, entries, flaw),
            ApiOp::BatchGetStatus {
                batch,
                min_nr,
                nr,
                timeout,
                flaw,
            } => self.batch_status(batch, min_nr, nr, timeout, flaw),
            ApiOp::BatchCancel { batch } => self.batch_cancel(batch),
            ApiOp::BatchDestroy { batch } => {
                self.batch_destroy(batch);
                Ok(Answer::Done)
            }
        }
    }

    fn handle_register(&mut self, target: Target, args: RegisterArgs) -> ApiExpected {
        match args {
            RegisterArgs::NullHandle | RegisterArgs::NullDescriptor => {
                return Err(Failure::of(ErrorKind::InvalidValue))
            }
            RegisterArgs::UnsupportedType => return Err(Failure::of(ErrorKind::IoNotSupported)),
            RegisterArgs::Proper => {}
        }
        let d = match target {
            Target::Negative | Target::Closed => return Err(Failure::of(ErrorKind::InternalError)),
            Target::Socket | Target::Directory => {
                return Err(Failure::of(ErrorKind::InvalidFileType))
            }
            Target::Descriptor(d) => d,
        };
        self.refs.open_implicitly();
        if self.handles.insert(d) {
            Ok(Answer::Done)
        } else {
            Err(Failure::of(ErrorKind::HandleAlreadyRegistered))
        }
    }

    fn buf_register(&mut self, memory: Memory, len: usize) -> ApiExpected {
        self.refs.open_implicitly();
        if memory == Memory::Null || len == 0 {
            return Err(Failure::of(ErrorKind::InvalidValue));
        }
        let Memory::Device { allocation, offset } = memory else {
            return Err(Failure::of(ErrorKind::HipMemoryTypeInvalid));
        };
        if offset
            .checked_add(len)
            .map_or(true, |end| end > ALLOCATION_LEN)
        {
            return Err(Failure::of(ErrorKind::HipPointerRangeError));
        }
        match self.buffers.entry((allocation, offset)) {
            std::collections::btree_map::Entry::Occupied(_) => {
                Err(Failure::of(ErrorKind::MemoryAlreadyRegistered))
            }
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(len);
                Ok(Answer::Done)
            }
        }
    }
}

/// Take out of `dirty` (and answer) those that are not `busy`.
fn take_clean(dirty: &mut BTreeSet<usize>, busy: impl Fn(usize) -> bool) -> Vec<usize> {
    let clean: Vec<usize> = dirty.iter().copied().filter(|&x| !busy(x)).collect();
    for x in &clean {
        dirty.remove(x);
    }
    clean
}

#[cfg(test)]
mod tests {
    use super::batch::{Event, EventStatus};
    use super::*;

    /// `op` through descriptor `d`'s current handle, from `memory` itself.
    fn io(op: IoOp, d: usize, memory: Memory, size: usize, file_offset: i64) -> IoArgs {
        IoArgs {
            op,
            handle: HandleRef::Current(d),
            memory,
            size,
            file_offset,
            buffer_offset: 0,
        }
    }

    fn read(d: usize, memory: Memory, size: usize, file_offset: i64) -> ApiOp {
        ApiOp::Io(io(IoOp::Read, d, memory, size, file_offset))
    }

    fn write(d: usize, memory: Memory, size: usize, file_offset: i64) -> ApiOp {
        ApiOp::Io(io(IoOp::Write, d, memory, size, file_offset))
    }

    const BASE0: Memory = Memory::Device {
        allocation: 0,
        offset: 0,
    };

    #[test]
    fn io_moves_bytes_between_the_files_and_device_memory() {
        let mut m = ApiModel::new(
            vec![b"0123456789".to_vec(), vec![], vec![7; 4]],
            vec![vec![0; ALLOCATION_LEN]; ALLOCATIONS],
        );
        let reg = |d| ApiOp::HandleRegister {
            target: Target::Descriptor(d),
            args: RegisterArgs::Proper,
        };
        assert_eq!(
            m.apply(&read(0, BASE0, 4, 0)),
            Err(Failure::os(Errno::INVAL))
        );
        assert_eq!(m.apply(&reg(0)), Ok(Answer::Done));
        assert_eq!(
            m.apply(&reg(1)),
            Ok(Answer::Done),
            "a dup registers on its own"
        );
        assert_eq!(
            m.apply(&reg(0)),
            Err(Failure::of(ErrorKind::HandleAlreadyRegistered))
        );
        assert_eq!(m.apply(&read(0, BASE0, 4, 8)), Ok(Answer::Bytes(2)));
        assert_eq!(&m.device()[0][..3], b"89\0");
        assert_eq!(m.apply(&read(1, BASE0, 4, 10)), Ok(Answer::Bytes(0)));
        assert_eq!(m.apply(&write(1, BASE0, 2, 12)), Ok(Answer::Bytes(2)));
        assert_eq!(m.files()[0], b"0123456789\0\089");
        // O_APPEND appends; O_PATH and the wrong direction are EBADF.
        assert_eq!(m.apply(&reg(7)), Ok(Answer::Done));
        assert_eq!(m.apply(&write(7, BASE0, 2, 0)), Ok(Answer::Bytes(2)));
        assert_eq!(m.files()[2], [7, 7, 7, 7, b'8', b'9']);
        assert_eq!(m.apply(&reg(8)), Ok(Answer::Done));
        assert_eq!(
            m.apply(&read(8, BASE0, 2, 0)),
            Err(Failure::os(Errno::BADF))
        );
        assert_eq!(m.apply(&reg(2)), Ok(Answer::Done));
        assert_eq!(
            m.apply(&write(2, BASE0, 2, 0)),
            Err(Failure::os(Errno::BADF))
        );
        // A registered interior pointer bounds requests by its length.
        let inner = Memory::Device {
            allocation: 1,
            offset: 100,
        };
        assert_eq!(
            m.apply(&ApiOp::BufRegister {
                memory: inner,
                len: 8
            }),
            Ok(Answer::Done)
        );
        assert_eq!(
            m.apply(&read(0, inner, 9, 0)),
            Err(Failure::of(ErrorKind::InvalidValue))
        );
        assert_eq!(
            m.apply(&read(0, Memory::Managed, 1, 0)),
            Err(Failure::of(ErrorKind::HipMemoryTypeInvalid))
        );
        assert_eq!(m.apply(&ApiOp::DriverClose), Ok(Answer::Done));
        assert_eq!(
            m.apply(&ApiOp::BufDeregister { memory: inner }),
            Err(Failure::of(ErrorKind::DriverClosing))
        );
    }

    #[test]
    fn random_sequences_reach_every_entry_point_and_are_reproducible() {
        let ops = random_sequence(7, 400);
        assert_eq!(ops, random_sequence(7, 400));
        let mut names: Vec<&str> = ops.iter().map(ApiOp::name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 13, "{names:?}");
    }

    fn reg(d: usize) -> ApiOp {
        ApiOp::HandleRegister {
            target: Target::Descriptor(d),
            args: RegisterArgs::Proper,
        }
    }

    fn entry(op: IoOp, d: usize, offset: usize, size: usize, at: i64, cookie: u64) -> EntrySpec {
        let memory = Memory::Device {
            allocation: 0,
            offset,
        };
        EntrySpec {
            io: io(op, d, memory, size, at),
            cookie,
        }
    }

    fn submit(entries: Vec<EntrySpec>) -> ApiOp {
        ApiOp::BatchSubmit {
            batch: BatchRef::Current(0),
            entries,
            flaw: SubmitFlaw::None,
        }
    }

    fn status(min_nr: u32, nr: u32) -> ApiOp {
        ApiOp::BatchGetStatus {
            batch: BatchRef::Current(0),
            min_nr,
            nr,
            timeout: Timeout::Forever,
            flaw: StatusFlaw::None,
        }
    }

    fn event(cookie: u64, status: EventStatus, ret: i64) -> Event {
        Event {
            cookie,
            status,
            ret,
        }
    }

    #[test]
    fn batch_entries_move_their_bytes_when_an_event_says_they_completed() {
        let mut m = ApiModel::new(
            vec![b"0123456789".to_vec(), vec![], vec![]],
            vec![vec![7; ALLOCATION_LEN]; ALLOCATIONS],
        );
        let setup = ApiOp::BatchSetUp {
            slot: 0,
            max_nr: 3,
            null_out: false,
        };
        assert_eq!(m.apply(&setup), Ok(Answer::Done), "a closed driver sets up");
        assert_eq!(m.use_count(), 0);
        let read = entry(IoOp::Read, 0, 0, 4, 8, 1);
        assert_eq!(
            m.apply(&submit(vec![read])),
            Err(Failure::of(ErrorKind::DriverNotInitialized))
        );
        m.apply(&reg(0)).unwrap();
        m.apply(&reg(2)).unwrap();
        // All or nothing: the bad second entry refuses the first.
        let past = entry(IoOp::Read, 0, ALLOCATION_LEN - 2, 4, 0, 2);
        assert_eq!(
            m.apply(&submit(vec![read, past])),
            Err(Failure::of(ErrorKind::InvalidValue))
        );
        let at_end = entry(IoOp::Read, 0, ALLOCATION_LEN, 0, 0, 3);
        assert_eq!(
            m.apply(&submit(vec![at_end])),
            Err(Failure::of(ErrorKind::InvalidValue)),
            "the first byte lies inside the memory even for no bytes"
        );
        let refused = entry(IoOp::Write, 2, 100, 4, 0, 4);
        let past_eof = entry(IoOp::Read, 0, 200, 4, 10, 5);
        assert_eq!(
            m.apply(&submit(vec![read, refused, past_eof])),
            Ok(Answer::Done)
        );
        assert_eq!(
            m.apply(&submit(vec![entry(IoOp::Read, 0, 300, 1, 0, 6)])),
            Err(Failure::of(ErrorKind::BatchFull))
        );
        assert_eq!(
            m.take_comparable().1,
            Vec::<usize>::new(),
            "nothing ran yet"
        );
        // The read may not have run: an IO over its memory waits.
        let over = ApiOp::Io(io(IoOp::Read, 0, BASE0, 2, 0));
        assert!(!m.runnable(&over));
        assert!(
            !m.runnable(&status(4, 4)),
            "no wait for more than are in flight"
        );
        assert_eq!(m.apply(&status(1, 2)), Ok(Answer::Done));
        // The two that ended at submission may come first.
        assert_eq!(
            m.reap(&[
                event(
                    4,
                    EventStatus::Failed,
                    -i64::from(Errno::BADF.raw_os_error())
                ),
                event(5, EventStatus::Complete, 0)
            ]),
            Vec::<String>::new()
        );
        assert_eq!(m.apply(&status(1, 1)), Ok(Answer::Done));
        assert_eq!(
            m.reap(&[event(1, EventStatus::Complete, 2)]),
            Vec::<String>::new()
        );
        assert_eq!(&m.device()[0][..3], b"89\x07");
        assert_eq!(m.take_unspecified(0), vec![2..4]);
        assert!(m.runnable(&over));

        // Canceled only after a cancel; a destroyed batch's entries are judged by their bytes.
        let write = entry(IoOp::Write, 0, 0, 2, 20, 7);
        assert_eq!(m.apply(&submit(vec![write])), Ok(Answer::Done));
        assert_eq!(m.apply(&status(1, 1)), Ok(Answer::Done));
        assert_eq!(m.reap(&[event(7, EventStatus::Canceled, 0)]).len(), 1);
        let write = entry(IoOp::Write, 0, 0, 2, 20, 8);
        m.apply(&submit(vec![write])).unwrap();
        m.apply(&ApiOp::BatchCancel {
            batch: BatchRef::Current(0),
        })
        .unwrap();
        m.apply(&status(1, 1)).unwrap();
        assert_eq!(
            m.reap(&[event(8, EventStatus::Canceled, 0)]),
            Vec::<String>::new()
        );
        let write = entry(IoOp::Write, 0, 0, 2, 20, 9);
        m.apply(&submit(vec![write])).unwrap();
        m.apply(&ApiOp::BatchDestroy {
            batch: BatchRef::Current(0),
        })
        .unwrap();
        assert!(m.has_undetermined());
        let mut world = m.files().to_vec();
        world[0].resize(22, 0);
        world[0][20..22].copy_from_slice(b"89");
        let device = m.device().to_vec();
        assert_eq!(m.resolve(&world, &device), (1, 0));
        assert_eq!(m.files()[0], world[0]);
        assert_eq!(
            m.apply(&status(1, 1)),
            Err(Failure::of(ErrorKind::InvalidValue)),
            "the batch is gone"
        );
    }
}
