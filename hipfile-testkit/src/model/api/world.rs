//! The world behind the C API model: what a sequence's calls name, never as raw numbers, so a
//! sequence replays on a fresh world: [`FILES`] files, the descriptors of [`DESCRIPTORS`] on them,
//! [`ALLOCATIONS`] device allocations of [`ALLOCATION_LEN`] bytes, and the handles and memory an
//! operation passes.

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
