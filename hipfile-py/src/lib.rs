//! # hipfile-py: the `hipfile` Python package
//!
//! The native module `hipfile._hipfile` of the `hipfile` Python package (built by maturin from
//! `hipfile-py/pyproject.toml`; the pure-Python part lives in `hipfile-py/python/hipfile/`).
//! It is a thin layer over the facade crate [`hipfile`]: every read and write is a
//! [`hipfile::FileHandle`] request (or a [`hipfile::StreamIo`] op) on the process-wide driver
//! that the C ABI also uses, so Python, Rust and C callers in one process share one driver, one
//! registration table and one use count. Nothing here goes through the C ABI.
//!
//! ## Contract
//!
//! - The platform is picked as everywhere else: `HIPFILE_PLATFORM=amd|nvidia|sim` when set, else
//!   the first GPU runtime that reports a device. With no device the first call that opens the
//!   driver raises `HipFileError` (`hipFileDeviceNotFound`), whose message says to set
//!   `HIPFILE_PLATFORM=sim` to run on the simulated GPU.
//! - Memory enters as Python objects: device arrays through `__cuda_array_interface__` or DLPack
//!   (asked for a DLPack 1.x versioned tensor, whose read-only flag is honoured), host memory
//!   through the buffer protocol. Each request holds the object that owns the
//!   memory until it ended. The one place where an address becomes a typed view is the module
//!   `foreign`, the crate's only `unsafe`.
//! - Errors: `OSError` (with errno) where the C API answers `-1`/`errno`, else `HipFileError`
//!   with the `hipFileOpError_t` number (module `errors`). Bad Python arguments are `ValueError`
//!   or `TypeError`, raised before any IO.
//! - The GIL is released during every IO call and every wait.
//! - Remote objects (cargo feature `remote`, on by default): `RemoteFile` reads `s3://` and
//!   `http(s)://` objects into device or host memory (KvikIO's `RemoteFile`: `open_s3`,
//!   `open_s3_url`, `open_http`, `nbytes`, `read`, `pread`), `RemoteWriter` uploads to `s3://`
//!   (module `remote`, over the crate hipfile-remote).
//!
//! The feature `extension-module` (turned on by maturin only) leaves libpython unlinked, as an
//! extension module must; without it the crate builds and lints like any other member.
//!
//! ## Example (Python, on the sim)
//!
//! ```text
//! $ HIPFILE_PLATFORM=sim python3 -c '
//! import hipfile
//! open("data", "wb").write(bytes(range(256)) * 16)
//! buf = hipfile.empty(4096)
//! with hipfile.open("data", "r") as f:
//!     assert f.read(buf) == 4096
//! assert buf.tobytes() == bytes(range(256)) * 16'
//! ```

mod device;
mod driver;
mod errors;
mod file;
mod foreign;
mod memory;
#[cfg(feature = "remote")]
mod remote;
mod slot;

use pyo3::prelude::*;

/// The native module `hipfile._hipfile`.
#[pymodule]
fn _hipfile(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let error = m.py().get_type::<errors::HipFileError>();
    // Class-level defaults, so an instance made by hand still answers every attribute.
    for attribute in ["hipfile_code", "hipfile_name", "runtime_code"] {
        error.setattr(attribute, m.py().None())?;
    }
    m.add("HipFileError", error)?;
    // Two versions: the package's (hipfile-rs's release) and the hipFile C API's it implements.
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("API_VERSION", driver::API_VERSION)?;
    m.add_class::<driver::PyDriver>()?;
    m.add_class::<driver::Buffer>()?;
    m.add_class::<file::CuFile>()?;
    m.add_class::<file::IOFuture>()?;
    m.add_class::<file::StreamFuture>()?;
    m.add_class::<device::DeviceBuffer>()?;
    m.add_class::<device::Stream>()?;
    #[cfg(feature = "remote")]
    {
        m.add_class::<remote::RemoteFile>()?;
        m.add_class::<remote::RemoteWriter>()?;
    }
    m.add_function(wrap_pyfunction!(driver::use_count, m)?)?;
    m.add_function(wrap_pyfunction!(driver::get_version, m)?)?;
    m.add_function(wrap_pyfunction!(driver::driver_get_properties, m)?)?;
    m.add_function(wrap_pyfunction!(device::empty, m)?)?;
    m.add_function(wrap_pyfunction!(device::to_device, m)?)?;
    m.add_function(wrap_pyfunction!(device::device_count, m)?)?;
    m.add_function(wrap_pyfunction!(device::get_device, m)?)?;
    m.add_function(wrap_pyfunction!(device::set_device, m)?)?;
    m.add_function(wrap_pyfunction!(file::num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(file::task_size, m)?)?;
    Ok(())
}
