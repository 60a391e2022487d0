//! # hipfile-backend-bounce: a backend written outside hipfile-rs
//!
//! This crate is what a third party writes to add a backend to hipfile-rs: it depends only on
//! `hipfile-core` (the [`Backend`] trait, the request, the registry) and `hipfile-hip` (device
//! memory as a checked [`hipfile_hip::DeviceRange`]), has no `unsafe` code, registers itself
//! through `inventory`, and passes the shared conformance suite (`tests/conformance.rs`). The
//! walk-through in `hipfile-core`'s crate docs ("Writing a backend") explains each piece.
//!
//! ## The backend
//!
//! `bounce` is the simplest staged engine: each request moves through one plain (pageable) host
//! buffer, one chunk at a time, on the thread that submits it. A read is `pread` into the buffer,
//! then a copy to device memory; a write is a copy from device memory, then `pwrite`. It holds no
//! pinned memory, starts no thread and keeps nothing between requests, which makes it
//!
//! - the staged path of a build that leaves the `fallback` out (the facade built with
//!   `--no-default-features --features fastpath`): requests the fastpath declines (unaligned,
//!   unsupported filesystem, appending writes) still run;
//! - a low-memory engine: one chunk (`max_direct_io_size_kb`) per request in flight, nothing
//!   while idle;
//! - a reference to compare a faster engine with: `HIPFILE_BACKENDS=bounce` sends every request
//!   to it.
//!
//! ## Contract
//!
//! - Declines host memory (`Decline::HostMemory`: the `host` engine serves it).
//! - Accepts every request while compat mode is allowed, as the fallback does (a staged path is
//!   what compat mode means), and declines with [`Decline::CompatModeDisallowed`] otherwise.
//! - Reads return the bytes read, fewer than asked only at end of file (a file that reports size
//!   0, as procfs and sysfs files do, is read until `pread` finds its end). Writes return the full
//!   size or fail.
//! - File IO goes through the driver's [`FileIo`] with [`pread_full`] and [`pwrite_full`]: EINTR
//!   is retried, short transfers are continued, a write that makes no progress is ENOSPC.
//! - A failure reports the bytes that reached their destination in whole chunks before it. The
//!   chunk that failed is not counted: a read copied none of it to device memory, and a write may
//!   have put part of it in the file (what the count leaves out is at most one chunk, never bytes
//!   that did not move).
//! - Appending writes (`O_APPEND` descriptor, [`hipfile_core::OwnedRequest::append`]) are
//!   honoured: written with [`pwrite_append_full`] under the file's append lock, so each lands
//!   whole and in order.
//! - Every request, queued ([`Submit::Queue`]) or waited for, runs inside [`Backend::submit`] and
//!   answers [`Completion::ready`]: the backend has no thread to hand work to.
//!
//! ## Priority
//!
//! [`PRIORITY`] is half of [`priority::FALLBACK`], below both built-in backends, on purpose:
//! where the fallback is linked, its pipelined engine through pinned memory serves every request
//! this one could, faster, so `bounce` never takes a request from it; it serves where the
//! fallback is absent, or when `HIPFILE_BACKENDS` names it.
//!
//! ## Linking it into a program
//!
//! The crate registers itself with `hipfile_core::register_backend!`, which declares its [`NAME`],
//! [`DESCRIPTOR`] and [`register`] and submits the descriptor to `inventory`, and the facade
//! (`hipfile`) adds every descriptor `inventory` collected to its built-in backends. But the
//! linker leaves out a crate that nothing in the program names, and its `inventory` entry with it:
//! a program that wants the backend names the crate once,
//!
//! ```
//! use hipfile_backend_bounce as _;
//! ```
//!
//! or registers it explicitly with [`register`] when it builds its own registry:
//!
//! ```
//! use std::sync::Arc;
//! use hipfile_core::{Driver, DriverOptions, IoCall, IoOp, RegistryBuilder};
//! use hipfile_hip::{sim::SimRuntime, DeviceBuffer, GpuRuntime};
//!
//! let gpu: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
//! let mut backends = RegistryBuilder::new();
//! hipfile_backend_bounce::register(&mut backends)?;
//! let driver = Driver::new(DriverOptions {
//!     backends: Some(backends),
//!     selection: None,
//!     ..DriverOptions::with_runtime(Arc::clone(&gpu))
//! });
//! driver.open()?;
//!
//! let dir = tempfile::tempdir().unwrap();
//! std::fs::write(dir.path().join("data"), b"hello, device").unwrap();
//! let file = std::fs::File::open(dir.path().join("data")).unwrap();
//! let handle = driver.handle_register(std::os::fd::AsRawFd::as_raw_fd(&file))?;
//! let buf = DeviceBuffer::new(gpu, 4096).unwrap();
//! let read = driver.io(IoCall {
//!     op: IoOp::Read,
//!     handle,
//!     buffer: buf.ptr(),
//!     size: 4096,
//!     file_offset: 7,
//!     buffer_offset: 0,
//! })?;
//! assert_eq!(read, 6, "short at the end of the file");
//! assert_eq!(buf.to_vec().unwrap()[..6], *b"device");
//! driver.handle_deregister(handle)?;
//! driver.close()?;
//! # Ok::<(), hipfile_core::Error>(())
//! ```

#![forbid(unsafe_code)]

use std::sync::Arc;

use hipfile_core::{
    pread_full, priority, pwrite_append_full, pwrite_full, Backend, BackendContext, Completion,
    Decline, Error, ErrorKind, FileIo, IoFailure, IoOp, IoOutcome, IoPath, IoRequest, Submit,
};
use hipfile_hip::DeviceRange;

/// Below both built-in backends (see the crate docs): half of [`priority::FALLBACK`].
pub const PRIORITY: i32 = priority::FALLBACK / 2;

hipfile_core::register_backend! {
    name: "bounce",
    priority: PRIORITY,
    path: IoPath::Staged,
    init: |ctx| Ok(Arc::new(Bounce::new(ctx))),
}

/// The engine: the driver's file IO primitives, and nothing else.
#[derive(Debug)]
pub struct Bounce {
    io: Arc<dyn FileIo>,
}

impl Bounce {
    /// The engine for an opening driver.
    pub fn new(ctx: &BackendContext) -> Self {
        Bounce {
            io: Arc::clone(&ctx.io),
        }
    }

    /// Run `req` to its end on the calling thread, through a host buffer of at most one chunk
    /// (`max_direct_io_size_kb`).
    pub fn run(&self, req: &IoRequest<'_>) -> IoOutcome {
        let chunk = req.settings.max_direct_io_bytes().min(req.size());
        let mut buf = vec![0u8; chunk];
        match req.op {
            IoOp::Read => self.read(req, &mut buf),
            IoOp::Write if req.append => {
                // Appending requests to one file run one after the other, each whole.
                let _appending = req.file.append_lock();
                self.write(req, &mut buf)
            }
            IoOp::Write => self.write(req, &mut buf),
        }
    }

    fn read(&self, req: &IoRequest<'_>, buf: &mut [u8]) -> IoOutcome {
        let fd = req.file.buffered_fd();
        let size = req.size();
        let mut done = 0;
        while done < size {
            let want = buf.len().min(size - done);
            let offset = req.file_offset + done as u64;
            let got = pread_full(&*self.io, fd, &mut buf[..want], offset).map_err(|e| {
                IoFailure::new(
                    Error::from_io(&e, format!("reading {want} bytes at file offset {offset}")),
                    done,
                )
            })?;
            if got > 0 {
                device_part(req, done, got)?
                    .copy_from_host(&buf[..got])
                    .map_err(|e| {
                        IoFailure::new(
                            Error::hip(&e, format!("copying {got} bytes to device memory")),
                            done,
                        )
                    })?;
                done += got;
            }
            if got < want {
                // End of file.
                break;
            }
        }
        Ok(done)
    }

    fn write(&self, req: &IoRequest<'_>, buf: &mut [u8]) -> IoOutcome {
        let fd = req.file.buffered_fd();
        let size = req.size();
        let mut done = 0;
        while done < size {
            let n = buf.len().min(size - done);
            device_part(req, done, n)?
                .copy_to_host(&mut buf[..n])
                .map_err(|e| {
                    IoFailure::new(
                        Error::hip(&e, format!("copying {n} bytes from device memory")),
                        done,
                    )
                })?;
            let offset = req.file_offset + done as u64;
            let written = if req.append {
                pwrite_append_full(&*self.io, fd, &buf[..n])
            } else {
                pwrite_full(&*self.io, fd, &buf[..n], offset)
            };
            written.map_err(|e| {
                let at = if req.append {
                    "at the end of the file".to_string()
                } else {
                    format!("at file offset {offset}")
                };
                IoFailure::new(Error::from_io(&e, format!("writing {n} bytes {at}")), done)
            })?;
            done += n;
        }
        Ok(done)
    }
}

/// The `len` bytes of the request's memory at `offset`. The callers stay inside the request,
/// so a refusal would be this crate's bug, reported as an internal error, not a panic.
fn device_part(
    req: &IoRequest<'_>,
    offset: usize,
    len: usize,
) -> std::result::Result<DeviceRange, IoFailure> {
    req.memory
        .device_range()
        .and_then(|m| m.slice(offset, len))
        .ok_or_else(|| {
            IoFailure::new(
                Error::new(
                    ErrorKind::InternalError,
                    format!(
                        "{len} bytes at {offset} lie outside the request's {} bytes",
                        req.size()
                    ),
                ),
                offset,
            )
        })
}

impl Backend for Bounce {
    fn name(&self) -> &'static str {
        NAME
    }

    fn accepts(&self, req: &IoRequest<'_>) -> std::result::Result<(), Decline> {
        // Host memory (where the settings admit it) is the `host` backend's.
        if req.memory.device_range().is_none() {
            return Err(Decline::HostMemory);
        }
        if req.compat.allowed {
            Ok(())
        } else {
            Err(Decline::CompatModeDisallowed)
        }
    }

    /// Runs the request inside `submit` whichever way it is submitted: there is no thread of
    /// the backend's own to hand it to.
    fn submit(&self, req: &IoRequest<'_>, _how: Submit) -> Completion {
        Completion::ready(self.run(req))
    }
}
