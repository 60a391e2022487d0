//! `hipfile cp` with a remote object on one side (or both): object -> GPU memory -> file,
//! file -> GPU memory -> object, object -> GPU memory -> object.
//!
//! The bytes go through one device buffer of `--chunk` bytes, as for a local copy: a remote
//! source is read into it by ranged requests in parallel (hipfile-remote's `RemoteFile::read`),
//! a local source through hipfile-rs (the fastpath or the staged engine); a local destination is
//! written from it through hipfile-rs, an `s3://` destination is a multipart upload from it
//! (`RemoteWriter`), completed only when every byte was sent.
//!
//! - **Never a partial destination.** A local copy is written to a hidden temporary file next
//!   to DST, flushed, checked with `--verify`, and renamed only then (as a local copy is); an
//!   upload that fails, or is interrupted, is aborted, and the object keeps what it held. A
//!   remote source is read to the size it reported when opened: an object that ends before it
//!   (it shrank) fails the copy.
//! - **Overwriting.** An existing DST, file or object, is replaced only with `--force` (an
//!   `s3://` DST is looked up first); DST may be an existing directory, the copy then named by
//!   the last segment of the URL's path. Only `s3://` objects can be written.
//! - **`--verify`** reads the copy back (the file through hipfile-rs, the object by ranged
//!   requests into GPU memory) and compares it byte for byte with SRC read again (a file by
//!   `pread`, an object by ranged requests into host memory).
//! - **Output** as a local copy's: a progress bar on a terminal, one summary line or `--json`
//!   (the same fields, plus `request_size`, `connections` and `remote`: the copy's counters
//!   of the remote path, its check left out), `path` and `backends` for the bytes the local
//!   side moved through hipfile-rs.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{FileExt, FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Instant;

use hipfile::{AsDevice, AsDeviceMut, Driver, FileHandle, RegisteredBuffer};
use hipfile_core::BackendCounts;
use hipfile_hip::DeviceBuffer;
use hipfile_remote::{RemoteError, RemoteFile, RemoteOptions, RemoteWriter};
use indicatif::ProgressBar;
use serde_json::{json, Value};

use crate::cp::{
    destination, digest_of, driver_options, finish, gbps, moved, path_taken, paths_and_requests,
    progress_bar, put, replaced, shown, CpArgs, Temporary, ALIGN,
};
use crate::location::{is_s3, object_name, Location};
use crate::platform::pick_runtime;

/// The source of a copy, checked before anything is written.
enum SourcePlan {
    File {
        path: PathBuf,
        file: File,
        size: u64,
    },
    Object(String),
}

/// The destination of a copy, checked before anything is written.
enum SinkPlan {
    File {
        path: PathBuf,
        /// Its directory, where the temporary copy is made.
        dir: PathBuf,
        replaces: bool,
        mode: u32,
    },
    Object(String),
}

impl SinkPlan {
    fn shown(&self) -> String {
        match self {
            SinkPlan::File { path, .. } => shown(path),
            SinkPlan::Object(url) => url.clone(),
        }
    }
}

fn source_plan(src: Location<'_>) -> Result<SourcePlan, String> {
    match src {
        Location::Object(url) => Ok(SourcePlan::Object(url.to_string())),
        Location::Local(path) => {
            let meta =
                std::fs::metadata(path).map_err(|e| format!("cannot read {}: {e}", shown(path)))?;
            let kind = meta.file_type();
            if kind.is_dir() {
                return Err(format!(
                    "{} is a directory: cp copies one file",
                    shown(path)
                ));
            }
            if !kind.is_file() && !kind.is_block_device() {
                return Err(format!(
                    "{} is neither a regular file nor a block device",
                    shown(path)
                ));
            }
            let file = File::open(path).map_err(|e| format!("cannot open {}: {e}", shown(path)))?;
            let size = if kind.is_block_device() {
                use std::io::Seek;
                (&file)
                    .seek(std::io::SeekFrom::End(0))
                    .map_err(|e| format!("cannot size {}: {e}", shown(path)))?
            } else {
                meta.len()
            };
            Ok(SourcePlan::File {
                path: path.to_path_buf(),
                file,
                size,
            })
        }
    }
}

/// Where a copy of the object `url` goes on this machine: `dst`, or `dst/NAME` when `dst` is a
/// directory (NAME: the last segment of the URL's path).
fn local_sink_plan(dst: &Path, url: &str, force: bool) -> Result<SinkPlan, String> {
    let (path, dir) = destination(dst, || {
        object_name(url).map(Into::into).ok_or_else(|| {
            format!(
                "{url} has no name to copy it under into the directory {}: name the file",
                shown(dst)
            )
        })
    })?;
    // A new file gets 0666 less the umask, as a download does; a replaced one keeps its bits.
    let (replaces, mode) = replaced(&path, force, 0o666)?;
    Ok(SinkPlan::File {
        path,
        dir,
        replaces,
        mode,
    })
}

/// The source while it is read.
enum Source {
    File {
        path: PathBuf,
        file: File,
        /// Its size when the copy started.
        size: u64,
        handle: FileHandle,
    },
    Object {
        url: String,
        object: RemoteFile,
    },
}

impl Source {
    /// Read up to `want` bytes at `off` into the start of `buf`; the bytes read (0: the end).
    fn read(
        &self,
        buf: &mut RegisteredBuffer<DeviceBuffer>,
        want: usize,
        off: u64,
    ) -> Result<usize, String> {
        match self {
            Source::File { path, handle, .. } => {
                // Rounded up to 4 KiB within the buffer: the last read of a file whose size is
                // not a multiple of it stays on the direct IO alignment (it comes back short).
                let ask = want.div_ceil(ALIGN).saturating_mul(ALIGN).min(buf.len());
                let window = buf.slice_mut(..ask).map_err(|e| e.to_string())?;
                let got = handle
                    .read(window, off)
                    .map_err(|e| format!("reading {} at byte {off}: {e}", shown(path)))?;
                Ok(got.min(want))
            }
            Source::Object { object, .. } => {
                let window = buf.slice_mut(..want).map_err(|e| e.to_string())?;
                object
                    .read(window, off)
                    .map_err(|e| format!("reading at byte {off}: {e}"))
            }
        }
    }

    /// Read `host.len()` bytes at `off` into host memory, outside the copy's path: what the
    /// check compares the copy with. An error when they are not all there.
    fn read_again(&self, host: &mut [u8], off: u64) -> Result<(), String> {
        match self {
            Source::File { path, file, .. } => file
                .read_exact_at(host, off)
                .map_err(|e| format!("reading {} at byte {off}: {e}", shown(path))),
            Source::Object { url, object } => {
                let got = object
                    .read_host(host, off)
                    .map_err(|e| format!("reading again at byte {off}: {e}"))?;
                if got != host.len() {
                    return Err(format!(
                        "verify failed: {url} ends at byte {}, before the {} bytes copied",
                        off + got as u64,
                        off + host.len() as u64
                    ));
                }
                Ok(())
            }
        }
    }

    fn shown(&self) -> String {
        match self {
            Source::File { path, .. } => shown(path),
            Source::Object { url, .. } => url.clone(),
        }
    }
}

/// The destination while it is written.
enum Sink {
    File {
        tmp: Temporary,
        handle: FileHandle,
        path: PathBuf,
        dir: PathBuf,
        replaces: bool,
    },
    Object {
        url: String,
        /// Boxed: an upload in flight holds its parts' state, far larger than a file's.
        writer: Box<RemoteWriter>,
    },
}

impl Sink {
    /// Write the first `got` bytes of `buf` at `off` (an upload takes them in order).
    fn put(
        &mut self,
        buf: &RegisteredBuffer<DeviceBuffer>,
        got: usize,
        off: u64,
    ) -> Result<(), String> {
        match self {
            Sink::File { handle, .. } => put(handle, buf, got, off),
            Sink::Object { writer, .. } => {
                let part = buf.slice(..got).map_err(|e| e.to_string())?;
                writer
                    .write(part)
                    .map_err(|e| format!("uploading byte {off} on: {e}"))?;
                Ok(())
            }
        }
    }
}

/// What a copy did.
struct Done {
    bytes: u64,
    /// The size SRC reported when the copy started.
    reported_size: u64,
    seconds: f64,
    moved_by: Vec<BackendCounts>,
    /// The remote path's counters when the copy was complete (its check left out).
    remote: Vec<(&'static str, u64)>,
    verify_seconds: Option<f64>,
}

/// Run `hipfile cp` with a remote object as `src` or `dst` (or both); `chunk` is the checked
/// `--chunk`.
pub fn run(
    args: &CpArgs,
    src: Location<'_>,
    dst: Location<'_>,
    chunk: usize,
) -> Result<bool, String> {
    let options = super::options(&args.remote)?;
    // Everything that can be refused without the network is refused first.
    let sink_plan = match (dst, src) {
        (Location::Object(url), _) if !is_s3(url) => {
            return Err(format!(
                "{url}: only s3:// objects can be written (an http(s) URL is read-only)"
            ))
        }
        (Location::Object(url), _) => SinkPlan::Object(url.to_string()),
        (Location::Local(path), Location::Object(url)) => local_sink_plan(path, url, args.force)?,
        (Location::Local(_), Location::Local(_)) => {
            return Err("neither SRC nor DST is a remote object".into())
        }
    };
    let source_plan = source_plan(src)?;
    let pick = pick_runtime(args.platform.as_deref(), args.verbose)?;
    eprintln!("hipfile cp: {}", pick.how);
    for line in &pick.passed_over {
        eprintln!("  {line}");
    }
    let platform = pick.gpu.info().platform.to_string();
    let driver = Driver::with_options(driver_options(pick.gpu, args))
        .map_err(|e| format!("opening hipfile: {e}"))?;
    let destination = sink_plan.shown();
    let source = open_source(&driver, source_plan, &options)?;
    let done = copy(&driver, &source, sink_plan, &options, args, chunk)?;
    let summary = if args.json {
        summary_json(
            &source.shown(),
            &destination,
            &done,
            chunk,
            &options,
            &platform,
        )
        .to_string()
    } else {
        summary_line(&source.shown(), &destination, &done)
    };
    writeln!(std::io::stdout().lock(), "{summary}").map_err(|e| {
        format!("the copy is in place at {destination}, but its summary could not be written: {e}")
    })?;
    Ok(true)
}

fn open_source(
    driver: &Driver,
    plan: SourcePlan,
    options: &RemoteOptions,
) -> Result<Source, String> {
    match plan {
        SourcePlan::File { path, file, size } => {
            let handle = driver
                .register_file(&file)
                .map_err(|e| format!("registering {}: {e}", shown(&path)))?;
            Ok(Source::File {
                path,
                file,
                size,
                handle,
            })
        }
        SourcePlan::Object(url) => {
            let object = RemoteFile::open(driver, &url, options.clone())
                .map_err(|e| format!("cannot open {e}"))?;
            Ok(Source::Object { url, object })
        }
    }
}

/// Refuse to replace the object `url` without `--force`: it is looked up first.
fn check_object_absent(
    driver: &Driver,
    url: &str,
    options: &RemoteOptions,
    force: bool,
) -> Result<(), String> {
    if force {
        return Ok(());
    }
    match RemoteFile::open(driver, url, options.clone()) {
        Ok(_) => Err(format!("{url} exists: --force replaces it")),
        Err(RemoteError::NotFound { .. }) => Ok(()),
        Err(e) => Err(format!("looking up the destination: {e}")),
    }
}

fn open_sink(
    driver: &Driver,
    plan: SinkPlan,
    options: &RemoteOptions,
    force: bool,
) -> Result<Sink, String> {
    match plan {
        SinkPlan::File {
            path,
            dir,
            replaces,
            mode,
        } => {
            let tmp = Temporary::in_dir(&dir, mode)?;
            if replaces {
                // The replaced file's bits exactly, not less the umask.
                std::fs::set_permissions(tmp.file.path(), std::fs::Permissions::from_mode(mode))
                    .map_err(|e| format!("setting the copy's permissions: {e}"))?;
            }
            let handle = driver
                .register_file(tmp.file.as_file())
                .map_err(|e| format!("registering the copy: {e}"))?;
            Ok(Sink::File {
                tmp,
                handle,
                path,
                dir,
                replaces,
            })
        }
        SinkPlan::Object(url) => {
            check_object_absent(driver, &url, options, force)?;
            let writer = RemoteWriter::create(driver, &url, options.clone())
                .map_err(|e| format!("starting the upload: {e}"))?;
            Ok(Sink::Object {
                url,
                writer: Box::new(writer),
            })
        }
    }
}

fn copy(
    driver: &Driver,
    source: &Source,
    sink_plan: SinkPlan,
    options: &RemoteOptions,
    args: &CpArgs,
    chunk: usize,
) -> Result<Done, String> {
    let reported_size = match source {
        Source::File { size, .. } => *size,
        Source::Object { object, .. } => object.nbytes(),
    };
    let mut sink = open_sink(driver, sink_plan, options, args.force)?;
    // A file is read until its reads end (it may have grown); an object to its size.
    let sized = matches!(source, Source::Object { .. });
    let rounded = reported_size.div_ceil(ALIGN as u64) * ALIGN as u64;
    let len = if sized {
        (chunk as u64).min(rounded.max(1))
    } else {
        chunk as u64
    } as usize;
    let mut buf = driver
        .register_buffer(driver.alloc(len.max(1)).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let bar = progress_bar(reported_size);
    // The lookup of an s3:// DST (a 404 when it is new) is not the copy's.
    let remote_before = remote_counts(driver);
    let started = Instant::now();
    let mut off = 0u64;
    loop {
        let want = if sized {
            (reported_size - off).min(len as u64) as usize
        } else {
            len
        };
        if want == 0 {
            break;
        }
        let got = source.read(&mut buf, want, off)?;
        if got == 0 {
            if sized {
                return Err(format!(
                    "{} ended at byte {off}, before the {reported_size} bytes it had when the \
                     copy started (it shrank)",
                    source.shown()
                ));
            }
            break;
        }
        sink.put(&buf, got, off)?;
        off += got as u64;
        if bar.length().is_some_and(|l| l < off) {
            bar.set_length(off);
        }
        bar.set_position(off);
    }
    let bytes = off;
    // The upload completes (or the copy is flushed) before the clock stops.
    let sink = match sink {
        Sink::Object { url, writer } => {
            let sent = writer
                .finish()
                .map_err(|e| format!("completing the upload: {e}"))?;
            if sent != bytes {
                return Err(format!(
                    "the upload to {url} completed with {sent} bytes, not the {bytes} read"
                ));
            }
            Finished::Object(url)
        }
        Sink::File {
            tmp,
            handle,
            path,
            dir,
            replaces,
        } => {
            finish(&tmp.file, bytes)?;
            Finished::File {
                tmp,
                handle,
                path,
                dir,
                replaces,
            }
        }
    };
    let seconds = started.elapsed().as_secs_f64();
    let moved_by = moved(driver);
    let remote: Vec<(&'static str, u64)> = remote_counts(driver)
        .into_iter()
        .map(|(name, now)| {
            let before = remote_before
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(0, |(_, v)| *v);
            (name, now.saturating_sub(before))
        })
        .collect();
    let mut verify_seconds = None;
    if args.verify {
        let verifying = Instant::now();
        bar.reset();
        bar.set_length(bytes);
        bar.set_message("verifying");
        verify(driver, source, &sink, &mut buf, bytes, options, &bar)?;
        verify_seconds = Some(verifying.elapsed().as_secs_f64());
    }
    bar.finish_and_clear();
    if let Finished::File {
        tmp,
        handle,
        path,
        dir,
        replaces,
    } = sink
    {
        drop(handle);
        tmp.persist(&path, replaces)?;
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| format!("flushing {}: {e}", shown(&dir)))?;
    }
    Ok(Done {
        bytes,
        reported_size,
        seconds,
        moved_by,
        remote,
        verify_seconds,
    })
}

/// The remote path's counters (`requests`, `read_bytes`, `written_bytes`, `retries`,
/// `errors`) now, from the driver's statistics.
fn remote_counts(driver: &Driver) -> Vec<(&'static str, u64)> {
    driver
        .stats()
        .and_then(|s| s.side_path("remote").map(|p| p.counters.clone()))
        .unwrap_or_default()
}

/// The destination once every byte is in it: the flushed temporary file (not yet renamed), or
/// the completed object.
enum Finished {
    File {
        tmp: Temporary,
        handle: FileHandle,
        path: PathBuf,
        dir: PathBuf,
        replaces: bool,
    },
    Object(String),
}

/// Where a check reads the copy back from.
enum Back<'a> {
    File(&'a FileHandle),
    Object(RemoteFile),
}

/// Read the copy back into `buf` a chunk at a time and compare it with SRC read again; the
/// first byte that differs fails the check.
fn verify(
    driver: &Driver,
    source: &Source,
    sink: &Finished,
    buf: &mut RegisteredBuffer<DeviceBuffer>,
    bytes: u64,
    options: &RemoteOptions,
    bar: &ProgressBar,
) -> Result<(), String> {
    let back = match sink {
        Finished::Object(url) => {
            let object = RemoteFile::open(driver, url, options.clone())
                .map_err(|e| format!("opening the copy to check it: {e}"))?;
            if object.nbytes() != bytes {
                return Err(format!(
                    "verify failed: {url} has {} bytes, {} gave {bytes}",
                    object.nbytes(),
                    source.shown()
                ));
            }
            Back::Object(object)
        }
        Finished::File { handle, .. } => Back::File(handle),
    };
    let chunk = buf.len();
    let mut copy = vec![0u8; chunk];
    let mut original = vec![0u8; chunk];
    let mut off = 0u64;
    while off < bytes {
        let want = (bytes - off).min(chunk as u64) as usize;
        let got = match &back {
            Back::Object(object) => {
                let window = buf.slice_mut(..want).map_err(|e| e.to_string())?;
                object
                    .read(window, off)
                    .map_err(|e| format!("reading the copy back at byte {off}: {e}"))?
            }
            Back::File(handle) => {
                let ask = want.div_ceil(ALIGN).saturating_mul(ALIGN).min(chunk);
                let window = buf.slice_mut(..ask).map_err(|e| e.to_string())?;
                handle
                    .read(window, off)
                    .map_err(|e| format!("reading the copy back at byte {off}: {e}"))?
                    .min(want)
            }
        };
        if got != want {
            return Err(format!(
                "verify failed: the copy ends at byte {}, {} gave {bytes} bytes",
                off + got as u64,
                source.shown()
            ));
        }
        buf.read_at(0, &mut copy[..want])
            .map_err(|e| format!("copying GPU memory to the host: {e}"))?;
        source.read_again(&mut original[..want], off)?;
        if digest_of(&copy[..want]) != digest_of(&original[..want]) {
            let i = copy[..want]
                .iter()
                .zip(&original[..want])
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            return Err(format!(
                "verify failed: the copy differs from {} at byte {}",
                source.shown(),
                off + i as u64
            ));
        }
        off += want as u64;
        bar.set_position(off);
    }
    Ok(())
}

fn summary_json(
    source: &str,
    destination: &str,
    done: &Done,
    chunk: usize,
    options: &RemoteOptions,
    platform: &str,
) -> Value {
    json!({
        "source": source,
        "destination": destination,
        "bytes": done.bytes,
        "reported_size": done.reported_size,
        "read_until_eof": false,
        "seconds": done.seconds,
        "gbps": gbps(done.bytes, done.seconds),
        "path": path_taken(&done.moved_by),
        "backends": done.moved_by.iter().map(|b| json!({
            "name": b.name,
            "path": b.path.name(),
            "ops": b.ops,
            "bytes": b.bytes,
        })).collect::<Vec<_>>(),
        "remote": done.remote.iter().map(|(k, v)| (k.to_string(), json!(v)))
            .collect::<serde_json::Map<_, _>>(),
        "chunk": chunk,
        "request_size": options.request_size,
        "connections": options.connections,
        "platform": platform,
        "verified": done.verify_seconds.is_some(),
        "verified_against": done.verify_seconds.map(|_| "source"),
        "verify_seconds": done.verify_seconds,
    })
}

fn summary_line(source: &str, destination: &str, done: &Done) -> String {
    let verified = if done.verify_seconds.is_some() {
        "verified byte for byte"
    } else {
        "not verified (--verify checks it)"
    };
    let local = if done.moved_by.is_empty() {
        String::new()
    } else {
        format!(", local side path {}", paths_and_requests(&done.moved_by))
    };
    let count = |name: &str| {
        done.remote
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v)
    };
    let remote = format!(
        ", remote {} requests, {} retries",
        count("requests"),
        count("retries")
    );
    format!(
        "copied {source} to {destination}: {} bytes in {:.3} s, {:.2} GB/s{remote}{local}; \
         {verified}",
        done.bytes,
        done.seconds,
        gbps(done.bytes, done.seconds),
    )
}
