"""``hipfile.RemoteWriter`` and ``hipfile.RemoteFile`` against the S3 endpoint of the ``AWS_*``
environment (``HIPFILE_SERVER_TESTS=s3``; ``cargo xtask ceph up`` brings one up): uploads from
device and host memory read back byte for byte, an aborted upload leaves no object."""

import numpy as np
import pytest

import hipfile
from conftest import pattern
from servers import s3_bucket  # noqa: F401 (a fixture)

MIB = 1 << 20


def test_an_upload_from_device_memory_reads_back_whole(s3_bucket):
    data = pattern(12 * MIB + 7, 5)
    src = hipfile.to_device(data)
    with hipfile.RemoteWriter.create_s3(s3_bucket, "dir/object.bin", request_size=5 * MIB) as w:
        # Two writes whose cut is not on a part boundary.
        assert w.write(src, 7 * MIB + 3) == 7 * MIB + 3
        rest = hipfile.to_device(data[7 * MIB + 3 :])
        assert w.write(rest) == len(data) - (7 * MIB + 3)
        assert w.nbytes() == len(data)
    assert w.closed and w.close() == len(data)
    with hipfile.RemoteFile.open_s3_url(f"s3://{s3_bucket}/dir/object.bin", connections=8) as f:
        assert f.nbytes() == len(data)
        dst = hipfile.empty(len(data))
        assert f.read(dst) == len(data)
        assert dst.tobytes() == data
        host = np.empty(3 * MIB, dtype=np.uint8)
        assert f.pread(host, file_offset=5 * MIB + 1).get() == 3 * MIB
        assert host.tobytes() == data[5 * MIB + 1 : 8 * MIB + 1]


def test_an_upload_from_host_memory_and_read_only_bytes(s3_bucket):
    with hipfile.RemoteWriter.create_s3(s3_bucket, "host.bin") as w:
        w.write(b"read-only bytes, ")
        w.write(bytearray(b"then a bytearray"))
    with hipfile.RemoteFile.open_s3(s3_bucket, "host.bin") as f:
        out = bytearray(f.nbytes())
        assert f.read(out) == len(out)
    assert bytes(out) == b"read-only bytes, then a bytearray"


def test_an_exception_in_the_block_aborts_the_upload(s3_bucket):
    with pytest.raises(RuntimeError, match="stop"):
        with hipfile.RemoteWriter.create_s3(s3_bucket, "aborted.bin") as w:
            w.write(b"x" * 1000)
            raise RuntimeError("stop")
    assert w.closed
    with pytest.raises(ValueError, match="aborted"):
        w.close()
    with pytest.raises(FileNotFoundError):
        hipfile.RemoteFile.open_s3(s3_bucket, "aborted.bin")


def test_a_missing_key_is_file_not_found(s3_bucket):
    with pytest.raises(FileNotFoundError):
        hipfile.RemoteFile.open_s3(s3_bucket, "no-such-key")
