//! Opening and closing, version, properties and the live knobs.

use cufile::*;

use crate::support::{op, Session, SUCCESS};

#[test]
fn open_close_and_use_count_as_cufile() {
    let _s = Session::start();
    assert_eq!(cuFileUseCount(), 0);
    assert_eq!(cuFileDriverClose(), op(CU_FILE_DRIVER_NOT_INITIALIZED));
    assert_eq!(cuFileDriverOpen(), SUCCESS);
    assert_eq!(cuFileDriverOpen(), SUCCESS);
    assert_eq!(cuFileUseCount(), 2);
    // Both names of the close drop one reference.
    assert_eq!(cuFileDriverClose_v2(), SUCCESS);
    assert_eq!(cuFileUseCount(), 1);
    assert_eq!(cuFileDriverClose(), SUCCESS);
    assert_eq!(cuFileUseCount(), 0);
}

#[test]
fn the_version_takes_kvikios_batch_and_stream_paths() {
    let _s = Session::start();
    let mut version = 0;
    // SAFETY: a live int; then NULL, which must be refused.
    unsafe {
        assert_eq!(cuFileGetVersion(&mut version), SUCCESS);
        assert_eq!(
            cuFileGetVersion(std::ptr::null_mut()),
            op(CU_FILE_INVALID_VALUE)
        );
    }
    assert_eq!(version, 1150);
    assert!(
        version >= 1070,
        "KvikIO gates streams on 1070 and batches on 1060"
    );
}

#[test]
fn properties_and_live_knobs() {
    let _s = Session::start();
    assert_eq!(
        cuFileDriverSetPollMode(true, 64),
        op(CU_FILE_DRIVER_NOT_INITIALIZED)
    );
    assert_eq!(cuFileDriverOpen(), SUCCESS);
    assert_eq!(cuFileDriverSetPollMode(true, 64), SUCCESS);
    assert_eq!(cuFileDriverSetMaxDirectIOSize(8192), SUCCESS);
    assert_eq!(cuFileDriverSetMaxDirectIOSize(0), op(CU_FILE_INVALID_VALUE));
    assert_eq!(cuFileDriverSetMaxCacheSize(1 << 20), SUCCESS);
    assert_eq!(cuFileDriverSetMaxPinnedMemSize(64 << 10), SUCCESS);
    let mut props = CUfileDrvProps_t::default();
    // SAFETY: a live struct of the right type.
    assert_eq!(unsafe { cuFileDriverGetProperties(&mut props) }, SUCCESS);
    assert_eq!(props.nvfs.poll_thresh_size, 64);
    assert_eq!(props.nvfs.max_direct_io_size, 8192);
    assert_eq!(props.nvfs.dcontrolflags & (1 << CU_FILE_USE_POLL_MODE), 1);
    assert_eq!(props.max_device_cache_size, 1 << 20);
    assert_eq!(props.max_device_pinned_mem_size, 64 << 10);
    let both = (1 << CU_FILE_BATCH_IO_SUPPORTED) | (1 << CU_FILE_STREAMS_SUPPORTED);
    assert_eq!(props.fflags & both, both);
    // SAFETY: NULL, which must be refused.
    let null = unsafe { cuFileDriverGetProperties(std::ptr::null_mut()) };
    assert_eq!(null, op(CU_FILE_INVALID_VALUE));
}

/// Sizes cuFile keeps in `unsigned int` saturate in the one conversion.
#[test]
fn properties_convert_with_saturation() {
    let mut p = hipfile::capi::hipFileDriverProps_t {
        max_device_cache_size: 1 << 40,
        per_buffer_cache_size: 4096,
        ..Default::default()
    };
    p.nvfs.max_direct_io_size = 16384;
    let c = CUfileDrvProps_t::from(p);
    assert_eq!(c.max_device_cache_size, u32::MAX);
    assert_eq!(c.per_buffer_cache_size, 4096);
    assert_eq!(c.nvfs.max_direct_io_size, 16384);
}

/// The simulated GPU is no PCI device: no BAR to report. Bad indices and a closed driver get
/// cuFile's codes.
#[test]
fn bar_size_answers_for_the_device_it_is_asked_about() {
    let _s = Session::start();
    let mut kb = 7usize;
    // SAFETY: a live size_t; NULL where it must be refused.
    unsafe {
        assert_eq!(
            cuFileGetBARSizeInKB(0, std::ptr::null_mut()),
            op(CU_FILE_INVALID_VALUE),
            "NULL is refused before the closed driver"
        );
        assert_eq!(
            cuFileGetBARSizeInKB(0, &mut kb),
            op(CU_FILE_DRIVER_NOT_INITIALIZED)
        );
        assert_eq!(cuFileDriverOpen(), SUCCESS);
        assert_eq!(cuFileGetBARSizeInKB(-1, &mut kb), op(CU_FILE_INVALID_VALUE));
        assert_eq!(cuFileGetBARSizeInKB(64, &mut kb), op(CU_FILE_INVALID_VALUE));
        assert_eq!(
            cuFileGetBARSizeInKB(0, &mut kb),
            op(CU_FILE_PLATFORM_NOT_SUPPORTED)
        );
        assert_eq!(
            cuFileGetBARSizeInKB(0, std::ptr::null_mut()),
            op(CU_FILE_INVALID_VALUE),
            "NULL is refused before the platform"
        );
    }
    assert_eq!(kb, 7, "nothing written on failure");
}

/// The driver is built with cuFile's configuration file (`CUFILE_ENV_PATH_JSON`, set by the
/// tests' support to a file of their own).
#[test]
fn the_driver_reads_cufile_json() {
    let _s = crate::support::Session::start();
    let mut batch = 0usize;
    // SAFETY: a live size_t.
    let answer = unsafe { cuFileGetParameterSizeT(9, &mut batch) };
    assert_eq!(answer, SUCCESS);
    assert_eq!(batch, crate::support::JSON_MAX_BATCH);
    assert_eq!(cuFileDriverOpen(), SUCCESS);
    let mut props = CUfileDrvProps_t::default();
    // SAFETY: a live struct.
    assert_eq!(unsafe { cuFileDriverGetProperties(&mut props) }, SUCCESS);
    assert_eq!(
        props.max_batch_io_size as usize,
        crate::support::JSON_MAX_BATCH
    );
}
