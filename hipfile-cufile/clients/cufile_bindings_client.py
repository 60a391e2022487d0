#!/usr/bin/env python3
"""NVIDIA's cuda.bindings.cufile, unchanged, on a libcufile.so.0: get_version, driver_open,
handle_register (an O_DIRECT descriptor), buf_register, read, write, buf_deregister,
handle_deregister, driver_close; every byte checked against the file or the host copy.

  python3 cufile_bindings_client.py --lib ours|nvidia --dir SCRATCH

cuda.bindings finds the library through cuda.pathfinder, which takes a libcufile.so.0 already
in the process before searching: the preloaded one, for ours. A missing cuda.bindings.cufile is
reported as `skipped` on the `import` line (the module is NVIDIA's, not ours to require). See
common.py for the lines and the exit status.
"""

import os

import common

args = common.arguments(__doc__)
report = common.Report("cuda.bindings.cufile", args.lib)

try:
    from cuda.bindings import cufile
except Exception as exc:  # not part of every cuda-python install
    report.line("import", "skipped", error=str(exc))
    report.finish()

import cupy  # noqa: E402

base = common.tile()
SIZE = 8 << 20
path = os.path.join(args.dir, f"bindings-{args.lib}.bin")
common.write_pattern(path, SIZE, base)
want = common.expected(0, SIZE, base)


FAILED = object()


def call(check, fn, *a, **fields):
    """Runs one binding: its value, or FAILED after reporting the raise on `check`."""
    try:
        return fn(*a)
    except Exception as exc:
        report.error(check, exc, **fields)
        return FAILED


version = call("get_version", cufile.get_version)
if version is not FAILED:
    report.line("get_version", "pass", version=version)
opened = call("driver_open", cufile.driver_open) is not FAILED
if opened:
    report.line("driver_open", "pass")
report.loaded(common.ours_dir())
fd = os.open(path, os.O_RDWR | os.O_DIRECT)
descr = cufile.Descr()
descr.type = cufile.FileHandleType.OPAQUE_FD
descr.handle.fd = fd
descr.fs_ops = 0
handle = call("handle_register", cufile.handle_register, descr.ptr)
if handle is not FAILED:
    report.line("handle_register", "pass")
    dst = cupy.zeros(SIZE, dtype=cupy.uint8)
    registered = call("buf_register", cufile.buf_register, dst.data.ptr, SIZE, 0) is not FAILED
    if registered:
        report.line("buf_register", "pass", bytes=SIZE)
    got = call("read_registered", cufile.read, handle, dst.data.ptr, SIZE, 0, 0)
    if got is not FAILED:
        report.bytes_check("read_registered", cupy.asnumpy(dst)[:got], want, returned=got)
    # An offset into the registered buffer, an unaligned file offset.
    dst.fill(0)
    got = call("read_buffer_offset", cufile.read, handle, dst.data.ptr, 1 << 20, 4097, 8192)
    if got is not FAILED:
        report.bytes_check(
            "read_buffer_offset",
            cupy.asnumpy(dst[8192 : 8192 + got]),
            want[4097 : 4097 + (1 << 20)],
            returned=got,
        )
    if registered and call("buf_deregister", cufile.buf_deregister, dst.data.ptr) is not FAILED:
        report.line("buf_deregister", "pass")

    # Unregistered device memory: write a patch, read it back, check the file too.
    src = cupy.asarray(common.expected(5 << 30, 2 << 20, base))
    wrote = call("write_unregistered", cufile.write, handle, src.data.ptr, 2 << 20, 1 << 20, 0)
    if wrote is not FAILED:
        with open(path, "rb") as f:
            f.seek(1 << 20)
            on_disk = f.read(2 << 20)
        report.bytes_check(
            "write_unregistered",
            common.np.frombuffer(on_disk, dtype=common.np.uint8),
            cupy.asnumpy(src),
            returned=wrote,
        )
        back = cupy.zeros(2 << 20, dtype=cupy.uint8)
        got = call("read_back", cufile.read, handle, back.data.ptr, 2 << 20, 1 << 20, 0)
        if got is not FAILED:
            report.bytes_check("read_back", cupy.asnumpy(back)[:got], cupy.asnumpy(src), returned=got)
    # A read that runs past the end of the file: the count says how many bytes there were.
    tail = cupy.zeros(1 << 20, dtype=cupy.uint8)
    got = call("read_past_end", cufile.read, handle, tail.data.ptr, 1 << 20, SIZE - 4096, 0)
    if got is not FAILED and got == 4096:
        report.bytes_check("read_past_end", cupy.asnumpy(tail[:got]), want[SIZE - 4096 :], returned=got)
    elif got is not FAILED:
        report.line("read_past_end", "fail", returned=got, expected_count=4096)
    if call("handle_deregister", cufile.handle_deregister, handle) is not FAILED:
        report.line("handle_deregister", "pass")

os.close(fd)
if opened and call("driver_close", cufile.driver_close) is not FAILED:
    report.line("driver_close", "pass")
os.unlink(path)
report.finish()
