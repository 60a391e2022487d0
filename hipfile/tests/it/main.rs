//! Integration tests of the facade: one binary, a module per concern.

mod api;
#[cfg(feature = "fallback")]
mod device_memory;
#[cfg(feature = "fallback")]
mod multi_device;
mod registration;
