//! # hipfile-fastpath: the direct backend
//!
//! The fastpath is what makes hipfile-rs more than a bounce buffer: the platform's P2P driver
//! ([`hipfile_hip::P2pDriver`]: AMD's KFD, NVIDIA's GPUDirect Storage, or the sim) DMAs between
//! the storage device and GPU memory on the file's O_DIRECT descriptor. No CPU copy, no page
//! cache. This crate is that backend, registered as `fastpath` with
//! [`hipfile_core::priority::FASTPATH`], above the staged fallback.
//!
//! ## Contract
//!
//! - It accepts exactly the requests it can serve, and [`verdict`] (pure, shared with
//!   `hipfile check`) says which: compat mode is not forced (`HIPFILE_FORCE_COMPAT_MODE`); the
//!   platform has a P2P driver; the file has an O_DIRECT descriptor; the buffer is device memory;
//!   file offset and size are multiples of the file's DIO offset alignment and the device address
//!   (buffer base + buffer offset) a multiple of its memory alignment; the file is a block device,
//!   or a regular file on ext4 with `data=ordered` or on xfs, unless
//!   `HIPFILE_UNSUPPORTED_FILE_SYSTEMS=true`. Every other request is declined with a typed
//!   [`Decline`], which the dispatcher hands to the next backend.
//! - The platform's P2P driver must be among the direct mechanisms the driver may use
//!   ([`hipfile_core::Settings::p2p_mechanisms`]: `HIPFILE_P2P_MECHANISMS`,
//!   `Driver::set_p2p_mechanisms`, cuFile's `cuFileDriverSetP2PFlags`); otherwise every request
//!   is declined with [`Decline::P2pMechanismMasked`], and it falls back to the staged engine or
//!   fails closed as its file handle's [`hipfile_core::IoPolicy`] says.
//! - A request runs as P2P calls of at most `max_direct_io_size_kb` (capped at
//!   [`MAX_P2P_TRANSFER`], rounded down to the alignment). Short transfers are continued, EINTR is
//!   retried, a read stops at end of file (a call moving nothing, or a short call ending off the
//!   alignment, which O_DIRECT only does at end of file).
//! - A synchronous request runs on the calling thread; a queued one (a batch entry) runs whole
//!   on one of the backend's IO workers, started on demand up to the queue depth
//!   (`io_queue_depth`), so the entries of a batch are at the storage side by side.
//! - Failures report the bytes already moved. ENODEV and EREMOTEIO with nothing moved are the
//!   driver saying "not this way": the dispatcher reruns the whole request on the next accepting
//!   backend, so the caller never notices. Every other failure is the caller's, as is.
//! - Writes honour the application's descriptor and the process's limits as `pwrite(2)` would:
//!   an appending write (`O_APPEND` descriptor) is declined, since direct IO writes at an offset
//!   and the staged path appends; a write past `RLIMIT_FSIZE` is declined while compat mode is
//!   allowed, so the staged path writes up to the limit and reports the kernel's `EFBIG`. When
//!   compat mode is disallowed the fastpath runs it itself, up to the last aligned byte below
//!   the limit, and fails with `EFBIG` there.
//! - `HIPFILE_ALLOW_COMPAT_MODE=false` changes nothing here: it makes the fallback decline, so a
//!   request this backend declines then fails with `InternalError`.
//!
//! ## Example (on the simulated GPU)
//!
//! ```
//! use std::sync::Arc;
//! use hipfile_core::{Driver, DriverOptions, EnvConfig, IoCall, IoOp, RegistryBuilder};
//! use hipfile_hip::{sim::SimRuntime, DeviceBuffer, GpuRuntime};
//!
//! let sim = Arc::new(SimRuntime::default());
//! let gpu: Arc<dyn GpuRuntime> = sim.clone();
//! let mut backends = RegistryBuilder::new();
//! hipfile_fastpath::register(&mut backends)?;
//! let driver = Driver::new(DriverOptions {
//!     backends: Some(backends),
//!     selection: None,
//!     // Wherever the temporary file lands (tmpfs, overlay), let the direct path serve it.
//!     env: EnvConfig { unsupported_file_systems: Some(true), ..EnvConfig::default() },
//!     ..DriverOptions::with_runtime(gpu.clone())
//! });
//! driver.open()?;
//! let dir = tempfile::tempdir().unwrap();
//! let file = std::fs::OpenOptions::new().create(true).read(true).write(true)
//!     .open(dir.path().join("data")).unwrap();
//! let handle = driver.handle_register(std::os::fd::AsRawFd::as_raw_fd(&file))?;
//! if driver.file(handle)?.direct_fd().is_none() {
//!     return Ok(()); // this filesystem has no O_DIRECT: nothing for the fastpath to show
//! }
//!
//! let mut src = DeviceBuffer::new(gpu.clone(), 8192).unwrap();
//! src.write_at(0, &[7u8; 8192]).unwrap();
//! let call = |op, buffer| IoCall { op, handle, buffer, size: 8192, file_offset: 0, buffer_offset: 0 };
//! assert_eq!(driver.io(call(IoOp::Write, src.ptr()))?, 8192);
//! let dst = DeviceBuffer::new(gpu.clone(), 8192).unwrap();
//! assert_eq!(driver.io(call(IoOp::Read, dst.ptr()))?, 8192);
//! assert_eq!(dst.to_vec().unwrap(), vec![7u8; 8192]);
//! assert_eq!(sim.p2p_faults().calls(), 2, "one DMA each way, no staging");
//! # Ok::<(), hipfile_core::Error>(())
//! ```

#![forbid(unsafe_code)]

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::Arc;

use hipfile_core::workers::{Deferred, IoWorkers};
use hipfile_core::{
    priority, Backend, BackendContext, BackendReport, CompatMode, Completion, Decline, DioAlign,
    EnvConfig, Error, ErrorKind, FsKind, IoFailure, IoOp, IoPath, IoRequest, RegisteredFile,
    ReportWhen, Resources, Result, Submit,
};
use hipfile_hip::{is_host, GpuRuntime, MemoryKind, P2pDriver, MAX_P2P_TRANSFER};

hipfile_core::register_backend! {
    name: "fastpath",
    priority: priority::FASTPATH,
    path: IoPath::Direct,
    init: |ctx| Ok(Arc::new(Fastpath::new(ctx))),
}

/// Everything [`verdict`] decides from: the facts of one request, gathered by
/// [`Fastpath::accepts`] from an [`IoRequest`], or by a tool (`hipfile check`) from a file.
#[derive(Clone, Copy, Debug)]
pub struct Facts<'a> {
    /// The platform offers a P2P driver.
    pub has_p2p_driver: bool,
    /// The file has an O_DIRECT descriptor.
    pub has_direct_fd: bool,
    /// The kind of memory at the device address.
    pub memory: MemoryKind,
    /// The file's direct IO alignment.
    pub align: DioAlign,
    /// The storage the file lives on.
    pub fs: &'a FsKind,
    /// File offset of the request.
    pub file_offset: u64,
    /// Size of the request.
    pub size: usize,
    /// First device byte of the request (buffer base + buffer offset).
    pub device_address: usize,
    /// Compat mode in force.
    pub compat: CompatMode,
    /// Environment switches in force.
    pub env: &'a EnvConfig,
}

/// Whether the fastpath serves a request with these facts; the first unmet precondition is the
/// decline.
pub fn verdict(facts: &Facts<'_>) -> Result<(), Decline> {
    if is_host(facts.memory) {
        return Err(Decline::HostMemory);
    }
    if facts.compat.forced {
        return Err(Decline::CompatModeForced);
    }
    if !facts.has_p2p_driver {
        return Err(Decline::NoP2pDriver);
    }
    if !facts.has_direct_fd {
        return Err(Decline::NoDirectIo);
    }
    if facts.memory != MemoryKind::Device {
        return Err(Decline::NotDeviceMemory);
    }
    let offset_align = u64::from(facts.align.offset.max(1));
    if facts.file_offset % offset_align != 0 || facts.size as u64 % offset_align != 0 {
        return Err(Decline::Misaligned {
            required: facts.align.offset,
        });
    }
    let memory_align = facts.align.memory.max(1) as usize;
    if facts.device_address % memory_align != 0 {
        return Err(Decline::Misaligned {
            required: facts.align.memory,
        });
    }
    filesystem_verdict(facts.fs, facts.env)
}

/// Whether the fastpath would serve aligned IO between `file` and device memory of `runtime`:
/// what `hipfile check` reports for a file. Alignment is a property of each request, so it is
/// taken as met here.
pub fn file_verdict(
    file: &RegisteredFile,
    runtime: &dyn GpuRuntime,
    compat: CompatMode,
    env: &EnvConfig,
) -> Result<(), Decline> {
    let align = file.dio_align();
    verdict(&Facts {
        has_p2p_driver: runtime.p2p().is_some(),
        has_direct_fd: file.direct_fd().is_some(),
        memory: MemoryKind::Device,
        align,
        fs: &file.fs().kind,
        file_offset: 0,
        size: align.offset.max(1) as usize,
        device_address: 0,
        compat,
        env,
    })
}

/// The largest single P2P call for a file with alignment `align` under the
/// `max_direct_io_bytes` setting: the setting, capped at [`MAX_P2P_TRANSFER`], rounded down to
/// the alignment (never below it) so every call after the first still starts aligned.
pub fn call_size(align: DioAlign, max_direct_io_bytes: usize) -> usize {
    let unit = align.offset.max(align.memory).max(1) as usize;
    let cap = max_direct_io_bytes.min(MAX_P2P_TRANSFER);
    (cap / unit * unit).max(unit)
}

/// Whether the direct path may serve files on `fs`.
pub fn filesystem_verdict(fs: &FsKind, env: &EnvConfig) -> Result<(), Decline> {
    let supported = matches!(
        fs,
        FsKind::BlockDevice | FsKind::Ext4 { ordered: true } | FsKind::Xfs
    );
    if supported || env.unsupported_file_systems == Some(true) {
        return Ok(());
    }
    Err(Decline::UnsupportedFilesystem(match fs {
        FsKind::Ext4 { .. } => "ext4 without data=ordered".to_string(),
        FsKind::Other(name) => name.clone(),
        other => format!("{other:?}"),
    }))
}

/// The direct backend.
#[derive(Debug)]
pub struct Fastpath {
    p2p: Option<Arc<dyn P2pDriver>>,
    /// Threads for queued requests, started as they are needed, up to the queue depth.
    workers: IoWorkers<Deferred>,
}

impl Fastpath {
    /// The backend for an opening driver: it takes the runtime's P2P driver, if any, once.
    /// It starts no thread until a request is queued.
    pub fn new(ctx: &BackendContext) -> Self {
        let settings = ctx.settings.current();
        let depth = usize::try_from(settings.io_queue_depth).unwrap_or(usize::MAX);
        let p2p = ctx.runtime.p2p();
        if p2p.is_none() {
            log::info!(
                "fastpath started but declines every request: {}",
                Decline::NoP2pDriver
            );
        } else if settings.compat_mode(&ctx.env).forced {
            log::info!(
                "fastpath started but declines every request: {}",
                Decline::CompatModeForced
            );
        }
        Fastpath {
            p2p,
            workers: IoWorkers::start(0, depth.max(1))
                .expect("a pool with no permanent worker starts no thread"),
        }
    }

    /// The P2P driver requests run on (`None`: every request is declined).
    pub fn driver(&self) -> Option<&Arc<dyn P2pDriver>> {
        self.p2p.as_ref()
    }

    /// The largest single P2P call for `req`.
    fn chunk(req: &IoRequest<'_>) -> usize {
        call_size(req.file.dio_align(), req.settings.max_direct_io_bytes())
    }
}

impl Backend for Fastpath {
    fn name(&self) -> &'static str {
        NAME
    }

    fn accepts(&self, req: &IoRequest<'_>) -> Result<(), Decline> {
        if let Some(p2p) = &self.p2p {
            if !req.settings.p2p_mechanisms.allows_driver(p2p.name()) {
                return Err(Decline::P2pMechanismMasked(p2p.name()));
            }
        }
        verdict(&Facts {
            has_p2p_driver: self.p2p.is_some(),
            has_direct_fd: req.file.direct_fd().is_some(),
            memory: req.memory_kind(),
            align: req.file.dio_align(),
            fs: &req.file.fs().kind,
            file_offset: req.file_offset,
            size: req.size(),
            device_address: req.memory.ptr(),
            compat: req.compat,
            env: &req.env,
        })?;
        if req.op == IoOp::Write {
            if req.append {
                return Err(Decline::Append);
            }
            if let Some(limit) = file_size_limit(req) {
                if req.compat.allowed && req.file_offset + req.size() as u64 > limit {
                    return Err(Decline::FileSizeLimit { limit });
                }
            }
        }
        Ok(())
    }

    /// A synchronous request runs inside `submit`, on the calling thread: each P2P call blocks
    /// until the DMA is done, and a hand-off to another thread would only add its wake-up. A
    /// queued request runs whole on one IO worker (started for it when none is idle, up to the
    /// queue depth), so the requests of a batch run side by side.
    fn submit(&self, req: &IoRequest<'_>, how: Submit) -> Completion {
        match (how, &self.p2p) {
            (Submit::Queue, Some(p2p)) => {
                let p2p = Arc::clone(p2p);
                let owned = req.to_owned();
                self.workers.defer(req.doorbell.as_ref(), move || {
                    execute(p2p.as_ref(), &owned.request())
                })
            }
            _ => Completion::ready(self.execute(req)),
        }
    }

    fn report(&self, _when: ReportWhen) -> BackendReport {
        BackendReport {
            mechanism: self.p2p.as_ref().map(|p2p| p2p.name()),
            counters: Vec::new(),
            resources: Resources {
                io_threads: self.workers.live(),
                ..Resources::default()
            },
        }
    }
}

impl Fastpath {
    fn execute(&self, req: &IoRequest<'_>) -> Result<usize, IoFailure> {
        match self.p2p.as_deref() {
            Some(p2p) => execute(p2p, req),
            None => Err(not_here()),
        }
    }
}

/// `accepts` said yes, so this cannot happen; if it did, the next backend may serve.
fn not_here() -> IoFailure {
    IoFailure::new(
        Error::os(
            libc::ENODEV,
            "the fastpath has no P2P driver or O_DIRECT descriptor",
        ),
        0,
    )
}

/// Run `req` on `p2p` through the file's O_DIRECT descriptor.
fn execute(p2p: &dyn P2pDriver, req: &IoRequest<'_>) -> Result<usize, IoFailure> {
    let Some(fd) = req.file.direct_fd() else {
        return Err(not_here());
    };
    transfer(p2p, fd, req, Fastpath::chunk(req))
}

/// Run `req` as P2P calls of at most `chunk` bytes.
fn transfer(
    p2p: &dyn P2pDriver,
    fd: BorrowedFd<'_>,
    req: &IoRequest<'_>,
    chunk: usize,
) -> Result<usize, IoFailure> {
    let offset_align = req.file.dio_align().offset.max(1) as usize;
    let limit = match req.op {
        IoOp::Write => file_size_limit(req),
        IoOp::Read => None,
    };
    let size = req.size();
    let mut done = 0usize;
    while done < size {
        let file_offset = req.file_offset + done as u64;
        let mut n = chunk.min(size - done);
        if let Some(limit) = limit {
            // Only whole aligned blocks below the limit can go direct; past them the kernel
            // would cut the O_DIRECT write off the alignment and answer EINVAL.
            let room = limit.saturating_sub(file_offset) as usize / offset_align * offset_align;
            if room == 0 {
                return Err(failure(
                    io::Error::from_raw_os_error(libc::EFBIG),
                    req,
                    n,
                    file_offset,
                    done,
                ));
            }
            n = n.min(room);
        }
        let Some(piece) = req.memory.device_range().and_then(|m| m.slice(done, n)) else {
            // done + n <= size, the length of the range: this cannot happen.
            let e = Error::new(ErrorKind::InternalError, "a P2P call outside the request");
            return Err(IoFailure::new(e, done));
        };
        let moved = match req.op {
            IoOp::Read => piece.p2p_read(p2p, fd, file_offset),
            IoOp::Write => piece.p2p_write(p2p, fd, file_offset),
        };
        match moved {
            Ok(0) if req.op == IoOp::Read => break,
            Ok(0) => {
                return Err(failure(
                    io::Error::from_raw_os_error(libc::ENOSPC),
                    req,
                    n,
                    file_offset,
                    done,
                ))
            }
            Ok(k) => {
                done += k.min(n);
                if done % offset_align != 0 && done < size {
                    if req.op == IoOp::Read {
                        // O_DIRECT ends a read off the alignment only at end of file.
                        break;
                    }
                    return Err(failure(
                        io::Error::from_raw_os_error(libc::EIO),
                        req,
                        n,
                        file_offset,
                        done,
                    ));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(failure(e, req, n, file_offset, done)),
        }
    }
    Ok(done)
}

/// The process's file size limit (`RLIMIT_FSIZE`) where it bounds `req`'s file: regular files,
/// not block devices; `None` when unlimited.
fn file_size_limit(req: &IoRequest<'_>) -> Option<u64> {
    if req.file.fs().kind == FsKind::BlockDevice {
        return None;
    }
    rustix::process::getrlimit(rustix::process::Resource::Fsize).current
}

fn failure(e: io::Error, req: &IoRequest<'_>, n: usize, offset: u64, done: usize) -> IoFailure {
    let what = match req.op {
        IoOp::Read => "P2P read",
        IoOp::Write => "P2P write",
    };
    IoFailure::new(
        Error::from_io(&e, format!("{what} of {n} bytes at offset {offset}")),
        done,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALIGN: DioAlign = DioAlign {
        memory: 512,
        offset: 4096,
    };

    fn facts<'a>(fs: &'a FsKind, env: &'a EnvConfig) -> Facts<'a> {
        Facts {
            has_p2p_driver: true,
            has_direct_fd: true,
            memory: MemoryKind::Device,
            align: ALIGN,
            fs,
            file_offset: 8192,
            size: 4096 * 3,
            device_address: 0x10_0200,
            compat: CompatMode {
                allowed: true,
                forced: false,
            },
            env,
        }
    }

    #[test]
    fn every_precondition_flipped_alone_is_its_own_decline() {
        let ext4 = FsKind::Ext4 { ordered: true };
        let env = EnvConfig::default();
        let base = facts(&ext4, &env);
        assert_eq!(verdict(&base), Ok(()));
        let flips: Vec<(Facts<'_>, Decline)> = vec![
            (
                Facts {
                    compat: CompatMode {
                        allowed: true,
                        forced: true,
                    },
                    ..base
                },
                Decline::CompatModeForced,
            ),
            (
                Facts {
                    has_p2p_driver: false,
                    ..base
                },
                Decline::NoP2pDriver,
            ),
            (
                Facts {
                    has_direct_fd: false,
                    ..base
                },
                Decline::NoDirectIo,
            ),
            (
                Facts {
                    memory: MemoryKind::Managed,
                    ..base
                },
                Decline::NotDeviceMemory,
            ),
            (
                Facts {
                    memory: MemoryKind::Host,
                    ..base
                },
                Decline::HostMemory,
            ),
            (
                Facts {
                    file_offset: 8192 + 512,
                    ..base
                },
                Decline::Misaligned { required: 4096 },
            ),
            (
                Facts {
                    size: 4096 + 1,
                    ..base
                },
                Decline::Misaligned { required: 4096 },
            ),
            (
                Facts {
                    device_address: 0x10_0201,
                    ..base
                },
                Decline::Misaligned { required: 512 },
            ),
        ];
        for (f, decline) in flips {
            assert_eq!(verdict(&f), Err(decline));
        }
    }

    #[test]
    fn filesystems_are_block_devices_ordered_ext4_and_xfs_unless_overridden() {
        let env = EnvConfig::default();
        let anything = EnvConfig {
            unsupported_file_systems: Some(true),
            ..EnvConfig::default()
        };
        for fs in [
            FsKind::BlockDevice,
            FsKind::Ext4 { ordered: true },
            FsKind::Xfs,
        ] {
            assert_eq!(verdict(&facts(&fs, &env)), Ok(()), "{fs:?}");
        }
        for fs in [
            FsKind::Ext4 { ordered: false },
            FsKind::Other("tmpfs".into()),
            FsKind::Other("nfs".into()),
        ] {
            assert!(
                matches!(
                    verdict(&facts(&fs, &env)),
                    Err(Decline::UnsupportedFilesystem(_))
                ),
                "{fs:?}"
            );
            assert_eq!(verdict(&facts(&fs, &anything)), Ok(()), "{fs:?}");
        }
        let off = EnvConfig {
            unsupported_file_systems: Some(false),
            ..EnvConfig::default()
        };
        let tmpfs = FsKind::Other("tmpfs".into());
        assert_eq!(
            verdict(&facts(&tmpfs, &off)),
            Err(Decline::UnsupportedFilesystem("tmpfs".into()))
        );
    }
}
