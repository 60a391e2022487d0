"""Edges of the package's promises: odd array interfaces, stream-ordered ops and the array's own
stream, appends in flight, and what a registration answers."""

import sys

import pytest

import hipfile
from conftest import pattern


class Cai:
    """Device memory named only by ``__cuda_array_interface__`` (version 3)."""

    def __init__(self, ptr, nbytes, typestr="|u1", strides=None, stream=None):
        self.__cuda_array_interface__ = {
            "shape": (nbytes,),
            "typestr": typestr,
            "data": (ptr, False),
            "version": 3,
            "strides": strides,
            "stream": stream,
        }


@pytest.mark.parametrize(
    "typestr, strides",
    [("<f0", (4,)), ("|V18446744073709551615", (-(2**63),))],
    ids=["itemsize-0", "itemsize-usize-max"],
)
def test_a_bad_item_size_with_strides_is_a_value_error_not_a_panic(make_file, typestr, strides):
    """A typestr whose item size is 0 (or wraps to -1 as a signed number) with strides is a
    ValueError or TypeError before any IO, as every bad argument is; never pyo3's
    PanicException, a BaseException that `except Exception` does not catch."""
    buf = hipfile.empty(4096)
    with hipfile.open(make_file(pattern(4096)), "r") as f:
        try:
            f.read(Cai(buf.ptr, 4, typestr=typestr, strides=strides))
        except (ValueError, TypeError):
            pass
        except BaseException as e:  # noqa: BLE001 - which class arrives is what is tested
            pytest.fail(f"{type(e).__module__}.{type(e).__name__}: {e}")


def write_after_a_queued_read(tmp_path, read_stream, write_stream):
    """Queue on ``read_stream`` a large read, then a 4 KiB read into a filled array; queue on
    ``write_stream`` a write of that array, named with ``read_stream`` as its
    ``__cuda_array_interface__`` stream. Answers the bytes the write put in the file and the
    bytes the second read took from the source."""
    data = pattern(4096)
    big = 64 << 20
    src_path = tmp_path / "src"
    with open(src_path, "wb") as fh:
        fh.write(data)
        fh.truncate(big)
    out_path = tmp_path / "out"
    big_buf = hipfile.empty(big)
    buf = hipfile.empty(4096)
    buf.fill(0xEE)
    with hipfile.open(str(src_path), "r") as src, hipfile.open(str(out_path), "w+") as out:
        first = src.read_async(big_buf, stream=read_stream)
        second = src.read_async(buf, stream=read_stream)
        array = Cai(buf.ptr, 4096, stream=read_stream.ptr)
        written = out.write_async(array, 4096, 0, 0, write_stream)
        assert (first.get(), second.get(), written.get()) == (big, 4096, 4096)
    with open(out_path, "rb") as fh:
        return fh.read(), data


def test_a_stream_ordered_write_waits_for_the_arrays_stream(tmp_path):
    """``__cuda_array_interface__``'s ``stream`` names work that must end before the array is
    used: ``write_async`` on another stream does not overtake it. Stream A still has a read into
    the array queued (behind a large read) when the write is queued on stream B: the write takes
    the bytes that read lands, not the fill."""
    got, data = write_after_a_queued_read(tmp_path, hipfile.Stream(), hipfile.Stream())
    assert got == data, f"the write took stale bytes (first byte {got[0]:#x})"


def test_appends_in_flight_at_once_do_not_overwrite_each_other(tmp_path):
    """Mode ``a``: a write without ``file_offset`` goes to the end of the file. Two ``pwrite``
    futures in flight at once both land (as two appends through Python's ``open(..., 'a')``
    do), one after the other, not both at the size the file had when they were submitted."""
    path = tmp_path / "log"
    path.write_bytes(b"H" * 100)
    first, second = bytearray(b"A" * 4096), bytearray(b"B" * 4096)
    old = sys.getswitchinterval()
    sys.setswitchinterval(10)  # both submitted before a pool thread takes the GIL
    try:
        with hipfile.open(str(path), "a") as f:
            a = f.pwrite(first)
            b = f.pwrite(second)
            assert (a.get(), b.get()) == (4096, 4096)
    finally:
        sys.setswitchinterval(old)
    got = path.read_bytes()
    assert len(got) == 100 + 2 * 4096, f"{len(got)} bytes: one append overwrote the other"


def test_a_stream_ordered_write_in_append_mode_does_not_overwrite_the_start(tmp_path):
    """Mode ``a``: ``write_async`` without ``file_offset`` goes to the current end of the file,
    as ``write`` does, and leaves the file's first bytes alone."""
    path = tmp_path / "log"
    path.write_bytes(b"H" * 100)
    buf = hipfile.to_device(b"A" * 10)
    with hipfile.open(str(path), "a") as f:
        assert f.write_async(buf).get() == 10
    got = path.read_bytes()
    assert got[:100] == b"H" * 100, f"the head of the file was overwritten: {got[:12]!r}"
    assert got == b"H" * 100 + b"A" * 10


def test_a_negative_offset_of_a_stream_ordered_op_is_the_c_apis_invalid_value(make_file):
    """OSError only where the C API answers -1/errno, else HipFileError: ``hipFileReadAsync``
    answers a negative file offset, like one past the largest, with ``hipFileInvalidValue``."""
    buf = hipfile.empty(4096)
    with hipfile.open(make_file(pattern(4096)), "r") as f:
        with pytest.raises(hipfile.HipFileError) as past:
            f.read_async(buf, 16, 2**63 - 1).get()
        assert past.value.hipfile_name == "hipFileInvalidValue"
        with pytest.raises(hipfile.HipFileError) as negative:
            f.read_async(buf, 16, -5).get()
        assert negative.value.hipfile_name == "hipFileInvalidValue"


def test_a_buffer_registered_through_dlpack_answers_its_array():
    """``Buffer.array`` is the array registered, also when it was registered through DLPack
    (whose capsule is what keeps the memory)."""
    from conftest import DlpackOnly

    buf = hipfile.empty(4096)
    array = DlpackOnly(buf)
    with hipfile.Buffer(array) as registered:
        assert registered.array is array, f"answered {type(registered.array).__name__}"


def test_a_stream_ordered_op_on_its_arrays_own_stream_is_ordered_by_that_stream(tmp_path):
    """An array whose ``__cuda_array_interface__`` names the stream the op goes on: the stream
    orders the op after the array's earlier work (the caller is not made to wait for it), and
    the op takes the bytes that work lands."""
    stream = hipfile.Stream()
    got, data = write_after_a_queued_read(tmp_path, stream, stream)
    assert got == data
