//! `hipfile cp SRC DST`: copy a file through GPU memory. (A copy with a remote object on a
//! side is [`crate::remote::copy`]'s, built with the feature `remote`.)
//!
//! The bytes go file -> GPU memory -> file through hipfile-rs, a chunk at a time (`--chunk`,
//! 64 MiB by default) in one device buffer: the fastpath moves them by P2P DMA where it can, the
//! staged engine everywhere else, as for any application. It is what upstream hipFile's `aiscp`
//! example does, made a tool.
//!
//! - **Any size.** Each read and write moves at most one chunk, and a chunk is at most
//!   2 GiB - 4 KiB (Linux's limit for one call); chunks are multiples of 4 KiB so every request
//!   after the first stays on the direct IO alignment. An empty source gives an empty copy. The
//!   holes of a sparse source (`SEEK_DATA`/`SEEK_HOLE`) are not read: the copy gets the same
//!   holes and reads as zeros there, as the source does.
//! - **What reading gives.** The copy holds what reading SRC returns, to the end of its reads:
//!   a file that grew while being copied is copied to its new end. Where a file's size says
//!   nothing of its contents, the size is not used at all: files of the kernel's own
//!   filesystems (procfs, sysfs, debugfs, tracefs, securityfs, configfs, cgroup), which report
//!   0 or 4096 whatever they hold, and any file whose size reads as 0 but which has bytes. Such
//!   files are read from the start until a read returns nothing. A regular file whose reads end
//!   before its size while its size stays the same is copied to where its reads end; one whose
//!   size went down meanwhile shrank while being copied, and the copy fails. The summary says
//!   when the bytes copied are not the size SRC reported.
//! - **Never a partial destination.** The copy is written to a hidden temporary file in DST's
//!   directory, of a short name of its own (`.hipfile-cp-XXXXXX`, so that a DST name of any
//!   length fits beside it), flushed with `fsync`, checked when `--verify` asks, and only then
//!   renamed to DST (and the directory flushed); any failure removes it and leaves DST as it
//!   was. SIGINT, SIGTERM and SIGHUP remove it too before the process ends by the signal
//!   ([`crate::signals`]); only SIGKILL can leave it behind, never a wrong DST.
//! - **Overwriting.** An existing DST is replaced only with `--force` (in one rename, keeping
//!   its permission bits); a new DST gets SRC's permission bits less the umask, as `cp` does.
//!   DST may be an existing directory: the copy goes into it under SRC's name. Copying a file
//!   onto itself (the same inode, by any path), a directory as SRC, or a DST whose directory
//!   does not exist are refused before anything is written.
//! - **`--verify`** reads the copy back through hipfile-rs and compares it byte for byte with
//!   SRC read by plain `pread`; a difference names the first byte that differs and fails the
//!   command. Bytes that reading SRC again need not give (a file read until its reads end, the
//!   bytes past the size of a file that grew) are compared with what the copy read instead: a
//!   digest of each of its reads, taken as it read them; a difference names the read's range.
//! - **Output.** A progress bar on stderr when stderr is a terminal; the platform on stderr
//!   (chosen as `bench` chooses it: the GPU the machine has, else the simulated GPU); on stdout one
//!   summary line, or with `--json` one object: `source`, `destination`, `bytes` (copied),
//!   `reported_size` (SRC's size when the copy started), `read_until_eof` (its size was not
//!   used), `seconds`, `gbps`, `path` (`direct`, `staged`, `direct+staged`, or `none` when no byte moved), the
//!   `backends` that moved the bytes with their requests and the bytes those moved, reads and
//!   writes together (from the driver's counters), `chunk`, `platform`, `verified`,
//!   `verified_against` (`source`, `reads` or `source+reads`; null when not verified) and
//!   `verify_seconds`. `seconds` runs from the first read to the copy flushed; the check is
//!   timed apart. Failures print one message and exit non-zero.

use std::fs::{File, Metadata, Permissions};
use std::hash::{DefaultHasher, Hasher};
use std::io::{IsTerminal, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use clap::Args;
use hipfile::{AsDevice, AsDeviceMut, Driver, DriverOptions, FileHandle, RegisteredBuffer};
use hipfile_core::{BackendCounts, IoPath};
use hipfile_hip::{DeviceBuffer, GpuRuntime};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{json, Value};

use crate::platform::pick_runtime;
use crate::signals::Removal;
use crate::size::parse_size;

/// Arguments of `hipfile cp`.
#[derive(Debug, Args)]
pub struct CpArgs {
    /// The file to copy: a regular file or a block device (or, with the feature `remote`, an
    /// `s3://bucket/key` or `http(s)://` URL).
    pub src: PathBuf,
    /// Where to copy it: a file, or an existing directory to copy into under SRC's name (or,
    /// with the feature `remote`, an `s3://bucket/key` URL).
    pub dst: PathBuf,
    /// Replace DST if it exists (at once, when the copy is complete and checked).
    #[arg(long, short)]
    pub force: bool,
    /// Read the copy back through hipfile-rs and compare it with SRC byte for byte before it
    /// takes DST's name; a difference fails the command and leaves DST as it was.
    #[arg(long)]
    pub verify: bool,
    /// Bytes per read and write through the device buffer, with an optional unit K, M, G
    /// (binary): rounded down to a multiple of 4 KiB, at most 2 GiB - 4 KiB.
    #[arg(long, value_parser = parse_size, default_value = "64M", value_name = "SIZE")]
    pub chunk: usize,
    /// Print one JSON object instead of the summary line.
    #[arg(long)]
    pub json: bool,
    /// Platform: amd, nvidia or sim (default: the GPU the machine has, else the sim).
    #[arg(long)]
    pub platform: Option<String>,
    /// Backends to offer requests to, in order (as `HIPFILE_BACKENDS`), e.g. `fallback`.
    #[arg(long, value_name = "NAME")]
    pub backend: Option<String>,
    /// When no GPU is found, list the loader's answer for every runtime library tried.
    #[arg(long)]
    pub verbose: bool,
    /// Requests to remote objects (SRC or DST an `s3://` or `http(s)://` URL).
    #[cfg(feature = "remote")]
    #[command(flatten)]
    pub remote: crate::remote_args::RemoteArgs,
}

/// Linux's limit on the bytes of one read or write (`MAX_RW_COUNT`): 2 GiB - 4 KiB.
pub const MAX_CALL_BYTES: usize = 0x7fff_f000;
/// The direct IO alignment chunks keep.
pub(crate) const ALIGN: usize = 4096;
/// The device buffer of a copy whose size is not known in advance, when `--chunk` is larger.
const UNSIZED_BUFFER: usize = 1 << 20;
/// The prefix of the temporary copy's name; six random characters follow.
const TEMPORARY_PREFIX: &str = ".hipfile-cp-";

/// The chunk `requested` gives: a multiple of 4 KiB when it is at least that, never more than
/// [`MAX_CALL_BYTES`].
pub fn chunk_bytes(requested: usize) -> Result<usize, String> {
    if requested > MAX_CALL_BYTES {
        return Err(format!(
            "--chunk {requested} is too large: one read or write moves at most {MAX_CALL_BYTES} \
             bytes (2 GiB - 4 KiB)"
        ));
    }
    Ok(if requested >= ALIGN {
        requested / ALIGN * ALIGN
    } else {
        requested
    })
}

/// How far SRC is read.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Extent {
    /// To its size, skipping holes, then on from there until its reads end (a file that grew).
    Sized,
    /// From the start until its reads end, its size left aside: why its size says nothing.
    UntilEof(String),
}

/// What to copy where, checked before anything is written.
#[derive(Debug)]
struct Plan {
    src: PathBuf,
    src_file: File,
    /// SRC's size when the copy started.
    size: u64,
    /// SRC is a block device (its size is where it seeks to at its end).
    block: bool,
    extent: Extent,
    dst: PathBuf,
    /// DST's directory, where the temporary file is made.
    dir: PathBuf,
    /// DST exists (and `--force` allows replacing it).
    replaces: bool,
    /// Permission bits of the copy.
    mode: u32,
}

pub(crate) fn shown(p: &Path) -> String {
    p.display().to_string()
}

impl Plan {
    fn new(src: &Path, dst: &Path, force: bool) -> Result<Plan, String> {
        let src_meta =
            std::fs::metadata(src).map_err(|e| format!("cannot read {}: {e}", shown(src)))?;
        let kind = src_meta.file_type();
        if kind.is_dir() {
            return Err(format!("{} is a directory: cp copies one file", shown(src)));
        }
        if !kind.is_file() && !kind.is_block_device() {
            return Err(format!(
                "{} is neither a regular file nor a block device",
                shown(src)
            ));
        }
        let mut src_file =
            File::open(src).map_err(|e| format!("cannot open {}: {e}", shown(src)))?;
        let block = kind.is_block_device();
        let size = current_size(&mut src_file, block, src)?;
        let extent = if block {
            Extent::Sized
        } else if let Some(fs) = kernel_filesystem(&src_file) {
            Extent::UntilEof(format!(
                "a file of {fs}, whose sizes are not what reading it gives"
            ))
        } else if size == 0 && has_bytes_at(&src_file, 0, src)? {
            Extent::UntilEof("its size reads as 0, yet it has bytes".into())
        } else {
            Extent::Sized
        };

        let (dst, dir) = destination(dst, || {
            src.file_name()
                .map(std::ffi::OsStr::to_os_string)
                .ok_or_else(|| format!("{} names no file to copy", shown(src)))
        })?;
        if let Ok(target) = std::fs::metadata(&dst) {
            if same_file(&src_meta, &target) {
                return Err(format!(
                    "{} and {} are the same file",
                    shown(src),
                    shown(&dst)
                ));
            }
        }
        let (replaces, mode) = replaced(&dst, force, src_meta.permissions().mode() & 0o7777)?;
        Ok(Plan {
            src: src.to_path_buf(),
            src_file,
            size,
            block,
            extent,
            dst,
            dir,
            replaces,
            mode,
        })
    }
}

fn same_file(a: &Metadata, b: &Metadata) -> bool {
    a.dev() == b.dev() && a.ino() == b.ino()
}

/// The size of `file` now: its length, or for a block device where it seeks to at its end.
fn current_size(file: &mut File, block: bool, path: &Path) -> Result<u64, String> {
    if block {
        file.seek(SeekFrom::End(0))
    } else {
        file.metadata().map(|m| m.len())
    }
    .map_err(|e| format!("cannot size {}: {e}", shown(path)))
}

/// Whether reading `file` at `at` gives a byte (plain `pread`, outside hipfile-rs).
fn has_bytes_at(file: &File, at: u64, path: &Path) -> Result<bool, String> {
    loop {
        match file.read_at(&mut [0u8], at) {
            Ok(n) => return Ok(n > 0),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("reading {} at byte {at}: {e}", shown(path))),
        }
    }
}

/// The kernel's own filesystems, whose files report a size (0, or a page) that says nothing of
/// what reading them gives: their `statfs` magic and name.
const KERNEL_FILESYSTEMS: [(i128, &str); 8] = [
    (0x9fa0, "procfs"),
    (0x6265_6572, "sysfs"),
    (0x6462_6720, "debugfs"),
    (0x7472_6163, "tracefs"),
    (0x7363_6673, "securityfs"),
    (0x6265_6570, "configfs"),
    (0x0027_e0eb, "cgroup"),
    (0x6367_7270, "cgroup2"),
];

/// The name of the kernel filesystem `file` is on, if it is on one of [`KERNEL_FILESYSTEMS`].
fn kernel_filesystem(file: &File) -> Option<&'static str> {
    // Widened: its type is the platform's `long` or an unsigned one.
    let magic = i128::from(rustix::fs::fstatfs(file).ok()?.f_type);
    KERNEL_FILESYSTEMS
        .iter()
        .find(|(m, _)| *m == magic)
        .map(|(_, name)| *name)
}

/// The byte ranges of `file` (of `size` bytes) that may hold data, on 4 KiB boundaries: its
/// data extents where the filesystem tells them apart from holes, else the whole file.
fn data_regions(file: &File, size: u64) -> Vec<(u64, u64)> {
    use rustix::fs::SeekFrom as Seek;
    let whole = vec![(0, size)];
    let align = ALIGN as u64;
    let mut regions = Vec::new();
    let mut pos = 0;
    while pos < size {
        let start = match rustix::fs::seek(file, Seek::Data(pos)) {
            Ok(start) => start,
            Err(rustix::io::Errno::NXIO) => break,
            Err(_) => return whole,
        };
        if start >= size {
            break;
        }
        let end = match rustix::fs::seek(file, Seek::Hole(start)) {
            Ok(end) => end.min(size),
            Err(_) => return whole,
        };
        if end <= start {
            return whole;
        }
        let start = start / align * align;
        let end = end.div_ceil(align).saturating_mul(align).min(size);
        regions.push((start, end));
        pos = end;
    }
    regions
}

/// What a copy did.
#[derive(Debug)]
struct Done {
    /// Bytes of the copy: what reading SRC gave.
    bytes: u64,
    /// Why that is not SRC's size, when it is not.
    not_the_size: Option<String>,
    /// What `--verify` compared the copy with, when it ran: `source`, `reads`, `source+reads`.
    verified_against: Option<&'static str>,
    /// Seconds from the first read to the copy flushed (`fsync`), the check left out.
    seconds: f64,
    /// The backends that moved the copy's bytes (reads and writes), in offer order.
    moved_by: Vec<BackendCounts>,
    /// Seconds the check took, when `--verify` asked for it (and it passed).
    verify_seconds: Option<f64>,
}

/// The device buffer, the registered files and the progress bar of one copy.
struct Mover<'a> {
    src: &'a FileHandle,
    dst: &'a FileHandle,
    buf: RegisteredBuffer<DeviceBuffer>,
    bar: &'a ProgressBar,
}

impl Mover<'_> {
    /// The bytes to ask for to get `want` bytes at a 4 KiB aligned offset: `want` rounded up to
    /// 4 KiB within the buffer, so the last read of a file whose size is not a multiple of 4 KiB
    /// stays on the direct IO alignment (it comes back short, at the end of the file).
    fn ask(&self, want: usize) -> usize {
        want.div_ceil(ALIGN)
            .saturating_mul(ALIGN)
            .min(self.buf.as_device().len())
    }

    /// Read `ask` bytes of SRC at `off` into the start of the buffer; the bytes read.
    fn read(&mut self, ask: usize, off: u64, src: &Path) -> Result<usize, String> {
        let window = self.buf.slice_mut(..ask).map_err(|e| e.to_string())?;
        self.src
            .read(window, off)
            .map_err(|e| format!("reading {} at byte {off}: {e}", shown(src)))
    }

    /// Copy `start..end`; `Some(at)` when SRC's reads ended at `at`, before `end`.
    fn copy_range(&mut self, start: u64, end: u64, src: &Path) -> Result<Option<u64>, String> {
        let mut off = start;
        while off < end {
            let want = (end - off).min(self.buf.as_device().len() as u64) as usize;
            let ask = self.ask(want);
            let got = self.read(ask, off, src)?.min(want);
            if got == 0 {
                return Ok(Some(off));
            }
            self.put(got, off)?;
            off += got as u64;
            self.bar.set_position(off);
        }
        Ok(None)
    }

    /// Copy from `start` until a read of SRC returns nothing, each read's bytes noted in `log`;
    /// returns where the reads ended.
    fn copy_until_eof(
        &mut self,
        start: u64,
        mut log: Option<&mut ReadLog>,
        src: &Path,
    ) -> Result<u64, String> {
        let len = self.buf.as_device().len();
        let mut off = start;
        loop {
            let got = self.read(len, off, src)?.min(len);
            if got == 0 {
                return Ok(off);
            }
            if let Some(log) = log.as_deref_mut() {
                log.note(&self.buf, off, got)?;
            }
            self.put(got, off)?;
            off += got as u64;
            if self.bar.length().is_some_and(|l| l < off) {
                self.bar.set_length(off);
            }
            self.bar.set_position(off);
        }
    }

    /// Write the buffer's first `got` bytes to the copy at `off` ([`put`]).
    fn put(&self, got: usize, off: u64) -> Result<(), String> {
        put(self.dst, &self.buf, got, off)
    }

    /// Read `len` bytes of the copy at `off` back into the buffer; an error when the copy ends
    /// before them.
    fn read_back(&mut self, off: u64, len: usize, plan: &Plan) -> Result<(), String> {
        let ask = self.ask(len);
        let got = self
            .dst
            .read(self.buf.slice_mut(..ask).map_err(|e| e.to_string())?, off)
            .map_err(|e| format!("reading the copy back at byte {off}: {e}"))?
            .min(len);
        if got != len {
            return Err(format!(
                "verify failed: the copy ends at byte {}, {} gave {} bytes",
                off + got as u64,
                shown(&plan.src),
                off + len as u64
            ));
        }
        Ok(())
    }

    /// Read the copy back through hipfile-rs: its first `reread_to` bytes compared with
    /// `src_file` read again by `pread`, the bytes of every read in `log` with the digest taken
    /// when the copy read them.
    fn verify(
        &mut self,
        src_file: &File,
        reread_to: u64,
        log: &ReadLog,
        plan: &Plan,
    ) -> Result<(), String> {
        let chunk = self.buf.as_device().len();
        let mut copy = vec![0u8; chunk];
        let mut original = vec![0u8; chunk];
        let mut off = 0u64;
        // From zero, with its rate and time: the check is a pass of its own.
        self.bar.reset();
        self.bar.set_message("verifying");
        while off < reread_to {
            let want = (reread_to - off).min(chunk as u64) as usize;
            self.read_back(off, want, plan)?;
            self.buf
                .read_at(0, &mut copy[..want])
                .map_err(|e| format!("copying GPU memory to the host: {e}"))?;
            src_file
                .read_exact_at(&mut original[..want], off)
                .map_err(|e| format!("reading {} at byte {off}: {e}", shown(&plan.src)))?;
            if let Some(i) = copy[..want]
                .iter()
                .zip(&original[..want])
                .position(|(a, b)| a != b)
            {
                return Err(format!(
                    "verify failed: the copy differs from {} at byte {}",
                    shown(&plan.src),
                    off + i as u64
                ));
            }
            off += want as u64;
            self.bar.set_position(off);
        }
        for &(at, len, digest) in &log.reads {
            self.read_back(at, len, plan)?;
            self.buf
                .read_at(0, &mut copy[..len])
                .map_err(|e| format!("copying GPU memory to the host: {e}"))?;
            if digest_of(&copy[..len]) != digest {
                return Err(format!(
                    "verify failed: the copy differs from what was read from {} in bytes {at}..{}",
                    shown(&plan.src),
                    at + len as u64
                ));
            }
            self.bar.set_position(at + len as u64);
        }
        Ok(())
    }
}

/// The reads of a copy that a check cannot repeat on SRC (its contents may differ from one
/// read to the next): where each read was, and a digest of what it gave.
#[derive(Debug, Default)]
struct ReadLog {
    reads: Vec<(u64, usize, u64)>,
    host: Vec<u8>,
}

impl ReadLog {
    /// Note the read of `got` bytes at `off` that is in `buf` now.
    fn note(
        &mut self,
        buf: &RegisteredBuffer<DeviceBuffer>,
        off: u64,
        got: usize,
    ) -> Result<(), String> {
        self.host.resize(got, 0);
        buf.read_at(0, &mut self.host[..got])
            .map_err(|e| format!("copying GPU memory to the host: {e}"))?;
        self.reads.push((off, got, digest_of(&self.host[..got])));
        Ok(())
    }
}

/// A digest of `bytes` (SipHash with this build's fixed keys): the same bytes give the same
/// digest within one process, which is all a check in that process needs.
pub(crate) fn digest_of(bytes: &[u8]) -> u64 {
    let mut hasher = DefaultHasher::new();
    hasher.write(bytes);
    hasher.finish()
}

pub(crate) fn progress_bar(size: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(size);
    if let Ok(style) = ProgressStyle::with_template(
        "{bar:30} {bytes}/{total_bytes} {binary_bytes_per_sec} {eta} {msg}",
    ) {
        bar.set_style(style);
    }
    bar
}

/// The statistics level a copy runs at: what the environment set, and at least 1.
fn counting_level(from_env: Option<u8>) -> u8 {
    from_env.unwrap_or(0).max(1)
}

/// The options of the driver that copies on `gpu`.
pub(crate) fn driver_options(gpu: Arc<dyn GpuRuntime>, args: &CpArgs) -> DriverOptions {
    let mut options = DriverOptions::with_runtime(gpu);
    // The summary names the backends that moved the bytes, from the driver's counters: level 1
    // at least, more when the environment asks for it (`hipfile stats -- hipfile cp` sets 3).
    options.env.stats_level = Some(counting_level(options.env.stats_level));
    if let Some(list) = &args.backend {
        options.selection = Some(list.clone());
    }
    options
}

/// The copy while it is written: a hidden file of a short name of its own in DST's directory,
/// removed when dropped (a failure) and before the process ends on a signal. The file goes
/// first: its fields drop in this order.
pub(crate) struct Temporary {
    pub(crate) file: tempfile::NamedTempFile,
    removal: Removal,
}

impl Temporary {
    fn new(plan: &Plan) -> Result<Temporary, String> {
        Temporary::in_dir(&plan.dir, plan.mode)
    }

    /// A temporary copy in `dir` with the permission bits `mode` (less the umask).
    pub(crate) fn in_dir(dir: &Path, mode: u32) -> Result<Temporary, String> {
        let file = tempfile::Builder::new()
            .prefix(TEMPORARY_PREFIX)
            .permissions(Permissions::from_mode(mode))
            .tempfile_in(dir)
            .map_err(|e| format!("cannot create a file in {}: {e}", shown(dir)))?;
        let removal = Removal::arm(file.path());
        Ok(Temporary { file, removal })
    }

    /// Rename the copy to DST (over it when `replaces`), out of reach of a signal's clean-up.
    pub(crate) fn persist(self, dst: &Path, replaces: bool) -> Result<(), String> {
        let Temporary { file, removal } = self;
        removal
            .keep_with(|| {
                if replaces {
                    file.persist(dst).map(drop)
                } else {
                    file.persist_noclobber(dst).map(drop)
                }
            })
            .map_err(|e| format!("renaming the copy to {}: {}", shown(dst), e.error))
    }
}

fn copy(plan: &Plan, options: DriverOptions, args: &CpArgs, chunk: usize) -> Result<Done, String> {
    let driver = Driver::with_options(options).map_err(|e| format!("opening hipfile: {e}"))?;
    let tmp = Temporary::new(plan)?;
    if plan.replaces {
        // The replaced file's bits exactly, not less the umask.
        std::fs::set_permissions(tmp.file.path(), Permissions::from_mode(plan.mode))
            .map_err(|e| format!("setting the copy's permissions: {e}"))?;
    }
    let bar = progress_bar(plan.size);
    let started = Instant::now();
    let mut moved_by = Vec::new();
    let mut log = ReadLog::default();
    let seconds;
    let mut verify_seconds = None;
    let bytes;
    let mut not_the_size = None;
    let mut verified_against = None;
    {
        let src = driver
            .register_file(&plan.src_file)
            .map_err(|e| format!("registering {}: {e}", shown(&plan.src)))?;
        let dst = driver
            .register_file(tmp.file.as_file())
            .map_err(|e| format!("registering the copy: {e}"))?;
        let until_eof = matches!(plan.extent, Extent::UntilEof(_));
        if plan.size > 0 || until_eof {
            let rounded = plan.size.div_ceil(ALIGN as u64) * ALIGN as u64;
            let least = if until_eof { UNSIZED_BUFFER as u64 } else { 1 };
            let len = (chunk as u64).min(rounded.max(least)) as usize;
            let buf = driver.alloc(len.max(1)).map_err(|e| e.to_string())?;
            let buf = driver.register_buffer(buf).map_err(|e| e.to_string())?;
            let mut mover = Mover {
                src: &src,
                dst: &dst,
                buf,
                bar: &bar,
            };
            let logging = args.verify.then_some(&mut log);
            // How far the copy reached, and how much of it a check may read SRC again for.
            let (reached, reread_to) = match &plan.extent {
                Extent::UntilEof(why) => {
                    not_the_size = Some(format!("{why}: copied until its reads ended"));
                    (mover.copy_until_eof(0, logging, &plan.src)?, 0)
                }
                Extent::Sized => {
                    let mut ended = None;
                    for (start, end) in data_regions(&plan.src_file, plan.size) {
                        ended = mover.copy_range(start, end, &plan.src)?;
                        if ended.is_some() {
                            break;
                        }
                    }
                    match ended {
                        Some(at) => {
                            not_the_size = Some(ended_early(plan, at)?);
                            (at, at)
                        }
                        None if has_bytes_at(&plan.src_file, plan.size, &plan.src)? => {
                            let at = mover.copy_until_eof(plan.size, logging, &plan.src)?;
                            not_the_size = Some(format!(
                                "it grew from {} bytes while being copied: copied until its \
                                 reads ended",
                                plan.size
                            ));
                            (at, plan.size)
                        }
                        None => (plan.size, plan.size),
                    }
                }
            };
            bytes = reached;
            finish(&tmp.file, bytes)?;
            seconds = started.elapsed().as_secs_f64();
            moved_by = moved(&driver);
            if args.verify {
                let verifying = Instant::now();
                bar.set_length(bytes);
                mover.verify(&plan.src_file, reread_to, &log, plan)?;
                verify_seconds = Some(verifying.elapsed().as_secs_f64());
                verified_against = Some(match (reread_to > 0, !log.reads.is_empty()) {
                    (true, true) => "source+reads",
                    (false, true) => "reads",
                    _ => "source",
                });
            }
        } else {
            bytes = 0;
            finish(&tmp.file, 0)?;
            seconds = started.elapsed().as_secs_f64();
            // Nothing to compare: the copy is empty, as its length says.
            verify_seconds = args.verify.then_some(0.0);
            verified_against = args.verify.then_some("source");
        }
    }
    bar.finish_and_clear();
    tmp.persist(&plan.dst, plan.replaces)?;
    // The rename itself is durable once the directory is.
    File::open(&plan.dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| format!("flushing {}: {e}", shown(&plan.dir)))?;
    Ok(Done {
        bytes,
        not_the_size,
        verified_against,
        seconds,
        moved_by,
        verify_seconds,
    })
}

/// What it means that SRC's reads ended at `at`, before its size: it shrank while being
/// copied (an error), or its size is not what reading it gives (the copy ends there).
fn ended_early(plan: &Plan, at: u64) -> Result<String, String> {
    let mut file = plan
        .src_file
        .try_clone()
        .map_err(|e| format!("cannot size {}: {e}", shown(&plan.src)))?;
    let now = current_size(&mut file, plan.block, &plan.src)?;
    if now < plan.size {
        return Err(format!(
            "{} shrank while being copied: it had {} bytes when the copy started and has {now} \
             now (its reads ended at byte {at})",
            shown(&plan.src),
            plan.size
        ));
    }
    Ok(format!(
        "its reads end at byte {at}, before the {} bytes its size says (a size that is not \
         what reading it gives): copied until its reads ended",
        plan.size
    ))
}

/// Give the copy its length (a trailing hole has no data to write) and flush it.
pub(crate) fn finish(tmp: &tempfile::NamedTempFile, size: u64) -> Result<(), String> {
    tmp.as_file()
        .set_len(size)
        .and_then(|()| tmp.as_file().sync_all())
        .map_err(|e| format!("flushing the copy: {e}"))
}

/// The backends that moved bytes so far, from the driver's counters.
pub(crate) fn moved(driver: &Driver) -> Vec<BackendCounts> {
    driver
        .stats()
        .map(|s| s.backends.into_iter().filter(|b| b.ops > 0).collect())
        .unwrap_or_default()
}

/// `direct`, `staged`, `direct+staged`, or `none`: the paths the bytes took.
pub(crate) fn path_taken(moved_by: &[BackendCounts]) -> &'static str {
    let direct = moved_by.iter().any(|b| b.path == IoPath::Direct);
    let staged = moved_by.iter().any(|b| b.path == IoPath::Staged);
    match (direct, staged) {
        (true, true) => "direct+staged",
        (true, false) => "direct",
        (false, true) => "staged",
        (false, false) => "none",
    }
}

pub(crate) fn gbps(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 / seconds / 1e9
    } else {
        0.0
    }
}

/// The `--json` object.
fn summary_json(plan: &Plan, done: &Done, chunk: usize, platform: &str) -> Value {
    json!({
        "source": shown(&plan.src),
        "destination": shown(&plan.dst),
        "bytes": done.bytes,
        "reported_size": plan.size,
        "read_until_eof": matches!(plan.extent, Extent::UntilEof(_)),
        "seconds": done.seconds,
        "gbps": gbps(done.bytes, done.seconds),
        "path": path_taken(&done.moved_by),
        "backends": done.moved_by.iter().map(|b| json!({
            "name": b.name,
            "path": b.path.name(),
            "ops": b.ops,
            "bytes": b.bytes,
        })).collect::<Vec<_>>(),
        "chunk": chunk,
        "platform": platform,
        "verified": done.verify_seconds.is_some(),
        "verified_against": done.verified_against,
        "verify_seconds": done.verify_seconds,
    })
}

/// The summary line.
fn summary_line(plan: &Plan, done: &Done) -> String {
    let verified = match done.verified_against {
        Some("source") => "verified byte for byte",
        Some(_) => "verified byte for byte against what its reads gave",
        None => "not verified (--verify checks it)",
    };
    let (src, dst) = (shown(&plan.src), shown(&plan.dst));
    if done.moved_by.is_empty() {
        return format!("copied {src} to {dst}: 0 bytes (an empty file, no IO); {verified}");
    }
    let why = done
        .not_the_size
        .as_ref()
        .map_or_else(String::new, |w| format!("; {w}"));
    format!(
        "copied {src} to {dst}: {} bytes in {:.3} s, {:.2} GB/s, path {}{why}; {verified}",
        done.bytes,
        done.seconds,
        gbps(done.bytes, done.seconds),
        paths_and_requests(&done.moved_by),
    )
}

/// `staged (fallback 3 requests, host 1 request)`: the paths the bytes took and the requests
/// each backend ran, as the copy reports say it.
pub(crate) fn paths_and_requests(moved_by: &[BackendCounts]) -> String {
    let each: Vec<String> = moved_by
        .iter()
        .map(|b| {
            let requests = if b.ops == 1 { "request" } else { "requests" };
            format!("{} {} {requests}", b.name, b.ops)
        })
        .collect();
    format!("{} ({})", path_taken(moved_by), each.join(", "))
}

/// Run `hipfile cp`; `Ok(true)` when the copy is in place (and matched, with `--verify`).
pub fn run(args: &CpArgs) -> Result<bool, String> {
    crate::signals::install()?;
    let chunk = chunk_bytes(args.chunk)?;
    #[cfg(feature = "remote")]
    if args.remote.given() {
        return Err(
            "--request-size and --connections apply to remote objects: neither SRC nor DST is \
             one"
            .into(),
        );
    }
    let plan = Plan::new(&args.src, &args.dst, args.force)?;
    let pick = pick_runtime(args.platform.as_deref(), args.verbose)?;
    eprintln!("hipfile cp: {}", pick.how);
    for line in &pick.passed_over {
        eprintln!("  {line}");
    }
    let platform = pick.gpu.info().platform.to_string();
    let done = copy(&plan, driver_options(pick.gpu, args), args, chunk)?;
    let summary = if args.json {
        summary_json(&plan, &done, chunk, &platform).to_string()
    } else {
        summary_line(&plan, &done)
    };
    // A closed or full stdout is an error to report, not a panic; the copy is in place.
    writeln!(std::io::stdout().lock(), "{summary}").map_err(|e| {
        format!(
            "the copy is in place at {}, but its summary could not be written: {e}",
            shown(&plan.dst)
        )
    })?;
    Ok(true)
}

/// Write the first `got` bytes of `buf` to `dst` at `off`: the aligned part and the tail as two
/// writes, so the tail alone leaves the direct path.
pub(crate) fn put(
    dst: &FileHandle,
    buf: &RegisteredBuffer<DeviceBuffer>,
    got: usize,
    off: u64,
) -> Result<(), String> {
    let head = if got >= ALIGN { got / ALIGN * ALIGN } else { 0 };
    for (from, to) in [(0, head), (head, got)] {
        if to > from {
            let at = off + from as u64;
            let part = buf.slice(from..to).map_err(|e| e.to_string())?;
            let wrote = dst
                .write(part, at)
                .map_err(|e| format!("writing the copy at byte {at}: {e}"))?;
            if wrote != to - from {
                return Err(format!(
                    "writing the copy at byte {at}: {wrote} of {} bytes written",
                    to - from
                ));
            }
        }
    }
    Ok(())
}

/// Where a copy goes on this machine: `dst`, or `dst/NAME` when `dst` is a directory (`name`
/// answers NAME), and the directory it lands in, which must exist.
pub(crate) fn destination(
    dst: &Path,
    name: impl FnOnce() -> Result<std::ffi::OsString, String>,
) -> Result<(PathBuf, PathBuf), String> {
    let mut path = dst.to_path_buf();
    match std::fs::metadata(&path) {
        Ok(m) if m.is_dir() => path.push(name()?),
        _ if dst.as_os_str().as_bytes().ends_with(b"/") => {
            return Err(format!("{} is not a directory", shown(dst)));
        }
        _ => {}
    }
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => Ok((path, dir)),
        Ok(_) => Err(format!("{} is not a directory", shown(&dir))),
        Err(e) => Err(format!(
            "the destination directory {} is not there: {e}",
            shown(&dir)
        )),
    }
}

/// Whether the copy replaces a file at `path` (only with `force`, and only a regular file or a
/// link), and the mode the copy gets: the replaced file's, else `new_mode`.
pub(crate) fn replaced(path: &Path, force: bool, new_mode: u32) -> Result<(bool, u32), String> {
    match std::fs::symlink_metadata(path) {
        Err(_) => Ok((false, new_mode)),
        Ok(m) if m.is_dir() => Err(format!("{} is a directory", shown(path))),
        Ok(_) if !force => Err(format!("{} exists: --force replaces it", shown(path))),
        Ok(m) if m.is_file() => Ok((true, m.permissions().mode() & 0o7777)),
        Ok(m) if m.file_type().is_symlink() => Ok((true, new_mode)),
        Ok(_) => Err(format!(
            "{} is not a regular file: cp replaces only files",
            shown(path)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_stay_aligned_and_under_the_per_call_limit() {
        assert_eq!(chunk_bytes(64 << 20), Ok(64 << 20));
        assert_eq!(chunk_bytes(4097), Ok(4096));
        assert_eq!(chunk_bytes(3 * 4096 + 5), Ok(3 * 4096));
        assert_eq!(chunk_bytes(100), Ok(100));
        assert_eq!(chunk_bytes(MAX_CALL_BYTES), Ok(MAX_CALL_BYTES));
        let e = chunk_bytes(2 << 30).unwrap_err();
        assert!(e.contains("too large"), "{e}");
    }

    #[test]
    fn a_copy_counts_at_level_1_or_what_the_environment_asks_for() {
        assert_eq!(counting_level(None), 1);
        assert_eq!(counting_level(Some(0)), 1);
        assert_eq!(counting_level(Some(3)), 3);
    }

    #[test]
    fn the_path_taken_names_each_kind_of_backend_that_moved_bytes() {
        let counts = |name, path| BackendCounts {
            name,
            path,
            ops: 1,
            bytes: 4096,
            errors: 0,
            declines: Vec::new(),
            failovers: Vec::new(),
            mechanism: None,
            counters: Vec::new(),
        };
        assert_eq!(path_taken(&[]), "none");
        assert_eq!(path_taken(&[counts("fastpath", IoPath::Direct)]), "direct");
        assert_eq!(path_taken(&[counts("fallback", IoPath::Staged)]), "staged");
        assert_eq!(
            path_taken(&[
                counts("fastpath", IoPath::Direct),
                counts("fallback", IoPath::Staged)
            ]),
            "direct+staged"
        );
    }

    #[test]
    fn verify_names_the_first_byte_that_differs_and_a_short_copy() {
        use hipfile_hip::sim::SimRuntime;
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("a");
        let bytes: Vec<u8> = (0..20_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        std::fs::write(&src, &bytes).unwrap();
        let plan = Plan::new(&src, &dir.path().join("b"), false).unwrap();
        let copy_path = dir.path().join("c");
        std::fs::write(&copy_path, &bytes).unwrap();
        let copy = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&copy_path)
            .unwrap();
        let gpu: Arc<dyn GpuRuntime> = Arc::new(SimRuntime::default());
        let driver = Driver::with_options(DriverOptions::with_runtime(gpu)).unwrap();
        let src_handle = driver.register_file(&plan.src_file).unwrap();
        let dst_handle = driver.register_file(&copy).unwrap();
        let bar = ProgressBar::hidden();
        let mut mover = Mover {
            src: &src_handle,
            dst: &dst_handle,
            buf: driver.register_buffer(driver.alloc(8192).unwrap()).unwrap(),
            bar: &bar,
        };
        let nothing = ReadLog::default();
        mover
            .verify(&plan.src_file, 20_000, &nothing, &plan)
            .unwrap();

        // What the copy read, noted as it read it, checks the bytes SRC is not read again for.
        let mut log = ReadLog::default();
        mover.read_back(8192, 8192, &plan).unwrap();
        log.note(&mover.buf, 8192, 8192).unwrap();
        mover.verify(&plan.src_file, 8192, &log, &plan).unwrap();

        copy.write_all_at(&[!bytes[12_345]], 12_345).unwrap();
        let e = mover
            .verify(&plan.src_file, 20_000, &nothing, &plan)
            .unwrap_err();
        assert!(
            e.contains("differs from") && e.ends_with("at byte 12345"),
            "{e}"
        );
        let e = mover.verify(&plan.src_file, 8192, &log, &plan).unwrap_err();
        assert!(
            e.contains("differs from what was read from") && e.ends_with("in bytes 8192..16384"),
            "{e}"
        );

        copy.set_len(15_000).unwrap();
        let e = mover
            .verify(&plan.src_file, 20_000, &nothing, &plan)
            .unwrap_err();
        assert!(e.contains("the copy ends at byte 15000"), "{e}");
    }

    #[test]
    fn reads_that_end_before_the_size_tell_a_file_that_shrank_from_one_whose_size_says_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("a");
        std::fs::write(&src, vec![1u8; 10_000]).unwrap();
        let plan = Plan::new(&src, &dir.path().join("b"), false).unwrap();
        assert_eq!(plan.extent, Extent::Sized);
        // The size stayed: the copy ends where the reads ended, and says why.
        let why = ended_early(&plan, 23).unwrap();
        assert!(
            why.starts_with("its reads end at byte 23, before the 10000 bytes its size says"),
            "{why}"
        );
        // The size went down: it shrank while being copied.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&src)
            .unwrap()
            .set_len(5_000)
            .unwrap();
        let e = ended_early(&plan, 5_000).unwrap_err();
        assert!(
            e.contains(
                "shrank while being copied: it had 10000 bytes when the copy started and has \
                 5000 now (its reads ended at byte 5000)"
            ),
            "{e}"
        );
    }

    #[test]
    fn kernel_files_and_files_whose_size_reads_as_0_are_read_until_their_reads_end() {
        let dir = tempfile::tempdir().unwrap();
        let to = dir.path().join("x");
        for path in ["/proc/version", "/sys/devices/system/cpu/online"] {
            let plan = Plan::new(Path::new(path), &to, false).unwrap();
            assert!(
                matches!(&plan.extent, Extent::UntilEof(why) if why.starts_with("a file of ")),
                "{path}: {:?}",
                plan.extent
            );
        }
        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(Plan::new(&empty, &to, false).unwrap().extent, Extent::Sized);
    }

    #[test]
    fn a_file_that_grew_while_being_copied_is_copied_to_its_new_end() {
        let dir = tempfile::tempdir().unwrap();
        let (src, dst) = (dir.path().join("a"), dir.path().join("b"));
        let before: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&src, &before).unwrap();
        let args = CpArgs {
            src: src.clone(),
            dst: dst.clone(),
            force: false,
            verify: true,
            chunk: 64 << 10,
            json: false,
            platform: None,
            backend: Some("fallback".into()),
            verbose: false,
            #[cfg(feature = "remote")]
            remote: Default::default(),
        };
        let plan = Plan::new(&src, &dst, false).unwrap();
        let grown = [&before[..], &[7u8; 5000][..]].concat();
        std::fs::write(&src, &grown).unwrap();
        let gpu: Arc<dyn GpuRuntime> = Arc::new(hipfile_hip::sim::SimRuntime::default());
        let done = copy(&plan, driver_options(gpu, &args), &args, args.chunk).unwrap();
        assert_eq!(done.bytes, 105_000);
        assert_eq!(done.verified_against, Some("source+reads"));
        let why = done.not_the_size.unwrap();
        assert!(why.starts_with("it grew from 100000 bytes"), "{why}");
        assert_eq!(std::fs::read(&dst).unwrap(), grown);
    }

    /// Copy `size` bytes from `a` to `b` in `dir` (over an old `b` when `old` is given, with
    /// `--force`) on the sim's staged engine, through `io`; returns what the copy returned.
    fn copy_through(
        dir: &Path,
        size: usize,
        old: Option<&[u8]>,
        io: hipfile_testkit::faults::ScriptedIo,
    ) -> Result<Done, String> {
        let src = dir.join("a");
        let dst = dir.join("b");
        std::fs::write(&src, vec![0x5a; size]).unwrap();
        if let Some(old) = old {
            std::fs::write(&dst, old).unwrap();
        }
        let args = CpArgs {
            src: src.clone(),
            dst: dst.clone(),
            force: old.is_some(),
            verify: true,
            chunk: 64 << 10,
            json: false,
            platform: None,
            backend: Some("fallback".into()),
            verbose: false,
            #[cfg(feature = "remote")]
            remote: Default::default(),
        };
        let plan = Plan::new(&src, &dst, args.force).unwrap();
        let gpu: Arc<dyn GpuRuntime> = Arc::new(hipfile_hip::sim::SimRuntime::default());
        let mut options = driver_options(gpu, &args);
        options.io = Arc::new(io);
        copy(&plan, options, &args, args.chunk)
    }

    #[test]
    fn a_failed_write_or_read_leaves_no_destination_and_no_temporary_file() {
        use hipfile_testkit::faults::ScriptedIo;
        use rustix::io::Errno;
        for (what, io) in [
            (
                "writing the copy",
                ScriptedIo::new().fail_pwrites_from(5, Errno::NOSPC),
            ),
            ("reading", ScriptedIo::new().fail_preads_from(5, Errno::IO)),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let e = copy_through(dir.path(), 1 << 20, None, io).unwrap_err();
            assert!(e.contains(what), "{e}");
            let names: Vec<_> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            assert_eq!(names, ["a"], "{what}");
        }
        // Replacing a file: a failure leaves the old one as it was.
        let dir = tempfile::tempdir().unwrap();
        let io = ScriptedIo::new().fail_pwrites_from(3, Errno::NOSPC);
        copy_through(dir.path(), 1 << 20, Some(b"old"), io).unwrap_err();
        assert_eq!(std::fs::read(dir.path().join("b")).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
        // The same copy with nothing failing is in place.
        let dir = tempfile::tempdir().unwrap();
        let done = copy_through(dir.path(), 1 << 20, Some(b"old"), ScriptedIo::new()).unwrap();
        assert!(done.verify_seconds.is_some());
        assert_eq!(path_taken(&done.moved_by), "staged");
        assert_eq!(
            std::fs::read(dir.path().join("b")).unwrap(),
            vec![0x5a; 1 << 20]
        );
    }

    #[test]
    fn holes_are_left_out_of_the_ranges_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sparse");
        let file = File::create(&path).unwrap();
        let mib = 1u64 << 20;
        file.set_len(8 * mib).unwrap();
        file.write_all_at(b"head", 0).unwrap();
        file.write_all_at(b"middle", 4 * mib + 10).unwrap();
        file.sync_all().unwrap();
        let regions = data_regions(&file, 8 * mib);
        let covered: u64 = regions.iter().map(|(s, e)| e - s).sum();
        // Every written byte is in a range, on 4 KiB boundaries.
        for at in [0, 3, 4 * mib + 10, 4 * mib + 15] {
            assert!(
                regions.iter().any(|(s, e)| *s <= at && at < *e),
                "{at}: {regions:?}"
            );
        }
        assert!(regions.iter().all(|(s, _)| s % 4096 == 0), "{regions:?}");
        // A filesystem that keeps holes reports them, and they are skipped; one that fills
        // them has data everywhere.
        if file.metadata().unwrap().blocks() * 512 < 8 * mib {
            assert!(covered <= 2 * mib, "{regions:?}");
        } else {
            assert_eq!(covered, 8 * mib, "{regions:?}");
        }
        assert!(data_regions(&file, 0).is_empty());
    }
}
