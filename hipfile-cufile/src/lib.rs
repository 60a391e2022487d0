//! # hipfile-cufile: cuFile's C ABI over hipfile-rs
//!
//! This crate builds `libcufile.so` (SONAME `libcufile.so.0`), a drop-in for NVIDIA's cuFile
//! library: the functions of CUDA 13.0's `cufile.h` (cuFile 1.15.1) with its names, layouts and
//! return conventions, served by the same core and backends as `libhipfile.so`. Programs written
//! for cuFile (KvikIO with compat mode off, torch.cuda.gds, cuda.bindings.cufile, fio's
//! libcufile engine) run on it unchanged, on AMD, NVIDIA and the simulated GPU alike.
//!
//! ## One engine, two doors
//!
//! An entry point converts its arguments and its answer and nothing else. The bodies are the
//! facade's (`hipfile::capi`), generic over a [`Door`](hipfile::capi::Door): this crate's door,
//! [`CuFile`], names the driver the entry points talk to, the status pair ([`CUfileError_t`])
//! and the few answers in which cuFile differs from hipFile. The panic guard, the `ssize_t`
//! convention, the kind-to-code table (cuFile's codes 5001 to 5038 are hipFile's, number for
//! number), the parameter tables (the enumerators match in value and order), batch entry
//! conversion and stream ops are the facade's, so the two C ABIs cannot drift apart.
//!
//! Where cuFile answers differently:
//! - A CUDA (GPU runtime) failure inside `cuFileRead`/`cuFileWrite`, an async op or a batch
//!   entry is `-CU_FILE_CUDA_DRIVER_ERROR`; in a status pair it is `CU_FILE_CUDA_DRIVER_ERROR`
//!   with the runtime's number in `cu_err`. OS failures are `-1` with `errno` (`-errno` in a
//!   batch event), library failures `-CUfileOpError`.
//! - `cuFileHandleRegister` takes `CU_FILE_HANDLE_TYPE_OPAQUE_FD` and, as NVIDIA's library,
//!   registers the descriptor in `handle.fd` for `CU_FILE_HANDLE_TYPE_USERSPACE_FS` too (the
//!   `fs_ops` callbacks are not called); `CU_FILE_HANDLE_TYPE_OPAQUE_WIN32` is
//!   `CU_FILE_IO_NOT_SUPPORTED`, another type `CU_FILE_INVALID_VALUE`.
//! - `cuFileGetVersion` answers 1150 ([`driver::CUFILE_VERSION`]: 1000 x major + 10 x minor,
//!   cuFile 1.15), so KvikIO takes its batch (>= 1060) and stream (>= 1070) APIs.
//! - `CUfileDrvProps_t` keeps cache, pinned and batch sizes in `unsigned int`: the facade's
//!   properties convert into it in one `From` (sizes saturate).
//! - The driver is this library's own ([`door::process_driver`]), opened with host memory
//!   allowed as IO buffers ([`door::door_settings`]), and opened implicitly by
//!   `cuFileHandleRegister` (after its checks) and `cuFileBufRegister` (before them), as cuFile.
//!   The caller's side of host memory is in `cufile.h` ("Host memory": the bytes are the
//!   library's until the call, entry or op is done, a registered buffer stays allocated until
//!   deregistered); hence the entry points that take a buffer (`cuFileRead`, `cuFileWrite`,
//!   `cuFileBufRegister`, the async ops, `cuFileBatchIOSubmit`) are `unsafe` for Rust callers.
//! - cuFile-only calls: `cuFileGetParameterMinMaxValue` (the floors and ceilings the settings'
//!   check enforces), the POSIX pool slab arrays (stored and reported), statistics controls
//!   ([`statistics`]), `cuFileGetBARSizeInKB` ([`device`]), and cuFile 1.16's
//!   `cuFileDriverSetP2PFlags`/`GetP2PFlags` ([`policy`]: per target, mapped onto the core's
//!   direct mechanisms).
//! - The driver reads cuFile's JSON configuration file (`CUFILE_ENV_PATH_JSON`, else
//!   `/etc/cufile.json`; [`door::driver_options`]).
//!
//! Extensions of hipfile-rs, under cuFile's prefix so they never interpose on `libhipfile.so`'s
//! names: `cuFileHandleSetIoPolicy`/`cuFileHandleGetIoPolicy`, a file handle's IO policy (fall
//! back, or direct only and fail closed), as `hipFileHandleSetIoPolicy` ([`policy`]).
//!
//! `cufileop_status_error` is `static inline` in cuFile's header, not a symbol of the library:
//! our header defines it from [`status::STATUS_TEXTS`], the code, name and text of every
//! `CUfileOpError`.
//!
//! ## Exports
//!
//! `libcufile.so` exports the `cuFile*` functions of this crate and nothing else: cuFile 1.15's
//! (CUDA 13.0's header), cuFile 1.16's two P2P flag calls, and the two policy extensions. The crate links
//! the facade's rlib, whose `#[no_mangle]` `hipFile*` entry points rustc would export from any
//! cdylib that links it; in a process that loads `libhipfile.so` too they would interpose on
//! each other. build.rs passes `-Wl,--exclude-libs,ALL`, which makes every symbol that comes from
//! a Rust library archive local even where rustc's version script lists it, so only what this
//! crate defines is exported. The symbols carry no version (rustc's anonymous version script
//! defines none), as NVIDIA's `libcufile.so.0` exports its own. Check with
//! `nm -D --defined-only target/<profile>/libcufile.so` (only `cuFile*`) and
//! `readelf -d target/<profile>/libcufile.so` (SONAME `libcufile.so.0`, no `VERDEF`).
//!
//! ## Recursion
//!
//! On NVIDIA machines with nvidia-fs, hipfile-hip's direct path loads `libcufile.so.0`. With this
//! library on the loader's path that name is this library; hipfile-hip recognises it
//! (`hipfile_hip::p2p::cufile`) and treats the machine as having no GPUDirect Storage, so the
//! fastpath declines instead of calling back into itself.
//!
//! ## Example (on the simulated GPU)
//!
//! The entry points are Rust functions too:
//!
//! ```
//! use cufile::{cuFileDriverClose, cuFileDriverOpen, cuFileGetVersion, cuFileUseCount};
//!
//! std::env::set_var("HIPFILE_PLATFORM", "sim");
//! let mut version = 0;
//! // SAFETY: a live int.
//! assert_eq!(unsafe { cuFileGetVersion(&mut version) }.err, 0);
//! assert_eq!(version, 1150);
//! assert_eq!(cuFileDriverOpen().err, 0);
//! assert_eq!(cuFileUseCount(), 1);
//! assert_eq!(cuFileDriverClose().err, 0);
//! ```

#![allow(non_snake_case)] // the exported names are cuFile's
#![allow(clippy::missing_safety_doc)] // cufile.h documents the contract of every function

pub mod batch;
pub mod device;
pub mod door;
pub mod driver;
pub mod io;
pub mod parameters;
pub mod policy;
pub mod statistics;
pub mod status;
pub mod stream;
pub mod types;

pub use batch::*;
pub use device::*;
pub use door::CuFile;
pub use driver::*;
pub use io::*;
pub use parameters::*;
pub use policy::*;
pub use statistics::*;
pub use stream::*;
pub use types::*;
