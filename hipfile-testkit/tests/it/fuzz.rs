//! The IO argument fuzz body (`fuzz/fuzz_targets/io_arguments.rs`) over a fixed-seed corpus, so
//! CI checks the same invariants as cargo-fuzz without nightly.

use hipfile_testkit::fuzz::{io_arguments, run_corpus, take_io_tally};

#[test]
fn io_arguments_hold_their_invariants_over_the_fixed_corpus() {
    take_io_tally();
    let executions = run_corpus("io_arguments", 0x10_A7_6E, 10_000, 160, io_arguments);
    let tally = take_io_tally();
    println!("io_arguments: calls checked per verdict: {tally:?}");
    // The corpus reaches every rule: each refusal, zero-byte calls and dispatched ones.
    for class in [
        "refused: Invalid argument (os error 22)",
        "refused: Bad file descriptor (os error 9)",
        "refused: HandleNotRegistered",
        "refused: InvalidValue",
        "refused: HipMemoryTypeInvalid",
        "zero bytes",
        "dispatched",
    ] {
        assert!(
            tally.get(class).is_some_and(|n| *n >= 20),
            "{class}: {tally:?}"
        );
    }
    assert!(executions >= 10_000);
}
