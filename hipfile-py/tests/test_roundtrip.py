"""Round trips between files and device or host memory, at offsets, with short reads at the end
of the file and empty requests; every byte checked."""

import os

import numpy as np
import pytest

import hipfile
from conftest import ON_SIM, DlpackOnly, pattern


class CudaArrayOnly:
    """Device memory seen only through ``__cuda_array_interface__``."""

    def __init__(self, buf):
        self.buf = buf
        self.__cuda_array_interface__ = buf.__cuda_array_interface__


DEVICE_VIEWS = [lambda b: b, CudaArrayOnly, DlpackOnly]


@pytest.mark.parametrize("view", DEVICE_VIEWS, ids=["DeviceBuffer", "cai", "dlpack"])
def test_device_round_trip(make_file, tmp_path, view):
    data = pattern(1 << 20)
    src = make_file(data)
    buf = hipfile.empty(len(data))
    with hipfile.open(src, "r") as f:
        assert f.read(view(buf)) == len(data)
    assert buf.tobytes() == data
    dst = str(tmp_path / "out")
    with hipfile.open(dst, "w") as f:
        assert f.write(view(buf)) == len(data)
    with open(dst, "rb") as f:
        assert f.read() == data


def test_device_offsets(make_file):
    data = pattern(64 * 1024, seed=3)
    src = make_file(data)
    buf = hipfile.to_device(b"\xee" * 32768)
    with hipfile.open(src, "r+") as f:
        # 10000 bytes of the file at 12345 land at 777 in the buffer; nothing else changes.
        assert f.read(buf, 10000, 12345, 777) == 10000
        got = buf.tobytes()
        assert got[777:10777] == data[12345:22345]
        assert got[:777] == b"\xee" * 777
        assert got[10777:] == b"\xee" * (32768 - 10777)
        # Write 100 bytes from device offset 777 to file offset 5.
        assert f.write(buf, 100, 5, 777) == 100
    with open(src, "rb") as f:
        on_disk = f.read()
    assert on_disk[5:105] == data[12345:12445]
    assert on_disk[:5] == data[:5] and on_disk[105:] == data[105:]


def test_size_defaults_to_the_rest_of_the_buffer(make_file):
    data = pattern(8192)
    with hipfile.open(make_file(data), "r") as f:
        buf = hipfile.empty(8192)
        buf.fill(0)
        assert f.read(buf, dev_offset=4096) == 4096
        assert buf.tobytes()[4096:] == data[:4096]
        assert buf.tobytes()[:4096] == bytes(4096)


def test_short_read_at_end_of_file(make_file):
    data = pattern(10000)
    with hipfile.open(make_file(data), "r") as f:
        buf = hipfile.empty(8192)
        buf.fill(0xAB)
        assert f.read(buf, file_offset=6000) == 4000
        got = buf.tobytes()
        assert got[:4000] == data[6000:]
        assert got[4000:] == b"\xab" * 4192
        assert f.read(buf, file_offset=10000) == 0
        assert f.read(buf, file_offset=1 << 40) == 0
        host = bytearray(b"\xcd" * 8192)
        assert f.read(host, file_offset=6000) == 4000
        assert host[:4000] == data[6000:] and host[4000:] == b"\xcd" * 4192


def test_empty_requests(make_file):
    with hipfile.open(make_file(pattern(4096)), "r+") as f:
        buf = hipfile.to_device(b"\x01" * 4096)
        assert f.read(buf, 0) == 0
        assert f.read(buf, 0, 0, 4096) == 0
        assert f.write(buf, 0) == 0
        assert f.read(bytearray(), None) == 0
        assert f.pread(buf, 0).get() == 0
        # An empty framework array may sit at address 0.
        nowhere = CudaArrayOnly(buf)
        nowhere.__cuda_array_interface__ = dict(
            nowhere.__cuda_array_interface__, shape=(0,), data=(0, False)
        )
        assert f.read(nowhere) == 0 and f.write(nowhere) == 0
        assert buf.tobytes() == b"\x01" * 4096
        assert f.nbytes() == 4096


def test_host_round_trip_numpy(make_file, tmp_path):
    data = pattern(3 * 4096 * 4)
    src = make_file(data)
    a = np.zeros((3, 4096), dtype=np.float32)
    with hipfile.open(src, "r") as f:
        assert f.read(a) == a.nbytes
    assert a.tobytes() == data
    dst = str(tmp_path / "host-out")
    with hipfile.open(dst, "w") as f:
        # A read-only host buffer may be written from.
        assert f.write(bytes(data)) == len(data)
        assert f.write(memoryview(a)[1:], file_offset=0) == 2 * 4096 * 4
    with open(dst, "rb") as f:
        assert f.read() == data[4096 * 4 :] + data[2 * 4096 * 4 :]


def test_host_offsets(make_file):
    data = pattern(50000, seed=9)
    with hipfile.open(make_file(data), "r") as f:
        host = bytearray(20000)
        assert f.read(host, 1000, 30000, 123) == 1000
        assert host[123:1123] == data[30000:31000]
        assert host[:123] == bytes(123) and host[1123:] == bytes(20000 - 1123)


def test_raw_calls_and_upstream_file_handle(make_file):
    data = pattern(16384, seed=1)
    path = make_file(data)
    buf = hipfile.empty(16384)
    with hipfile.open(path, "r+") as f:
        assert f.raw_read(buf, 8192, 4096) == 8192
        assert buf.tobytes()[:8192] == data[4096:12288]
        assert f.raw_write(buf, 4096, 0) == 4096
    with open(path, "rb") as f:
        assert f.read(4096) == data[4096:8192]
    with hipfile.FileHandle(path, "r") as fh:
        assert fh.read(buf, 100, 16300, 1) == 84
        assert buf.tobytes()[1:85] == data[16300:]
    assert fh.closed


def test_registered_buffer_round_trip(make_file, tmp_path):
    data = pattern(1 << 18, seed=5)
    buf = hipfile.empty(len(data))
    with hipfile.Buffer(buf) as reg:
        assert reg.registered and reg.nbytes == len(data) and reg.ptr == buf.ptr
        with hipfile.open(make_file(data), "r") as f:
            assert f.read(buf) == len(data)
            # A part of the registered buffer (same first byte, an offset) too.
            assert f.read(buf, 4096, 0, 8192) == 4096
    assert not reg.registered
    assert buf.tobytes()[:8192] == data[:8192]
    assert buf.tobytes()[8192:12288] == data[:4096]
    assert buf.tobytes()[12288:] == data[12288:]


def test_modes(tmp_path):
    path = str(tmp_path / "m")
    buf = hipfile.to_device(b"0123456789")
    with hipfile.open(path, "w") as f:
        assert f.mode == "w"
        assert f.write(buf) == 10
    # "a" appends where no offset is given, and never truncates.
    with hipfile.open(path, "a") as f:
        assert f.write(buf, 3) == 3
        assert f.write(buf, 2, file_offset=0, dev_offset=8) == 2
    with open(path, "rb") as f:
        assert f.read() == b"8923456789012"
    # "w" truncates.
    with hipfile.open(path, "wb") as f:
        assert f.nbytes() == 0
    with pytest.raises(FileExistsError):
        hipfile.open(path, "x")
    with hipfile.open(str(tmp_path / "new"), "x+") as f:
        assert f.write(buf) == 10
        out = hipfile.empty(10)
        assert f.read(out) == 10
        assert out.tobytes() == b"0123456789"


def test_open_by_descriptor(make_file):
    data = pattern(4096)
    path = make_file(data)
    fd = os.open(path, os.O_RDONLY)
    try:
        buf = hipfile.empty(4096)
        with hipfile.open(fd, "r") as f:
            assert f.fileno() == fd
            assert f.read(buf) == 4096
        # The caller's descriptor stays open.
        assert os.pread(fd, 4, 0) == data[:4]
    finally:
        os.close(fd)
    assert buf.tobytes() == data


def test_device_buffer_interfaces():
    buf = hipfile.to_device(b"abc")
    cai = buf.__cuda_array_interface__
    assert cai["version"] == 3 and cai["shape"] == (3,) and cai["typestr"] == "|u1"
    assert cai["data"] == (buf.ptr, False)
    assert buf.__dlpack_device__()[0] in (2, 10)
    assert len(buf) == buf.nbytes == 3
    buf.copy_from_host(b"Z", 1)
    assert buf.copy_to_host() == b"aZc"
    assert buf.copy_to_host(1) == b"Zc"
    assert buf.copy_to_host(1, 1) == b"Z"
    assert buf.copy_to_host(3) == b""
    with pytest.raises(ValueError):
        buf.copy_to_host(2, 2)
    with pytest.raises(ValueError):
        buf.copy_from_host(b"abcd")
    with pytest.raises(ValueError):
        hipfile.empty(0)


def test_version_properties_and_driver_reference_counting():
    assert hipfile.get_version() == (0, 2, 0)
    props = hipfile.driver_get_properties()
    assert props["max_batch_io_count"] > 0 and props["per_buffer_cache_size"] > 0
    base = hipfile.use_count()
    with hipfile.Driver() as d:
        assert hipfile.use_count() == base + 1
        with hipfile.Driver():
            assert hipfile.use_count() == base + 2
        assert hipfile.use_count() == base + 1
        assert "fallback" in d.backends()
        assert d.platform() in ("sim", "amd", "nvidia")
    assert d.closed
    assert hipfile.use_count() == base


def test_cuda_array_interface_stream_is_waited_for(make_file):
    """A version-3 array names the stream its producer's work is queued on; hipfile waits for it
    before using the array (here the stream has an ended read queued, and must be known to the
    runtime: an unknown handle fails)."""
    data = pattern(8192, seed=14)
    buf = hipfile.empty(8192)
    stream = hipfile.Stream()
    array = CudaArrayOnly(buf)
    array.__cuda_array_interface__ = dict(array.__cuda_array_interface__, stream=stream.ptr)
    with hipfile.open(make_file(data), "r") as f:
        f.read_async(buf, 4096, 0, 0, stream)
        assert f.read(array, 4096, 4096, 4096) == 4096
        assert buf.tobytes() == data
        if not ON_SIM:
            return  # a bogus handle is undefined behaviour on a real runtime
        bad = CudaArrayOnly(buf)
        bad.__cuda_array_interface__ = dict(bad.__cuda_array_interface__, stream=0xDEAD0)
        with pytest.raises(hipfile.HipFileError) as e:
            f.read(bad)
        assert e.value.hipfile_name == "hipFileHipDriverError"
        assert e.value.runtime_code is not None
