//! Device memory and streams made through the driver: `hipfile.DeviceBuffer` (`hipfile.empty`,
//! `hipfile.to_device`) and `hipfile.Stream`, on the sim in CI and on the real GPU elsewhere; and
//! the calling thread's current device (`hipfile.get_device`, `set_device`, `device_count`).
//! A `DeviceBuffer` is a one-dimensional `uint8` device array that CuPy, PyTorch and hipfile
//! itself take through `__cuda_array_interface__` (version 3) or DLPack.

use std::sync::{Mutex, PoisonError};

use std::sync::Arc;

use hipfile_hip::{GpuRuntime, OwnedStream, Platform};
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};

use crate::errors::IntoPyResult;
use crate::foreign;
use crate::memory::{self, tuple};

fn hip(e: &hipfile_hip::HipError, what: &str) -> PyErr {
    crate::errors::to_py(&hipfile::Error::hip(e, what))
}

/// The GPU runtime of `driver`'s open session.
pub(crate) fn runtime_of(driver: &hipfile::Driver) -> hipfile::Result<Arc<dyn GpuRuntime>> {
    let session = driver.core().session().ok_or_else(|| {
        hipfile::Error::new(
            hipfile::ErrorKind::DriverNotInitialized,
            "the driver is not open",
        )
    })?;
    Ok(Arc::clone(session.runtime()))
}

/// The process-wide driver (opened, or one more reference on it) and its GPU runtime.
fn runtime() -> hipfile::Result<(hipfile::Driver, Arc<dyn GpuRuntime>)> {
    let driver = hipfile::Driver::open()?;
    let runtime = runtime_of(&driver)?;
    Ok((driver, runtime))
}

/// Run `f` on the driver's GPU runtime on the calling thread, with the GIL released.
fn on_runtime<T: Send>(
    py: Python<'_>,
    what: &str,
    f: impl FnOnce(&Arc<dyn GpuRuntime>) -> hipfile_hip::HipResult<T> + Send,
) -> PyResult<T> {
    py.detach(|| {
        let (_driver, runtime) = runtime()?;
        f(&runtime).map_err(|e| hipfile::Error::hip(&e, what))
    })
    .py()
}

/// Devices the platform reports (`hipGetDeviceCount`).
#[pyfunction]
pub(crate) fn device_count(py: Python<'_>) -> PyResult<i32> {
    on_runtime(py, "counting devices", |rt| rt.device_count())
}

/// The calling thread's current device (`hipGetDevice`): where `empty`, `to_device` and
/// `Stream()` allocate, and whose null stream `read_async(..., stream=None)` queues on.
#[pyfunction]
pub(crate) fn get_device(py: Python<'_>) -> PyResult<i32> {
    on_runtime(py, "asking the current device", |rt| rt.current_device())
}

/// Make `device` the calling thread's current device (`hipSetDevice`), as a framework's own call
/// does (`cupy.cuda.Device(n).use()`, `torch.cuda.set_device(n)`): the runtime is shared.
#[pyfunction]
pub(crate) fn set_device(py: Python<'_>, device: i32) -> PyResult<()> {
    on_runtime(py, "setting the current device", |rt| rt.set_device(device))
}

/// Device memory allocated through the process-wide driver on its current device; freed when
/// garbage collected (and not before every request and DLPack consumer using it let go).
#[pyclass(module = "hipfile._hipfile", frozen)]
pub(crate) struct DeviceBuffer {
    buffer: Mutex<hipfile::DeviceBuffer>,
    _driver: hipfile::Driver,
    ptr: usize,
    len: usize,
    dl_device: (i32, i32),
}

impl DeviceBuffer {
    fn allocate(py: Python<'_>, nbytes: usize) -> PyResult<Self> {
        let (driver, buffer, dl_device) = py
            .detach(|| -> hipfile::Result<_> {
                let driver = hipfile::Driver::open()?;
                let buffer = driver.alloc(nbytes)?;
                let runtime = driver.core().session().map(|s| s.runtime().clone());
                let dl_device = runtime.map_or((2, 0), |rt| {
                    // DLPack names the platform: CUDA on NVIDIA, ROCm on AMD and on the sim,
                    // whose runtime speaks HIP.
                    let kind = match rt.info().platform {
                        Platform::Nvidia => 2,
                        _ => 10,
                    };
                    (kind, rt.current_device().unwrap_or(0))
                });
                Ok((driver, buffer, dl_device))
            })
            .py()?;
        Ok(DeviceBuffer {
            ptr: buffer.ptr(),
            len: buffer.len(),
            buffer: Mutex::new(buffer),
            _driver: driver,
            dl_device,
        })
    }
}

/// A new device buffer of `nbytes` bytes (contents undefined).
#[pyfunction]
pub(crate) fn empty(py: Python<'_>, nbytes: usize) -> PyResult<DeviceBuffer> {
    if nbytes == 0 {
        return Err(PyValueError::new_err(
            "a device buffer holds at least 1 byte",
        ));
    }
    DeviceBuffer::allocate(py, nbytes)
}

/// A new device buffer holding the bytes of `data` (anything `bytes()` takes).
#[pyfunction]
pub(crate) fn to_device(py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<DeviceBuffer> {
    let bytes = host_bytes(data)?;
    let buffer = empty(py, bytes.as_bytes().len())?;
    buffer.copy_from_host(py, data, 0)?;
    Ok(buffer)
}

fn host_bytes<'py>(data: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    if let Ok(b) = data.cast::<PyBytes>() {
        return Ok(b.clone());
    }
    let py = data.py();
    let view = py
        .import("builtins")?
        .getattr("memoryview")?
        .call1((data,))?;
    if crate::memory::format_holds_objects(&view.getattr("format")?.extract::<String>()?) {
        return Err(crate::memory::holds_objects());
    }
    Ok(view.call_method0("tobytes")?.cast_into::<PyBytes>()?)
}

memory::device_span_getters!(DeviceBuffer, "The device address.", "Length in bytes.");

#[pymethods]
impl DeviceBuffer {
    fn __len__(&self) -> usize {
        self.len
    }

    /// The CUDA Array Interface (version 3): a one-dimensional `uint8` array, writable, with no
    /// stream to wait for (the buffer's own copies are synchronous).
    #[getter]
    fn __cuda_array_interface__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        // Interned keys and typestr: made once per process, not at every access (a consumer
        // reads the interface at every request).
        let dict = PyDict::new(py);
        dict.set_item(intern!(py, "shape"), tuple(py, &[self.len])?)?;
        dict.set_item(intern!(py, "typestr"), intern!(py, "|u1"))?;
        dict.set_item(intern!(py, "data"), (self.ptr, false))?;
        dict.set_item(intern!(py, "version"), 3)?;
        dict.set_item(intern!(py, "strides"), py.None())?;
        dict.set_item(intern!(py, "stream"), py.None())?;
        Ok(dict)
    }

    /// A DLPack capsule (`"dltensor"`) of the buffer; the capsule keeps the buffer alive until
    /// its consumer deletes it.
    #[pyo3(signature = (*, stream = None, max_version = None, dl_device = None, copy = None))]
    fn __dlpack__(
        slf: &Bound<'_, Self>,
        stream: Option<&Bound<'_, PyAny>>,
        max_version: Option<&Bound<'_, PyAny>>,
        dl_device: Option<&Bound<'_, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        // The buffer's copies are synchronous, so no stream need wait; it is exported as is, as
        // the unversioned capsule every consumer reads.
        let _ = (stream, max_version, dl_device);
        if copy == Some(true) {
            return Err(PyValueError::new_err(
                "DeviceBuffer exports its memory, never a copy",
            ));
        }
        let me = slf.get();
        foreign::dlpack_capsule(
            slf.py(),
            slf.clone().into_any().unbind(),
            me.ptr,
            me.len,
            me.dl_device.0,
            me.dl_device.1,
        )
    }

    /// `(device_type, device_id)` as DLPack names them (`kDLROCM` = 10 on AMD and the sim,
    /// `kDLCUDA` = 2 on NVIDIA).
    fn __dlpack_device__(&self) -> (i32, i32) {
        self.dl_device
    }

    /// The whole buffer copied to host memory, as `bytes`.
    fn tobytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let bytes = py
            .detach(|| {
                self.buffer
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .to_vec()
            })
            .map_err(|e| hip(&e, "copying the buffer to the host"))?;
        Ok(PyBytes::new(py, &bytes))
    }

    /// `size` bytes (default: to the end) of the buffer from `offset`, copied to host memory,
    /// as `bytes`.
    #[pyo3(signature = (offset = 0, size = None))]
    fn copy_to_host<'py>(
        &self,
        py: Python<'py>,
        offset: usize,
        size: Option<usize>,
    ) -> PyResult<Bound<'py, PyBytes>> {
        let size = size.unwrap_or(self.len.saturating_sub(offset));
        if offset.checked_add(size).map_or(true, |end| end > self.len) {
            return Err(PyValueError::new_err(format!(
                "{size} bytes at offset {offset} do not fit in the {}-byte buffer",
                self.len
            )));
        }
        let mut out = vec![0u8; size];
        py.detach(|| {
            self.buffer
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .read_at(offset, &mut out)
        })
        .map_err(|e| hip(&e, "copying the buffer to the host"))?;
        Ok(PyBytes::new(py, &out))
    }

    /// Copy the bytes of `data` (anything `bytes()` takes) into the buffer at `offset`.
    #[pyo3(signature = (data, offset = 0))]
    fn copy_from_host(
        &self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        offset: usize,
    ) -> PyResult<()> {
        let bytes = host_bytes(data)?;
        let src = bytes.as_bytes();
        if offset
            .checked_add(src.len())
            .map_or(true, |end| end > self.len)
        {
            return Err(PyValueError::new_err(format!(
                "{} bytes at offset {offset} do not fit in the {}-byte buffer",
                src.len(),
                self.len
            )));
        }
        py.detach(|| {
            self.buffer
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .write_at(offset, src)
        })
        .map_err(|e| hip(&e, "copying to the buffer"))
    }

    /// Set every byte of the buffer to `value`.
    fn fill(&self, py: Python<'_>, value: u8) -> PyResult<()> {
        py.detach(|| {
            self.buffer
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .fill(value)
        })
        .map_err(|e| hip(&e, "filling the buffer"))
    }
}

/// A GPU stream of the process-wide driver's runtime, destroyed when garbage collected. Pass it
/// (or its `.ptr`) as `stream=` to `CuFile.read_async` / `write_async`.
#[pyclass(module = "hipfile._hipfile", frozen)]
pub(crate) struct Stream {
    stream: OwnedStream,
    _driver: hipfile::Driver,
}

#[pymethods]
impl Stream {
    /// Create a stream on the calling thread's current device (ordered with its null stream, as
    /// `hipStreamCreate` makes it).
    #[new]
    fn new(py: Python<'_>) -> PyResult<Self> {
        py.detach(|| -> hipfile::Result<Stream> {
            let (driver, runtime) = runtime()?;
            let stream = OwnedStream::new(runtime)
                .map_err(|e| hipfile::Error::hip(&e, "creating a stream"))?;
            Ok(Stream {
                stream,
                _driver: driver,
            })
        })
        .py()
    }

    /// The raw handle (`hipStream_t` as an int).
    #[getter]
    fn ptr(&self) -> usize {
        self.stream.handle().as_raw()
    }

    /// Wait until everything queued on the stream ended (GIL released).
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.stream.synchronize())
            .map_err(|e| hip(&e, "synchronizing the stream"))
    }
}
