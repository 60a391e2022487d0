#!/usr/bin/env python3
"""KvikIO, unchanged, on a libcufile.so.0: CuFile read/pread/write/pwrite/raw_read/raw_write of
CuPy arrays with compatibility mode OFF (KvikIO calls cuFileRead/cuFileWrite, never POSIX), every
byte checked against the file or the host copy.

  KVIKIO_COMPAT_MODE=OFF python3 kvikio_client.py --lib ours|nvidia --dir SCRATCH

Proof that the cuFile path was taken, in the `setup` and `cufile_stats` lines: KvikIO's own
compat_mode (OFF) and is_compat_mode_preferred() (False), the libcufile version KvikIO read
through cuFileGetVersion, the libcufile objects mapped into the process, and the library's
level-1 statistics before and after (read and write bytes counted by the library itself).
gds_threshold is set to 0: KvikIO otherwise serves reads under 1 MiB through POSIX even with
compat mode off. See common.py for the lines and the exit status.
"""

import os

import common

args = common.arguments(__doc__)
report = common.Report("kvikio", args.lib)

if os.environ.get("KVIKIO_COMPAT_MODE", "").upper() != "OFF":
    report.line("setup", "fail", error="KVIKIO_COMPAT_MODE must be OFF in the environment")
    report.finish()

import cupy  # noqa: E402
import kvikio  # noqa: E402
import kvikio.cufile_driver  # noqa: E402
import kvikio.defaults  # noqa: E402

base = common.tile()
SIZE = 64 << 20
# Odd lengths and offsets: KvikIO splits by task size and hands cuFile unaligned pieces.
TAIL = 12345
path = os.path.join(args.dir, f"kvikio-{args.lib}.bin")
out_path = os.path.join(args.dir, f"kvikio-{args.lib}-written.bin")

try:
    kvikio.defaults.set({"num_threads": 4, "task_size": 1 << 20, "gds_threshold": 0})
    mode = kvikio.defaults.get("compat_mode")
    preferred = kvikio.defaults.is_compat_mode_preferred()
    try:
        version = kvikio.cufile_driver.libcufile_version()
    except Exception as exc:  # an old KvikIO without it: not a failure of the library
        version = f"unavailable: {exc}"
    # KvikIO 26.10 answers the CompatMode enum, whose str() is its number (OFF is 0).
    compat_off = getattr(getattr(kvikio, "CompatMode", None), "OFF", None)
    off = (mode == compat_off or str(mode).upper() in ("OFF", "COMPATMODE.OFF")) and not preferred
    report.line(
        "setup",
        "pass" if off else "fail",
        compat_mode=str(mode),
        compat_mode_preferred=preferred,
        libcufile_version=version,
        kvikio_version=getattr(kvikio, "__version__", "?"),
        threads=kvikio.defaults.get("num_threads"),
        task_size=kvikio.defaults.get("task_size"),
        gds_threshold=kvikio.defaults.get("gds_threshold"),
    )
except Exception as exc:
    report.error("setup", exc)

common.write_pattern(path, SIZE + TAIL, base)
want = common.expected(0, SIZE + TAIL, base)

stats = None
try:
    # KvikIO loads libcufile.so.0 and opens the driver with its first CuFile; statistics start
    # after that.
    try:
        with kvikio.CuFile(path, "r"):
            pass
    finally:
        report.loaded(common.ours_dir())
    stats, before = report.stats_start()
except Exception as exc:
    report.error("open", exc)
    before = None

moved_read = 0
moved_written = 0

# Whole file (with its unaligned tail) into one array: read() is pread().get() over the pool.
try:
    buf = cupy.zeros(SIZE + TAIL, dtype=cupy.uint8)
    with kvikio.CuFile(path, "r") as f:
        n = f.read(buf)
    moved_read += n
    report.bytes_check("read_whole", cupy.asnumpy(buf)[:n], want, returned=n)
except Exception as exc:
    report.error("read_whole", exc)

# pread at unaligned offsets into the middle of a larger array, several futures at once.
try:
    dst = cupy.zeros(8 << 20, dtype=cupy.uint8)
    pieces = [(4097, 1 << 20, 0), (SIZE - 3 * 4096 + 5, 3 * 4096 + TAIL - 5, 2 << 20), (123, 777, 7 << 20)]
    with kvikio.CuFile(path, "r") as f:
        futures = [(f.pread(dst[at : at + n], n, off), off, n, at) for off, n, at in pieces]
        for fut, off, n, at in futures:
            got = fut.get()
            moved_read += got
            report.bytes_check(
                f"pread_off{off}_n{n}",
                cupy.asnumpy(dst[at : at + got]),
                want[off : off + n],
                returned=got,
            )
except Exception as exc:
    report.error("pread", exc)

# raw_read: one cuFileRead, no thread pool, into an offset of the device buffer.
try:
    dst = cupy.zeros(2 << 20, dtype=cupy.uint8)
    with kvikio.CuFile(path, "r") as f:
        got = f.raw_read(dst, 1 << 20, 8192, 4096)
    moved_read += got
    report.bytes_check(
        "raw_read", cupy.asnumpy(dst[4096 : 4096 + got]), want[8192 : 8192 + (1 << 20)], returned=got
    )
except Exception as exc:
    report.error("raw_read", exc)

# write() a whole array to a new file, then pwrite()/raw_write() patches into it ("r+").
try:
    src = cupy.asarray(want)
    with kvikio.CuFile(out_path, "w") as f:
        n = f.write(src)
    moved_written += n
    with open(out_path, "rb") as f:
        on_disk = f.read()
    report.bytes_check("write_whole", common.np.frombuffer(on_disk, dtype=common.np.uint8), want, returned=n)
except Exception as exc:
    report.error("write_whole", exc)

try:
    patch = cupy.asarray(common.expected(SIZE * 2, 3 << 20, base))
    host = bytearray(want.tobytes())
    with kvikio.CuFile(out_path, "r+") as f:
        fut = f.pwrite(patch[: 2 << 20], 2 << 20, 5000)
        n1 = fut.get()
        n2 = f.raw_write(patch, 1 << 20, 40960, 2 << 20)
    moved_written += n1 + n2
    host[5000 : 5000 + n1] = patch[: 2 << 20].get().tobytes()[:n1]
    host[40960 : 40960 + n2] = patch[2 << 20 : (2 << 20) + n2].get().tobytes()
    with open(out_path, "rb") as f:
        on_disk = f.read()
    report.bytes_check(
        "pwrite_raw_write",
        common.np.frombuffer(on_disk, dtype=common.np.uint8),
        common.np.frombuffer(bytes(host), dtype=common.np.uint8),
        returned=[n1, n2],
    )
except Exception as exc:
    report.error("pwrite_raw_write", exc)

# The library's own counters saw what KvikIO moved: the calls reached this libcufile.
report.stats_counted(stats, before, moved_read, moved_written, read_ops=True)

for p in (path, out_path):
    if os.path.exists(p):
        os.unlink(p)
report.finish()
