//! The library's C entry points called directly, for what the AMD platform never exercises:
//! NULL arguments, `hipGetProcAddress` misses, copy kinds between arbitrary pointers, the
//! last-error slot. The pointer-attribute answer for unknown memory depends on the generation, so
//! these tests also run in the ROCm 5 child process (see `abi`).

use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::null_mut;

use hipfile_hip::sim::SimAbi;
use libloading::Library;

use crate::support::{expected_config, sim_library};

type Malloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
type Free = unsafe extern "C" fn(*mut c_void) -> c_int;
type OutInt = unsafe extern "C" fn(*mut c_int) -> c_int;
type OutHandle = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
type HostPtr = unsafe extern "C" fn(*mut c_void) -> c_int;
type Memcpy = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> c_int;
type PointerAttributes = unsafe extern "C" fn(*mut [u8; 32], *const c_void) -> c_int;
type AddressRange = unsafe extern "C" fn(*mut *mut c_void, *mut usize, *mut c_void) -> c_int;
type LaunchHostFunc = unsafe extern "C" fn(
    *mut c_void,
    Option<unsafe extern "C" fn(*mut c_void)>,
    *mut c_void,
) -> c_int;
type GetProcAddress =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> c_int;
type NoArgs = extern "C" fn() -> c_int;
type ErrorName = extern "C" fn(c_int) -> *const c_char;

const INVALID_VALUE: c_int = 1;
const INVALID_MEMCPY_DIRECTION: c_int = 21;
const NOT_FOUND: c_int = 500;

fn library() -> Library {
    // SAFETY: the simulated HIP library's initialisers are Rust statics with no side effects.
    unsafe { Library::new(sim_library()) }.expect("the simulated HIP library loads")
}

/// Resolve `name` as `T`.
///
/// # Safety
/// `T` must match the C signature of `name`.
unsafe fn sym<T: Copy>(lib: &Library, name: &str) -> T {
    // SAFETY: the caller's contract.
    *unsafe { lib.get::<T>(name.as_bytes()) }.unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn null_arguments_are_invalid_value_not_crashes() {
    let lib = library();
    // SAFETY: every type below is the C signature of the symbol it is resolved from, and every
    // call passes NULL where the library promises to refuse NULL.
    unsafe {
        assert_eq!(
            sym::<Malloc>(&lib, "hipMalloc")(null_mut(), 16),
            INVALID_VALUE
        );
        assert_eq!(
            sym::<OutInt>(&lib, "hipGetDeviceCount")(null_mut()),
            INVALID_VALUE
        );
        assert_eq!(
            sym::<OutInt>(&lib, "hipRuntimeGetVersion")(null_mut()),
            INVALID_VALUE
        );
        assert_eq!(
            sym::<OutHandle>(&lib, "hipStreamCreate")(null_mut()),
            INVALID_VALUE
        );
        assert_eq!(
            sym::<OutHandle>(&lib, "hipEventCreate")(null_mut()),
            INVALID_VALUE
        );
        assert_eq!(
            sym::<HostPtr>(&lib, "hipHostUnregister")(null_mut()),
            INVALID_VALUE
        );
        let x = 5u8;
        let p = std::ptr::addr_of!(x).cast::<c_void>();
        let attrs = sym::<PointerAttributes>(&lib, "hipPointerGetAttributes");
        assert_eq!(attrs(null_mut(), p), INVALID_VALUE);
        let mut out = [0u8; 32];
        assert_eq!(attrs(&mut out, std::ptr::null()), INVALID_VALUE);
        let range = sym::<AddressRange>(&lib, "hipMemGetAddressRange");
        assert_eq!(range(null_mut(), null_mut(), p.cast_mut()), INVALID_VALUE);
        let launch = sym::<LaunchHostFunc>(&lib, "hipLaunchHostFunc");
        assert_eq!(launch(null_mut(), None, null_mut()), INVALID_VALUE);
        let memcpy = sym::<Memcpy>(&lib, "hipMemcpy");
        assert_eq!(memcpy(null_mut(), p, 1, 1), INVALID_VALUE);
        assert_eq!(memcpy(null_mut(), std::ptr::null(), 0, 1), 0);
        assert_eq!(sym::<Free>(&lib, "hipFree")(null_mut()), 0);
        assert_eq!(sym::<Free>(&lib, "hipHostFree")(null_mut()), 0);
    }
}

#[test]
fn get_proc_address_finds_exports_and_reports_unknown_names() {
    let lib = library();
    // SAFETY: the types match the C signatures; names are NUL-terminated literals.
    unsafe {
        let get = sym::<GetProcAddress>(&lib, "hipGetProcAddress");
        let direct = sym::<*mut c_void>(&lib, "hipMemcpy");
        let mut pfn = null_mut();
        let mut status = -1;
        assert_eq!(get(c"hipMemcpy".as_ptr(), &mut pfn, 600, 0, &mut status), 0);
        assert_eq!((pfn, status), (direct, 0));
        assert_eq!(get(c"hipMalloc".as_ptr(), &mut pfn, 600, 0, null_mut()), 0);
        assert!(!pfn.is_null());
        let mut pfn = 1usize as *mut c_void;
        assert_eq!(
            get(
                c"hipNoSuchEntryPoint".as_ptr(),
                &mut pfn,
                600,
                0,
                &mut status
            ),
            NOT_FOUND
        );
        assert!(pfn.is_null());
        assert_eq!(status, 1);
        assert_eq!(
            get(std::ptr::null(), &mut pfn, 600, 0, null_mut()),
            INVALID_VALUE
        );
    }
}

#[test]
fn copies_of_every_kind_check_the_device_sides() {
    let lib = library();
    // SAFETY: the types match the C signatures; every device range used is allocated here and
    // every host range is a live local array.
    unsafe {
        let malloc = sym::<Malloc>(&lib, "hipMalloc");
        let free = sym::<Free>(&lib, "hipFree");
        let memcpy = sym::<Memcpy>(&lib, "hipMemcpy");
        let (mut a, mut b) = (null_mut(), null_mut());
        assert_eq!(malloc(&mut a, 4096), 0);
        assert_eq!(malloc(&mut b, 4096), 0);
        let data = [0x5au8; 4096];
        let mut back = [0u8; 4096];
        assert_eq!(memcpy(a, data.as_ptr().cast(), 4096, 1), 0);
        // Device to device, then Default (4) back to the host.
        assert_eq!(memcpy(b, a, 4096, 3), 0);
        assert_eq!(memcpy(back.as_mut_ptr().cast(), b, 4096, 4), 0);
        assert_eq!(back, data);
        // Device to device with a host side, Default overrunning a device side, a bad kind.
        assert_eq!(memcpy(b, data.as_ptr().cast(), 16, 3), INVALID_VALUE);
        assert_eq!(
            memcpy(
                back.as_mut_ptr().cast(),
                a.cast::<u8>().add(4000).cast(),
                200,
                4
            ),
            INVALID_VALUE
        );
        assert_eq!(memcpy(b, a, 16, 9), INVALID_MEMCPY_DIRECTION);
        // Host to host between pageable buffers is a plain copy.
        let mut host = [0u8; 16];
        assert_eq!(
            memcpy(host.as_mut_ptr().cast(), data.as_ptr().cast(), 16, 0),
            0
        );
        assert_eq!(host, [0x5a; 16]);
        assert_eq!(free(a), 0);
        assert_eq!(free(b), 0);
        assert_eq!(free(a), INVALID_VALUE, "a double free is refused");
    }
}

#[test]
fn failures_are_kept_as_the_last_error_of_the_thread() {
    let lib = library();
    // SAFETY: the types match the C signatures.
    unsafe {
        let get_last = sym::<NoArgs>(&lib, "hipGetLastError");
        let peek = sym::<NoArgs>(&lib, "hipPeekAtLastError");
        let name = sym::<ErrorName>(&lib, "hipGetErrorName");
        let text = sym::<ErrorName>(&lib, "hipGetErrorString");
        get_last();
        assert_eq!(
            sym::<Malloc>(&lib, "hipMalloc")(null_mut(), 1),
            INVALID_VALUE
        );
        assert_eq!(peek(), INVALID_VALUE);
        assert_eq!(get_last(), INVALID_VALUE);
        assert_eq!(get_last(), 0);
        assert_eq!(CStr::from_ptr(name(INVALID_VALUE)), c"hipErrorInvalidValue");
        assert_eq!(CStr::from_ptr(text(INVALID_VALUE)), c"invalid argument");
        assert_eq!(CStr::from_ptr(name(123_456)), c"hipErrorUnknown");
    }
}

#[test]
fn unknown_host_memory_is_answered_per_generation() {
    let lib = library();
    let x = [1u8; 64];
    let mut attr = [0xffu8; 32];
    // SAFETY: the type matches the C signature; `attr` is 32 writable bytes.
    let rc = unsafe {
        sym::<PointerAttributes>(&lib, "hipPointerGetAttributes")(&mut attr, x.as_ptr().cast())
    };
    match expected_config().abi {
        SimAbi::Rocm5 => assert_eq!(rc, INVALID_VALUE),
        SimAbi::Rocm6 => {
            assert_eq!(rc, 0);
            let memory_type = i32::from_ne_bytes([attr[0], attr[1], attr[2], attr[3]]);
            assert_eq!(memory_type, 0, "hipMemoryTypeUnregistered");
        }
    }
}
