//! Arbitrary handles, pointers, sizes and offsets through `hipfile_core::Driver::io` on the
//! simulated GPU: the body is `hipfile_testkit::fuzz::io_arguments`, which the stable test
//! `hipfile-testkit/tests/it/fuzz.rs` also runs over a fixed corpus.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| hipfile_testkit::fuzz::io_arguments(data));
