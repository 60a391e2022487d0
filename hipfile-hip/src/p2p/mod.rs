//! Direct IO drivers: the kernel path that moves bytes between storage and GPU memory with no CPU
//! copy (AMD's KFD through `hipAmdFileRead/Write`, NVIDIA's GPUDirect Storage through cuFile, and
//! the simulator's O_DIRECT straight into simulated device memory).
//!
//! A [`P2pDriver`] is mechanism only: it issues one transfer on an O_DIRECT descriptor and reports
//! the bytes moved or an OS error with its errno. Whether a request may take this path (alignment,
//! filesystem, memory kind, compat mode) is decided by the fastpath backend before it calls here;
//! what to do with a failure (ENODEV and EREMOTEIO fail over) is decided by the dispatcher.

pub mod cufile;

pub use crate::runtime::P2pDriver;
pub(crate) use crate::transfer::errno_error;
pub use crate::transfer::MAX_P2P_TRANSFER;
