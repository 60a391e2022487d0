#!/usr/bin/env python3
"""hipfile-py benchmark, made to run beside shared/bench/kvikio_anchor.py with the same
measurement definitions, so the numbers compare line by line.

Prints one JSON line per measurement:
  {"tool": "hipfile-py", "op": "read", "threads": N, "cache": "hot", "bytes": ..., "gbps": ...,
   "cores": ..., "verified": ..., "array": "cupy|hipfile"}
  {"tool": "hipfile-py", "op": "read_latency", "bytes": 4096|65536|1048576, "us_per_op": ...,
   "us_median": ..., "us_p99": ..., "verified": ...}

Usage: bench.py [FILE] [--size 8G] [--latency-ops 2000] [--array auto|cupy|hipfile]
- FILE is read if it exists (its first --size bytes; the whole file without --size); otherwise a
  file of --size bytes (default 8 GiB) is written there first (default: in $TMPDIR) and removed
  at the end.
- "read": the whole size with one CuFile.read(buf) with hipfile's defaults, into a CuPy array
  (--array auto picks CuPy when it imports and the platform is not the sim, else a
  hipfile.DeviceBuffer). As the anchor: the file is read once through the page cache first
  ("hot" = cached), then timed twice, both printed (the first includes hipfile's one-time set-up
  in this process); each timed read is checked: 16 random 4 KiB windows of the device buffer
  against the file. "cores" = process CPU seconds / wall seconds during the timed call.
- "read_latency": --latency-ops reads of each size at random 4 KiB-aligned offsets of the hot
  file, each timed alone from Python (CuFile.read), op i into slot i % 64 of one device array;
  after every 64 ops the 64 slots are compared with the file, outside the timed reads (a check
  between every two reads would add its copies' traces to the next read's time); mean, median
  and p99 in microseconds.
"""

import argparse
import json
import os
import random
import tempfile
import time

import hipfile


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
    text = text.strip().upper().rstrip("IB")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def make_file(path, size):
    """Random bytes, 4 MiB blocks of one random block each rotated by a different odd amount, so
    no two offsets of the file less than 2^22 blocks apart hold the same 4 MiB: a read that lands
    at the wrong offset does not compare equal."""
    block = random.Random(3).randbytes(4 << 20)
    with open(path, "wb") as f:
        left, k = size, 0
        while left > 0:
            rot = (k * 4099) % len(block)
            data = block[rot:] + block[:rot]
            n = min(left, len(data))
            f.write(data[:n])
            left -= n
            k += 1


def warm(path, size):
    with open(path, "rb", buffering=0) as f:
        left = size
        while left > 0:
            b = f.read(min(left, 64 << 20))
            if not b:
                break
            left -= len(b)


class Arrays:
    """Device arrays of one library, and host copies of their windows."""

    def __init__(self, kind):
        self.kind = kind
        if kind == "cupy":
            import cupy

            self.cupy = cupy

    def empty(self, n):
        if self.kind == "cupy":
            return self.cupy.empty(n, dtype=self.cupy.uint8)
        return hipfile.empty(n)

    def zero(self, buf):
        buf.fill(0)

    def window(self, buf, off, n):
        if self.kind == "cupy":
            return self.cupy.asnumpy(buf[off : off + n]).tobytes()
        return buf.copy_to_host(off, n)


def pick_array(choice):
    if choice != "auto":
        return choice
    if os.environ.get("HIPFILE_PLATFORM", "").strip().lower() == "sim":
        return "hipfile"
    try:
        import cupy  # noqa: F401
    except ImportError:
        return "hipfile"
    return "cupy"


def verify(arrays, buf, path, size):
    rng = random.Random(7)
    with open(path, "rb") as f:
        for _ in range(16):
            off = rng.randrange(0, max(1, size - 4096)) // 4096 * 4096
            n = min(4096, size - off)
            if arrays.window(buf, off, n) != os.pread(f.fileno(), n, off):
                return False
    return True


def timed(fn):
    c0, t0 = time.process_time(), time.perf_counter()
    n = fn()
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    return n, dt, dc


def bench_read(arrays, path, size):
    buf = arrays.empty(size)
    warm(path, size)
    for _ in range(2):
        arrays.zero(buf)
        f = hipfile.open(path, "r")
        n, dt, dc = timed(lambda: f.read(buf, size, 0))
        f.close()
        print(
            json.dumps(
                {
                    "tool": "hipfile-py",
                    "op": "read",
                    "threads": hipfile.num_threads(),
                    "cache": "hot",
                    "bytes": n,
                    "gbps": round(n / dt / 1e9, 3),
                    "cores": round(dc / dt, 2),
                    "verified": n == size and verify(arrays, buf, path, size),
                    "array": arrays.kind,
                }
            ),
            flush=True,
        )
    del buf


#: Device slots of the latency phase: op i reads into slot i % SLOTS of one array, and the slots are
#: compared with the file after every SLOTS ops, outside the timed reads, so every op is checked
#: while a check (a device-to-host copy and a pread) runs between two timed reads only once per
#: SLOTS ops.
SLOTS = 64


def bench_latency(arrays, path, size, ops):
    warm(path, size)
    with open(path, "rb") as plain, hipfile.open(path, "r") as f:
        for sz in (4096, 65536, 1 << 20):
            if size < sz:
                continue
            slots = arrays.empty(SLOTS * sz)
            rng = random.Random(sz)
            offs = [rng.randrange(0, size - sz + 1) // 4096 * 4096 for _ in range(ops)]
            lat = []
            verified = True
            for first in range(0, len(offs), SLOTS):
                batch = offs[first : first + SLOTS]
                for k, o in enumerate(batch):
                    t = time.perf_counter()
                    n = f.read(slots, sz, o, k * sz)
                    lat.append(time.perf_counter() - t)
                    verified = verified and n == sz
                for k, o in enumerate(batch):
                    want = os.pread(plain.fileno(), sz, o)
                    verified = verified and arrays.window(slots, k * sz, sz) == want
            del slots
            lat.sort()
            print(
                json.dumps(
                    {
                        "tool": "hipfile-py",
                        "op": "read_latency",
                        "bytes": sz,
                        "us_per_op": round(sum(lat) / len(lat) * 1e6, 2),
                        "us_median": round(lat[len(lat) // 2] * 1e6, 2),
                        "us_p99": round(lat[int(len(lat) * 0.99)] * 1e6, 2),
                        "verified": verified,
                        "array": arrays.kind,
                    }
                ),
                flush=True,
            )


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", nargs="?")
    ap.add_argument("--size", type=parse_size, default=None, help="bytes, e.g. 8G, 64M")
    ap.add_argument("--latency-ops", type=int, default=2000)
    ap.add_argument("--array", choices=["auto", "cupy", "hipfile"], default="auto")
    a = ap.parse_args()
    made = None
    path = a.file
    if path is None or not os.path.exists(path):
        size = a.size or 8 << 30
        if path is None:
            fd, path = tempfile.mkstemp(prefix="hipfile-bench-")
            os.close(fd)
        made = path
        make_file(path, size)
    else:
        size = a.size or os.path.getsize(path)
        size = min(size, os.path.getsize(path))
    try:
        arrays = Arrays(pick_array(a.array))
        bench_read(arrays, path, size)
        bench_latency(arrays, path, size, a.latency_ops)
    finally:
        if made:
            os.unlink(made)


if __name__ == "__main__":
    main()
