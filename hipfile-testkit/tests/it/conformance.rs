//! The conformance suite on the in-test backend: whole, per case, aligned subset, and under
//! scripted short transfers.

use std::sync::Arc;
use std::time::Duration;

use hipfile_testkit::conformance::{cases, check_case, run_all, ConformanceConfig};
use hipfile_testkit::faults::{FileOp, ScriptedIo};

use crate::backend::{
    forgetful_descriptor, on_wait_descriptor, threaded_descriptor, vec_copy_descriptor, VEC_COPY,
};

#[test]
fn vec_copy_passes_every_case() {
    let report = run_all(vec_copy_descriptor(), &ConformanceConfig::default());
    assert_eq!(report.backend, VEC_COPY);
    assert_eq!(report.outcomes.len(), cases().len());
    report.assert_passed();
}

#[test]
fn the_aligned_subset_passes_and_still_runs_requests() {
    let cfg = ConformanceConfig {
        aligned_only: true,
        check_max_rw_count: false,
        ..ConformanceConfig::default()
    };
    run_all(vec_copy_descriptor(), &cfg).assert_passed();
}

#[test]
fn cases_can_run_one_by_one() {
    let cfg = ConformanceConfig {
        check_max_rw_count: false,
        ..ConformanceConfig::default()
    };
    for name in ["roundtrip", "holes_read_as_zeros", "zero_size"] {
        check_case(name, vec_copy_descriptor(), &cfg);
    }
    let names: Vec<_> = cases().iter().map(|c| c.name).collect();
    assert!(names.contains(&"matrix_write_interior"));
    assert!(names.contains(&"max_rw_count"));
}

#[test]
fn the_suite_passes_under_short_transfers_everywhere() {
    let io = Arc::new(
        ScriptedIo::new()
            .interrupt_pread(2)
            .interrupt_pwrite(2)
            .short_preads_from(1, 1000)
            .short_pwrites_from(1, 777),
    );
    let cfg = ConformanceConfig {
        check_max_rw_count: false,
        io: Some(io.clone()),
        ..ConformanceConfig::default()
    };
    run_all(vec_copy_descriptor(), &cfg).assert_passed();
    let fired = io.fired();
    assert!(io.calls(FileOp::Pread) > 100 && io.calls(FileOp::Pwrite) > 100);
    assert_eq!(
        fired.len() as u64,
        io.calls(FileOp::Pread) + io.calls(FileOp::Pwrite)
    );
}

#[test]
fn the_suite_catches_a_backend_that_writes_past_its_range() {
    let cfg = ConformanceConfig {
        check_max_rw_count: false,
        ..ConformanceConfig::default()
    };
    let report = run_all(crate::backend::overrunning_descriptor(), &cfg);
    assert!(!report.passed());
    let failed: Vec<_> = report.failures().iter().map(|o| o.name).collect();
    for case in [
        "matrix_read_registered",
        "matrix_read_interior",
        "eof_short_read",
        "queued_out_of_order",
        "queued_progress",
        "queued_drop_waits",
    ] {
        assert!(failed.contains(&case), "{case} did not fail: {failed:?}");
    }
    let why = report.failures()[0].result.clone().unwrap_err();
    assert!(why.contains("is 0x5a, expected 0xa5"), "{why}");
    assert!(!failed.contains(&"matrix_write_registered"), "{failed:?}");
    let caught = std::panic::catch_unwind(|| report.assert_passed()).unwrap_err();
    let msg = caught.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("matrix_read_registered"), "{msg}");
}

#[test]
fn a_backend_that_queues_requests_on_threads_of_its_own_passes_every_case() {
    let cfg = ConformanceConfig {
        check_max_rw_count: false,
        ..ConformanceConfig::default()
    };
    run_all(threaded_descriptor(), &cfg).assert_passed();
    let aligned = ConformanceConfig {
        aligned_only: true,
        ..cfg
    };
    run_all(threaded_descriptor(), &aligned).assert_passed();
}

/// The names of the cases `descriptor` fails.
fn failed_cases(
    descriptor: hipfile_core::BackendDescriptor,
    cfg: &ConformanceConfig,
) -> Vec<&'static str> {
    run_all(descriptor, cfg)
        .failures()
        .iter()
        .map(|o| o.name)
        .collect()
}

#[test]
fn a_backend_whose_queued_requests_wait_for_a_waiter_fails_the_progress_case_alone() {
    let cfg = ConformanceConfig {
        check_max_rw_count: false,
        progress_deadline: Duration::from_millis(200),
        ..ConformanceConfig::default()
    };
    let report = run_all(on_wait_descriptor(), &cfg);
    let failed: Vec<_> = report.failures().iter().map(|o| o.name).collect();
    assert_eq!(failed, ["queued_progress"]);
    let why = report.failures()[0].result.clone().unwrap_err();
    assert!(why.contains("nobody waiting for it"), "{why}");
    let aligned = ConformanceConfig {
        aligned_only: true,
        ..cfg
    };
    assert_eq!(
        failed_cases(on_wait_descriptor(), &aligned),
        ["queued_progress"]
    );
}

#[test]
fn a_backend_whose_queued_requests_move_nothing_fails_every_queued_case() {
    let cfg = ConformanceConfig {
        check_max_rw_count: false,
        ..ConformanceConfig::default()
    };
    let queued = [
        "queued_out_of_order",
        "queued_progress",
        "queued_drop_waits",
    ];
    assert_eq!(failed_cases(forgetful_descriptor(), &cfg), queued);
    let aligned = ConformanceConfig {
        aligned_only: true,
        ..cfg
    };
    assert_eq!(failed_cases(forgetful_descriptor(), &aligned), queued);
}
