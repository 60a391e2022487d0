//! Why a backend will not run a request: [`Decline`], with its details, and [`DeclineReason`],
//! the same without them, which statistics count declines by. Both come from one list of the
//! reasons, each given once with its short name (the `declines!` list below).

use std::fmt;

/// Declares [`Decline`] from its variants, each with its short name for reports, and derives
/// from the same list [`DeclineReason`] (the variants without their details), its
/// [`DeclineReason::ALL`] and [`DeclineReason::name`], and [`Decline::reason`].
macro_rules! declines {
    ($(
        $(#[$doc:meta])*
        $variant:ident $({ $($(#[$field_doc:meta])* $field:ident: $field_ty:ty),* $(,)? })?
            $(($payload:ty))? => $name:literal,
    )*) => {
        /// Why a backend will not run a request.
        #[derive(Clone, Debug, PartialEq, Eq)]
        #[non_exhaustive]
        pub enum Decline {
            $(
                $(#[$doc])*
                $variant $({ $($(#[$field_doc])* $field: $field_ty),* })? $(($payload))?,
            )*
        }

        /// A [`Decline`] without its details: what statistics count declines by.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum DeclineReason {
            $(
                #[doc = concat!("[`Decline::", stringify!($variant), "`].")]
                $variant,
            )*
        }

        impl DeclineReason {
            /// Every reason.
            pub const ALL: [DeclineReason; [$($name),*].len()] = [$(DeclineReason::$variant),*];

            /// A short name for reports (`misaligned`, `compat_forced`, ...).
            pub fn name(self) -> &'static str {
                match self {
                    $(DeclineReason::$variant => $name,)*
                }
            }
        }

        impl Decline {
            /// The kind of decline.
            pub fn reason(&self) -> DeclineReason {
                match self {
                    $(Decline::$variant { .. } => DeclineReason::$variant,)*
                }
            }
        }
    };
}

declines! {
    /// Compat mode is disallowed (`HIPFILE_ALLOW_COMPAT_MODE=false` or the parameter).
    CompatModeDisallowed => "compat_disallowed",
    /// Compat mode is forced: only the staged engine runs.
    CompatModeForced => "compat_forced",
    /// The platform has no P2P driver.
    NoP2pDriver => "no_p2p_driver",
    /// The file has no O_DIRECT descriptor.
    NoDirectIo => "no_direct_io",
    /// The memory is not device memory.
    NotDeviceMemory => "not_device_memory",
    /// The memory is host memory (pinned, registered or pageable): the `host` backend serves it.
    HostMemory => "host_memory",
    /// The memory is device memory, and the backend serves host memory only.
    DeviceMemory => "device_memory",
    /// Offset, size or address misses the file's direct IO alignment.
    Misaligned {
        /// The alignment required.
        required: u32,
    } => "misaligned",
    /// The filesystem is not one the direct path supports.
    UnsupportedFilesystem(String) => "unsupported_filesystem",
    /// A write that appends (`O_APPEND` descriptor): direct IO writes at an offset.
    Append => "append",
    /// A write that runs past the process's file size limit (`RLIMIT_FSIZE`): the staged path
    /// writes up to the limit and fails with the kernel's `EFBIG`, where an O_DIRECT write cut at
    /// an unaligned limit would fail with `EINVAL` instead.
    FileSizeLimit {
        /// The limit in bytes.
        limit: u64,
    } => "file_size_limit",
    /// The platform's P2P driver (named) is not among the direct mechanisms the driver may use
    /// ([`crate::Settings::p2p_mechanisms`]).
    P2pMechanismMasked(&'static str) => "p2p_masked",
    /// Something else, explained.
    Other(String) => "other",
}

impl DeclineReason {
    /// The reason named `name` ([`DeclineReason::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.name() == name)
    }

    /// Position in [`DeclineReason::ALL`].
    pub fn index(self) -> usize {
        self as usize
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
            Decline::HostMemory => f.write_str("the buffer is host memory"),
            Decline::DeviceMemory => f.write_str("the buffer is device memory"),
            Decline::Misaligned { required } => {
                write!(f, "offset, size or address not aligned to {required} bytes")
            }
            Decline::UnsupportedFilesystem(fs) => write!(f, "filesystem {fs} is not supported"),
            Decline::Append => f.write_str("the write appends (O_APPEND descriptor)"),
            Decline::FileSizeLimit { limit } => {
                write!(f, "the write runs past the file size limit ({limit} bytes)")
            }
            Decline::P2pMechanismMasked(driver) => {
                write!(
                    f,
                    "the P2P driver {driver} is not an allowed direct mechanism"
                )
            }
            Decline::Other(why) => f.write_str(why),
        }
    }
}
