//! The raw layer: every call into C that hipfile-rs makes, and with them the crate's `unsafe`
//! outside the boundary's contracts ([`crate::runtime`]), the safe types' side of them
//! ([`crate::vouched`]) and the simulator.
//!
//! Each module resolves or declares its entry points and wraps each call in a typed operation:
//! safe where the arguments are plain values, out-pointers or addresses only looked up, and taking
//! a vouched value where the C function trusts a handle or an address ([`runtime_api::LiveStream`],
//! [`runtime_api::MappedWord`], [`runtime_api::LiveContext`]): those are made only where an
//! `unsafe` runtime call hands its contract on. The platform modules above ([`crate::amd`],
//! [`crate::nvidia`], [`crate::p2p`], [`crate::os`]) decide what to call and what the answers
//! mean, without `unsafe` of their own.
//!
//! - [`runtime_api`]: loading libraries (`dlopen`, symbols), the runtime API that HIP and the CUDA
//!   runtime share signature for signature, and the one implementation of [`crate::GpuRuntime`]
//!   for both loaded platforms; host functions cross into C through its trampoline.
//! - [`hip`]: what only AMD's HIP runtime has: pointer attributes, address ranges, device
//!   attributes, stream memory operations, `hipGetProcAddress`, and the KFD direct path
//!   (`hipAmdFileRead/Write`) as a [`crate::P2pDriver`].
//! - [`cuda`]: what only NVIDIA's CUDA runtime and driver have (pointer attributes, driver
//!   contexts, stream memory operations), and cuFile as a [`crate::P2pDriver`].
//! - [`own_library`]: `dladdr`, to tell hipfile-rs's own `libcufile.so.0` from NVIDIA's.
//! - [`os`]: the kernel calls `rustix` does not offer: `cachestat(2)`, descriptor state, file
//!   mappings and their residency, peer credentials, the fork hook's descriptor swap.

pub(crate) mod cuda;
pub(crate) mod hip;
pub(crate) mod os;
pub(crate) mod own_library;
pub(crate) mod runtime_api;
