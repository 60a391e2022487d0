//! The AMD platform: the HIP runtime (`libamdhip64.so`) loaded with `libloading` at run time.
//!
//! Nothing links the HIP runtime. [`open`] loads the library the platform options name (from
//! `HIPFILE_HIP_LIBRARY`), else the first of `libamdhip64.so.7`, `.6`, `.5` and `libamdhip64.so`
//! that the dynamic loader accepts; [`open_library`] loads an explicit path or soname. Every symbol this module calls is resolved at
//! load into a table of function pointers, so a runtime that lacks one is refused with
//! [`crate::HipError::MissingSymbol`] at open instead of failing (or crashing) in the middle of IO.
//!
//! Optional symbols, resolved at load too but absent without an error: `hipStreamWaitValue32` and
//! `hipStreamWriteValue32` (without both [`GpuRuntime::stream_memops`] is false and a stream wait is
//! `hipErrorNotSupported`; with it the device must also answer
//! `hipDeviceAttributeCanUseStreamWaitValue` with 1) and `hipStreamGetDevice`, which ROCm 5.2 does
//! not declare (without it the device of a stream other than the null stream is
//! `hipErrorNotSupported`).
//!
//! ABI notes:
//! - `hipPointerAttribute_t` is 32 bytes on every ROCm, but ROCm 6 renumbered `hipMemoryType`.
//!   Answers are decoded by the generation `hipRuntimeGetVersion` reports (>= 60000000 is ROCm 6+),
//!   with a `match`: an unknown number is [`crate::HipError::Unexpected`], never a transmuted enum.
//! - ROCm 5 answers `hipErrorInvalidValue` for host memory it does not know; that is pageable host
//!   memory ([`MemoryKind::Unregistered`]), not a failure.
//! - Host functions cross the C boundary through one `extern "C"` trampoline that owns the boxed
//!   closure and catches any panic, so no unwind ever enters the runtime.
//!
//! Direct IO: when the runtime's `hipGetProcAddress` knows both `hipAmdFileRead` and
//! `hipAmdFileWrite` (they are not in the public headers), [`GpuRuntime::p2p`] offers a driver that
//! calls them on the O_DIRECT descriptor: the KFD DMAs between the storage device and GPU memory.
//! Each call is capped at [`MAX_P2P_TRANSFER`]; `hipInit(0)` runs once on each calling thread
//! before its first call; a non-zero KFD `status` is the errno of the failure, and a failing
//! `hipError_t` with no status becomes ENODEV when it says the device cannot do it (so the request
//! fails over) and EIO otherwise.
//!
//! The function pointers in the table are only valid while the `Library` they came from lives, so
//! both live in one struct; beyond that the library is opened `RTLD_NODELETE` and is never
//! unmapped once loaded, because a GPU runtime's threads and exit handlers outlive any handle.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;

use libloading::Library;

use crate::error::{HipError, HipErrorCode, HipResult};
use crate::loaded::{dlopen, dlopen_first, symbol, CommonApi, Dialect, LoadedRuntime};
use crate::p2p::{checked_count, errno_error, P2pDriver, MAX_P2P_TRANSFER};
use crate::platform::PlatformOptions;
use crate::runtime::{GpuRuntime, MemoryKind, Platform, PointerInfo, RuntimeInfo, StreamHandle};

/// The environment variable naming the HIP runtime library to load instead of the defaults.
pub const LIBRARY_ENV: &str = "HIPFILE_HIP_LIBRARY";

/// The symbol by which `hipfile-simhip`, the simulated HIP runtime, tells itself apart from a
/// real one, so reports never present the simulator as a GPU.
pub const SIMULATED_MARKER: &str = "hipfile_simulated_runtime";

/// The library names tried, in order, when [`LIBRARY_ENV`] is not set.
pub const DEFAULT_LIBRARIES: [&str; 4] = [
    "libamdhip64.so.7",
    "libamdhip64.so.6",
    "libamdhip64.so.5",
    "libamdhip64.so",
];

/// `hipRuntimeGetVersion` values from this one on speak the ROCm 6 ABI.
const ROCM6_VERSION: i32 = 60_000_000;

/// `hipDeviceAttributeCanUseStreamWaitValue`: 1 if the device supports `hipStreamWaitValue32`.
/// It is the 14th AMD-specific attribute (`hipDeviceAttributeAmdSpecificBegin` = 10000 + 13) in
/// the ROCm 5.2 headers and in the ROCm 6 and 7 ones (where attributes before it were renamed
/// `Unused*` but kept their numbers), so the one value serves every generation we load.
pub const DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE: i32 = 10_013;

/// `hipStreamWriteValue32`'s flags: a plain store, ordered after the stream's earlier work.
const STREAM_WRITE_VALUE_DEFAULT: c_uint = 0;
/// `hipStreamWaitValueGte`: wait until `(*ptr & mask) >= value`.
const STREAM_WAIT_VALUE_GTE: u32 = 0;

/// `hipPointerAttribute_t`, 32 bytes on every ROCm; `memory_type` is left a plain integer because
/// its numbering depends on the runtime's generation.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct RawPointerAttributes {
    memory_type: i32,
    device: i32,
    device_pointer: *mut c_void,
    host_pointer: *mut c_void,
    is_managed: i32,
    allocation_flags: u32,
}

const _: () = assert!(std::mem::size_of::<RawPointerAttributes>() == 32);

impl Default for RawPointerAttributes {
    fn default() -> Self {
        RawPointerAttributes {
            memory_type: 0,
            device: -1,
            device_pointer: std::ptr::null_mut(),
            host_pointer: std::ptr::null_mut(),
            is_managed: 0,
            allocation_flags: 0,
        }
    }
}

/// The HIP spelling of the calls HIP shares with CUDA.
static HIP: Dialect = Dialect {
    runtime_get_version: "hipRuntimeGetVersion",
    get_device_count: "hipGetDeviceCount",
    get_device: "hipGetDevice",
    set_device: "hipSetDevice",
    malloc: "hipMalloc",
    malloc_managed: "hipMallocManaged",
    free: "hipFree",
    host_alloc: "hipHostMalloc",
    host_free: "hipHostFree",
    host_register: "hipHostRegister",
    host_unregister: "hipHostUnregister",
    memcpy: "hipMemcpy",
    memcpy_async: "hipMemcpyAsync",
    memset: "hipMemset",
    memset_async: "hipMemsetAsync",
    host_get_device_pointer: "hipHostGetDevicePointer",
    stream_create_with_flags: "hipStreamCreateWithFlags",
    stream_destroy: "hipStreamDestroy",
    stream_synchronize: "hipStreamSynchronize",
    event_create_with_flags: "hipEventCreateWithFlags",
    event_create_fallback: Some("hipEventCreate"),
    event_create_call: "hipEventCreate",
    event_record: "hipEventRecord",
    event_synchronize: "hipEventSynchronize",
    event_query: "hipEventQuery",
    event_destroy: "hipEventDestroy",
    launch_host_func: "hipLaunchHostFunc",
    get_error_string: "hipGetErrorString",
    // `hipHostMallocDefault`.
    host_alloc_flags: 0,
    // `hipHostMallocPortable | hipHostMallocMapped`.
    host_alloc_mapped_flags: 0x1 | 0x2,
    // Portable; ReadOnly.
    host_register_flags: 0x1,
    host_register_read_only: 0x8,
    not_ready: HipErrorCode::NOT_READY.0,
};

/// Every HIP entry point the platform calls, resolved at load: those it shares with the CUDA
/// runtime, and its own.
#[derive(Clone, Copy)]
struct HipApi {
    common: CommonApi,
    pointer_get_attributes: unsafe extern "C" fn(*mut RawPointerAttributes, *const c_void) -> i32,
    mem_get_address_range: unsafe extern "C" fn(*mut *mut c_void, *mut usize, *mut c_void) -> i32,
    device_get_attribute: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int,
    /// `hipStreamGetDevice`; absent from older runtimes (ROCm 5.2 does not declare it).
    stream_get_device: Option<unsafe extern "C" fn(*mut c_void, *mut c_int) -> c_int>,
    /// `hipStreamWaitValue32(stream, ptr, value, flags, mask)`; optional: a runtime without it
    /// has no stream memory operations.
    stream_wait_value32:
        Option<unsafe extern "C" fn(*mut c_void, *mut c_void, u32, c_uint, u32) -> c_int>,
    /// `hipStreamWriteValue32(stream, ptr, value, flags)`; optional, as the wait.
    stream_write_value32:
        Option<unsafe extern "C" fn(*mut c_void, *mut c_void, u32, c_uint) -> c_int>,
    /// `hipInit`; only the P2P driver calls it (before its first call on each thread).
    init: Option<unsafe extern "C" fn(c_uint) -> c_int>,
    /// ROCm 6 signature: `(symbol, pfn, hipVersion, flags, symbolStatus)`; absent before ROCm 6.
    get_proc_address:
        Option<unsafe extern "C" fn(*const c_char, *mut *mut c_void, i32, u64, *mut i32) -> i32>,
}

impl HipApi {
    /// Resolve every entry point; the first missing one is the error.
    fn resolve(lib: &Library, library: &str) -> HipResult<Self> {
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the field this initialises is declared with the C signature of $name as
                // published in hip_runtime_api.h.
                unsafe { symbol(lib, library, $name)? }
            };
        }
        Ok(HipApi {
            common: CommonApi::resolve(lib, library, &HIP)?,
            pointer_get_attributes: sym!("hipPointerGetAttributes"),
            mem_get_address_range: sym!("hipMemGetAddressRange"),
            device_get_attribute: sym!("hipDeviceGetAttribute"),
            // SAFETY: declared with its hip_runtime_api.h signature.
            stream_get_device: unsafe { symbol(lib, library, "hipStreamGetDevice") }.ok(),
            // SAFETY: declared with its hip_runtime_api.h signature.
            stream_wait_value32: unsafe { symbol(lib, library, "hipStreamWaitValue32") }.ok(),
            // SAFETY: declared with its hip_runtime_api.h signature.
            stream_write_value32: unsafe { symbol(lib, library, "hipStreamWriteValue32") }.ok(),
            // SAFETY: declared with its hip_runtime_api.h signature.
            init: unsafe { symbol(lib, library, "hipInit") }.ok(),
            // SAFETY: declared with the ROCm 6 signature; only runtimes of ROCm 6 and later export
            // the symbol at all.
            get_proc_address: unsafe { symbol(lib, library, "hipGetProcAddress") }.ok(),
        })
    }
}

/// Which numbering of `hipMemoryType` a runtime speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryTypeAbi {
    /// ROCm 5.x: Host=0, Device=1, Array=2, Unified=3, Managed=4.
    Rocm5,
    /// ROCm 6 and later: Unregistered=0, Host=1, Device=2, Managed=3, Array=10, Unified=11.
    Rocm6,
}

impl MemoryTypeAbi {
    /// The generation a `hipRuntimeGetVersion` value belongs to.
    pub fn from_runtime_version(version: i32) -> Self {
        if version >= ROCM6_VERSION {
            MemoryTypeAbi::Rocm6
        } else {
            MemoryTypeAbi::Rocm5
        }
    }

    /// Decode a `hipPointerAttribute_t`'s `memoryType` and `isManaged`. Unified memory is
    /// reported as [`MemoryKind::Managed`]: both are migratable memory reachable from host and
    /// device.
    pub fn decode(self, memory_type: i32, is_managed: i32) -> HipResult<MemoryKind> {
        if is_managed == 1 {
            return Ok(MemoryKind::Managed);
        }
        let kind = match (self, memory_type) {
            (MemoryTypeAbi::Rocm5, 0) => MemoryKind::Host,
            (MemoryTypeAbi::Rocm5, 1) => MemoryKind::Device,
            (MemoryTypeAbi::Rocm5, 2) => MemoryKind::Array,
            (MemoryTypeAbi::Rocm5, 3 | 4) => MemoryKind::Managed,
            (MemoryTypeAbi::Rocm6, 0) => MemoryKind::Unregistered,
            (MemoryTypeAbi::Rocm6, 1) => MemoryKind::Host,
            (MemoryTypeAbi::Rocm6, 2) => MemoryKind::Device,
            (MemoryTypeAbi::Rocm6, 3 | 11) => MemoryKind::Managed,
            (MemoryTypeAbi::Rocm6, 10) => MemoryKind::Array,
            (abi, other) => {
                return Err(HipError::Unexpected {
                    call: "hipPointerGetAttributes",
                    detail: format!("memoryType {other} is not a {abi:?} hipMemoryType"),
                })
            }
        };
        Ok(kind)
    }
}

/// The HIP runtime of an AMD GPU, loaded at run time.
pub struct AmdRuntime {
    api: HipApi,
    abi: MemoryTypeAbi,
    version: i32,
    library_name: String,
    p2p: Option<Arc<AmdP2p>>,
    // Keeps the code behind every pointer in `api` mapped; never used directly after load.
    _library: Library,
}

impl fmt::Debug for AmdRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AmdRuntime")
            .field("library", &self.library_name)
            .field("version", &self.version)
            .field("abi", &self.abi)
            .field("p2p", &self.p2p.is_some())
            .finish()
    }
}

/// The runtime that `options` name ([`PlatformOptions::hip_library`]), else the first default
/// library that loads.
pub fn open(options: &PlatformOptions) -> HipResult<Arc<dyn GpuRuntime>> {
    Ok(Arc::new(AmdRuntime::open(options)?))
}

/// The HIP runtime at `path` (a path or a soname the dynamic loader resolves).
pub fn open_library(path: &str) -> HipResult<Arc<dyn GpuRuntime>> {
    Ok(Arc::new(AmdRuntime::load(path)?))
}

impl AmdRuntime {
    /// Load the library `options` name ([`PlatformOptions::hip_library`], from
    /// `HIPFILE_HIP_LIBRARY`), else the first of [`DEFAULT_LIBRARIES`] that the dynamic loader
    /// accepts. A library that loads but lacks a symbol is an error; the next name is not tried,
    /// because a broken install should be reported, not papered over.
    pub fn open(options: &PlatformOptions) -> HipResult<Self> {
        if let Some(path) = &options.hip_library {
            return Self::load(path);
        }
        let (lib, name) = dlopen_first(&DEFAULT_LIBRARIES)?;
        Self::from_library(lib, name)
    }

    /// Load the HIP runtime at `path` (a path or a soname).
    pub fn load(path: &str) -> HipResult<Self> {
        let lib = dlopen(path)?;
        Self::from_library(lib, path)
    }

    fn from_library(lib: Library, name: &str) -> HipResult<Self> {
        let api = HipApi::resolve(&lib, name)?;
        // SAFETY: only the presence of the symbol is asked; nothing is read through it.
        let simulated = unsafe { lib.get::<*const u8>(SIMULATED_MARKER.as_bytes()) }.is_ok();
        let name = if simulated {
            format!("{name} (simulated by hipfile-simhip)")
        } else {
            name.to_string()
        };
        let name = name.as_str();
        let (rc, version) = api.common.runtime_version();
        let mut rt = AmdRuntime {
            api,
            abi: MemoryTypeAbi::Rocm6,
            version: 0,
            library_name: name.to_string(),
            p2p: None,
            _library: lib,
        };
        rt.check("hipRuntimeGetVersion", rc)?;
        rt.version = version;
        rt.abi = MemoryTypeAbi::from_runtime_version(version);
        rt.p2p = AmdP2p::resolve(&rt).map(Arc::new);
        Ok(rt)
    }

    /// The `hipMemoryType` numbering this runtime speaks.
    pub fn memory_type_abi(&self) -> MemoryTypeAbi {
        self.abi
    }

    /// The address of a runtime entry point through `hipGetProcAddress` (how the unpublished
    /// `hipAmdFileRead/Write` are reached). `None` when the runtime has no `hipGetProcAddress`
    /// (ROCm 5) or does not know `symbol`.
    pub fn proc_address(&self, symbol: &CStr) -> Option<NonNull<c_void>> {
        let get = self.api.get_proc_address?;
        let mut pfn: *mut c_void = std::ptr::null_mut();
        let mut status = 0i32;
        // SAFETY: `symbol` is NUL-terminated and the two out-pointers are valid for the call.
        let rc = unsafe { get(symbol.as_ptr(), &mut pfn, self.version, 0, &mut status) };
        if rc != 0 || status != 0 {
            return None;
        }
        NonNull::new(pfn)
    }

    fn check(&self, call: &'static str, rc: i32) -> HipResult<()> {
        if rc == 0 {
            return Ok(());
        }
        Err(HipError::Call {
            call,
            code: HipErrorCode(rc),
            detail: self.api.common.error_string(rc),
        })
    }

    fn address_range(&self, ptr: usize) -> HipResult<(usize, usize)> {
        let mut base: *mut c_void = std::ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: both out-pointers are valid; the runtime only looks `ptr` up.
        let rc =
            unsafe { (self.api.mem_get_address_range)(&mut base, &mut len, ptr as *mut c_void) };
        self.check("hipMemGetAddressRange", rc)?;
        Ok((base as usize, len))
    }
}

/// `hipAmdFileHandle_t`: the file handle of `hipAmdFileRead/Write`, an 8-byte union passed by
/// value (Linux uses the `fd` member).
#[repr(C)]
#[derive(Clone, Copy)]
pub union AmdFileHandle {
    handle: *mut c_void,
    fd: c_int,
    pad: [u8; 8],
}

const _: () = assert!(std::mem::size_of::<AmdFileHandle>() == 8);

impl AmdFileHandle {
    /// The handle of descriptor `fd` (the other bytes zero).
    pub fn from_fd(fd: RawFd) -> Self {
        let mut h = AmdFileHandle { pad: [0; 8] };
        h.fd = fd;
        h
    }

    /// The descriptor the handle holds.
    pub fn fd(self) -> RawFd {
        // SAFETY: every member is plain data and all 8 bytes are always initialised (`from_fd`
        // zeroes them, C callers pass a full union), so any member reads a valid value.
        unsafe { self.fd }
    }
}

impl fmt::Debug for AmdFileHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AmdFileHandle").field(&self.fd()).finish()
    }
}

/// `hipAmdFileRead` / `hipAmdFileWrite`: `(handle, devicePtr, size, file_offset, *size_copied,
/// *status) -> hipError_t`.
pub type AmdFileIoFn =
    unsafe extern "C" fn(AmdFileHandle, *mut c_void, u64, i64, *mut u64, *mut i32) -> c_int;

thread_local! {
    static HIP_INITIALISED: Cell<bool> = const { Cell::new(false) };
}

/// The KFD direct path of an AMD runtime. Its function pointers stay valid for the life of the
/// process: the runtime library is opened `RTLD_NODELETE` and never unmapped.
#[derive(Debug)]
struct AmdP2p {
    read: AmdFileIoFn,
    write: AmdFileIoFn,
    init: Option<unsafe extern "C" fn(c_uint) -> c_int>,
}

impl AmdP2p {
    /// Both entry points through `hipGetProcAddress`, or `None` when either is missing.
    fn resolve(rt: &AmdRuntime) -> Option<Self> {
        let read = rt.proc_address(c"hipAmdFileRead")?;
        let write = rt.proc_address(c"hipAmdFileWrite")?;
        // SAFETY: `hipGetProcAddress` returned the addresses of these two functions, whose C
        // declaration (hip/amd_detail/hip_storage.h) is the signature of `AmdFileIoFn`.
        let (read, write) = unsafe {
            (
                std::mem::transmute::<*mut c_void, AmdFileIoFn>(read.as_ptr()),
                std::mem::transmute::<*mut c_void, AmdFileIoFn>(write.as_ptr()),
            )
        };
        Some(AmdP2p {
            read,
            write,
            init: rt.api.init,
        })
    }

    /// `hipInit(0)` once on the calling thread; a failure means there is no device to DMA to.
    fn ensure_init(&self) -> io::Result<()> {
        let Some(init) = self.init else {
            return Ok(());
        };
        if HIP_INITIALISED.with(Cell::get) {
            return Ok(());
        }
        // SAFETY: hipInit takes a flags integer (0) and may be called any number of times.
        let rc = unsafe { init(0) };
        if rc != 0 {
            return Err(errno_error(libc::ENODEV));
        }
        HIP_INITIALISED.with(|c| c.set(true));
        Ok(())
    }

    /// # Safety
    /// The contract of [`P2pDriver::read`].
    unsafe fn transfer(
        &self,
        call: AmdFileIoFn,
        fd: BorrowedFd<'_>,
        device_ptr: usize,
        size: usize,
        file_offset: u64,
    ) -> io::Result<usize> {
        self.ensure_init()?;
        let size = size.min(MAX_P2P_TRANSFER);
        let offset = i64::try_from(file_offset).map_err(|_| errno_error(libc::EINVAL))?;
        let mut copied = 0u64;
        let mut status = 0i32;
        // SAFETY: the caller guarantees the device range and the O_DIRECT descriptor; both
        // out-pointers are valid for the call.
        let rc = unsafe {
            call(
                AmdFileHandle::from_fd(fd.as_raw_fd()),
                device_ptr as *mut c_void,
                size as u64,
                offset,
                &mut copied,
                &mut status,
            )
        };
        amd_outcome(rc, status, copied, size)
    }
}

/// What one `hipAmdFileRead/Write` call amounts to: the KFD `status` is an errno (either sign);
/// a failing `hipError_t` without one is ENODEV when the device cannot do direct IO at all, else
/// EIO; a count larger than asked is EIO, never trusted.
fn amd_outcome(rc: c_int, status: i32, copied: u64, asked: usize) -> io::Result<usize> {
    if status != 0 {
        return Err(errno_error(status.checked_abs().unwrap_or(libc::EIO)));
    }
    if rc != 0 {
        let errno = match HipErrorCode(rc) {
            HipErrorCode::NO_DEVICE
            | HipErrorCode::INVALID_DEVICE
            | HipErrorCode::NOT_SUPPORTED
            | HipErrorCode::NOT_INITIALIZED
            | HipErrorCode::INSUFFICIENT_DRIVER => libc::ENODEV,
            _ => libc::EIO,
        };
        return Err(errno_error(errno));
    }
    checked_count(copied, asked)
}

impl P2pDriver for AmdP2p {
    fn name(&self) -> &'static str {
        "amd-kfd"
    }

    unsafe fn read(
        &self,
        fd: BorrowedFd<'_>,
        device_ptr: usize,
        size: usize,
        file_offset: u64,
    ) -> io::Result<usize> {
        // SAFETY: the caller's contract is this function's.
        unsafe { self.transfer(self.read, fd, device_ptr, size, file_offset) }
    }

    unsafe fn write(
        &self,
        fd: BorrowedFd<'_>,
        device_ptr: usize,
        size: usize,
        file_offset: u64,
    ) -> io::Result<usize> {
        // SAFETY: the caller's contract is this function's.
        unsafe { self.transfer(self.write, fd, device_ptr, size, file_offset) }
    }
}

impl LoadedRuntime for AmdRuntime {
    fn common(&self) -> &CommonApi {
        &self.api.common
    }

    fn check(&self, call: &'static str, rc: i32) -> HipResult<()> {
        AmdRuntime::check(self, call, rc)
    }

    fn runtime_info(&self) -> RuntimeInfo {
        RuntimeInfo {
            platform: Platform::Amd,
            runtime_version: self.version,
            library: self.library_name.clone(),
        }
    }

    fn describe_pointer(&self, ptr: usize) -> HipResult<PointerInfo> {
        let unregistered = PointerInfo {
            kind: MemoryKind::Unregistered,
            device: -1,
            base: 0,
            len: 0,
        };
        let mut attr = RawPointerAttributes::default();
        // SAFETY: `attr` is a valid, correctly sized out-struct; `ptr` is only looked up.
        let rc = unsafe { (self.api.pointer_get_attributes)(&mut attr, ptr as *const c_void) };
        if rc == HipErrorCode::INVALID_VALUE.0 {
            return Ok(unregistered);
        }
        self.check("hipPointerGetAttributes", rc)?;
        let kind = self.abi.decode(attr.memory_type, attr.is_managed)?;
        let (base, len) = match kind {
            MemoryKind::Unregistered => return Ok(unregistered),
            MemoryKind::Host => self.address_range(ptr).unwrap_or((ptr, 0)),
            MemoryKind::Device | MemoryKind::Managed | MemoryKind::Array => {
                self.address_range(ptr)?
            }
        };
        Ok(PointerInfo {
            kind,
            device: attr.device,
            base,
            len,
        })
    }

    fn p2p_driver(&self) -> Option<Arc<dyn P2pDriver>> {
        let driver: Arc<dyn P2pDriver> = self.p2p.clone()?;
        Some(driver)
    }

    unsafe fn device_of_stream(&self, stream: StreamHandle) -> HipResult<i32> {
        let Some(get) = self.api.stream_get_device else {
            return Err(HipError::Call {
                call: "hipStreamGetDevice",
                code: HipErrorCode::NOT_SUPPORTED,
                detail: Some(format!("{} does not export it", self.library_name)),
            });
        };
        let mut device = -1;
        // SAFETY: the caller guarantees `stream` is a live stream of this runtime; `device` is a
        // valid out-pointer.
        let rc = unsafe { get(stream.as_raw() as *mut c_void, &mut device) };
        self.check("hipStreamGetDevice", rc)?;
        Ok(device)
    }

    /// `hipStreamWaitValue32` and `hipStreamWriteValue32` are exported and the device says it can
    /// use stream waits.
    fn memops(&self, device: i32) -> bool {
        if self.api.stream_wait_value32.is_none() || self.api.stream_write_value32.is_none() {
            return false;
        }
        let mut can = 0;
        // SAFETY: `can` is a valid out-pointer; the runtime checks the device ordinal.
        let rc = unsafe {
            (self.api.device_get_attribute)(
                &mut can,
                DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE,
                device,
            )
        };
        rc == 0 && can != 0
    }

    unsafe fn wait_value(&self, stream: StreamHandle, addr: usize, value: u32) -> HipResult<()> {
        let Some(wait) = self.api.stream_wait_value32 else {
            return Err(HipError::Call {
                call: "hipStreamWaitValue32",
                code: HipErrorCode::NOT_SUPPORTED,
                detail: Some(format!("{} does not export it", self.library_name)),
            });
        };
        // SAFETY: the caller guarantees a live stream and a live, aligned word of host-mapped
        // memory at `addr`; the runtime only reads it.
        let rc = unsafe {
            wait(
                stream.as_raw() as *mut c_void,
                addr as *mut c_void,
                value,
                STREAM_WAIT_VALUE_GTE,
                u32::MAX,
            )
        };
        self.check("hipStreamWaitValue32", rc)
    }

    /// As [`LoadedRuntime::memops`]: HIP offers the store and the wait together.
    fn writes(&self, device: i32) -> bool {
        self.memops(device)
    }

    unsafe fn write_value(&self, stream: StreamHandle, addr: usize, value: u32) -> HipResult<()> {
        let Some(write) = self.api.stream_write_value32 else {
            return Err(HipError::Call {
                call: "hipStreamWriteValue32",
                code: HipErrorCode::NOT_SUPPORTED,
                detail: Some(format!("{} does not export it", self.library_name)),
            });
        };
        // SAFETY: the caller guarantees a live stream and a live, aligned word of host-mapped
        // memory at `addr`, which the host only accesses atomically.
        let rc = unsafe {
            write(
                stream.as_raw() as *mut c_void,
                addr as *mut c_void,
                value,
                STREAM_WRITE_VALUE_DEFAULT,
            )
        };
        self.check("hipStreamWriteValue32", rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_generations_decode_by_match() {
        let r5 = MemoryTypeAbi::Rocm5;
        let r6 = MemoryTypeAbi::Rocm6;
        assert_eq!(r5.decode(0, 0).unwrap(), MemoryKind::Host);
        assert_eq!(r5.decode(1, 0).unwrap(), MemoryKind::Device);
        assert_eq!(r5.decode(2, 0).unwrap(), MemoryKind::Array);
        assert_eq!(r5.decode(4, 0).unwrap(), MemoryKind::Managed);
        assert_eq!(r6.decode(0, 0).unwrap(), MemoryKind::Unregistered);
        assert_eq!(r6.decode(1, 0).unwrap(), MemoryKind::Host);
        assert_eq!(r6.decode(2, 0).unwrap(), MemoryKind::Device);
        assert_eq!(r6.decode(3, 0).unwrap(), MemoryKind::Managed);
        assert_eq!(r6.decode(10, 0).unwrap(), MemoryKind::Array);
        assert_eq!(r6.decode(11, 0).unwrap(), MemoryKind::Managed);
        assert_eq!(r5.decode(1, 1).unwrap(), MemoryKind::Managed);
        assert_eq!(r6.decode(2, 1).unwrap(), MemoryKind::Managed);
    }

    #[test]
    fn unknown_memory_types_are_errors_not_enums() {
        for (abi, v) in [
            (MemoryTypeAbi::Rocm5, 5),
            (MemoryTypeAbi::Rocm5, 10),
            (MemoryTypeAbi::Rocm6, 4),
            (MemoryTypeAbi::Rocm6, -1),
        ] {
            assert!(matches!(abi.decode(v, 0), Err(HipError::Unexpected { .. })));
        }
    }

    #[test]
    fn the_version_picks_the_generation() {
        assert_eq!(
            MemoryTypeAbi::from_runtime_version(50_221_153),
            MemoryTypeAbi::Rocm5
        );
        assert_eq!(
            MemoryTypeAbi::from_runtime_version(60_000_000),
            MemoryTypeAbi::Rocm6
        );
        assert_eq!(
            MemoryTypeAbi::from_runtime_version(70_000_000),
            MemoryTypeAbi::Rocm6
        );
    }

    #[test]
    fn kfd_answers_become_errnos() {
        let errno = |r: io::Result<usize>| r.unwrap_err().raw_os_error();
        assert_eq!(amd_outcome(0, 0, 4096, 8192).unwrap(), 4096);
        assert_eq!(
            errno(amd_outcome(999, libc::EREMOTEIO, 0, 8)),
            Some(libc::EREMOTEIO)
        );
        assert_eq!(errno(amd_outcome(999, -libc::EIO, 0, 8)), Some(libc::EIO));
        assert_eq!(errno(amd_outcome(0, i32::MIN, 0, 8)), Some(libc::EIO));
        assert_eq!(errno(amd_outcome(101, 0, 0, 8)), Some(libc::ENODEV));
        assert_eq!(errno(amd_outcome(999, 0, 0, 8)), Some(libc::EIO));
        assert_eq!(errno(amd_outcome(0, 0, 9, 8)), Some(libc::EIO));
    }

    #[test]
    fn the_file_handle_is_eight_bytes_holding_the_fd() {
        let h = AmdFileHandle::from_fd(42);
        assert_eq!(h.fd(), 42);
        // SAFETY: all 8 bytes are initialised by `from_fd`.
        assert_eq!(unsafe { h.pad }[4..], [0, 0, 0, 0]);
    }

    #[test]
    fn a_library_that_is_not_there_is_a_load_error() {
        assert!(matches!(
            AmdRuntime::load("/nonexistent/libamdhip64.so"),
            Err(HipError::Load { .. })
        ));
    }
}
