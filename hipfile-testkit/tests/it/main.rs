//! The test kit's own tests: its decorators fire exactly what they are told, its conformance
//! suite passes on a trivially correct backend, and its reference model agrees with the driver.

mod backend;
mod concurrency;
mod conformance;
mod faults;
mod fuzz;
mod model;
