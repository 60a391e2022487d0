//! Integration tests of the facade: one binary, a module per concern.

mod api;
#[cfg(all(feature = "fastpath", feature = "fallback"))]
mod chunking;
#[cfg(feature = "fallback")]
mod device_memory;
#[cfg(feature = "fallback")]
mod multi_device;
mod registration;
