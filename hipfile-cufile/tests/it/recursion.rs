//! hipfile-hip's GPUDirect Storage loader refuses this workspace's `libcufile.so` (a build of
//! hipfile-rs, not NVIDIA's cuFile) before running any of its functions.

use std::path::PathBuf;

use hipfile_hip::p2p::cufile::CuFileDriver;

/// `target/<profile>/deps/libcufile.so`, the crate's cdylib built with this test (`cargo build`
/// copies it up to `target/<profile>`).
fn workspace_libcufile() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .expect("the test binary lives in target/<profile>/deps")
        .join("libcufile.so")
}

#[test]
fn the_loader_refuses_hipfile_rs_own_libcufile() {
    let lib = workspace_libcufile();
    assert!(
        lib.is_file(),
        "{} is built with the crate's tests",
        lib.display()
    );
    let why = CuFileDriver::load_from(&lib.to_string_lossy())
        .expect_err("hipfile-rs's own libcufile is no GPUDirect Storage");
    assert!(why.contains("hipfile-rs's own libcufile.so.0"), "{why}");
    // Refused before its driver opened: its use count is still zero. (The loaded copy is a
    // library of its own, with its own driver; ask it.)
    // SAFETY: the library is loaded (RTLD_NODELETE keeps it) and exports this cuFile function.
    let use_count = unsafe {
        let path = std::ffi::CString::new(lib.to_string_lossy().as_bytes()).unwrap();
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(!handle.is_null(), "the refused library stays loaded");
        let f = libc::dlsym(handle, c"cuFileUseCount".as_ptr());
        assert!(!f.is_null());
        let f: extern "C" fn() -> std::ffi::c_long = std::mem::transmute(f);
        f()
    };
    assert_eq!(use_count, 0);
}

/// A library that is not cuFile at all is refused for what it lacks, not as hipfile-rs's: the
/// refusal above is the own-library check's.
#[test]
fn another_library_is_refused_for_what_it_lacks() {
    let why = CuFileDriver::load_from("libc.so.6").expect_err("libc is no cuFile");
    assert!(why.contains("lacks cuFileDriverOpen"), "{why}");
}
