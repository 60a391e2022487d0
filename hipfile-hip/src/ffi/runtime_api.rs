//! What the two platforms loaded at run time share: the AMD platform (the HIP runtime) and the
//! NVIDIA platform (the CUDA runtime) open their libraries, resolve symbols, hand host functions
//! to C and make most of their calls the same way, because HIP copied the CUDA runtime API
//! signature for signature.
//!
//! - [`dlopen`] and [`symbol`]: loading a library `RTLD_NODELETE` (a GPU runtime runs threads and
//!   exit handlers that outlive any handle, so its code stays mapped for the life of the process)
//!   and resolving one entry point, a missing one being [`crate::HipError::MissingSymbol`].
//! - [`CommonApi`]: the entry points both runtimes export with one C signature, resolved at load
//!   by the names of the platform's [`Dialect`] (which also carries the flag values that differ).
//! - [`LoadedRuntime`]: the hooks a platform gives, through which it is a [`GpuRuntime`] by one
//!   implementation, so each call HIP and CUDA share is the same FFI call with the same arguments
//!   on both: the entry points, how return codes become errors, what only the platform knows
//!   (facts, pointer queries, its direct IO driver) and what it does around work on device memory
//!   (the NVIDIA platform switches to the device owning it).
//! - [`host_fn_trampoline`]: the one `extern "C"` function through which host functions cross
//!   into C; it owns the boxed closure and catches any panic, so no unwind enters the runtime.

use std::ffi::{c_char, c_void, CStr};
use std::fmt;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::Arc;

use libloading::Library;

use crate::error::{HipError, HipErrorCode, HipResult};
use crate::runtime::{
    ContextHandle, DeviceGuard, EventHandle, GpuRuntime, HostFn, P2pDriver, PointerInfo,
    RuntimeInfo, StreamHandle,
};

/// `hipStream_t` / `cudaStream_t`.
pub(crate) type RawStream = *mut c_void;
/// `hipEvent_t` / `cudaEvent_t`.
pub(crate) type RawEvent = *mut c_void;
/// `hipHostFn_t` / `cudaHostFn_t`.
pub(crate) type HostCallback = unsafe extern "C" fn(user_data: *mut c_void);

/// A stream handle that the caller of an `unsafe` runtime call vouched for: a live stream of the
/// runtime it is used with, for as long as the call (`'call`) runs. Made only where such a call
/// hands its contract on, so the platform code that takes one needs no `unsafe` of its own.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LiveStream<'call> {
    handle: StreamHandle,
    _call: PhantomData<&'call ()>,
}

impl LiveStream<'_> {
    /// # Safety
    /// `handle` is a live stream (or the null stream) of the runtime it is used with, and stays
    /// live while the value is used.
    pub(crate) unsafe fn vouch(handle: StreamHandle) -> Self {
        LiveStream {
            handle,
            _call: PhantomData,
        }
    }

    /// The handle as the runtime's C API takes it.
    pub(crate) fn raw(self) -> RawStream {
        self.handle.as_raw() as RawStream
    }

    /// Whether this is the null (legacy default) stream.
    pub(crate) fn is_null(self) -> bool {
        self.handle.as_raw() == 0
    }
}

/// The device address of a live, aligned 32-bit word of host-mapped pinned memory of the runtime,
/// vouched for by the caller of a stream memory operation: it stays allocated until the operation
/// has run, and the host accesses it only atomically.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MappedWord<'call> {
    addr: usize,
    _call: PhantomData<&'call ()>,
}

impl MappedWord<'_> {
    /// # Safety
    /// `addr` is the device address of such a word (see the type).
    pub(crate) unsafe fn vouch(addr: usize) -> Self {
        MappedWord {
            addr,
            _call: PhantomData,
        }
    }

    /// The device address.
    pub(crate) fn addr(self) -> usize {
        self.addr
    }
}

/// A driver context vouched live for `'call`: one the runtime made for the library
/// ([`GpuRuntime::context_create`]) and has not destroyed, or one the driver keeps alive meanwhile.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LiveContext<'call> {
    raw: usize,
    _call: PhantomData<&'call ()>,
}

impl LiveContext<'_> {
    /// # Safety
    /// `ctx` is a live context of the runtime it is used with, and stays live while the value is
    /// used.
    pub(crate) unsafe fn vouch(ctx: ContextHandle) -> Self {
        LiveContext {
            raw: ctx.as_raw(),
            _call: PhantomData,
        }
    }

    /// The context as the driver's C API takes it.
    pub(crate) fn raw(self) -> *mut c_void {
        self.raw as *mut c_void
    }
}

/// A context of the library's own that nothing uses any more, to be destroyed.
#[derive(Debug)]
pub(crate) struct RetiredContext(usize);

impl RetiredContext {
    /// # Safety
    /// `ctx` came from the runtime's [`GpuRuntime::context_create`] and nothing uses it any more.
    pub(crate) unsafe fn vouch(ctx: ContextHandle) -> Self {
        RetiredContext(ctx.as_raw())
    }

    /// The context as the driver's C API takes it.
    pub(crate) fn raw(&self) -> *mut c_void {
        self.0 as *mut c_void
    }
}

/// `hipStreamDefault` / `cudaStreamDefault`: our streams stay ordered with the legacy default
/// stream, so a staged copy waits for the application's earlier work there (a kernel still writing
/// the buffer), as upstream hipFile's synchronous copies do.
const STREAM_ORDERED_WITH_NULL: u32 = 0;
/// `hipStreamNonBlocking` / `cudaStreamNonBlocking`: a stream not ordered with the legacy default
/// stream, for engines that must not queue behind an application's stream.
const STREAM_NON_BLOCKING: u32 = 1;
/// `hipEventDisableTiming` / `cudaEventDisableTiming`: our events only order work, never time it.
const EVENT_DISABLE_TIMING: u32 = 2;
/// `hipMemAttachGlobal` / `cudaMemAttachGlobal`.
const MEM_ATTACH_GLOBAL: u32 = 1;

/// `hipMemcpyKind` / `cudaMemcpyKind` values (the same on both, and on every ROCm).
#[derive(Clone, Copy)]
#[repr(i32)]
enum CopyKind {
    HostToDevice = 1,
    DeviceToHost = 2,
}

/// `dlopen` with `RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE`: a GPU runtime runs threads and registers
/// exit handlers, so unmapping it when the last handle drops could pull code from under them.
/// Dropping the returned `Library` releases our handle; the code stays mapped for the life of the
/// process.
pub(crate) fn dlopen(name: &str) -> HipResult<Library> {
    let flags =
        libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL | libc::RTLD_NODELETE;
    // SAFETY: loading runs the library's initialisers; those of a HIP or CUDA runtime, a CUDA
    // driver and cuFile are sound to run in any process, which is the contract of naming such a
    // library (in the environment, or to `open_library`/`open_libraries`).
    unsafe { libloading::os::unix::Library::open(Some(name), flags) }
        .map(Library::from)
        .map_err(|e| HipError::Load {
            library: name.to_string(),
            reason: e.to_string(),
        })
}

/// The first of `names` that [`dlopen`] accepts, and that name; when none is accepted,
/// [`HipError::NoLibrary`] with the loader's answer for each, in order.
pub(crate) fn dlopen_first<'a>(names: &[&'a str]) -> HipResult<(Library, &'a str)> {
    let mut tried = Vec::new();
    for name in names {
        match dlopen(name) {
            Ok(lib) => return Ok((lib, name)),
            Err(e) => tried.push(e.into_refusal(name)),
        }
    }
    Err(HipError::NoLibrary { tried })
}

/// Resolve `name` in `lib` (loaded as `library`) as a value of type `T`.
///
/// # Safety
/// `T` must be the function-pointer type matching the C declaration of `name`.
pub(crate) unsafe fn symbol<T: Copy>(
    lib: &Library,
    library: &str,
    name: &'static str,
) -> HipResult<T> {
    // SAFETY: the caller guarantees that `T` matches the symbol's C type.
    match unsafe { lib.get::<T>(name.as_bytes()) } {
        Ok(sym) => Ok(*sym),
        Err(_) => Err(HipError::MissingSymbol {
            library: library.to_string(),
            symbol: name,
        }),
    }
}

/// Whether `lib` exports `name` (only its presence is asked; nothing is read through it).
pub(crate) fn exports(lib: &Library, name: &str) -> bool {
    // SAFETY: the symbol's address is looked up as an opaque pointer and never dereferenced.
    unsafe { lib.get::<*const u8>(name.as_bytes()) }.is_ok()
}

/// `impl P2pDriver for $driver`, named `$name`: reads and writes are both `$driver::transfer`,
/// an `unsafe fn(&self, Direction, BorrowedFd<'_>, usize, usize, u64) -> io::Result<usize>` with
/// the contract of [`P2pDriver::read`] (for a write, the device range is only read).
macro_rules! p2p_driver_by_transfer {
    ($driver:ty, $name:literal) => {
        impl $crate::runtime::P2pDriver for $driver {
            fn name(&self) -> &'static str {
                $name
            }

            unsafe fn read(
                &self,
                fd: std::os::fd::BorrowedFd<'_>,
                device_ptr: usize,
                size: usize,
                file_offset: u64,
            ) -> std::io::Result<usize> {
                let direction = $crate::transfer::Direction::Read;
                // SAFETY: the caller's contract is `transfer`'s.
                unsafe { self.transfer(direction, fd, device_ptr, size, file_offset) }
            }

            unsafe fn write(
                &self,
                fd: std::os::fd::BorrowedFd<'_>,
                device_ptr: usize,
                size: usize,
                file_offset: u64,
            ) -> std::io::Result<usize> {
                let direction = $crate::transfer::Direction::Write;
                // SAFETY: the caller's contract is `transfer`'s.
                unsafe { self.transfer(direction, fd, device_ptr, size, file_offset) }
            }
        }
    };
}
pub(crate) use p2p_driver_by_transfer;

/// A C string a runtime returned, owned; `None` for NULL.
///
/// # Safety
/// `text` is NULL or a NUL-terminated string that stays valid for the call (the error strings of
/// the runtimes are static).
pub(crate) unsafe fn c_text(text: *const c_char) -> Option<String> {
    if text.is_null() {
        return None;
    }
    // SAFETY: non-null, and NUL-terminated and valid by the caller's contract.
    Some(
        unsafe { CStr::from_ptr(text) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// A platform loaded at run time, as the hooks it gives the shared calls: the entry points it
/// resolved, how its return codes become errors, what it alone knows (facts, pointer queries, its
/// direct IO driver) and what it does around work on device memory. Every such platform is a
/// [`GpuRuntime`] through the one implementation below, so each shared call is the same FFI call
/// with the same arguments on both.
pub(crate) trait LoadedRuntime: Send + Sync + fmt::Debug + Sized {
    /// The entry points shared with the other platform.
    fn common(&self) -> &CommonApi;

    /// `Ok` for 0; otherwise the error of `call` failing with `rc`, in the platform's terms.
    fn check(&self, call: &'static str, rc: i32) -> HipResult<()>;

    /// [`GpuRuntime::info`].
    fn runtime_info(&self) -> RuntimeInfo;

    /// [`GpuRuntime::pointer_info`].
    fn describe_pointer(&self, ptr: usize) -> HipResult<PointerInfo>;

    /// [`GpuRuntime::p2p`].
    fn p2p_driver(&self) -> Option<Arc<dyn P2pDriver>>;

    /// [`GpuRuntime::stream_device`] for a stream other than the null stream.
    fn device_of_stream(&self, stream: LiveStream<'_>) -> HipResult<i32>;

    /// [`GpuRuntime::stream_memops`].
    fn memops(&self, device: i32) -> bool;

    /// [`GpuRuntime::stream_writes`].
    fn writes(&self, device: i32) -> bool;

    /// [`GpuRuntime::stream_wait_value`].
    fn wait_value(&self, stream: LiveStream<'_>, word: MappedWord<'_>, value: u32)
        -> HipResult<()>;

    /// [`GpuRuntime::stream_write_value`].
    fn write_value(
        &self,
        stream: LiveStream<'_>,
        word: MappedWord<'_>,
        value: u32,
    ) -> HipResult<()>;

    /// [`GpuRuntime::context_create`]: none by default.
    fn own_context_create(&self, device: i32) -> HipResult<Option<ContextHandle>> {
        let _ = device;
        Ok(None)
    }

    /// [`GpuRuntime::offers_contexts`]: none by default.
    fn offers_own_contexts(&self) -> bool {
        false
    }

    /// [`GpuRuntime::in_context`].
    fn in_own_context(
        &self,
        ctx: LiveContext<'_>,
        f: &mut dyn FnMut() -> HipResult<()>,
    ) -> HipResult<()> {
        let _ = (ctx, f);
        Err(HipError::call("in_context", HipErrorCode::NOT_SUPPORTED))
    }

    /// [`GpuRuntime::context_destroy`].
    fn own_context_destroy(&self, ctx: RetiredContext) -> HipResult<()> {
        let _ = ctx;
        Ok(())
    }

    /// Called before a copy, fill or free touching device memory at `ptr`; the guard it returns
    /// lives until the call has returned. Nothing by default: the work runs on the current device.
    fn enter_device_of(&self, ptr: usize) -> HipResult<Option<DeviceGuard<'_>>> {
        let _ = ptr;
        Ok(None)
    }
}

/// The spelling of [`CommonApi`] on one platform: the symbol of each entry point (also the call
/// name its errors carry) and the values that differ between HIP and CUDA.
#[derive(Debug)]
pub(crate) struct Dialect {
    pub runtime_get_version: &'static str,
    pub get_device_count: &'static str,
    pub get_device: &'static str,
    pub set_device: &'static str,
    pub malloc: &'static str,
    pub malloc_managed: &'static str,
    pub free: &'static str,
    pub host_alloc: &'static str,
    pub host_free: &'static str,
    pub host_register: &'static str,
    pub host_unregister: &'static str,
    pub memcpy: &'static str,
    pub memcpy_async: &'static str,
    pub memset: &'static str,
    pub memset_async: &'static str,
    pub host_get_device_pointer: &'static str,
    pub stream_create_with_flags: &'static str,
    pub stream_destroy: &'static str,
    pub stream_synchronize: &'static str,
    pub event_create_with_flags: &'static str,
    /// The plain event constructor tried when `event_create_with_flags` is not exported; `None`
    /// makes that symbol required.
    pub event_create_fallback: Option<&'static str>,
    /// The call name a failed event creation reports.
    pub event_create_call: &'static str,
    pub event_record: &'static str,
    pub event_synchronize: &'static str,
    pub event_query: &'static str,
    pub event_destroy: &'static str,
    pub launch_host_func: &'static str,
    pub get_error_string: &'static str,
    /// `...DeviceGetPCIBusId`: optional (a runtime without it has no PCI ids to tell).
    pub device_get_pci_bus_id: &'static str,
    /// The flags of every pinned host allocation.
    pub host_alloc_flags: u32,
    /// The flags of a pinned host allocation mapped into every device (Mapped | Portable).
    pub host_alloc_mapped_flags: u32,
    /// The flags of a pinned registration of host memory (Portable), and the read-only flag
    /// added for memory the process may only read.
    pub host_register_flags: u32,
    pub host_register_read_only: u32,
    /// The "not ready" answer of an event query, which is no failure.
    pub not_ready: i32,
}

/// How a runtime creates events: with flags if it exports that, else the plain constructor.
#[derive(Clone, Copy)]
enum EventCreate {
    WithFlags(unsafe extern "C" fn(*mut RawEvent, u32) -> i32),
    Plain(unsafe extern "C" fn(*mut RawEvent) -> i32),
}

/// The entry points the HIP runtime and the CUDA runtime share with one C signature, resolved at
/// load; the calls made through them are [`LoadedRuntime`]'s implementation of [`GpuRuntime`].
#[derive(Clone, Copy)]
pub(crate) struct CommonApi {
    dialect: &'static Dialect,
    runtime_get_version: unsafe extern "C" fn(*mut i32) -> i32,
    get_device_count: unsafe extern "C" fn(*mut i32) -> i32,
    get_device: unsafe extern "C" fn(*mut i32) -> i32,
    set_device: unsafe extern "C" fn(i32) -> i32,
    malloc: unsafe extern "C" fn(*mut *mut c_void, usize) -> i32,
    malloc_managed: unsafe extern "C" fn(*mut *mut c_void, usize, u32) -> i32,
    free: unsafe extern "C" fn(*mut c_void) -> i32,
    host_alloc: unsafe extern "C" fn(*mut *mut c_void, usize, u32) -> i32,
    host_free: unsafe extern "C" fn(*mut c_void) -> i32,
    host_register: unsafe extern "C" fn(*mut c_void, usize, u32) -> i32,
    host_unregister: unsafe extern "C" fn(*mut c_void) -> i32,
    memcpy: unsafe extern "C" fn(*mut c_void, *const c_void, usize, i32) -> i32,
    memcpy_async: unsafe extern "C" fn(*mut c_void, *const c_void, usize, i32, RawStream) -> i32,
    memset: unsafe extern "C" fn(*mut c_void, i32, usize) -> i32,
    memset_async: unsafe extern "C" fn(*mut c_void, i32, usize, RawStream) -> i32,
    host_get_device_pointer: unsafe extern "C" fn(*mut *mut c_void, *mut c_void, u32) -> i32,
    stream_create_with_flags: unsafe extern "C" fn(*mut RawStream, u32) -> i32,
    stream_destroy: unsafe extern "C" fn(RawStream) -> i32,
    stream_synchronize: unsafe extern "C" fn(RawStream) -> i32,
    event_create: EventCreate,
    event_record: unsafe extern "C" fn(RawEvent, RawStream) -> i32,
    event_synchronize: unsafe extern "C" fn(RawEvent) -> i32,
    event_query: unsafe extern "C" fn(RawEvent) -> i32,
    event_destroy: unsafe extern "C" fn(RawEvent) -> i32,
    launch_host_func: unsafe extern "C" fn(RawStream, Option<HostCallback>, *mut c_void) -> i32,
    get_error_string: unsafe extern "C" fn(i32) -> *const c_char,
    device_get_pci_bus_id: Option<unsafe extern "C" fn(*mut c_char, i32, i32) -> i32>,
}

impl CommonApi {
    /// Resolve every entry point in `lib` by the names of `dialect`; the first missing one is the
    /// error.
    pub(crate) fn resolve(
        lib: &Library,
        library: &str,
        dialect: &'static Dialect,
    ) -> HipResult<Self> {
        macro_rules! sym {
            ($field:ident) => {
                // SAFETY: the field this initialises is declared with the C signature of the
                // entry point as hip_runtime_api.h and cuda_runtime_api.h both publish it.
                unsafe { symbol(lib, library, dialect.$field)? }
            };
        }
        Ok(CommonApi {
            dialect,
            runtime_get_version: sym!(runtime_get_version),
            get_device_count: sym!(get_device_count),
            get_device: sym!(get_device),
            set_device: sym!(set_device),
            malloc: sym!(malloc),
            malloc_managed: sym!(malloc_managed),
            free: sym!(free),
            host_alloc: sym!(host_alloc),
            host_free: sym!(host_free),
            host_register: sym!(host_register),
            host_unregister: sym!(host_unregister),
            memcpy: sym!(memcpy),
            memcpy_async: sym!(memcpy_async),
            memset: sym!(memset),
            memset_async: sym!(memset_async),
            host_get_device_pointer: sym!(host_get_device_pointer),
            stream_create_with_flags: sym!(stream_create_with_flags),
            stream_destroy: sym!(stream_destroy),
            stream_synchronize: sym!(stream_synchronize),
            // SAFETY: both candidates are declared with their published signatures.
            event_create: match unsafe { symbol(lib, library, dialect.event_create_with_flags) } {
                Ok(f) => EventCreate::WithFlags(f),
                Err(e) => match dialect.event_create_fallback {
                    // SAFETY: as above.
                    Some(plain) => EventCreate::Plain(unsafe { symbol(lib, library, plain)? }),
                    None => return Err(e),
                },
            },
            event_record: sym!(event_record),
            event_synchronize: sym!(event_synchronize),
            event_query: sym!(event_query),
            event_destroy: sym!(event_destroy),
            launch_host_func: sym!(launch_host_func),
            get_error_string: sym!(get_error_string),
            // SAFETY: declared with the signature both runtime headers publish
            // (`char *pciBusId, int len, int device`).
            device_get_pci_bus_id: unsafe { symbol(lib, library, dialect.device_get_pci_bus_id) }
                .ok(),
        })
    }

    /// `(return code, version)` of the runtime version query, for the platform to check once it
    /// can report errors.
    pub(crate) fn runtime_version(&self) -> (i32, i32) {
        let mut version = 0i32;
        // SAFETY: `version` is a valid out-pointer for the duration of the call.
        let rc = unsafe { (self.runtime_get_version)(&mut version) };
        (rc, version)
    }

    /// The runtime's text for `rc`.
    pub(crate) fn error_string(&self, rc: i32) -> Option<String> {
        // SAFETY: the error-string call takes any integer and returns a static string or NULL,
        // which is `c_text`'s contract.
        unsafe { c_text((self.get_error_string)(rc)) }
    }
}

impl<T: LoadedRuntime> GpuRuntime for T {
    fn info(&self) -> RuntimeInfo {
        self.runtime_info()
    }

    fn pointer_info(&self, ptr: usize) -> HipResult<PointerInfo> {
        self.describe_pointer(ptr)
    }

    fn p2p(&self) -> Option<Arc<dyn P2pDriver>> {
        self.p2p_driver()
    }

    fn pci_bus_id(&self, device: i32) -> HipResult<Option<String>> {
        let api = self.common();
        let Some(get) = api.device_get_pci_bus_id else {
            return Ok(None);
        };
        // "dddd:bb:dd.f" and its NUL fit in 13 bytes; both runtimes document 13 as enough.
        let mut id: [c_char; 32] = [0; 32];
        // SAFETY: `id` holds 32 writable bytes, the length passed; the runtime checks the
        // ordinal and writes at most that many bytes, NUL included.
        let rc = unsafe { get(id.as_mut_ptr(), id.len() as i32, device) };
        self.check(api.dialect.device_get_pci_bus_id, rc)?;
        let end = id.iter().position(|&c| c == 0).unwrap_or(id.len());
        let text: String = id[..end].iter().map(|&c| c as u8 as char).collect();
        Ok(Some(text))
    }

    fn device_count(&self) -> HipResult<i32> {
        let api = self.common();
        let mut n = 0;
        // SAFETY: `n` is a valid out-pointer.
        let rc = unsafe { (api.get_device_count)(&mut n) };
        self.check(api.dialect.get_device_count, rc)?;
        Ok(n)
    }

    fn current_device(&self) -> HipResult<i32> {
        let api = self.common();
        let mut d = 0;
        // SAFETY: `d` is a valid out-pointer.
        let rc = unsafe { (api.get_device)(&mut d) };
        self.check(api.dialect.get_device, rc)?;
        Ok(d)
    }

    fn set_device(&self, device: i32) -> HipResult<()> {
        let api = self.common();
        // SAFETY: plain integer argument; the runtime checks the ordinal.
        let rc = unsafe { (api.set_device)(device) };
        self.check(api.dialect.set_device, rc)
    }

    fn device_alloc(&self, len: usize) -> HipResult<usize> {
        let api = self.common();
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer.
        let rc = unsafe { (api.malloc)(&mut p, len) };
        self.check(api.dialect.malloc, rc)?;
        Ok(p as usize)
    }

    fn managed_alloc(&self, len: usize) -> HipResult<usize> {
        let api = self.common();
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-pointer.
        let rc = unsafe { (api.malloc_managed)(&mut p, len, MEM_ATTACH_GLOBAL) };
        self.check(api.dialect.malloc_managed, rc)?;
        Ok(p as usize)
    }

    unsafe fn device_free(&self, ptr: usize) -> HipResult<()> {
        // cudaFree synchronises with the device that owns the memory: on NVIDIA that device is made
        // current for the call.
        let _device = self.enter_device_of(ptr)?;
        let api = self.common();
        // SAFETY: the caller guarantees `ptr` is this runtime's device or managed allocation with
        // no copy in flight.
        let rc = unsafe { (api.free)(ptr as *mut c_void) };
        self.check(api.dialect.free, rc)
    }

    fn host_alloc(&self, len: usize) -> HipResult<NonNull<u8>> {
        let flags = self.common().dialect.host_alloc_flags;
        pinned_alloc(self, len, flags)
    }

    fn host_alloc_mapped(&self, len: usize) -> HipResult<NonNull<u8>> {
        let flags = self.common().dialect.host_alloc_mapped_flags;
        pinned_alloc(self, len, flags)
    }

    unsafe fn host_device_pointer(&self, ptr: NonNull<u8>) -> HipResult<usize> {
        let api = self.common();
        let mut d: *mut c_void = std::ptr::null_mut();
        // SAFETY: `d` is a valid out-pointer; the caller guarantees `ptr` is live host-mapped
        // memory of this runtime; the flags must be 0.
        let rc = unsafe { (api.host_get_device_pointer)(&mut d, ptr.as_ptr().cast(), 0) };
        self.check(api.dialect.host_get_device_pointer, rc)?;
        Ok(d as usize)
    }

    unsafe fn host_register(&self, ptr: NonNull<u8>, len: usize, read_only: bool) -> HipResult<()> {
        let api = self.common();
        let d = api.dialect;
        let flags = d.host_register_flags
            | if read_only {
                d.host_register_read_only
            } else {
                0
            };
        // SAFETY: the caller guarantees `[ptr, ptr + len)` is mapped until it is unregistered.
        let rc = unsafe { (api.host_register)(ptr.as_ptr().cast(), len, flags) };
        self.check(d.host_register, rc)
    }

    fn context_create(&self, device: i32) -> HipResult<Option<ContextHandle>> {
        self.own_context_create(device)
    }

    fn offers_contexts(&self) -> bool {
        self.offers_own_contexts()
    }

    unsafe fn in_context(
        &self,
        ctx: ContextHandle,
        f: &mut dyn FnMut() -> HipResult<()>,
    ) -> HipResult<()> {
        // SAFETY: the caller guarantees `ctx` is a live context of this runtime.
        self.in_own_context(unsafe { LiveContext::vouch(ctx) }, f)
    }

    unsafe fn context_destroy(&self, ctx: ContextHandle) -> HipResult<()> {
        // SAFETY: the caller guarantees `ctx` came from `context_create` and is used no more.
        self.own_context_destroy(unsafe { RetiredContext::vouch(ctx) })
    }

    unsafe fn host_unregister(&self, ptr: NonNull<u8>) -> HipResult<()> {
        let api = self.common();
        // SAFETY: the caller guarantees `ptr` is registered and no copy out of it is in flight.
        let rc = unsafe { (api.host_unregister)(ptr.as_ptr().cast()) };
        self.check(api.dialect.host_unregister, rc)
    }

    unsafe fn host_free(&self, ptr: NonNull<u8>) -> HipResult<()> {
        let api = self.common();
        // SAFETY: the caller guarantees `ptr` came from `host_alloc` and is no longer used.
        let rc = unsafe { (api.host_free)(ptr.as_ptr().cast()) };
        self.check(api.dialect.host_free, rc)
    }

    unsafe fn copy_to_device(&self, dst: usize, src: &[u8]) -> HipResult<()> {
        let (to, from) = (dst as *mut c_void, src.as_ptr().cast());
        // SAFETY: the caller guarantees the device range; `src` is a valid slice.
        unsafe { memcpy(self, dst, to, from, src.len(), CopyKind::HostToDevice, None) }
    }

    unsafe fn copy_from_device(&self, dst: &mut [u8], src: usize) -> HipResult<()> {
        let (to, from) = (dst.as_mut_ptr().cast(), src as *const c_void);
        // SAFETY: the caller guarantees the device range; `dst` is a valid, exclusive slice.
        unsafe { memcpy(self, src, to, from, dst.len(), CopyKind::DeviceToHost, None) }
    }

    unsafe fn memset_device(&self, dst: usize, value: u8, len: usize) -> HipResult<()> {
        let _device = self.enter_device_of(dst)?;
        let api = self.common();
        // SAFETY: the caller guarantees the device range and exclusive access.
        let rc = unsafe { (api.memset)(dst as *mut c_void, i32::from(value), len) };
        self.check(api.dialect.memset, rc)
    }

    unsafe fn copy_to_device_async(
        &self,
        dst: usize,
        src: *const u8,
        len: usize,
        stream: StreamHandle,
    ) -> HipResult<()> {
        let (to, from) = (dst as *mut c_void, src.cast());
        // SAFETY: the caller guarantees both ranges stay valid until the copy completes and that
        // `stream` is a live stream of this runtime.
        unsafe {
            memcpy(
                self,
                dst,
                to,
                from,
                len,
                CopyKind::HostToDevice,
                Some(stream),
            )
        }
    }

    unsafe fn copy_from_device_async(
        &self,
        dst: *mut u8,
        src: usize,
        len: usize,
        stream: StreamHandle,
    ) -> HipResult<()> {
        let (to, from) = (dst.cast(), src as *const c_void);
        // SAFETY: as for `copy_to_device_async`.
        unsafe {
            memcpy(
                self,
                src,
                to,
                from,
                len,
                CopyKind::DeviceToHost,
                Some(stream),
            )
        }
    }

    fn stream_create(&self) -> HipResult<StreamHandle> {
        create_stream(self, STREAM_ORDERED_WITH_NULL)
    }

    fn stream_create_independent(&self) -> HipResult<StreamHandle> {
        create_stream(self, STREAM_NON_BLOCKING)
    }

    unsafe fn stream_device(&self, stream: StreamHandle) -> HipResult<i32> {
        // SAFETY: the caller guarantees `stream` is a live stream of this runtime.
        device_of_stream(self, unsafe { LiveStream::vouch(stream) })
    }

    fn stream_memops(&self, device: i32) -> bool {
        self.memops(device)
    }

    fn stream_writes(&self, device: i32) -> bool {
        self.writes(device)
    }

    unsafe fn stream_wait_value(
        &self,
        stream: StreamHandle,
        addr: usize,
        value: u32,
    ) -> HipResult<()> {
        // SAFETY: the caller guarantees a live stream of this runtime and a live, aligned word of
        // host-mapped memory at `addr` that stays allocated until the wait has run.
        let (stream, word) = unsafe { (LiveStream::vouch(stream), MappedWord::vouch(addr)) };
        self.wait_value(stream, word, value)
    }

    unsafe fn stream_write_value(
        &self,
        stream: StreamHandle,
        addr: usize,
        value: u32,
    ) -> HipResult<()> {
        // SAFETY: the caller guarantees a live stream of this runtime and a live, aligned word of
        // host-mapped memory at `addr` that stays allocated until the write has run, and that the
        // host accesses only atomically.
        let (stream, word) = unsafe { (LiveStream::vouch(stream), MappedWord::vouch(addr)) };
        self.write_value(stream, word, value)
    }

    unsafe fn memset_device_async(
        &self,
        dst: usize,
        value: u8,
        len: usize,
        stream: StreamHandle,
    ) -> HipResult<()> {
        let _device = self.enter_device_of(dst)?;
        let api = self.common();
        // SAFETY: the caller guarantees the device range, exclusive access until the fill
        // completes, and that `stream` is a live stream of this runtime.
        let rc = unsafe {
            (api.memset_async)(
                dst as *mut c_void,
                i32::from(value),
                len,
                stream.as_raw() as RawStream,
            )
        };
        self.check(api.dialect.memset_async, rc)
    }

    unsafe fn stream_destroy(&self, stream: StreamHandle) -> HipResult<()> {
        let api = self.common();
        // SAFETY: the caller guarantees `stream` is a live stream of this runtime.
        let rc = unsafe { (api.stream_destroy)(stream.as_raw() as RawStream) };
        self.check(api.dialect.stream_destroy, rc)
    }

    unsafe fn stream_synchronize(&self, stream: StreamHandle) -> HipResult<()> {
        let api = self.common();
        // SAFETY: the caller guarantees `stream` is a live stream of this runtime.
        let rc = unsafe { (api.stream_synchronize)(stream.as_raw() as RawStream) };
        self.check(api.dialect.stream_synchronize, rc)
    }

    fn event_create(&self) -> HipResult<EventHandle> {
        let api = self.common();
        let mut e: RawEvent = std::ptr::null_mut();
        let rc = match api.event_create {
            // SAFETY: `e` is a valid out-pointer.
            EventCreate::WithFlags(f) => unsafe { f(&mut e, EVENT_DISABLE_TIMING) },
            // SAFETY: `e` is a valid out-pointer.
            EventCreate::Plain(f) => unsafe { f(&mut e) },
        };
        self.check(api.dialect.event_create_call, rc)?;
        // SAFETY: the runtime just created `e`; nothing has destroyed it.
        Ok(unsafe { EventHandle::from_raw(e as usize) })
    }

    unsafe fn event_record(&self, event: EventHandle, stream: StreamHandle) -> HipResult<()> {
        let api = self.common();
        // SAFETY: the caller guarantees both handles are live handles of this runtime.
        let rc =
            unsafe { (api.event_record)(event.as_raw() as RawEvent, stream.as_raw() as RawStream) };
        self.check(api.dialect.event_record, rc)
    }

    unsafe fn event_synchronize(&self, event: EventHandle) -> HipResult<()> {
        let api = self.common();
        // SAFETY: the caller guarantees `event` is a live event of this runtime.
        let rc = unsafe { (api.event_synchronize)(event.as_raw() as RawEvent) };
        self.check(api.dialect.event_synchronize, rc)
    }

    unsafe fn event_query(&self, event: EventHandle) -> HipResult<bool> {
        let api = self.common();
        // SAFETY: the caller guarantees `event` is a live event of this runtime.
        let rc = unsafe { (api.event_query)(event.as_raw() as RawEvent) };
        if rc == api.dialect.not_ready {
            return Ok(false);
        }
        self.check(api.dialect.event_query, rc)?;
        Ok(true)
    }

    unsafe fn event_destroy(&self, event: EventHandle) -> HipResult<()> {
        let api = self.common();
        // SAFETY: the caller guarantees `event` is a live event of this runtime.
        let rc = unsafe { (api.event_destroy)(event.as_raw() as RawEvent) };
        self.check(api.dialect.event_destroy, rc)
    }

    unsafe fn launch_host_func(&self, stream: StreamHandle, f: HostFn) -> HipResult<()> {
        let api = self.common();
        let user_data = Box::into_raw(Box::new(f)).cast::<c_void>();
        // SAFETY: the caller guarantees `stream` is a live stream of this runtime; the trampoline
        // matches hipHostFn_t and cudaHostFn_t and takes ownership of `user_data` when the runtime
        // calls it, which it does exactly once if the launch succeeds.
        let rc = unsafe {
            (api.launch_host_func)(
                stream.as_raw() as RawStream,
                Some(host_fn_trampoline),
                user_data,
            )
        };
        if rc != 0 {
            // SAFETY: the launch failed, so the runtime never took `user_data`; it is still ours.
            drop(unsafe { Box::from_raw(user_data.cast::<HostFn>()) });
        }
        self.check(api.dialect.launch_host_func, rc)
    }
}

/// [`GpuRuntime::stream_device`] of a stream vouched live: the current device for the null
/// stream, else the platform's answer.
pub(crate) fn device_of_stream<T: LoadedRuntime>(rt: &T, stream: LiveStream<'_>) -> HipResult<i32> {
    if stream.is_null() {
        return rt.current_device();
    }
    // HIP and CUDA dereference a stream handle unchecked: a made-up integer handed in by an
    // application (which broke the contract, but must get an error, not a crash) is refused
    // unless it is a special handle (`cudaStreamLegacy` 1, the per-thread streams 2) or
    // points to mapped memory. The other stream calls come after this one.
    let raw = stream.raw() as usize;
    if raw > 2 && !super::os::copies_from_self(raw, std::mem::size_of::<usize>()) {
        return Err(HipError::Call {
            call: "stream handle",
            code: HipErrorCode::INVALID_HANDLE,
            detail: Some(format!("{raw:#x} is no mapped address")),
        });
    }
    rt.device_of_stream(stream)
}

/// One `memcpy` (no `stream`) or `memcpyAsync` of `len` bytes from `src` to `dst` in direction
/// `kind`, with the device owning `device_side` (the device address of the two) current for the
/// call where the platform needs that.
///
/// # Safety
/// The contract of the [`GpuRuntime`] copy this serves: both ranges valid for the copy (until it
/// completes, when queued), the device range inside one allocation of this runtime, `stream` live.
unsafe fn memcpy<T: LoadedRuntime>(
    rt: &T,
    device_side: usize,
    dst: *mut c_void,
    src: *const c_void,
    len: usize,
    kind: CopyKind,
    stream: Option<StreamHandle>,
) -> HipResult<()> {
    let _device = rt.enter_device_of(device_side)?;
    let api = rt.common();
    let (call, rc) = match stream {
        // SAFETY: the caller's contract.
        None => (api.dialect.memcpy, unsafe {
            (api.memcpy)(dst, src, len, kind as i32)
        }),
        // SAFETY: the caller's contract.
        Some(s) => (api.dialect.memcpy_async, unsafe {
            (api.memcpy_async)(dst, src, len, kind as i32, s.as_raw() as RawStream)
        }),
    };
    rt.check(call, rc)
}

/// Pinned host memory with the allocation flags `flags`.
fn pinned_alloc<T: LoadedRuntime>(rt: &T, len: usize, flags: u32) -> HipResult<NonNull<u8>> {
    let api = rt.common();
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: `p` is a valid out-pointer.
    let rc = unsafe { (api.host_alloc)(&mut p, len, flags) };
    rt.check(api.dialect.host_alloc, rc)?;
    NonNull::new(p.cast::<u8>())
        .ok_or_else(|| HipError::call(api.dialect.host_alloc, HipErrorCode::OUT_OF_MEMORY))
}

/// A stream on the current device with the creation flags `flags`.
fn create_stream<T: LoadedRuntime>(rt: &T, flags: u32) -> HipResult<StreamHandle> {
    let api = rt.common();
    let mut s: RawStream = std::ptr::null_mut();
    // SAFETY: `s` is a valid out-pointer.
    let rc = unsafe { (api.stream_create_with_flags)(&mut s, flags) };
    rt.check(api.dialect.stream_create_with_flags, rc)?;
    // SAFETY: the runtime just created `s`; nothing has destroyed it.
    Ok(unsafe { StreamHandle::from_raw(s as usize) })
}

/// The C side of [`crate::GpuRuntime::launch_host_func`]: runs the boxed closure exactly once.
extern "C" fn host_fn_trampoline(user_data: *mut c_void) {
    if user_data.is_null() {
        return;
    }
    // SAFETY: `user_data` is the `Box<HostFn>` leaked by `launch_host_func`, handed to the runtime
    // for exactly one call; ownership comes back here.
    let f = unsafe { Box::from_raw(user_data.cast::<HostFn>()) };
    // A panic must not unwind into the runtime's thread; the closure's owner sees its side effects
    // missing, which is all a host function can report anyway.
    let _ = catch_unwind(AssertUnwindSafe(*f));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_library_that_is_not_there_is_a_load_error_naming_it() {
        match dlopen("/nonexistent/libhipfile-test.so") {
            Err(HipError::Load { library, .. }) => {
                assert_eq!(library, "/nonexistent/libhipfile-test.so")
            }
            other => panic!("{:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn when_no_name_loads_every_name_is_kept_with_the_loaders_answer() {
        let names = [
            "/nonexistent/libhipfile-test.so.2",
            "/nonexistent/libhipfile-test.so.1",
        ];
        match dlopen_first(&names) {
            Err(HipError::NoLibrary { tried }) => {
                let got: Vec<&str> = tried.iter().map(|t| t.library.as_str()).collect();
                assert_eq!(got, names);
                assert!(tried.iter().all(|t| t.not_found()), "{tried:?}");
            }
            other => panic!("{:?}", other.map(|(_, name)| name)),
        }
    }

    #[test]
    fn the_trampoline_runs_the_closure_once_and_keeps_its_panic() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        let runs = Arc::new(AtomicUsize::new(0));
        let counter = Arc::clone(&runs);
        let f: HostFn = Box::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            panic!("deliberate panic in a host function");
        });
        host_fn_trampoline(Box::into_raw(Box::new(f)).cast());
        host_fn_trampoline(std::ptr::null_mut());
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert_eq!(Arc::strong_count(&runs), 1, "the closure was dropped");
    }
}
