"""Cleanup: files, registrations and driver references are given back, and requests in flight
keep what they use alive."""

import gc

import hipfile
from conftest import DlpackOnly, open_fds, pattern


def test_no_leaked_descriptors_or_references(make_file):
    path = make_file(pattern(1 << 16))
    buf = hipfile.empty(1 << 16)
    gc.collect()
    fds, refs = open_fds(), hipfile.use_count()
    for _ in range(20):
        with hipfile.open(path, "r") as f:
            assert f.read(buf) == 1 << 16
            assert f.pread(bytearray(100), 100).get() == 100
        with hipfile.FileHandle(path, "r") as fh:
            assert fh.read(buf, 10) == 10
        with hipfile.Buffer(buf):
            pass
        with hipfile.Driver():
            pass
    gc.collect()
    assert open_fds() == fds
    assert hipfile.use_count() == refs


def test_exception_inside_with_still_closes(make_file):
    path = make_file(pattern(4096))
    fds = open_fds()
    try:
        with hipfile.open(path, "r") as f:
            raise KeyError("boom")
    except KeyError:
        pass
    assert f.closed
    assert open_fds() == fds


def test_futures_outlive_close_and_their_array(make_file):
    data = pattern(1 << 20, seed=6)
    path = make_file(data)
    fds = open_fds()
    f = hipfile.open(path, "r")
    buf = hipfile.empty(len(data))
    futures = [f.pread(buf, 1 << 16, i << 16, i << 16) for i in range(16)]
    f.close()
    dlpack_futures = []
    g = hipfile.open(path, "r")
    dlpack_futures.append(g.pread(DlpackOnly(hipfile.empty(4096))))
    g.close()
    assert sum(fut.get() for fut in futures) == len(data)
    assert dlpack_futures[0].get() == 4096
    assert buf.tobytes() == data
    del futures, dlpack_futures
    gc.collect()
    assert open_fds() == fds


def test_device_buffer_and_stream_hold_the_driver():
    refs = hipfile.use_count()
    buf = hipfile.empty(64)
    stream = hipfile.Stream()
    capsule = buf.__dlpack__()
    assert hipfile.use_count() == refs + 2
    del buf, stream
    gc.collect()
    # The unconsumed capsule still holds the buffer.
    assert hipfile.use_count() == refs + 1
    del capsule
    gc.collect()
    assert hipfile.use_count() == refs
