//! Libraries that are not a HIP runtime are refused with an error, never a panic.

use hipfile_hip::{amd_open_library, HipError};

#[test]
fn a_library_without_hip_symbols_is_missing_symbol() {
    match amd_open_library("libc.so.6") {
        Err(HipError::MissingSymbol { library, symbol }) => {
            assert_eq!(library, "libc.so.6");
            assert_eq!(symbol, "hipRuntimeGetVersion");
        }
        other => panic!("libc.so.6 as a HIP runtime gave {other:?}"),
    }
}

#[test]
fn a_library_that_does_not_exist_is_a_load_error() {
    match amd_open_library("/nonexistent/dir/libamdhip64.so.6") {
        Err(e @ HipError::Load { .. }) => assert!(e.to_string().contains("/nonexistent/dir")),
        other => panic!("a missing file gave {other:?}"),
    }
}
