//! What only AMD's HIP runtime has, as typed operations: the entry points beyond those it shares
//! with the CUDA runtime ([`CommonApi`], spelled by [`HIP`]), resolved at load, and the KFD direct
//! path that `hipGetProcAddress` reaches (`hipAmdFileRead/Write`, [`KfdDriver`]). What the answers
//! mean (the `hipMemoryType` numbering, errors) is [`crate::amd`]'s.

use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::ptr::NonNull;

use libloading::Library;

use super::runtime_api::{
    p2p_driver_by_transfer, symbol, CommonApi, Dialect, LiveStream, MappedWord,
};
use crate::error::{HipErrorCode, HipResult};
use crate::transfer::{checked_count, errno_error, Direction, MAX_P2P_TRANSFER};

/// `hipStreamWriteValue32`'s flags: a plain store, ordered after the stream's earlier work.
const STREAM_WRITE_VALUE_DEFAULT: c_uint = 0;
/// `hipStreamWaitValueGte`: wait until `(*ptr & mask) >= value`.
const STREAM_WAIT_VALUE_GTE: u32 = 0;

/// The HIP spelling of the calls HIP shares with CUDA.
pub(crate) static HIP: Dialect = Dialect {
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
    device_get_pci_bus_id: "hipDeviceGetPCIBusId",
    // `hipHostMallocDefault`.
    host_alloc_flags: 0,
    // `hipHostMallocPortable | hipHostMallocMapped`.
    host_alloc_mapped_flags: 0x1 | 0x2,
    // Portable; ReadOnly.
    host_register_flags: 0x1,
    host_register_read_only: 0x8,
    not_ready: HipErrorCode::NOT_READY.0,
};

/// `hipPointerAttribute_t`, 32 bytes on every ROCm; `memory_type` is left a plain integer because
/// its numbering depends on the runtime's generation.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct RawPointerAttributes {
    pub memory_type: i32,
    pub device: i32,
    device_pointer: *mut c_void,
    host_pointer: *mut c_void,
    pub is_managed: i32,
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

/// Every HIP entry point the platform calls, resolved at load: those it shares with the CUDA
/// runtime, and its own.
#[derive(Clone, Copy)]
pub(crate) struct HipApi {
    pub common: CommonApi,
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
    pub(crate) fn resolve(lib: &Library, library: &str) -> HipResult<Self> {
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the field this initialises is declared with the C signature of $name as
                // published in hip_runtime_api.h.
                unsafe { symbol(lib, library, $name)? }
            };
        }
        macro_rules! optional {
            ($name:literal) => {
                // SAFETY: as for `sym!`; a runtime may lack this one.
                unsafe { symbol(lib, library, $name) }.ok()
            };
        }
        Ok(HipApi {
            common: CommonApi::resolve(lib, library, &HIP)?,
            pointer_get_attributes: sym!("hipPointerGetAttributes"),
            mem_get_address_range: sym!("hipMemGetAddressRange"),
            device_get_attribute: sym!("hipDeviceGetAttribute"),
            stream_get_device: optional!("hipStreamGetDevice"),
            stream_wait_value32: optional!("hipStreamWaitValue32"),
            stream_write_value32: optional!("hipStreamWriteValue32"),
            init: optional!("hipInit"),
            // Only runtimes of ROCm 6 and later export it, with the ROCm 6 signature.
            get_proc_address: optional!("hipGetProcAddress"),
        })
    }

    /// `hipPointerGetAttributes`: `(return code, attributes)`; `ptr` is only looked up.
    pub(crate) fn pointer_attributes(&self, ptr: usize) -> (i32, RawPointerAttributes) {
        let mut attr = RawPointerAttributes::default();
        // SAFETY: `attr` is a valid, correctly sized out-struct; `ptr` is only looked up.
        let rc = unsafe { (self.pointer_get_attributes)(&mut attr, ptr as *const c_void) };
        (rc, attr)
    }

    /// `hipMemGetAddressRange`: `(return code, base, length)` of the allocation holding `ptr`.
    pub(crate) fn address_range(&self, ptr: usize) -> (i32, usize, usize) {
        let mut base: *mut c_void = std::ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: both out-pointers are valid; the runtime only looks `ptr` up.
        let rc = unsafe { (self.mem_get_address_range)(&mut base, &mut len, ptr as *mut c_void) };
        (rc, base as usize, len)
    }

    /// `hipDeviceGetAttribute`: `(return code, value)`; the runtime checks the ordinal.
    pub(crate) fn device_attribute(&self, attribute: i32, device: i32) -> (i32, i32) {
        let mut value = 0;
        // SAFETY: `value` is a valid out-pointer; attribute and ordinal are plain integers.
        let rc = unsafe { (self.device_get_attribute)(&mut value, attribute, device) };
        (rc, value)
    }

    /// Whether the runtime exports both stream memory operations.
    pub(crate) fn exports_stream_memops(&self) -> bool {
        self.stream_wait_value32.is_some() && self.stream_write_value32.is_some()
    }

    /// `hipStreamGetDevice`: `(return code, device)`, `None` when the runtime lacks it.
    pub(crate) fn stream_get_device(&self, stream: LiveStream<'_>) -> Option<(i32, i32)> {
        let get = self.stream_get_device?;
        let mut device = -1;
        // SAFETY: `stream` is live (vouched); `device` is a valid out-pointer.
        let rc = unsafe { get(stream.raw(), &mut device) };
        Some((rc, device))
    }

    /// `hipStreamWaitValue32(>= value)` on `word`: the return code, `None` when the runtime lacks
    /// it. The runtime only reads the word.
    pub(crate) fn stream_wait_value32(
        &self,
        stream: LiveStream<'_>,
        word: MappedWord<'_>,
        value: u32,
    ) -> Option<i32> {
        let wait = self.stream_wait_value32?;
        // SAFETY: a live stream and a live, aligned word of host-mapped memory (both vouched).
        Some(unsafe {
            wait(
                stream.raw(),
                word.addr() as *mut c_void,
                value,
                STREAM_WAIT_VALUE_GTE,
                u32::MAX,
            )
        })
    }

    /// `hipStreamWriteValue32` of `value` into `word`: the return code, `None` when the runtime
    /// lacks it.
    pub(crate) fn stream_write_value32(
        &self,
        stream: LiveStream<'_>,
        word: MappedWord<'_>,
        value: u32,
    ) -> Option<i32> {
        let write = self.stream_write_value32?;
        // SAFETY: a live stream and a live, aligned word of host-mapped memory that the host
        // accesses only atomically (both vouched).
        Some(unsafe {
            write(
                stream.raw(),
                word.addr() as *mut c_void,
                value,
                STREAM_WRITE_VALUE_DEFAULT,
            )
        })
    }

    /// The address of entry point `symbol` through `hipGetProcAddress` for a runtime of `version`;
    /// `None` when the runtime has no `hipGetProcAddress` (ROCm 5) or does not know `symbol`.
    pub(crate) fn proc_address(&self, symbol: &CStr, version: i32) -> Option<NonNull<c_void>> {
        let get = self.get_proc_address?;
        let mut pfn: *mut c_void = std::ptr::null_mut();
        let mut status = 0i32;
        // SAFETY: `symbol` is NUL-terminated and the two out-pointers are valid for the call.
        let rc = unsafe { get(symbol.as_ptr(), &mut pfn, version, 0, &mut status) };
        if rc != 0 || status != 0 {
            return None;
        }
        NonNull::new(pfn)
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
pub(crate) struct KfdDriver {
    read: AmdFileIoFn,
    write: AmdFileIoFn,
    init: Option<unsafe extern "C" fn(c_uint) -> c_int>,
}

impl KfdDriver {
    /// Both entry points through `hipGetProcAddress` of a runtime of `version`, or `None` when
    /// either is missing.
    pub(crate) fn resolve(api: &HipApi, version: i32) -> Option<Self> {
        let read = api.proc_address(c"hipAmdFileRead", version)?;
        let write = api.proc_address(c"hipAmdFileWrite", version)?;
        // SAFETY: `hipGetProcAddress` returned the addresses of these two functions, whose C
        // declaration (hip/amd_detail/hip_storage.h) is the signature of `AmdFileIoFn`.
        let (read, write) = unsafe {
            (
                std::mem::transmute::<*mut c_void, AmdFileIoFn>(read.as_ptr()),
                std::mem::transmute::<*mut c_void, AmdFileIoFn>(write.as_ptr()),
            )
        };
        Some(KfdDriver {
            read,
            write,
            init: api.init,
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

    /// One `hipAmdFileRead` or `hipAmdFileWrite`.
    ///
    /// # Safety
    /// The contract of [`crate::P2pDriver::read`] (for a write, the device range is only read).
    unsafe fn transfer(
        &self,
        direction: Direction,
        fd: BorrowedFd<'_>,
        device_ptr: usize,
        size: usize,
        file_offset: u64,
    ) -> io::Result<usize> {
        self.ensure_init()?;
        let call = match direction {
            Direction::Read => self.read,
            Direction::Write => self.write,
        };
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
        kfd_outcome(rc, status, copied, size)
    }
}

/// What one `hipAmdFileRead/Write` call amounts to: the KFD `status` is an errno (either sign);
/// a failing `hipError_t` without one is ENODEV when the device cannot do direct IO at all, else
/// EIO; a count larger than asked is EIO, never trusted.
fn kfd_outcome(rc: c_int, status: i32, copied: u64, asked: usize) -> io::Result<usize> {
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

p2p_driver_by_transfer!(KfdDriver, "amd-kfd");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kfd_answers_become_errnos() {
        let errno = |r: io::Result<usize>| r.unwrap_err().raw_os_error();
        assert_eq!(kfd_outcome(0, 0, 4096, 8192).unwrap(), 4096);
        assert_eq!(
            errno(kfd_outcome(999, libc::EREMOTEIO, 0, 8)),
            Some(libc::EREMOTEIO)
        );
        assert_eq!(errno(kfd_outcome(999, -libc::EIO, 0, 8)), Some(libc::EIO));
        assert_eq!(errno(kfd_outcome(0, i32::MIN, 0, 8)), Some(libc::EIO));
        assert_eq!(errno(kfd_outcome(101, 0, 0, 8)), Some(libc::ENODEV));
        assert_eq!(errno(kfd_outcome(999, 0, 0, 8)), Some(libc::EIO));
        assert_eq!(errno(kfd_outcome(0, 0, 9, 8)), Some(libc::EIO));
    }

    #[test]
    fn the_file_handle_is_eight_bytes_holding_the_fd() {
        let h = AmdFileHandle::from_fd(42);
        assert_eq!(h.fd(), 42);
        // SAFETY: all 8 bytes are initialised by `from_fd`.
        assert_eq!(unsafe { h.pad }[4..], [0, 0, 0, 0]);
    }
}
