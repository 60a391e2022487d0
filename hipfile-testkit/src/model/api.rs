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

pub mod batch;

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;

use hipfile_core::{ErrorKind, IoOp, MAX_RW_COUNT};
use rustix::io::Errno;

use self::batch::{BatchRef, BatchState, EntrySpec, StatusCall, StatusFlaw, SubmitFlaw, Timeout};
use super::Answer;
use crate::fuzz::SplitMix64;

/// Files in the world.
pub const FILES: usize = 3;

/// Device allocations in the world.
pub const ALLOCATIONS: usize = 3;

/// Bytes of each device allocation (and of the pinned and managed memory).
pub const ALLOCATION_LEN: usize = 64 * 1024;

/// Longest initial file.
pub const INITIAL_FILE_MAX: usize = 96 * 1024;

/// Writes start below this offset (appends aside), so files stay small.
pub const WRITE_OFFSET_MAX: usize = 160 * 1024;

/// How a descriptor was opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// `O_RDWR`.
    ReadWrite,
    /// `O_RDONLY`.
    ReadOnly,
    /// `O_WRONLY`.
    WriteOnly,
    /// `O_RDWR | O_APPEND`.
    Append,
    /// `O_PATH`: names the file, allows no IO.
    PathOnly,
}

impl Access {
    /// Reads through it are allowed.
    pub fn readable(self) -> bool {
        matches!(self, Access::ReadWrite | Access::ReadOnly | Access::Append)
    }

    /// Writes through it are allowed.
    pub fn writable(self) -> bool {
        matches!(self, Access::ReadWrite | Access::WriteOnly | Access::Append)
    }
}

/// One descriptor of the world.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DescriptorSpec {
    /// The file it names.
    pub file: usize,
    /// How it was opened (a duplicate has its original's).
    pub access: Access,
    /// `dup(2)` of this earlier descriptor, rather than an `open(2)` of its own.
    pub dup_of: Option<usize>,
}

const fn open(file: usize, access: Access) -> DescriptorSpec {
    DescriptorSpec {
        file,
        access,
        dup_of: None,
    }
}

const fn dup(file: usize, access: Access, of: usize) -> DescriptorSpec {
    DescriptorSpec {
        file,
        access,
        dup_of: Some(of),
    }
}

/// The descriptors the world opens, in order.
pub const DESCRIPTORS: [DescriptorSpec; 9] = [
    open(0, Access::ReadWrite),
    dup(0, Access::ReadWrite, 0),
    open(0, Access::ReadOnly),
    open(1, Access::ReadWrite),
    dup(1, Access::ReadWrite, 3),
    open(1, Access::WriteOnly),
    open(2, Access::ReadWrite),
    open(2, Access::Append),
    open(2, Access::PathOnly),
];

/// What `hipFileHandleRegister` is given as the descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Target {
    /// One of [`DESCRIPTORS`].
    Descriptor(usize),
    /// `-1`.
    Negative,
    /// A number no descriptor has.
    Closed,
    /// One end of a socket pair.
    Socket,
    /// A directory.
    Directory,
}

/// How the arguments of `hipFileHandleRegister` are built.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegisterArgs {
    /// Both pointers valid, type `hipFileHandleTypeOpaqueFD`.
    Proper,
    /// `fh` is NULL.
    NullHandle,
    /// `descr` is NULL.
    NullDescriptor,
    /// Type `hipFileHandleTypeUserspaceFS`.
    UnsupportedType,
}

/// The handle an operation passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HandleRef {
    /// The latest handle issued for this descriptor (a value no driver issued if none was).
    Current(usize),
    /// The handle issued before that one: never registered any more.
    Previous(usize),
    /// NULL.
    Null,
    /// A value no driver issues.
    Bogus,
}

/// The memory an operation points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Memory {
    /// `offset` bytes into device allocation `allocation`.
    Device {
        /// Which allocation.
        allocation: usize,
        /// Bytes from its start.
        offset: usize,
    },
    /// Pinned host memory.
    PinnedHost,
    /// Managed memory.
    Managed,
    /// NULL.
    Null,
}

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
    Io {
        /// Which.
        op: IoOp,
        /// The file.
        handle: HandleRef,
        /// The buffer base.
        memory: Memory,
        /// Bytes.
        size: usize,
        /// File offset.
        file_offset: i64,
        /// Offset from the buffer base.
        buffer_offset: i64,
    },
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
            ApiOp::Io { op: IoOp::Read, .. } => "hipFileRead",
            ApiOp::Io {
                op: IoOp::Write, ..
            } => "hipFileWrite",
            ApiOp::BatchSetUp { .. } => "hipFileBatchIOSetUp",
            ApiOp::BatchSubmit { .. } => "hipFileBatchIOSubmit",
            ApiOp::BatchGetStatus { .. } => "hipFileBatchIOGetStatus",
            ApiOp::BatchCancel { .. } => "hipFileBatchIOCancel",
            ApiOp::BatchDestroy { .. } => "hipFileBatchIODestroy",
        }
    }
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

/// A request that moves bytes, validated: where and how. Applied to the model's contents by
/// [`ApiModel::apply_effect`], at once for `hipFileRead`/`hipFileWrite`, once it is known to have
/// completed for a batch entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Effect {
    op: IoOp,
    /// The descriptor whose handle the request names.
    descriptor: usize,
    file: usize,
    /// A write through an `O_APPEND` descriptor: it lands at the end of the file.
    append: bool,
    allocation: usize,
    /// The first device byte, from the allocation's start.
    start: usize,
    size: usize,
    file_offset: usize,
    /// The registered buffer the request goes through (allocation, offset), if any.
    registered: Option<(usize, usize)>,
}

/// The model's state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiModel {
    refcount: usize,
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
            refcount: 0,
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
        self.refcount
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

    fn open_implicitly(&mut self) {
        if self.refcount == 0 {
            self.refcount = 1;
        }
    }

    fn handle_file(&self, handle: HandleRef) -> Option<usize> {
        match handle {
            HandleRef::Current(d) if self.refcount > 0 && self.handles.contains(&d) => Some(d),
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
        let busy = self.busy();
        let files: Vec<usize> = self
            .dirty_files
            .iter()
            .copied()
            .filter(|f| !busy.iter().any(|e| e.file == *f))
            .collect();
        let allocations: Vec<usize> = self
            .dirty_allocations
            .iter()
            .copied()
            .filter(|a| !busy.iter().any(|e| e.allocation == *a))
            .collect();
        for f in &files {
            self.dirty_files.remove(f);
        }
        for a in &allocations {
            self.dirty_allocations.remove(a);
        }
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
                self.refcount += 1;
                Ok(Answer::Done)
            }
            ApiOp::DriverClose => {
                if self.refcount == 0 {
                    return Err(Failure::of(ErrorKind::DriverNotInitialized));
                }
                self.refcount -= 1;
                if self.refcount == 0 {
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
                if self.refcount == 0 {
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
            ApiOp::Io {
                op,
                handle,
                memory,
                size,
                file_offset,
                buffer_offset,
            } => {
                self.touch(handle, memory);
                match self.check_io(op, handle, memory, size, file_offset, buffer_offset)? {
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
        self.open_implicitly();
        if self.handles.insert(d) {
            Ok(Answer::Done)
        } else {
            Err(Failure::of(ErrorKind::HandleAlreadyRegistered))
        }
    }

    fn buf_register(&mut self, memory: Memory, len: usize) -> ApiExpected {
        self.open_implicitly();
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

    /// Bytes a request may use from `memory`'s base: its registered length, else the rest of
    /// its allocation; `None` when the memory is not device memory.
    fn room(&self, memory: Memory) -> Option<usize> {
        match memory {
            Memory::Device { allocation, offset } => Some(
                self.buffers
                    .get(&(allocation, offset))
                    .copied()
                    .unwrap_or(ALLOCATION_LEN - offset),
            ),
            _ => None,
        }
    }

    /// Validate a `hipFileRead`/`hipFileWrite` in the order the entry point checks: the error,
    /// `None` for a request that moves nothing (zero bytes), else the request.
    fn check_io(
        &self,
        op: IoOp,
        handle: HandleRef,
        memory: Memory,
        size: usize,
        file_offset: i64,
        buffer_offset: i64,
    ) -> Result<Option<Effect>, Failure> {
        if self.refcount == 0 {
            return Err(Failure::os(Errno::INVAL));
        }
        let Some(d) = self.handle_file(handle) else {
            return Err(Failure::of(ErrorKind::HandleNotRegistered));
        };
        if file_offset < 0 || buffer_offset < 0 {
            return Err(Failure::os(Errno::INVAL));
        }
        let size = size.min(MAX_RW_COUNT);
        if (file_offset as u64).saturating_add(size as u64) > i64::MAX as u64 {
            return Err(Failure::os(Errno::INVAL));
        }
        let past_end = Failure::of(ErrorKind::InvalidValue);
        if memory == Memory::Null {
            return Err(past_end);
        }
        let end = (buffer_offset as usize).checked_add(size).ok_or(past_end)?;
        let room = self
            .room(memory)
            .ok_or(Failure::of(ErrorKind::HipMemoryTypeInvalid))?;
        if end > room {
            return Err(past_end);
        }
        if !self.allows(d, op) {
            return Err(Failure::os(Errno::BADF));
        }
        if size == 0 {
            return Ok(None);
        }
        Ok(Some(self.effect(
            op,
            d,
            memory,
            size,
            file_offset,
            buffer_offset,
        )))
    }

    /// Whether descriptor `d` allows `op`.
    fn allows(&self, d: usize, op: IoOp) -> bool {
        let access = DESCRIPTORS[d].access;
        match op {
            IoOp::Read => access.readable(),
            IoOp::Write => access.writable(),
        }
    }

    /// The request of a call that passed its checks (`memory` is device memory).
    fn effect(
        &self,
        op: IoOp,
        d: usize,
        memory: Memory,
        size: usize,
        file_offset: i64,
        buffer_offset: i64,
    ) -> Effect {
        let Memory::Device { allocation, offset } = memory else {
            unreachable!("room() is None for other memory")
        };
        Effect {
            op,
            descriptor: d,
            file: DESCRIPTORS[d].file,
            append: op == IoOp::Write && DESCRIPTORS[d].access == Access::Append,
            allocation,
            start: offset + buffer_offset as usize,
            size,
            file_offset: usize::try_from(file_offset).unwrap_or(usize::MAX),
            registered: self
                .buffers
                .contains_key(&(allocation, offset))
                .then_some((allocation, offset)),
        }
    }

    /// Move the bytes of `effect` between the model's file and device memory; the bytes moved.
    fn apply_effect(&mut self, effect: &Effect) -> usize {
        self.dirty_files.insert(effect.file);
        self.dirty_allocations.insert(effect.allocation);
        let (start, size) = (effect.start, effect.size);
        let file = &mut self.files[effect.file];
        let device = &mut self.device[effect.allocation];
        match effect.op {
            IoOp::Read => {
                let from = effect.file_offset;
                let n = file.len().saturating_sub(from).min(size);
                if n > 0 {
                    device[start..start + n].copy_from_slice(&file[from..from + n]);
                }
                if n > 0 && n < size {
                    let last_block = n.div_ceil(self.block) * self.block;
                    self.unspecified
                        .push((effect.allocation, start + n..start + size.min(last_block)));
                }
                n
            }
            IoOp::Write => {
                let at = if effect.append {
                    file.len()
                } else {
                    effect.file_offset
                };
                if file.len() < at + size {
                    file.resize(at + size, 0);
                }
                file[at..at + size].copy_from_slice(&device[start..start + size]);
                size
            }
        }
    }

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
            6 => self.propose_io(IoOp::Read, rng),
            7 => self.propose_io(IoOp::Write, rng),
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

    fn propose_io(&self, op: IoOp, rng: &mut SplitMix64) -> ApiOp {
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
        let file_len = match handle {
            HandleRef::Current(d) | HandleRef::Previous(d) => self.files[DESCRIPTORS[d].file].len(),
            _ => 0,
        };
        let near = match op {
            IoOp::Read => file_len + 8192,
            IoOp::Write => (file_len + 8192).min(WRITE_OFFSET_MAX),
        };
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
        ApiOp::Io {
            op,
            handle,
            memory,
            size,
            file_offset,
            buffer_offset,
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

#[cfg(test)]
mod tests {
    use super::batch::{Event, EventStatus};
    use super::*;

    fn read(d: usize, memory: Memory, size: usize, file_offset: i64) -> ApiOp {
        ApiOp::Io {
            op: IoOp::Read,
            handle: HandleRef::Current(d),
            memory,
            size,
            file_offset,
            buffer_offset: 0,
        }
    }

    fn write(d: usize, memory: Memory, size: usize, file_offset: i64) -> ApiOp {
        ApiOp::Io {
            op: IoOp::Write,
            handle: HandleRef::Current(d),
            memory,
            size,
            file_offset,
            buffer_offset: 0,
        }
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
        EntrySpec {
            op,
            handle: HandleRef::Current(d),
            memory: Memory::Device {
                allocation: 0,
                offset,
            },
            size,
            file_offset: at,
            buffer_offset: 0,
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
        let over = ApiOp::Io {
            op: IoOp::Read,
            handle: HandleRef::Current(0),
            memory: BASE0,
            size: 2,
            file_offset: 0,
            buffer_offset: 0,
        };
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
