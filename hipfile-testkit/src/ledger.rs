//! Where each test ran, kept apart from whether it passed.
//!
//! libtest knows two outcomes, so a test that ran on the simulated GPU inside a GPU run, or one
//! that found its precondition missing and returned, would count as a plain pass. The ledger says
//! which: when `HIPFILE_TEST_LEDGER` names a file, [`runtime_under_test`] appends
//! `gpu<TAB>test name` for every test it hands the machine's real GPU, and [`skip`] appends
//! `skip<TAB>test name<TAB>reason`. The runners (`cargo xtask test-matrix`, the GPU bundle's
//! `run.sh`) read it next to libtest's `test NAME ... ok` lines and report
//! `N passed on the GPU, M on the sim, S skipped, K failed`; a test in neither list ran on the
//! simulator or needed no GPU. Without the variable nothing is written.
//!
//! The test's name is its thread's name, which libtest sets; call these from the test's own
//! thread.
//!
//! [`runtime_under_test`]: crate::target::runtime_under_test

use std::io::Write;

/// The variable naming the ledger file.
pub const LEDGER_VAR: &str = "HIPFILE_TEST_LEDGER";

/// What the ledger says of one test.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// It used the machine's real GPU.
    Gpu,
    /// It did not test what it is for, and why.
    Skipped(String),
}

/// The name libtest gave the current test (its thread's name).
fn test_name() -> String {
    std::thread::current()
        .name()
        .unwrap_or("<unnamed thread>")
        .to_string()
}

fn append(line: &str) {
    let Some(path) = std::env::var_os(LEDGER_VAR) else {
        return;
    };
    // One write of one short line on an O_APPEND file: lines of parallel tests never interleave.
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        panic!(
            "cannot write the test ledger {}: {e}",
            path.to_string_lossy()
        );
    }
}

/// Record that the current test runs on the machine's real GPU.
pub fn record_gpu() {
    append(&format!("gpu\t{}\n", test_name()));
}

/// Record that the current test is skipped for `reason`, and say so on stdout. The test then
/// returns: libtest counts it as passed, the runners as skipped.
pub fn skip(reason: &str) {
    let reason = reason.replace(['\t', '\n'], " ");
    println!("skip recorded in the test ledger: {reason}");
    append(&format!("skip\t{}\t{reason}\n", test_name()));
}

/// Parse a ledger: every test named, with its entry (a test recorded twice keeps its last).
pub fn parse(text: &str) -> std::collections::BTreeMap<String, Entry> {
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines() {
        let mut fields = line.splitn(3, '\t');
        match (fields.next(), fields.next(), fields.next()) {
            (Some("gpu"), Some(name), _) => {
                // A skip recorded by the same test wins over its GPU use.
                out.entry(name.to_string()).or_insert(Entry::Gpu);
            }
            (Some("skip"), Some(name), reason) => {
                out.insert(
                    name.to_string(),
                    Entry::Skipped(reason.unwrap_or("").to_string()),
                );
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_lines_parse_and_a_skip_wins() {
        let text = "gpu\ta::one\nskip\ta::two\tno headers\ngpu\ta::two\ngarbage\ngpu\ta::one\n";
        let map = parse(text);
        assert_eq!(map.len(), 2);
        assert_eq!(map["a::one"], Entry::Gpu);
        assert_eq!(map["a::two"], Entry::Skipped("no headers".into()));
    }
}
