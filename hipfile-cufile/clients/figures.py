#!/usr/bin/env python3
"""The cuFile door's figures, in one run on one file, side by side (BENCH.md "How a figure
counts"): each pair alternates A B A B in processes of their own, each figure is the median of
--reps repetitions, and the summary gives ratios.

  figures.py --bundle BUNDLE --dir SCRATCH [--out OUT] [--size 8G] [--torch-size 4G] [--reps 3]

Pairs (A over B):
  cuFile door / hipFile door   the same ctypes loop over each door (cuFileRead on our
                               libcufile.so.0, hipFileRead on the bundle's libhipfile.so, the
                               buffer registered): hot first read of a fresh registration and the
                               read again, 4 KiB and 1 MiB latency (median, p99 over every read
                               of every repetition). Target: within 5%. Beside them, the cuFile
                               door against `bin/hipfile bench --only hot,latency` (a Rust loop,
                               so the latency rows there also carry ctypes' cost per call).
  KvikIO over ours / KvikIO POSIX
                               KvikIO with KVIKIO_COMPAT_MODE=OFF on our libcufile.so.0 against
                               KvikIO's own POSIX path (compat ON), both at KvikIO's best tuning
                               (16 threads, 8 MiB tasks): hot read, cold read, 4 KiB and 1 MiB
                               latency. For ours gds_threshold is 0, so small reads reach cuFile.
  torch.cuda.gds / torch.load  GdsFile.load_storage of a 4 GiB tensor's storage straight from the
                               file torch.save wrote (at the storage's offset in it) against
                               torch.load(..., map_location="cuda") of that file, hot.
Ceilings of the same run come from `bin/hipfile bench --only ceilings` (pinned host-to-device
copy, page-cache and O_DIRECT reads). Cold reads drop the page cache first (root); every process
of ours has exited by then (pinned page cache survives drop_caches), and a cold figure above
1.5x the run's O_DIRECT ceiling is marked not cold.

Every timed read is checked: whole-file reads entirely (on the GPU, against the pattern of
common.py), the last read of each latency size, the loaded tensors entirely. One JSON line per
measurement goes to stdout and OUT/cufile-figures.jsonl, the table to stdout and
OUT/cufile-figures.txt. Exit status 1 when a timed read was wrong or a measurement of ours failed.
--budget (seconds, default 540) bounds the run: repetitions that would not fit are left out and
the summary says so. The workers (`figures.py worker ...`) are this file run again.
"""

import argparse
import ctypes
import json
import os
import random
import statistics
import subprocess
import sys
import time

import common

MIB = 1 << 20
GIB = 1 << 30
LATENCY_SIZES = ((4096, "4k"), (MIB, "1m"))


def parse_size(text):
    units = {"K": 1 << 10, "M": MIB, "G": GIB, "T": 1 << 40}
    text = text.strip().upper().rstrip("B").rstrip("I")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def emit(record):
    print(json.dumps(record), flush=True)


def timed(fn):
    c0, t0 = time.process_time(), time.perf_counter()
    value = fn()
    return value, time.perf_counter() - t0, time.process_time() - c0


# ---------------------------------------------------------------------------------------------
# Workers: one process each, printing JSON lines.


def gpu_verify(buf, size, file_offset=0):
    """Whether the device buffer holds the pattern of [file_offset, file_offset + size): every
    byte, compared on the GPU one tile at a time (file_offset a multiple of the tile)."""
    import cupy

    base = cupy.asarray(common.tile())
    at = 0
    while at < size:
        n = min(common.TILE, size - at)
        want = base[:n].copy()
        words = want[: n // 8 * 8].view(cupy.uint64)
        start = file_offset + at
        pages = words[:: common.PAGE // 8]
        pages[...] = cupy.arange(start, start + pages.size * common.PAGE, common.PAGE, dtype=cupy.uint64)
        if not bool(cupy.array_equal(buf[at : at + n], want)):
            return False
        at += n
    return True


def latency_offsets(size, bytes_, ops, seed):
    rng = random.Random(seed)
    return [rng.randrange(0, (size - bytes_) // 4096 + 1) * 4096 for _ in range(ops)]


class Descr(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("pad", ctypes.c_int),
        ("fd", ctypes.c_int),
        ("pad1", ctypes.c_int),
        ("fs_ops", ctypes.c_void_p),
    ]


def worker_door(a):
    """One door through ctypes, the same loop for both (so their difference is the door's, not the
    harness's): driver, handle, registered buffer, whole-file reads (first of the registration,
    then again) and latency reads into the buffer's start. `--door cufile` is libcufile.so.0 (the
    preloaded one), `--door hipfile` the bundle's libhipfile.so, with hipFile's names for the same
    calls (their argument and return layouts are cuFile's)."""
    import cupy

    if a.door == "cufile":
        lib, p, tool = ctypes.CDLL("libcufile.so.0"), "cuFile", "cufile_door"
    else:
        lib, p, tool = ctypes.CDLL(a.hipfile_lib), "hipFile", "hipfile_ctypes"

    def fn(name):
        return getattr(lib, p + name)

    for name in ("DriverOpen", "DriverClose", "HandleRegister", "BufRegister", "BufDeregister"):
        fn(name).restype = common.CuFileError
    fn("HandleRegister").argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(Descr)]
    fn("BufRegister").argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    fn("BufDeregister").argtypes = [ctypes.c_void_p]
    read = fn("Read")
    read.restype = ctypes.c_ssize_t
    read.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64, ctypes.c_int64]
    fn("HandleDeregister").argtypes = [ctypes.c_void_p]
    size = os.path.getsize(a.file)
    buf = cupy.zeros(size, dtype=cupy.uint8)
    for call, args in (("DriverOpen", ()), ("BufRegister", (buf.data.ptr, size, 0))):
        e = fn(call)(*args).err
        if e != 0:
            emit({"tool": tool, "error": f"{p}{call} {e}"})
            return 1
    fd = os.open(a.file, os.O_RDONLY)
    handle = ctypes.c_void_p()
    e = fn("HandleRegister")(ctypes.byref(handle), ctypes.byref(Descr(1, 0, fd, 0, None))).err
    if e != 0:
        emit({"tool": tool, "error": f"{p}HandleRegister {e}"})
        return 1
    # hipFileRead moves at most MAX_RW_COUNT (2 GiB - 4 KiB) per call, as pread does, so a hipFile
    # program reads a larger file in calls of that size; cuFileRead moves the whole size in one.
    most = size if a.door == "cufile" else (2 << 30) - 4096

    def whole(size):
        done = 0
        while done < size:
            n = read(handle, buf.data.ptr, min(most, size - done), done, done)
            if n <= 0:
                return n if done == 0 else done
            done += n
        return done

    status = 0
    for what in ("read_hot", "read_hot_again"):
        buf.fill(0)
        cupy.cuda.runtime.deviceSynchronize()
        n, dt, dc = timed(lambda: whole(size))
        ok = n == size and gpu_verify(buf, size)
        status |= 0 if ok else 1
        emit(
            {
                "tool": tool,
                "what": what,
                "bytes": n,
                "gbps": n / dt / 1e9,
                "cores": dc / dt,
                "verified": ok,
            }
        )
    for bytes_, name in LATENCY_SIZES:
        lat = []
        offsets = latency_offsets(size, bytes_, a.latency_ops, a.seed)
        for off in offsets:
            t = time.perf_counter()
            n = read(handle, buf.data.ptr, bytes_, off, 0)
            lat.append((time.perf_counter() - t) * 1e6)
            if n != bytes_:
                status = 1
        got = cupy.asnumpy(buf[:bytes_])
        ok = common.first_difference(got, common.expected(offsets[-1], bytes_)) is None
        status |= 0 if ok else 1
        emit({"tool": tool, "what": f"latency_{name}", "bytes": bytes_, "us": lat, "verified": ok})
    fn("HandleDeregister")(handle)
    os.close(fd)
    fn("BufDeregister")(buf.data.ptr)
    fn("DriverClose")()
    return status


def worker_kvikio(a):
    """KvikIO at 16 threads, 8 MiB tasks: a whole-file read (hot or cold), then (hot) latency."""
    import cupy
    import kvikio
    import kvikio.defaults

    settings = {"num_threads": a.threads, "task_size": a.task_size}
    if a.lib == "ours":
        settings["gds_threshold"] = 0
    kvikio.defaults.set(settings)
    mode = str(kvikio.defaults.get("compat_mode"))
    size = os.path.getsize(a.file)
    buf = cupy.zeros(size, dtype=cupy.uint8)
    tool = f"kvikio_{a.lib}"
    status = 0
    with kvikio.CuFile(a.file, "r") as f:
        if a.cold:
            os.system("sync; echo 3 > /proc/sys/vm/drop_caches")
        # The share of the file in the page cache right before the read: ~0 for a cold figure.
        cached, pages = (
            kvikio.get_page_cache_info(a.file) if hasattr(kvikio, "get_page_cache_info") else (None, None)
        )
        cupy.cuda.runtime.deviceSynchronize()
        n, dt, dc = timed(lambda: f.read(buf, size, 0))
        ok = n == size and gpu_verify(buf, size)
        status |= 0 if ok else 1
        emit(
            {
                "tool": tool,
                "what": "read_cold" if a.cold else "read_hot",
                "bytes": n,
                "gbps": n / dt / 1e9,
                "cores": dc / dt,
                "verified": ok,
                "compat_mode": mode,
                "threads": a.threads,
                "task_size": a.task_size,
                "gds_threshold": kvikio.defaults.get("gds_threshold"),
                "cached_pages_before": cached,
                "file_pages": pages,
            }
        )
        if not a.cold:
            for bytes_, name in LATENCY_SIZES:
                lat = []
                offsets = latency_offsets(size, bytes_, a.latency_ops, a.seed)
                small = buf[:bytes_]
                for off in offsets:
                    t = time.perf_counter()
                    f.read(small, bytes_, off)
                    lat.append((time.perf_counter() - t) * 1e6)
                ok = (
                    common.first_difference(cupy.asnumpy(small), common.expected(offsets[-1], bytes_)) is None
                )
                status |= 0 if ok else 1
                emit({"tool": tool, "what": f"latency_{name}", "bytes": bytes_, "us": lat, "verified": ok})
    return status


def storage_offset(path):
    """The offset of the first storage's bytes in a torch.save file (a zip without compression)."""
    import struct
    import zipfile

    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if "/data/" in i.filename)
    with open(path, "rb") as f:
        f.seek(info.header_offset)
        header = f.read(30)
        name_len, extra_len = struct.unpack("<HH", header[26:30])
    return info.header_offset + 30 + name_len + extra_len, info.file_size


def worker_torch(a):
    """torch.cuda.gds (load_storage at the storage's offset) or torch.load, of the file torch.save
    wrote; the tensor checked whole against the pattern."""
    import cupy
    import torch

    torch.cuda.init()
    offset, nbytes = storage_offset(a.file)
    if a.how == "gds":
        import torch.cuda.gds as gds

        dst = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        f = gds.GdsFile(a.file, os.O_RDONLY)
        torch.cuda.synchronize()
        _, dt, dc = timed(lambda: (f.load_storage(dst.untyped_storage(), offset), torch.cuda.synchronize()))
        f.deregister_handle()
        tensor = dst
    else:

        def load():
            t = torch.load(a.file, map_location="cuda")
            torch.cuda.synchronize()
            return t

        tensor, dt, dc = timed(load)
    ok = tensor.numel() * tensor.element_size() == nbytes and gpu_verify(
        cupy.asarray(tensor.view(torch.uint8).reshape(-1)), nbytes
    )
    emit(
        {
            "tool": f"torch_{a.how}",
            "what": "load_hot",
            "bytes": nbytes,
            "gbps": nbytes / dt / 1e9,
            "cores": dc / dt,
            "verified": ok,
            "storage_offset": offset,
        }
    )
    return 0 if ok else 1


def make_torch_file(path, size):
    """torch.save of `size` bytes of the pattern, storages aligned to 4 KiB where torch allows
    (torch.cuda.gds opens with O_DIRECT)."""
    import numpy as np
    import torch

    try:
        torch.serialization.config.save.storage_alignment = 4096
    except AttributeError:
        pass
    data = np.empty(size, dtype=np.uint8)
    base = common.tile()
    at = 0
    while at < size:
        n = min(common.TILE, size - at)
        data[at : at + n] = common.expected(at, n, base)
        at += n
    # Under another name until complete: a run cut short leaves no file a later run would take.
    torch.save(torch.from_numpy(data), path + ".part")
    os.replace(path + ".part", path)
    return 0


# ---------------------------------------------------------------------------------------------
# The driver: no GPU work of its own, so nothing of ours outlives a measurement.


class Run:
    def __init__(self, a):
        self.a = a
        self.start = time.monotonic()
        self.records = []
        self.failed = []
        self.left_out = []
        os.makedirs(a.out, exist_ok=True)
        self.jsonl = open(os.path.join(a.out, "cufile-figures.jsonl"), "w")
        self.lib_dir = os.path.join(a.bundle, "lib")
        self.site = None
        self.rep = 0

    def elapsed(self):
        return time.monotonic() - self.start

    def fits(self, seconds):
        return self.elapsed() + seconds < self.a.budget

    def record(self, rec):
        rec["t"] = round(self.elapsed(), 1)
        self.records.append(rec)
        self.jsonl.write(json.dumps(rec) + "\n")
        self.jsonl.flush()
        shown = {k: v for k, v in rec.items() if k != "us"}
        if "us" in rec:
            shown["ops"] = len(rec["us"])
        print(json.dumps(shown), flush=True)

    def env(self, ours):
        env = dict(os.environ)
        paths = [
            p for p in (self.site, os.path.dirname(os.path.abspath(__file__)), env.get("PYTHONPATH")) if p
        ]
        env["PYTHONPATH"] = ":".join(paths)
        if ours:
            env["LD_PRELOAD"] = os.path.join(self.lib_dir, "libcufile.so.0")
            env["LD_LIBRARY_PATH"] = ":".join(p for p in (self.lib_dir, env.get("LD_LIBRARY_PATH")) if p)
        return env

    def spawn(self, label, argv, ours, timeout=240):
        """Runs one worker; returns its JSON lines (a failure noted when it exits non-zero). It
        gets at most what is left of the budget (30 s at least)."""
        timeout = max(30, min(timeout, self.a.budget - self.elapsed()))
        try:
            p = subprocess.run(argv, env=self.env(ours), capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.failed.append(f"{label}: timed out after {timeout}s")
            self.record({"tool": label, "error": f"timed out after {timeout}s"})
            return []
        lines = []
        for line in p.stdout.splitlines():
            if line.startswith("{"):
                rec = json.loads(line)
                rec.setdefault("rep", self.rep)
                lines.append(rec)
        if p.returncode != 0:
            self.failed.append(f"{label}: exit {p.returncode}: {p.stderr[-800:]}")
            self.record({"tool": label, "error": f"exit {p.returncode}", "stderr": p.stderr[-2000:]})
        return lines

    def worker(self, *args):
        return [sys.executable, os.path.abspath(__file__), "worker", *args]

    def hipfile_bench(self, only):
        argv = [
            os.path.join(self.a.bundle, "bin", "hipfile"),
            "bench",
            "--file",
            self.file,
            "--repeat",
            "1",
            "--only",
            only,
            "--json",
            "--platform",
            "nvidia",
            "--latency-ops",
            str(self.a.latency_ops),
        ]
        out = []
        for rec in self.spawn(f"hipfile_bench_{only}", argv, ours=False, timeout=300):
            if rec.get("type") == "measurement":
                out.append(rec)
        return out


def pick(records, tool, what):
    return [r for r in records if r.get("tool") == tool and r.get("what") == what and "error" not in r]


def median_gbps(rs):
    v = [r["gbps"] for r in rs]
    return statistics.median(v) if v else None


def latency(rs):
    us = sorted(x for r in rs for x in r["us"])
    if not us:
        return None, None
    return statistics.median(us), us[min(len(us) - 1, int(len(us) * 0.99))]


def ratio(a, b):
    return round(a / b, 3) if a and b else None


def driver(a):
    run = Run(a)
    os.makedirs(a.dir, exist_ok=True)
    run.file = os.path.join(a.dir, "cufile-figures.bin")
    torch_file = os.path.join(a.dir, "cufile-figures.pt")
    hipfile = os.path.join(a.bundle, "bin", "hipfile")
    have_lib = os.path.isfile(os.path.join(run.lib_dir, "libcufile.so.0"))
    if not have_lib:
        run.failed.append(f"no {run.lib_dir}/libcufile.so.0")

    # KvikIO from the bundle's wheels, into a private site folder.
    wheels = os.path.join(a.bundle, "cufile", "wheels")
    found = sorted(os.path.join(wheels, w) for w in os.listdir(wheels)) if os.path.isdir(wheels) else []
    if found:
        run.site = os.path.join(a.dir, "cufile-figures-site")
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "-q",
                "--no-index",
                "--no-deps",
                "--target",
                run.site,
                *found,
            ],
            check=False,
            capture_output=True,
        )
    have_kvikio = bool(found)

    # The file: made once (the pattern), kept for later runs on the same machine.
    base = common.tile()
    if not common.has_pattern(run.file, a.size, base):
        _, dt, _ = timed(lambda: common.write_pattern(run.file, a.size, base))
        run.record(
            {"tool": "setup", "what": "made", "file": run.file, "bytes": a.size, "seconds": round(dt, 1)}
        )
    if not os.path.isfile(torch_file):
        run.spawn(
            "torch_save",
            run.worker("torch-save", "--file", torch_file, "--size", str(a.torch_size)),
            ours=False,
            timeout=300,
        )

    def warm(path):
        # The page cache filled by 16 parallel plain reads; no process of ours is involved.
        chunk = -(-os.path.getsize(path) // (16 * MIB))
        subprocess.run(
            [
                "bash",
                "-c",
                f"for i in $(seq 0 15); do dd if={path} of=/dev/null bs=1M "
                f"skip=$((i * {chunk})) count={chunk} status=none & done; wait",
            ],
            check=False,
        )

    warm(run.file)
    common_args = ["--file", run.file, "--latency-ops", str(a.latency_ops)]
    kv = ["--threads", "16", "--task-size", str(8 * MIB)]
    per_rep = 60
    for rep in range(1, a.reps + 1):
        if not run.fits(per_rep + 120):
            run.left_out.append(f"hot repetition {rep} and later (budget)")
            break
        run.rep = rep
        seed = ["--seed", str(rep)]
        if have_lib:
            for r in run.spawn(
                "cufile_door", run.worker("door", "--door", "cufile", *common_args, *seed), ours=True
            ):
                run.record(r)
        hip_lib = ["--hipfile-lib", os.path.join(run.lib_dir, "libhipfile.so")]
        for r in run.spawn(
            "hipfile_ctypes",
            run.worker("door", "--door", "hipfile", *hip_lib, *common_args, *seed),
            ours=False,
        ):
            run.record(r)
        for r in run.hipfile_bench("hot,latency"):
            r.update({"tool": "hipfile_door", "what": r["key"], "rep": rep})
            run.record(r)
        if have_kvikio and have_lib:
            for r in run.spawn(
                "kvikio_ours", run.worker("kvikio", "--lib", "ours", *common_args, *seed, *kv), ours=True
            ):
                run.record(r)
        if have_kvikio:
            for r in run.spawn(
                "kvikio_posix", run.worker("kvikio", "--lib", "posix", *common_args, *seed, *kv), ours=False
            ):
                run.record(r)
        if os.path.isfile(torch_file):
            warm(torch_file)
            if have_lib:
                for r in run.spawn(
                    "torch_gds", run.worker("torch", "--how", "gds", "--file", torch_file), ours=True
                ):
                    run.record(r)
            for r in run.spawn(
                "torch_load", run.worker("torch", "--how", "load", "--file", torch_file), ours=False
            ):
                run.record(r)
        per_rep = run.elapsed() / rep

    # Ceilings of this run (ours exits with the command).
    run.rep = 0
    ceilings = []
    if run.fits(100):
        ceilings = run.hipfile_bench("ceilings")
        for r in ceilings:
            r.update({"tool": "ceiling", "what": r["key"]})
            run.record(r)
    else:
        run.left_out.append("ceilings (budget)")
    direct = [r.get("gbps") for r in ceilings if "direct" in r["key"] and r.get("gbps")]
    direct_ceiling = max(direct) if direct else None

    # Cold: the page cache dropped in each KvikIO process right before its read; every process of
    # ours has exited before the next one starts.
    if have_kvikio and have_lib:
        # A cold read runs at the disk's ~1.2 GB/s, after the process's start and a sync.
        cold_each = a.size / 1e9 + 10
        for rep in range(1, a.reps + 1):
            if not run.fits(2 * cold_each):
                run.left_out.append(f"cold repetition {rep} and later (budget)")
                break
            run.rep = rep
            for lib, ours in (("ours", True), ("posix", False)):
                subprocess.run(["bash", "-c", "sync; echo 3 > /proc/sys/vm/drop_caches"], check=False)
                for r in run.spawn(
                    f"kvikio_{lib}_cold",
                    run.worker("kvikio", "--lib", lib, "--cold", *common_args, *kv),
                    ours=ours,
                ):
                    if direct_ceiling and r.get("gbps", 0) > 1.5 * direct_ceiling:
                        r["not_cold"] = f"above 1.5x the O_DIRECT ceiling ({direct_ceiling:.2f} GB/s)"
                    elif (
                        r.get("cached_pages_before")
                        and r.get("file_pages")
                        and r["cached_pages_before"] > r["file_pages"] // 100
                    ):
                        r["not_cold"] = (
                            f"{r['cached_pages_before']} of {r['file_pages']} pages cached before the read"
                        )
                    run.record(r)

    return summarize(run, direct_ceiling)


def summarize(run, direct_ceiling):
    recs = run.records
    rows = []

    def through(label, a_tool, a_what, b_tool, b_what, note=""):
        a_v, b_v = median_gbps(pick(recs, a_tool, a_what)), median_gbps(pick(recs, b_tool, b_what))
        rows.append(
            (
                label,
                "GB/s",
                a_v,
                b_v,
                ratio(a_v, b_v),
                len(pick(recs, a_tool, a_what)),
                len(pick(recs, b_tool, b_what)),
                note,
            )
        )

    def lat(label, a_tool, b_tool, what, note=""):
        (am, ap), (bm, bp) = latency(pick(recs, a_tool, what)), latency(pick(recs, b_tool, what))
        n_a, n_b = sum(len(r["us"]) for r in pick(recs, a_tool, what)), sum(
            len(r["us"]) for r in pick(recs, b_tool, what)
        )
        rows.append((label + " median", "us", am, bm, ratio(am, bm), n_a, n_b, note))
        rows.append((label + " p99", "us", ap, bp, ratio(ap, bp), n_a, n_b, note))

    # The hipFile door's rows are hipfile bench's own medians; their samples are per repetition.
    hip = {}
    for r in recs:
        if r.get("tool") == "hipfile_door":
            hip.setdefault(r["what"], []).append(r)
    for key in ("read_hot", "read_hot_again"):
        for r in hip.get(key, []):
            run.records.append({"tool": "hipfile_door_gbps", "what": key, "gbps": r["gbps"]})
    for key in ("latency_4k", "latency_1m"):
        # hipfile bench gives median and p99 per repetition: the median of those is the figure.
        run.records.append(
            {
                "tool": "hipfile_door_lat",
                "what": key,
                "median": [r["median_us"] for r in hip.get(key, [])],
                "p99": [r["p99_us"] for r in hip.get(key, [])],
            }
        )
    # The doors side by side through the same ctypes loop: what is left is the door's own cost.
    for what, name in (
        ("read_hot", "hot read, first of a registration"),
        ("read_hot_again", "hot read again"),
    ):
        through(
            f"cuFile door / hipFile door, same ctypes loop: {name}",
            "cufile_door",
            what,
            "hipfile_ctypes",
            what,
            "target >= 0.95",
        )
    for key, name in (("latency_4k", "4 KiB"), ("latency_1m", "1 MiB")):
        lat(
            f"cuFile door / hipFile door, same ctypes loop: {name} latency",
            "cufile_door",
            "hipfile_ctypes",
            key,
            "target <= 1.05",
        )
    through(
        "cuFile door / hipFile door (hipfile bench): hot read, first of a registration",
        "cufile_door",
        "read_hot",
        "hipfile_door_gbps",
        "read_hot",
        "Rust loop against ctypes: see the rows above",
    )
    through(
        "cuFile door / hipFile door (hipfile bench): hot read again",
        "cufile_door",
        "read_hot_again",
        "hipfile_door_gbps",
        "read_hot_again",
        "Rust loop against ctypes: see the rows above",
    )
    for key, name in (("latency_4k", "4 KiB"), ("latency_1m", "1 MiB")):
        am, ap = latency(pick(recs, "cufile_door", key))
        h = next((r for r in run.records if r.get("tool") == "hipfile_door_lat" and r["what"] == key), None)
        bm = statistics.median(h["median"]) if h and h["median"] else None
        bp = statistics.median(h["p99"]) if h and h["p99"] else None
        n_a = sum(len(r["us"]) for r in pick(recs, "cufile_door", key))
        rows.append(
            (
                f"cuFile door / hipFile door (hipfile bench): {name} latency median",
                "us",
                am,
                bm,
                ratio(am, bm),
                n_a,
                len(h["median"]) if h else 0,
                "Rust loop against ctypes: see the rows above",
            )
        )
        rows.append(
            (
                f"cuFile door / hipFile door (hipfile bench): {name} latency p99",
                "us",
                ap,
                bp,
                ratio(ap, bp),
                n_a,
                len(h["p99"]) if h else 0,
                "",
            )
        )
    through(
        "KvikIO over ours / KvikIO POSIX: hot read", "kvikio_ours", "read_hot", "kvikio_posix", "read_hot"
    )
    cold_a = [r for r in pick(recs, "kvikio_ours", "read_cold") if "not_cold" not in r]
    cold_b = [r for r in pick(recs, "kvikio_posix", "read_cold") if "not_cold" not in r]
    ca, cb = median_gbps(cold_a), median_gbps(cold_b)
    rows.append(
        (
            "KvikIO over ours / KvikIO POSIX: cold read",
            "GB/s",
            ca,
            cb,
            ratio(ca, cb),
            len(cold_a),
            len(cold_b),
            f"O_DIRECT ceiling {direct_ceiling:.2f} GB/s" if direct_ceiling else "no O_DIRECT ceiling",
        )
    )
    lat("KvikIO over ours / KvikIO POSIX: 4 KiB latency", "kvikio_ours", "kvikio_posix", "latency_4k")
    lat("KvikIO over ours / KvikIO POSIX: 1 MiB latency", "kvikio_ours", "kvikio_posix", "latency_1m")
    through(
        f"torch.cuda.gds / torch.load: {run.a.torch_size / GIB:g} GiB tensor, hot",
        "torch_gds",
        "load_hot",
        "torch_load",
        "load_hot",
    )

    lines = [f"{'figure':<66} {'unit':<5} {'A':>9} {'B':>9} {'A/B':>7} {'n A':>5} {'n B':>5}  note"]

    def fmt(v):
        return f"{v:9.2f}" if isinstance(v, (int, float)) else f"{'-':>9}"

    for label, unit, av, bv, r, na, nb, note in rows:
        lines.append(
            f"{label:<66} {unit:<5} {fmt(av)} {fmt(bv)} {r if r is not None else '-':>7} {na:>5} {nb:>5}  {note}"
        )
    for r in recs:
        if r.get("tool") == "ceiling":
            lines.append(f"ceiling {r['what']}: {r.get('gbps', '-')} GB/s ({r.get('label', '')})")
    unverified = [r for r in recs if r.get("verified") is False]
    for r in unverified:
        run.failed.append(f"{r.get('tool')} {r.get('what')} rep {r.get('rep')}: bytes wrong")
    if run.left_out:
        lines.append("left out: " + "; ".join(run.left_out))
    for f in run.failed:
        lines.append("FAILED: " + f)
    lines.append(
        f"wall: {run.elapsed():.0f} s; A and B alternate in each repetition; GB/s figures are medians of the "
        "repetitions, latency figures the median and p99 of every read (hipFile door: the median of its "
        "per-repetition medians and p99s)"
    )
    text = "\n".join(lines)
    print(text, flush=True)
    with open(os.path.join(run.a.out, "cufile-figures.txt"), "w") as f:
        f.write(text + "\n")
    for label, unit, av, bv, r, na, nb, note in rows:
        run.jsonl.write(
            json.dumps(
                {
                    "summary": label,
                    "unit": unit,
                    "a": av,
                    "b": bv,
                    "ratio": r,
                    "n_a": na,
                    "n_b": nb,
                    "note": note,
                }
            )
            + "\n"
        )
    run.jsonl.close()
    return 1 if run.failed else 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        ap = argparse.ArgumentParser(prog="figures.py worker")
        ap.add_argument("kind", choices=("door", "kvikio", "torch", "torch-save"))
        ap.add_argument("--door", choices=("cufile", "hipfile"), default="cufile")
        ap.add_argument("--hipfile-lib", default="libhipfile.so")
        ap.add_argument("--file", required=True)
        ap.add_argument("--lib", choices=("ours", "posix"), default="ours")
        ap.add_argument("--how", choices=("gds", "load"), default="gds")
        ap.add_argument("--cold", action="store_true")
        ap.add_argument("--threads", type=int, default=16)
        ap.add_argument("--task-size", type=int, default=8 * MIB)
        ap.add_argument("--latency-ops", type=int, default=2000)
        ap.add_argument("--seed", type=int, default=1)
        ap.add_argument("--size", type=int, default=4 * GIB)
        a = ap.parse_args(sys.argv[2:])
        if a.kind == "kvikio":
            # The environment decides KvikIO's mode when it loads: set before the import.
            os.environ["KVIKIO_COMPAT_MODE"] = "OFF" if a.lib == "ours" else "ON"
        run = {
            "door": worker_door,
            "kvikio": worker_kvikio,
            "torch": worker_torch,
            "torch-save": lambda a: make_torch_file(a.file, a.size),
        }[a.kind]
        sys.exit(run(a))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--bundle", required=True, help="the GPU bundle (lib/libcufile.so.0, bin/hipfile, cufile/wheels)"
    )
    ap.add_argument("--dir", required=True, help="scratch folder on a real disk (the files are kept there)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--size", type=parse_size, default=8 * GIB)
    ap.add_argument("--torch-size", type=parse_size, default=4 * GIB)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--latency-ops", type=int, default=2000)
    ap.add_argument("--budget", type=float, default=540)
    sys.exit(driver(ap.parse_args()))


if __name__ == "__main__":
    main()
