//! What a Python object holds until it is closed: a driver reference, a registered file, a
//! registration. Closing takes it out and drops it with the GIL released, since the drop may wait
//! for IO in flight (deregistering waits for the requests that use the file or buffer).

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
