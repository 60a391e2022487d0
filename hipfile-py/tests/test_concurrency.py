"""Many requests in flight: futures from one Python thread, and several Python threads at once
(the GIL is released during IO and while waiting)."""

import errno
import threading

import numpy as np
import pytest

import hipfile
from conftest import pattern

CHUNK = 64 * 1024


def test_many_futures_from_one_thread(make_file):
    data = pattern(64 * CHUNK, seed=11)
    buf = hipfile.empty(len(data))
    host = np.zeros(len(data), np.uint8)
    with hipfile.open(make_file(data), "r") as f:
        futures = [f.pread(buf, CHUNK, i * CHUNK, i * CHUNK) for i in range(64)]
        futures += [f.pread(host, CHUNK, i * CHUNK, i * CHUNK) for i in range(64)]
        assert [fut.get() for fut in futures] == [CHUNK] * 128
        assert all(fut.done() for fut in futures)
        # Asking again gives the same answer.
        assert futures[0].get() == CHUNK
    assert buf.tobytes() == data
    assert host.tobytes() == data


def test_write_futures(tmp_path):
    data = pattern(32 * CHUNK, seed=2)
    src = hipfile.to_device(data)
    path = str(tmp_path / "out")
    with hipfile.open(path, "w") as f:
        futures = [f.pwrite(src, CHUNK, i * CHUNK, i * CHUNK) for i in reversed(range(32))]
        assert sum(fut.get() for fut in futures) == len(data)
    with open(path, "rb") as f:
        assert f.read() == data


def test_futures_past_the_end_of_the_file(make_file):
    with hipfile.open(make_file(pattern(4096)), "r") as f:
        assert f.pread(hipfile.empty(4096), file_offset=1 << 40).get() == 0
        assert f.pread(bytearray(4096), file_offset=4096).get() == 0
        # A range past the largest file offset fails as pread(2) does, when the future is asked.
        fut = f.pread(hipfile.empty(4096), file_offset=(1 << 63) - 1)
        with pytest.raises(OSError) as e:
            fut.get()
        assert e.value.errno == errno.EINVAL
        assert fut.done()


def test_python_threads_read_concurrently(make_file):
    data = pattern(8 * 256 * 1024, seed=4)
    path = make_file(data)
    errors = []
    start = threading.Barrier(8)

    def reader(i):
        try:
            part = 256 * 1024
            buf = hipfile.empty(part)
            host = bytearray(part)
            with hipfile.open(path, "r") as f:
                start.wait()
                for _ in range(4):
                    assert f.read(buf, part, i * part) == part
                    assert f.raw_read(host, part, i * part) == part
                    assert buf.tobytes() == data[i * part : (i + 1) * part]
                    assert bytes(host) == data[i * part : (i + 1) * part]
        except BaseException as e:  # reported below, from the main thread
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


def test_gil_is_released_while_waiting(make_file):
    """A future of host memory runs os.preadv on a pool thread, which needs the GIL: get() can
    only answer if it released the GIL while waiting (it would deadlock otherwise, so the
    waiting runs in a thread the test can give up on). A thread spinning in Python meanwhile
    makes progress too."""
    data = pattern(128 * CHUNK)
    host = bytearray(len(data))
    ticks = [0]
    stop = threading.Event()
    answers = []

    def spin():
        while not stop.is_set():
            ticks[0] += 1

    def wait_for_all(f):
        futures = [f.pread(host, CHUNK, i * CHUNK, i * CHUNK) for i in range(128)]
        answers.append(sum(fut.get() for fut in futures))

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        with hipfile.open(make_file(data), "r") as f:
            waiter = threading.Thread(target=wait_for_all, args=(f,), daemon=True)
            waiter.start()
            waiter.join(timeout=120)
            assert not waiter.is_alive(), "get() kept the GIL while waiting"
    finally:
        stop.set()
        spinner.join()
    assert answers == [len(data)]
    assert bytes(host) == data
    assert ticks[0] > 0


def test_pool_size_follows_the_environment(make_file):
    """HIPFILE_PY_THREADS sizes the pool, which starts at the first request it runs: a read of
    one part runs on the calling thread and starts none."""
    import os
    import subprocess
    import sys

    program = (
        "import glob, hipfile, sys, time\n"
        "def pool():\n"
        "    names = [open(p).read().strip() for p in glob.glob('/proc/self/task/*/comm')]\n"
        "    return sum(n.startswith('hipfile-py-') and n != 'hipfile-py-stre' for n in names)\n"
        "before = pool()\n"
        "with hipfile.open(sys.argv[1], 'r') as f:\n"
        "    buf = hipfile.empty(4096)\n"
        "    assert f.read(buf) == 4096\n"
        "    inline = pool()\n"
        "    assert sum(f.pread(buf, 256, 256 * i, 0).get() for i in range(16)) == 4096\n"
        "# A pool thread names itself once it runs: one not scheduled yet has no name.\n"
        "deadline = time.monotonic() + 10\n"
        "while pool() < hipfile.num_threads() and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)\n"
        "print(hipfile.num_threads(), before, inline, pool())\n"
    )
    path = make_file(pattern(4096))
    for threads, expected in (("3", 3), ("1", 1), ("", 4), ("zero", 4)):
        env = dict(os.environ, HIPFILE_PY_THREADS=threads)
        out = subprocess.run(
            [sys.executable, "-c", program, path], env=env, capture_output=True, text=True
        )
        assert out.stdout.split() == [str(expected), "0", "0", str(expected)], out.stderr


def test_calls_larger_than_one_request_are_split(tmp_path):
    """One call moves more than the library's limit of one request (2 GiB less 4 KiB): read
    and pread are split into parts and are short only at the end of the file; raw_read is one
    request, capped as hipFileRead is. A sparse file keeps the disk out of it."""
    import os

    with open("/proc/meminfo") as f:
        available = next(int(line.split()[1]) << 10 for line in f if line.startswith("MemAvailable"))
    size = (1 << 31) + 8192
    if available < 4 * size:
        pytest.skip(f"needs {4 * size} bytes of available memory, has {available}")
    path = str(tmp_path / "sparse")
    marks = {size - 5: b"tail!", hipfile.task_size() - 3: b"edge", 12345: b"head"}
    with open(path, "wb") as f:
        f.truncate(size)
        for offset, mark in marks.items():
            os.pwrite(f.fileno(), mark, offset)
    buf = hipfile.empty(size + 4096)
    with hipfile.open(path, "r") as f:
        assert hipfile.task_size() == (1 << 31) - 4096
        assert f.read(buf) == size
        for offset, mark in marks.items():
            assert buf.copy_to_host(offset, len(mark)) == mark
        assert f.raw_read(buf) == (1 << 31) - 4096
    del buf


def test_task_size_splits_calls_into_parts(make_file, tmp_path):
    """HIPFILE_PY_TASK_SIZE splits calls into parts that run side by side: bytes land where
    they belong, a read is short only at the end of the file, and an error of any part is the
    call's."""
    import os
    import subprocess
    import sys

    program = (
        "import hipfile, sys\n"
        "data = open(sys.argv[1], 'rb').read()\n"
        "assert hipfile.task_size() == 4096, hipfile.task_size()\n"
        "buf = hipfile.empty(1 << 20)\n"
        "with hipfile.open(sys.argv[1], 'r') as f:\n"
        "    assert f.read(buf, dev_offset=100) == len(data)\n"
        "    assert buf.copy_to_host(100, len(data)) == data\n"
        "    host = bytearray(1 << 20)\n"
        "    assert f.pread(host, 50000, 7, 3).get() == 50000\n"
        "    assert host[3:50003] == data[7:50007]\n"
        "    fut = f.pread(buf, 40960, (1 << 63) - 20480)\n"
        "    try:\n"
        "        fut.get()\n"
        "    except OSError as e:\n"
        "        assert e.errno == 22\n"
        "    else:\n"
        "        raise AssertionError('a part past the largest offset must fail')\n"
        "with hipfile.open(sys.argv[2], 'w') as f:\n"
        "    assert f.write(buf, len(data), 0, 100) == len(data)\n"
        "assert open(sys.argv[2], 'rb').read() == data\n"
        "print('ok')\n"
    )
    src = make_file(pattern(300001, seed=21))
    dst = str(tmp_path / "copy")
    env = dict(os.environ, HIPFILE_PY_TASK_SIZE="4096")
    out = subprocess.run(
        [sys.executable, "-c", program, src, dst], env=env, capture_output=True, text=True
    )
    assert out.stdout.strip() == "ok", out.stderr
    env = dict(os.environ, HIPFILE_PY_TASK_SIZE="lots")
    out = subprocess.run(
        [sys.executable, "-c", "import hipfile; print(hipfile.task_size())"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == str((1 << 31) - 4096), out.stderr
