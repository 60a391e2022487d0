//! # hipfile-testkit: the tests every part of hipfile-rs shares
//!
//! hipfile-rs has several engines that move bytes (the staged fallback, the direct fastpath,
//! third-party backends) and one driver that decides which runs. Each engine must be held to the
//! same standard, and the failures that matter (an EIO in the middle of a request, a short
//! write, a signal, a copy the GPU refuses, pinning that fails) must be reproducible on a laptop.
//! This crate is that standard:
//!
//! - [`faults`]: deterministic fault injection by script. [`faults::ScriptedIo`] wraps the
//!   driver's [`hipfile_core::FileIo`] ("the 3rd pread fails with EIO"), and
//!   [`faults::ScriptedRuntime`] wraps a [`hipfile_hip::GpuRuntime`] ("the 2nd copy to the device
//!   fails", "pinning fails"). Both count calls and log what fired. [`faults::LeakSnapshot`]
//!   and [`faults::open_fds_for`] check that nothing (descriptors, pinned buffers, streams) leaks.
//! - [`conformance`]: the suite every backend passes, called from each backend crate's tests:
//!   roundtrip, an unaligned matrix with sentinels on both sides, EOF, holes, zero size, the
//!   `MAX_RW_COUNT` cap, registered and unregistered (also interior) device pointers, parallel
//!   requests, and release of every resource at close.
//! - [`target`] and [`ledger`]: which GPU a test runs on (the simulator, or the machine's GPU
//!   with `HIPFILE_GPU_TESTS=1`), and a record of the tests that used the real GPU or were
//!   skipped, so runners count them apart from plain passes.
//! - [`model`]: a reference model of the registration state machine as upstream hipFile defines
//!   it, with proptest strategies, to drive the real [`hipfile_core::Driver`] in lockstep; and
//!   [`model::api`], the same widened to the C API with file and device contents and batches
//!   (whose entries it judges from the events and bytes they leave), for the random-sequence
//!   test of `libhipfile.so`'s entry points.
//! - [`http_proxy`]: a fault-injecting HTTP/1.1 proxy ([`http_proxy::FaultProxy`]) between a
//!   remote-storage client and a real server (an S3 gateway, nginx): transient statuses, slow
//!   heads and stalled bodies, a flipped byte, connections cut in the middle of a response or an
//!   upload, with counts of the requests it saw, forwarded and faulted.
//! - [`fuzz`]: the bodies of the fuzz targets in `fuzz/` (IO argument validation, chunk and
//!   alignment arithmetic), plain functions that stable tests also run over fixed-seed corpora.
//!
//! ## Contract
//!
//! Everything runs on the simulated GPU ([`hipfile_hip::sim::SimRuntime`]) and in temporary
//! directories, so the whole kit works on a machine without a GPU, in parallel test threads.
//! Scripts are deterministic: calls are numbered from 1 per kind with atomic counters, the first
//! matching rule applies. Conformance cases build their own driver each and report failures as
//! values naming the case and the first differing byte; [`conformance::Report::assert_passed`]
//! turns them into one panic for a `#[test]`.
//!
//! The crate has no `unsafe` code. [`faults::ScriptedRuntime`] implements
//! [`hipfile_hip::GpuRuntime`], whose copy entry points are `unsafe fn`, so it is defined in
//! `hipfile-hip` (where the GPU boundary's `unsafe` lives) and re-exported here.
//!
//! ## Example
//!
//! ```
//! use std::sync::Arc;
//! use hipfile_hip::{sim::SimRuntime, GpuRuntime, HipErrorCode, DeviceBuffer};
//! use hipfile_testkit::faults::{RuntimeOp, ScriptedRuntime};
//!
//! let rt = Arc::new(ScriptedRuntime::new(Arc::new(SimRuntime::default()))
//!     .fail_copy_to_device(2, HipErrorCode::ILLEGAL_ADDRESS));
//! let mut buf = DeviceBuffer::new(rt.clone(), 4096)?;
//! buf.write_at(0, b"first")?;
//! assert_eq!(buf.write_at(0, b"second").unwrap_err().code(), HipErrorCode::ILLEGAL_ADDRESS);
//! assert_eq!(rt.calls(RuntimeOp::CopyToDevice), 2);
//! assert_eq!(rt.fired().len(), 1);
//! # Ok::<(), hipfile_hip::HipError>(())
//! ```

#![forbid(unsafe_code)]

pub mod conformance;
pub mod faults;
pub mod fuzz;
pub mod http_proxy;
pub mod ledger;
pub mod model;
pub mod target;
