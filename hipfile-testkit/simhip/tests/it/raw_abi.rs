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

type CreateWithFlags = unsafe extern "C" fn(*mut *mut c_void, std::ffi::c_uint) -> c_int;
type HostMalloc = unsafe extern "C" fn(*mut *mut c_void, usize, std::ffi::c_uint) -> c_int;
type DevicePointer = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, std::ffi::c_uint) -> c_int;
type DeviceAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
type WaitValue =
    unsafe extern "C" fn(*mut c_void, *mut c_void, u32, std::ffi::c_uint, u32) -> c_int;
type StreamCall = unsafe extern "C" fn(*mut c_void) -> c_int;
type StreamDevice = unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int;

const INVALID_DEVICE: c_int = 101;
const NOT_READY: c_int = 600;
const NOT_SUPPORTED: c_int = 801;

#[test]
fn stream_flags_value_waits_queries_and_mapped_pointers_follow_hip() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let lib = library();
    // SAFETY: each symbol is resolved with its hip_runtime_api.h signature; every out-pointer is
    // valid; the flag word is pinned memory of the library, released (every wait passed) before
    // it is freed.
    unsafe {
        let create = sym::<CreateWithFlags>(&lib, "hipStreamCreateWithFlags");
        let host_malloc = sym::<HostMalloc>(&lib, "hipHostMalloc");
        let device_pointer = sym::<DevicePointer>(&lib, "hipHostGetDevicePointer");
        let attribute = sym::<DeviceAttribute>(&lib, "hipDeviceGetAttribute");
        let wait = sym::<WaitValue>(&lib, "hipStreamWaitValue32");
        let query = sym::<StreamCall>(&lib, "hipStreamQuery");
        let synchronize = sym::<StreamCall>(&lib, "hipStreamSynchronize");
        let destroy = sym::<StreamCall>(&lib, "hipStreamDestroy");
        let stream_device = sym::<StreamDevice>(&lib, "hipStreamGetDevice");

        let mut s = null_mut();
        assert_eq!(
            create(&mut s, 2),
            INVALID_VALUE,
            "only Default and NonBlocking"
        );
        assert_eq!(create(&mut s, 1), 0);
        let mut device = -1;
        assert_eq!(stream_device(s, &mut device), 0);
        assert_eq!(device, 0);
        assert_eq!(stream_device(null_mut(), &mut device), 0);
        assert_eq!(
            stream_device(0xdead_beef_usize as *mut c_void, &mut device),
            400
        );

        let mut flag = null_mut();
        assert_eq!(host_malloc(&mut flag, 16, 0x1 | 0x2), 0);
        let mut dev = null_mut();
        assert_eq!(device_pointer(&mut dev, flag, 0), 0);
        assert_eq!(
            dev, flag,
            "the simulated devices see pinned memory at its host address"
        );
        assert_eq!(device_pointer(&mut dev, flag, 1), INVALID_VALUE);
        let pageable = 0u32;
        let pageable = &pageable as *const u32 as *mut c_void;
        assert_eq!(device_pointer(&mut dev, pageable, 0), INVALID_VALUE);

        let memops = expected_config().memops;
        let mut can = -1;
        assert_eq!(attribute(&mut can, 10_013, 0), 0);
        assert_eq!(can, c_int::from(memops));
        assert_eq!(attribute(&mut can, 10_013, 99), INVALID_DEVICE);
        assert_eq!(attribute(&mut can, 12_345, 0), INVALID_VALUE);

        let word = AtomicU32::from_ptr(flag.cast::<u32>());
        if !memops {
            assert_eq!(wait(s, flag, 1, 0, u32::MAX), NOT_SUPPORTED);
        } else {
            // (value, flags, mask, a word that must not release the wait, one that must).
            for (value, flags, mask, held, passes) in [
                (3, 1, 0xff, 0x102, 0x103),
                (0x10, 2, u32::MAX, 0x0f, 0x1f),
                (0xffff_0000, 3, u32::MAX, 0x0000_ffff, 0x0000_fffe),
                (7, 0, u32::MAX, 6, 8),
            ] {
                word.store(held, Ordering::Release);
                assert_eq!(wait(s, flag, value, flags, mask), 0);
                std::thread::sleep(std::time::Duration::from_millis(20));
                assert_eq!(query(s), NOT_READY, "flags {flags}: {held:#x} holds");
                word.store(passes, Ordering::Release);
                assert_eq!(synchronize(s), 0);
                assert_eq!(query(s), 0, "flags {flags}: {passes:#x} releases");
            }
            assert_eq!(
                wait(s, flag, 1, 4, u32::MAX),
                INVALID_VALUE,
                "unknown flags"
            );
            let unaligned = flag.cast::<u8>().add(2).cast::<c_void>();
            assert_eq!(wait(s, unaligned, 1, 0, u32::MAX), INVALID_VALUE);
            assert_eq!(wait(s, pageable, 1, 0, u32::MAX), INVALID_VALUE);
        }
        assert_eq!(destroy(s), 0);
        assert_eq!(sym::<Free>(&lib, "hipHostFree")(flag), 0);
    }
}
