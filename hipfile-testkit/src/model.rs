//! A reference model of the registration state machine, in plain Rust with no IO, and proptest
//! strategies that generate operation sequences for it.
//!
//! The model encodes upstream hipFile's semantics, not hipfile-core's code: a property test
//! applies the same sequence to the model and to a real [`hipfile_core::Driver`] and compares
//! every answer and the use count after every step.
//!
//! Rules:
//! - `DriverOpen` opens (count 1) or adds a reference; `DriverClose` of a closed driver is
//!   `DriverNotInitialized`; closing to zero forgets every file and buffer.
//! - `HandleRegister` checks the descriptor first (a number that names no open descriptor fails
//!   with `InternalError`, as upstream's status query of it does, and leaves a closed driver
//!   closed), then opens the driver implicitly (count 0 -> 1; an open
//!   driver's count is not touched), then refuses a descriptor already registered
//!   (`HandleAlreadyRegistered`).
//! - `BufRegister` opens the driver implicitly *before* its checks, so it stays open even when
//!   registration fails: non-device memory is `HipMemoryTypeInvalid`, a range past the
//!   allocation `HipPointerRangeError`, a registered buffer `MemoryAlreadyRegistered`.
//! - `BufDeregister` on a closed driver is `DriverClosing`; of an unknown buffer
//!   `MemoryNotRegistered`. `HandleDeregister` on a closed driver is `DriverNotInitialized`; of an
//!   unknown handle `HandleNotRegistered`.
//! - Reads and writes on a closed driver fail with `EINVAL` ([`ErrorKind::Os`]) and open nothing;
//!   on an unregistered handle they are `HandleNotRegistered`; otherwise they move all `size`
//!   bytes (the world behind the model keeps files long enough).
//!
//! [`api`] widens this model to the C API: more kinds of descriptors and memory, and the bytes
//! that reads and writes move.

pub mod api;

use std::collections::BTreeSet;

use hipfile_core::ErrorKind;
use proptest::prelude::*;

/// Number of files and of buffers the model juggles; few, so that duplicates and stale handles
/// come up often.
pub const SLOTS: usize = 3;

/// Length of each slot's device allocation (and of each file in the world behind the model).
pub const BUFFER_LEN: usize = 8192;

/// The largest `size` [`op_strategy`] puts in a read or write: what a [`BufTarget::Prefix`]
/// registration covers, so every registered buffer holds every request.
pub const MAX_IO_SIZE: usize = BUFFER_LEN / 2;

/// What memory a `BufRegister` names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BufTarget {
    /// The slot's device allocation, whole (a duplicate when it is already registered).
    Device,
    /// Pinned host memory: not device memory.
    Host,
    /// Managed memory: not device memory either.
    Managed,
    /// The slot's device allocation, one byte longer than it is.
    PastEnd,
    /// The first [`MAX_IO_SIZE`] bytes of the slot's device allocation: the same pointer as
    /// `Device` with a shorter length, so a duplicate of it (registration is keyed by pointer).
    Prefix,
}

/// One call on the driver. Files and buffers are named by slot (`0..SLOTS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// `hipFileDriverOpen`.
    DriverOpen,
    /// `hipFileDriverClose`.
    DriverClose,
    /// `hipFileHandleRegister` of the slot's file (`valid: false`: of a descriptor that is not open).
    HandleRegister {
        /// The file.
        slot: usize,
        /// Whether the descriptor is an open regular file.
        valid: bool,
    },
    /// `hipFileHandleDeregister` of the slot's most recent handle.
    HandleDeregister {
        /// The file.
        slot: usize,
    },
    /// `hipFileBufRegister`.
    BufRegister {
        /// The buffer.
        slot: usize,
        /// What memory.
        target: BufTarget,
    },
    /// `hipFileBufDeregister` of the slot's device allocation.
    BufDeregister {
        /// The buffer.
        slot: usize,
    },
    /// `hipFileRead` of `size` bytes at offset 0 from the slot's file into its device buffer.
    Read {
        /// The file (and buffer).
        slot: usize,
        /// Bytes.
        size: usize,
    },
    /// `hipFileWrite` of `size` bytes at offset 0, as `Read`.
    Write {
        /// The file (and buffer).
        slot: usize,
        /// Bytes.
        size: usize,
    },
}

/// A successful answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The call succeeded and returns nothing.
    Done,
    /// A read or write moved this many bytes.
    Bytes(usize),
}

/// What the model expects of one call.
pub type Expected = Result<Answer, ErrorKind>;

/// The driver's references (`hipFileUseCount`), counted as upstream hipFile counts them; both
/// models keep one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct UseCount(usize);

impl UseCount {
    pub(crate) fn get(self) -> usize {
        self.0
    }

    pub(crate) fn is_open(self) -> bool {
        self.0 > 0
    }

    /// `hipFileDriverOpen`: one reference more.
    pub(crate) fn open(&mut self) {
        self.0 += 1;
    }

    /// The open a registration makes: a closed driver opens (0 -> 1), an open one's count is not
    /// touched.
    pub(crate) fn open_implicitly(&mut self) {
        if self.0 == 0 {
            self.0 = 1;
        }
    }

    /// `hipFileDriverClose`: one reference less; whether that closed the driver (which then
    /// forgets everything registered). A closed driver is `DriverNotInitialized`.
    pub(crate) fn close(&mut self) -> Result<bool, ErrorKind> {
        if self.0 == 0 {
            return Err(ErrorKind::DriverNotInitialized);
        }
        self.0 -= 1;
        Ok(self.0 == 0)
    }
}

/// The model's state.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Model {
    refs: UseCount,
    files: BTreeSet<usize>,
    buffers: BTreeSet<usize>,
}

impl Model {
    /// A closed driver with nothing registered.
    pub fn new() -> Self {
        Model::default()
    }

    /// Whether the driver is open.
    pub fn is_open(&self) -> bool {
        self.refs.is_open()
    }

    /// `hipFileUseCount`.
    pub fn use_count(&self) -> usize {
        self.refs.get()
    }

    /// Slots whose file is registered.
    pub fn files(&self) -> &BTreeSet<usize> {
        &self.files
    }

    /// Slots whose device buffer is registered.
    pub fn buffers(&self) -> &BTreeSet<usize> {
        &self.buffers
    }

    /// Apply `op`; returns what the driver must answer.
    pub fn apply(&mut self, op: &Op) -> Expected {
        match *op {
            Op::DriverOpen => {
                self.refs.open();
                Ok(Answer::Done)
            }
            Op::DriverClose => {
                if self.refs.close()? {
                    self.files.clear();
                    self.buffers.clear();
                }
                Ok(Answer::Done)
            }
            Op::HandleRegister { slot, valid } => {
                if !valid {
                    return Err(ErrorKind::InternalError);
                }
                self.refs.open_implicitly();
                if self.files.insert(slot) {
                    Ok(Answer::Done)
                } else {
                    Err(ErrorKind::HandleAlreadyRegistered)
                }
            }
            Op::HandleDeregister { slot } => deregister(
                self.refs,
                &mut self.files,
                slot,
                ErrorKind::DriverNotInitialized,
                ErrorKind::HandleNotRegistered,
            ),
            Op::BufRegister { slot, target } => {
                self.refs.open_implicitly();
                match target {
                    BufTarget::Host | BufTarget::Managed => Err(ErrorKind::HipMemoryTypeInvalid),
                    BufTarget::PastEnd => Err(ErrorKind::HipPointerRangeError),
                    BufTarget::Device | BufTarget::Prefix if self.buffers.insert(slot) => {
                        Ok(Answer::Done)
                    }
                    BufTarget::Device | BufTarget::Prefix => {
                        Err(ErrorKind::MemoryAlreadyRegistered)
                    }
                }
            }
            Op::BufDeregister { slot } => deregister(
                self.refs,
                &mut self.buffers,
                slot,
                ErrorKind::DriverClosing,
                ErrorKind::MemoryNotRegistered,
            ),
            Op::Read { slot, size } | Op::Write { slot, size } => {
                if !self.is_open() {
                    Err(ErrorKind::Os)
                } else if !self.files.contains(&slot) {
                    Err(ErrorKind::HandleNotRegistered)
                } else {
                    Ok(Answer::Bytes(size))
                }
            }
        }
    }
}

/// Take `slot` out of `table`: `closed` on a closed driver, `unknown` when it is not there.
fn deregister(
    refs: UseCount,
    table: &mut BTreeSet<usize>,
    slot: usize,
    closed: ErrorKind,
    unknown: ErrorKind,
) -> Expected {
    if !refs.is_open() {
        Err(closed)
    } else if table.remove(&slot) {
        Ok(Answer::Done)
    } else {
        Err(unknown)
    }
}

fn slot() -> impl Strategy<Value = usize> {
    0..SLOTS
}

/// One operation, weighted towards registrations and IO so sequences reach interesting states.
pub fn op_strategy() -> impl Strategy<Value = Op> {
    let target = prop_oneof![
        5 => Just(BufTarget::Device),
        2 => Just(BufTarget::Prefix),
        1 => Just(BufTarget::Host),
        1 => Just(BufTarget::Managed),
        1 => Just(BufTarget::PastEnd),
    ];
    prop_oneof![
        2 => Just(Op::DriverOpen),
        2 => Just(Op::DriverClose),
        4 => (slot(), prop::bool::weighted(0.85))
            .prop_map(|(slot, valid)| Op::HandleRegister { slot, valid }),
        2 => slot().prop_map(|slot| Op::HandleDeregister { slot }),
        4 => (slot(), target).prop_map(|(slot, target)| Op::BufRegister { slot, target }),
        2 => slot().prop_map(|slot| Op::BufDeregister { slot }),
        3 => (slot(), 0..=MAX_IO_SIZE).prop_map(|(slot, size)| Op::Read { slot, size }),
        3 => (slot(), 0..=MAX_IO_SIZE).prop_map(|(slot, size)| Op::Write { slot, size }),
    ]
}

/// Sequences of up to `max_len` operations.
pub fn ops_strategy(max_len: usize) -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op_strategy(), 1..=max_len.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn implicit_opens_and_closing_to_zero_follow_upstream() {
        let mut m = Model::new();
        assert_eq!(
            m.apply(&Op::DriverClose),
            Err(ErrorKind::DriverNotInitialized)
        );
        assert_eq!(
            m.apply(&Op::HandleRegister {
                slot: 0,
                valid: false
            }),
            Err(ErrorKind::InternalError)
        );
        assert!(!m.is_open());
        assert_eq!(m.apply(&Op::Read { slot: 0, size: 1 }), Err(ErrorKind::Os));
        assert!(!m.is_open());
        assert_eq!(
            m.apply(&Op::BufRegister {
                slot: 1,
                target: BufTarget::Host
            }),
            Err(ErrorKind::HipMemoryTypeInvalid)
        );
        assert_eq!(m.use_count(), 1);
        assert_eq!(
            m.apply(&Op::HandleRegister {
                slot: 0,
                valid: true
            }),
            Ok(Answer::Done)
        );
        assert_eq!(m.use_count(), 1, "implicit opens do not add references");
        assert_eq!(m.apply(&Op::DriverOpen), Ok(Answer::Done));
        assert_eq!(m.use_count(), 2);
        assert_eq!(
            m.apply(&Op::BufRegister {
                slot: 0,
                target: BufTarget::Device
            }),
            Ok(Answer::Done)
        );
        assert_eq!(
            m.apply(&Op::BufRegister {
                slot: 0,
                target: BufTarget::Device
            }),
            Err(ErrorKind::MemoryAlreadyRegistered)
        );
        m.apply(&Op::DriverClose).unwrap();
        m.apply(&Op::DriverClose).unwrap();
        assert!(m.files().is_empty() && m.buffers().is_empty());
        assert_eq!(
            m.apply(&Op::BufDeregister { slot: 0 }),
            Err(ErrorKind::DriverClosing)
        );
    }
}
