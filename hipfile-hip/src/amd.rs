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
//! Each call is capped at [`crate::MAX_P2P_TRANSFER`]; `hipInit(0)` runs once on each calling thread
//! before its first call; a non-zero KFD `status` is the errno of the failure, and a failing
//! `hipError_t` with no status becomes ENODEV when it says the device cannot do it (so the request
//! fails over) and EIO otherwise.
//!
//! The function pointers in the table are only valid while the `Library` they came from lives, so
//! both live in one struct; beyond that the library is opened `RTLD_NODELETE` and is never
//! unmapped once loaded, because a GPU runtime's threads and exit handlers outlive any handle.

use std::ffi::{c_void, CStr};
use std::fmt;
use std::ptr::NonNull;
use std::sync::Arc;

use libloading::Library;

use crate::error::{HipError, HipErrorCode, HipResult};
use crate::ffi::hip::{HipApi, KfdDriver};
use crate::ffi::runtime_api::{
    dlopen, dlopen_first, exports, CommonApi, LiveStream, LoadedRuntime, MappedWord,
};
use crate::options::PlatformOptions;
use crate::p2p::P2pDriver;
use crate::runtime::{GpuRuntime, MemoryKind, Platform, PointerInfo, RuntimeInfo};

pub use crate::ffi::hip::{AmdFileHandle, AmdFileIoFn};
pub use crate::options::HIP_LIBRARY_ENV as LIBRARY_ENV;

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
    p2p: Option<Arc<KfdDriver>>,
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
        let simulated = exports(&lib, SIMULATED_MARKER);
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
        rt.p2p = KfdDriver::resolve(&rt.api, version).map(Arc::new);
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
        self.api.proc_address(symbol, self.version)
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
        let (rc, base, len) = self.api.address_range(ptr);
        self.check("hipMemGetAddressRange", rc)?;
        Ok((base, len))
    }

    /// [`AmdRuntime::check`] of an optional entry point's return code; `None` (the runtime does
    /// not export `call`) is `hipErrorNotSupported`.
    fn check_exported(&self, call: &'static str, rc: Option<i32>) -> HipResult<()> {
        match rc {
            Some(rc) => self.check(call, rc),
            None => Err(HipError::Call {
                call,
                code: HipErrorCode::NOT_SUPPORTED,
                detail: Some(format!("{} does not export it", self.library_name)),
            }),
        }
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
        let (rc, attr) = self.api.pointer_attributes(ptr);
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

    fn device_of_stream(&self, stream: LiveStream<'_>) -> HipResult<i32> {
        let answer = self.api.stream_get_device(stream);
        self.check_exported("hipStreamGetDevice", answer.map(|(rc, _)| rc))?;
        Ok(answer.map_or(-1, |(_, device)| device))
    }

    /// `hipStreamWaitValue32` and `hipStreamWriteValue32` are exported and the device says it can
    /// use stream waits.
    fn memops(&self, device: i32) -> bool {
        if !self.api.exports_stream_memops() {
            return false;
        }
        let (rc, can) = self
            .api
            .device_attribute(DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE, device);
        rc == 0 && can != 0
    }

    fn wait_value(
        &self,
        stream: LiveStream<'_>,
        word: MappedWord<'_>,
        value: u32,
    ) -> HipResult<()> {
        let rc = self.api.stream_wait_value32(stream, word, value);
        self.check_exported("hipStreamWaitValue32", rc)
    }

    /// As [`LoadedRuntime::memops`]: HIP offers the store and the wait together.
    fn writes(&self, device: i32) -> bool {
        self.memops(device)
    }

    fn write_value(
        &self,
        stream: LiveStream<'_>,
        word: MappedWord<'_>,
        value: u32,
    ) -> HipResult<()> {
        let rc = self.api.stream_write_value32(stream, word, value);
        self.check_exported("hipStreamWriteValue32", rc)
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
    fn a_library_that_is_not_there_is_a_load_error() {
        assert!(matches!(
            AmdRuntime::load("/nonexistent/libamdhip64.so"),
            Err(HipError::Load { .. })
        ));
    }
}
