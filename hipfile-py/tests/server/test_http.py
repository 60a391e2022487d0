"""``hipfile.RemoteFile`` against nginx on loopback (``HIPFILE_SERVER_TESTS=http``): objects read
into device memory and host memory, whole and in ranges, blocking and as futures."""

import numpy as np
import pytest

import hipfile
from conftest import pattern
from servers import nginx  # noqa: F401 (a fixture)


def put(nginx, name: str, data: bytes) -> str:
    (nginx.root / name).write_bytes(data)
    return nginx.url(name)


@pytest.mark.parametrize("size", [1, 4097, (3 << 20) + 5])
def test_an_object_reads_whole_into_device_and_host_memory(nginx, size):
    data = pattern(size, 1)
    url = put(nginx, f"whole-{size}", data)
    with hipfile.RemoteFile.open_http(url, request_size=256 << 10, connections=4) as f:
        assert f.nbytes() == size
        assert f.url == url
        buf = hipfile.empty(size)
        assert f.read(buf) == size
        assert buf.tobytes() == data
        host = np.zeros(size, dtype=np.uint8)
        assert f.read(host) == size
        assert host.tobytes() == data
    assert f.closed


def test_ranges_land_where_asked_and_are_short_only_at_the_end(nginx):
    size = 1 << 20
    data = pattern(size, 2)
    url = put(nginx, "ranges", data)
    with hipfile.RemoteFile.open(url, request_size=64 << 10) as f:
        buf = hipfile.empty(4096)
        assert f.read(buf, 1000, file_offset=123_456) == 1000
        assert buf.tobytes()[:1000] == data[123_456:124_456]
        tail = bytearray(1000)
        assert f.read(tail, file_offset=size - 300) == 300
        assert bytes(tail[:300]) == data[-300:]
        assert f.read(tail, file_offset=size) == 0


def test_pread_answers_futures_that_run_side_by_side(nginx):
    size = (2 << 20) + 77
    data = pattern(size, 3)
    url = put(nginx, "futures", data)
    with hipfile.RemoteFile.open_http(url, request_size=128 << 10) as f:
        part = size // 4 + 1
        bufs = [hipfile.empty(part) for _ in range(4)]
        futures = [f.pread(b, file_offset=i * part) for i, b in enumerate(bufs)]
        got = [fut.get() for fut in futures]
        assert all(fut.done() for fut in futures)
        assert got == [part, part, part, size - 3 * part]
        assert b"".join(b.tobytes()[:n] for b, n in zip(bufs, got)) == data
        # The same future answers the same again.
        assert futures[0].get() == part


def test_a_closed_object_refuses_reads_and_closing_twice_is_nothing(nginx):
    url = put(nginx, "closed", b"x" * 100)
    f = hipfile.RemoteFile.open_http(url)
    f.close()
    f.close()
    with pytest.raises(ValueError, match="closed"):
        f.read(bytearray(10))
    with pytest.raises(ValueError, match="closed"):
        f.nbytes()


def test_a_missing_object_is_file_not_found(nginx):
    with pytest.raises(FileNotFoundError) as e:
        hipfile.RemoteFile.open_http(nginx.url("absent"))
    assert "absent" in str(e.value)


def test_read_only_and_too_small_buffers_are_refused_before_any_request(nginx):
    url = put(nginx, "refusals", b"y" * 100)
    with hipfile.RemoteFile.open_http(url) as f:
        with pytest.raises(TypeError, match="read-only"):
            f.read(b"z" * 100)
        with pytest.raises(ValueError, match="do not fit"):
            f.read(bytearray(10), 20)
        with pytest.raises(HipFileErrorOrValue):
            f.read(bytearray(10), file_offset=-1)


HipFileErrorOrValue = (hipfile.HipFileError, ValueError)
