//! The shared backend conformance suite on `bounce` alone: once as configured by default, and
//! once under short and interrupted transfers. On the simulated GPU unless `HIPFILE_GPU_TESTS=1`
//! (see `hipfile_testkit::target`).

use std::sync::Arc;

use hipfile_testkit::conformance::{run_all, ConformanceConfig};
use hipfile_testkit::faults::ScriptedIo;

#[test]
fn conformance() {
    run_all(
        hipfile_backend_bounce::DESCRIPTOR,
        &ConformanceConfig::default(),
    )
    .assert_passed();
}

#[test]
fn conformance_under_short_and_interrupted_transfers() {
    let io = ScriptedIo::new()
        .short_preads_from(1, 1000)
        .short_pwrites_from(1, 777)
        .interrupt_pread(2)
        .interrupt_pwrite(3);
    let cfg = ConformanceConfig {
        io: Some(Arc::new(io)),
        // The 2 GiB request of `max_rw_count` ran above; once is enough.
        check_max_rw_count: false,
        ..ConformanceConfig::default()
    };
    run_all(hipfile_backend_bounce::DESCRIPTOR, &cfg).assert_passed();
}
