//! Remote objects: `RemoteFile` (KvikIO's shape: `open_s3`, `open_s3_url`, `open_http`,
//! `nbytes`, `read`, `pread`) and `RemoteWriter` (multipart uploads to `s3://`), over the crate
//! hipfile-remote on the process-wide driver. Built with the cargo feature `remote` (on by
//! default).
//!
//! A read lands in device memory (`__cuda_array_interface__`, DLPack) by ranged requests in
//! parallel through the staged engine's pinned lanes, or in host memory (the buffer protocol)
//! straight from the responses. `pread` runs the read on the package's thread pool and answers
//! the same `IOFuture` as `CuFile.pread`. A write appends to the upload; `close` completes it,
//! `abort` (or leaving a `with` block on an exception) abandons it, leaving the object as it
//! was. Every IO call releases the GIL. Failures of the object's storage are `OSError`s with
//! the errno of the like file failure (`FileNotFoundError` for a missing object,
//! `PermissionError` for refused credentials, `TimeoutError`...), bad URLs `HipFileError`
//! (`hipFileInvalidValue`).
//!
//! Settings: hipfile-remote's defaults, the `HIPFILE_REMOTE_*` environment, then the
//! keyword arguments `request_size` and `connections` of the opening call. S3 endpoints and
//! credentials come from the `AWS_*` environment and files, as for the AWS CLI.

use std::sync::{Arc, Mutex, PoisonError};

use hipfile::{AsDevice, AsDeviceMut, Error, ErrorKind, IoOp};
use hipfile_remote::{RemoteOptions, RemoteWriter as Writer};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::errors::{to_py, IntoPyResult};
use crate::file::{spawn_job, wait_for_stream, Failure, IOFuture};
use crate::foreign::{self, HostBytes};
use crate::memory::{memory_of, region, Memory};
use crate::slot;

/// The settings of an object opened with `request_size` and `connections` (each `None`: the
/// environment's or the default).
fn options(request_size: Option<usize>, connections: Option<usize>) -> PyResult<RemoteOptions> {
    let mut o = RemoteOptions::from_env().map_err(|e| to_py(&e.into()))?;
    if let Some(n) = request_size {
        o.request_size = n;
    }
    if let Some(n) = connections {
        o.connections = n;
    }
    o.validate()
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok(o)
}

fn invalid(what: String) -> PyErr {
    to_py(&Error::new(ErrorKind::InvalidValue, what))
}

/// `s3://bucket/key` of a bucket and a key, each checked to be one.
fn s3_url(bucket: &str, key: &str) -> PyResult<String> {
    if bucket.is_empty() || bucket.contains('/') {
        return Err(invalid(format!(
            "invalid bucket name {bucket:?}: a bucket is a non-empty name without '/'"
        )));
    }
    if key.is_empty() {
        return Err(invalid("an empty object key".into()));
    }
    Ok(format!("s3://{bucket}/{key}"))
}

/// `url` when its scheme is one of `schemes` (in any case), else `hipFileInvalidValue` naming
/// what `method` takes.
fn with_scheme(url: &str, schemes: &[&str], method: &str) -> PyResult<String> {
    let fits = schemes.iter().any(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(scheme))
    });
    if fits {
        Ok(url.to_string())
    } else {
        Err(invalid(format!(
            "{method} takes a {} URL, not {url:?}",
            schemes.join(" or ")
        )))
    }
}

/// An opened object and the driver it reads through; the object goes first.
struct OpenObject {
    object: hipfile_remote::RemoteFile,
    driver: hipfile::Driver,
}

/// A remote object opened for reading (KvikIO's `RemoteFile`): `s3://bucket/key` or an
/// `http(s)://` URL.
#[pyclass(module = "hipfile._hipfile")]
pub(crate) struct RemoteFile {
    open: Mutex<Option<Arc<OpenObject>>>,
    url: String,
}

impl RemoteFile {
    fn opened(
        py: Python<'_>,
        url: String,
        request_size: Option<usize>,
        connections: Option<usize>,
    ) -> PyResult<RemoteFile> {
        let options = options(request_size, connections)?;
        let open = py
            .detach(|| -> Result<OpenObject, Error> {
                let driver = hipfile::Driver::open()?;
                let object = hipfile_remote::RemoteFile::open(&driver, &url, options)?;
                Ok(OpenObject { object, driver })
            })
            .py()?;
        Ok(RemoteFile {
            open: Mutex::new(Some(Arc::new(open))),
            url,
        })
    }

    fn object(&self) -> PyResult<Arc<OpenObject>> {
        self.open
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
            .ok_or_else(|| PyValueError::new_err("I/O operation on closed remote file"))
    }

    /// The read of `size` bytes (default: to the end of `buf`) at `file_offset` into `buf`,
    /// ready to run on any thread; the producer's stream of a device array was waited for.
    fn request(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
        file_offset: i64,
    ) -> PyResult<ObjectRead> {
        let open = self.object()?;
        let file_offset = u64::try_from(file_offset)
            .map_err(|_| invalid(format!("a negative file offset ({file_offset})")))?;
        let memory = memory_of(buf)?;
        let (_, size) = region(&memory, size, 0, IoOp::Read)?;
        let host = match &memory {
            Memory::Host { view, .. } => Some(HostBytes::of(view.bind(py))?),
            Memory::Device {
                stream: Some(raw), ..
            } => {
                let raw = *raw;
                py.detach(|| wait_for_stream(&open.driver, raw)).py()?;
                None
            }
            Memory::Device { .. } => None,
        };
        Ok(ObjectRead {
            open,
            host,
            memory,
            size,
            file_offset,
        })
    }
}

/// One read of an object, with everything it needs held until it ended: the object, the
/// exported host buffer (dropped before the memory's owner), the memory's owner.
struct ObjectRead {
    open: Arc<OpenObject>,
    host: Option<HostBytes>,
    memory: Memory,
    size: usize,
    file_offset: u64,
}

impl ObjectRead {
    /// Run the read on this thread (without the GIL): the bytes read, fewer only at the end of
    /// the object.
    fn run(mut self) -> Result<usize, Failure> {
        let (object, size, at) = (&self.open.object, self.size, self.file_offset);
        let result = match (&mut self.host, &self.memory) {
            (_, Memory::Device { ptr: 0, .. }) if size == 0 => Ok(0),
            (Some(host), _) => match host.get_mut(0..size) {
                Some(bytes) => object.read_host(bytes, at).map_err(Error::from),
                None => Err(Error::new(
                    ErrorKind::InvalidValue,
                    "the range lies past the buffer",
                )),
            },
            (None, &Memory::Device { ptr, len, .. }) => foreign::device_mut(ptr, len)
                .slice_mut(0..size)
                .and_then(|part| object.read(part, at).map_err(Error::from)),
            (None, Memory::Host { .. }) => Err(Error::new(
                ErrorKind::InvalidValue,
                "host memory without its buffer",
            )),
        };
        result.map_err(Failure::Core)
    }
}

#[pymethods]
impl RemoteFile {
    /// Open the S3 object `key` of `bucket` (`s3://bucket/key`); the endpoint, region and
    /// credentials come from the `AWS_*` environment (and `~/.aws`), as for the AWS CLI.
    #[classmethod]
    #[pyo3(signature = (bucket, key, *, request_size = None, connections = None))]
    fn open_s3(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        bucket: &str,
        key: &str,
        request_size: Option<usize>,
        connections: Option<usize>,
    ) -> PyResult<RemoteFile> {
        RemoteFile::opened(py, s3_url(bucket, key)?, request_size, connections)
    }

    /// Open the S3 object named by `url` (`s3://bucket/key`).
    #[classmethod]
    #[pyo3(signature = (url, *, request_size = None, connections = None))]
    fn open_s3_url(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        url: &str,
        request_size: Option<usize>,
        connections: Option<usize>,
    ) -> PyResult<RemoteFile> {
        let url = with_scheme(url, &["s3://"], "open_s3_url")?;
        RemoteFile::opened(py, url, request_size, connections)
    }

    /// Open the object an `http://` or `https://` URL names (the server must honour `Range`).
    #[classmethod]
    #[pyo3(signature = (url, *, request_size = None, connections = None))]
    fn open_http(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        url: &str,
        request_size: Option<usize>,
        connections: Option<usize>,
    ) -> PyResult<RemoteFile> {
        let url = with_scheme(url, &["http://", "https://"], "open_http")?;
        RemoteFile::opened(py, url, request_size, connections)
    }

    /// Open the object `url` names, whichever of `s3://`, `http://`, `https://` it is.
    #[classmethod]
    #[pyo3(signature = (url, *, request_size = None, connections = None))]
    fn open(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        url: &str,
        request_size: Option<usize>,
        connections: Option<usize>,
    ) -> PyResult<RemoteFile> {
        let url = with_scheme(url, &["s3://", "http://", "https://"], "RemoteFile.open")?;
        RemoteFile::opened(py, url, request_size, connections)
    }

    /// The object's size in bytes, as the server reported it when the object was opened.
    fn nbytes(&self) -> PyResult<u64> {
        Ok(self.object()?.object.nbytes())
    }

    /// The object's URL.
    #[getter]
    fn url(&self) -> String {
        self.url.clone()
    }

    /// Read `size` bytes (default: the length of `buf`) of the object at `file_offset` into
    /// `buf` (device memory or host memory); answer the bytes read, fewer only at the end of
    /// the object. The GIL is released while the requests run.
    #[pyo3(signature = (buf, size = None, file_offset = 0))]
    fn read(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
        file_offset: i64,
    ) -> PyResult<usize> {
        let read = self.request(py, buf, size, file_offset)?;
        py.detach(|| read.run()).map_err(Failure::into_py)
    }

    /// `read` as a future: the read runs on the thread pool; `.get()` answers its bytes.
    #[pyo3(signature = (buf, size = None, file_offset = 0))]
    fn pread(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
        file_offset: i64,
    ) -> PyResult<IOFuture> {
        let read = self.request(py, buf, size, file_offset)?;
        Ok(IOFuture::of(spawn_job(move || read.run())))
    }

    /// Let go of the object (its connections); reads still running keep it until they end.
    /// Closing twice does nothing.
    fn close(&self, py: Python<'_>) {
        slot::release(py, &self.open);
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        slot::is_released(&self.open)
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { "closed" } else { "open" };
        format!("<hipfile.RemoteFile {} ({state})>", self.url)
    }
}

slot::with_block!(RemoteFile, close);

/// An upload in progress, or how it ended.
enum Upload {
    Open {
        /// Boxed: an upload in flight holds its parts' state, far larger than a count.
        writer: Box<Writer>,
        _driver: hipfile::Driver,
        written: u64,
    },
    /// Completed with this many bytes.
    Completed(u64),
    Aborted,
}

/// A multipart upload to an S3 object (`s3://bucket/key`): `write` appends, `close` completes
/// the object, `abort` (or an exception leaving the `with` block) abandons it, leaving the
/// object as it was.
#[pyclass(module = "hipfile._hipfile")]
pub(crate) struct RemoteWriter {
    upload: Mutex<Upload>,
    url: String,
}

impl RemoteWriter {
    fn created(
        py: Python<'_>,
        url: String,
        request_size: Option<usize>,
        connections: Option<usize>,
    ) -> PyResult<RemoteWriter> {
        let options = options(request_size, connections)?;
        let upload = py
            .detach(|| -> Result<Upload, Error> {
                let driver = hipfile::Driver::open()?;
                let writer = Writer::create(&driver, &url, options)?;
                Ok(Upload::Open {
                    writer: Box::new(writer),
                    _driver: driver,
                    written: 0,
                })
            })
            .py()?;
        Ok(RemoteWriter {
            upload: Mutex::new(upload),
            url,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Upload> {
        self.upload.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Abandon the upload if it is still open.
    fn abort_now(&self, py: Python<'_>) {
        let mut upload = self.lock();
        if matches!(*upload, Upload::Open { .. }) {
            let old = std::mem::replace(&mut *upload, Upload::Aborted);
            // Dropping an unfinished writer aborts the upload (a request to the server).
            py.detach(|| drop(old));
        }
    }
}

#[pymethods]
impl RemoteWriter {
    /// Start an upload to the S3 object `key` of `bucket`.
    #[classmethod]
    #[pyo3(signature = (bucket, key, *, request_size = None, connections = None))]
    fn create_s3(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        bucket: &str,
        key: &str,
        request_size: Option<usize>,
        connections: Option<usize>,
    ) -> PyResult<RemoteWriter> {
        RemoteWriter::created(py, s3_url(bucket, key)?, request_size, connections)
    }

    /// Start an upload to the S3 object `url` names (`s3://bucket/key`).
    #[classmethod]
    #[pyo3(signature = (url, *, request_size = None, connections = None))]
    fn create_s3_url(
        _cls: &Bound<'_, PyType>,
        py: Python<'_>,
        url: &str,
        request_size: Option<usize>,
        connections: Option<usize>,
    ) -> PyResult<RemoteWriter> {
        let url = with_scheme(url, &["s3://"], "create_s3_url")?;
        RemoteWriter::created(py, url, request_size, connections)
    }

    /// Append `size` bytes (default: all) of `buf` (device memory or host memory) to the
    /// object; answer the bytes taken (all, or an error, after which the upload is aborted).
    /// The GIL is released while they are sent.
    #[pyo3(signature = (buf, size = None))]
    fn write(
        &self,
        py: Python<'_>,
        buf: &Bound<'_, PyAny>,
        size: Option<usize>,
    ) -> PyResult<usize> {
        let memory = memory_of(buf)?;
        let (_, size) = region(&memory, size, 0, IoOp::Write)?;
        let host = match &memory {
            Memory::Host { view, .. } => Some(HostBytes::of(view.bind(py))?),
            Memory::Device {
                stream: Some(raw), ..
            } => {
                let raw = *raw;
                let driver = hipfile::Driver::open().py()?;
                py.detach(|| wait_for_stream(&driver, raw)).py()?;
                None
            }
            Memory::Device { .. } => None,
        };
        let mut upload = self.lock();
        let Upload::Open {
            writer, written, ..
        } = &mut *upload
        else {
            return Err(PyValueError::new_err(format!(
                "write to a remote writer that is {}",
                match *upload {
                    Upload::Completed(_) => "closed",
                    _ => "aborted",
                }
            )));
        };
        let result = py.detach(|| -> Result<(), Error> {
            match (&host, &memory) {
                (_, _) if size == 0 => Ok(()),
                (Some(host), _) => {
                    let bytes = host.get(0..size).ok_or_else(|| {
                        Error::new(ErrorKind::InvalidValue, "the range lies past the buffer")
                    })?;
                    writer.write_host(bytes).map(drop).map_err(Error::from)
                }
                (None, &Memory::Device { ptr, len, .. }) => {
                    let whole = foreign::device(ptr, len);
                    let part = whole.slice(0..size)?;
                    writer.write(part).map(drop).map_err(Error::from)
                }
                (None, Memory::Host { .. }) => Err(Error::new(
                    ErrorKind::InvalidValue,
                    "host memory without its buffer",
                )),
            }
        });
        match result {
            Ok(()) => {
                *written += size as u64;
                Ok(size)
            }
            Err(e) => {
                let old = std::mem::replace(&mut *upload, Upload::Aborted);
                py.detach(|| drop(old));
                Err(to_py(&e))
            }
        }
    }

    /// Complete the upload: the object holds every byte written from now on; answer its size.
    /// Closing again answers the same; closing an aborted upload is `ValueError`.
    fn close(&self, py: Python<'_>) -> PyResult<u64> {
        let mut upload = self.lock();
        match std::mem::replace(&mut *upload, Upload::Aborted) {
            Upload::Open { writer, .. } => {
                let done = py
                    .detach(|| writer.finish())
                    .map_err(|e| to_py(&e.into()))?;
                *upload = Upload::Completed(done);
                Ok(done)
            }
            Upload::Completed(n) => {
                *upload = Upload::Completed(n);
                Ok(n)
            }
            Upload::Aborted => Err(PyValueError::new_err("the upload was aborted")),
        }
    }

    /// Abandon the upload: the object keeps what it held before. After `close`, nothing.
    fn abort(&self, py: Python<'_>) {
        self.abort_now(py);
    }

    /// Bytes written so far (the object's size, once closed).
    fn nbytes(&self) -> u64 {
        match &*self.lock() {
            Upload::Open { written, .. } => *written,
            Upload::Completed(n) => *n,
            Upload::Aborted => 0,
        }
    }

    /// Whether the upload ended (completed or aborted).
    #[getter]
    fn closed(&self) -> bool {
        !matches!(*self.lock(), Upload::Open { .. })
    }

    /// The object's URL.
    #[getter]
    fn url(&self) -> String {
        self.url.clone()
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    /// Complete the upload when the block ended normally; abort it on an exception (which
    /// propagates).
    fn __exit__(
        &self,
        py: Python<'_>,
        ty: Option<&Bound<'_, PyAny>>,
        _value: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if ty.is_some_and(|t| !t.is_none()) {
            self.abort_now(py);
        } else if !self.closed() {
            self.close(py)?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = match &*self.lock() {
            Upload::Open { written, .. } => format!("open, {written} bytes written"),
            Upload::Completed(n) => format!("completed, {n} bytes"),
            Upload::Aborted => "aborted".into(),
        };
        format!("<hipfile.RemoteWriter {} ({state})>", self.url)
    }
}
