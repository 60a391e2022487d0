//! # hipfile-hip: the GPU runtime boundary of hipfile-rs
//!
//! Everything hipfile-rs asks of a GPU goes through one trait, [`GpuRuntime`]: device selection,
//! pointer queries, pinned host memory, synchronous and asynchronous copies, streams, events and
//! host functions. This crate is mechanism only: it does what it is told and reports failures as
//! [`HipError`] carrying a HIP error number; deciding what to do about them is `hipfile-core`'s job.
//!
//! Platforms:
//! - **amd**: the HIP runtime (`libamdhip64.so.7/.6/.5`, or the path in `HIPFILE_HIP_LIBRARY`)
//!   loaded with `libloading` at run time; every symbol is resolved at load and a missing one is an
//!   error. ROCm 6 renumbered `hipMemoryType`; answers are decoded by `hipRuntimeGetVersion`.
//! - **nvidia**: HIP semantics over the CUDA runtime (`libcudart.so.13/.12`, or
//!   `HIPFILE_CUDART_LIBRARY`) and driver (`libcuda.so.1`, or `HIPFILE_CUDA_LIBRARY`), loaded the
//!   same way; CUDA errors are mapped to HIP error numbers in one table ([`nvidia::hip_code`]).
//! - **sim**: a simulated GPU in host memory ([`sim::SimRuntime`]), a real implementation that
//!   makes the whole library testable on a machine without a GPU.
//!
//! Which platform opens, from which libraries, is decided by a [`PlatformOptions`] value that
//! [`open_default`] and [`open_platform`] take: plain data, read from the process environment in
//! one place ([`PlatformOptions::from_env`]) or built from any lookup
//! ([`PlatformOptions::from_lookup`]).
//!
//! Direct IO between storage and GPU memory goes through a [`P2pDriver`] that a runtime offers
//! with [`GpuRuntime::p2p`]: AMD's `hipAmdFileRead/Write` (reached through `hipGetProcAddress`),
//! NVIDIA's cuFile ([`p2p::cufile`], offered only with the nvidia-fs kernel driver), and the sim's
//! O_DIRECT into simulated device memory, with scriptable faults.
//!
//! Device memory that Rust owns is a [`DeviceBuffer`], freed on drop. IO requests name device
//! memory through borrowed views, [`DeviceSlice`] (shared) and [`DeviceSliceMut`] (exclusive): an
//! address range with a lifetime, nothing more. Memory allocated elsewhere (a framework's tensor)
//! enters through their `unsafe` `from_raw_parts` constructors.
//!
//! What the layers above hand to the engines is a [`DeviceRange`]: device memory the runtime's
//! pointer query vouched for (device or managed memory, inside one allocation), with bounded
//! operations (synchronous copies, the P2P driver's reads and writes). The staged engine's
//! asynchronous copies go through a [`StagingLane`], which owns its pinned halves, stream and
//! events and never hands out a half with a copy in flight. With these two, a backend needs no
//! `unsafe`: the proofs are made once, here.
//!
//! Host memory (pinned, registered, or pageable memory the runtime does not know) is a
//! [`HostRange`], a type of its own rather than a wider [`DeviceRange`]: nothing vouches for
//! pageable memory's extent, so its only operations ([`HostRange::read_from`],
//! [`HostRange::write_to`]) hand the raw address to the kernel (`pread`/`pwrite`), which checks
//! every page (a bad address is `EFAULT`, never a fault in the library), while every operation of
//! a device range goes through the GPU runtime. A request carries either as one [`IoMemory`], so
//! the request stays one type and each engine asks for the kind it serves.
//!
//! Stream-ordered IO holds an application's stream until the library has done its part:
//! [`StreamRef`] names a stream the caller vouches for, [`HostFlags`] are words of host-mapped
//! pinned memory a stream can wait for (by a stream memory operation, or a polling host function
//! where the device has none, [`Hold`]), and engines serving held streams use streams that are not
//! ordered with the legacy default stream ([`StreamOrder::Independent`]). The simulator models the
//! legacy default stream faithfully, so code that would deadlock on a GPU deadlocks in its tests.
//!
//! Nothing here links a GPU runtime, so every build works on a machine without ROCm or CUDA. All
//! of hipfile-rs's GPU FFI and the `unsafe` that goes with it live in this crate, with the kernel
//! calls `rustix` lacks that the engines need ([`os::cached_pages`], `cachestat(2)`, and the rest
//! of [`os`]).
//!
//! ## Which module owns what
//!
//! | module | owns |
//! | --- | --- |
//! | `runtime` | the boundary's contracts: [`GpuRuntime`] and [`P2pDriver`], the handles, and the RAII types built on them ([`DeviceBuffer`], [`PinnedBuffer`], [`OwnedStream`], [`OwnedEvent`], [`OwnedContext`], [`DeviceGuard`]) |
//! | `error`, `info` | [`HipError`] and HIP's error numbers; [`Platform`], the name every layer uses, and what a runtime answers about itself and a pointer ([`RuntimeInfo`], [`PointerInfo`]) |
//! | `options`, `platform` | [`PlatformOptions`] (the one reader of the environment) and opening a platform from them |
//! | [`amd`], [`nvidia`] | what the HIP and CUDA answers mean: memory-type numbering, CUDA errors in HIP's terms, contexts, devices of streams |
//! | `ffi` | every call into C: loading libraries, the runtime API HIP and CUDA share (`ffi::runtime_api`), AMD's own calls and the KFD driver (`ffi::hip`), CUDA's runtime, driver and cuFile (`ffi::cuda`), the kernel (`ffi::os`) |
//! | [`p2p`], `transfer` | direct IO: the drivers offered ([`p2p::cufile`]) and what every driver shares |
//! | `vouched` | stream-ordered IO's pieces ([`StreamRef`], [`HostFlags`], [`Hold`]) and every place a safe type discharges an `unsafe` contract of the boundary; below it, the safe types whose fields those proofs rely on, so that no module outside `vouched` can touch them |
//! | `vouched::slice`, `vouched::device_range` | views of device memory: [`DeviceSlice`], [`DeviceSliceMut`], [`DeviceRange`] |
//! | `vouched::host_range` | host memory named by address ([`HostRange`]) and a request's memory of either kind ([`IoMemory`]) |
//! | `vouched::staging`, `vouched::file_pins`, [`replay`] | the staged engine's lane ([`StagingLane`]), pinned page-cache ranges ([`PinnedFileRange`]), the stream-ordered reader ([`HostFunctionReader`]) |
//! | [`os`] | what the library asks of the kernel beyond `rustix` (its raw side, the fork hooks of [`os::ForkReleased`] included, is `ffi::os`) |
//! | [`sim`] | the simulated GPU and its C ABI for the simulated libraries |
//!
//! ## Where `unsafe` lives
//!
//! - `ffi/`: raw calls. Each is wrapped in a typed operation, safe where its arguments are plain
//!   values or addresses only looked up; where C trusts a handle or an address, the operation takes
//!   a vouched value (`LiveStream`, `MappedWord`, `LiveContext`, `RetiredContext`) that only an
//!   `unsafe` [`GpuRuntime`] method makes, from its caller's contract. The platforms ([`amd`],
//!   [`nvidia`]) therefore implement their part of [`GpuRuntime`] without `unsafe`.
//! - `runtime`: the contracts themselves (the `unsafe fn`s of [`GpuRuntime`] and [`P2pDriver`],
//!   each with its `# Safety`, and the handles' `from_raw`), and the RAII types that keep them.
//! - `vouched`: the safe types' side of those contracts, each `impl` block with the invariant that
//!   makes its calls sound (the pointer query behind a [`DeviceRange`], a [`StagingLane`]'s pending
//!   halves, a [`PinnedFileRange`]'s mapping, a [`StreamRef`]'s borrow), and the public `unsafe`
//!   entry points that take a caller's word ([`DeviceSlice::from_raw_parts`],
//!   [`StreamRef::from_raw`], [`nvidia::NvidiaRuntime::stream_device_through_driver`]). The
//!   types' fields are private to `vouched` (its child modules declare them `pub(super)`), so
//!   those invariants are kept by the code of one module tree, not the whole crate.
//! - [`sim`], `contract` and `faults` (the simulator, the checks every runtime must pass, the
//!   scripted-failure decorator): implementations and callers of the raw contract itself.
//!
//! ```
//! use std::sync::Arc;
//! use hipfile_hip::{DeviceBuffer, GpuRuntime, MemoryKind, sim::SimRuntime};
//!
//! let rt: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
//! let mut buf = DeviceBuffer::new(rt.clone(), 4096)?;
//! buf.write_at(0, b"hello")?;
//! assert_eq!(rt.pointer_info(buf.ptr() + 1)?.kind, MemoryKind::Device);
//! # Ok::<(), hipfile_hip::HipError>(())
//! ```

pub mod amd;
#[cfg(feature = "contract")]
pub mod contract;
mod error;
#[cfg(feature = "faults")]
pub mod faults;
mod ffi;
mod info;
pub mod nvidia;
mod options;
pub mod os;
pub mod p2p;
mod platform;
mod runtime;
pub mod sim;
mod transfer;
mod vouched;

pub use amd::open_library as amd_open_library;
pub use error::{HipError, HipErrorCode, HipResult, LoadRefusal, PassedOver};
pub use nvidia::open_libraries as nvidia_open_libraries;
pub use options::{parse_platform, PlatformChoice, PlatformOptions, PLATFORM_ENV};
pub use p2p::{P2pDriver, MAX_P2P_TRANSFER};
pub use platform::{open_default, open_platform};
pub use runtime::{
    ContextHandle, DeviceBuffer, DeviceGuard, EventHandle, GpuRuntime, HostFn, MemoryKind,
    OwnedContext, OwnedEvent, OwnedStream, PinnedBuffer, Platform, PointerInfo, RuntimeInfo,
    StreamHandle, StreamOrder,
};
pub use vouched::device_range::{DeviceRange, Refusal};
pub use vouched::file_pins::{FileMapping, PinnedFileRange};
pub use vouched::host_range::{is_host, HostRange, IoMemory, HOST_DEVICE};
pub use vouched::replay::{self, HostFunctionReader};
pub use vouched::slice::{DeviceSlice, DeviceSliceMut};
pub use vouched::staging::{EventWait, LaneError, StagingLane};
pub use vouched::{Hold, HostFlags, StreamRef};
