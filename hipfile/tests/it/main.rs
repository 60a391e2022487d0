//! Integration tests of the facade: one binary, a module per concern.

#[cfg(feature = "fallback")]
mod access;
mod api;
#[cfg(all(feature = "fastpath", feature = "fallback"))]
mod arithmetic;
mod batch;
mod batch_stress;
mod batch_support;
#[cfg(all(feature = "fastpath", feature = "fallback"))]
mod chunking;
#[cfg(feature = "fallback")]
mod device_memory;
#[cfg(feature = "fallback")]
mod durability;
// The batch stress test runs in every row; the rest of what uses the harness needs the fallback.
#[cfg_attr(not(feature = "fallback"), allow(dead_code))]
mod harness;
#[cfg(feature = "fallback")]
mod host_memory;
#[cfg(feature = "fallback")]
mod leaks;
#[cfg(feature = "fallback")]
mod multi_device;
#[cfg(feature = "fallback")]
#[path = "../support/no_access_page.rs"]
mod no_access_page;
#[cfg(feature = "fallback")]
mod page_pins;
#[cfg(all(feature = "fastpath", feature = "fallback"))]
mod policy;
mod registration;
#[cfg(feature = "fallback")]
mod signals;
#[cfg(all(feature = "fastpath", feature = "fallback"))]
mod stats;
mod stream;
mod stream_stress;
#[cfg(feature = "fallback")]
mod stress;
#[cfg(feature = "fallback")]
mod truncation;
