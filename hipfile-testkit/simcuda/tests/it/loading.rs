//! Libraries that are not a CUDA runtime or driver are refused with an error, never a panic.

use hipfile_hip::{nvidia_open_libraries, HipError};

use crate::support::sim_library_str;

#[test]
fn a_runtime_without_cuda_symbols_is_missing_symbol() {
    match nvidia_open_libraries("libc.so.6", &sim_library_str()) {
        Err(HipError::MissingSymbol { library, symbol }) => {
            assert_eq!(library, "libc.so.6");
            assert_eq!(symbol, "cudaRuntimeGetVersion");
        }
        other => panic!("libc.so.6 as a CUDA runtime gave {other:?}"),
    }
}

#[test]
fn a_driver_without_cuda_symbols_is_missing_symbol() {
    match nvidia_open_libraries(&sim_library_str(), "libc.so.6") {
        Err(HipError::MissingSymbol { library, symbol }) => {
            assert_eq!(library, "libc.so.6");
            assert_eq!(symbol, "cuInit");
        }
        other => panic!("libc.so.6 as a CUDA driver gave {other:?}"),
    }
}

#[test]
fn a_library_that_does_not_exist_is_a_load_error() {
    match nvidia_open_libraries("/nonexistent/dir/libcudart.so.13", &sim_library_str()) {
        Err(e @ HipError::Load { .. }) => assert!(e.to_string().contains("/nonexistent/dir")),
        other => panic!("a missing runtime gave {other:?}"),
    }
    match nvidia_open_libraries(&sim_library_str(), "/nonexistent/dir/libcuda.so.1") {
        Err(HipError::Load { library, .. }) => assert!(library.contains("/nonexistent/dir")),
        other => panic!("a missing driver gave {other:?}"),
    }
}
