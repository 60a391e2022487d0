//! The binding's one FFI boundary: memory and streams that Python hands over as bare addresses.
//!
//! A Python array names its memory by an integer (`__cuda_array_interface__`'s `data`, a DLPack
//! tensor's `data`) and a stream by its handle; nothing in the type system says how long either
//! lives. This module is where those integers become the facade's typed views, through the
//! constructors whose contracts say what the caller vouches for
//! ([`DeviceSliceMut::from_raw_parts`], [`DeviceSlice::from_raw_parts`],
//! [`StreamRef::from_raw`]), and where DLPack's C structs are read and written. It is the only
//! module of hipfile-py with `unsafe` (`cargo xtask tidy` allows it here and nowhere else in the
//! crate), for the reason the C ABI module has it: a language boundary is an FFI boundary.
//!
//! What the callers uphold, and how:
//! - The memory stays allocated while a view of it is used: every request holds a strong
//!   reference to the Python object that owns the memory (the array, or the DLPack capsule that
//!   keeps the producer's tensor alive) until the request ended.
//! - The range lies within the allocation: the sizes come from the array's own shape and
//!   item size, and the facade checks every range against the GPU runtime's allocation table
//!   before a byte moves, so an address the runtime does not know is refused with
//!   `hipFileHipMemoryTypeInvalid` (or `hipFileHipPointerRangeError`), never touched.
//! - Nobody else writes the memory while a read lands in it: as with any Python IO into a
//!   buffer (`readinto`), that is the program's business.
//! - A stream handle is live until the op queued on it ended: the request holds the Python
//!   object the handle came from (for the stream of `__cuda_array_interface__`, the array whose
//!   producer names it).

use std::ffi::{c_char, c_void, CStr};
use std::sync::Arc;

use hipfile::{DeviceSlice, DeviceSliceMut};
use hipfile_hip::{GpuRuntime, StreamRef};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// An exclusive view of `len` bytes of device memory at `ptr`, for a read to land in.
///
/// The caller holds the owner of the memory for as long as the view is used (see the module
/// docs); the facade checks the range against the runtime before using it.
pub(crate) fn device_mut(ptr: usize, len: usize) -> DeviceSliceMut<'static> {
    // SAFETY: the owner of `[ptr, ptr + len)` is held by the request for the view's whole use,
    // and `len` comes from the array's own shape; the facade refuses a range the runtime does not
    // know before touching it.
    unsafe { DeviceSliceMut::from_raw_parts(ptr, len) }
}

/// A shared view of `len` bytes of device memory at `ptr`, for a write to take its bytes from.
pub(crate) fn device(ptr: usize, len: usize) -> DeviceSlice<'static> {
    // SAFETY: as for `device_mut`.
    unsafe { DeviceSlice::from_raw_parts(ptr, len) }
}

/// The stream whose raw handle is `raw` (0: the null stream; 1 and 2: the legacy and per-thread
/// default streams of the calling thread) on `runtime`. The caller holds the Python object the
/// handle came from until the ops queued on it ended.
pub(crate) fn stream(runtime: &Arc<dyn GpuRuntime>, raw: usize) -> StreamRef<'_> {
    // SAFETY: 0, 1 and 2 name the default streams, which every runtime keeps and which are never
    // destroyed; any other handle comes from an object (a `hipfile.Stream`, a CuPy or PyTorch
    // stream) that the request holds, so the stream is not destroyed while the ops on it run.
    unsafe { StreamRef::from_raw(runtime, raw) }
}

/// Host memory that a Python object exports through the buffer protocol (a byte `memoryview`
/// from [`crate::memory`]), as an address: a `ctypes` array over it (`from_buffer`, which holds
/// the export, so the exporter cannot resize or free the memory meanwhile: a `bytearray`
/// refuses to resize), or for a read-only buffer a `ctypes` copy of it (`from_buffer_copy`),
/// which only a write reads. pyo3's `PyBuffer` is not in the limited API of Python 3.9 that
/// the package is built for; `ctypes` is the standard library's way to an address.
pub(crate) struct HostBytes {
    ptr: usize,
    len: usize,
    /// The `ctypes` array; declared last, dropped after any use of `ptr`.
    _holder: Py<PyAny>,
}

impl HostBytes {
    /// The bytes of `view`, a C-contiguous byte `memoryview`.
    pub(crate) fn of(view: &Bound<'_, PyAny>) -> PyResult<HostBytes> {
        let py = view.py();
        let ctypes = py.import("ctypes")?;
        let len: usize = view.getattr("nbytes")?.extract()?;
        let readonly: bool = view.getattr("readonly")?.extract()?;
        let array_type = ctypes.getattr("c_char")?.call_method1("__mul__", (len,))?;
        let holder = if readonly {
            array_type.call_method1("from_buffer_copy", (view,))?
        } else {
            array_type.call_method1("from_buffer", (view,))?
        };
        let ptr: usize = ctypes.call_method1("addressof", (&holder,))?.extract()?;
        Ok(HostBytes {
            ptr,
            len,
            _holder: holder.unbind(),
        })
    }

    /// The bytes `range`, for a read to land in; `None` when the range lies past them.
    pub(crate) fn get_mut(&mut self, range: std::ops::Range<usize>) -> Option<&mut [u8]> {
        if range.start > range.end || range.end > self.len {
            return None;
        }
        if range.is_empty() {
            return Some(&mut []);
        }
        // SAFETY: `ptr` is the address of the `ctypes` array `_holder`, `len` bytes long, which
        // `self` keeps alive; over a writable buffer the array holds the buffer exported, so the
        // memory stays allocated and in place (over a read-only one it is the array's own copy).
        // The range lies within it, and `&mut self` keeps this the only view `self` hands out.
        // Python code writing the same memory meanwhile is the program's business, as for
        // `readinto` (see the module docs).
        let all = unsafe { std::slice::from_raw_parts_mut(self.ptr as *mut u8, self.len) };
        all.get_mut(range)
    }

    /// The bytes `range`, for a write to take; `None` when the range lies past them.
    pub(crate) fn get(&self, range: std::ops::Range<usize>) -> Option<&[u8]> {
        if range.start > range.end || range.end > self.len {
            return None;
        }
        if range.is_empty() {
            return Some(&[]);
        }
        // SAFETY: as for `get_mut`, for a shared view.
        let all = unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) };
        all.get(range)
    }
}

/// `DLDevice`.
#[repr(C)]
#[derive(Clone, Copy)]
struct DlDevice {
    device_type: i32,
    device_id: i32,
}

/// `DLDataType`.
#[repr(C)]
#[derive(Clone, Copy)]
struct DlDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

/// `DLTensor`.
#[repr(C)]
struct DlTensor {
    data: *mut c_void,
    device: DlDevice,
    ndim: i32,
    dtype: DlDataType,
    shape: *mut i64,
    strides: *mut i64,
    byte_offset: u64,
}

/// `DLManagedTensor` (the unversioned capsule `"dltensor"` that `__dlpack__()` returns).
#[repr(C)]
struct DlManagedTensor {
    dl_tensor: DlTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensor)>,
}

const DLTENSOR: &CStr = c"dltensor";

/// `DLPackVersion`.
#[repr(C)]
#[derive(Clone, Copy)]
struct DlPackVersion {
    major: u32,
    minor: u32,
}

/// `DLManagedTensorVersioned` (the capsule `"dltensor_versioned"` of DLPack 1.x, which
/// `__dlpack__(max_version=(1, 0))` returns where the producer knows it).
#[repr(C)]
struct DlManagedTensorVersioned {
    version: DlPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DlManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DlTensor,
}

const DLTENSOR_VERSIONED: &CStr = c"dltensor_versioned";

/// The DLPack version whose layout this module reads, and which it asks producers for.
pub(crate) const DLPACK_VERSION: (u32, u32) = (1, 0);

/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the memory must not be written.
const FLAG_READ_ONLY: u64 = 1 << 0;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`: the tensor is a copy of the producer's array.
const FLAG_IS_COPIED: u64 = 1 << 1;

/// A DLPack tensor as read from its capsule: first byte, item size, shape and strides (in
/// items; `None` for compact row-major), and the versioned capsule's flags (none for an
/// unversioned one).
pub(crate) struct DlpackView {
    pub(crate) ptr: usize,
    pub(crate) itemsize: usize,
    pub(crate) shape: Vec<i64>,
    pub(crate) strides: Option<Vec<i64>>,
    /// The producer's memory must not be written.
    pub(crate) readonly: bool,
    /// The tensor is a copy of the producer's array: what lands in it never reaches the array.
    pub(crate) copied: bool,
}

/// Read the tensor a `"dltensor_versioned"` (DLPack 1.x) or `"dltensor"` capsule describes. The
/// capsule is not consumed (not renamed `"used_..."`): the producer's capsule destructor frees
/// the tensor when the capsule dies, so holding the capsule keeps the memory alive.
pub(crate) fn dlpack_view(capsule: &Bound<'_, PyAny>) -> PyResult<DlpackView> {
    let capsule = capsule
        .cast::<PyCapsule>()
        .map_err(|_| PyTypeError::new_err("__dlpack__() did not return a capsule"))?;
    let (tensor, flags) = if let Ok(versioned) = capsule.pointer_checked(Some(DLTENSOR_VERSIONED)) {
        // SAFETY: a "dltensor_versioned" capsule points to a `DLManagedTensorVersioned` that
        // stays valid while the capsule is alive and unconsumed; its version leads the struct
        // in every major version, and the rest is read only under the major version we know.
        let managed = unsafe { versioned.cast::<DlManagedTensorVersioned>().as_ref() };
        let version = managed.version;
        if version.major != DLPACK_VERSION.0 {
            return Err(PyValueError::new_err(format!(
                "__dlpack__() returned a DLPack {}.{} tensor; DLPack {}.x is read",
                version.major, version.minor, DLPACK_VERSION.0
            )));
        }
        (&managed.dl_tensor, managed.flags)
    } else {
        let managed = capsule
            .pointer_checked(Some(DLTENSOR))
            .map_err(|_| {
                PyValueError::new_err(
                    "__dlpack__() returned a capsule that is not an unconsumed \"dltensor\" \
                     or \"dltensor_versioned\"",
                )
            })?
            .cast::<DlManagedTensor>();
        // SAFETY: a "dltensor" capsule points to a `DLManagedTensor` that stays valid while the
        // capsule is alive and unconsumed; we read it while holding the capsule.
        (unsafe { &managed.as_ref().dl_tensor }, 0)
    };
    let ndim = usize::try_from(tensor.ndim)
        .map_err(|_| PyValueError::new_err("DLPack tensor with a negative ndim"))?;
    let read_dims = |p: *mut i64| -> Vec<i64> {
        if p.is_null() || ndim == 0 {
            Vec::new()
        } else {
            // SAFETY: DLPack's `shape` and non-null `strides` hold `ndim` values, owned by the
            // tensor the capsule keeps alive.
            unsafe { std::slice::from_raw_parts(p, ndim) }.to_vec()
        }
    };
    let bits = usize::from(tensor.dtype.bits) * usize::from(tensor.dtype.lanes);
    if bits % 8 != 0 {
        return Err(PyValueError::new_err(
            "DLPack tensors of items that are not whole bytes are not supported",
        ));
    }
    let shape = read_dims(tensor.shape);
    if shape.len() != ndim {
        return Err(PyValueError::new_err("DLPack tensor without a shape"));
    }
    Ok(DlpackView {
        ptr: (tensor.data as usize).wrapping_add(tensor.byte_offset as usize),
        itemsize: bits / 8,
        shape,
        strides: (!tensor.strides.is_null()).then(|| read_dims(tensor.strides)),
        readonly: flags & FLAG_READ_ONLY != 0,
        copied: flags & FLAG_IS_COPIED != 0,
    })
}

/// What an exported capsule owns: the tensor, its one-dimension shape, and the Python object
/// whose memory it describes.
#[repr(C)]
struct Export {
    managed: DlManagedTensor,
    shape: [i64; 1],
    owner: Py<PyAny>,
}

/// The deleter DLPack consumers call when done with a tensor we exported.
unsafe extern "C" fn delete_export(managed: *mut DlManagedTensor) {
    if managed.is_null() {
        return;
    }
    // SAFETY: `managed` is the first field of an `Export` made by `Box::into_raw` in
    // `dlpack_capsule`; DLPack calls the deleter once, so the box is rebuilt once.
    drop(unsafe { Box::from_raw(managed.cast::<Export>()) });
}

/// The capsule's destructor: a capsule that no consumer took (still named `"dltensor"`) deletes
/// its tensor; a consumed one (`"used_dltensor"`) leaves it to the consumer.
unsafe extern "C" fn destroy_capsule(capsule: *mut pyo3::ffi::PyObject) {
    // SAFETY: called by Python with the dying capsule; the name check comes first, and
    // `PyCapsule_IsValid` sets no exception.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(capsule, DLTENSOR.as_ptr()) == 1 {
            let managed = pyo3::ffi::PyCapsule_GetPointer(capsule, DLTENSOR.as_ptr());
            delete_export(managed.cast::<DlManagedTensor>());
        }
    }
}

/// A `"dltensor"` capsule describing `len` bytes of device memory at `ptr` as a one-dimensional
/// `uint8` tensor on (`device_type`, `device_id`); the capsule holds `owner` until the tensor is
/// deleted.
pub(crate) fn dlpack_capsule(
    py: Python<'_>,
    owner: Py<PyAny>,
    ptr: usize,
    len: usize,
    device_type: i32,
    device_id: i32,
) -> PyResult<Py<PyAny>> {
    let export = Box::into_raw(Box::new(Export {
        managed: DlManagedTensor {
            dl_tensor: DlTensor {
                data: ptr as *mut c_void,
                device: DlDevice {
                    device_type,
                    device_id,
                },
                ndim: 1,
                dtype: DlDataType {
                    code: 1, // kDLUInt
                    bits: 8,
                    lanes: 1,
                },
                shape: std::ptr::null_mut(),
                strides: std::ptr::null_mut(),
                byte_offset: 0,
            },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_export),
        },
        shape: [len as i64],
        owner,
    }));
    // SAFETY: `export` is a live box we own until the deleter runs; the shape points into it, so
    // it lives as long as the tensor. `PyCapsule_New` takes a NUL-terminated name that outlives
    // the capsule (a static) and a destructor that follows DLPack's consumption rule.
    unsafe {
        (*export).managed.dl_tensor.shape = (*export).shape.as_mut_ptr();
        (*export).managed.manager_ctx = export.cast::<c_void>();
        let capsule = pyo3::ffi::PyCapsule_New(
            export.cast::<c_void>(),
            DLTENSOR.as_ptr() as *const c_char,
            Some(destroy_capsule),
        );
        if capsule.is_null() {
            delete_export(export.cast::<DlManagedTensor>());
            return Err(PyErr::fetch(py));
        }
        Ok(Py::from_owned_ptr(py, capsule))
    }
}
