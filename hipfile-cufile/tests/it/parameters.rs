//! Parameters: staged while closed, read back, ranges, and the POSIX pool slab arrays.

use std::ffi::{c_char, CStr};

use cufile::*;

use crate::support::{op, Session, SUCCESS};

#[test]
fn parameters_are_staged_while_closed_and_read_back() {
    let _s = Session::start();
    let direct = CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB;
    assert_eq!(cuFileSetParameterSizeT(direct, 8192), SUCCESS);
    assert_eq!(
        cuFileSetParameterBool(CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE, true),
        SUCCESS
    );
    // SAFETY: a NUL-terminated literal.
    let level = unsafe { cuFileSetParameterString(CUFILE_PARAM_LOGGING_LEVEL, c"ERROR".as_ptr()) };
    assert_eq!(level, SUCCESS);
    let (mut size, mut flag, mut text) = (0usize, false, [0 as c_char; 32]);
    // SAFETY: live locals of the right types and lengths.
    unsafe {
        assert_eq!(cuFileGetParameterSizeT(direct, &mut size), SUCCESS);
        assert_eq!(
            cuFileGetParameterBool(CUFILE_PARAM_PROPERTIES_ALLOW_SYSTEM_MEMORY, &mut flag),
            SUCCESS
        );
        assert_eq!(
            cuFileGetParameterString(CUFILE_PARAM_LOGGING_LEVEL, text.as_mut_ptr(), 32),
            SUCCESS
        );
        assert_eq!(CStr::from_ptr(text.as_ptr()), c"ERROR");
        assert_eq!(
            cuFileGetParameterSizeT(99, &mut size),
            op(CU_FILE_INVALID_VALUE)
        );
    }
    assert_eq!(size, 8192);
    assert!(flag, "the cuFile door allows host memory");
    assert_eq!(cuFileDriverOpen(), SUCCESS);
    assert_eq!(
        cuFileSetParameterSizeT(direct, 4096),
        op(CU_FILE_DRIVER_ALREADY_OPEN)
    );
    assert_eq!(cuFileDriverClose(), SUCCESS);
    // Restore what later tests expect.
    assert_eq!(cuFileSetParameterSizeT(direct, 16384), SUCCESS);
    // SAFETY: a NUL-terminated literal.
    unsafe { cuFileSetParameterString(CUFILE_PARAM_LOGGING_LEVEL, c"OFF".as_ptr()) };
}

#[test]
fn ranges_are_what_setting_accepts() {
    let _s = Session::start();
    let direct = CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB;
    let (mut min, mut max) = (0usize, 0usize);
    // SAFETY: live locals; then NULL, which must be refused.
    unsafe {
        assert_eq!(
            cuFileGetParameterMinMaxValue(direct, &mut min, &mut max),
            SUCCESS
        );
        assert_eq!(
            cuFileGetParameterMinMaxValue(direct, std::ptr::null_mut(), &mut max),
            op(CU_FILE_INVALID_VALUE)
        );
        assert_eq!(
            cuFileGetParameterMinMaxValue(12, &mut min, &mut max),
            op(CU_FILE_INVALID_VALUE)
        );
        assert_eq!(
            cuFileGetParameterMinMaxValue(direct, &mut min, &mut max),
            SUCCESS
        );
    }
    assert_eq!(cuFileSetParameterSizeT(direct, min), SUCCESS);
    assert_eq!(cuFileSetParameterSizeT(direct, max), SUCCESS);
    assert_ne!(cuFileSetParameterSizeT(direct, max + 1), SUCCESS);
    assert_ne!(cuFileSetParameterSizeT(direct, min - 1), SUCCESS);
    assert_eq!(cuFileSetParameterSizeT(direct, 16384), SUCCESS);
}

#[test]
fn slab_arrays_round_trip_and_are_checked() {
    let _s = Session::start();
    let (mut sizes, mut counts) = ([0usize; 3], [0usize; 3]);
    // SAFETY: arrays of the lengths passed.
    unsafe {
        assert_eq!(
            cuFileGetParameterPosixPoolSlabArray(sizes.as_mut_ptr(), counts.as_mut_ptr(), 3),
            SUCCESS
        );
        assert_eq!(
            (sizes, counts),
            ([4, 1024, 16384], [128, 64, 64]),
            "cuFile's defaults"
        );
        let (new_sizes, new_counts) = ([8usize, 2048], [16usize, 4]);
        assert_eq!(
            cuFileSetParameterPosixPoolSlabArray(new_sizes.as_ptr(), new_counts.as_ptr(), 2),
            SUCCESS
        );
        assert_eq!(
            cuFileGetParameterPosixPoolSlabArray(sizes.as_mut_ptr(), counts.as_mut_ptr(), 3),
            op(CU_FILE_INVALID_VALUE),
            "the length must be the arrays'"
        );
        assert_eq!(
            cuFileGetParameterPosixPoolSlabArray(sizes.as_mut_ptr(), counts.as_mut_ptr(), 2),
            SUCCESS
        );
        assert_eq!(
            (&sizes[..2], &counts[..2]),
            (&new_sizes[..], &new_counts[..])
        );
        let unaligned = [6usize];
        assert_eq!(
            cuFileSetParameterPosixPoolSlabArray(unaligned.as_ptr(), counts.as_ptr(), 1),
            op(CU_FILE_INVALID_VALUE)
        );
        assert_eq!(
            cuFileSetParameterPosixPoolSlabArray(new_sizes.as_ptr(), counts.as_ptr(), 0),
            op(CU_FILE_INVALID_VALUE)
        );
        assert_eq!(
            cuFileSetParameterPosixPoolSlabArray(std::ptr::null(), counts.as_ptr(), 1),
            op(CU_FILE_INVALID_VALUE)
        );
        assert_eq!(cuFileDriverOpen(), SUCCESS);
        assert_eq!(
            cuFileSetParameterPosixPoolSlabArray(new_sizes.as_ptr(), new_counts.as_ptr(), 2),
            op(CU_FILE_DRIVER_ALREADY_OPEN)
        );
        assert_eq!(cuFileDriverClose(), SUCCESS);
        let (defaults_sizes, defaults_counts) = ([4usize, 1024, 16384], [128usize, 64, 64]);
        assert_eq!(
            cuFileSetParameterPosixPoolSlabArray(
                defaults_sizes.as_ptr(),
                defaults_counts.as_ptr(),
                3
            ),
            SUCCESS
        );
    }
}

/// cuda.bindings' round trips: every size_t and bool parameter set to a value of its own and
/// read back, then restored; strings likewise.
#[test]
fn every_parameter_round_trips() {
    let _s = Session::start();
    let sizes = [
        (10, 64),
        (5, 1024),
        (6, 512),
        (7, 128),
        (8, 2048),
        (9, 16),
        (11, 5000),
        (1, 32),
        (2, 8),
        (3, 4),
        (4, 4),
    ];
    for (param, value) in sizes {
        let mut orig = 0usize;
        let mut got = 0usize;
        // SAFETY: live locals.
        unsafe {
            assert_eq!(
                cuFileGetParameterSizeT(param, &mut orig),
                SUCCESS,
                "{param}"
            );
            assert_eq!(cuFileSetParameterSizeT(param, value), SUCCESS, "{param}");
            assert_eq!(cuFileGetParameterSizeT(param, &mut got), SUCCESS, "{param}");
        }
        assert_eq!(got, value, "{param}");
        assert_eq!(cuFileSetParameterSizeT(param, orig), SUCCESS, "{param}");
    }
    let bools = [
        (0, true),
        (1, false),
        (2, false),
        (3, true),
        (4, true),
        (5, false),
        (6, true),
        (7, true),
        (8, false),
        (9, true),
        (10, false),
        (11, true),
    ];
    for (param, value) in bools {
        let (mut orig, mut got) = (false, !value);
        // SAFETY: live locals.
        unsafe {
            assert_eq!(cuFileGetParameterBool(param, &mut orig), SUCCESS, "{param}");
            assert_eq!(cuFileSetParameterBool(param, value), SUCCESS, "{param}");
            assert_eq!(cuFileGetParameterBool(param, &mut got), SUCCESS, "{param}");
        }
        assert_eq!(got, value, "{param}");
        assert_eq!(cuFileSetParameterBool(param, orig), SUCCESS, "{param}");
    }
    let dir = tempfile::tempdir().unwrap();
    let log =
        std::ffi::CString::new(dir.path().join("cufile.log").to_string_lossy().as_bytes()).unwrap();
    for (param, value) in [(0, c"INFO"), (1, log.as_c_str()), (2, c"/tmp/cufile_logs")] {
        let mut text = [0 as c_char; 256];
        // SAFETY: NUL-terminated strings and a buffer of the length passed.
        unsafe {
            assert_eq!(
                cuFileSetParameterString(param, value.as_ptr()),
                SUCCESS,
                "{param}"
            );
            assert_eq!(
                cuFileGetParameterString(param, text.as_mut_ptr(), 256),
                SUCCESS
            );
            assert_eq!(CStr::from_ptr(text.as_ptr()), value, "{param}");
        }
    }
    // SAFETY: NUL-terminated literals.
    unsafe {
        assert_eq!(cuFileSetParameterString(0, c"OFF".as_ptr()), SUCCESS);
        assert_eq!(cuFileSetParameterString(1, c"".as_ptr()), SUCCESS);
    }
}
