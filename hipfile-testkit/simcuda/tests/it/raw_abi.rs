//! The library's C entry points called directly, for what the NVIDIA platform never exercises:
//! every symbol exported, NULL arguments, the driver's initialisation, contexts and pointer
//! attributes, copy kinds, error names.

use std::ffi::{c_int, c_uint, c_void, CStr};
use std::ptr::null_mut;

use libloading::Library;
use simcuda::{
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_IS_MANAGED,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE, DRIVER_SYMBOLS, RUNTIME_SYMBOLS,
};

use crate::support::sim_library;

type Malloc = unsafe extern "C" fn(*mut *mut c_void, usize) -> c_int;
type MallocFlags = unsafe extern "C" fn(*mut *mut c_void, usize, c_uint) -> c_int;
type Free = unsafe extern "C" fn(*mut c_void) -> c_int;
type OutInt = unsafe extern "C" fn(*mut c_int) -> c_int;
type Memcpy = unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int) -> c_int;
type PointerAttributes = unsafe extern "C" fn(*mut [u8; 24], *const c_void) -> c_int;
type Init = unsafe extern "C" fn(c_uint) -> c_int;
type OutPtr = unsafe extern "C" fn(*mut *mut c_void) -> c_int;
type SetCtx = unsafe extern "C" fn(*mut c_void) -> c_int;
type Retain = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;
type Release = unsafe extern "C" fn(c_int) -> c_int;
type DeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
type AddressRange = unsafe extern "C" fn(*mut u64, *mut usize, u64) -> c_int;
type PointerAttribute = unsafe extern "C" fn(*mut c_void, c_int, u64) -> c_int;
type ErrorText = extern "C" fn(c_int) -> *const std::ffi::c_char;

const INVALID_VALUE: c_int = 1;
const INVALID_MEMCPY_DIRECTION: c_int = 21;
const INVALID_DEVICE: c_int = 101;
const INVALID_CONTEXT: c_int = 201;
const NOT_FOUND: c_int = 500;

fn library() -> Library {
    // SAFETY: the simulated CUDA library's initialisers are Rust statics with no side effects.
    unsafe { Library::new(sim_library()) }.expect("the simulated CUDA library loads")
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
fn every_listed_symbol_is_exported() {
    let lib = library();
    for name in RUNTIME_SYMBOLS.iter().chain(DRIVER_SYMBOLS) {
        // SAFETY: only the address is looked at, never called.
        let found = unsafe { lib.get::<*const c_void>(name.as_bytes()) };
        assert!(found.is_ok(), "{name} is not exported");
    }
}

#[test]
fn null_arguments_are_invalid_value_not_crashes() {
    let lib = library();
    // SAFETY: every type below is the C signature of the symbol it is resolved from, and every
    // call passes NULL where the library promises to refuse NULL.
    unsafe {
        assert_eq!(
            sym::<Malloc>(&lib, "cudaMalloc")(null_mut(), 16),
            INVALID_VALUE
        );
        assert_eq!(
            sym::<MallocFlags>(&lib, "cudaHostAlloc")(null_mut(), 16, 1),
            INVALID_VALUE
        );
        assert_eq!(
            sym::<OutInt>(&lib, "cudaGetDeviceCount")(null_mut()),
            INVALID_VALUE
        );
        assert_eq!(
            sym::<PointerAttributes>(&lib, "cudaPointerGetAttributes")(null_mut(), 8 as _),
            INVALID_VALUE
        );
        assert_eq!(sym::<Free>(&lib, "cudaFree")(null_mut()), 0);
        assert_eq!(sym::<Free>(&lib, "cudaFreeHost")(null_mut()), 0);
        assert_eq!(sym::<Init>(&lib, "cuInit")(1), INVALID_VALUE);
        assert_eq!(sym::<Init>(&lib, "cuInit")(0), 0);
        assert_eq!(
            sym::<OutPtr>(&lib, "cuCtxGetCurrent")(null_mut()),
            INVALID_VALUE
        );
        let mut device_ptr: *mut c_void = null_mut();
        assert_eq!(sym::<Malloc>(&lib, "cudaMalloc")(&mut device_ptr, 64), 0);
        assert_eq!(
            sym::<PointerAttribute>(&lib, "cuPointerGetAttribute")(
                null_mut(),
                CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                device_ptr as u64
            ),
            INVALID_VALUE
        );
        assert_eq!(sym::<Free>(&lib, "cudaFree")(device_ptr), 0);
    }
}

#[test]
fn pointer_attributes_use_the_cuda_11_layout() {
    let lib = library();
    // SAFETY: C signatures as declared; every out-pointer is valid.
    unsafe {
        let mut managed: *mut c_void = null_mut();
        assert_eq!(
            sym::<MallocFlags>(&lib, "cudaMallocManaged")(&mut managed, 100, 1),
            0
        );
        let mut raw = [0u8; 24];
        let get = sym::<PointerAttributes>(&lib, "cudaPointerGetAttributes");
        assert_eq!(get(&mut raw, managed), 0);
        let memory_type = c_int::from_ne_bytes(raw[0..4].try_into().unwrap());
        let device = c_int::from_ne_bytes(raw[4..8].try_into().unwrap());
        let device_pointer = usize::from_ne_bytes(raw[8..16].try_into().unwrap());
        let host_pointer = usize::from_ne_bytes(raw[16..24].try_into().unwrap());
        assert_eq!((memory_type, device), (3, 0));
        assert_eq!(
            (device_pointer, host_pointer),
            (managed as usize, managed as usize)
        );

        let pageable = [0u8; 8];
        assert_eq!(get(&mut raw, pageable.as_ptr().cast()), 0);
        assert_eq!(c_int::from_ne_bytes(raw[0..4].try_into().unwrap()), 0);

        assert_eq!(
            sym::<MallocFlags>(&lib, "cudaMallocManaged")(&mut managed, 100, 7),
            INVALID_VALUE,
            "only cudaMemAttachGlobal and cudaMemAttachHost are flags"
        );
    }
}

#[test]
fn the_driver_answers_with_contexts_and_attributes() {
    let lib = library();
    // SAFETY: C signatures as declared; every out-pointer is valid.
    unsafe {
        assert_eq!(sym::<Init>(&lib, "cuInit")(0), 0);
        let mut handle = -1;
        assert_eq!(sym::<DeviceGet>(&lib, "cuDeviceGet")(&mut handle, 0), 0);
        assert_eq!(handle, 0);
        assert_eq!(
            sym::<DeviceGet>(&lib, "cuDeviceGet")(&mut handle, 64),
            INVALID_DEVICE
        );
        let mut ctx: *mut c_void = null_mut();
        assert_eq!(
            sym::<Retain>(&lib, "cuDevicePrimaryCtxRetain")(&mut ctx, 0),
            0
        );
        assert_eq!(ctx as usize, 1);

        let mut dev: *mut c_void = null_mut();
        assert_eq!(sym::<Malloc>(&lib, "cudaMalloc")(&mut dev, 1000), 0);
        let range = sym::<AddressRange>(&lib, "cuMemGetAddressRange_v2");
        let (mut base, mut len) = (0u64, 0usize);
        let address = dev as u64 + 10;
        // This test thread has no context current: the driver refuses.
        std::thread::spawn(move || {
            let (mut base, mut len) = (0u64, 0usize);
            assert_eq!(range(&mut base, &mut len, address), INVALID_CONTEXT);
        })
        .join()
        .unwrap();
        assert_eq!(sym::<SetCtx>(&lib, "cuCtxSetCurrent")(ctx), 0);
        let mut current: *mut c_void = null_mut();
        assert_eq!(sym::<OutPtr>(&lib, "cuCtxGetCurrent")(&mut current), 0);
        assert_eq!(current, ctx);
        assert_eq!(range(&mut base, &mut len, address), 0);
        assert_eq!((base, len), (dev as u64, 1000));
        assert_eq!(range(null_mut(), &mut len, address), 0, "base is optional");
        let pageable = [0u8; 8];
        assert_eq!(
            range(&mut base, &mut len, pageable.as_ptr() as u64),
            NOT_FOUND
        );
        assert_eq!(
            sym::<SetCtx>(&lib, "cuCtxSetCurrent")(1000 as _),
            INVALID_CONTEXT
        );

        let attribute = sym::<PointerAttribute>(&lib, "cuPointerGetAttribute");
        let mut memory_type: c_uint = 0;
        assert_eq!(
            attribute(
                (&mut memory_type as *mut c_uint).cast(),
                CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                address
            ),
            0
        );
        assert_eq!(memory_type, 2, "CU_MEMORYTYPE_DEVICE");
        let mut value: c_int = -1;
        assert_eq!(
            attribute(
                (&mut value as *mut c_int).cast(),
                CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                address
            ),
            0
        );
        assert_eq!(value, 0);
        assert_eq!(
            attribute(
                (&mut value as *mut c_int).cast(),
                CU_POINTER_ATTRIBUTE_IS_MANAGED,
                address
            ),
            0
        );
        assert_eq!(value, 0);
        assert_eq!(
            attribute(
                (&mut value as *mut c_int).cast(),
                CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                pageable.as_ptr() as u64
            ),
            INVALID_VALUE
        );

        assert_eq!(sym::<SetCtx>(&lib, "cuCtxSetCurrent")(null_mut()), 0);
        assert_eq!(sym::<Release>(&lib, "cuDevicePrimaryCtxRelease_v2")(0), 0);
        assert_eq!(sym::<Free>(&lib, "cudaFree")(dev), 0);
    }
}

#[test]
fn copy_kinds_follow_cuda_numbering() {
    let lib = library();
    // SAFETY: C signatures as declared; host buffers are valid for the sizes given.
    unsafe {
        let memcpy = sym::<Memcpy>(&lib, "cudaMemcpy");
        let mut dev: *mut c_void = null_mut();
        assert_eq!(sym::<Malloc>(&lib, "cudaMalloc")(&mut dev, 64), 0);
        let src = [9u8; 64];
        let mut dst = [0u8; 64];
        assert_eq!(memcpy(dev, src.as_ptr().cast(), 64, 1), 0, "H2D");
        assert_eq!(memcpy(dst.as_mut_ptr().cast(), dev, 64, 4), 0, "Default");
        assert_eq!(dst, src);
        assert_eq!(
            memcpy(dst.as_mut_ptr().cast(), src.as_ptr().cast(), 64, 3),
            INVALID_VALUE,
            "D2D between host buffers"
        );
        assert_eq!(
            memcpy(dst.as_mut_ptr().cast(), dev, 64, 9),
            INVALID_MEMCPY_DIRECTION
        );
        assert_eq!(sym::<Free>(&lib, "cudaFree")(dev), 0);
    }
}

#[test]
fn error_names_are_cuda_names() {
    let lib = library();
    // SAFETY: C signatures as declared; the answers are static NUL-terminated strings.
    unsafe {
        let name = sym::<ErrorText>(&lib, "cudaGetErrorName");
        let text = sym::<ErrorText>(&lib, "cudaGetErrorString");
        assert_eq!(
            CStr::from_ptr(name(400)).to_str().unwrap(),
            "cudaErrorInvalidResourceHandle"
        );
        assert_eq!(CStr::from_ptr(name(0)).to_str().unwrap(), "cudaSuccess");
        assert!(!text(123_456).is_null());
    }
}

type CreateWithFlags = unsafe extern "C" fn(*mut *mut c_void, c_uint) -> c_int;
type DevicePointer = unsafe extern "C" fn(*mut *mut c_void, *mut c_void, c_uint) -> c_int;
type DeviceAttribute = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
type WaitValue = unsafe extern "C" fn(*mut c_void, u64, u32, c_uint) -> c_int;
type StreamCall = unsafe extern "C" fn(*mut c_void) -> c_int;
type StreamOut = unsafe extern "C" fn(*mut c_void, *mut c_void) -> c_int;
type MemsetAsync = unsafe extern "C" fn(*mut c_void, c_int, usize, *mut c_void) -> c_int;

#[test]
fn stream_flags_waits_contexts_and_mapped_pointers_follow_cuda() {
    use std::sync::atomic::{AtomicU32, Ordering};
    let lib = library();
    // SAFETY: each symbol is resolved with its CUDA signature; every out-pointer is valid; the
    // flag word is pinned memory of the library, released before it is freed.
    unsafe {
        assert_eq!(sym::<Init>(&lib, "cuInit")(0), 0);
        assert_eq!(sym::<Release>(&lib, "cudaSetDevice")(0), 0);
        let create = sym::<CreateWithFlags>(&lib, "cudaStreamCreateWithFlags");
        let get_ctx = sym::<StreamOut>(&lib, "cuStreamGetCtx");
        let ctx_device = sym::<OutInt>(&lib, "cuCtxGetDevice");
        let stream_device = sym::<StreamOut>(&lib, "cudaStreamGetDevice");
        let attribute = sym::<DeviceAttribute>(&lib, "cuDeviceGetAttribute");
        let wait = sym::<WaitValue>(&lib, "cuStreamWaitValue32_v2");
        let query = sym::<StreamCall>(&lib, "cudaStreamQuery");
        let synchronize = sym::<StreamCall>(&lib, "cudaStreamSynchronize");
        let device_pointer = sym::<DevicePointer>(&lib, "cudaHostGetDevicePointer");
        let memset_async = sym::<MemsetAsync>(&lib, "cudaMemsetAsync");

        let mut s = null_mut();
        assert_eq!(create(&mut s, 2), INVALID_VALUE);
        assert_eq!(create(&mut s, 1), 0);
        let mut ctx: *mut c_void = null_mut();
        assert_eq!(get_ctx(s, (&mut ctx as *mut *mut c_void).cast()), 0);
        assert_eq!(ctx as usize, 1, "the primary context of device 0");
        let mut device = -1;
        assert_eq!(ctx_device(&mut device), 0);
        assert_eq!(device, 0);
        assert_eq!(stream_device(s, (&mut device as *mut c_int).cast()), 0);
        assert_eq!(device, 0);
        let mut can = -1;
        assert_eq!(attribute(&mut can, 92, 0), 0);
        assert_eq!(
            can, 0,
            "the legacy stream memory operations are off, as by default"
        );
        assert_eq!(attribute(&mut can, 92, 99), INVALID_DEVICE);
        assert_eq!(attribute(&mut can, 1, 0), INVALID_VALUE);

        let mut flag = null_mut();
        assert_eq!(
            sym::<MallocFlags>(&lib, "cudaHostAlloc")(&mut flag, 16, 0x3),
            0
        );
        let mut dev = null_mut();
        assert_eq!(device_pointer(&mut dev, flag, 0), 0);
        assert_eq!(dev, flag);
        let word = AtomicU32::from_ptr(flag.cast::<u32>());
        assert_eq!(wait(s, dev as u64, 5, 0), 0);
        let mut target = null_mut();
        assert_eq!(sym::<Malloc>(&lib, "cudaMalloc")(&mut target, 64), 0);
        assert_eq!(memset_async(target, 0x7f, 64, s), 0);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(query(s), 600, "held until the word is 5");
        word.store(5, Ordering::Release);
        assert_eq!(synchronize(s), 0);
        assert_eq!(query(s), 0);
        let mut back = [0u8; 64];
        assert_eq!(
            sym::<Memcpy>(&lib, "cudaMemcpy")(back.as_mut_ptr().cast(), target, 64, 2),
            0
        );
        assert_eq!(back, [0x7f; 64]);
        assert_eq!(wait(s, dev as u64, 5, 9), INVALID_VALUE, "unknown flags");
        assert_eq!(sym::<StreamCall>(&lib, "cudaStreamDestroy")(s), 0);
        assert_eq!(sym::<Free>(&lib, "cudaFree")(target), 0);
        assert_eq!(sym::<Free>(&lib, "cudaFreeHost")(flag), 0);
    }
}
