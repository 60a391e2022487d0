//! The staged engine's `HIPFILE_*` knobs reach a driver built with the default options. A test
//! binary of its own: it changes the process environment before any driver exists.

use hipfile_core::{DirectIoPolicy, Driver, DriverOptions};

#[test]
fn engine_knobs_in_the_environment_reach_a_default_driver() {
    std::env::set_var("HIPFILE_IO_THREADS", "3");
    std::env::set_var("HIPFILE_CHUNK_KB", "1024");
    std::env::set_var("HIPFILE_DIRECT_IO", "never");
    let driver = Driver::new(DriverOptions::default());
    let s = driver.settings();
    assert_eq!(s.io_threads(), 3);
    assert_eq!(s.chunk_bytes(), 1 << 20);
    assert_eq!(s.direct_io, DirectIoPolicy::Never);
}
