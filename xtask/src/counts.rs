//! What a command counted: tests and checks passed, skipped and failed. Each step of
//! `cargo xtask test` reports its own ([`Report`]), and their sum is the run's closing line,
//! `N passed, S skipped, M failed`.
//!
//! What one unit is depends on the step: fmt and clippy are one check each, tidy one per house
//! rule, test-matrix one per Rust test (libtest's `test NAME ... ok` lines, the ledger's skips
//! taken out), c-tests one per check line of a whole program and one per case run of a
//! `*_cases` program, python one per pytest test.

/// Tests or checks counted by one step, or by many summed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub passed: usize,
    pub skipped: usize,
    pub failed: usize,
}

impl Counts {
    pub fn add(&mut self, other: Counts) {
        self.passed += other.passed;
        self.skipped += other.skipped;
        self.failed += other.failed;
    }
}

impl std::fmt::Display for Counts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} passed, {} skipped, {} failed",
            self.passed, self.skipped, self.failed
        )
    }
}

/// What a command counted, and why it failed when it did; the two agree (see [`Report::new`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    counts: Counts,
    result: Result<(), String>,
}

impl Report {
    /// `counts` with the command's `result`, made to agree: a failed command counts at least one
    /// failure (one that stopped before it counted anything, a build error or a missing tool, must
    /// not leave a total of 0 failed), and a command that counted a failure has failed.
    pub fn new(counts: Counts, result: Result<(), String>) -> Report {
        let result = match result {
            Ok(()) if counts.failed > 0 => Err(format!("{} failed", counts.failed)),
            other => other,
        };
        let failed = match result {
            Err(_) => counts.failed.max(1),
            Ok(()) => counts.failed,
        };
        Report {
            counts: Counts { failed, ..counts },
            result,
        }
    }

    /// A command that is one check: passed or failed.
    pub fn single(result: Result<(), String>) -> Report {
        let passed = usize::from(result.is_ok());
        Report::new(
            Counts {
                passed,
                ..Counts::default()
            },
            result,
        )
    }

    /// A command that failed before it counted anything.
    pub fn failed(why: String) -> Report {
        Report::new(Counts::default(), Err(why))
    }

    pub fn counts(&self) -> Counts {
        self.counts
    }

    pub fn result(&self) -> &Result<(), String> {
        &self.result
    }

    pub fn into_result(self) -> Result<(), String> {
        self.result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_agrees_with_its_result() {
        let counts = Counts {
            passed: 5,
            skipped: 1,
            failed: 0,
        };
        assert_eq!(Report::new(counts, Ok(())).counts, counts);
        let stopped = Report::new(counts, Err("cargo build failed".into()));
        assert_eq!(stopped.counts.failed, 1, "a failure counted nothing: one");
        assert_eq!(stopped.counts.passed, 5);
        let two = Counts {
            failed: 2,
            ..counts
        };
        assert_eq!(Report::new(two, Err("x".into())).counts.failed, 2);
        assert_eq!(
            Report::new(two, Ok(())).result,
            Err("2 failed".to_string()),
            "failures counted: the command failed"
        );
        assert_eq!(
            Report::single(Ok(())).counts.to_string(),
            "1 passed, 0 skipped, 0 failed"
        );
        assert_eq!(
            Report::single(Err("diff".into())).counts.to_string(),
            "0 passed, 0 skipped, 1 failed"
        );
        assert_eq!(Report::failed("no python3".into()).counts.failed, 1);
    }
}
