"""Shared fixtures. The tests run on the simulated GPU unless HIPFILE_PLATFORM names another
platform (the GPU bundle sets it to the machine's)."""

import os

os.environ.setdefault("HIPFILE_PLATFORM", "sim")

import pytest  # noqa: E402

#: Whether the tests run on the simulated GPU, where a bogus stream handle is an error rather
#: than undefined behaviour, and CuPy and PyTorch have no device.
ON_SIM = os.environ["HIPFILE_PLATFORM"].strip().lower() == "sim"


def pattern(n: int, seed: int = 0) -> bytes:
    """``n`` bytes that differ at every offset within 251 and between seeds, so misplaced
    bytes show."""
    return bytes((i * 7 + seed) % 251 for i in range(n))


@pytest.fixture
def make_file(tmp_path):
    """Write ``data`` to a fresh file; answer its path."""
    counter = iter(range(1 << 30))

    def make(data: bytes) -> str:
        path = tmp_path / f"data{next(counter)}"
        path.write_bytes(data)
        return str(path)

    return make


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


class DlpackOnly:
    """Device memory seen only through DLPack."""

    def __init__(self, buf):
        self.buf = buf

    def __dlpack__(self, **kwargs):
        return self.buf.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.buf.__dlpack_device__()
