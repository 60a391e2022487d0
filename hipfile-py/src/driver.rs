//! The upstream-shaped API: the driver's life (`Driver`), buffer registration (`Buffer`), the
//! version and the driver's properties.

use std::sync::{Mutex, PoisonError};

use hipfile::{DeviceSliceMut, ErrorKind, RegisteredBuffer};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::device::runtime_of;
use crate::errors::{to_py, IntoPyResult};
use crate::foreign;
use crate::memory::{self, memory_of, Memory};
use crate::slot;

/// One reference on the process-wide driver (`hipFileDriverOpen`), shared with C callers of
/// `libhipfile.so` in the same process; `close()` (or leaving the `with` block) gives it back
/// (`hipFileDriverClose`). The driver closes when the last reference (this, a file, a
/// registered buffer, a device buffer) is gone.
#[pyclass(module = "hipfile._hipfile", name = "Driver")]
pub(crate) struct PyDriver {
    driver: Mutex<Option<hipfile::Driver>>,
}

impl PyDriver {
    fn with<T>(&self, f: impl FnOnce(&hipfile::Driver) -> T) -> PyResult<T> {
        let driver = self.driver.lock().unwrap_or_else(PoisonError::into_inner);
        match driver.as_ref() {
            Some(d) => Ok(f(d)),
            None => Err(to_py(&hipfile::Error::new(
                ErrorKind::DriverNotInitialized,
                "this Driver was closed",
            ))),
        }
    }
}

#[pymethods]
impl PyDriver {
    /// Open the process-wide driver, or add a reference to it. Picks the platform as the C
    /// library does: `HIPFILE_PLATFORM=amd|nvidia|sim` when set, else the first GPU runtime that
    /// reports a device (no device: `HipFileError` `hipFileDeviceNotFound`).
    #[new]
    fn new(py: Python<'_>) -> PyResult<Self> {
        let driver = py.detach(hipfile::Driver::open).py()?;
        Ok(PyDriver {
            driver: Mutex::new(Some(driver)),
        })
    }

    /// Give this reference back. Closing twice does nothing.
    fn close(&self, py: Python<'_>) {
        slot::release(py, &self.driver);
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        slot::is_released(&self.driver)
    }

    /// The backends requests are offered to, in order (`HipFileError` once closed).
    fn backends(&self) -> PyResult<Vec<&'static str>> {
        self.with(|d| d.backends())
    }

    /// The GPU platform the driver runs on: `"amd"`, `"nvidia"` or `"sim"`.
    fn platform(&self) -> PyResult<String> {
        self.with(|d| runtime_of(d).map(|rt| rt.info().platform.name().to_string()))?
            .py()
    }

    /// The direct (P2P) mechanisms the driver may use (a hipfile-rs extension), by name:
    /// `"amd_kfd"`, `"nvidia_fs"`, `"sim"`; all by default. Set it to a list of names to allow
    /// only those: when the platform's mechanism is not among them the direct path declines,
    /// and each request falls back or fails as its file's `policy` says. An unknown name is
    /// `ValueError`.
    #[getter]
    fn p2p_mechanisms(&self) -> PyResult<Vec<&'static str>> {
        self.with(|d| d.p2p_mechanisms().names())
    }

    #[setter]
    fn set_p2p_mechanisms(&self, names: Vec<String>) -> PyResult<()> {
        let mechanisms = names
            .iter()
            .map(|name| {
                hipfile::P2pMechanism::ALL
                    .into_iter()
                    .find(|m| m.name() == name)
                    .ok_or_else(|| {
                        PyValueError::new_err(format!(
                            "unknown P2P mechanism {name:?}: \"amd_kfd\", \"nvidia_fs\" or \"sim\""
                        ))
                    })
            })
            .collect::<PyResult<Vec<_>>>()?;
        let set = hipfile::P2pMechanisms::of(&mechanisms);
        self.with(|d| d.set_p2p_mechanisms(set))
    }
}

slot::with_block!(PyDriver, close);

/// References held on the process-wide driver (`hipFileUseCount`): every open `Driver`, file,
/// registered buffer and device buffer holds one, and so does each C caller's open.
#[pyfunction]
pub(crate) fn use_count() -> usize {
    hipfile::process_driver().use_count()
}

/// The version of the hipFile C API the library implements, `(major, minor, patch)`.
pub(crate) const API_VERSION: (u32, u32, u32) = (
    hipfile::capi::HIPFILE_VERSION_MAJOR,
    hipfile::capi::HIPFILE_VERSION_MINOR,
    hipfile::capi::HIPFILE_VERSION_PATCH,
);

/// The version of the hipFile C API this package implements, `(major, minor, patch)`, as
/// upstream's `hipFileGetVersion` answers it (the `HIPFILE_VERSION_*` of `include/hipfile.h`);
/// also `hipfile.API_VERSION`. It moves with upstream hipFile's API, not with this package:
/// the package's own version is `hipfile.__version__`, hipfile-rs's release.
#[pyfunction]
pub(crate) fn get_version() -> (u32, u32, u32) {
    API_VERSION
}

/// The driver's properties (`hipFileDriverGetProperties`) as a dict, sizes in KiB: the open
/// driver's settings, else the staged ones.
#[pyfunction]
pub(crate) fn driver_get_properties(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let core = hipfile::process_driver();
    let settings = core.settings();
    let compat = settings.compat_mode(&hipfile_core::EnvConfig::cached());
    let props = hipfile::capi::driver_props(
        &settings,
        compat.allowed,
        hipfile::capi::direct_io_available(),
    );
    let dict = PyDict::new(py);
    dict.set_item("major_version", props.nvfs.major_version)?;
    dict.set_item("minor_version", props.nvfs.minor_version)?;
    dict.set_item("poll_thresh_size", props.nvfs.poll_thresh_size)?;
    dict.set_item("max_direct_io_size", props.nvfs.max_direct_io_size)?;
    dict.set_item("driver_status_flags", props.nvfs.driver_status_flags)?;
    dict.set_item("driver_control_flags", props.nvfs.driver_control_flags)?;
    dict.set_item("feature_flags", props.feature_flags)?;
    dict.set_item("max_device_cache_size", props.max_device_cache_size)?;
    dict.set_item("per_buffer_cache_size", props.per_buffer_cache_size)?;
    dict.set_item(
        "max_device_pinned_mem_size",
        props.max_device_pinned_mem_size,
    )?;
    dict.set_item("max_batch_io_count", props.max_batch_io_count)?;
    dict.set_item(
        "max_batch_io_timeout_msecs",
        props.max_batch_io_timeout_msecs,
    )?;
    Ok(dict)
}

/// Device memory registered with the process-wide driver (`hipFileBufRegister`): requests into
/// the same array (same first byte) take the registered path. Deregistered by `deregister()`,
/// leaving the `with` block, or garbage collection; it holds the array until then.
#[pyclass(module = "hipfile._hipfile")]
pub(crate) struct Buffer {
    // Declared first: deregistered before the array is let go.
    registration: Mutex<Option<RegisteredBuffer<DeviceSliceMut<'static>>>>,
    /// What keeps the memory allocated: the array, or the DLPack capsule of it.
    _owner: Py<PyAny>,
    /// The array registered.
    array: Py<PyAny>,
    ptr: usize,
    len: usize,
}

memory::device_span_getters!(
    Buffer,
    "The registered device address.",
    "Registered length in bytes."
);

#[pymethods]
impl Buffer {
    /// Register the device memory of `array` (`__cuda_array_interface__` or DLPack). Memory
    /// the GPU runtime does not report as device memory is `HipFileError`
    /// `hipFileHipMemoryTypeInvalid`; memory already registered `hipFileMemoryAlreadyRegistered`.
    #[new]
    fn new(py: Python<'_>, array: &Bound<'_, PyAny>) -> PyResult<Self> {
        let Memory::Device {
            ptr, len, owner, ..
        } = memory_of(array)?
        else {
            return Err(PyTypeError::new_err(
                "only device memory is registered (__cuda_array_interface__ or DLPack)",
            ));
        };
        let registration = py
            .detach(|| {
                let driver = hipfile::Driver::open()?;
                driver.register_buffer(foreign::device_mut(ptr, len))
            })
            .py()?;
        Ok(Buffer {
            registration: Mutex::new(Some(registration)),
            _owner: owner,
            array: array.clone().unbind(),
            ptr,
            len,
        })
    }

    /// The array this registration holds.
    #[getter]
    fn array(&self, py: Python<'_>) -> Py<PyAny> {
        self.array.clone_ref(py)
    }

    /// Whether the memory is still registered.
    #[getter]
    fn registered(&self) -> bool {
        !slot::is_released(&self.registration)
    }

    /// Deregister (`hipFileBufDeregister`). Twice does nothing.
    fn deregister(&self, py: Python<'_>) {
        slot::release(py, &self.registration);
    }
}

slot::with_block!(Buffer, deregister);
