//! The conventions every entry point shares, of both C front doors ([`Door`]): the panic guard,
//! the status pair ([`StatusPair`]: `hipFileError_t`, or cuFile's `CUfileError_t`), the
//! `ssize_t` IO result with `errno`, and the text of each status code.
//!
//! Panics: [`guarded`] is the C ABI's only `catch_unwind`. Every `extern "C"` function is one
//! call of it or of the helper for its return convention ([`guarded_pair`], [`guarded_ssize`],
//! [`guarded_void`]), so a panic never crosses into C; it becomes `hipFileInternalError`,
//! `-hipFileInternalError`, or nothing for `void` functions. `cargo xtask tidy` checks that every
//! entry point has that shape.

use std::ffi::{c_char, c_int, CStr};
use std::panic::{catch_unwind, AssertUnwindSafe};

use hipfile_core::{Error, ErrorKind, FileHandleId, HostLoan, IoOp};

use super::types::*;

/// A status pair of a C front door: `hipFileError_t` here, `CUfileError_t` in libcufile.so.0.
/// Both are two `int`s, the library's code and the GPU runtime's, numbered alike (cuFile's codes
/// 5001 to 5038 are hipFile's, and HIP numbered its runtime errors after CUDA's).
pub trait StatusPair: Copy {
    /// Success.
    const SUCCESS: Self;
    /// A library status with no GPU runtime error.
    fn op(code: c_int) -> Self;
    /// A GPU runtime failure carrying the runtime's `code`.
    fn gpu(code: c_int) -> Self;
}

impl StatusPair for hipFileError_t {
    const SUCCESS: Self = hipFileError_t::SUCCESS;

    fn op(code: c_int) -> Self {
        hipFileError_t::op(code)
    }

    fn gpu(code: c_int) -> Self {
        hipFileError_t::hip(code)
    }
}

/// How a descriptor type of `hipFileHandleRegister` (or `cuFileHandleRegister`) is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DescriptorUse {
    /// Read `handle.fd` and register that descriptor.
    Fd,
    /// Refuse the registration with this code.
    Refuse(c_int),
}

/// What differs between the C front doors over one core: the process-wide driver each talks to,
/// its status pair, and the few answers the two upstream libraries give differently. Everything
/// else (argument checks, tables, conversions, the panic guards) is this module's and serves
/// both: a door is a type implementing this trait, and each shared body is generic over it.
pub trait Door: 'static {
    /// The status pair the door's functions return.
    type Pair: StatusPair;
    /// The process-wide core driver behind the door.
    fn driver() -> &'static hipfile_core::Driver;
    /// The `ssize_t` of an IO that failed in the GPU runtime with `code`.
    fn gpu_io_failure(code: c_int) -> ssize_t;
    /// How a descriptor of type `kind` is registered.
    fn descriptor_use(kind: c_int) -> DescriptorUse;
    /// Whether a synchronous read or write moves its whole size, however large, short only at
    /// the end of the file. `false`: one call moves at most [`hipfile_core::MAX_RW_COUNT`] bytes,
    /// as `pread(2)` and upstream hipFile answer.
    const WHOLE_REQUESTS: bool = false;
}

/// The hipFile door: `libhipfile.so` over the process-wide driver of [`crate::global`].
#[derive(Debug)]
pub enum HipFile {}

impl Door for HipFile {
    type Pair = hipFileError_t;

    fn driver() -> &'static hipfile_core::Driver {
        crate::global()
    }

    /// Upstream hipFile: `-hipError_t`.
    fn gpu_io_failure(code: c_int) -> ssize_t {
        -(code as ssize_t)
    }

    /// Upstream hipFile registers descriptors only.
    fn descriptor_use(kind: c_int) -> DescriptorUse {
        if kind == hipFileHandleTypeOpaqueFD {
            DescriptorUse::Fd
        } else {
            DescriptorUse::Refuse(hipFileIONotSupported)
        }
    }
}

/// Run `f`, turning a panic into `on_panic`.
pub fn guarded<T>(on_panic: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(on_panic)
}

/// Run `f` of an entry point that returns a status pair; a panic is the internal error.
pub fn guarded_pair<P: StatusPair>(f: impl FnOnce() -> P) -> P {
    guarded(P::op(hipFileInternalError), f)
}

/// Run `f` of an IO entry point; a panic is `-hipFileInternalError` (`-CU_FILE_INTERNAL_ERROR`).
pub fn guarded_ssize(f: impl FnOnce() -> ssize_t) -> ssize_t {
    guarded(-(hipFileInternalError as ssize_t), f)
}

/// Run `f` of a `void` entry point; a panic is swallowed, as C has no way to hear of it.
pub fn guarded_void(f: impl FnOnce()) {
    guarded((), f)
}

/// The `hipFileOpError_t` value of an error kind, from hipfile-core's table of error codes (the
/// same number is cuFile's `CUfileOpError`).
pub fn op_code(kind: ErrorKind) -> hipFileOpError_t {
    // The pair convention has no errno: an OS failure outside IO is an internal error.
    kind.code().unwrap_or(hipFileInternalError)
}

/// An error as a status pair.
pub fn pair<P: StatusPair>(e: &Error) -> P {
    match (e.kind(), e.hip_code()) {
        (ErrorKind::HipDriverError, Some(code)) => P::gpu(code.0),
        (kind, _) => P::op(op_code(kind)),
    }
}

/// A result without a value as a status pair.
pub fn result_pair<P: StatusPair>(r: hipfile_core::Result<()>) -> P {
    match r {
        Ok(()) => P::SUCCESS,
        Err(e) => pair(&e),
    }
}

fn set_errno(value: c_int) {
    // SAFETY: `__errno_location` returns the calling thread's errno slot, valid for the thread's
    // life.
    unsafe { *libc::__errno_location() = value };
}

/// An IO result in the `ssize_t` convention of door `D`: bytes, `-1` with `errno` for OS
/// failures, [`Door::gpu_io_failure`] for GPU runtime failures, else `-hipFileOpError_t`.
pub fn ssize<D: Door>(r: hipfile_core::Result<usize>) -> ssize_t {
    match r {
        Ok(n) => n as ssize_t,
        Err(e) => match (e.kind(), e.errno(), e.hip_code()) {
            (ErrorKind::Os, Some(errno), _) => {
                set_errno(errno);
                -1
            }
            (ErrorKind::HipDriverError, _, Some(code)) if code.0 != 0 => D::gpu_io_failure(code.0),
            (kind, _, _) => -(op_code(kind) as ssize_t),
        },
    }
}

/// The core's id of a C file handle.
pub fn handle_id(fh: hipFileHandle_t) -> FileHandleId {
    FileHandleId(fh as usize as u64)
}

/// Text for every `hipFileOpError_t`.
#[no_mangle]
pub extern "C" fn hipFileGetOpErrorString(status: hipFileOpError_t) -> *const c_char {
    guarded(c"hipFile: internal error".as_ptr(), || {
        error_text(status).as_ptr()
    })
}

/// `error_text`: the text of every `hipFileOpError_t`, from hipfile-core's table of error codes.
macro_rules! op_error_text {
    ($($kind:ident = $code:literal => $c_name:ident, $text:literal;)*) => {
        fn error_text(status: hipFileOpError_t) -> &'static CStr {
            match status {
                hipFileSuccess => c"hipFile operation completed successfully",
                $($code => const { c_text(concat!($text, "\0")) },)*
                _ => c"unknown hipFile error",
            }
        }
    };
}

hipfile_core::op_error_table!(op_error_text);

/// `text`, which ends in its only NUL, as a C string (evaluated at compile time).
const fn c_text(text: &'static str) -> &'static CStr {
    match CStr::from_bytes_with_nul(text.as_bytes()) {
        Ok(c) => c,
        Err(_) => panic!("an error description must end in its only NUL"),
    }
}

/// The loan of the host bytes a C call names for `op`: `size` bytes at `buffer + buffer_offset`
/// (`None` where that address cannot be formed; validation then refuses the call). The core uses
/// it only where the memory turns out to be host memory and the setting
/// `allow_system_memory` admits it.
///
/// # Safety
/// The caller passes on its C caller's contract for an IO call (hipfile.h and cufile.h, "Host
/// memory"): the buffer is the application's and stays allocated and untouched by anything else
/// (a read's for reading and writing, a write's for writing) until the call, or the batch entry
/// or stream-ordered op, has completed.
pub(super) unsafe fn lent(
    op: IoOp,
    buffer: usize,
    buffer_offset: hoff_t,
    size: usize,
) -> Option<HostLoan> {
    let at = usize::try_from(buffer_offset)
        .ok()
        .and_then(|offset| buffer.checked_add(offset))?;
    // SAFETY: this function's contract, the C caller's for the IO call, is the loan's
    // contract for these bytes.
    Some(unsafe {
        match op {
            IoOp::Read => HostLoan::lend_mut(at, size),
            IoOp::Write => HostLoan::lend(at, size),
        }
    })
}

#[cfg(test)]
mod tests {
    use hipfile_hip::{HipError, HipErrorCode};

    use super::*;

    /// Every kind maps to its own code and back; only an OS failure borrows
    /// `hipFileInternalError`.
    #[test]
    fn op_code_round_trips_every_kind() {
        for kind in ErrorKind::ALL {
            let code = op_code(kind);
            if kind == ErrorKind::Os {
                assert_eq!(code, hipFileInternalError);
            } else {
                assert_eq!(ErrorKind::from_code(code), Some(kind), "{kind:?}");
                assert!(HIPFILE_OP_ERRORS.contains(&code), "{kind:?}");
            }
        }
        assert_eq!(op_code(ErrorKind::InvalidValue), hipFileInvalidValue);
        assert_eq!(
            op_code(ErrorKind::AsyncNotSupported),
            hipFileAsyncNotSupported
        );
    }

    #[test]
    fn error_text_is_the_tables_description() {
        for kind in ErrorKind::ALL.into_iter().filter(|k| *k != ErrorKind::Os) {
            let text = error_text(op_code(kind)).to_str();
            assert_eq!(text, Ok(kind.description()), "{kind:?}");
        }
        assert_eq!(
            error_text(hipFileSuccess),
            c"hipFile operation completed successfully"
        );
        for unknown in [
            -1,
            1,
            HIPFILE_BASE_ERR,
            5021,
            5032,
            hipFileIOMaxError,
            i32::MIN,
        ] {
            assert_eq!(error_text(unknown), c"unknown hipFile error", "{unknown}");
        }
    }

    /// Each return convention passes answers through and turns a panic into its own
    /// internal-error answer.
    #[test]
    fn guards_turn_panics_into_internal_errors() {
        let busy = hipFileError_t::op(hipFileDriverAlreadyOpen);
        assert_eq!(guarded_pair(|| busy), busy);
        assert_eq!(
            guarded_pair::<hipFileError_t>(|| panic!("a bug")),
            hipFileError_t::op(hipFileInternalError)
        );
        assert_eq!(guarded_ssize(|| 42), 42);
        assert_eq!(guarded_ssize(|| panic!("a bug")), -5030);
        let mut ran = false;
        guarded_void(|| ran = true);
        assert!(ran);
        guarded_void(|| panic!("a bug"));
        assert_eq!(guarded(-1, || panic!("a bug")), -1);
    }

    #[test]
    fn pairs_carry_the_gpu_runtimes_number_only_for_gpu_failures() {
        let gpu = Error::hip(&HipError::call("hipMemcpy", HipErrorCode(700)), "copy");
        assert_eq!(pair::<hipFileError_t>(&gpu), hipFileError_t::hip(700));
        let os = Error::os(libc::EIO, "read");
        assert_eq!(
            pair::<hipFileError_t>(&os),
            hipFileError_t::op(hipFileInternalError)
        );
        let closed = Error::new(ErrorKind::DriverNotInitialized, "closed");
        assert_eq!(
            pair::<hipFileError_t>(&closed),
            hipFileError_t::op(hipFileDriverNotInitialized)
        );
        assert_eq!(
            result_pair::<hipFileError_t>(Ok(())),
            hipFileError_t::SUCCESS
        );
    }

    #[test]
    fn ssize_is_bytes_or_errno_or_a_negated_code() {
        assert_eq!(ssize::<HipFile>(Ok(4096)), 4096);
        set_errno(0);
        assert_eq!(ssize::<HipFile>(Err(Error::os(libc::ENOSPC, "write"))), -1);
        // SAFETY: the calling thread's errno slot, valid for the thread's life.
        assert_eq!(unsafe { *libc::__errno_location() }, libc::ENOSPC);
        let gpu = Error::hip(&HipError::call("hipMemcpy", HipErrorCode(700)), "copy");
        assert_eq!(ssize::<HipFile>(Err(gpu)), -700);
        let bad = Error::new(ErrorKind::InvalidValue, "offset");
        assert_eq!(ssize::<HipFile>(Err(bad)), -5022);
    }
}
