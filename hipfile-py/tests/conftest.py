"""Shared fixtures. The tests run on the simulated GPU unless HIPFILE_PLATFORM names another
platform (the GPU bundle sets it to the machine's)."""

import os

os.environ.setdefault("HIPFILE_PLATFORM", "sim")

import pytest  # noqa: E402


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
