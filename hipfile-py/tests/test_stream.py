"""Stream-ordered reads and writes (``read_async``/``write_async``) on the null stream and on
streams made through the driver, named every way Python programs name them."""

import pytest

import hipfile
from conftest import current_device, needs_two_devices, pattern


class CupyLikeStream:
    def __init__(self, ptr):
        self.ptr = ptr


class TorchLikeStream:
    def __init__(self, ptr):
        self.cuda_stream = ptr


def stream_arguments():
    s = hipfile.Stream()
    return [
        ("none", None, None),
        ("zero", 0, None),
        ("Stream", s, s),
        ("int", s.ptr, s),
        (".ptr", CupyLikeStream(s.ptr), s),
        (".cuda_stream", TorchLikeStream(s.ptr), s),
    ]


@pytest.mark.parametrize("index", range(6), ids=["none", "zero", "Stream", "int", "ptr", "cuda_stream"])
def test_read_and_write_on_a_stream(make_file, tmp_path, index):
    name, stream, owner = stream_arguments()[index]
    data = pattern(256 * 1024, seed=index)
    buf = hipfile.empty(len(data))
    buf.fill(0)
    with hipfile.open(make_file(data), "r") as f:
        first = f.read_async(buf, 128 * 1024, 0, 0, stream)
        second = f.read_async(buf, 128 * 1024, 128 * 1024, 128 * 1024, stream)
        assert second.get() == 128 * 1024
        # Ops run in the stream's order: the first ended before the second.
        assert first.done() and first.get() == 128 * 1024
    assert buf.tobytes() == data
    out = str(tmp_path / "out")
    with hipfile.open(out, "w") as f:
        assert f.write_async(buf, 1000, 7, 5, stream).get() == 1000
    if owner is not None:
        owner.synchronize()
    with open(out, "rb") as f:
        assert f.read() == bytes(7) + data[5:1005]


def test_short_stream_read_at_end_of_file(make_file):
    data = pattern(5000)
    buf = hipfile.empty(8192)
    with hipfile.open(make_file(data), "r") as f:
        assert f.read_async(buf, file_offset=1000).get() == 4000
    assert buf.tobytes()[:4000] == data[1000:]


def test_late_bound_size_and_offset(make_file):
    """Size and file offset may change until the stream reaches the op. The op is queued behind
    a large read on the same stream; whichever way the race goes, the result agrees with the
    arguments the op ran with."""
    data = pattern(4 << 20, seed=8)
    big = hipfile.empty(len(data))
    small = hipfile.empty(4096)
    small.fill(0)
    stream = hipfile.Stream()
    with hipfile.open(make_file(data), "r") as f:
        ahead = f.read_async(big, stream=stream)
        op = f.read_async(small, 4096, 0, 0, stream)
        op.set_file_offset(8192)
        op.set_size(100)
        n = op.get()
        assert ahead.get() == len(data)
    got = small.tobytes()
    assert n in (100, 4096)
    if n == 100:
        assert got[:100] == data[8192:8292] and got[100:] == bytes(3996)
    else:
        assert got == data[:4096]
    assert big.tobytes() == data


def test_size_larger_than_queued_fails_the_op(make_file):
    buf = hipfile.empty(4096)
    stream = hipfile.Stream()
    with hipfile.open(make_file(pattern(1 << 20)), "r") as f:
        ahead = f.read_async(hipfile.empty(1 << 20), stream=stream)
        op = f.read_async(buf, 1024, stream=stream)
        op.set_size(2048)
        ahead.get()
        try:
            n = op.get()
        except hipfile.HipFileError as e:
            assert e.hipfile_name == "hipFileInvalidValue"
        else:
            # The stream reached the op before the size changed.
            assert n == 1024


def test_many_ops_in_flight_on_one_stream(make_file):
    """Hundreds of ops queued at once on one stream all end, in order, byte-exact."""
    data = pattern(256 * 4096, seed=17)
    buf = hipfile.empty(len(data))
    stream = hipfile.Stream()
    with hipfile.open(make_file(data), "r") as f:
        ops = [f.read_async(buf, 4096, i * 4096, i * 4096, stream) for i in range(256)]
        assert ops[-1].get() == 4096
        assert all(op.done() for op in ops)
        assert sum(op.get() for op in ops) == len(data)
    assert buf.tobytes() == data


@pytest.mark.parametrize("stream", [None, 0, 1, 2], ids=["none", "null", "legacy", "per-thread"])
def test_default_streams_are_the_calling_threads_on_its_current_device(make_file, tmp_path, stream):
    """``None``/0 (the null stream), 1 (the legacy default stream) and 2 (the per-thread default
    stream) name streams of the calling thread's current device: an op queued on one of them
    from a thread whose current device is 1 runs on device 1, where its memory is."""
    needs_two_devices()
    data = pattern(64 * 1024, seed=21)
    out = str(tmp_path / "out")
    with current_device(1):
        buf = hipfile.empty(len(data))
        buf.fill(0)
        with hipfile.open(make_file(data), "r") as f:
            assert f.read_async(buf, stream=stream).get() == len(data)
        with hipfile.open(out, "w") as f:
            assert f.write_async(buf, 1000, 0, 5, stream).get() == 1000
        assert hipfile.get_device() == 1
    assert buf.tobytes() == data
    with open(out, "rb") as f:
        assert f.read() == data[5:1005]


def test_the_per_thread_stream_keeps_the_order_of_the_calling_threads_ops(make_file):
    """Ops queued on the per-thread default stream (2) by one thread are on one stream, in
    order: a small op queued after a large one ends after it."""
    data = pattern(1 << 20, seed=22) * 16
    big = hipfile.empty(len(data))
    small = hipfile.empty(4096)
    with hipfile.open(make_file(data), "r") as f:
        for _ in range(3):
            first = f.read_async(big, stream=2)
            second = f.read_async(small, 4096, 4096, 0, 2)
            assert second.get() == 4096
            assert first.done(), "the op queued first on the per-thread stream ended first"
            assert first.get() == len(data)
    assert small.tobytes() == data[4096:8192]


class OnProducerStream:
    """``buf`` as an array whose producer names its stream (``__cuda_array_interface__``'s
    ``stream``): work queued there must end before a consumer touches the memory."""

    def __init__(self, buf, stream):
        self.__cuda_array_interface__ = dict(buf.__cuda_array_interface__, stream=stream)


@pytest.mark.parametrize("call", ["pwrite", "write"])
def test_the_arrays_stream_is_waited_for_as_the_calling_thread_names_it(make_file, tmp_path, call):
    """The array's stream 1 (the legacy default stream) is that of the calling thread's current
    device, device 1 here, whose null stream waits for the read queued on a blocking stream
    there: a write from the array, on the pool or not, takes the bytes the read put in place."""
    needs_two_devices()
    data = pattern(1 << 20, seed=23) * 16
    out = str(tmp_path / "out")
    with current_device(1):
        buf = hipfile.empty(len(data))
        buf.fill(0)
        producer = hipfile.Stream()
        array = OnProducerStream(buf, 1)
        with hipfile.open(make_file(data), "r") as f, hipfile.open(out, "w") as g:
            filling = f.read_async(buf, stream=producer)
            # pwrite runs on the pool; write (one part) on the calling thread.
            if call == "pwrite":
                assert g.pwrite(array).get() == len(data)
            else:
                assert g.write(array) == len(data)
            assert filling.done()
    with open(out, "rb") as f:
        assert f.read() == data
