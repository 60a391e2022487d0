//! Errors of the GPU runtime boundary.
//!
//! Every platform speaks HIP error numbers (`hipError_t`), whatever runtime is underneath: the C API
//! of hipFile hands them to applications in `hipFileError_t::hip_drv_err`.

use std::fmt;

use crate::info::Platform;

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
    /// None of the names a runtime goes by could be loaded (the default names are tried in
    /// turn when the environment names no library).
    #[error("cannot load {}: {}", names(tried), refusals(tried))]
    NoLibrary {
        /// Every name tried, in order, with the loader's answer.
        tried: Vec<LoadRefusal>,
    },
    /// No platform with a usable device was found.
    #[error("no GPU platform with a device was found ({0})")]
    NoPlatform(String),
    /// Detection found no platform with a device: why each platform was passed over, in the
    /// order they were tried.
    #[error("no GPU platform with a device was found ({})", passed_over(.0))]
    NotDetected(Vec<(Platform, PassedOver)>),
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

    /// This error of loading `name` as one refusal among the names tried.
    pub(crate) fn into_refusal(self, name: &str) -> LoadRefusal {
        match self {
            HipError::Load { library, reason } => LoadRefusal { library, reason },
            other => LoadRefusal {
                library: name.to_string(),
                reason: other.to_string(),
            },
        }
    }

    /// The HIP error number to show a C caller for this error.
    pub fn code(&self) -> HipErrorCode {
        match self {
            HipError::Call { code, .. } => *code,
            HipError::Load { .. } => HipErrorCode::INSUFFICIENT_DRIVER,
            HipError::MissingSymbol { .. } => HipErrorCode::SYMBOL_NOT_FOUND,
            HipError::NoLibrary { .. } => HipErrorCode::INSUFFICIENT_DRIVER,
            HipError::NoPlatform(_) | HipError::NotDetected(_) => HipErrorCode::NO_DEVICE,
            HipError::Unexpected { .. } => HipErrorCode::UNKNOWN,
        }
    }
}

/// One library name the dynamic loader refused, and its answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadRefusal {
    /// The name or path given to the loader.
    pub library: String,
    /// The loader's answer (`dlerror`).
    pub reason: String,
}

impl LoadRefusal {
    /// Whether the loader found no file by this name, as opposed to finding one it could not
    /// load (a library it depends on is missing, the wrong architecture, a failed initialiser).
    /// Read from glibc's answer, which names the object it could not open: a missing
    /// dependency names the dependency, not `library`. An answer in another wording counts as
    /// found, so its detail is never hidden.
    pub fn not_found(&self) -> bool {
        self.reason
            .strip_prefix(self.library.as_str())
            .is_some_and(|rest| {
                rest == ": cannot open shared object file: No such file or directory"
            })
    }

    /// The loader's answer without the library name it starts with.
    pub fn detail(&self) -> &str {
        self.reason
            .strip_prefix(self.library.as_str())
            .and_then(|rest| rest.strip_prefix(": "))
            .unwrap_or(&self.reason)
    }
}

/// Why platform detection passed a platform over.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PassedOver {
    /// Its runtime loaded and reports no device.
    #[error("no device")]
    NoDevice,
    /// Its runtime did not load, or failed to count its devices.
    #[error(transparent)]
    Failed(HipError),
}

fn names(tried: &[LoadRefusal]) -> String {
    tried
        .iter()
        .map(|t| t.library.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn refusals(tried: &[LoadRefusal]) -> String {
    tried
        .iter()
        .map(|t| format!("cannot load {}: {}", t.library, t.reason))
        .collect::<Vec<_>>()
        .join("; ")
}

fn passed_over(misses: &[(Platform, PassedOver)]) -> String {
    misses
        .iter()
        .map(|(p, why)| format!("{p}: {why}"))
        .collect::<Vec<_>>()
        .join("; ")
}

/// Result of a runtime call.
pub type HipResult<T> = Result<T, HipError>;

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(library: &str, reason: &str) -> LoadRefusal {
        LoadRefusal {
            library: library.into(),
            reason: reason.into(),
        }
    }

    #[test]
    fn a_refusal_is_not_found_only_when_the_loader_names_the_library_itself() {
        let missing = refusal(
            "libamdhip64.so.7",
            "libamdhip64.so.7: cannot open shared object file: No such file or directory",
        );
        assert!(missing.not_found());
        assert_eq!(
            missing.detail(),
            "cannot open shared object file: No such file or directory"
        );
        let dependency = refusal(
            "libamdhip64.so.6",
            "libhsa-runtime64.so.1: cannot open shared object file: No such file or directory",
        );
        assert!(!dependency.not_found());
        assert_eq!(dependency.detail(), dependency.reason);
        let broken = refusal(
            "/opt/rocm/lib/libamdhip64.so",
            "/opt/rocm/lib/libamdhip64.so: invalid ELF header",
        );
        assert!(!broken.not_found());
        assert_eq!(broken.detail(), "invalid ELF header");
    }

    #[test]
    fn the_names_tried_read_as_one_load_error_with_every_answer() {
        let e = HipError::NoLibrary {
            tried: vec![
                refusal("liba.so.2", "liba.so.2: gone"),
                refusal("liba.so.1", "liba.so.1: bad"),
            ],
        };
        assert_eq!(
            e.to_string(),
            "cannot load liba.so.2, liba.so.1: cannot load liba.so.2: liba.so.2: gone; \
             cannot load liba.so.1: liba.so.1: bad"
        );
        assert_eq!(e.code(), HipErrorCode::INSUFFICIENT_DRIVER);
    }

    #[test]
    fn detection_names_each_platform_passed_over() {
        let e = HipError::NotDetected(vec![
            (Platform::Amd, PassedOver::NoDevice),
            (
                Platform::Nvidia,
                PassedOver::Failed(HipError::Load {
                    library: "libcuda.so.1".into(),
                    reason: "missing".into(),
                }),
            ),
        ]);
        assert_eq!(
            e.to_string(),
            "no GPU platform with a device was found (amd: no device; nvidia: cannot load \
             libcuda.so.1: missing)"
        );
        assert_eq!(e.code(), HipErrorCode::NO_DEVICE);
    }
}
