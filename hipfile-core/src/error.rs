//! One error type for the whole library.
//!
//! [`ErrorKind`] lines up one to one with upstream's `hipFileOpError_t` (every member except
//! `hipFileSuccess` and the `hipFileIOMaxError` marker), plus [`ErrorKind::Os`] for failures that
//! the C API reports as `-1` with `errno`. The numeric C values live in exactly one place: the
//! facade's C ABI.

use std::fmt;

use hipfile_hip::{HipError, HipErrorCode};

/// What went wrong, in upstream hipFile's vocabulary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
#[allow(missing_docs)] // each variant is named after the hipFileOpError_t member it stands for
pub enum ErrorKind {
    DriverNotInitialized,
    DriverInvalidProps,
    DriverUnsupportedLimit,
    DriverVersionMismatch,
    DriverVersionReadError,
    DriverClosing,
    PlatformNotSupported,
    IoNotSupported,
    DeviceNotSupported,
    DriverError,
    HipDriverError,
    HipPointerInvalid,
    HipMemoryTypeInvalid,
    HipPointerRangeError,
    HipContextMismatch,
    InvalidMappingSize,
    InvalidMappingRange,
    InvalidFileType,
    InvalidFileOpenFlag,
    DioNotSet,
    InvalidValue,
    MemoryAlreadyRegistered,
    MemoryNotRegistered,
    PermissionDenied,
    DriverAlreadyOpen,
    HandleNotRegistered,
    HandleAlreadyRegistered,
    DeviceNotFound,
    InternalError,
    GetNewFdFailed,
    DriverSetupError,
    IoDisabled,
    BatchSubmitFailed,
    GpuMemoryPinningFailed,
    BatchFull,
    AsyncNotSupported,
    /// An operating-system failure, reported to C callers as `-1` with `errno`.
    Os,
}

impl ErrorKind {
    /// Every kind, for exhaustive tests and tables.
    pub const ALL: [ErrorKind; 37] = [
        ErrorKind::DriverNotInitialized,
        ErrorKind::DriverInvalidProps,
        ErrorKind::DriverUnsupportedLimit,
        ErrorKind::DriverVersionMismatch,
        ErrorKind::DriverVersionReadError,
        ErrorKind::DriverClosing,
        ErrorKind::PlatformNotSupported,
        ErrorKind::IoNotSupported,
        ErrorKind::DeviceNotSupported,
        ErrorKind::DriverError,
        ErrorKind::HipDriverError,
        ErrorKind::HipPointerInvalid,
        ErrorKind::HipMemoryTypeInvalid,
        ErrorKind::HipPointerRangeError,
        ErrorKind::HipContextMismatch,
        ErrorKind::InvalidMappingSize,
        ErrorKind::InvalidMappingRange,
        ErrorKind::InvalidFileType,
        ErrorKind::InvalidFileOpenFlag,
        ErrorKind::DioNotSet,
        ErrorKind::InvalidValue,
        ErrorKind::MemoryAlreadyRegistered,
        ErrorKind::MemoryNotRegistered,
        ErrorKind::PermissionDenied,
        ErrorKind::DriverAlreadyOpen,
        ErrorKind::HandleNotRegistered,
        ErrorKind::HandleAlreadyRegistered,
        ErrorKind::DeviceNotFound,
        ErrorKind::InternalError,
        ErrorKind::GetNewFdFailed,
        ErrorKind::DriverSetupError,
        ErrorKind::IoDisabled,
        ErrorKind::BatchSubmitFailed,
        ErrorKind::GpuMemoryPinningFailed,
        ErrorKind::BatchFull,
        ErrorKind::AsyncNotSupported,
        ErrorKind::Os,
    ];
}

/// An error of hipfile-rs: a kind, the GPU runtime's error number or the OS errno when one caused
/// it, and a sentence for people.
#[derive(Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    hip: Option<HipErrorCode>,
    errno: Option<i32>,
    context: String,
}

impl Error {
    /// An error of `kind` explained by `context`.
    pub fn new(kind: ErrorKind, context: impl Into<String>) -> Self {
        Error {
            kind,
            hip: None,
            errno: None,
            context: context.into(),
        }
    }

    /// An OS failure with `errno`.
    pub fn os(errno: i32, context: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::Os,
            hip: None,
            errno: Some(errno),
            context: context.into(),
        }
    }

    /// An OS failure from a `std::io::Error` (EIO when it carries no errno).
    pub fn from_io(err: &std::io::Error, context: impl Into<String>) -> Self {
        Error::os(
            err.raw_os_error()
                .unwrap_or(rustix::io::Errno::IO.raw_os_error()),
            context,
        )
    }

    /// A GPU runtime failure.
    pub fn hip(err: &HipError, context: impl Into<String>) -> Self {
        Error {
            kind: ErrorKind::HipDriverError,
            hip: Some(err.code()),
            errno: None,
            context: format!("{}: {err}", context.into()),
        }
    }

    /// The kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The GPU runtime's error number, when a runtime call failed.
    pub fn hip_code(&self) -> Option<HipErrorCode> {
        self.hip
    }

    /// The OS errno, for [`ErrorKind::Os`].
    pub fn errno(&self) -> Option<i32> {
        self.errno
    }

    /// The explanation.
    pub fn context(&self) -> &str {
        &self.context
    }

    /// Whether a backend failing with this error, having moved no bytes, should hand the whole
    /// request to the next accepting backend: the P2P driver's "no device" and "remote IO" answers.
    pub fn is_failover_eligible(&self) -> bool {
        let nodev = rustix::io::Errno::NODEV.raw_os_error();
        let remoteio = rustix::io::Errno::REMOTEIO.raw_os_error();
        self.kind == ErrorKind::Os && matches!(self.errno, Some(e) if e == nodev || e == remoteio)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind);
        if let Some(h) = self.hip {
            d.field("hip", &h);
        }
        if let Some(e) = self.errno {
            d.field("errno", &e);
        }
        d.field("context", &self.context).finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.kind, self.context)?;
        if let Some(e) = self.errno {
            write!(f, " ({})", std::io::Error::from_raw_os_error(e))?;
        }
        Ok(())
    }
}

impl std::error::Error for Error {}

/// Result with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_nodev_and_remoteio_fail_over() {
        assert!(Error::os(libc_errno("NODEV"), "x").is_failover_eligible());
        assert!(Error::os(libc_errno("REMOTEIO"), "x").is_failover_eligible());
        assert!(!Error::os(libc_errno("IO"), "x").is_failover_eligible());
        assert!(!Error::new(ErrorKind::InternalError, "x").is_failover_eligible());
    }

    fn libc_errno(name: &str) -> i32 {
        match name {
            "NODEV" => rustix::io::Errno::NODEV.raw_os_error(),
            "REMOTEIO" => rustix::io::Errno::REMOTEIO.raw_os_error(),
            _ => rustix::io::Errno::IO.raw_os_error(),
        }
    }

    #[test]
    fn all_kinds_are_distinct() {
        let set: std::collections::HashSet<_> = ErrorKind::ALL.iter().collect();
        assert_eq!(set.len(), ErrorKind::ALL.len());
    }
}
