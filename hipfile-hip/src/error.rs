//! Errors of the GPU runtime boundary.
//!
//! Every platform speaks HIP error numbers (`hipError_t`), whatever runtime is underneath: the C API
//! of hipFile hands them to applications in `hipFileError_t::hip_drv_err`.

use std::fmt;

/// A `hipError_t` value. Kept as a plain integer on purpose: runtimes add codes between releases,
/// and an unknown value must survive the round trip to the application untouched.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct HipErrorCode(pub i32);

impl HipErrorCode {
    /// `hipSuccess`.
    pub const SUCCESS: Self = Self(0);
    /// `hipErrorInvalidValue`.
    pub const INVALID_VALUE: Self = Self(1);
    /// `hipErrorOutOfMemory`.
    pub const OUT_OF_MEMORY: Self = Self(2);
    /// `hipErrorNotInitialized`.
    pub const NOT_INITIALIZED: Self = Self(3);
    /// `hipErrorInvalidDevicePointer`.
    pub const INVALID_DEVICE_POINTER: Self = Self(17);
    /// `hipErrorInvalidMemcpyDirection`.
    pub const INVALID_MEMCPY_DIRECTION: Self = Self(21);
    /// `hipErrorInsufficientDriver`.
    pub const INSUFFICIENT_DRIVER: Self = Self(35);
    /// `hipErrorNoDevice`.
    pub const NO_DEVICE: Self = Self(100);
    /// `hipErrorInvalidDevice`.
    pub const INVALID_DEVICE: Self = Self(101);
    /// `hipErrorInvalidContext`.
    pub const INVALID_CONTEXT: Self = Self(201);
    /// `hipErrorSharedObjectSymbolNotFound`.
    pub const SYMBOL_NOT_FOUND: Self = Self(302);
    /// `hipErrorSharedObjectInitFailed`.
    pub const SHARED_OBJECT_INIT_FAILED: Self = Self(303);
    /// `hipErrorInvalidHandle` (also `hipErrorInvalidResourceHandle`).
    pub const INVALID_HANDLE: Self = Self(400);
    /// `hipErrorNotFound`.
    pub const NOT_FOUND: Self = Self(500);
    /// `hipErrorNotReady`.
    pub const NOT_READY: Self = Self(600);
    /// `hipErrorIllegalAddress`.
    pub const ILLEGAL_ADDRESS: Self = Self(700);
    /// `hipErrorNotSupported`.
    pub const NOT_SUPPORTED: Self = Self(801);
    /// `hipErrorUnknown`.
    pub const UNKNOWN: Self = Self(999);

    /// The name HIP gives this code, for the codes hipfile-rs produces or maps; `None` for others.
    pub fn name(self) -> Option<&'static str> {
        Some(match self.0 {
            0 => "hipSuccess",
            1 => "hipErrorInvalidValue",
            2 => "hipErrorOutOfMemory",
            3 => "hipErrorNotInitialized",
            17 => "hipErrorInvalidDevicePointer",
            21 => "hipErrorInvalidMemcpyDirection",
            35 => "hipErrorInsufficientDriver",
            100 => "hipErrorNoDevice",
            101 => "hipErrorInvalidDevice",
            201 => "hipErrorInvalidContext",
            302 => "hipErrorSharedObjectSymbolNotFound",
            303 => "hipErrorSharedObjectInitFailed",
            400 => "hipErrorInvalidHandle",
            500 => "hipErrorNotFound",
            600 => "hipErrorNotReady",
            700 => "hipErrorIllegalAddress",
            801 => "hipErrorNotSupported",
            999 => "hipErrorUnknown",
            _ => return None,
        })
    }
}

impl fmt::Debug for HipErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(name) => write!(f, "{name}({})", self.0),
            None => write!(f, "hipError_t({})", self.0),
        }
    }
}

impl fmt::Display for HipErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// An error at the GPU runtime boundary.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HipError {
    /// A runtime call returned a failure code.
    #[error("{call} failed: {code}{}", detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    Call {
        /// The runtime function that failed.
        call: &'static str,
        /// What it returned, as a HIP error number.
        code: HipErrorCode,
        /// The runtime's own description, when it gave one.
        detail: Option<String>,
    },
    /// The runtime library could not be loaded.
    #[error("cannot load {library}: {reason}")]
    Load {
        /// The library name or path that was tried.
        library: String,
        /// Why the loader refused it.
        reason: String,
    },
    /// The runtime library lacks a symbol hipfile-rs needs.
    #[error("{library} lacks the symbol {symbol}")]
    MissingSymbol {
        /// The library that was loaded.
        library: String,
        /// The symbol it does not export.
        symbol: &'static str,
    },
    /// No platform with a usable device was found.
    #[error("no GPU platform with a device was found ({0})")]
    NoPlatform(String),
    /// The runtime answered something hipfile-rs cannot interpret (an unknown enum value, say).
    #[error("{call} answered an unexpected value: {detail}")]
    Unexpected {
        /// The runtime function whose answer was not understood.
        call: &'static str,
        /// What was unexpected.
        detail: String,
    },
}

impl HipError {
    /// A failure of `call` with `code`.
    pub fn call(call: &'static str, code: HipErrorCode) -> Self {
        HipError::Call {
            call,
            code,
            detail: None,
        }
    }

    /// The HIP error number to show a C caller for this error.
    pub fn code(&self) -> HipErrorCode {
        match self {
            HipError::Call { code, .. } => *code,
            HipError::Load { .. } => HipErrorCode::INSUFFICIENT_DRIVER,
            HipError::MissingSymbol { .. } => HipErrorCode::SYMBOL_NOT_FOUND,
            HipError::NoPlatform(_) => HipErrorCode::NO_DEVICE,
            HipError::Unexpected { .. } => HipErrorCode::UNKNOWN,
        }
    }
}

/// Result of a runtime call.
pub type HipResult<T> = Result<T, HipError>;
