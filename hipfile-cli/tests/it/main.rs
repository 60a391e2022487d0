//! The `hipfile` binary, run as a user runs it, on the simulated GPU.

mod bench;
mod check;
mod cp;
#[cfg(feature = "remote")]
mod remote;
mod stats;
mod support;
