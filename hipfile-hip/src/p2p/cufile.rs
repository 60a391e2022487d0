//! NVIDIA GPUDirect Storage through `libcufile.so.0`, as a [`P2pDriver`].
//!
//! cuFile is only a direct path when the `nvidia-fs` kernel driver is loaded (it shows up as
//! `/proc/driver/nvidia-fs`). Without it cuFile runs in its own compat mode, a staged engine that
//! is slower than hipfile-rs's fallback, so [`cufile_driver`] offers nothing and
//! [`cufile_probe`] says why. Forcing it (`HIPFILE_CUFILE_FORCE=true`, read into
//! [`crate::PlatformOptions::cufile_force`]) skips the nvidia-fs check, for testing.
//!
//! The library is loaded at run time (never linked); every entry point is resolved at load and a
//! missing one refuses the driver. `cuFileDriverOpen` runs once per process. Each descriptor is
//! registered with `cuFileHandleRegister` at its first transfer and kept in a cache keyed by the
//! descriptor and the identity (device, inode) of the file behind it, so a descriptor number
//! reused for another file gets a fresh handle; the stale one is deregistered then.
//!
//! Errors: `cuFileRead/Write` answer `-1` with `errno`, or the negated `CUfileOpError`. The cuFile
//! errors that mean "this device or platform cannot do it" (driver not initialised, platform, IO
//! or device not supported) become ENODEV, so the request fails over to the fallback; the others
//! EIO.

use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use libloading::Library;

use super::{checked_count, errno_error, P2pDriver, MAX_P2P_TRANSFER};
use crate::error::HipError;
use crate::loaded;

/// The library loaded.
pub const CUFILE_LIBRARY: &str = "libcufile.so.0";
/// Present when the nvidia-fs kernel driver is loaded.
pub const NVIDIA_FS_PROC: &str = "/proc/driver/nvidia-fs";
/// `true` offers cuFile even without nvidia-fs (testing only: it is then a staged engine).
pub const FORCE_ENV: &str = "HIPFILE_CUFILE_FORCE";

/// `CUfileError_t`: the cuFile error and the CUDA driver error.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct CuFileError {
    err: c_int,
    cu_err: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
union CuFileDescrHandle {
    fd: c_int,
    handle: *mut c_void,
}

/// `CUfileDescr_t`.
#[repr(C)]
struct CuFileDescr {
    kind: c_int,
    handle: CuFileDescrHandle,
    fs_ops: *const c_void,
}

/// `CU_FILE_HANDLE_TYPE_OPAQUE_FD`.
const HANDLE_TYPE_OPAQUE_FD: c_int = 1;

/// `CUfileOpError` values that mean the device or platform cannot do direct IO.
const NOT_INITIALIZED: c_int = 5001;
const PLATFORM_NOT_SUPPORTED: c_int = 5007;
const IO_NOT_SUPPORTED: c_int = 5008;
const DEVICE_NOT_SUPPORTED: c_int = 5009;

type CuFileHandle = *mut c_void;

#[derive(Clone, Copy)]
struct CuFileApi {
    driver_open: unsafe extern "C" fn() -> CuFileError,
    handle_register: unsafe extern "C" fn(*mut CuFileHandle, *mut CuFileDescr) -> CuFileError,
    handle_deregister: unsafe extern "C" fn(CuFileHandle),
    read: unsafe extern "C" fn(CuFileHandle, *mut c_void, usize, i64, i64) -> isize,
    write: unsafe extern "C" fn(CuFileHandle, *const c_void, usize, i64, i64) -> isize,
}

/// A registered cuFile handle and the identity of the file it was registered for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CachedHandle {
    dev: u64,
    ino: u64,
    handle: usize,
}

/// The GPUDirect Storage driver.
pub struct CuFileDriver {
    api: CuFileApi,
    handles: Mutex<HashMap<RawFd, CachedHandle>>,
    // Keeps the code behind `api` mapped.
    _library: Library,
}

impl std::fmt::Debug for CuFileDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CuFileDriver")
            .field("library", &CUFILE_LIBRARY)
            .finish_non_exhaustive()
    }
}

/// The cuFile driver when this machine offers GPUDirect Storage (or `force` asks for it without
/// nvidia-fs), else `None`. Loaded and opened once per process; later calls share it.
pub fn cufile_driver(force: bool) -> Option<Arc<dyn P2pDriver>> {
    let driver: Arc<dyn P2pDriver> = offered(force).ok()?.clone();
    Some(driver)
}

/// `Ok(())` when [`cufile_driver`] offers a driver for the same `force`, else why not (for
/// `hipfile check`).
pub fn cufile_probe(force: bool) -> Result<(), String> {
    offered(force).map(|_| ()).map_err(Clone::clone)
}

/// The driver offered, or why none is: nvidia-fs is absent and not forced past, or cuFile did not
/// load. Neither answer changes during the life of the process, so both are asked once.
fn offered(force: bool) -> Result<&'static Arc<CuFileDriver>, &'static String> {
    static NVIDIA_FS: OnceLock<bool> = OnceLock::new();
    static ABSENT: OnceLock<String> = OnceLock::new();
    static DRIVER: OnceLock<Result<Arc<CuFileDriver>, String>> = OnceLock::new();
    let nvidia_fs = *NVIDIA_FS.get_or_init(|| Path::new(NVIDIA_FS_PROC).exists());
    if !worth_offering(force, nvidia_fs) {
        return Err(ABSENT.get_or_init(|| {
            format!(
                "{NVIDIA_FS_PROC} is absent: without the nvidia-fs driver cuFile only stages \
                 through host memory ({FORCE_ENV}=true offers it anyway)"
            )
        }));
    }
    DRIVER
        .get_or_init(|| CuFileDriver::load().map(Arc::new))
        .as_ref()
}

/// Whether cuFile is worth offering: with the nvidia-fs driver it is a direct path; without, only
/// when forced.
fn worth_offering(force: bool, nvidia_fs: bool) -> bool {
    force || nvidia_fs
}

/// Resolve `name` in `lib`.
///
/// # Safety
/// `T` must be the function-pointer type matching the C declaration of `name`.
unsafe fn symbol<T: Copy>(lib: &Library, name: &'static str) -> Result<T, String> {
    // SAFETY: the caller guarantees that `T` matches the symbol's C type.
    unsafe { loaded::symbol(lib, CUFILE_LIBRARY, name) }
        .map_err(|_| format!("{CUFILE_LIBRARY} lacks {name}"))
}

impl CuFileDriver {
    fn load() -> Result<Self, String> {
        let lib = loaded::dlopen(CUFILE_LIBRARY).map_err(|e| match e {
            HipError::Load { reason, .. } => format!("cannot load {CUFILE_LIBRARY}: {reason}"),
            other => other.to_string(),
        })?;
        // SAFETY: every `symbol` call resolves a field whose type is its declaration in cufile.h.
        let api = unsafe {
            CuFileApi {
                driver_open: symbol(&lib, "cuFileDriverOpen")?,
                handle_register: symbol(&lib, "cuFileHandleRegister")?,
                handle_deregister: symbol(&lib, "cuFileHandleDeregister")?,
                read: symbol(&lib, "cuFileRead")?,
                write: symbol(&lib, "cuFileWrite")?,
            }
        };
        // SAFETY: no arguments; the driver is reference counted by cuFile and left open for the
        // life of the process.
        let opened = unsafe { (api.driver_open)() };
        if opened.err != 0 {
            return Err(format!(
                "cuFileDriverOpen failed: cuFile error {}, CUDA error {}",
                opened.err, opened.cu_err
            ));
        }
        Ok(CuFileDriver {
            api,
            handles: Mutex::new(HashMap::new()),
            _library: lib,
        })
    }

    /// The cuFile handle of `fd`, registering it at first use.
    fn handle(&self, fd: BorrowedFd<'_>) -> io::Result<CuFileHandle> {
        let raw = fd.as_raw_fd();
        // SAFETY: an all-zero `stat` is a valid value to be overwritten by fstat.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open (borrowed) and `st` is a valid out-struct.
        if unsafe { libc::fstat(raw, &mut st) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let (dev, ino) = (st.st_dev as u64, st.st_ino as u64);
        let mut handles = self.handles.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(cached) = handles.get(&raw) {
            if cached.dev == dev && cached.ino == ino {
                return Ok(cached.handle as CuFileHandle);
            }
            // The descriptor number now names another file: its old registration is stale.
            // SAFETY: the handle came from cuFileHandleRegister and is no longer used.
            unsafe { (self.api.handle_deregister)(cached.handle as CuFileHandle) };
            handles.remove(&raw);
        }
        let mut descr = CuFileDescr {
            kind: HANDLE_TYPE_OPAQUE_FD,
            handle: CuFileDescrHandle { fd: raw },
            fs_ops: std::ptr::null(),
        };
        let mut handle: CuFileHandle = std::ptr::null_mut();
        // SAFETY: both pointers are valid for the call; `fd` is open.
        let rc = unsafe { (self.api.handle_register)(&mut handle, &mut descr) };
        if rc.err != 0 {
            return Err(errno_error(op_errno(rc.err)));
        }
        handles.insert(
            raw,
            CachedHandle {
                dev,
                ino,
                handle: handle as usize,
            },
        );
        Ok(handle)
    }
}

/// The errno standing for a `CUfileOpError`.
fn op_errno(err: c_int) -> i32 {
    match err {
        NOT_INITIALIZED | PLATFORM_NOT_SUPPORTED | IO_NOT_SUPPORTED | DEVICE_NOT_SUPPORTED => {
            libc::ENODEV
        }
        _ => libc::EIO,
    }
}

/// What a `cuFileRead/Write` answer amounts to.
fn transfer_outcome(n: isize, asked: usize) -> io::Result<usize> {
    match n {
        -1 => Err(io::Error::last_os_error()),
        n if n < -1 => Err(errno_error(op_errno(
            c_int::try_from(n.unsigned_abs()).unwrap_or(0),
        ))),
        n => checked_count(n, asked),
    }
}

impl P2pDriver for CuFileDriver {
    fn name(&self) -> &'static str {
        "cufile"
    }

    unsafe fn read(
        &self,
        fd: BorrowedFd<'_>,
        device_ptr: usize,
        size: usize,
        file_offset: u64,
    ) -> io::Result<usize> {
        let handle = self.handle(fd)?;
        let size = size.min(MAX_P2P_TRANSFER);
        let offset = i64::try_from(file_offset).map_err(|_| errno_error(libc::EINVAL))?;
        // SAFETY: the caller guarantees the device range; the handle is registered.
        let n = unsafe { (self.api.read)(handle, device_ptr as *mut c_void, size, offset, 0) };
        transfer_outcome(n, size)
    }

    unsafe fn write(
        &self,
        fd: BorrowedFd<'_>,
        device_ptr: usize,
        size: usize,
        file_offset: u64,
    ) -> io::Result<usize> {
        let handle = self.handle(fd)?;
        let size = size.min(MAX_P2P_TRANSFER);
        let offset = i64::try_from(file_offset).map_err(|_| errno_error(libc::EINVAL))?;
        // SAFETY: the caller guarantees the device range; the handle is registered.
        let n = unsafe { (self.api.write)(handle, device_ptr as *const c_void, size, offset, 0) };
        transfer_outcome(n, size)
    }
}

impl Drop for CuFileDriver {
    fn drop(&mut self) {
        let handles = std::mem::take(
            self.handles
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner),
        );
        for cached in handles.into_values() {
            // SAFETY: every cached handle came from cuFileHandleRegister and is used no more.
            unsafe { (self.api.handle_deregister)(cached.handle as CuFileHandle) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cufile_errors_that_mean_no_direct_path_fail_over() {
        assert_eq!(op_errno(DEVICE_NOT_SUPPORTED), libc::ENODEV);
        assert_eq!(op_errno(PLATFORM_NOT_SUPPORTED), libc::ENODEV);
        assert_eq!(op_errno(5011), libc::EIO);
        let errno = |r: io::Result<usize>| r.unwrap_err().raw_os_error();
        assert_eq!(errno(transfer_outcome(-5009, 8)), Some(libc::ENODEV));
        assert_eq!(errno(transfer_outcome(9, 8)), Some(libc::EIO));
        assert_eq!(transfer_outcome(4, 8).unwrap(), 4);
    }

    #[test]
    fn the_probe_gives_a_reason_when_nothing_is_offered() {
        match (cufile_probe(false), cufile_driver(false)) {
            (Ok(()), Some(d)) => assert_eq!(d.name(), "cufile"),
            (Err(why), None) => assert!(!why.is_empty()),
            (probe, driver) => panic!("probe {probe:?} disagrees with driver {driver:?}"),
        }
    }

    #[test]
    fn only_nvidia_fs_or_forcing_offers_cufile() {
        assert!(worth_offering(false, true));
        assert!(worth_offering(true, false));
        assert!(!worth_offering(false, false));
    }

    #[test]
    fn descriptors_match_the_c_layout() {
        assert_eq!(std::mem::size_of::<CuFileDescr>(), 24);
        assert_eq!(std::mem::size_of::<CuFileError>(), 8);
    }
}
