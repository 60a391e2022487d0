//! hipfile-rs errors as Python exceptions.
//!
//! One rule, the C API's: a failure the C API reports as `-1` with `errno` ([`ErrorKind::Os`])
//! is an `OSError` with that errno (so `FileNotFoundError`, `PermissionError`... as Python
//! picks the subclass); every other failure is a `HipFileError` carrying the `hipFileOpError_t`
//! number and name from hipfile-core's one table of error codes, and the GPU runtime's
//! `hipError_t` when the runtime caused it. No device found (`hipFileDeviceNotFound`) says how to
//! run on the simulated GPU instead, since that is what a Python user on a machine without a GPU
//! came for.

use hipfile::{Error, ErrorKind};
use pyo3::exceptions::{PyException, PyOSError};
use pyo3::prelude::*;

pyo3::create_exception!(
    hipfile,
    HipFileError,
    PyException,
    "A hipFile failure that is not an OS error: `.hipfile_code` is the `hipFileOpError_t` number \
     (5001...), `.hipfile_name` its upstream name (`\"hipFileInvalidValue\"`), `.runtime_code` the \
     GPU runtime's `hipError_t` when the runtime caused it, else None."
);

/// What a `hipFileDeviceNotFound` adds to its message.
const NO_DEVICE_HINT: &str = "; to run on the simulated GPU (host memory standing in for device \
     memory, no GPU needed), set HIPFILE_PLATFORM=sim in the environment before the first hipfile \
     call";

/// `err` as the Python exception the rule above names.
pub(crate) fn to_py(err: &Error) -> PyErr {
    match (err.kind(), err.errno()) {
        (ErrorKind::Os, Some(errno)) => PyOSError::new_err((errno, err.to_string())),
        (kind, _) => Python::attach(|py| {
            let code = kind.code();
            let name = kind.c_name();
            let runtime = err.hip_code().map(|c| c.0).filter(|&c| c != 0);
            let hint = match kind {
                ErrorKind::DeviceNotFound => NO_DEVICE_HINT,
                _ => "",
            };
            let exc = HipFileError::new_err(format!("{err}{hint}"));
            let value = exc.value(py);
            let set = value
                .setattr("hipfile_code", code)
                .and_then(|()| value.setattr("hipfile_name", name))
                .and_then(|()| value.setattr("runtime_code", runtime));
            match set {
                Ok(()) => exc,
                Err(e) => e,
            }
        }),
    }
}

/// `Result<T, hipfile::Error>` as a `PyResult`.
pub(crate) trait IntoPyResult<T> {
    /// The value, or the error as its Python exception.
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPyResult<T> for Result<T, Error> {
    fn py(self) -> PyResult<T> {
        self.map_err(|e| to_py(&e))
    }
}
