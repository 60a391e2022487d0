//! The NVIDIA platform: HIP semantics over the CUDA runtime (`libcudart.so`) and driver
//! (`libcuda.so.1`), both loaded with `libloading` at run time.
//!
//! Nothing links CUDA. [`open`] loads the runtime the platform options name (from
//! `HIPFILE_CUDART_LIBRARY`), else the first of `libcudart.so.13` and `libcudart.so.12` that the
//! dynamic loader accepts, and the driver they name (from `HIPFILE_CUDA_LIBRARY`), else
//! `libcuda.so.1`; [`open_libraries`] loads explicit paths or sonames. Every symbol is resolved at load into tables of function pointers, so a library that
//! lacks one is refused with [`crate::HipError::MissingSymbol`] at open, never mid-IO and never by a panic.
//!
//! HIP-on-NVIDIA semantics:
//! - Errors are HIP's: every `cudaError_t` and `CUresult` goes through one table, [`hip_code`].
//!   The numbers mostly coincide; a CUDA code with no HIP twin becomes `hipErrorUnknown`, and the
//!   CUDA number and name stay in the error's detail text.
//! - Streams and events are CUDA's handles; pinned memory is `cudaHostAlloc(Portable)`, so a
//!   staging buffer serves every device.
//! - The caller's current device is never changed behind its back: work on memory of another device
//!   switches to that device for the call and switches back ([`crate::DeviceGuard`]).
//! - Device memory of another CUDA context in the process (a PyTorch or CuPy allocation) works:
//!   `cudaPointerGetAttributes` answers for any context under UVA, and the driver calls that need a
//!   context (`cuMemGetAddressRange_v2`) run with the owning device's primary context made current
//!   for the call and the caller's context restored afterwards.
//!
//! ABI notes (CUDA 11 and later): `cudaPointerAttributes` is `{ int type; int device;
//! void* devicePointer; void* hostPointer; }`, 24 bytes; `cudaMemoryType` is Unregistered=0,
//! Host=1, Device=2, Managed=3, decoded with a `match` (an unknown value is
//! [`crate::HipError::Unexpected`]); CUDA 11+ answers success with `Unregistered` for pageable memory.
//!
//! Both libraries are opened `RTLD_NODELETE`: the CUDA runtime runs threads and exit handlers that
//! outlive any handle, so its code stays mapped for the life of the process.
//!
//! The calls the CUDA runtime shares with HIP are made by the code both platforms share, spelled
//! the CUDA way (in `ffi::cuda`, with every raw call of the platform); this module adds what is NVIDIA's own: errors (`errors`), pointer
//! queries and the device switch around memory work (`memory`), driver contexts (`context`), and
//! what the driver alone knows of streams (`streams`: their device, the stream memory wait).

mod context;
mod errors;
mod memory;
mod streams;

use std::fmt;
use std::sync::{Arc, OnceLock};

use libloading::Library;

use crate::error::HipResult;
use crate::ffi::cuda::{DriverApi, PrimaryContexts, RuntimeApi};
use crate::ffi::runtime_api::{
    dlopen, dlopen_first, CommonApi, LiveContext, LiveStream, LoadedRuntime, MappedWord,
    RetiredContext,
};
use crate::options::PlatformOptions;
use crate::runtime::{ContextHandle, DeviceGuard, GpuRuntime, Platform, PointerInfo, RuntimeInfo};
use errors::driver_failed;
use streams::StreamMemop;

pub use crate::ffi::cuda::{
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, CU_POINTER_ATTRIBUTE_IS_MANAGED,
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
};
pub use crate::options::{
    CUDART_LIBRARY_ENV as RUNTIME_LIBRARY_ENV, CUDA_LIBRARY_ENV as DRIVER_LIBRARY_ENV,
};
pub use errors::hip_code;
pub use memory::{decode_driver_memory_type, decode_memory_type};
/// The CUDA runtime sonames tried, in order, when [`RUNTIME_LIBRARY_ENV`] is not set.
pub const DEFAULT_RUNTIME_LIBRARIES: [&str; 2] = ["libcudart.so.13", "libcudart.so.12"];
/// The CUDA driver soname loaded when [`DRIVER_LIBRARY_ENV`] is not set.
pub const DEFAULT_DRIVER_LIBRARY: &str = "libcuda.so.1";

/// The CUDA runtime and driver of an NVIDIA GPU, loaded at run time.
pub struct NvidiaRuntime {
    rt: RuntimeApi,
    drv: DriverApi,
    version: i32,
    runtime_library: String,
    driver_library: String,
    /// `cuInit(0)`'s answer, asked once before the first driver call.
    driver_init: OnceLock<i32>,
    /// The device count, asked once: a process's set of CUDA devices never changes.
    devices: OnceLock<i32>,
    /// Primary contexts this runtime retained, released on drop.
    primary_contexts: PrimaryContexts,
    /// Offer cuFile without the nvidia-fs driver ([`PlatformOptions::cufile_force`]).
    cufile_force: bool,
    // Keep the code behind every pointer in `rt` and `drv` mapped; never used after load.
    _runtime_lib: Library,
    _driver_lib: Library,
}

impl fmt::Debug for NvidiaRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NvidiaRuntime")
            .field("runtime", &self.runtime_library)
            .field("driver", &self.driver_library)
            .field("version", &self.version)
            .finish()
    }
}

/// The CUDA runtime and driver `options` name, else the default sonames.
pub fn open(options: &PlatformOptions) -> HipResult<Arc<dyn GpuRuntime>> {
    Ok(Arc::new(NvidiaRuntime::open(options)?))
}

/// The CUDA runtime at `cudart` and the driver at `cuda` (paths or sonames; they may name the same
/// library, as the simulated CUDA library does), with the other platform options of the process
/// environment ([`PlatformOptions::from_env`]).
pub fn open_libraries(cudart: &str, cuda: &str) -> HipResult<Arc<dyn GpuRuntime>> {
    Ok(Arc::new(NvidiaRuntime::load(
        cudart,
        cuda,
        &PlatformOptions::from_env(),
    )?))
}

impl NvidiaRuntime {
    /// Load the runtime `options` name ([`PlatformOptions::cudart_library`], from
    /// [`RUNTIME_LIBRARY_ENV`]), else the first of [`DEFAULT_RUNTIME_LIBRARIES`] that loads, and
    /// the driver they name ([`PlatformOptions::cuda_library`], from [`DRIVER_LIBRARY_ENV`]), else
    /// [`DEFAULT_DRIVER_LIBRARY`]. A library that loads but lacks a symbol is an error; the next
    /// name is not tried, because a broken install should be reported, not papered over.
    pub fn open(options: &PlatformOptions) -> HipResult<Self> {
        let (runtime_lib, runtime_name) = match &options.cudart_library {
            Some(name) => (dlopen(name)?, name.clone()),
            None => {
                let (lib, name) = dlopen_first(&DEFAULT_RUNTIME_LIBRARIES)?;
                (lib, name.to_string())
            }
        };
        let driver_name = options
            .cuda_library
            .clone()
            .unwrap_or_else(|| DEFAULT_DRIVER_LIBRARY.to_string());
        let driver_lib = dlopen(&driver_name)?;
        Self::from_libraries(
            runtime_lib,
            &runtime_name,
            driver_lib,
            &driver_name,
            options,
        )
    }

    /// Load the CUDA runtime at `cudart` and the driver at `cuda`; the library paths of `options`
    /// are not used, its other settings are.
    pub fn load(cudart: &str, cuda: &str, options: &PlatformOptions) -> HipResult<Self> {
        let runtime_lib = dlopen(cudart)?;
        let driver_lib = dlopen(cuda)?;
        Self::from_libraries(runtime_lib, cudart, driver_lib, cuda, options)
    }

    fn from_libraries(
        runtime_lib: Library,
        runtime_name: &str,
        driver_lib: Library,
        driver_name: &str,
        options: &PlatformOptions,
    ) -> HipResult<Self> {
        let rt = RuntimeApi::resolve(&runtime_lib, runtime_name)?;
        let drv = DriverApi::resolve(&driver_lib, driver_name)?;
        let (rc, version) = rt.common.runtime_version();
        let runtime = NvidiaRuntime {
            rt,
            drv,
            version,
            runtime_library: runtime_name.to_string(),
            driver_library: driver_name.to_string(),
            driver_init: OnceLock::new(),
            devices: OnceLock::new(),
            primary_contexts: PrimaryContexts::new(drv),
            cufile_force: options.cufile_force,
            _runtime_lib: runtime_lib,
            _driver_lib: driver_lib,
        };
        runtime.check("cudaRuntimeGetVersion", rc)?;
        Ok(runtime)
    }

    /// The CUDA runtime version (`cudaRuntimeGetVersion`, e.g. 13000 for CUDA 13.0).
    pub fn runtime_version(&self) -> i32 {
        self.version
    }

    /// The CUDA version the installed driver supports (`cudaDriverGetVersion`; 0 without a driver).
    pub fn driver_version(&self) -> HipResult<i32> {
        let (rc, v) = self.rt.driver_version();
        self.check("cudaDriverGetVersion", rc)?;
        Ok(v)
    }

    /// The driver API's own version answer (`cuDriverGetVersion`).
    pub fn driver_api_version(&self) -> HipResult<i32> {
        self.drv.version().map_err(driver_failed)
    }

    /// The device count, asked of the runtime once.
    pub(super) fn cached_device_count(&self) -> HipResult<i32> {
        if let Some(n) = self.devices.get() {
            return Ok(*n);
        }
        let n = self.device_count()?;
        Ok(*self.devices.get_or_init(|| n))
    }
}

impl LoadedRuntime for NvidiaRuntime {
    fn common(&self) -> &CommonApi {
        &self.rt.common
    }

    fn check(&self, call: &'static str, rc: i32) -> HipResult<()> {
        NvidiaRuntime::check(self, call, rc)
    }

    fn runtime_info(&self) -> RuntimeInfo {
        RuntimeInfo {
            platform: Platform::Nvidia,
            runtime_version: self.version,
            library: if self.runtime_library == self.driver_library {
                self.runtime_library.clone()
            } else {
                format!("{}, {}", self.runtime_library, self.driver_library)
            },
        }
    }

    fn describe_pointer(&self, ptr: usize) -> HipResult<PointerInfo> {
        self.query_pointer(ptr)
    }

    /// GPUDirect Storage through cuFile, only where the nvidia-fs driver is loaded (see
    /// [`crate::p2p::cufile`]): without it cuFile is one more staged engine, and ours is faster.
    fn p2p_driver(&self) -> Option<Arc<dyn crate::P2pDriver>> {
        crate::p2p::cufile::cufile_driver(self.cufile_force)
    }

    fn own_context_create(&self, device: i32) -> HipResult<Option<ContextHandle>> {
        self.create_own_context(device)
    }

    fn offers_own_contexts(&self) -> bool {
        self.drv.offers_own_contexts()
    }

    fn in_own_context(
        &self,
        ctx: LiveContext<'_>,
        f: &mut dyn FnMut() -> HipResult<()>,
    ) -> HipResult<()> {
        // The CUDA runtime's calls run in the context current on the thread.
        let _current = self.enter_live_context(ctx)?;
        f()
    }

    fn own_context_destroy(&self, ctx: RetiredContext) -> HipResult<()> {
        self.destroy_own_context(ctx)
    }

    fn device_of_stream(&self, stream: LiveStream<'_>) -> HipResult<i32> {
        self.stream_device_of(stream)
    }

    /// Never: a stream held by a value wait blocks CUDA work it cannot see is unrelated. CUDA
    /// does not know what a value wait waits for and may queue other streams' work behind the
    /// waiting one (its documentation warns that work ordered by these waits must also be ordered
    /// by CUDA-visible dependencies). Holding an application's stream this way while the
    /// library's own streams must copy the op's bytes deadlocked on the H200: a 4 GiB read as
    /// 64 MiB stream-ordered ops never finished with value waits, and finished with host-function
    /// holds; a stream held by a value wait also stalled copies queued on forty other streams.
    /// The wait itself works ([`NvidiaRuntime::stream_memops_on`] says where), for callers that
    /// order everything behind it themselves.
    fn memops(&self, _device: i32) -> bool {
        false
    }

    fn wait_value(
        &self,
        stream: LiveStream<'_>,
        word: MappedWord<'_>,
        value: u32,
    ) -> HipResult<()> {
        self.queue_stream_memop(StreamMemop::Wait, stream, word, value)
    }

    /// Never, for the same reason as [`LoadedRuntime::memops`]: with each stream-ordered op's
    /// place marked by a value write ahead of its host-function hold, `hipfile bench --only
    /// async` (an 8 GiB file as 64 MiB ops on 1 and 4 streams) had not finished after almost
    /// four minutes on the H100 (2026-12-06); with an event recorded per op, as this platform
    /// marks them, the phase runs at the figures the README gives. The write itself works
    /// ([`NvidiaRuntime::stream_writes_on`] says where), for callers that order everything
    /// behind it themselves.
    fn writes(&self, _device: i32) -> bool {
        false
    }

    fn write_value(
        &self,
        stream: LiveStream<'_>,
        word: MappedWord<'_>,
        value: u32,
    ) -> HipResult<()> {
        self.queue_stream_memop(StreamMemop::Write, stream, word, value)
    }

    /// Work on memory of another device switches to that device for the call and back.
    fn enter_device_of(&self, ptr: usize) -> HipResult<Option<DeviceGuard<'_>>> {
        self.enter_owning_device(ptr)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::HipError;

    #[test]
    fn libraries_that_are_not_there_are_load_errors() {
        assert!(matches!(
            NvidiaRuntime::load(
                "/nonexistent/libcudart.so.13",
                "/nonexistent/libcuda.so.1",
                &PlatformOptions::default()
            ),
            Err(HipError::Load { .. })
        ));
    }
}
