//! Deterministic, scripted fault injection, and the leak checks that go with it.
//!
//! - [`ScriptedIo`] wraps a [`hipfile_core::FileIo`]: "the 3rd pread fails with EIO", "the 2nd
//!   pwrite is short", "every pread from the 5th on is interrupted".
//! - [`ScriptedRuntime`] wraps a [`hipfile_hip::GpuRuntime`]: "the 2nd copy to the device fails",
//!   "pinning fails".
//! - [`LeakSnapshot`] records descriptors and simulated allocations before a test and compares
//!   after it.
//!
//! Both decorators count every call and log every fault that fired, so a test can assert that
//! the fault it scripted really happened (a fault that never fires proves nothing).

mod io;
mod leaks;

pub use hipfile_hip::faults::{FiredRuntimeFault, RuntimeOp, ScriptedRuntime, Trigger};
pub use io::{FileOp, FiredIoFault, IoFault, ScriptedIo};
pub use leaks::{open_fd_count, open_fds_for, LeakSnapshot};
/// Error numbers for scripts (`Errno::IO`, `Errno::NOSPC`, `Errno::INTR`, ...).
pub use rustix::io::Errno;
