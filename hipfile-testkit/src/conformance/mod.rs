//! The backend conformance suite: one set of cases every backend passes.
//!
//! Each case builds its own [`Driver`] on a fresh [`SimRuntime`], with a registry holding only
//! the backend under test, and its own files in a temporary directory. Cases check bytes exactly,
//! and check that nothing outside the target range moved: device buffers are pre-filled with a
//! sentinel and files hold a known pattern around the range, and every byte outside the range is
//! compared after each operation, on both sides. When the case is done the driver closes, and no
//! descriptor, pinned buffer, stream or allocation may be left behind.
//!
//! Most cases go through [`Driver::io`], the synchronous path (`Submit::Wait`). The `queued_*`
//! cases submit requests with `Submit::Queue` straight to the session's registry, several in
//! flight at once, and hold the backend to the rest of the contract of
//! [`hipfile_core::Backend`]: requests finished in any order each move exactly their own bytes,
//! a queued request finishes with nobody waiting for it, and dropping an unfinished one waits
//! for it.
//!
//! [`Driver`]: hipfile_core::Driver
//! [`Driver::io`]: hipfile_core::Driver::io
//! [`SimRuntime`]: hipfile_hip::sim::SimRuntime
//!
//! A backend crate calls the suite from one of its tests:
//!
//! ```
//! use hipfile_core::BackendDescriptor;
//! use hipfile_testkit::conformance::{run_all, ConformanceConfig};
//!
//! // In the backend crate: `#[test] fn conformance() { check(my_backend::descriptor()) }`.
//! fn check(descriptor: BackendDescriptor) {
//!     run_all(descriptor, &ConformanceConfig::default()).assert_passed();
//! }
//! ```

mod cases;
mod fixture;

use std::fmt;
use std::panic::{self, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use hipfile_core::{BackendDescriptor, FileIo, Settings};

pub use fixture::{pattern, CaseMemory, FileRequests, Fixture, IoFailure, TestFile, SENTINEL};

/// The memory the cases read into and write from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CaseMemoryKind {
    /// Device memory (every engine of device memory).
    #[default]
    Device,
    /// Pinned host memory, with the setting `allow_system_memory` on (the `host` engine).
    PinnedHost,
}

/// A change to the settings every driver of a run is opened with.
pub type Tune = Arc<dyn Fn(&mut Settings) + Send + Sync>;

/// What the suite may ask of a backend, and where it runs.
#[derive(Clone)]
pub struct ConformanceConfig {
    /// The backend only handles requests whose file offset, size and device address are
    /// multiples of [`ConformanceConfig::alignment`] (a direct-IO engine): only the aligned
    /// subset of each case runs.
    pub aligned_only: bool,
    /// The alignment meant by `aligned_only`.
    pub alignment: usize,
    /// `max_direct_io_size_kb` staged on every driver, kept small so that the multi-chunk sizes
    /// of the matrix exercise a backend's chunking path.
    pub max_direct_io_size_kb: u64,
    /// Run the `max_rw_count` case, which maps a 2 GiB simulated device buffer (turn off on
    /// machines that cannot spare the memory).
    pub check_max_rw_count: bool,
    /// Where the test files live (default: the system temporary directory). A direct-IO engine
    /// points this at a filesystem it accepts.
    pub dir: Option<PathBuf>,
    /// The backend moves file bytes through the driver's [`FileIo`] (as a staged engine does;
    /// a direct engine whose P2P driver does its own IO does not), so the fault cases can script
    /// failures under it. When false, those cases check nothing.
    pub file_io_faults: bool,
    /// The file IO primitives every driver uses (default: `pread`/`pwrite`); a
    /// [`crate::faults::ScriptedIo`] here runs the whole suite under short transfers.
    pub io: Option<Arc<dyn FileIo>>,
    /// More settings staged on every driver after `max_direct_io_size_kb` (a backend's own
    /// knobs, so the suite can run once per policy).
    pub tune: Option<Tune>,
    /// The memory the cases use (device memory by default).
    pub memory: CaseMemoryKind,
    /// How long the `queued_progress` case lets a request submitted with `Submit::Queue` run
    /// with nobody waiting for it before it fails: the backend's own threads (or `submit`
    /// itself) must finish it by then. Default 10 s, far beyond any request of the case.
    pub progress_deadline: Duration,
}

impl Default for ConformanceConfig {
    fn default() -> Self {
        ConformanceConfig {
            aligned_only: false,
            alignment: 4096,
            max_direct_io_size_kb: 16,
            check_max_rw_count: true,
            dir: None,
            file_io_faults: true,
            io: None,
            tune: None,
            progress_deadline: Duration::from_secs(10),
            memory: CaseMemoryKind::Device,
        }
    }
}

impl fmt::Debug for ConformanceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConformanceConfig")
            .field("aligned_only", &self.aligned_only)
            .field("alignment", &self.alignment)
            .field("max_direct_io_size_kb", &self.max_direct_io_size_kb)
            .field("check_max_rw_count", &self.check_max_rw_count)
            .field("dir", &self.dir)
            .field("file_io_faults", &self.file_io_faults)
            .field("io", &self.io)
            .field("tune", &self.tune.is_some())
            .field("progress_deadline", &self.progress_deadline)
            .field("memory", &self.memory)
            .finish()
    }
}

/// One case of the suite.
#[derive(Clone, Copy)]
pub struct Case {
    /// Its name, as reported.
    pub name: &'static str,
    /// What it checks.
    pub about: &'static str,
    run: fn(&Fixture) -> Result<(), String>,
    /// Why the configuration switches this case off (`None`: it runs).
    off: fn(&ConformanceConfig) -> Option<&'static str>,
}

impl fmt::Debug for Case {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Case")
            .field("name", &self.name)
            .field("about", &self.about)
            .finish()
    }
}

/// The outcome of one case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaseOutcome {
    /// The case.
    pub name: &'static str,
    /// `Err` says what differed (or that the case panicked, and with what).
    pub result: Result<(), String>,
    /// Set when the configuration switched the case off: it did not run, and says why.
    pub skipped: Option<&'static str>,
}

/// The outcomes of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The backend that ran.
    pub backend: &'static str,
    /// One outcome per case, in suite order.
    pub outcomes: Vec<CaseOutcome>,
}

impl Report {
    /// Whether every case passed.
    pub fn passed(&self) -> bool {
        self.outcomes.iter().all(|o| o.result.is_ok())
    }

    /// The failed cases.
    pub fn failures(&self) -> Vec<&CaseOutcome> {
        self.outcomes.iter().filter(|o| o.result.is_err()).collect()
    }

    /// The cases the configuration switched off.
    pub fn skipped(&self) -> Vec<&CaseOutcome> {
        self.outcomes
            .iter()
            .filter(|o| o.skipped.is_some())
            .collect()
    }

    /// Panic, naming each failed case and what differed, unless every case that ran passed.
    /// Prints `conformance: N passed, S skipped, M failed` with the skipped cases named.
    #[track_caller]
    pub fn assert_passed(&self) {
        let skipped = self.skipped();
        let failures = self.failures();
        println!(
            "conformance of {:?}: {} passed, {} skipped, {} failed",
            self.backend,
            self.outcomes.len() - skipped.len() - failures.len(),
            skipped.len(),
            failures.len()
        );
        for o in &skipped {
            println!("  skipped {}: {}", o.name, o.skipped.unwrap_or(""));
        }
        if !failures.is_empty() {
            let lines: Vec<String> = failures
                .iter()
                .map(|o| {
                    let why = o.result.as_ref().err().map_or("", String::as_str);
                    format!("  {}: {why}", o.name)
                })
                .collect();
            panic!(
                "backend {:?} failed {} of {} conformance cases:\n{}",
                self.backend,
                failures.len(),
                self.outcomes.len(),
                lines.join("\n")
            );
        }
    }
}

/// Every case, in the order [`run_all`] runs them.
pub fn cases() -> &'static [Case] {
    cases::ALL
}

/// Run one case on `backend`, catching a panic of the backend as a failure.
pub fn run_case(case: &Case, backend: BackendDescriptor, cfg: &ConformanceConfig) -> CaseOutcome {
    if let Some(why) = (case.off)(cfg) {
        return CaseOutcome {
            name: case.name,
            result: Ok(()),
            skipped: Some(why),
        };
    }
    let result = panic::catch_unwind(AssertUnwindSafe(|| {
        let fixture = Fixture::new(backend, cfg)?;
        (case.run)(&fixture)?;
        fixture.finish()
    }))
    .unwrap_or_else(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-string panic".to_string());
        Err(format!("panicked: {msg}"))
    });
    CaseOutcome {
        name: case.name,
        result,
        skipped: None,
    }
}

/// Run the case called `name` on `backend`, panicking with what differed if it fails (for one
/// `#[test]` per case). Panics too if no case has that name.
#[track_caller]
pub fn check_case(name: &str, backend: BackendDescriptor, cfg: &ConformanceConfig) {
    let Some(case) = cases().iter().find(|c| c.name == name) else {
        panic!("no conformance case is named {name:?}");
    };
    let outcome = run_case(case, backend, cfg);
    if let Some(why) = outcome.skipped {
        crate::ledger::skip(&format!("conformance case {name}: {why}"));
    }
    if let Err(why) = outcome.result {
        panic!("backend {:?} failed case {name}: {why}", backend.name);
    }
}

/// Run every case on `backend`.
pub fn run_all(backend: BackendDescriptor, cfg: &ConformanceConfig) -> Report {
    Report {
        backend: backend.name,
        outcomes: cases().iter().map(|c| run_case(c, backend, cfg)).collect(),
    }
}
