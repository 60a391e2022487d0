//! The chunk and alignment fuzz body (`fuzz/fuzz_targets/chunking.rs`) over a fixed-seed corpus,
//! on the arithmetic of both built-in backends.

use hipfile_testkit::fuzz::{chunking, run_corpus};

use crate::arithmetic::ARITHMETIC;

#[test]
fn chunk_and_alignment_arithmetic_holds_over_the_fixed_corpus() {
    let executions = run_corpus("chunking", 0xC4_0C4, 20_000, 96, |data| {
        chunking(data, &ARITHMETIC)
    });
    assert!(executions >= 20_000);
}
