//! The backend conformance suite on the fastpath alone, its aligned subset (a direct engine
//! serves only aligned requests), without the FileIo fault cases (the P2P driver does its own
//! IO). Files live in the temporary directory, which must be on a filesystem the fastpath
//! serves. On the runtime under test; a platform with no P2P driver (a GPU machine without
//! nvidia-fs) gives the fastpath nothing to serve, and the run is recorded as skipped.

use hipfile_testkit::conformance::{run_all, ConformanceConfig};
use hipfile_testkit::target::runtime_under_test;

#[test]
fn conformance_of_the_aligned_subset() {
    let gpu = runtime_under_test().unwrap().runtime;
    if gpu.p2p().is_none() {
        hipfile_testkit::ledger::skip(
            "the platform has no P2P driver: the fastpath serves nothing",
        );
        return;
    }
    let cfg = ConformanceConfig {
        aligned_only: true,
        file_io_faults: false,
        ..ConformanceConfig::default()
    };
    run_all(hipfile_fastpath::DESCRIPTOR, &cfg).assert_passed();
}
