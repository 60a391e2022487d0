//! The backend conformance suite, once per O_DIRECT policy and once under short and interrupted
//! transfers. Files live in the temporary directory (`TMPDIR`), which must be on a filesystem
//! with O_DIRECT for the direct-IO policies to be exercised; on the simulated GPU unless
//! `HIPFILE_GPU_TESTS=1` (see `hipfile_testkit::target`).

use std::sync::Arc;

use hipfile_core::DirectIoPolicy;
use hipfile_testkit::conformance::{run_all, CaseMemoryKind, ConformanceConfig};
use hipfile_testkit::faults::ScriptedIo;

fn config(policy: DirectIoPolicy) -> ConformanceConfig {
    ConformanceConfig {
        tune: Some(Arc::new(move |s| s.direct_io = policy)),
        ..ConformanceConfig::default()
    }
}

/// [`config`] without the `max_rw_count` case (a 2 GiB simulated device buffer): run once, under
/// the default policy.
fn without_max_rw_count(policy: DirectIoPolicy) -> ConformanceConfig {
    ConformanceConfig {
        check_max_rw_count: false,
        ..config(policy)
    }
}

#[test]
fn conformance_with_the_default_policy() {
    run_all(hipfile_fallback::DESCRIPTOR, &config(DirectIoPolicy::Auto)).assert_passed();
}

#[test]
fn conformance_without_o_direct() {
    run_all(
        hipfile_fallback::DESCRIPTOR,
        &without_max_rw_count(DirectIoPolicy::Never),
    )
    .assert_passed();
}

#[test]
fn conformance_with_o_direct_wherever_aligned() {
    run_all(
        hipfile_fallback::DESCRIPTOR,
        &without_max_rw_count(DirectIoPolicy::Always),
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
        file_io_faults: false,
        ..without_max_rw_count(DirectIoPolicy::Never)
    };
    run_all(hipfile_fallback::DESCRIPTOR, &cfg).assert_passed();
}

#[test]
fn conformance_with_every_request_on_the_callers_thread() {
    let cfg = ConformanceConfig {
        tune: Some(Arc::new(|s| s.max_request_parallelism = 1)),
        ..without_max_rw_count(DirectIoPolicy::Auto)
    };
    run_all(hipfile_fallback::DESCRIPTOR, &cfg).assert_passed();
}

/// The engine of host memory on pinned host memory (the setting `allow_system_memory` on). It
/// moves file bytes with raw-address `pread`/`pwrite`, not through the driver's file IO
/// primitives, so the scripted-fault cases have nothing to script.
#[test]
fn the_host_engine_conforms_on_pinned_host_memory() {
    let cfg = ConformanceConfig {
        memory: CaseMemoryKind::PinnedHost,
        file_io_faults: false,
        ..without_max_rw_count(DirectIoPolicy::Auto)
    };
    run_all(hipfile_fallback::host::DESCRIPTOR, &cfg).assert_passed();
}
