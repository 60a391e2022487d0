//! The C ABI of `libhipfile.so`: upstream hipFile's functions, names and return conventions.
//!
//! Each function converts its C arguments, calls the process-wide core driver and converts the
//! answer back; nothing else happens here. Conventions, one place each (module `conventions`):
//! - `hipFileError_t` pairs: [`pair`];
//! - `ssize_t` IO results: bytes, `-1` with `errno` for OS failures (and for IO on a closed
//!   driver, as cuFile), `-hipError_t` for GPU runtime failures, else `-hipFileOpError_t`: [`ssize`];
//! - the kind-to-code table: [`op_code`], a lookup in hipfile-core's table of error codes, from
//!   which the `hipFileOpError_t` constants and [`hipFileGetOpErrorString`]'s texts come too.
//!
//! Two C front doors share these bodies: this crate's `libhipfile.so` and hipfile-cufile's
//! `libcufile.so.0` (cuFile's names). A body is a `pub fn` generic over a [`Door`] (the
//! process-wide driver it talks to, its status pair, how an IO result reports a GPU failure and
//! which descriptor types it registers); the `hipFile*` entry points call it with [`HipFile`],
//! cuFile's with its own door. What cuFile lays out differently converts in one place on its
//! side (the driver properties); everything else, checks and tables included, is here once.
//!
//! Every entry point is one call of a panic guard (`guarded_pair`, `guarded_ssize`,
//! `guarded_void`, or `guarded` with its own answer), the C ABI's only `catch_unwind`: a panic
//! never crosses into C; it becomes `hipFileInternalError` (or `-hipFileInternalError`, or nothing
//! for `void` functions). `cargo xtask tidy` checks the shape of every `extern "C"` function.
//!
//! The entry points, by subject: registration of files and buffers and the IO between them
//! (module `registration`); the driver's life, version and properties (`driver`); parameters
//! (`parameters`); statistics (`statistics`); batch IO (`batch`); stream-ordered IO and stream
//! registration (`stream`); the hipfile-rs extensions of the IO policy and the direct
//! mechanisms (`policy`). `types` mirrors the header's types.

#![allow(non_snake_case, non_upper_case_globals)] // the exported names and constants are upstream's
#![allow(clippy::missing_safety_doc)] // the C header documents the contract of every function

mod batch;
mod conventions;
mod driver;
mod parameters;
mod policy;
mod registration;
mod statistics;
mod stream;
mod types;

pub use batch::*;
pub use conventions::*;
pub use driver::*;
pub use parameters::*;
pub use policy::*;
pub use registration::*;
pub use statistics::*;
pub use stream::*;
pub use types::*;
