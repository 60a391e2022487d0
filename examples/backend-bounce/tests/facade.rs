//! The backend linked into a build of the `hipfile` facade, the way an application gets it: by
//! naming the crate, never by registering it explicitly. The facade registers its built-in
//! backends (this crate's features pick which) and adds every descriptor `inventory` collected,
//! so `bounce` must arrive ranked by its priority, below both built-in backends, and serve the
//! requests sent to it.
//!
//! `cargo xtask test-matrix` runs `registration` once more, alone, with `HIPFILE_EXPECT_BACKENDS`
//! set to the names it expects for the row's features.

// The linker leaves out a crate that nothing names, and its `inventory` entry with it: without
// this line (the only place this file names the crate) the facade would not see the backend.
use hipfile_backend_bounce as _;

use std::sync::Arc;

use hipfile::{DriverOptions, StatsSnapshot};
use hipfile_core::EnvConfig;
use hipfile_hip::sim::SimRuntime;

/// The backend's name, as `HIPFILE_BACKENDS` and the statistics know it.
const NAME: &str = "bounce";

/// The backends this build should offer requests to, in order: the built-in ones the features
/// enable, then `bounce`.
fn expected() -> Vec<&'static str> {
    let mut v = Vec::new();
    if cfg!(feature = "fastpath") {
        v.push("fastpath");
    }
    if cfg!(feature = "fallback") {
        // The staged engine's crate also brings the engine of host memory.
        v.extend(["fallback", "host"]);
    }
    v.push(NAME);
    v
}

/// A private facade driver on a fresh simulated GPU, counting statistics; `selection` is what
/// `HIPFILE_BACKENDS` would say.
fn driver(selection: Option<&str>) -> hipfile::Driver {
    hipfile::Driver::with_options(DriverOptions {
        selection: selection.map(String::from),
        env: EnvConfig {
            stats_level: Some(1),
            ..EnvConfig::default()
        },
        ..DriverOptions::with_runtime(Arc::new(SimRuntime::default()))
    })
    .unwrap()
}

/// Write `len` bytes at an unaligned offset (no direct path takes it), read them back, and check
/// them; answers the driver's statistics.
fn unaligned_round_trip(driver: &hipfile::Driver, len: usize) -> StatsSnapshot {
    let dir = tempfile::tempdir().unwrap();
    let file = std::fs::OpenOptions::new()
        .create_new(true)
        .read(true)
        .write(true)
        .open(dir.path().join("data"))
        .unwrap();
    let handle = driver.register_file(&file).unwrap();
    let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
    let mut src = driver.alloc(len).unwrap();
    src.write_at(0, &data).unwrap();
    assert_eq!(handle.write(&src, 4097).unwrap(), len);
    let mut dst = driver.alloc(len).unwrap();
    assert_eq!(handle.read(&mut dst, 4097).unwrap(), len);
    assert!(dst.to_vec().unwrap() == data, "the bytes read back");
    driver.stats().unwrap()
}

#[test]
fn registration() {
    let expected = expected();
    assert_eq!(
        hipfile::compiled_backends(),
        expected,
        "bounce arrives through inventory, ranked below the built-in backends"
    );
    if let Ok(from_matrix) = std::env::var("HIPFILE_EXPECT_BACKENDS") {
        let from_matrix: Vec<&str> = from_matrix.split(',').filter(|s| !s.is_empty()).collect();
        assert_eq!(
            hipfile::compiled_backends(),
            from_matrix,
            "the test matrix row's expectation"
        );
    }
    assert_eq!(
        driver(None).backends(),
        expected,
        "an open driver offers it"
    );

    // Selected alone, as HIPFILE_BACKENDS=bounce selects it: every request runs on it.
    let only = driver(Some(NAME));
    assert_eq!(only.backends(), [NAME]);
    let len = 3 * 4096 + 5;
    let stats = unaligned_round_trip(&only, len);
    let counts = stats.backend(NAME).expect("statistics of bounce");
    assert_eq!((counts.ops, counts.bytes), (2, 2 * len as u64));
}

#[test]
fn staged_requests_go_to_the_fallback_where_it_is_linked_else_to_bounce() {
    let driver = driver(None);
    let stats = unaligned_round_trip(&driver, 10_001);
    let served_by = if cfg!(feature = "fallback") {
        "fallback"
    } else {
        NAME
    };
    for name in driver.backends() {
        let ops = stats.backend(name).map_or(0, |c| c.ops);
        let want = if name == served_by { 2 } else { 0 };
        assert_eq!(ops, want, "requests served by {name}");
    }
}
