"""What every cuFile client script shares: the byte pattern files hold, the JSON lines, and the
proof of which libcufile.so.0 served the calls.

Each client runs in a process of its own against one library, named by `--lib`:
  ours    libhipfile-cufile's libcufile.so.0, preloaded (LD_PRELOAD=<bundle>/lib/libcufile.so.0):
          a preloaded object with that soname answers every DT_NEEDED entry and every
          dlopen("libcufile.so.0") of the process, so the client runs unchanged on it
  nvidia  whatever libcufile.so.0 the loader finds (NVIDIA's), nothing preloaded

Every result is one JSON line: {"client", "lib", "check", "status", ...} with status
  pass     the call succeeded and every byte it moved was checked and right
  fail     a byte was wrong, or (ours) a call failed
  refused  (nvidia only) the library returned an error: recorded with its text, not a failure,
           since NVIDIA's cuFile cannot register a file on a machine without nvidia-fs and udev
The process exits 1 when any line says fail, else 0.
"""

import ctypes
import json
import os
import sys
import traceback

import numpy as np

PAGE = 4096
# The pattern's period: a random tile of this many bytes, each 4 KiB page of it stamped with
# its own file offset, so that bytes read from the wrong place never pass for the right ones.
TILE = 64 << 20
SEED = 31


def tile():
    """The random tile the pattern repeats (before stamping), as numpy bytes."""
    return np.random.default_rng(SEED).integers(0, 256, TILE, dtype=np.uint8)


def stamp(chunk, offset):
    """Writes each page's file offset into its first 8 bytes; `chunk` starts at `offset`, a
    multiple of the page size, and its length is a multiple of 8."""
    words = chunk.view(np.uint64)
    words[:: PAGE // 8] = np.arange(offset, offset + chunk.size, PAGE, dtype=np.uint64)[
        : words[:: PAGE // 8].size
    ]
    return chunk


def expected(offset, length, base=None):
    """The pattern's bytes at [offset, offset + length) of a file, as numpy bytes."""
    base = tile() if base is None else base
    start = offset // PAGE * PAGE
    end = -(-(offset + length) // PAGE) * PAGE
    out = np.empty(end - start, dtype=np.uint8)
    at = start
    while at < end:
        in_tile = at % TILE
        n = min(TILE - in_tile, end - at)
        out[at - start : at - start + n] = base[in_tile : in_tile + n]
        at += n
    stamp(out, start)
    return out[offset - start : offset - start + length]


def write_pattern(path, size, base=None):
    """Makes `path` hold the pattern, `size` bytes (page cache, no fsync)."""
    base = tile() if base is None else base
    with open(path, "wb") as f:
        at = 0
        while at < size:
            n = min(TILE, size - at)
            f.write(expected(at, n, base))
            at += n


def has_pattern(path, size, base=None):
    """Whether `path` is `size` bytes of the pattern, judged by its first and last page and
    its size: enough to tell a file made here before from anything else."""
    try:
        if os.path.getsize(path) != size:
            return False
        with open(path, "rb") as f:
            first = f.read(PAGE)
            f.seek(max(0, size - PAGE))
            last = f.read(PAGE)
    except OSError:
        return False
    return (
        first == expected(0, len(first), base).tobytes()
        and last == expected(max(0, size - PAGE), len(last), base).tobytes()
    )


def loaded_libcufile():
    """The file of every libcufile object mapped into this process (from /proc/self/maps)."""
    paths = []
    with open("/proc/self/maps") as maps:
        for line in maps:
            parts = line.split()
            if len(parts) >= 6 and "libcufile" in os.path.basename(parts[5]):
                if parts[5] not in paths:
                    paths.append(parts[5])
    return paths


class DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def symbol_object(name):
    """The file of the object that `name` resolves to in the process's global scope (what a
    DT_NEEDED user of libcufile.so.0 binds to), or None where nothing defines it."""
    libc = ctypes.CDLL(None)
    try:
        address = ctypes.cast(getattr(libc, name), ctypes.c_void_p).value
    except AttributeError:
        return None
    info = DlInfo()
    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(DlInfo)]
    if not libc.dladdr(address, ctypes.byref(info)) or not info.dli_fname:
        return None
    return info.dli_fname.decode()


def first_difference(got, want):
    """The index of the first byte that differs, or None."""
    got = np.asarray(got, dtype=np.uint8)
    want = np.asarray(want, dtype=np.uint8)
    if got.size != want.size:
        return min(got.size, want.size)
    diff = np.flatnonzero(got != want)
    return int(diff[0]) if diff.size else None


class OpCounter(ctypes.Structure):
    _fields_ = [("ok", ctypes.c_uint64), ("err", ctypes.c_uint64)]


class StatsLevel1(ctypes.Structure):
    """The leading fields of cuFile's level-1 statistics (the rest is padding here: the
    buffer is sized generously so either library may write all of its struct)."""

    _fields_ = [
        ("read_ops", OpCounter),
        ("write_ops", OpCounter),
        ("hdl_register_ops", OpCounter),
        ("hdl_deregister_ops", OpCounter),
        ("buf_register_ops", OpCounter),
        ("buf_deregister_ops", OpCounter),
        ("read_bytes", ctypes.c_uint64),
        ("write_bytes", ctypes.c_uint64),
        ("rest", ctypes.c_uint64 * 256),
    ]


class CuFileError(ctypes.Structure):
    _fields_ = [("err", ctypes.c_int), ("cu_err", ctypes.c_int)]


class Stats:
    """cuFile's level-1 statistics of the libcufile.so.0 this process uses, through ctypes:
    `CDLL("libcufile.so.0")` is the object already loaded (the preloaded one for `ours`)."""

    def __init__(self):
        self.lib = ctypes.CDLL("libcufile.so.0")
        for name in ("cuFileSetStatsLevel", "cuFileStatsStart", "cuFileGetStatsL1"):
            getattr(self.lib, name).restype = CuFileError
        self.lib.cuFileSetStatsLevel.argtypes = [ctypes.c_int]
        self.lib.cuFileGetStatsL1.argtypes = [ctypes.POINTER(StatsLevel1)]

    def start(self):
        """Level 1, collecting; returns the error codes of the two calls."""
        level = self.lib.cuFileSetStatsLevel(1).err
        started = self.lib.cuFileStatsStart().err
        return level, started

    def snapshot(self):
        """(error code, {read_ok, read_bytes, write_ok, write_bytes})."""
        s = StatsLevel1()
        e = self.lib.cuFileGetStatsL1(ctypes.byref(s)).err
        return e, {
            "read_ok": s.read_ops.ok,
            "read_bytes": s.read_bytes,
            "write_ok": s.write_ops.ok,
            "write_bytes": s.write_bytes,
        }


def arguments(description):
    import argparse

    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--lib", choices=("ours", "nvidia"), required=True)
    ap.add_argument("--dir", required=True, help="scratch directory on a real disk")
    return ap.parse_args()


class Report:
    """The JSON lines of one client run against one library, and its exit status."""

    def __init__(self, client, lib):
        self.client = client
        self.lib = lib
        self.failed = False

    def line(self, check, status, **fields):
        if status == "fail":
            self.failed = True
        record = {"client": self.client, "lib": self.lib, "check": check, "status": status}
        record.update(fields)
        print(json.dumps(record, default=str), flush=True)

    def loaded(self, ours_dir=None):
        """The first line: which libcufile objects the process mapped, and which one the
        process's cuFile symbols bind to. For `ours`, the preloaded one must be mapped and be
        the one `cuFileRead` resolves to in the global scope: a framework may map another copy
        by its full path (torch's `_load_global_deps` loads its wheel's libcufile.so.0 so), which
        is then loaded but unused, as every DT_NEEDED entry and symbol lookup finds the preloaded
        object first (the `cufile_stats` line shows the bytes counted by ours)."""
        paths = loaded_libcufile()
        if self.lib == "ours":
            want = os.path.realpath(ours_dir) if ours_dir else None
            mine = [p for p in paths if want and os.path.realpath(p).startswith(want + os.sep)]
            others = [p for p in paths if p not in mine]
            bound = symbol_object("cuFileRead")
            binds_to_ours = bool(want and bound and os.path.realpath(bound).startswith(want + os.sep))
            status = "pass" if mine and binds_to_ours else "fail"
            self.line(
                "loaded",
                status,
                libcufile=paths,
                expected_dir=want,
                cuFileRead_binds_to=bound,
                also_mapped_unused=others,
            )
        else:
            self.line("loaded", "pass" if paths else "refused", libcufile=paths)
        return paths

    def unmet(self):
        """The status of a check that did not hold: a failure on ours, a refusal recorded on
        NVIDIA's."""
        return "fail" if self.lib == "ours" else "refused"

    def error(self, check, exc, **fields):
        """A call raised: a failure on ours, a refusal recorded on NVIDIA's."""
        status = self.unmet()
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        self.line(check, status, error=text, **fields)

    def stats_start(self):
        """Starts level-1 statistics of this process's libcufile.so.0 (the `stats_start` line)
        and returns the Stats and the counters at the start. Raises what the calls raise."""
        stats = Stats()
        codes = stats.start()
        e, before = stats.snapshot()
        self.line(
            "stats_start",
            "pass" if codes == (0, 0) and e == 0 else self.unmet(),
            set_level_and_start=codes,
            get_stats_l1=e,
        )
        return stats, before

    def stats_counted(self, stats, before, moved_read, moved_written, read_ops=False):
        """The `cufile_stats` line: the library's own counters grew by at least the bytes the
        client moved since `before` (from stats_start), so the calls reached this libcufile.
        `read_ops` adds the read operations counted. Nothing when the statistics never
        started."""
        if stats is None or before is None:
            return
        try:
            e, after = stats.snapshot()
            read = after["read_bytes"] - before["read_bytes"]
            written = after["write_bytes"] - before["write_bytes"]
            counted = e == 0 and moved_read > 0 and read >= moved_read and written >= moved_written
            fields = {}
            if read_ops:
                fields["read_ops_counted"] = after["read_ok"] - before["read_ok"]
            self.line(
                "cufile_stats",
                "pass" if counted else self.unmet(),
                get_stats_l1=e,
                read_bytes_counted=read,
                write_bytes_counted=written,
                read_bytes_moved=moved_read,
                write_bytes_moved=moved_written,
                **fields,
            )
        except Exception as exc:
            self.error("cufile_stats", exc)

    def bytes_check(self, check, got, want, **fields):
        """pass when `got` equals `want` byte for byte, else fail (with where they part)."""
        at = first_difference(got, want)
        if at is None:
            self.line(check, "pass", bytes=int(np.asarray(want).size), **fields)
        else:
            self.line(check, "fail", bytes=int(np.asarray(want).size), first_difference=at, **fields)
        return at is None

    def finish(self):
        sys.exit(1 if self.failed else 0)


def ours_dir():
    """The folder of the preloaded libcufile.so.0 (from LD_PRELOAD), if any."""
    for entry in os.environ.get("LD_PRELOAD", "").replace(":", " ").split():
        if os.path.basename(entry).startswith("libcufile.so"):
            return os.path.dirname(os.path.abspath(entry))
    return None
