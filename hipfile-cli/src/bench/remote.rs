//! `hipfile bench --remote URL`: a remote object (`s3://bucket/key`, `http(s)://...`) read
//! whole (or its first `--size` bytes) into GPU memory, `--repeat` times, by hipfile-remote's
//! ranged requests in parallel (`--request-size`, `--connections`), next to the same bytes read
//! into host memory (what the network and the server give without the GPU side).
//!
//! Rows: `remote_read` (into GPU memory: requests -> pinned staging lanes -> device) and
//! `remote_read_host` (into host memory), each in GB/s with the cores the process kept busy,
//! the median of the repetitions. Every timed read is checked: before anything is timed the
//! object is read once into host memory and a digest kept per 64 MiB; the destination is filled
//! with a byte unlike the object's first before each read (a read that moved nothing cannot
//! pass) and compared digest for digest after it. A failed check makes the command exit with
//! status 1 after the report. It runs on the real GPU when the machine has one, else on the
//! simulated GPU, and says so.

use std::io::Write;
use std::sync::Arc;

use hipfile::{AsDeviceMut, Driver, DriverOptions, RegisteredBuffer};
use hipfile_hip::{DeviceBuffer, GpuRuntime, Platform};
use hipfile_remote::RemoteFile;
use serde_json::json;

use super::file::timed;
use super::options::BenchArgs;
use super::rig::progress_bar;
use super::rows::{human_bytes, Rows};
use crate::cp::digest_of;
use crate::report::{legend, table, wrap, REPORT_COLUMNS};
use crate::verify::Ledger;

/// What the figures of a run on the simulated GPU are for.
const SIM_NOTE_REMOTE: &str = "on the simulated GPU, GPU memory is host memory: remote_read \
     against remote_read_host is the cost of the staging lanes, not of a GPU";

/// Bytes per digest of the reference, and per step of a check.
const CHECK_CHUNK: usize = 64 << 20;

/// The object's bytes as the checks know them: a digest per [`CHECK_CHUNK`], and its first
/// byte (the sentinel is unlike it).
struct Reference {
    digests: Vec<u64>,
    first: u8,
}

impl Reference {
    /// Read the first `size` bytes of `object` into host memory, a chunk at a time.
    fn take(object: &RemoteFile, url: &str, size: usize) -> Result<Reference, String> {
        let mut host = vec![0u8; CHECK_CHUNK.min(size)];
        let mut digests = Vec::new();
        let mut first = 0;
        let mut at = 0;
        while at < size {
            let n = CHECK_CHUNK.min(size - at);
            read_host_exact(object, url, &mut host[..n], at)?;
            if at == 0 {
                first = host[0];
            }
            digests.push(digest_of(&host[..n]));
            at += n;
        }
        Ok(Reference { digests, first })
    }

    /// The first chunk of `bytes` (from offset 0) whose digest is not the object's, if any.
    fn differs(
        &self,
        mut chunk_at: impl FnMut(usize, &mut [u8]) -> Result<(), String>,
        size: usize,
    ) -> Result<Option<String>, String> {
        let mut host = vec![0u8; CHECK_CHUNK.min(size)];
        for (i, want) in self.digests.iter().enumerate() {
            let at = i * CHECK_CHUNK;
            let n = CHECK_CHUNK.min(size - at);
            chunk_at(at, &mut host[..n])?;
            if digest_of(&host[..n]) != *want {
                return Ok(Some(format!(
                    "bytes {at}..{} differ from the object's first read",
                    at + n
                )));
            }
        }
        Ok(None)
    }
}

/// Read exactly `buf.len()` bytes of `object` at `at` into host memory.
fn read_host_exact(
    object: &RemoteFile,
    url: &str,
    buf: &mut [u8],
    at: usize,
) -> Result<(), String> {
    let mut done = 0;
    while done < buf.len() {
        let off = (at + done) as u64;
        let got = object
            .read_host(&mut buf[done..], off)
            .map_err(|e| format!("reading at byte {off}: {e}"))?;
        if got == 0 {
            return Err(format!("{url} ended at byte {off}, before its size"));
        }
        done += got;
    }
    Ok(())
}

/// Read exactly `dst.len()` bytes of `object` from offset 0 into the device buffer.
fn read_exact(
    object: &RemoteFile,
    url: &str,
    dst: &mut RegisteredBuffer<DeviceBuffer>,
) -> Result<(), String> {
    let size = dst.len();
    let mut done = 0;
    while done < size {
        let window = dst.slice_mut(done..).map_err(|e| e.to_string())?;
        let got = object
            .read(window, done as u64)
            .map_err(|e| format!("reading at byte {done}: {e}"))?;
        if got == 0 {
            return Err(format!("{url} ended at byte {done}, before its size"));
        }
        done += got;
    }
    Ok(())
}

/// Run the remote benchmark of `url` on `gpu`, the report to `out`; `Ok(false)`: a check
/// failed.
pub(super) fn run(
    args: &BenchArgs,
    url: &str,
    (gpu, how, passed_over): (Arc<dyn GpuRuntime>, &str, &[String]),
    out: &mut dyn Write,
) -> Result<bool, String> {
    let options = crate::remote::options(&args.remote_options)?;
    let platform = gpu.info().platform;
    let mut driver_options = DriverOptions::with_runtime(gpu.clone());
    if let Some(list) = &args.backend {
        driver_options.selection = Some(list.clone());
    }
    let driver = Driver::with_options(driver_options).map_err(|e| e.to_string())?;
    let object =
        RemoteFile::open(&driver, url, options.clone()).map_err(|e| format!("cannot open {e}"))?;
    let nbytes = object.nbytes();
    let size = match args.size {
        Some(s) => (s as u64).min(nbytes),
        None => nbytes,
    };
    if size == 0 {
        return Err(format!("{url} is empty: there is nothing to read"));
    }
    let size = usize::try_from(size).map_err(|_| format!("{url} is too large to read here"))?;
    let repeat = args.repeat.max(1);
    let progress = progress_bar(2 * repeat as u64 + 1, args.json);
    progress.set_message("reading the object once to check the reads against");
    let reference = Reference::take(&object, url, size)?;
    progress.inc(1);

    let mut dst = driver
        .register_buffer(driver.alloc(size).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let mut host = vec![0u8; size];
    let sentinel = !reference.first;
    let mut rows = Rows::default();
    let mut ledger = Ledger::default();
    let engine = format!(
        "hipfile-remote, {} requests of {} on {} connections",
        size.div_ceil(options.request_size),
        human_bytes(options.request_size),
        options.connections
    );
    for rep in 0..repeat {
        progress.set_message(format!("rep {}: into GPU memory", rep + 1));
        dst.fill(sentinel).map_err(|e| e.to_string())?;
        let t = timed(|| read_exact(&object, url, &mut dst))?;
        rows.throughput(
            "remote_read",
            &format!("remote object -> GPU memory, {engine}"),
            options.connections,
            size,
            t,
        );
        let diff = reference.differs(
            |at, chunk| {
                dst.read_at(at, chunk)
                    .map_err(|e| format!("check: copying the buffer at {at}: {e}"))
            },
            size,
        )?;
        ledger.record("remote_read", size as u64, diff);
        progress.inc(1);

        progress.set_message(format!("rep {}: into host memory", rep + 1));
        host.fill(sentinel);
        let t = timed(|| read_host_exact(&object, url, &mut host, 0))?;
        rows.throughput(
            "remote_read_host",
            &format!("remote object -> host memory, {engine}"),
            options.connections,
            size,
            t,
        );
        let diff = reference.differs(
            |at, chunk| {
                chunk.copy_from_slice(&host[at..at + chunk.len()]);
                Ok(())
            },
            size,
        )?;
        ledger.record("remote_read_host", size as u64, diff);
        progress.inc(1);
    }
    progress.finish_and_clear();

    let mut measurements = rows.0;
    for m in &mut measurements {
        m.checked = ledger.get(&m.key).cloned();
    }
    let verified = ledger.all_passed();
    let mut notes = Vec::new();
    if platform == Platform::Sim {
        notes.push(SIM_NOTE_REMOTE.to_string());
    }
    if args.json {
        for m in &measurements {
            writeln!(out, "{}", m.to_json()).map_err(|e| e.to_string())?;
        }
        let summary = json!({
            "type": "summary",
            "platform": platform.to_string(),
            "platform_choice": how,
            "platforms_passed_over": passed_over,
            "backends": driver.backends(),
            "remote": url,
            "object_bytes": nbytes,
            "bytes": size,
            "request_size": options.request_size,
            "connections": options.connections,
            "repetitions": repeat,
            "verified": verified,
            "verification": ledger.to_json(),
            "keys": measurements.iter().map(|m| m.key.clone()).collect::<Vec<_>>(),
            "notes": notes,
        });
        writeln!(out, "{summary}").map_err(|e| e.to_string())?;
    } else {
        let mut head = vec![format!("hipfile bench: {how}")];
        head.extend(passed_over.iter().map(|l| format!("  {l}")));
        head.push(format!(
            "remote: {url}, {size} bytes read of {nbytes}, requests of {} on {} connections, \
             {repeat} repetitions (median)",
            human_bytes(options.request_size),
            options.connections
        ));
        head.extend(ledger.text().lines().map(str::to_string));
        head.extend(notes.iter().map(|n| format!("note: {n}")));
        let mut text: String = head.iter().map(|l| wrap(l, REPORT_COLUMNS)).collect();
        text.push('\n');
        text.push_str(&table(&measurements));
        text.push('\n');
        text.push_str(&legend(&measurements));
        out.write_all(text.as_bytes()).map_err(|e| e.to_string())?;
    }
    Ok(verified)
}

/// Options of `bench` that mean nothing for a remote object, when given with `--remote`.
pub(super) fn refuse_file_options(args: &BenchArgs) -> Result<(), String> {
    let given: Vec<&str> = [
        (args.file.is_some(), "--file"),
        (!args.only.is_empty(), "--only"),
        (args.baseline, "--baseline"),
        (args.kvikio.is_some(), "--kvikio"),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    if given.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} measure a file: --remote reads a remote object instead",
            given.join(", ")
        ))
    }
}
