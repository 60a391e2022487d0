//! `VecCopyBackend`: the simplest correct backend there is, for testing the test kit, with
//! variants that are wrong on purpose so the conformance suite has something to catch.
//!
//! It stages every request through a `Vec` with the synchronous copies of the request's
//! `DeviceRange` and the driver's `FileIo` (so scripted faults reach it), one chunk of
//! `max_direct_io_bytes` at a time. How it answers a request submitted with `Submit::Queue` is
//! its [`Queueing`].

use std::sync::Arc;
use std::thread::JoinHandle;

use hipfile_core::{
    pread_full, pwrite_full, Backend, BackendContext, BackendDescriptor, Completion, Decline,
    Error, ErrorKind, FileIo, IoFailure, IoOp, IoOutcome, IoPath, IoRequest, PendingIo,
    RegisteredFile, Submit,
};
use hipfile_hip::{DeviceRange, GpuRuntime};

/// Name of the in-test backend.
pub const VEC_COPY: &str = "vec-copy";

/// How the backend answers a request submitted with `Submit::Queue` (`Submit::Wait` always runs
/// the request inside `submit`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queueing {
    /// Runs it inside `submit` too, and answers it finished.
    Inline,
    /// Runs it on a thread of its own; the completion waits for that thread.
    Thread,
    /// Wrong: runs it only when someone waits for the completion, which never finishes before.
    OnWait,
    /// Wrong: answers it finished with every byte moved, and moves none.
    Forgetful,
}

/// The descriptor to put in a registry.
pub fn vec_copy_descriptor() -> BackendDescriptor {
    descriptor(VEC_COPY, |ctx| init(ctx, VEC_COPY, false, Queueing::Inline))
}

/// A deliberately wrong variant: every read also writes one byte past its range, so the
/// conformance suite's sentinels have something to catch.
pub fn overrunning_descriptor() -> BackendDescriptor {
    descriptor("overrun", |ctx| {
        init(ctx, "overrun", true, Queueing::Inline)
    })
}

/// The correct backend, running queued requests on threads of their own.
pub fn threaded_descriptor() -> BackendDescriptor {
    descriptor("threaded", |ctx| {
        init(ctx, "threaded", false, Queueing::Thread)
    })
}

/// A variant whose queued requests make no progress until someone waits for them.
pub fn on_wait_descriptor() -> BackendDescriptor {
    descriptor("on-wait", |ctx| {
        init(ctx, "on-wait", false, Queueing::OnWait)
    })
}

/// A variant whose queued requests report bytes they never moved.
pub fn forgetful_descriptor() -> BackendDescriptor {
    descriptor("forgetful", |ctx| {
        init(ctx, "forgetful", false, Queueing::Forgetful)
    })
}

fn descriptor(
    name: &'static str,
    init: fn(&BackendContext) -> hipfile_core::Result<Arc<dyn Backend>>,
) -> BackendDescriptor {
    BackendDescriptor {
        name,
        priority: 1,
        path: IoPath::Staged,
        init,
    }
}

fn init(
    ctx: &BackendContext,
    name: &'static str,
    overrun: bool,
    queueing: Queueing,
) -> hipfile_core::Result<Arc<dyn Backend>> {
    Ok(Arc::new(VecCopyBackend {
        runtime: Arc::clone(&ctx.runtime),
        io: Arc::clone(&ctx.io),
        name,
        overrun,
        queueing,
    }))
}

/// Stages through a `Vec`.
#[derive(Debug)]
pub struct VecCopyBackend {
    runtime: Arc<dyn GpuRuntime>,
    io: Arc<dyn FileIo>,
    name: &'static str,
    overrun: bool,
    queueing: Queueing,
}

impl Backend for VecCopyBackend {
    fn name(&self) -> &'static str {
        self.name
    }

    fn accepts(&self, req: &IoRequest<'_>) -> Result<(), Decline> {
        match req.memory.device_range() {
            Some(_) => Ok(()),
            None => Err(Decline::HostMemory),
        }
    }

    fn submit(&self, req: &IoRequest<'_>, how: Submit) -> Completion {
        let Some(memory) = req.memory.device_range() else {
            let e = hipfile_core::Error::new(hipfile_core::ErrorKind::HipMemoryTypeInvalid, "host");
            return Completion::ready(Err(hipfile_core::IoFailure::new(e, 0)));
        };
        let job = Job {
            op: req.op,
            file: Arc::clone(&req.file),
            memory: memory.clone(),
            file_offset: req.file_offset,
            chunk: req.settings.max_direct_io_bytes(),
            io: Arc::clone(&self.io),
            overrun: self.overrun.then(|| Arc::clone(&self.runtime)),
        };
        match (how, self.queueing) {
            (Submit::Wait, _) | (Submit::Queue, Queueing::Inline) => Completion::ready(job.run()),
            (Submit::Queue, Queueing::Thread) => {
                Completion::pending(Box::new(OnThread(std::thread::spawn(move || job.run()))))
            }
            (Submit::Queue, Queueing::OnWait) => Completion::pending(Box::new(OnWait(job))),
            (Submit::Queue, Queueing::Forgetful) => {
                Completion::pending(Box::new(Forgotten(job.memory.len())))
            }
        }
    }
}

/// One request, with everything it needs to run on any thread.
#[derive(Debug)]
struct Job {
    op: IoOp,
    file: Arc<RegisteredFile>,
    memory: DeviceRange,
    file_offset: u64,
    chunk: usize,
    io: Arc<dyn FileIo>,
    /// Set for the overrunning variant: the runtime to find the byte past the range with.
    overrun: Option<Arc<dyn GpuRuntime>>,
}

impl Job {
    fn run(&self) -> IoOutcome {
        let size = self.memory.len();
        let chunk = self.chunk;
        let mut staging = vec![0u8; chunk.min(size)];
        let fd = self.file.buffered_fd();
        let hip = |done| move |e| IoFailure::new(Error::hip(&e, "copy"), done);
        let mut done = 0;
        while done < size {
            let n = (size - done).min(chunk);
            let offset = self.file_offset + done as u64;
            let Some(dev) = self.memory.slice(done, n) else {
                unreachable!("done + n <= size");
            };
            match self.op {
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
        if let (Some(runtime), IoOp::Read) = (&self.overrun, self.op) {
            // Deliberately wrong: one byte past the request, where the sentinels sit, but only
            // inside the request's own allocation. Past its end the address may belong to
            // another allocation (CUDA places them back to back), which is not this test's to
            // write.
            let past = self.memory.ptr() + done;
            let inside = runtime
                .pointer_info(self.memory.ptr())
                .is_ok_and(|info| info.remaining_from(past).is_some_and(|room| room > 0));
            if inside {
                if let Ok(byte) = DeviceRange::query(runtime, past, 1) {
                    let _ = byte.copy_from_host(&[0x5A]);
                }
            }
        }
        Ok(done)
    }
}

/// A queued request running on a thread of its own.
#[derive(Debug)]
struct OnThread(JoinHandle<IoOutcome>);

impl PendingIo for OnThread {
    fn wait(self: Box<Self>) -> IoOutcome {
        self.0.join().unwrap_or_else(|_| {
            Err(IoFailure::new(
                Error::new(ErrorKind::InternalError, "the request's thread panicked"),
                0,
            ))
        })
    }

    fn is_finished(&self) -> bool {
        self.0.is_finished()
    }
}

/// A queued request that runs only when waited for.
#[derive(Debug)]
struct OnWait(Job);

impl PendingIo for OnWait {
    fn wait(self: Box<Self>) -> IoOutcome {
        self.0.run()
    }

    fn is_finished(&self) -> bool {
        false
    }
}

/// A queued request that claims its whole size and never ran.
#[derive(Debug)]
struct Forgotten(usize);

impl PendingIo for Forgotten {
    fn wait(self: Box<Self>) -> IoOutcome {
        Ok(self.0)
    }

    fn is_finished(&self) -> bool {
        true
    }
}
