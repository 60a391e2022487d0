//! One error type for the whole library, and the one table of upstream's status codes.
//!
//! [`op_error_table!`] lists every `hipFileOpError_t` error code once: the [`ErrorKind`] it stands
//! for, its number, its upstream C name and the text `hipFileGetOpErrorString` gives for it.
//! [`ErrorKind`], [`ErrorKind::code`], [`ErrorKind::c_name`], [`ErrorKind::description`],
//! [`ErrorKind::from_code`] and [`ErrorKind::ALL`] are generated from it here, and the facade's C
//! ABI generates its `hipFileOpError_t` constants and error strings from it too, so no second list
//! can drift. [`ErrorKind::Os`] is the one kind outside the table: failures that the C API reports
//! as `-1` with `errno`. `hipFileSuccess` and the `hipFileIOMaxError` marker are not errors and
//! belong to the C ABI alone.

use std::fmt;

use hipfile_hip::{HipError, HipErrorCode};

/// The table of upstream hipFile's error codes, in numeric order: hands every row to `$callback`.
///
/// `op_error_table!(callback)` expands to `callback! { ROWS }`, each row reading
/// `Kind = code => cName, "description";`: the [`ErrorKind`] variant, the `hipFileOpError_t`
/// value, the name of the C enumerator and the text for people. `callback` is a `macro_rules!`
/// macro in scope where `op_error_table!` is invoked. Codes 5021 and 5032 are not assigned
/// upstream; `hipFileSuccess` (0) and `hipFileIOMaxError` (5039) are not error kinds and are not
/// rows.
#[macro_export]
macro_rules! op_error_table {
    ($callback:ident) => {
        $callback! {
            DriverNotInitialized = 5001 => hipFileDriverNotInitialized, "GPU IO driver is not open";
            DriverInvalidProps = 5002 => hipFileDriverInvalidProps, "invalid GPU IO driver property";
            DriverUnsupportedLimit = 5003 => hipFileDriverUnsupportedLimit,
                "GPU IO driver property value is unsupported";
            DriverVersionMismatch = 5004 => hipFileDriverVersionMismatch,
                "hipFile version does not match the GPU IO driver version";
            DriverVersionReadError = 5005 => hipFileDriverVersionReadError,
                "cannot read the GPU IO driver version";
            DriverClosing = 5006 => hipFileDriverClosing, "GPU IO driver is closing or closed";
            PlatformNotSupported = 5007 => hipFilePlatformNotSupported,
                "hipFile is not supported on this platform";
            IoNotSupported = 5008 => hipFileIONotSupported,
                "this IO is not supported on the selected file or by this build";
            DeviceNotSupported = 5009 => hipFileDeviceNotSupported,
                "the selected GPU does not support hipFile";
            DriverError = 5010 => hipFileDriverError, "GPU IO driver error";
            HipDriverError = 5011 => hipFileHipDriverError, "GPU runtime error (see the hipError_t value)";
            HipPointerInvalid = 5012 => hipFileHipPointerInvalid, "invalid GPU pointer";
            HipMemoryTypeInvalid = 5013 => hipFileHipMemoryTypeInvalid,
                "the memory behind the pointer is not device memory";
            HipPointerRangeError = 5014 => hipFileHipPointerRangeError,
                "the range runs past the end of the allocation";
            HipContextMismatch = 5015 => hipFileHipContextMismatch, "GPU context mismatch";
            InvalidMappingSize = 5016 => hipFileInvalidMappingSize, "access beyond the pinned buffer";
            InvalidMappingRange = 5017 => hipFileInvalidMappingRange, "access beyond the mapped region";
            InvalidFileType = 5018 => hipFileInvalidFileType, "unsupported file type";
            InvalidFileOpenFlag = 5019 => hipFileInvalidFileOpenFlag, "unsupported file open flags";
            DioNotSet = 5020 => hipFileDIONotSet, "O_DIRECT is not set";
            InvalidValue = 5022 => hipFileInvalidValue, "invalid argument";
            MemoryAlreadyRegistered = 5023 => hipFileMemoryAlreadyRegistered,
                "the buffer is already registered";
            MemoryNotRegistered = 5024 => hipFileMemoryNotRegistered, "the buffer is not registered";
            PermissionDenied = 5025 => hipFilePermissionDenied, "permission denied";
            DriverAlreadyOpen = 5026 => hipFileDriverAlreadyOpen, "the GPU IO driver is already open";
            HandleNotRegistered = 5027 => hipFileHandleNotRegistered, "the file handle is not registered";
            HandleAlreadyRegistered = 5028 => hipFileHandleAlreadyRegistered,
                "the file is already registered";
            DeviceNotFound = 5029 => hipFileDeviceNotFound, "no GPU device was found";
            InternalError = 5030 => hipFileInternalError, "internal hipFile error";
            GetNewFdFailed = 5031 => hipFileGetNewFDFailed, "cannot open a new file descriptor";
            DriverSetupError = 5033 => hipFileDriverSetupError, "GPU IO driver setup failed";
            IoDisabled = 5034 => hipFileIODisabled, "GPU IO is disabled for this file";
            BatchSubmitFailed = 5035 => hipFileBatchSubmitFailed, "batch submission failed";
            GpuMemoryPinningFailed = 5036 => hipFileGPUMemoryPinningFailed, "pinning memory failed";
            BatchFull = 5037 => hipFileBatchFull, "the batch queue is full";
            AsyncNotSupported = 5038 => hipFileAsyncNotSupported, "async IO is not supported";
        }
    };
}

/// Generates [`ErrorKind`] and its table lookups from the rows of [`op_error_table!`].
macro_rules! error_kinds {
    ($($kind:ident = $code:literal => $c_name:ident, $text:literal;)*) => {
        /// What went wrong, in upstream hipFile's vocabulary: one kind per `hipFileOpError_t`
        /// error code, plus [`ErrorKind::Os`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[non_exhaustive]
        pub enum ErrorKind {
            $(
                #[doc = concat!("`", stringify!($c_name), "` (", stringify!($code), "): ", $text, ".")]
                $kind,
            )*
            /// An operating-system failure, reported to C callers as `-1` with `errno`.
            Os,
        }

        impl ErrorKind {
            /// Every kind, in the table's (numeric) order, [`ErrorKind::Os`] last.
            pub const ALL: [ErrorKind; [$(stringify!($kind)),*].len() + 1] =
                [$(ErrorKind::$kind,)* ErrorKind::Os];

            /// The `hipFileOpError_t` value; `None` for [`ErrorKind::Os`], which has none.
            pub const fn code(self) -> Option<i32> {
                match self {
                    $(ErrorKind::$kind => Some($code),)*
                    ErrorKind::Os => None,
                }
            }

            /// The kind whose `hipFileOpError_t` value is `code`; `None` for success, the
            /// unassigned numbers and everything outside the table.
            pub const fn from_code(code: i32) -> Option<ErrorKind> {
                match code {
                    $($code => Some(ErrorKind::$kind),)*
                    _ => None,
                }
            }

            /// The upstream name of the C enumerator (`"hipFileInvalidValue"`); `None` for
            /// [`ErrorKind::Os`].
            pub const fn c_name(self) -> Option<&'static str> {
                match self {
                    $(ErrorKind::$kind => Some(stringify!($c_name)),)*
                    ErrorKind::Os => None,
                }
            }

            /// What the kind means, in the words `hipFileGetOpErrorString` uses.
            pub const fn description(self) -> &'static str {
                match self {
                    $(ErrorKind::$kind => $text,)*
                    ErrorKind::Os => "operating-system failure (see errno)",
                }
            }
        }
    };
}

op_error_table!(error_kinds);

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

    /// The table's codes are upstream's error range, ascending, without the unassigned 5021 and
    /// 5032; each leads back to its kind, and only `Os` lacks a code and a C name.
    #[test]
    fn table_codes_are_upstreams_and_round_trip() {
        let coded: Vec<(ErrorKind, i32)> = ErrorKind::ALL
            .iter()
            .filter_map(|k| k.code().map(|c| (*k, c)))
            .collect();
        let expected: Vec<i32> = (5001..5039).filter(|c| ![5021, 5032].contains(c)).collect();
        assert_eq!(coded.iter().map(|(_, c)| *c).collect::<Vec<_>>(), expected);
        for (kind, code) in &coded {
            assert_eq!(ErrorKind::from_code(*code), Some(*kind));
        }
        for outside in [0, 5000, 5021, 5032, 5039, -5022, i32::MIN, i32::MAX] {
            assert_eq!(ErrorKind::from_code(outside), None, "{outside}");
        }
        let uncoded: Vec<ErrorKind> = ErrorKind::ALL
            .iter()
            .copied()
            .filter(|k| k.code().is_none() || k.c_name().is_none())
            .collect();
        assert_eq!(uncoded, [ErrorKind::Os]);
        assert_eq!(ErrorKind::ALL.last(), Some(&ErrorKind::Os));
    }

    #[test]
    fn c_names_and_descriptions_are_distinct_and_plain() {
        let names: std::collections::HashSet<_> =
            ErrorKind::ALL.iter().filter_map(|k| k.c_name()).collect();
        assert_eq!(names.len(), ErrorKind::ALL.len() - 1);
        assert!(names.iter().all(|n| n.starts_with("hipFile")), "{names:?}");
        assert_eq!(
            ErrorKind::InvalidValue.c_name(),
            Some("hipFileInvalidValue")
        );
        assert_eq!(ErrorKind::InvalidValue.code(), Some(5022));
        let texts: std::collections::HashSet<_> =
            ErrorKind::ALL.iter().map(|k| k.description()).collect();
        assert_eq!(texts.len(), ErrorKind::ALL.len());
        // The C ABI hands these out as C strings: printable ASCII, no NUL.
        assert!(texts
            .iter()
            .all(|t| !t.is_empty() && t.bytes().all(|b| (0x20..0x7f).contains(&b))));
    }
}
