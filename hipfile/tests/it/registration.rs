//! The backends registered by this build equal what its features imply (and what
//! `cargo xtask test-matrix` says they should be, through `HIPFILE_EXPECT_BACKENDS`).

use std::sync::Arc;

use hipfile_hip::sim::SimRuntime;

fn implied_by_features() -> Vec<&'static str> {
    let mut v = Vec::new();
    if cfg!(feature = "fastpath") {
        v.push("fastpath");
    }
    if cfg!(feature = "fallback") {
        // The crate of the staged engine also brings the engine of host memory.
        v.extend(["fallback", "host"]);
    }
    v
}

#[test]
fn registration() {
    let implied = implied_by_features();
    assert_eq!(hipfile::compiled_backends(), implied);
    if let Ok(expected) = std::env::var("HIPFILE_EXPECT_BACKENDS") {
        let expected: Vec<&str> = expected.split(',').filter(|s| !s.is_empty()).collect();
        assert_eq!(
            hipfile::compiled_backends(),
            expected,
            "the test matrix row's expectation"
        );
    }
    let driver = hipfile::Driver::with_options(hipfile::DriverOptions {
        selection: None,
        ..hipfile::DriverOptions::with_runtime(Arc::new(SimRuntime::default()))
    })
    .unwrap();
    assert_eq!(
        driver.backends(),
        implied,
        "an open driver offers requests to exactly these"
    );
}
