//! Why a backend will not run a request: [`Decline`], with its details, and [`DeclineReason`],
//! the same without them, which statistics count declines by.

use std::fmt;

/// Why a backend will not run a request.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decline {
    /// Compat mode is disallowed (`HIPFILE_ALLOW_COMPAT_MODE=false` or the parameter).
    CompatModeDisallowed,
    /// Compat mode is forced: only the staged engine runs.
    CompatModeForced,
    /// The platform has no P2P driver.
    NoP2pDriver,
    /// The file has no O_DIRECT descriptor.
    NoDirectIo,
    /// The memory is not device memory.
    NotDeviceMemory,
    /// Offset, size or address misses the file's direct IO alignment.
    Misaligned {
        /// The alignment required.
        required: u32,
    },
    /// The filesystem is not one the direct path supports.
    UnsupportedFilesystem(String),
    /// A write that appends (`O_APPEND` descriptor): direct IO writes at an offset.
    Append,
    /// A write that runs past the process's file size limit (`RLIMIT_FSIZE`): the staged path
    /// writes up to the limit and fails with the kernel's `EFBIG`, where an O_DIRECT write cut at
    /// an unaligned limit would fail with `EINVAL` instead.
    FileSizeLimit {
        /// The limit in bytes.
        limit: u64,
    },
    /// Something else, explained.
    Other(String),
}

/// A [`Decline`] without its details: what statistics count declines by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeclineReason {
    /// [`Decline::CompatModeDisallowed`].
    CompatModeDisallowed,
    /// [`Decline::CompatModeForced`].
    CompatModeForced,
    /// [`Decline::NoP2pDriver`].
    NoP2pDriver,
    /// [`Decline::NoDirectIo`].
    NoDirectIo,
    /// [`Decline::NotDeviceMemory`].
    NotDeviceMemory,
    /// [`Decline::Misaligned`].
    Misaligned,
    /// [`Decline::UnsupportedFilesystem`].
    UnsupportedFilesystem,
    /// [`Decline::Append`].
    Append,
    /// [`Decline::FileSizeLimit`].
    FileSizeLimit,
    /// [`Decline::Other`].
    Other,
}

impl DeclineReason {
    /// Every reason.
    pub const ALL: [DeclineReason; 10] = [
        DeclineReason::CompatModeDisallowed,
        DeclineReason::CompatModeForced,
        DeclineReason::NoP2pDriver,
        DeclineReason::NoDirectIo,
        DeclineReason::NotDeviceMemory,
        DeclineReason::Misaligned,
        DeclineReason::UnsupportedFilesystem,
        DeclineReason::Append,
        DeclineReason::FileSizeLimit,
        DeclineReason::Other,
    ];

    /// A short name for reports (`misaligned`, `compat_forced`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DeclineReason::CompatModeDisallowed => "compat_disallowed",
            DeclineReason::CompatModeForced => "compat_forced",
            DeclineReason::NoP2pDriver => "no_p2p_driver",
            DeclineReason::NoDirectIo => "no_direct_io",
            DeclineReason::NotDeviceMemory => "not_device_memory",
            DeclineReason::Misaligned => "misaligned",
            DeclineReason::UnsupportedFilesystem => "unsupported_filesystem",
            DeclineReason::Append => "append",
            DeclineReason::FileSizeLimit => "file_size_limit",
            DeclineReason::Other => "other",
        }
    }

    /// The reason named `name` ([`DeclineReason::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }

    /// Position in [`DeclineReason::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

impl Decline {
    /// The kind of decline.
    pub fn reason(&self) -> DeclineReason {
        match self {
            Decline::CompatModeDisallowed => DeclineReason::CompatModeDisallowed,
            Decline::CompatModeForced => DeclineReason::CompatModeForced,
            Decline::NoP2pDriver => DeclineReason::NoP2pDriver,
            Decline::NoDirectIo => DeclineReason::NoDirectIo,
            Decline::NotDeviceMemory => DeclineReason::NotDeviceMemory,
            Decline::Misaligned { .. } => DeclineReason::Misaligned,
            Decline::UnsupportedFilesystem(_) => DeclineReason::UnsupportedFilesystem,
            Decline::Append => DeclineReason::Append,
            Decline::FileSizeLimit { .. } => DeclineReason::FileSizeLimit,
            Decline::Other(_) => DeclineReason::Other,
        }
    }
}

impl fmt::Display for Decline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Decline::CompatModeDisallowed => f.write_str("compat mode is disallowed"),
            Decline::CompatModeForced => f.write_str("compat mode is forced"),
            Decline::NoP2pDriver => f.write_str("the platform has no P2P driver"),
            Decline::NoDirectIo => f.write_str("the file has no O_DIRECT descriptor"),
            Decline::NotDeviceMemory => f.write_str("the buffer is not device memory"),
            Decline::Misaligned { required } => {
                write!(f, "offset, size or address not aligned to {required} bytes")
            }
            Decline::UnsupportedFilesystem(fs) => write!(f, "filesystem {fs} is not supported"),
            Decline::Append => f.write_str("the write appends (O_APPEND descriptor)"),
            Decline::FileSizeLimit { limit } => {
                write!(f, "the write runs past the file size limit ({limit} bytes)")
            }
            Decline::Other(why) => f.write_str(why),
        }
    }
}
