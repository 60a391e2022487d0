//! The chunk and alignment arithmetic of the staged engine and the direct path: the body is
//! `hipfile_testkit::fuzz::chunking`, which the stable test `hipfile/tests/it/chunking.rs` also
//! runs over a fixed corpus, with the same functions (`hipfile/tests/it/arithmetic.rs`).
#![no_main]

use hipfile_testkit::fuzz::chunking;

#[path = "../../hipfile/tests/it/arithmetic.rs"]
mod arithmetic;

use arithmetic::ARITHMETIC;

libfuzzer_sys::fuzz_target!(|data: &[u8]| chunking(data, &ARITHMETIC));
