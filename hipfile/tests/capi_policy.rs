//! The hipfile-rs extensions of the C ABI: the IO policy of a file handle and the allowed
//! direct mechanisms, with the codes each bad argument gets, and their effect on `hipFileRead`.
//!
//! The C ABI has one process-wide driver, so this is a test binary of its own with one test. As
//! `capi_stats.rs`, the driver loads the simulated HIP runtime library (`libamdhip64.so` of
//! `hipfile-simhip`), whose P2P entry points make the fastpath's mechanism AMD's KFD.
#![cfg(all(feature = "fallback", feature = "fastpath"))]

#[path = "support/capi_handle.rs"]
mod capi_handle;

use std::ffi::{c_uint, c_void};
use std::os::fd::AsRawFd;
use std::ptr;

use hipfile::capi::{
    hipFileDriverClose, hipFileDriverGetP2PMechanisms, hipFileDriverNotInitialized,
    hipFileDriverOpen, hipFileDriverSetP2PMechanisms, hipFileHandleDeregister,
    hipFileHandleGetIoPolicy, hipFileHandleNotRegistered, hipFileHandleSetIoPolicy,
    hipFileHandle_t, hipFileIONotSupported, hipFileInvalidValue, hipFileIoPolicyDirectOnly,
    hipFileIoPolicyFallback, hipFileIoPolicy_t, hipFileP2PMechanismAll, hipFileP2PMechanismAmdKfd,
    hipFileP2PMechanismNvidiaFs, hipFileP2PMechanismSim, hipFileRead, hipFileSuccess,
};
use hipfile_hip::DeviceBuffer;

fn get_policy(fh: hipFileHandle_t) -> (i32, hipFileIoPolicy_t) {
    let mut policy: hipFileIoPolicy_t = -1;
    // SAFETY: `policy` is a live local.
    let answer = unsafe { hipFileHandleGetIoPolicy(fh, &mut policy) };
    (answer.err, policy)
}

fn get_mechanisms() -> c_uint {
    let mut bits: c_uint = 0xdead;
    // SAFETY: `bits` is a live local.
    let answer = unsafe { hipFileDriverGetP2PMechanisms(&mut bits) };
    assert_eq!(answer.err, hipFileSuccess);
    bits
}

#[test]
fn the_policy_and_mechanism_extensions_answer_as_upstream_would() {
    for name in [
        "HIPFILE_ALLOW_COMPAT_MODE",
        "HIPFILE_FORCE_COMPAT_MODE",
        "HIPFILE_BACKENDS",
        "HIPFILE_IO_POLICY",
        "HIPFILE_P2P_MECHANISMS",
    ] {
        std::env::remove_var(name);
    }
    let on_gpu = hipfile_testkit::target::real_gpu_requested();
    let runtime = hipfile_testkit::target::c_abi_runtime().expect("the runtime under test opens");
    const LEN: usize = 64 << 10;
    let buffer = DeviceBuffer::new(runtime, LEN).expect("hipMalloc");
    let base = buffer.ptr() as *mut c_void;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    std::fs::write(&path, vec![7u8; LEN]).unwrap();
    let file = std::fs::File::open(&path).unwrap();

    // Closed: a handle's policy is refused as the driver's state says; the mechanisms stage.
    let stale = 12345usize as hipFileHandle_t;
    assert_eq!(
        hipFileHandleSetIoPolicy(stale, hipFileIoPolicyDirectOnly).err,
        hipFileDriverNotInitialized
    );
    assert_eq!(get_mechanisms(), hipFileP2PMechanismAll);
    assert_eq!(hipFileDriverSetP2PMechanisms(8).err, hipFileInvalidValue);
    assert_eq!(
        hipFileDriverSetP2PMechanisms(u32::MAX).err,
        hipFileInvalidValue
    );
    assert_eq!(
        get_mechanisms(),
        hipFileP2PMechanismAll,
        "a refused set changes nothing"
    );
    // SAFETY: a NULL pointer is the case under test; nothing is written through it.
    let answer = unsafe { hipFileDriverGetP2PMechanisms(ptr::null_mut()) };
    assert_eq!(answer.err, hipFileInvalidValue);

    assert_eq!(hipFileDriverOpen().err, hipFileSuccess);
    let (fh, registered) = capi_handle::register_fd(file.as_raw_fd());
    assert_eq!(registered.err, hipFileSuccess);
    assert_eq!(get_policy(fh), (hipFileSuccess, hipFileIoPolicyFallback));

    // NULL, unknown and stale handles, bad values.
    for bad in [2, -1, i32::MAX] {
        assert_eq!(
            hipFileHandleSetIoPolicy(fh, bad).err,
            hipFileInvalidValue,
            "{bad}"
        );
    }
    assert_eq!(
        hipFileHandleSetIoPolicy(ptr::null_mut(), hipFileIoPolicyDirectOnly).err,
        hipFileInvalidValue
    );
    assert_eq!(
        hipFileHandleSetIoPolicy(stale, hipFileIoPolicyDirectOnly).err,
        hipFileHandleNotRegistered
    );
    assert_eq!(get_policy(ptr::null_mut()).0, hipFileInvalidValue);
    assert_eq!(get_policy(stale), (hipFileHandleNotRegistered, -1));
    // SAFETY: a NULL pointer is the case under test; nothing is written through it.
    let answer = unsafe { hipFileHandleGetIoPolicy(fh, ptr::null_mut()) };
    assert_eq!(answer.err, hipFileInvalidValue);
    assert_eq!(get_policy(fh), (hipFileSuccess, hipFileIoPolicyFallback));

    // Direct only: an unaligned read is refused with nothing moved; falling back it runs.
    assert_eq!(
        hipFileHandleSetIoPolicy(fh, hipFileIoPolicyDirectOnly).err,
        hipFileSuccess
    );
    assert_eq!(get_policy(fh), (hipFileSuccess, hipFileIoPolicyDirectOnly));
    assert_eq!(
        // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the
        // call.
        unsafe { hipFileRead(fh, base, 1000, 1, 0) },
        -(hipFileIONotSupported as isize)
    );
    assert_eq!(buffer.to_vec().unwrap()[..1000], [0u8; 1000]);
    if !on_gpu {
        // The simulated runtime's P2P driver serves aligned reads of the temporary directory.
        // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the
        // call.
        assert_eq!(unsafe { hipFileRead(fh, base, 4096, 0, 0) }, 4096);
        // Without its mechanism, the same aligned read is refused ...
        assert_eq!(
            hipFileDriverSetP2PMechanisms(hipFileP2PMechanismNvidiaFs | hipFileP2PMechanismSim).err,
            hipFileSuccess
        );
        assert_eq!(
            get_mechanisms(),
            hipFileP2PMechanismNvidiaFs | hipFileP2PMechanismSim
        );
        assert_eq!(
            // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during
            // the call.
            unsafe { hipFileRead(fh, base, 4096, 0, 0) },
            -(hipFileIONotSupported as isize)
        );
        // ... and allowed again, it runs.
        assert_eq!(
            hipFileDriverSetP2PMechanisms(hipFileP2PMechanismAmdKfd).err,
            hipFileSuccess
        );
        // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the
        // call.
        assert_eq!(unsafe { hipFileRead(fh, base, 4096, 4096, 0) }, 4096);
    }
    assert_eq!(
        hipFileHandleSetIoPolicy(fh, hipFileIoPolicyFallback).err,
        hipFileSuccess
    );
    // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the call.
    assert_eq!(unsafe { hipFileRead(fh, base, 1000, 1, 0) }, 1000);
    assert_eq!(buffer.to_vec().unwrap()[..1000], [7u8; 1000]);

    // A deregistered handle is stale.
    hipFileHandleDeregister(fh);
    assert_eq!(
        hipFileHandleSetIoPolicy(fh, hipFileIoPolicyFallback).err,
        hipFileHandleNotRegistered
    );
    assert_eq!(get_policy(fh).0, hipFileHandleNotRegistered);
    assert_eq!(
        hipFileDriverSetP2PMechanisms(hipFileP2PMechanismAll).err,
        hipFileSuccess
    );
    assert_eq!(hipFileDriverClose().err, hipFileSuccess);
}
