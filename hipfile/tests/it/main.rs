//! Integration tests of the facade: one binary, a module per concern.

mod api;
#[cfg(all(feature = "fastpath", feature = "fallback"))]
mod arithmetic;
mod batch;
mod batch_support;
#[cfg(all(feature = "fastpath", feature = "fallback"))]
mod chunking;
#[cfg(feature = "fallback")]
mod device_memory;
#[cfg(feature = "fallback")]
mod durability;
#[cfg(feature = "fallback")]
mod harness;
#[cfg(feature = "fallback")]
mod leaks;
#[cfg(feature = "fallback")]
mod multi_device;
mod registration;
#[cfg(feature = "fallback")]
mod signals;
#[cfg(feature = "fallback")]
mod stress;
#[cfg(feature = "fallback")]
mod truncation;
