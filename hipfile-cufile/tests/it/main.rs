//! The cuFile entry points called as Rust functions on the simulated GPU: each returns cuFile's
//! codes. One binary, a module per subject; the tests share the library's one process-wide
//! driver, so each holds [`support::Session`] (a lock, the simulated GPU, and a driver closed
//! again at the end).

mod support;

mod batch;
mod driver;
mod io;
mod layout;
mod parameters;
mod policy;
mod recursion;
mod statistics;
mod stream;
