"""Shared fixtures. The tests run on the simulated GPU unless HIPFILE_PLATFORM names another
platform (the GPU bundle sets it to the machine's); the simulated GPU has two devices, so the
tests of which device an op runs on run everywhere."""

import contextlib
import os

os.environ.setdefault("HIPFILE_PLATFORM", "sim")
os.environ.setdefault("HIPFILE_SIM_DEVICES", "2")

import pytest  # noqa: E402

#: The tests against real servers (``tests/server``) run only when asked for, by naming their
#: servers in ``HIPFILE_SERVER_TESTS`` (``http``, ``s3``, or ``http,s3``); asked for, they fail
#: when their server is not there. ``http`` starts nginx (``apt-get install nginx-light``); ``s3``
#: uses the endpoint and credentials of the ``AWS_*`` environment (``source target/ceph/env``
#: after ``cargo xtask ceph up``).
SERVER_TESTS = {
    s.strip().lower() for s in os.environ.get("HIPFILE_SERVER_TESTS", "").split(",") if s.strip()
}
collect_ignore = [
    f"server/test_{server}.py" for server in ("http", "s3") if server not in SERVER_TESTS
]

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


def needs_two_devices():
    """Skip, saying why, on a machine with one GPU (never on the sim, which has two)."""
    import hipfile

    if hipfile.device_count() < 2:
        pytest.skip("needs two devices; this machine has one")


@contextlib.contextmanager
def current_device(device: int):
    """``device`` current on the calling thread for the block, then the one before again."""
    import hipfile

    before = hipfile.get_device()
    hipfile.set_device(device)
    try:
        yield
    finally:
        hipfile.set_device(before)
