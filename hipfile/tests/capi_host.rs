//! Host memory through the C ABI: `hipFileSetParameterBool(hipFileParamPropertiesAllowSystemMemory)`
//! admits it, reads and writes move it straight to and from the file, a buffer of it registers,
//! and an address the process cannot touch is -1 with `errno` `EFAULT`, never a crash; with the
//! parameter off it is `-hipFileHipMemoryTypeInvalid`, as upstream hipFile answers.
//!
//! The C ABI has one process-wide driver, so this is a test binary of its own with one test, on
//! the simulated HIP runtime library as `capi_stats.rs` is.
#![cfg(feature = "fallback")]

#[path = "support/capi_handle.rs"]
mod capi_handle;

use std::ffi::c_void;
use std::os::fd::AsRawFd;

use hipfile::capi::{
    hipFileBufDeregister, hipFileBufRegister, hipFileDriverClose, hipFileDriverOpen,
    hipFileGetParameterBool, hipFileHandleDeregister, hipFileHipMemoryTypeInvalid,
    hipFileParamPropertiesAllowSystemMemory, hipFileRead, hipFileSetParameterBool, hipFileSuccess,
    hipFileWrite,
};

/// A page mapped with no access at all, for the life of the test.
fn no_access_page() -> *mut c_void {
    // SAFETY: a fresh anonymous mapping of one page that nothing dereferences.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    p
}

fn allowed() -> bool {
    let mut value = false;
    // SAFETY: `value` is a live local bool.
    let answer =
        unsafe { hipFileGetParameterBool(hipFileParamPropertiesAllowSystemMemory, &mut value) };
    assert_eq!(answer.err, hipFileSuccess);
    value
}

#[test]
fn the_parameter_admits_host_memory_and_a_bad_address_is_efault() {
    std::env::remove_var("HIPFILE_ALLOW_SYSTEM_MEMORY");
    std::env::remove_var("HIPFILE_BACKENDS");
    hipfile_testkit::target::c_abi_runtime().expect("the runtime under test opens");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let data: Vec<u8> = (0..16384u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();

    assert!(!allowed(), "off by default, as in hipFile");
    assert_eq!(
        hipFileSetParameterBool(hipFileParamPropertiesAllowSystemMemory, true).err,
        hipFileSuccess
    );
    assert!(allowed());
    assert_eq!(hipFileDriverOpen().err, hipFileSuccess);
    let (fh, registered) = capi_handle::register_fd(file.as_raw_fd());
    assert_eq!(registered.err, hipFileSuccess);

    let mut buf = vec![0u8; 8192];
    let base = buf.as_mut_ptr().cast::<c_void>();
    assert_eq!(hipFileRead(fh, base, 5000, 3, 0), 5000);
    assert_eq!(buf[..5000], data[3..5003]);
    buf[..4].copy_from_slice(b"host");
    assert_eq!(hipFileWrite(fh, base, 4, 100, 0), 4);
    assert_eq!(hipFileBufRegister(base, buf.len(), 0).err, hipFileSuccess);
    assert_eq!(hipFileRead(fh, base, 4096, 8192, 4096), 4096);
    assert_eq!(buf[4096..], data[8192..12288]);
    assert_eq!(hipFileBufDeregister(base).err, hipFileSuccess);

    let bad = no_access_page();
    for (what, answer) in [
        ("read", hipFileRead(fh, bad, 4096, 0, 0)),
        ("write", hipFileWrite(fh, bad, 4096, 0, 0)),
    ] {
        let errno = std::io::Error::last_os_error().raw_os_error();
        assert_eq!((answer, errno), (-1, Some(libc::EFAULT)), "{what}");
    }
    let mut expected = data.clone();
    expected[100..104].copy_from_slice(b"host");
    assert_eq!(std::fs::read(&path).unwrap(), expected);

    hipFileHandleDeregister(fh);
    assert_eq!(hipFileDriverClose().err, hipFileSuccess);
    assert_eq!(
        hipFileSetParameterBool(hipFileParamPropertiesAllowSystemMemory, false).err,
        hipFileSuccess
    );
    assert_eq!(hipFileDriverOpen().err, hipFileSuccess);
    let (fh, registered) = capi_handle::register_fd(file.as_raw_fd());
    assert_eq!(registered.err, hipFileSuccess);
    assert_eq!(
        hipFileRead(fh, base, 4096, 0, 0),
        -(hipFileHipMemoryTypeInvalid as isize)
    );
    assert_eq!(
        hipFileBufRegister(base, buf.len(), 0).err,
        hipFileHipMemoryTypeInvalid
    );
    hipFileHandleDeregister(fh);
    assert_eq!(hipFileDriverClose().err, hipFileSuccess);
}
