"""The benchmark script runs (at 64 MiB) and every measurement it prints is verified."""

import json
import os
import subprocess
import sys

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "bench.py")


def test_bench_runs_and_verifies(tmp_path):
    path = str(tmp_path / "bench-data")
    out = subprocess.run(
        [sys.executable, BENCH, path, "--size", "64M", "--latency-ops", "100"],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    ).stdout
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    reads = [r for r in lines if r["op"] == "read"]
    latency = {r["bytes"]: r for r in lines if r["op"] == "read_latency"}
    assert len(reads) == 2
    assert all(r["bytes"] == 64 << 20 and r["verified"] and r["gbps"] > 0 for r in reads)
    assert sorted(latency) == [4096, 65536, 1 << 20]
    assert all(r["verified"] and 0 < r["us_median"] <= r["us_p99"] for r in latency.values())
    # A file the script made itself is removed; the named one here did not exist before.
    assert not os.path.exists(path)
