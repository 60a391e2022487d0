//! What a Python object holds until it is closed: a driver reference, a registered file, a
//! registration. Closing takes it out and drops it with the GIL released, since the drop may wait
//! for IO in flight (deregistering waits for the requests that use the file or buffer); leaving a
//! `with` block closes ([`with_block`]).

use std::sync::{Mutex, PoisonError};

use pyo3::Python;

/// Take what `slot` holds and drop it with the GIL released. A slot already empty: nothing.
pub(crate) fn release<T: Send>(py: Python<'_>, slot: &Mutex<Option<T>>) {
    let held = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
    py.detach(|| drop(held));
}

/// Whether `slot` was released.
pub(crate) fn is_released<T>(slot: &Mutex<Option<T>>) -> bool {
    slot.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .is_none()
}

/// `with` for the class `$class`: `__enter__` answers the object, `__exit__` lets go of what it
/// holds through its method `$release(py)` and lets an exception from the block propagate.
macro_rules! with_block {
    ($class:ident, $release:ident) => {
        #[pyo3::pymethods]
        impl $class {
            fn __enter__(slf: pyo3::Py<Self>) -> pyo3::Py<Self> {
                slf
            }

            fn __exit__(
                &self,
                py: pyo3::Python<'_>,
                _ty: Option<&pyo3::Bound<'_, pyo3::PyAny>>,
                _value: Option<&pyo3::Bound<'_, pyo3::PyAny>>,
                _tb: Option<&pyo3::Bound<'_, pyo3::PyAny>>,
            ) -> bool {
                self.$release(py);
                false
            }
        }
    };
}

pub(crate) use with_block;
