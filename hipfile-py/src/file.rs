//! Files: the KvikIO-like `CuFile` (`hipfile.open`), its futures, and the stream-ordered ops.
//!
//! A `CuFile` is a file opened by path (or an fd the caller keeps open) and registered with the
//! process-wide driver. Every IO call releases the GIL. Device memory goes through the facade's
//! [`hipfile::FileHandle`]; host memory is plain positioned IO (`os.preadv` / `os.pwrite`) on
//! the same descriptor: reads are short only at the end of the file, writes write everything.
//!
//! The futures of `pread`/`pwrite` run on a small pool of Rust threads, so one Python thread
//! keeps many requests in flight; a call larger than the task size (by default the library's
//! limit of one call, 2 GiB less 4 KiB) is split into parts that run side by side, so a read is
//! short only at the end of the file whatever its size. `read`/`write` wait for the same parts,
//! and run a call of one part on the calling thread (no hand-off: small requests are
//! latency-bound). `raw_read`/`raw_write` run on the calling thread as one request to the
//! library, capped as `hipFileRead` is. Each request holds the file and the memory's owner until
//! it ended, so closing the file or dropping the array while a future is pending is safe. An
//! array whose producer names a stream (`__cuda_array_interface__`'s `stream`) is waited for on
//! the calling thread before its request runs anywhere, since 1 and 2 there name that thread's
//! legacy and per-thread default streams.
//!
//! `read_async`/`write_async` queue their op on the calling thread and return: the null stream
//! and the per-thread default stream are that thread's, on its current device, as the caller
//! means them. The op owns the file until it ended; a thread of its own holds the memory's owner
//! and the stream's object meanwhile, so nothing waits for the stream where the op was queued.

use std::borrow::Borrow;
use std::ffi::OsStr;
use std::ops::Range;
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError};

use hipfile::{AsDevice, AsDeviceMut, Error, ErrorKind, IoOp, StreamOp};
use pyo3::exceptions::{PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyList, PySlice};

use crate::device::runtime_of;
use crate::errors::{to_py, IntoPyResult};
use crate::foreign;
use crate::memory::{memory_of, region, Memory};
use crate::slot;

/// What the mode string allows.
#[derive(Clone, Copy, Debug)]
struct Mode {
    read: bool,
    write: bool,
    append: bool,
}

/// Python's `open` modes: `r`, `w`, `a`, `x`, each with an optional `+`; `b` is accepted and
/// changes nothing (the file is always bytes).
fn parse_mode(mode: &str) -> PyResult<(Mode, std::fs::OpenOptions)> {
    let bad = || PyValueError::new_err(format!("invalid mode: {mode:?}"));
    let mut kind = None;
    let mut plus = false;
    for c in mode.chars() {
        match c {
            'r' | 'w' | 'a' | 'x' if kind.is_none() => kind = Some(c),
            '+' if !plus => plus = true,
            'b' => {}
            _ => return Err(bad()),
        }
    }
    let kind = kind.ok_or_else(bad)?;
    let mut options = std::fs::OpenOptions::new();
    let m = Mode {
        read: kind == 'r' || plus,
        write: kind != 'r' || plus,
        append: kind == 'a',
    };
    options.read(m.read).write(m.write);
    match kind {
        'w' => {
            options.create(true).truncate(true);
        }
        'a' => {
            options.create(true);
        }
        'x' => {
            options.create_new(true);
        }
        _ => {}
    }
    Ok((m, options))
}

/// A registered file and what keeps it usable; dropped (deregistered, then closed) when the
/// `CuFile` is closed and no request holds it.
struct OpenFile {
    // Declared first: deregistered before the descriptor closes.
    handle: hipfile::FileHandle,
    driver: hipfile::Driver,
    /// The file when opened by path; `None` for an fd the caller keeps open.
    _file: Option<std::fs::File>,
    fd: RawFd,
    mode: Mode,
    /// Mode `a`: where the next write without a file offset goes, at least (the end of the
    /// file, or past the writes already sent there if it is further).
    append_end: Mutex<u64>,
}

/// A failed request: the library's error, or a Python exception (host IO).
pub(crate) enum Failure {
    Core(Error),
    Py(PyErr),
}

impl Failure {
    pub(crate) fn into_py(self) -> PyErr {
        match self {
            Failure::Core(e) => to_py(&e),
            Failure::Py(e) => e,
        }
    }

    fn clone_py(&self, py: Python<'_>) -> PyErr {
        match self {
            Failure::Core(e) => to_py(e),
            Failure::Py(e) => e.clone_ref(py),
        }
    }
}

/// One read or write, with everything it needs held until it ended.
struct Request {
    file: Arc<OpenFile>,
    memory: Memory,
    op: IoOp,
    offset: usize,
    size: usize,
    file_offset: u64,
}

impl Request {
    /// The request as parts of at most `task` bytes each (one part when it fits), in order.
    fn split(self, py: Python<'_>, task: usize) -> Vec<Request> {
        if self.size <= task {
            return vec![self];
        }
        (0..self.size)
            .step_by(task)
            .map(|start| Request {
                file: Arc::clone(&self.file),
                memory: self.memory.clone_ref(py),
                op: self.op,
                offset: self.offset + start,
                size: task.min(self.size - start),
                file_offset: self.file_offset.saturating_add(start as u64),
            })
            .collect()
    }

    /// Wait until the work the array's producer queued on its stream (`__cuda_array_interface__`'s
    /// `stream`) ended, as the interface asks of a consumer before it touches the array. Called
    /// on the calling thread, never on the pool: the handles 1 and 2 (the legacy and per-thread
    /// default streams) name that thread's streams on its current device.
    fn wait_for_producer(&self) -> Result<(), Failure> {
        match self.memory {
            Memory::Device {
                stream: Some(raw), ..
            } => wait_for_stream(&self.file.driver, raw).map_err(Failure::Core),
            _ => Ok(()),
        }
    }

    /// Wait for the producer's stream and run the request, on the calling thread.
    fn run_here(self) -> Result<usize, Failure> {
        self.wait_for_producer()?;
        self.run()
    }

    /// Run the request on this thread (the producer's stream was waited for). Device memory goes
    /// through the facade without the GIL; host memory through `os.preadv`/`os.pwrite`, which
    /// release the GIL while in the kernel.
    fn run(self) -> Result<usize, Failure> {
        let range = self.offset..self.offset + self.size;
        let (file, file_offset) = (&self.file, self.file_offset);
        match (&self.memory, self.op) {
            // An empty array of a framework may have no memory at all (CuPy's is at address 0):
            // nothing to move, as `readinto` of an empty buffer.
            (Memory::Device { ptr: 0, .. }, _) if self.size == 0 => Ok(0),
            (&Memory::Device { ptr, len, .. }, IoOp::Read) => {
                let mut whole = foreign::device_mut(ptr, len);
                let part = whole.slice_mut(range).map_err(Failure::Core)?;
                file.handle.read(part, file_offset).map_err(Failure::Core)
            }
            (&Memory::Device { ptr, len, .. }, IoOp::Write) => {
                let whole = foreign::device(ptr, len);
                let part = whole.slice(range).map_err(Failure::Core)?;
                file.handle.write(part, file_offset).map_err(Failure::Core)
            }
            (Memory::Host { view, .. }, op) => {
                Python::attach(|py| host_io(py, file.fd, view.bind(py), op, range, file_offset))
                    .map_err(Failure::Py)
            }
        }
    }
}

/// Wait until the work queued on the array's stream (`__cuda_array_interface__`'s `stream`)
/// ended, as the interface asks of a consumer before it touches the array.
pub(crate) fn wait_for_stream(driver: &hipfile::Driver, raw: usize) -> Result<(), Error> {
    let runtime = runtime_of(driver)?;
    foreign::stream(&runtime, raw)
        .synchronize()
        .map_err(|e| Error::hip(&e, "waiting for the array's stream"))
}

/// Positioned IO between the file and the bytes `range` of a byte `memoryview`: a read stops
/// early only at the end of the file; a write writes everything.
fn host_io(
    py: Python<'_>,
    fd: RawFd,
    view: &Bound<'_, PyAny>,
    op: IoOp,
    range: Range<usize>,
    file_offset: u64,
) -> PyResult<usize> {
    let (offset, size) = (range.start, range.len());
    let os = py.import("os")?;
    let mut done = 0;
    while done < size {
        let part = view.get_item(PySlice::new(
            py,
            (offset + done) as isize,
            (offset + size) as isize,
            1,
        ))?;
        let at = file_offset + done as u64;
        let n: usize = match op {
            IoOp::Read => os
                .call_method1("preadv", (fd, PyList::new(py, [part])?, at))?
                .extract()?,
            IoOp::Write => os.call_method1("pwrite", (fd, part, at))?.extract()?,
        };
        if n == 0 {
            break;
        }
        done += n;
    }
    Ok(done)
}

/// A positive whole number from the environment variable `name`, if it holds one.
fn env_count(name: &str) -> Option<usize> {
    std::env::var(name)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
}

/// The largest part of a `read`, `write`, `pread` or `pwrite` that one request to the library
/// moves (KvikIO's task size): `HIPFILE_PY_TASK_SIZE` bytes, else (and at most) the library's
/// limit of one call, `MAX_RW_COUNT` (2 GiB less 4 KiB, as Linux caps `read(2)`). Larger calls
/// are split into parts that run side by side on the pool; the library spreads each part over
/// its own IO workers, so the default splits only what one call cannot carry. Read from the
/// environment once, at the first request.
#[pyfunction]
pub(crate) fn task_size() -> usize {
    static TASK_SIZE: OnceLock<usize> = OnceLock::new();
    *TASK_SIZE.get_or_init(|| {
        env_count("HIPFILE_PY_TASK_SIZE").map_or(hipfile_core::MAX_RW_COUNT, |n| {
            n.min(hipfile_core::MAX_RW_COUNT)
        })
    })
}

/// The pool that runs `pread`, `pwrite` and the parts of a split `read`/`write`:
/// [`num_threads`] threads, started at the first request.
fn pool() -> &'static crossbeam_channel::Sender<Box<dyn FnOnce() + Send>> {
    static POOL: OnceLock<crossbeam_channel::Sender<Box<dyn FnOnce() + Send>>> = OnceLock::new();
    POOL.get_or_init(|| {
        let (tx, rx) = crossbeam_channel::unbounded::<Box<dyn FnOnce() + Send>>();
        for i in 0..num_threads() {
            let rx = rx.clone();
            let _ = std::thread::Builder::new()
                .name(format!("hipfile-py-{i}"))
                .spawn(move || {
                    for job in rx {
                        job();
                    }
                });
        }
        tx
    })
}

/// Threads of the pool that runs `pread`, `pwrite` and the parts of a split `read`/`write`:
/// `HIPFILE_PY_THREADS`, else 4; read from the environment once, as the pool's size is fixed
/// when it starts.
#[pyfunction]
pub(crate) fn num_threads() -> usize {
    static THREADS: OnceLock<usize> = OnceLock::new();
    *THREADS.get_or_init(|| env_count("HIPFILE_PY_THREADS").unwrap_or(4))
}

/// The result slot of a request running on the pool.
#[derive(Default)]
pub(crate) struct Completion {
    result: Mutex<Option<Result<usize, Failure>>>,
    ended: Condvar,
}

/// A read or write running on hipfile's thread pool (`CuFile.pread` / `CuFile.pwrite`), as one
/// or more parts (see `task_size`).
#[pyclass(module = "hipfile._hipfile", frozen)]
pub(crate) struct IOFuture {
    parts: Vec<Arc<Completion>>,
}

impl IOFuture {
    /// The future of one job running on the pool ([`spawn_job`]).
    pub(crate) fn of(part: Arc<Completion>) -> IOFuture {
        IOFuture { parts: vec![part] }
    }
}

impl Completion {
    fn wait(&self) {
        let mut slot = self.result.lock().unwrap_or_else(PoisonError::into_inner);
        while slot.is_none() {
            slot = self
                .ended
                .wait(slot)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

#[pymethods]
impl IOFuture {
    /// Wait (with the GIL released) until the request ended; answer the bytes moved (the sum
    /// of its parts), or raise its error (`OSError` or `HipFileError`; the first part's that
    /// failed). May be called again: same answer.
    fn get(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.parts.iter().for_each(|part| part.wait()));
        let mut total = 0;
        for part in &self.parts {
            let slot = part.result.lock().unwrap_or_else(PoisonError::into_inner);
            match slot.as_ref() {
                Some(Ok(n)) => total += n,
                Some(Err(failure)) => return Err(failure.clone_py(py)),
                None => return Err(PyOSError::new_err("the request vanished")),
            }
        }
        Ok(total)
    }

    /// Whether the request ended (`get` would not wait).
    fn done(&self) -> bool {
        self.parts.iter().all(|part| {
            part.result
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .is_some()
        })
    }
}

/// Run `request` on the pool, split into parts of at most `task` bytes, once the producer's
/// stream was waited for here.
fn submit(py: Python<'_>, request: Request, task: usize) -> PyResult<IOFuture> {
    py.detach(|| request.wait_for_producer())
        .map_err(Failure::into_py)?;
    Ok(IOFuture {
        parts: request.split(py, task).into_iter().map(spawn).collect(),
    })
}

/// Run one part on the pool; its result lands in the answered slot.
fn spawn(part: Request) -> Arc<Completion> {
    spawn_job(move || part.run())
}

/// Run `work` on the pool (what it holds is dropped there, when it ended); its result lands in
/// the answered slot.
pub(crate) fn spawn_job(
    work: impl FnOnce() -> Result<usize, Failure> + Send + 'static,
) -> Arc<Completion> {
    let state = Arc::new(Completion::default());
    let slot = Arc::clone(&state);
    let job = Box::new(move || {
        let result = work();
        *slot.result.lock().unwrap_or_else(PoisonError::into_inner) = Some(result);
        slot.ended.notify_all();
    });
    if let Err(crossbeam_channel::SendError(job)) = pool().send(job) {
        // No pool thread could be started: run it here rather than never.
        job();
    }
    state
}

/// Run `request` and wait for it (GIL released): on the calling thread when it is one part (no
/// hand-off for the small requests whose latency matters), else its parts on the pool.
fn blocking(py: Python<'_>, request: Request) -> PyResult<usize> {
    let task = task_size();
    // One part (every small request): run here, with no list of parts to build.
    if request.size <= task {
        return py.detach(|| request.run_here()).map_err(Failure::into_py);
    }
    submit(py, request, task)?.get(py)
}

/// An op queued on a GPU stream (`CuFile.read_async` / `write_async`): it runs when the stream
/// reaches it, and the stream's later work waits for it.
#[pyclass(module = "hipfile._hipfile", frozen)]
pub(crate) struct StreamFuture {
    op: StreamOp,
}

#[pymethods]
impl StreamFuture {
    /// Wait (GIL released) until the stream reached the op and it ended; answer the bytes moved
    /// (short only at the end of the file for a read), or raise its error.
    fn get(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.op.wait()).py()
    }

    /// Whether the op ended.
    fn done(&self) -> bool {
        self.op.result().is_some()
    }

    /// Move fewer bytes than queued, if the stream has not reached the op yet (late binding, as
    /// `hipFileReadAsync`'s size pointer). Larger than queued fails the op with
    /// `hipFileInvalidValue`.
    fn set_size(&self, size: usize) {
        self.op.set_size(size);
    }

    /// Move the op's file offset, if the stream has not reached it yet.
    fn set_file_offset(&self, file_offset: u64) -> PyResult<()> {
        self.op.set_file_offset(file_offset).py()
    }
}

/// The raw handle of `stream`: `None` or 0 is the null stream; an int is a handle (1 and 2 the
/// legacy and per-thread default streams); an object names its handle as `.ptr` (CuPy,
/// `hipfile.Stream`) or `.cuda_stream` (PyTorch).
fn stream_handle(stream: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
    let Some(stream) = stream.filter(|s| !s.is_none()) else {
        return Ok(0);
    };
    if let Ok(raw) = stream.extract::<usize>() {
        return Ok(raw);
    }
    for attribute in ["ptr", "cuda_stream"] {
        if stream.hasattr(attribute)? {
            return stream.getattr(attribute)?.extract();
        }
    }
    Err(PyTypeError::new_err(
        "a stream is an int handle or an object with .ptr (CuPy) or .cuda_stream (PyTorch)",
    ))
}

fn os_error(errno: i32, what: &str) -> PyErr {
    PyOSError::new_err((errno, what.to_string()))
}

/// A file registered with hipfile, read and written at offsets from device or host memory
/// (KvikIO's `CuFile`); made by `hipfile.open(path, mode)`.
#[pyclass(module = "hipfile._hipfile")]
pub(crate) struct CuFile {
    open: Mutex<Option<Arc<OpenFile>>>,
    mode_text: String,
}

/// What a `CuFile` call that moves bytes was given, as Python passed it.
struct IoArgs<'a, 'py> {
    buf: &'a Bound<'py, PyAny>,
    size: Option<usize>,
    /// `None` only from a write: 0, or the end of the file in mode `a`.
    file_offset: Option<i64>,
    dev_offset: usize,
}

impl CuFile {
    fn file(&self) -> PyResult<Arc<OpenFile>> {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| PyValueError::new_err("I/O operation on closed file"))
    }

    /// The request `op` of `args` makes, checked against the mode and the memory. A write's
    /// `file_offset` of `None` is 0, or the end of the file in mode `a`.
    fn request(&self, py: Python<'_>, op: IoOp, args: IoArgs<'_, '_>) -> PyResult<Request> {
        let file = self.file()?;
        let unsupported = |why: &str| -> PyResult<PyErr> {
            let class = py.import("io")?.getattr("UnsupportedOperation")?;
            Ok(PyErr::from_value(class.call1((why,))?))
        };
        match op {
            IoOp::Read if !file.mode.read => {
                return Err(unsupported("File not open for reading")?);
            }
            IoOp::Write if !file.mode.write => {
                return Err(unsupported("File not open for writing")?);
            }
            _ => {}
        }
        let memory = memory_of(args.buf)?;
        let (offset, size) = region(&memory, args.size, args.dev_offset, op)?;
        let file_offset = match args.file_offset {
            Some(o) => o,
            // Each write without an offset takes the bytes past the end of the file and past
            // the writes sent there before it (which may still be in flight): two appends in
            // flight at once never land at the same offset.
            None if file.mode.append && op == IoOp::Write => {
                let end = u64::try_from(file_size(py, file.fd)?).unwrap_or(0);
                let mut next = file
                    .append_end
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                let at = (*next).max(end);
                *next = at.saturating_add(size as u64);
                i64::try_from(at).map_err(|_| os_error(libc::EFBIG, "the file is too large"))?
            }
            None => 0,
        };
        let file_offset = u64::try_from(file_offset)
            .map_err(|_| os_error(libc::EINVAL, "negative file offset"))?;
        Ok(Request {
            file,
            memory,
            op,
            offset,
            size,
            file_offset,
        })
    }

    /// `read`/`write`: see [`blocking`].
    fn run_blocking(&self, py: Python<'_>, op: IoOp, args: IoArgs<'_, '_>) -> PyResult<usize> {
        blocking(py, self.request(py, op, args)?)
    }

    /// `pread`/`pwrite`: the request's parts on the pool.
    fn run_on_pool(&self, py: Python<'_>, op: IoOp, args: IoArgs<'_, '_>) -> PyResult<IOFuture> {
        submit(py, self.request(py, op, args)?, task_size())
    }

    /// `raw_read`/`raw_write`: one request to the library, on the calling thread.
    fn run_here(&self, py: Python<'_>, op: IoOp, args: IoArgs<'_, '_>) -> PyResult<usize> {
        let request = self.request(py, op, args)?;
        py.detach(|| request.run_here()).map_err(Failure::into_py)
    }

    /// `read_async`/`write_async`: the op queued on `stream`, from the calling thread.
    fn run_on_stream(
        &self,
        py: Python<'_>,
        op: IoOp,
        args: IoArgs<'_, '_>,
        stream: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<StreamFuture> {
        let raw = stream_handle(stream)?;
        if args.file_offset.is_some_and(|o| o < 0) {
            // `hipFileReadAsync`'s answer to a negative offset.
            return Err(to_py(&Error::new(
                ErrorKind::InvalidValue,
                "a negative file offset",
            )));
        }
        let request = self.request(py, op, args)?;
        let Memory::Device {
            ptr,
            len,
            stream: array_stream,
            ..
        } = request.memory
        else {
            return Err(PyTypeError::new_err(
                "stream-ordered IO needs device memory (__cuda_array_interface__ or DLPack)",
            ));
        };
        // The work the array's producer queued on its stream (`__cuda_array_interface__`'s
        // `stream`) ends before the op is queued on another stream, which could otherwise
        // overtake it. On the producer's own stream the stream orders them: the caller does not
        // wait.
        if let Some(array_stream) = array_stream.filter(|&s| s != raw) {
            let file = &request.file;
            py.detach(|| wait_for_stream(&file.driver, array_stream))
                .py()?;
        }
        let Request {
            file,
            memory,
            offset,
            size,
            file_offset,
            ..
        } = request;
        // Queued here, on the calling thread: the null stream (0, or the legacy handle 1) is its
        // current device's and the per-thread default stream (2) its own, as the caller means
        // them; another thread would name other streams with the same handles.
        let (op, queued) = py
            .detach(|| -> hipfile::Result<(StreamOp, Box<dyn Send>)> {
                let runtime = runtime_of(&file.driver)?;
                let stream = foreign::stream(&runtime, raw);
                let range = offset..offset + size;
                let held = HeldFile(Arc::clone(&file));
                let out_of_range =
                    || Error::new(ErrorKind::InvalidValue, "the range lies past the array");
                let driver = &file.driver;
                Ok(match op {
                    IoOp::Read => {
                        let part = foreign::device_mut(ptr, len).get_mut(range);
                        let part = part.ok_or_else(out_of_range)?;
                        owned(driver.read_on_stream(&stream, held, part, file_offset)?)
                    }
                    IoOp::Write => {
                        let part = foreign::device(ptr, len).get(range);
                        let part = part.ok_or_else(out_of_range)?;
                        owned(driver.write_on_stream(&stream, held, part, file_offset)?)
                    }
                })
            })
            .py()?;
        // The op owns the file and its view of the memory until it ended; the Python objects that
        // keep the memory and the stream alive go to a thread of their own that waits for it, so
        // neither this call nor the garbage collector of a dropped future waits for the stream.
        let stream_owner = stream.map(|s| s.clone().unbind());
        py.detach(|| {
            let keep = move || {
                drop(queued);
                drop(memory);
                drop(stream_owner);
            };
            // No thread to be had: wait here (GIL released) rather than let go under the op.
            let _ = std::thread::Builder::new()
                .name("hipfile-py-stream".into())
                .spawn(keep);
        });
        Ok(StreamFuture { op })
    }
}

/// A queued op as `StreamFuture` answers it, and the owner that waits for it when dropped.
fn owned<F, M>(queued: hipfile::OwningStreamOp<F, M>) -> (StreamOp, Box<dyn Send>)
where
    hipfile::OwningStreamOp<F, M>: Send + 'static,
{
    (queued.op().clone(), Box::new(queued))
}

/// A registered file as the op that uses it holds it: the `CuFile`'s, kept open until the op
/// ended.
struct HeldFile(Arc<OpenFile>);

impl Borrow<hipfile::FileHandle> for HeldFile {
    fn borrow(&self) -> &hipfile::FileHandle {
        &self.0.handle
    }
}

/// Open `path` as Python's `open` does: a directory is refused with `EISDIR`, for reading too
/// (where `open(2)` allows it).
fn open_path(options: &std::fs::OpenOptions, path: &Path) -> std::io::Result<std::fs::File> {
    let file = options.open(path)?;
    if file.metadata()?.is_dir() {
        return Err(std::io::Error::from_raw_os_error(libc::EISDIR));
    }
    Ok(file)
}

/// The C library's text for `errno` (`os.strerror`), as Python's own errors carry it.
fn strerror(py: Python<'_>, errno: i32) -> PyResult<String> {
    py.import("os")?
        .call_method1("strerror", (errno,))?
        .extract()
}

/// `OSError(errno, text, filename)`: the subclass `errno` picks (`FileNotFoundError`...), with
/// `.errno`, `.strerror` and `.filename` set, as Python's `open` raises it.
fn named_os_error(errno: i32, text: String, filename: &Bound<'_, PyAny>) -> PyErr {
    PyOSError::new_err((errno, text, filename.clone().unbind()))
}

fn file_size(py: Python<'_>, fd: RawFd) -> PyResult<i64> {
    py.import("os")?
        .call_method1("fstat", (fd,))?
        .getattr("st_size")?
        .extract()
}

/// `CuFile`'s methods that move bytes, from a table. A row is a Python method: its docstring,
/// the operation, `file_offset`'s type and Python default (`i64 = 0` for reads; `Option<i64> =
/// None` for writes, where `None` is 0 or the end of the file in mode `a`), `stream` for a
/// stream-ordered op, what it answers, and the `CuFile` method that runs it. PyO3 wants each
/// Python method written out as a Rust method with its own signature; the table writes the
/// parameters they share once. The block stands beside `CuFile`'s other `#[pymethods]` through
/// PyO3's `multiple-pymethods` feature.
macro_rules! cufile_methods {
    (
        $(
            $(#[$doc:meta])*
            fn $name:ident($op:ident, file_offset: $offset:ty = $default:tt $(, $stream:ident)?)
                -> $answer:ty = $run:ident;
        )*
    ) => {
        #[pymethods]
        impl CuFile {
            $(
                $(#[$doc])*
                #[pyo3(signature = (
                    buf, size = None, file_offset = $default, dev_offset = 0 $(, $stream = None)?
                ))]
                fn $name(
                    &self,
                    py: Python<'_>,
                    buf: &Bound<'_, PyAny>,
                    size: Option<usize>,
                    file_offset: $offset,
                    dev_offset: usize,
                    $($stream: Option<&Bound<'_, PyAny>>,)?
                ) -> PyResult<$answer> {
                    let args = IoArgs {
                        buf,
                        size,
                        file_offset: file_offset.into(),
                        dev_offset,
                    };
                    self.$run(py, IoOp::$op, args $(, $stream)?)
                }
            )*
        }
    };
}

cufile_methods! {
    /// Read `size` bytes (default: to the end of `buf` from `dev_offset`) of the file at
    /// `file_offset` into `buf` at `dev_offset`; answer the bytes read (fewer only at the end
    /// of the file). A call larger than the task size runs as parts on the thread pool, a
    /// smaller one on the calling thread; the GIL is released either way.
    fn read(Read, file_offset: i64 = 0) -> usize = run_blocking;

    /// Write `size` bytes (default: to the end of `buf`) of `buf` at `dev_offset` to the file at
    /// `file_offset` (default 0; the end of the file in mode `a`); answer the bytes written
    /// (all, or an error).
    fn write(Write, file_offset: Option<i64> = None) -> usize = run_blocking;

    /// `read` as a future: the request runs on the thread pool; `.get()` answers its bytes.
    fn pread(Read, file_offset: i64 = 0) -> IOFuture = run_on_pool;

    /// `write` as a future.
    fn pwrite(Write, file_offset: Option<i64> = None) -> IOFuture = run_on_pool;

    /// `read` on the calling thread (GIL released), as one request to the library: at most
    /// `MAX_RW_COUNT` bytes (2 GiB less 4 KiB) move, as `hipFileRead` and `read(2)` cap a call.
    fn raw_read(Read, file_offset: i64 = 0) -> usize = run_here;

    /// `write` on the calling thread (GIL released), as one request to the library (at most
    /// `MAX_RW_COUNT` bytes move, as `hipFileWrite` caps a call).
    fn raw_write(Write, file_offset: Option<i64> = None) -> usize = run_here;

    /// Queue a read on `stream` (an int handle, an object with `.ptr` or `.cuda_stream`, or
    /// `None` for the null stream): it runs when the stream reaches it, and the stream's later
    /// work waits for it (`hipFileReadAsync`). Device memory only. Answers a `StreamFuture`.
    /// The op is queued on the calling thread, so the special handles mean what they mean there:
    /// `None` or 0 (the null stream) and 1 (the legacy default stream) are the null stream of the
    /// thread's current device, 2 (`hipStreamPerThread`, `cudaStreamPerThread`) the thread's own
    /// default stream on it.
    fn read_async(Read, file_offset: i64 = 0, stream) -> StreamFuture = run_on_stream;

    /// Queue a write on `stream` (`hipFileWriteAsync`); see `read_async`. A `file_offset` of
    /// `None` is 0, or the end of the file in mode `a` (as for `write`).
    fn write_async(Write, file_offset: Option<i64> = None, stream) -> StreamFuture = run_on_stream;
}

#[pymethods]
impl CuFile {
    /// Open `file` (a path, or an int descriptor that the caller keeps open until `close`) with
    /// Python's `mode` (`"r"`, `"r+"`, `"w"`, `"w+"`, `"a"`, `"a+"`, `"x"`, `"x+"`; `b` allowed)
    /// and register it with the process-wide driver (opening it, as `hipFileHandleRegister`
    /// does).
    #[new]
    #[pyo3(signature = (file, mode = "r"))]
    fn new(py: Python<'_>, file: &Bound<'_, PyAny>, mode: &str) -> PyResult<Self> {
        let (m, options) = parse_mode(mode)?;
        let (opened, fd) = if let Ok(fd) = file.extract::<RawFd>() {
            (None, fd)
        } else {
            // The name errors carry, as Python's `open` sets it: the path as `os.fspath` gives
            // it (`str` or `bytes`).
            let name = py.import("os")?.call_method1("fspath", (file,))?;
            let path = match name.cast::<PyBytes>() {
                Ok(bytes) => PathBuf::from(OsStr::from_bytes(bytes.as_bytes())),
                Err(_) => name.extract::<PathBuf>()?,
            };
            let f =
                py.detach(|| open_path(&options, &path))
                    .map_err(|e| match e.raw_os_error() {
                        Some(errno) => strerror(py, errno)
                            .map_or_else(|e| e, |text| named_os_error(errno, text, &name)),
                        None => PyErr::from(e),
                    })?;
            let fd = f.as_raw_fd();
            (Some(f), fd)
        };
        let (driver, handle) = py
            .detach(|| {
                let driver = hipfile::Driver::open()?;
                let handle = driver.register_fd(fd)?;
                Ok::<_, Error>((driver, handle))
            })
            .py()?;
        Ok(CuFile {
            open: Mutex::new(Some(Arc::new(OpenFile {
                handle,
                driver,
                _file: opened,
                fd,
                mode: m,
                append_end: Mutex::new(0),
            }))),
            mode_text: mode.to_string(),
        })
    }

    /// Deregister and close the file (the descriptor of a file opened by path). Requests still
    /// running keep it open until they end. Closing twice does nothing.
    fn close(&self, py: Python<'_>) {
        slot::release(py, &self.open);
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        slot::is_released(&self.open)
    }

    /// The mode the file was opened with.
    #[getter]
    fn mode(&self) -> String {
        self.mode_text.clone()
    }

    /// The file's descriptor.
    fn fileno(&self) -> PyResult<RawFd> {
        Ok(self.file()?.fd)
    }

    /// The file's size in bytes.
    fn nbytes(&self, py: Python<'_>) -> PyResult<i64> {
        file_size(py, self.file()?.fd)
    }

    /// How this file's requests are served (a hipfile-rs extension): `"fallback"` (the
    /// default: the staged engine runs what the direct path declines) or `"direct_only"` (the
    /// direct path or `HipFileError` `hipFileIONotSupported`, with no byte moved). Setting it
    /// applies to the requests submitted afterwards; an unknown name is `ValueError`.
    #[getter]
    fn policy(&self) -> PyResult<&'static str> {
        Ok(self.file()?.handle.policy().py()?.name())
    }

    #[setter]
    fn set_policy(&self, policy: &str) -> PyResult<()> {
        let policy = hipfile::IoPolicy::from_name(policy).ok_or_else(|| {
            PyValueError::new_err(format!(
                "unknown IO policy {policy:?}: \"fallback\" or \"direct_only\""
            ))
        })?;
        self.file()?.handle.set_policy(policy).py()
    }
}

slot::with_block!(CuFile, close);
