"""CuPy arrays and PyTorch CUDA tensors, on the GPU machine (skipped where the library is
missing, and on the sim, whose memory those libraries cannot see). The same paths are covered on
the sim through hipfile.DeviceBuffer and the wrapper classes of test_roundtrip."""

import pytest

import hipfile
from conftest import ON_SIM, pattern
pytestmark = pytest.mark.skipif(ON_SIM, reason="CuPy and PyTorch need a real GPU, not the sim")


def test_cupy_round_trip_and_stream(make_file, tmp_path):
    cupy = pytest.importorskip("cupy")
    data = pattern(4 << 20, seed=12)
    a = cupy.zeros((1 << 20,), dtype=cupy.float32)
    with hipfile.open(make_file(data), "r") as f:
        assert f.read(a) == len(data)
        assert cupy.asnumpy(a).tobytes() == data
        # Part of an array: a slice of a CuPy array is itself an array with its own pointer.
        b = cupy.zeros(8192, dtype=cupy.uint8)
        assert f.read(b[4096:], 4096, 8192) == 4096
        assert cupy.asnumpy(b[4096:]).tobytes() == data[8192:12288]
        stream = cupy.cuda.Stream(non_blocking=True)
        c = cupy.zeros(65536, dtype=cupy.uint8)
        assert f.read_async(c, 65536, 4096, 0, stream).get() == 65536
        stream.synchronize()
        assert cupy.asnumpy(c).tobytes() == data[4096 : 4096 + 65536]
    out = str(tmp_path / "out")
    with hipfile.open(out, "w") as f:
        assert f.write(a) == len(data)
    with open(out, "rb") as f:
        assert f.read() == data
    # hipfile's own buffer, seen by CuPy.
    buf = hipfile.to_device(b"hello")
    assert cupy.asnumpy(cupy.asarray(buf)).tobytes() == b"hello"
    with hipfile.Buffer(a):
        with hipfile.open(make_file(data), "r") as f:
            assert f.read(a) == len(data)


def test_cupy_non_contiguous_is_refused(make_file):
    cupy = pytest.importorskip("cupy")
    with hipfile.open(make_file(pattern(4096)), "r") as f:
        with pytest.raises(ValueError, match="not contiguous"):
            f.read(cupy.zeros((64, 64), dtype=cupy.uint8)[:, ::2])


def test_torch_tensors(make_file, tmp_path):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    data = pattern(1 << 20, seed=13)
    path = make_file(data)
    t = torch.empty(1 << 18, dtype=torch.float32, device="cuda")
    with hipfile.open(path, "r") as f:
        assert f.read(t) == len(data)
        assert bytes(t.cpu().numpy().tobytes()) == data
        u = torch.zeros(4096, dtype=torch.uint8, device="cuda")

        class DlpackOnly:
            def __dlpack__(self, **kwargs):
                return u.__dlpack__(**kwargs)

            def __dlpack_device__(self):
                return u.__dlpack_device__()

        assert f.read(DlpackOnly(), 4096, 4096) == 4096
        assert bytes(u.cpu().numpy().tobytes()) == data[4096:8192]
        stream = torch.cuda.Stream()
        assert f.read_async(u, 4096, 0, 0, stream).get() == 4096
        stream.synchronize()
        assert bytes(u.cpu().numpy().tobytes()) == data[:4096]
        with pytest.raises(ValueError, match="not contiguous"):
            f.read(torch.zeros((64, 64), dtype=torch.uint8, device="cuda").t())
    # hipfile's own buffer, consumed by torch through DLPack.
    buf = hipfile.to_device(b"tensor")
    assert bytes(torch.from_dlpack(buf).cpu().numpy().tobytes()) == b"tensor"
