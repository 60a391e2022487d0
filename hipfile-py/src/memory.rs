//! What a Python object's memory is: device memory named by `__cuda_array_interface__` or DLPack,
//! or host memory through the buffer protocol.
//!
//! Checked here, before any request: the memory is contiguous (row-major; a strided view is a
//! `ValueError`), it holds data rather than Python object references (NumPy's `dtype=object`:
//! `TypeError`, since a read would overwrite references and a write would store addresses), a
//! read does not land in read-only memory (`TypeError`, as `readinto` says for `bytes`), and the
//! requested `size` and device offset lie within it (`ValueError`).

use hipfile::IoOp;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use crate::foreign;

/// DLPack device types whose memory is device memory: `kDLCUDA`, `kDLROCM`, `kDLCUDAManaged`.
const DLPACK_DEVICE_TYPES: [i64; 3] = [2, 10, 13];

/// The memory of a Python object, and the object that keeps it alive.
pub(crate) enum Memory {
    /// Device memory at `ptr`; `owner` (the array, or a DLPack capsule) keeps it allocated.
    /// `stream`: the stream whose work on the array must end before the array is used (the CUDA
    /// Array Interface's `stream`, version 3).
    Device {
        ptr: usize,
        len: usize,
        readonly: bool,
        /// A copy of the producer's array (a DLPack flag): a read into it would not reach it.
        copied: bool,
        owner: Py<PyAny>,
        stream: Option<usize>,
    },
    /// Host memory: a one-dimensional byte `memoryview` of it.
    Host {
        view: Py<PyAny>,
        len: usize,
        readonly: bool,
    },
}

impl Memory {
    /// Length in bytes.
    pub(crate) fn len(&self) -> usize {
        match self {
            Memory::Device { len, .. } | Memory::Host { len, .. } => *len,
        }
    }

    /// Another reference to the same memory, for one part of a split request.
    pub(crate) fn clone_ref(&self, py: Python<'_>) -> Memory {
        match self {
            Memory::Device {
                ptr,
                len,
                readonly,
                copied,
                owner,
                stream,
            } => Memory::Device {
                ptr: *ptr,
                len: *len,
                readonly: *readonly,
                copied: *copied,
                owner: owner.clone_ref(py),
                stream: *stream,
            },
            Memory::Host {
                view,
                len,
                readonly,
            } => Memory::Host {
                view: view.clone_ref(py),
                len: *len,
                readonly: *readonly,
            },
        }
    }

    fn readonly(&self) -> bool {
        match self {
            Memory::Device { readonly, .. } | Memory::Host { readonly, .. } => *readonly,
        }
    }

    fn copied(&self) -> bool {
        matches!(self, Memory::Device { copied: true, .. })
    }
}

/// The memory of `obj`: `__cuda_array_interface__` first (CuPy, Numba, PyTorch CUDA tensors,
/// `hipfile.DeviceBuffer`), then DLPack for device tensors, then the buffer protocol (NumPy,
/// `bytearray`, `memoryview`, `mmap`...).
pub(crate) fn memory_of(obj: &Bound<'_, PyAny>) -> PyResult<Memory> {
    // One lookup: a framework builds the interface's dict anew at each access (CuPy does), and
    // `hasattr` followed by `getattr` would build it twice per request.
    match obj.getattr(intern!(obj.py(), "__cuda_array_interface__")) {
        Ok(cai) => return cuda_array_interface(obj, &cai),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyAttributeError>(obj.py()) => {}
        Err(e) => return Err(e),
    }
    if obj.hasattr("__dlpack__")? && obj.hasattr("__dlpack_device__")? {
        let (device_type, _id): (i64, i64) = obj.call_method0("__dlpack_device__")?.extract()?;
        if DLPACK_DEVICE_TYPES.contains(&device_type) {
            return dlpack(obj);
        }
    }
    host(obj)
}

/// The memory that `cai`, the `__cuda_array_interface__` of `obj`, describes; `obj` is held as
/// its owner.
fn cuda_array_interface<'py>(obj: &Bound<'py, PyAny>, cai: &Bound<'py, PyAny>) -> PyResult<Memory> {
    let py = obj.py();
    let cai = cai
        .cast::<PyDict>()
        .map_err(|_| PyTypeError::new_err("__cuda_array_interface__ is not a dict"))?;
    // The keys are interned: a Python string made and hashed once per process, not once per
    // key per request (the producer's keys are interned too, so a lookup compares pointers).
    let item = |key: &Bound<'py, PyString>| -> PyResult<Bound<'py, PyAny>> {
        cai.get_item(key)?
            .ok_or_else(|| PyTypeError::new_err(format!("__cuda_array_interface__ lacks '{key}'")))
    };
    let shape: Vec<i64> = item(intern!(py, "shape"))?.extract()?;
    let typestr: String = item(intern!(py, "typestr"))?.extract()?;
    if typestr.get(1..2) == Some("O") {
        return Err(holds_objects());
    }
    let (ptr, readonly): (usize, bool) = item(intern!(py, "data"))?.extract()?;
    if let Some(mask) = cai.get_item(intern!(py, "mask"))? {
        if !mask.is_none() {
            return Err(PyValueError::new_err("masked arrays are not supported"));
        }
    }
    let itemsize: usize = typestr
        .get(2..)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| PyValueError::new_err(format!("unknown typestr {typestr:?}")))?;
    let item = i64::try_from(itemsize).map_err(|_| PyValueError::new_err("array too large"))?;
    let strides = match cai.get_item(intern!(py, "strides"))? {
        // Items of 0 bytes: the array holds no bytes, whatever its strides.
        Some(s) if !s.is_none() && item > 0 => {
            let strides: Vec<i64> = s.extract()?;
            // In bytes; in items below, so both interfaces share one check.
            Some(
                strides
                    .iter()
                    .map(|&b| if b % item == 0 { b / item } else { i64::MAX })
                    .collect::<Vec<i64>>(),
            )
        }
        _ => None,
    };
    let len = contiguous_len(&shape, strides.as_deref(), itemsize)?;
    let stream = match cai.get_item(intern!(py, "stream"))? {
        Some(s) if !s.is_none() => Some(s.extract::<usize>()?),
        _ => None,
    };
    Ok(Memory::Device {
        ptr,
        len,
        readonly,
        copied: false,
        owner: obj.clone().unbind(),
        stream,
    })
}

/// The memory of a DLPack producer: the versioned capsule (DLPack 1.x, whose flags say whether
/// the memory is read-only or a copy) where the producer takes `max_version`, as the array API
/// asks consumers to request it; else the unversioned capsule, whose memory is writable.
fn dlpack(obj: &Bound<'_, PyAny>) -> PyResult<Memory> {
    let py = obj.py();
    let kwargs = PyDict::new(py);
    kwargs.set_item(intern!(py, "max_version"), foreign::DLPACK_VERSION)?;
    let capsule = match obj.call_method(intern!(py, "__dlpack__"), (), Some(&kwargs)) {
        // A producer from before DLPack 1.0 knows no `max_version`.
        Err(e) if e.is_instance_of::<PyTypeError>(py) => obj.call_method0("__dlpack__")?,
        capsule => capsule?,
    };
    let view = foreign::dlpack_view(&capsule)?;
    let len = contiguous_len(&view.shape, view.strides.as_deref(), view.itemsize)?;
    Ok(Memory::Device {
        ptr: view.ptr,
        len,
        readonly: view.readonly,
        copied: view.copied,
        owner: capsule.unbind(),
        // `__dlpack__()` without a stream argument: the producer made the tensor ready for any
        // stream before answering.
        stream: None,
    })
}

fn host(obj: &Bound<'_, PyAny>) -> PyResult<Memory> {
    let py = obj.py();
    let view = py
        .import("builtins")?
        .getattr("memoryview")?
        .call1((obj,))
        .map_err(|_| not_memory(obj))?;
    if !view.getattr("c_contiguous")?.extract::<bool>()? {
        return Err(not_contiguous());
    }
    let format: String = view.getattr("format")?.extract()?;
    if format_holds_objects(&format) {
        return Err(holds_objects());
    }
    let readonly: bool = view.getattr("readonly")?.extract()?;
    let bytes = if view.getattr("ndim")?.extract::<usize>()? == 1 && format == "B" {
        view
    } else {
        view.call_method1("cast", ("B",))?
    };
    let len: usize = bytes.getattr("nbytes")?.extract()?;
    Ok(Memory::Host {
        view: bytes.unbind(),
        len,
        readonly,
    })
}

/// The `TypeError` for an object that names no memory hipfile reads: with a hint for host
/// tensors that speak DLPack but not the buffer protocol (a PyTorch CPU tensor).
fn not_memory(obj: &Bound<'_, PyAny>) -> PyErr {
    let name = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    let hint = if obj.hasattr("__dlpack__").unwrap_or(false) {
        ": a host tensor without the buffer protocol is read through a NumPy view of it \
         (tensor.numpy())"
    } else {
        ""
    };
    PyTypeError::new_err(format!(
        "a {name} is neither device memory (__cuda_array_interface__, __dlpack__) nor host \
         memory (the buffer protocol){hint}"
    ))
}

/// Whether items of the buffer-protocol `format` (`struct` syntax, NumPy's for structured
/// dtypes: `T{l:a:O:b:}`) are or contain Python object references (`O`); field names, between
/// colons, are not formats.
pub(crate) fn format_holds_objects(format: &str) -> bool {
    format
        .split(':')
        .step_by(2)
        .any(|codes| codes.contains('O'))
}

/// The `TypeError` for memory of Python object references.
pub(crate) fn holds_objects() -> PyErr {
    PyTypeError::new_err(
        "the array holds Python objects (dtype=object), references rather than data: hipfile \
         reads and writes plain data only",
    )
}

fn not_contiguous() -> PyErr {
    PyValueError::new_err(
        "the array is not contiguous: pass a C-contiguous array (e.g. ascontiguousarray(a))",
    )
}

/// Bytes of a row-major contiguous array of `shape` (strides in items, `None` for compact);
/// `ValueError` when it is not contiguous.
fn contiguous_len(shape: &[i64], strides: Option<&[i64]>, itemsize: usize) -> PyResult<usize> {
    let mut items: usize = 1;
    for &dim in shape {
        let dim = usize::try_from(dim).map_err(|_| PyValueError::new_err("negative dimension"))?;
        items = items
            .checked_mul(dim)
            .ok_or_else(|| PyValueError::new_err("array too large"))?;
    }
    if let (Some(strides), true) = (strides, items > 0) {
        if strides.len() != shape.len() {
            return Err(PyValueError::new_err("strides and shape differ in length"));
        }
        let mut expected: i64 = 1;
        for (&dim, &stride) in shape.iter().zip(strides).rev() {
            if dim != 1 && stride != expected {
                return Err(not_contiguous());
            }
            expected = expected.saturating_mul(dim);
        }
    }
    items
        .checked_mul(itemsize)
        .ok_or_else(|| PyValueError::new_err("array too large"))
}

/// A request's part of the memory: `size` bytes (all from `offset` to the end when `None`) at
/// `offset`, checked to lie within it; a read refuses read-only memory.
pub(crate) fn region(
    memory: &Memory,
    size: Option<usize>,
    offset: usize,
    op: IoOp,
) -> PyResult<(usize, usize)> {
    let for_read = op == IoOp::Read;
    if for_read && memory.readonly() {
        return Err(PyTypeError::new_err(
            "cannot read into read-only memory: pass a writable array",
        ));
    }
    if for_read && memory.copied() {
        return Err(PyTypeError::new_err(
            "the DLPack producer exported a copy of the array: a read into it would not reach \
             the array",
        ));
    }
    let len = memory.len();
    let available = len.checked_sub(offset).ok_or_else(|| {
        PyValueError::new_err(format!(
            "the device offset {offset} lies past the end of the {len}-byte array"
        ))
    })?;
    let size = size.unwrap_or(available);
    if size > available {
        return Err(PyValueError::new_err(format!(
            "{size} bytes at offset {offset} do not fit in the {len}-byte array"
        )));
    }
    Ok((offset, size))
}

/// The `PyTuple` of `values` (for building `__cuda_array_interface__`).
pub(crate) fn tuple<'py>(py: Python<'py>, values: &[usize]) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, values)
}

/// The getters `ptr` and `nbytes` (with these docstrings) of the class `$class`, which stands for
/// the `len` bytes of device memory at `ptr`.
macro_rules! device_span_getters {
    ($class:ident, $ptr_doc:literal, $len_doc:literal) => {
        #[pyo3::pymethods]
        impl $class {
            #[doc = $ptr_doc]
            #[getter]
            fn ptr(&self) -> usize {
                self.ptr
            }

            #[doc = $len_doc]
            #[getter]
            fn nbytes(&self) -> usize {
                self.len
            }
        }
    };
}

pub(crate) use device_span_getters;
