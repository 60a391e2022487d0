"""Bad input: the errors Python programs can rely on, raised before any byte moves."""

import ctypes
import errno
import gc
import io
import os

import numpy as np
import pytest

import hipfile
from conftest import pattern


class ForeignArray:
    """An array whose ``__cuda_array_interface__`` names memory the GPU runtime does not know."""

    def __init__(self, ptr, n, strides=None):
        self.__cuda_array_interface__ = {
            "shape": (n,),
            "typestr": "|u1",
            "data": (ptr, False),
            "version": 3,
            "strides": strides,
        }


def test_hip_file_error_made_by_hand_answers_every_attribute():
    e = hipfile.HipFileError("by hand")
    assert (e.hipfile_code, e.hipfile_name, e.runtime_code) == (None, None, None)
    assert issubclass(hipfile.HipFileError, Exception)
    assert hipfile.HipFileError.__module__ == "hipfile"


def test_closed_driver():
    d = hipfile.Driver()
    d.close()
    d.close()
    with pytest.raises(hipfile.HipFileError) as e:
        d.backends()
    assert e.value.hipfile_code == 5001
    assert e.value.hipfile_name == "hipFileDriverNotInitialized"
    assert e.value.runtime_code is None


def test_memory_the_runtime_does_not_know(make_file):
    host = ctypes.create_string_buffer(8192)
    with hipfile.open(make_file(pattern(8192)), "r+") as f:
        for array in (ForeignArray(ctypes.addressof(host), 4096), ForeignArray(0x1000, 4096)):
            with pytest.raises(hipfile.HipFileError) as e:
                f.read(array)
            assert e.value.hipfile_code == 5013
            assert e.value.hipfile_name == "hipFileHipMemoryTypeInvalid"
            with pytest.raises(hipfile.HipFileError) as e:
                f.pwrite(array).get()
            assert e.value.hipfile_code == 5013
    with pytest.raises(hipfile.HipFileError) as e:
        hipfile.Buffer(ForeignArray(ctypes.addressof(host), 4096))
    assert e.value.hipfile_code == 5013
    assert host.raw == bytes(8192)


def test_array_larger_than_its_allocation(make_file):
    buf = hipfile.empty(4096)
    with hipfile.open(make_file(pattern(16384)), "r") as f:
        with pytest.raises(hipfile.HipFileError) as e:
            f.read(ForeignArray(buf.ptr, 8192))
    assert e.value.hipfile_name == "hipFileInvalidValue"


def test_registration_errors():
    buf = hipfile.empty(4096)
    with hipfile.Buffer(buf):
        with pytest.raises(hipfile.HipFileError) as e:
            hipfile.Buffer(buf)
        assert e.value.hipfile_code == 5023
    with pytest.raises(TypeError):
        hipfile.Buffer(bytearray(10))


@pytest.mark.parametrize("mode", ["", "q", "rw", "rr", "r++", "+", "ab+x", "rt"])
def test_bad_mode(tmp_path, mode):
    with pytest.raises(ValueError, match="invalid mode"):
        hipfile.open(str(tmp_path / "f"), mode)


def test_direction_the_mode_refuses(make_file, tmp_path):
    buf = hipfile.to_device(b"abcd")
    path = make_file(b"wxyz")
    with hipfile.open(path, "r") as f:
        with pytest.raises(io.UnsupportedOperation, match="not open for writing"):
            f.write(buf)
        with pytest.raises(io.UnsupportedOperation):
            f.pwrite(buf)
        with pytest.raises(io.UnsupportedOperation):
            f.write_async(buf)
    with hipfile.open(str(tmp_path / "w"), "w") as f:
        with pytest.raises(io.UnsupportedOperation, match="not open for reading"):
            f.read(buf)
    with open(path, "rb") as f:
        assert f.read() == b"wxyz"


def test_out_of_range_offsets(make_file):
    buf = hipfile.empty(4096)
    with hipfile.open(make_file(pattern(8192)), "r+") as f:
        with pytest.raises(OSError) as e:
            f.read(buf, file_offset=-1)
        assert e.value.errno == errno.EINVAL
        with pytest.raises(OSError) as e:
            f.write(buf, file_offset=-4096)
        assert e.value.errno == errno.EINVAL
        with pytest.raises(ValueError, match="past the end"):
            f.read(buf, dev_offset=4097)
        with pytest.raises(ValueError, match="do not fit"):
            f.read(buf, 4000, 0, 100)
        with pytest.raises(ValueError):
            f.read(bytearray(10), 11)
        with pytest.raises(OverflowError):
            f.read(buf, -1)


def test_non_contiguous_arrays(make_file):
    with hipfile.open(make_file(pattern(8192)), "r") as f:
        with pytest.raises(ValueError, match="not contiguous"):
            f.read(np.zeros((64, 64), np.uint8)[:, ::2])
        with pytest.raises(ValueError, match="not contiguous"):
            f.read(np.zeros((64, 64), np.uint8).T)
        buf = hipfile.empty(4096)
        with pytest.raises(ValueError, match="not contiguous"):
            f.read(ForeignArray(buf.ptr, 2048, strides=(2,)))
        # Compact strides are contiguous.
        assert f.read(ForeignArray(buf.ptr, 2048, strides=(1,))) == 2048


def test_cuda_array_interface_keys_are_read_by_name(make_file):
    """Every key the interface is read by: a missing required one and a mask are refused, a
    stream of None is no stream, and the dict a ``DeviceBuffer`` makes is read as the one a
    framework makes."""
    buf = hipfile.empty(4096)
    cai = buf.__cuda_array_interface__
    assert cai == {
        "shape": (4096,),
        "typestr": "|u1",
        "data": (buf.ptr, False),
        "version": 3,
        "strides": None,
        "stream": None,
    }
    with hipfile.open(make_file(pattern(8192)), "r") as f:
        for key in ["shape", "typestr", "data"]:
            partial = ForeignArray(buf.ptr, 16)
            del partial.__cuda_array_interface__[key]
            with pytest.raises(TypeError, match=f"lacks '{key}'"):
                f.read(partial)
        masked = ForeignArray(buf.ptr, 16)
        masked.__cuda_array_interface__["mask"] = object()
        with pytest.raises(ValueError, match="masked"):
            f.read(masked)
        unmasked = ForeignArray(buf.ptr, 16)
        unmasked.__cuda_array_interface__["mask"] = None
        unmasked.__cuda_array_interface__["stream"] = None
        # The foreign pointer is the buffer's: it reads as the buffer itself does.
        assert f.read(unmasked, 16, 4096) == 16
        assert f.read(buf, 4096, 4096) == 4096
        assert buf.copy_to_host(0, 16) == pattern(8192)[4096:4112]


def test_read_into_read_only_memory(make_file):
    buf = hipfile.empty(16)
    readonly = ForeignArray(buf.ptr, 16)
    readonly.__cuda_array_interface__["data"] = (buf.ptr, True)
    path = make_file(pattern(64))
    with hipfile.open(path, "r+") as f:
        with pytest.raises(TypeError, match="read-only"):
            f.read(b"0123456789abcdef")
        a = np.zeros(16, np.uint8)
        a.flags.writeable = False
        with pytest.raises(TypeError, match="read-only"):
            f.read(a)
        with pytest.raises(TypeError, match="read-only"):
            f.read(readonly)
        # Read-only memory may be written from, host or device.
        buf.copy_from_host(b"D" * 16)
        assert f.write(b"host", file_offset=0) == 4
        assert f.write(readonly, 4, 4) == 4
    with open(path, "rb") as f:
        assert f.read() == b"hostDDDD" + pattern(64)[8:]


def test_arrays_of_python_objects_are_refused(make_file):
    """Items that are Python object references (NumPy's ``dtype=object``, alone or in a
    structured dtype) are refused before any IO, by every call: a read would overwrite the
    references (and crash the interpreter), a write would store addresses."""
    objects = np.array([object() for _ in range(512)], dtype=object)
    structured = np.zeros(256, dtype=[("n", "i8"), ("o", "O")])
    data = pattern(8192)
    path = make_file(data)
    with hipfile.open(path, "r+") as f:
        for array in (objects, objects.reshape(16, 32), structured):
            for call in (f.read, f.raw_read, f.write, f.raw_write):
                with pytest.raises(TypeError, match="Python objects"):
                    call(array)
            for call in (f.pread, f.pwrite):
                with pytest.raises(TypeError, match="Python objects"):
                    call(array).get()
            with pytest.raises(TypeError, match="Python objects"):
                hipfile.to_device(array)
        # A field merely named with an O holds data.
        named = np.zeros(512, dtype=[("On", "i8")])
        assert f.read(named) == 4096
        assert named.tobytes() == data[:4096]
        buf = hipfile.empty(4096)
        with pytest.raises(TypeError, match="Python objects"):
            buf.copy_from_host(objects)
        device_objects = ForeignArray(buf.ptr, 512)
        device_objects.__cuda_array_interface__["typestr"] = "|O8"
        with pytest.raises(TypeError, match="Python objects"):
            f.read(device_objects)
        with pytest.raises(TypeError, match="Python objects"):
            f.read_async(device_objects)
    assert all(isinstance(o, object) for o in objects)
    with open(path, "rb") as f:
        assert f.read() == data


def test_not_memory(make_file):
    with hipfile.open(make_file(pattern(64)), "r") as f:
        with pytest.raises(TypeError, match="neither device memory"):
            f.read(12345)

        class HostTensor:
            """Host memory through DLPack only, as a PyTorch CPU tensor."""

            def __dlpack__(self, **kwargs):
                return np.zeros(8, np.uint8).__dlpack__(**kwargs)

            def __dlpack_device__(self):
                return (1, 0)

        with pytest.raises(TypeError, match=r"tensor\.numpy\(\)"):
            f.read(HostTensor())
        with pytest.raises(TypeError):
            f.read_async(bytearray(10))
        with pytest.raises(TypeError):
            f.read_async(hipfile.empty(10), stream="default")


def test_closed_file(make_file):
    f = hipfile.open(make_file(pattern(64)), "r")
    f.close()
    f.close()
    assert f.closed
    with pytest.raises(ValueError, match="closed file"):
        f.read(hipfile.empty(8))
    with pytest.raises(ValueError, match="closed file"):
        f.fileno()


def python_open_error(path, mode):
    """The error Python's own ``open`` raises for ``path`` in ``mode`` (binary)."""
    with pytest.raises(OSError) as e:
        open(path, mode + "b")
    return e.value


def assert_open_fails_as_python_does(path, mode, expected):
    """``hipfile.open`` refuses ``path`` in ``mode`` with the error Python's ``open`` raises:
    the same class (``expected``), errno, message and filename (the path as ``os.fspath`` gives
    it)."""
    with pytest.raises(OSError) as e:
        hipfile.open(path, mode)
    ours, python = e.value, python_open_error(path, mode)
    assert type(ours) is type(python) is expected
    assert (ours.errno, ours.strerror, ours.filename) == (
        python.errno,
        python.strerror,
        os.fspath(path),
    )
    assert str(ours) == str(python)


def test_open_errors_carry_errno_and_filename(tmp_path):
    """As Python's ``open``: ``FileNotFoundError``, ``IsADirectoryError`` (reading a directory
    too), ``FileExistsError``, ``NotADirectoryError``, each with ``.errno`` and ``.filename``."""
    existing = tmp_path / "existing"
    existing.write_bytes(b"x")
    cases = [
        (str(tmp_path / "absent"), "r", FileNotFoundError),
        (tmp_path / "absent", "r+", FileNotFoundError),
        (str(tmp_path / "no" / "such" / "dir"), "w", FileNotFoundError),
        (str(tmp_path), "r", IsADirectoryError),
        (str(tmp_path), "r+", IsADirectoryError),
        (str(tmp_path), "w", IsADirectoryError),
        (tmp_path, "a", IsADirectoryError),
        (str(existing), "x", FileExistsError),
        (str(existing / "below"), "r", NotADirectoryError),
        (os.fsencode(tmp_path / "absent"), "r", FileNotFoundError),
    ]
    gc.collect()
    before = hipfile.use_count()
    for path, mode, expected in cases:
        assert_open_fails_as_python_does(path, mode, expected)
    gc.collect()
    # At most: what earlier tests left may be let go meanwhile.
    assert hipfile.use_count() <= before, "a refused open holds no driver reference"


def test_open_refused_by_permissions_carries_errno_and_filename(tmp_path):
    """A file the user may not open is ``PermissionError`` (``EACCES``) with its filename. Root
    may open anything, so as root the check runs in a child process that gave root up."""
    path = str(tmp_path / "secret")
    with open(path, "wb") as f:
        f.write(b"x")
    os.chmod(path, 0)
    if os.geteuid() != 0:
        assert_open_fails_as_python_does(path, "r", PermissionError)
        return
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.setgid(65534)
            os.setuid(65534)
            assert_open_fails_as_python_does(path, "r", PermissionError)
            assert_open_fails_as_python_does(path, "w", PermissionError)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the unprivileged child's open was not refused as Python's"


def test_platform_is_picked_as_by_the_c_library():
    """HIPFILE_PLATFORM names the platform; a name that is none is hipFileDeviceNotFound, and
    the failed open leaves no reference behind."""
    import subprocess
    import sys

    program = (
        "import hipfile\n"
        "try:\n"
        "    hipfile.Driver()\n"
        "except hipfile.HipFileError as e:\n"
        "    print(e.hipfile_name, hipfile.use_count())\n"
        "else:\n"
        "    print('opened', hipfile.Driver().platform())\n"
    )
    env = dict(os.environ, HIPFILE_PLATFORM="quantum")
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["hipFileDeviceNotFound", "0"], out.stderr
    env = dict(os.environ, HIPFILE_PLATFORM="sim")
    out = subprocess.run([sys.executable, "-c", program], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["opened", "sim"], out.stderr


NO_LIBRARY = "/nonexistent/hipfile-test/lib.so"


@pytest.mark.parametrize(
    "env",
    [
        {"HIPFILE_PLATFORM": "amd", "HIPFILE_HIP_LIBRARY": NO_LIBRARY},
        {"HIPFILE_PLATFORM": "nvidia", "HIPFILE_CUDART_LIBRARY": NO_LIBRARY},
        {
            "HIPFILE_HIP_LIBRARY": NO_LIBRARY,
            "HIPFILE_CUDART_LIBRARY": NO_LIBRARY,
            "HIPFILE_CUDA_LIBRARY": NO_LIBRARY,
        },
        {"HIPFILE_PLATFORM": "quantum"},
    ],
    ids=["amd", "nvidia", "detected", "unknown"],
)
def test_no_device_says_how_to_run_on_the_simulated_gpu(tmp_path, env):
    """With no platform reporting a device, the first call that opens the driver is
    ``hipFileDeviceNotFound``, and its message names ``HIPFILE_PLATFORM=sim``."""
    import subprocess
    import sys

    path = tmp_path / "data"
    path.write_bytes(b"x" * 4096)
    program = (
        "import sys, hipfile\n"
        "for call in (hipfile.Driver, lambda: hipfile.open(sys.argv[1]), lambda: hipfile.empty(8)):\n"
        "    try:\n"
        "        call()\n"
        "    except hipfile.HipFileError as e:\n"
        "        print(e.hipfile_name, 'HIPFILE_PLATFORM=sim' in str(e))\n"
    )
    base = {k: v for k, v in os.environ.items() if k != "HIPFILE_PLATFORM"}
    out = subprocess.run(
        [sys.executable, "-c", program, str(path)],
        env=dict(base, **env),
        capture_output=True,
        text=True,
    )
    assert out.stdout.split("\n")[:3] == ["hipFileDeviceNotFound True"] * 3, out.stdout + out.stderr
