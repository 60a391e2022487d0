"""DLPack producers: a versioned capsule (``"dltensor_versioned"``, DLPack 1.x) is asked for with
``max_version`` and its flags are honoured; producers that know no ``max_version`` still work."""

import ctypes

import pytest

import hipfile
from conftest import pattern


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [
        ("version", DLPackVersion),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", DLTensor),
    ]


READ_ONLY = 1 << 0
IS_COPIED = 1 << 1

#: The capsule's name: a C string that outlives every capsule (PyCapsule_New keeps the pointer).
VERSIONED = b"dltensor_versioned"

capsule_new = ctypes.pythonapi.PyCapsule_New
capsule_new.restype = ctypes.py_object
capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]


class VersionedProducer:
    """A device buffer exported as a DLPack 1.x tensor with ``flags`` when the consumer passes
    ``max_version`` (as the array API asks), else as the unversioned capsule; it records what
    each call asked for, and keeps every tensor it made alive (the capsules have no destructor)."""

    def __init__(self, buf, flags=0, version=(1, 0)):
        self.buf = buf
        self.flags = flags
        self.version = version
        self.asked = []
        self.tensors = []

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        self.asked.append(max_version)
        if max_version is None or max_version[0] < 1:
            return self.buf.__dlpack__()
        shape = (ctypes.c_int64 * 1)(self.buf.nbytes)
        tensor = DLManagedTensorVersioned()
        tensor.version = DLPackVersion(*self.version)
        tensor.flags = self.flags
        tensor.dl_tensor.data = self.buf.ptr
        tensor.dl_tensor.device = DLDevice(*self.buf.__dlpack_device__())
        tensor.dl_tensor.ndim = 1
        tensor.dl_tensor.dtype = DLDataType(1, 8, 1)
        tensor.dl_tensor.shape = shape
        self.tensors.append((tensor, shape))
        return capsule_new(ctypes.addressof(tensor), VERSIONED, None)

    def __dlpack_device__(self):
        return self.buf.__dlpack_device__()


class UnversionedProducer:
    """A producer from before DLPack 1.0: ``__dlpack__`` takes no ``max_version``."""

    def __init__(self, buf):
        self.buf = buf

    def __dlpack__(self, stream=None):
        return self.buf.__dlpack__()

    def __dlpack_device__(self):
        return self.buf.__dlpack_device__()


def test_a_read_only_versioned_tensor_is_written_from_but_never_read_into(make_file, tmp_path):
    data = pattern(8192, seed=40)
    buf = hipfile.to_device(b"R" * 4096)
    producer = VersionedProducer(buf, READ_ONLY)
    with hipfile.open(make_file(data), "r") as f:
        for call in (f.read, f.raw_read):
            with pytest.raises(TypeError, match="read-only"):
                call(producer)
        with pytest.raises(TypeError, match="read-only"):
            f.pread(producer).get()
        with pytest.raises(TypeError, match="read-only"):
            f.read_async(producer).get()
    assert buf.tobytes() == b"R" * 4096, "nothing was read into it"
    assert producer.asked and all(v == (1, 0) for v in producer.asked)
    out = str(tmp_path / "out")
    with hipfile.open(out, "w") as f:
        assert f.write(producer) == 4096
        assert f.pwrite(producer, 100, 4096).get() == 100
        assert f.write_async(producer, 10, 4196).get() == 10
    with open(out, "rb") as f:
        assert f.read() == b"R" * 4206


def test_a_writable_versioned_tensor_is_read_into(make_file):
    data = pattern(8192, seed=41)
    buf = hipfile.empty(4096)
    producer = VersionedProducer(buf)
    with hipfile.open(make_file(data), "r") as f:
        assert f.read(producer, file_offset=4096) == 4096
        assert f.read_async(producer, 16).get() == 16
    assert buf.tobytes() == data[:16] + data[4096 + 16 :]
    assert producer.asked == [(1, 0), (1, 0)]


def test_a_copy_is_never_read_into(make_file):
    """A tensor the producer flags as a copy of the array: a read into it would not reach the
    array."""
    buf = hipfile.to_device(b"C" * 4096)
    with hipfile.open(make_file(pattern(4096)), "r") as f:
        with pytest.raises(TypeError, match="copy"):
            f.read(VersionedProducer(buf, IS_COPIED))
    assert buf.tobytes() == b"C" * 4096


def test_an_unknown_major_version_is_refused(make_file):
    buf = hipfile.to_device(b"V" * 4096)
    with hipfile.open(make_file(pattern(4096)), "r") as f:
        with pytest.raises(ValueError, match="DLPack 2.0"):
            f.read(VersionedProducer(buf, version=(2, 0)))
    assert buf.tobytes() == b"V" * 4096


def test_a_producer_without_max_version_is_read_through_its_unversioned_capsule(make_file):
    data = pattern(4096, seed=42)
    buf = hipfile.empty(4096)
    with hipfile.open(make_file(data), "r") as f:
        assert f.read(UnversionedProducer(buf)) == 4096
    assert buf.tobytes() == data


class ClaimsDevice:
    """A NumPy array's DLPack export presented as device memory: NumPy (2.1 and later) writes
    versioned capsules itself, so the layout and flags are read from a producer not written
    here. The memory is host memory, which the GPU runtime refuses once a request reaches it."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return hipfile.empty(1).__dlpack_device__()


def test_numpys_versioned_capsule_is_read_with_its_flags(make_file):
    np = pytest.importorskip("numpy")
    readonly = np.zeros(4096, np.uint8)
    readonly.flags.writeable = False
    writable = np.zeros(4096, np.uint8)
    with hipfile.open(make_file(pattern(4096)), "r") as f:
        with pytest.raises(TypeError, match="read-only"):
            f.read(ClaimsDevice(readonly))
        # The capsule was read (pointer, shape): the runtime, not the binding, refuses it.
        with pytest.raises(hipfile.HipFileError) as e:
            f.read(ClaimsDevice(writable))
        assert e.value.hipfile_name == "hipFileHipMemoryTypeInvalid"
    assert not writable.any()
