"""hipfile: GPU-direct storage IO from Python (AMD hipFile / NVIDIA cuFile), on hipfile-rs.

Two ways in, over one process-wide driver shared with C and Rust callers in the same process:

* KvikIO-like: ``hipfile.open(path, mode)`` answers a :class:`CuFile` that reads into and writes
  from any array: device arrays through ``__cuda_array_interface__`` (CuPy, Numba, PyTorch CUDA
  tensors, :class:`DeviceBuffer`) or DLPack (``__dlpack__``), and host arrays through the buffer
  protocol (NumPy, ``bytearray``, ``mmap``...). ``read``/``write`` block; ``pread``/``pwrite``
  answer an :class:`IOFuture`; ``read_async``/``write_async`` queue the IO on a GPU stream.
* remote objects (KvikIO's ``RemoteFile``): ``hipfile.RemoteFile.open_s3(bucket, key)``,
  ``open_s3_url("s3://bucket/key")``, ``open_http(url)`` read an object into device or host
  memory by ranged requests in parallel (``nbytes()``, ``read``, ``pread`` answering an
  :class:`IOFuture`); :class:`RemoteWriter` uploads to ``s3://`` (``create_s3``, ``write``,
  ``close`` completes the object, ``abort``). Settings: ``HIPFILE_REMOTE_*`` or the keyword
  arguments ``request_size`` and ``connections``; S3 endpoint and credentials: ``AWS_*``.
* upstream hipFile's shape: :class:`Driver` (open/close with reference counting),
  :class:`FileHandle`, :class:`Buffer` (registration), :func:`get_version`,
  :func:`driver_get_properties`.

The platform is picked as by the C library: ``HIPFILE_PLATFORM=amd|nvidia|sim`` when set, else
the first GPU runtime that reports a device. ``HIPFILE_PLATFORM=sim`` runs everything on the
simulated GPU (host memory standing in for device memory), with no GPU needed.

Two versions: ``hipfile.__version__`` is this package's (hipfile-rs's release, say ``0.1.0``);
``hipfile.API_VERSION`` (and :func:`get_version`, upstream's ``hipFileGetVersion``) is the
version of upstream hipFile's C API the library implements (say ``(0, 2, 0)``), which moves with
upstream's API, not with this package.

Errors: ``OSError`` (errno) where the C API answers ``-1``/errno; :class:`HipFileError` with
``.hipfile_code`` (the ``hipFileOpError_t`` number), ``.hipfile_name`` and ``.runtime_code``
otherwise; ``ValueError``/``TypeError`` for bad arguments, before any IO.

Example::

    import hipfile
    buf = hipfile.empty(1 << 20)            # or a CuPy array, a torch CUDA tensor...
    with hipfile.open("weights.bin", "r") as f:
        n = f.read(buf)                     # bytes read; short only at end of file
"""

from __future__ import annotations

import os as _os
from typing import Any, Optional, Union

from ._hipfile import (
    API_VERSION,
    Buffer,
    CuFile,
    DeviceBuffer,
    Driver,
    HipFileError,
    IOFuture,
    RemoteFile,
    RemoteWriter,
    Stream,
    StreamFuture,
    __version__,
    device_count,
    driver_get_properties,
    empty,
    get_device,
    get_version,
    num_threads,
    set_device,
    task_size,
    to_device,
    use_count,
)

__all__ = [
    "API_VERSION",
    "Buffer",
    "CuFile",
    "DeviceBuffer",
    "Driver",
    "FileHandle",
    "HipFileError",
    "IOFuture",
    "RemoteFile",
    "RemoteWriter",
    "Stream",
    "StreamFuture",
    "__version__",
    "device_count",
    "driver_get_properties",
    "empty",
    "get_device",
    "get_version",
    "num_threads",
    "open",
    "set_device",
    "task_size",
    "to_device",
    "use_count",
]


def open(file: Union[str, "_os.PathLike[str]", int], mode: str = "r") -> CuFile:
    """Open ``file`` (a path, or a descriptor the caller keeps open) with Python's ``mode`` and
    register it with the process-wide driver.

    Modes, as Python's ``open``: ``"r"`` reads (writes raise ``io.UnsupportedOperation``);
    ``"w"`` creates or truncates, write-only; ``"a"`` creates, never truncates, write-only, and a
    write without ``file_offset`` (``write_async`` included) goes to the end of the file, past
    the writes without one sent before it, so appends in flight at once never overlap; ``"x"``
    creates a new file (``FileExistsError`` if it exists); ``+`` adds the missing direction;
    ``b`` changes nothing. Anything else is ``ValueError``.

    A file that cannot be opened raises what Python's ``open`` raises: the ``OSError`` subclass
    of its errno (``FileNotFoundError``, ``PermissionError``, ``IsADirectoryError``, for
    reading a directory too...) with ``.errno``, ``.strerror`` and ``.filename`` set.
    """
    return CuFile(file, mode)


class FileHandle:
    """A file registered with the driver, in upstream hipFile's shape (``hipFileHandleRegister``):
    blocking ``read``/``write`` of ``size`` bytes at ``file_offset`` into/from ``buffer`` at
    ``buffer_offset``, each one request on the calling thread. Deregistered by
    ``deregister()``/``close()`` or leaving the ``with`` block.

    ``file`` is a path (opened with ``mode``, as :func:`open`) or a descriptor the caller keeps
    open until the handle is closed (``mode`` then only says which directions are allowed).
    """

    def __init__(self, file: Union[str, "_os.PathLike[str]", int], mode: str = "r") -> None:
        self._file = CuFile(file, mode)

    def read(
        self, buffer: Any, size: Optional[int] = None, file_offset: int = 0, buffer_offset: int = 0
    ) -> int:
        """``hipFileRead``: the bytes read (fewer only at end of file)."""
        return self._file.raw_read(buffer, size, file_offset, buffer_offset)

    def write(
        self, buffer: Any, size: Optional[int] = None, file_offset: int = 0, buffer_offset: int = 0
    ) -> int:
        """``hipFileWrite``: the bytes written (all, or an error)."""
        return self._file.raw_write(buffer, size, file_offset, buffer_offset)

    def fileno(self) -> int:
        """The registered descriptor."""
        return self._file.fileno()

    @property
    def closed(self) -> bool:
        """Whether the handle was deregistered."""
        return self._file.closed

    @property
    def policy(self) -> str:
        """How the handle's requests are served (hipfile-rs extension): ``"fallback"`` or
        ``"direct_only"``; see :attr:`CuFile.policy`."""
        return self._file.policy

    @policy.setter
    def policy(self, policy: str) -> None:
        self._file.policy = policy

    def deregister(self) -> None:
        """``hipFileHandleDeregister`` (and close a file opened by path). Twice does nothing."""
        self._file.close()

    close = deregister

    def __enter__(self) -> "FileHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.deregister()
