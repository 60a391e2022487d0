//! The test kit's own tests: its decorators fire exactly what they are told, its conformance
//! suite passes on a trivially correct backend, its reference model agrees with the driver, and
//! its HTTP proxy injects exactly the faults it is told.

mod backend;
mod concurrency;
mod conformance;
mod faults;
mod fuzz;
mod http_proxy;
mod model;
