"""Type stubs of the native module ``hipfile._hipfile`` (see ``hipfile`` for the overview)."""

import os
from types import TracebackType
from typing import Any, Dict, List, Optional, Tuple, Type, Union

__version__: str
"""The package's version: hipfile-rs's release."""
API_VERSION: Tuple[int, int, int]
"""The hipFile C API version implemented (``hipFileGetVersion``), not the package's."""

_Stream = Union[None, int, Any]  # an int handle, or an object with .ptr / .cuda_stream
# What `__exit__` is given: the exception leaving the `with` block, if one does.
_ExcType = Optional[Type[BaseException]]
_Exc = Optional[BaseException]
_Traceback = Optional[TracebackType]

class HipFileError(Exception):
    """A hipFile failure that is not an OS error."""

    hipfile_code: Optional[int]
    """The ``hipFileOpError_t`` number (5001...)."""
    hipfile_name: Optional[str]
    """Its upstream name, e.g. ``"hipFileInvalidValue"``."""
    runtime_code: Optional[int]
    """The GPU runtime's ``hipError_t`` when the runtime caused the failure."""

class Driver:
    """One reference on the process-wide driver (``hipFileDriverOpen``/``Close``)."""

    def __init__(self) -> None: ...
    def close(self) -> None:
        """Give the reference back; twice does nothing."""
    @property
    def closed(self) -> bool: ...
    def backends(self) -> List[str]:
        """Backends requests are offered to, in order; ``HipFileError`` once closed."""
    def platform(self) -> str:
        """``"amd"``, ``"nvidia"`` or ``"sim"``."""
    @property
    def p2p_mechanisms(self) -> List[str]:
        """Direct (P2P) mechanisms allowed (hipfile-rs extension): ``"amd_kfd"``,
        ``"nvidia_fs"``, ``"sim"``; set a list of names to allow only those."""
    @p2p_mechanisms.setter
    def p2p_mechanisms(self, names: List[str]) -> None: ...
    def __enter__(self) -> "Driver": ...
    def __exit__(self, ty: _ExcType, value: _Exc, tb: _Traceback) -> bool: ...

class Buffer:
    """Device memory registered with the driver (``hipFileBufRegister``)."""

    def __init__(self, array: Any) -> None: ...
    @property
    def ptr(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def array(self) -> Any: ...
    @property
    def registered(self) -> bool: ...
    def deregister(self) -> None:
        """``hipFileBufDeregister``; twice does nothing."""
    def __enter__(self) -> "Buffer": ...
    def __exit__(self, ty: _ExcType, value: _Exc, tb: _Traceback) -> bool: ...

class IOFuture:
    """A read or write running on hipfile's thread pool."""

    def get(self) -> int:
        """Wait (GIL released); the bytes moved, or raise the request's error."""
    def done(self) -> bool: ...

class StreamFuture:
    """An op queued on a GPU stream."""

    def get(self) -> int:
        """Wait until the stream reached the op and it ended; the bytes moved."""
    def done(self) -> bool: ...
    def set_size(self, size: int) -> None:
        """Late-bind a smaller size before the stream reaches the op."""
    def set_file_offset(self, file_offset: int) -> None:
        """Late-bind the file offset before the stream reaches the op."""

class CuFile:
    """A file registered with hipfile (KvikIO's ``CuFile``); see ``hipfile.open``."""

    def __init__(self, file: Union[str, "os.PathLike[str]", int], mode: str = "r") -> None: ...
    def read(
        self, buf: Any, size: Optional[int] = None, file_offset: int = 0, dev_offset: int = 0
    ) -> int: ...
    def write(
        self,
        buf: Any,
        size: Optional[int] = None,
        file_offset: Optional[int] = None,
        dev_offset: int = 0,
    ) -> int: ...
    def pread(
        self, buf: Any, size: Optional[int] = None, file_offset: int = 0, dev_offset: int = 0
    ) -> IOFuture: ...
    def pwrite(
        self,
        buf: Any,
        size: Optional[int] = None,
        file_offset: Optional[int] = None,
        dev_offset: int = 0,
    ) -> IOFuture: ...
    def raw_read(
        self, buf: Any, size: Optional[int] = None, file_offset: int = 0, dev_offset: int = 0
    ) -> int: ...
    def raw_write(
        self,
        buf: Any,
        size: Optional[int] = None,
        file_offset: Optional[int] = None,
        dev_offset: int = 0,
    ) -> int: ...
    def read_async(
        self,
        buf: Any,
        size: Optional[int] = None,
        file_offset: int = 0,
        dev_offset: int = 0,
        stream: _Stream = None,
    ) -> StreamFuture: ...
    def write_async(
        self,
        buf: Any,
        size: Optional[int] = None,
        file_offset: Optional[int] = None,
        dev_offset: int = 0,
        stream: _Stream = None,
    ) -> StreamFuture: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    @property
    def mode(self) -> str: ...
    def fileno(self) -> int: ...
    def nbytes(self) -> int: ...
    @property
    def policy(self) -> str:
        """``"fallback"`` (default) or ``"direct_only"`` (hipfile-rs extension): direct only,
        a request the direct path does not run fails with ``hipFileIONotSupported``."""
    @policy.setter
    def policy(self, policy: str) -> None: ...
    def __enter__(self) -> "CuFile": ...
    def __exit__(self, ty: _ExcType, value: _Exc, tb: _Traceback) -> bool: ...

class DeviceBuffer:
    """Device memory allocated through the driver: a 1-D ``uint8`` device array."""

    @property
    def ptr(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    def __len__(self) -> int: ...
    @property
    def __cuda_array_interface__(self) -> Dict[str, Any]: ...
    def __dlpack__(
        self,
        *,
        stream: Any = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    def tobytes(self) -> bytes: ...
    def copy_to_host(self, offset: int = 0, size: Optional[int] = None) -> bytes: ...
    def copy_from_host(self, data: Any, offset: int = 0) -> None: ...
    def fill(self, value: int) -> None: ...

class Stream:
    """A GPU stream of the driver's runtime."""

    def __init__(self) -> None: ...
    @property
    def ptr(self) -> int: ...
    def synchronize(self) -> None: ...

class RemoteFile:
    """A remote object opened for reading (KvikIO's ``RemoteFile``): ``s3://`` or ``http(s)://``."""

    @classmethod
    def open_s3(
        cls,
        bucket: str,
        key: str,
        *,
        request_size: Optional[int] = None,
        connections: Optional[int] = None,
    ) -> "RemoteFile": ...
    @classmethod
    def open_s3_url(
        cls, url: str, *, request_size: Optional[int] = None, connections: Optional[int] = None
    ) -> "RemoteFile": ...
    @classmethod
    def open_http(
        cls, url: str, *, request_size: Optional[int] = None, connections: Optional[int] = None
    ) -> "RemoteFile": ...
    @classmethod
    def open(
        cls, url: str, *, request_size: Optional[int] = None, connections: Optional[int] = None
    ) -> "RemoteFile": ...
    def nbytes(self) -> int: ...
    @property
    def url(self) -> str: ...
    def read(self, buf: Any, size: Optional[int] = None, file_offset: int = 0) -> int: ...
    def pread(self, buf: Any, size: Optional[int] = None, file_offset: int = 0) -> IOFuture: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> "RemoteFile": ...
    def __exit__(self, ty: _ExcType, value: _Exc, tb: _Traceback) -> bool: ...

class RemoteWriter:
    """A multipart upload to an ``s3://`` object: ``write`` appends, ``close`` completes."""

    @classmethod
    def create_s3(
        cls,
        bucket: str,
        key: str,
        *,
        request_size: Optional[int] = None,
        connections: Optional[int] = None,
    ) -> "RemoteWriter": ...
    @classmethod
    def create_s3_url(
        cls, url: str, *, request_size: Optional[int] = None, connections: Optional[int] = None
    ) -> "RemoteWriter": ...
    def write(self, buf: Any, size: Optional[int] = None) -> int: ...
    def close(self) -> int: ...
    def abort(self) -> None: ...
    def nbytes(self) -> int: ...
    @property
    def closed(self) -> bool: ...
    @property
    def url(self) -> str: ...
    def __enter__(self) -> "RemoteWriter": ...
    def __exit__(self, ty: _ExcType, value: _Exc, tb: _Traceback) -> bool: ...

def use_count() -> int:
    """References held on the process-wide driver (``hipFileUseCount``)."""

def get_version() -> Tuple[int, int, int]:
    """``hipFileGetVersion``: the hipFile C API version implemented, ``(major, minor, patch)``
    (``API_VERSION``; the package's own version is ``__version__``)."""

def driver_get_properties() -> Dict[str, int]:
    """``hipFileDriverGetProperties`` as a dict (sizes in KiB)."""

def empty(nbytes: int) -> DeviceBuffer:
    """A new device buffer of ``nbytes`` bytes (contents undefined)."""

def to_device(data: Any) -> DeviceBuffer:
    """A new device buffer holding the bytes of ``data``."""

def device_count() -> int:
    """Devices the platform reports (``hipGetDeviceCount``)."""

def get_device() -> int:
    """The calling thread's current device (``hipGetDevice``)."""

def set_device(device: int) -> None:
    """Make ``device`` the calling thread's current device (``hipSetDevice``)."""

def num_threads() -> int:
    """Threads of the pool behind ``pread``/``pwrite`` and split calls (``HIPFILE_PY_THREADS``)."""

def task_size() -> int:
    """Largest part of one ``read``/``write``/``pread``/``pwrite`` sent as one request
    (``HIPFILE_PY_TASK_SIZE``, at most and by default 2 GiB less 4 KiB); larger calls are split."""
