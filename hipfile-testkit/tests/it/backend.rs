//! `VecCopyBackend`: the simplest correct backend there is, for testing the test kit.
//!
//! It stages every request through a `Vec` with the synchronous copies of the request's
//! `DeviceRange` and the driver's `FileIo` (so scripted faults reach it), one chunk of `max_direct_io_bytes` at a time.

use std::sync::Arc;

use hipfile_core::{
    pread_full, pwrite_full, Backend, BackendContext, BackendDescriptor, Completion, Decline,
    Error, FileIo, IoFailure, IoOp, IoPath, IoRequest, Submit,
};
use hipfile_hip::{DeviceRange, GpuRuntime};

/// Name of the in-test backend.
pub const VEC_COPY: &str = "vec-copy";

/// The descriptor to put in a registry.
pub fn vec_copy_descriptor() -> BackendDescriptor {
    BackendDescriptor {
        name: VEC_COPY,
        priority: 1,
        path: IoPath::Staged,
        init: vec_copy_init,
    }
}

/// A deliberately wrong variant: every read also writes one byte past its range, so the
/// conformance suite's sentinels have something to catch.
pub fn overrunning_descriptor() -> BackendDescriptor {
    BackendDescriptor {
        name: "overrun",
        priority: 1,
        path: IoPath::Staged,
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

    fn submit(&self, req: &IoRequest<'_>, _how: Submit) -> Completion {
        Completion::ready(self.run(req))
    }
}

impl VecCopyBackend {
    fn run(&self, req: &IoRequest<'_>) -> Result<usize, IoFailure> {
        let size = req.size();
        let chunk = req.settings.max_direct_io_bytes();
        let mut staging = vec![0u8; chunk.min(size)];
        let fd = req.file.buffered_fd();
        let hip = |done| move |e| IoFailure::new(Error::hip(&e, "copy"), done);
        let mut done = 0;
        while done < size {
            let n = (size - done).min(chunk);
            let offset = req.file_offset + done as u64;
            let Some(dev) = req.memory.slice(done, n) else {
                unreachable!("done + n <= size");
            };
            match req.op {
                IoOp::Read => {
                    let got = pread_full(&*self.io, fd, &mut staging[..n], offset)
                        .map_err(|e| IoFailure::new(Error::from_io(&e, "pread"), done))?;
                    dev.copy_from_host(&staging[..got]).map_err(hip(done))?;
                    done += got;
                    if got < n {
                        break;
                    }
                }
                IoOp::Write => {
                    dev.copy_to_host(&mut staging[..n]).map_err(hip(done))?;
                    pwrite_full(&*self.io, fd, &staging[..n], offset)
                        .map_err(|e| IoFailure::new(Error::from_io(&e, "pwrite"), done))?;
                    done += n;
                }
            }
        }
        if self.overrun && req.op == IoOp::Read {
            // Deliberately wrong: one byte past the request, inside the allocation when there
            // is room (the sentinels sit there); past the allocation the query refuses.
            if let Ok(past) = DeviceRange::query(&self.runtime, req.memory.ptr() + done, 1) {
                let _ = past.copy_from_host(&[0x5A]);
            }
        }
        Ok(done)
    }
}
