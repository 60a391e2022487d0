//! `VecCopyBackend`: the simplest correct backend there is, for testing the test kit.
//!
//! It stages every request through a `Vec` with the runtime's synchronous copies and the
//! driver's `FileIo` (so scripted faults reach it), one chunk of `max_direct_io_bytes` at a time.

use std::sync::Arc;

use hipfile_core::{
    pread_full, pwrite_full, Backend, BackendContext, BackendDescriptor, Decline, Error, FileIo,
    IoFailure, IoOp, IoRequest,
};
use hipfile_hip::GpuRuntime;

/// Name of the in-test backend.
pub const VEC_COPY: &str = "vec-copy";

/// The descriptor to put in a registry.
pub fn vec_copy_descriptor() -> BackendDescriptor {
    BackendDescriptor {
        name: VEC_COPY,
        priority: 1,
        init: vec_copy_init,
    }
}

/// A deliberately wrong variant: every read also writes one byte past its range, so the
/// conformance suite's sentinels have something to catch.
pub fn overrunning_descriptor() -> BackendDescriptor {
    BackendDescriptor {
        name: "overrun",
        priority: 1,
        init: overrun_init,
    }
}

fn vec_copy_init(ctx: &BackendContext) -> hipfile_core::Result<Arc<dyn Backend>> {
    Ok(Arc::new(VecCopyBackend {
        runtime: Arc::clone(&ctx.runtime),
        io: Arc::clone(&ctx.io),
        name: VEC_COPY,
        overrun: false,
    }))
}

fn overrun_init(ctx: &BackendContext) -> hipfile_core::Result<Arc<dyn Backend>> {
    Ok(Arc::new(VecCopyBackend {
        runtime: Arc::clone(&ctx.runtime),
        io: Arc::clone(&ctx.io),
        name: "overrun",
        overrun: true,
    }))
}

/// Stages through a `Vec`.
#[derive(Debug)]
pub struct VecCopyBackend {
    runtime: Arc<dyn GpuRuntime>,
    io: Arc<dyn FileIo>,
    name: &'static str,
    overrun: bool,
}

impl Backend for VecCopyBackend {
    fn name(&self) -> &'static str {
        self.name
    }

    fn accepts(&self, _req: &IoRequest<'_>) -> Result<(), Decline> {
        Ok(())
    }

    fn execute(&self, req: &IoRequest<'_>) -> Result<usize, IoFailure> {
        let chunk = req.settings.max_direct_io_bytes();
        let mut staging = vec![0u8; chunk.min(req.size)];
        let fd = req.file.buffered_fd();
        let mut done = 0;
        while done < req.size {
            let n = (req.size - done).min(chunk);
            let offset = req.file_offset + done as u64;
            let dev = req.device_ptr + done;
            match req.op {
                IoOp::Read => {
                    let got = pread_full(&*self.io, fd, &mut staging[..n], offset)
                        .map_err(|e| IoFailure::new(Error::from_io(&e, "pread"), done))?;
                    // SAFETY: the driver validated that `[device_ptr, device_ptr + size)` lies in
                    // one device allocation, and `done + got <= size`.
                    unsafe { self.runtime.copy_to_device(dev, &staging[..got]) }
                        .map_err(|e| IoFailure::new(Error::hip(&e, "copy to device"), done))?;
                    done += got;
                    if got < n {
                        break;
                    }
                }
                IoOp::Write => {
                    // SAFETY: as above, `done + n <= size`.
                    unsafe { self.runtime.copy_from_device(&mut staging[..n], dev) }
                        .map_err(|e| IoFailure::new(Error::hip(&e, "copy from device"), done))?;
                    pwrite_full(&*self.io, fd, &staging[..n], offset)
                        .map_err(|e| IoFailure::new(Error::from_io(&e, "pwrite"), done))?;
                    done += n;
                }
            }
        }
        if self.overrun && req.op == IoOp::Read {
            // SAFETY: deliberately wrong in what it writes, but the sim checks the range and
            // refuses a byte outside the allocation, so memory safety holds.
            let _ = unsafe { self.runtime.copy_to_device(req.device_ptr + done, &[0x5A]) };
        }
        Ok(done)
    }
}
