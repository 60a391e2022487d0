#!/usr/bin/env python3
"""Remote reads over HTTP on the GPU machine, in one run, side by side (BENCH.md "How a figure
counts"): a real HTTP server that honours Range requests (Debian's nginx, carried in the bundle)
serves one object over loopback, and three clients read all of it:

  ours      `bin/hipfile bench --remote URL` (parallel ranged requests into pinned staging lanes,
            then the GPU): GB/s and client cores, as bench reports them
  kvikio    KvikIO's RemoteFile.open_http(URL).read(cupy buffer), at 4/8/16/32/64 threads (its
            thread pool, 8 MiB tasks); the best thread count is KvikIO's figure
  ceiling   curl -o /dev/null: one stream, and 16 streams of ranged requests at once (the
            server's loopback ceiling, no GPU, no copy out)

  remote_figures.py --bundle BUNDLE --dir SCRATCH [--out OUT] [--size 4G] [--reps 3] [--budget 300]

Ours and KvikIO's best alternate A B A B in processes of their own, --reps times; each figure is
the median. Every read is checked: ours by bench's own verification, KvikIO's on the GPU against
the object's pattern (the bundle's cufile/clients/common.py). Client cores are user+system CPU time of the
client process over the read's wall time (the server's CPU is the same for all and not counted).
Targets (issue 32): ours >= 1.0x KvikIO at <= its cores, and >= 0.8x the loopback ceiling.
One JSON line per measurement to stdout and OUT/remote-figures.jsonl, the table to stdout and
OUT/remote-figures.txt. Exit status 1 when a read was wrong or a measurement of ours failed.
"""

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MIB, GIB = 1 << 20, 1 << 30


def emit(rec):
    print(json.dumps(rec), flush=True)


def parse_size(text):
    units = {"K": 1 << 10, "M": MIB, "G": GIB}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def children_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_kvikio(a):
    """One KvikIO RemoteFile read of the whole object into a cupy buffer, checked on the GPU."""
    sys.path.insert(0, a.clients)
    import cupy
    import kvikio
    import kvikio.defaults
    import figures  # the cuFile clients' helpers: gpu_verify against common.py's pattern

    kvikio.defaults.set({"num_threads": a.threads, "task_size": a.task_size})
    f = kvikio.RemoteFile.open_http(a.url)
    size = f.nbytes()
    buf = cupy.zeros(size, dtype=cupy.uint8)
    # Three reads in this process, the median reported: a steady state, as bench's --repeat 3
    # gives ours (the first read of a process also pays for thread pools and pinned buffers).
    runs, ok = [], True
    for _ in range(3):
        buf.fill(0)
        cupy.cuda.runtime.deviceSynchronize()
        c0, t0 = time.process_time(), time.perf_counter()
        n = f.read(buf)
        cupy.cuda.runtime.deviceSynchronize()
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        runs.append((n / dt / 1e9, dc / dt))
        ok = ok and n == size and figures.gpu_verify(buf, size)
    gbps, cores = sorted(runs)[1]
    emit(
        {
            "tool": "kvikio",
            "threads": a.threads,
            "bytes": n,
            "gbps": gbps,
            "cores": cores,
            "runs": runs,
            "verified": ok,
        }
    )
    return 0 if ok else 1


class Run:
    def __init__(self, a):
        self.a, self.t0, self.records, self.failed = a, time.time(), [], []
        self.clients = os.path.join(a.bundle, "cufile", "clients")
        self.site = None

    def left(self):
        return self.a.budget - (time.time() - self.t0)

    def record(self, rec):
        self.records.append(rec)
        emit(rec)

    def spawn(self, label, argv, env=None, timeout=180):
        timeout = max(20, min(timeout, self.left()))
        c0, t0 = children_cpu(), time.perf_counter()
        try:
            p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            self.failed.append(f"{label}: timed out after {timeout:.0f}s")
            return [], 0, 0
        out = [json.loads(l) for l in p.stdout.splitlines() if l.startswith("{")]
        if p.returncode != 0:
            self.failed.append(
                f"{label}: exit {p.returncode}: {(p.stderr.strip().splitlines() or [''])[-1][-300:]}"
            )
        return out, time.perf_counter() - t0, children_cpu() - c0

    def kvikio(self, threads):
        env = dict(os.environ)
        env["PYTHONPATH"] = ":".join(p for p in (self.site, self.clients, env.get("PYTHONPATH")) if p)
        argv = [
            sys.executable,
            os.path.abspath(__file__),
            "worker",
            "--url",
            self.url,
            "--threads",
            str(threads),
            "--task-size",
            str(8 * MIB),
            "--clients",
            self.clients,
        ]
        out, _, _ = self.spawn(f"kvikio {threads} threads", argv, env=env)
        for r in out:
            r["rep"] = self.rep
            self.record(r)
            if not r.get("verified"):
                self.failed.append(f"kvikio {threads} threads: wrong bytes")
        return out

    def ours(self):
        argv = [
            os.path.join(self.a.bundle, "bin", "hipfile"),
            "bench",
            "--remote",
            self.url,
            "--repeat",
            "3",
            "--json",
            "--platform",
            self.a.platform,
        ]
        out, _, _ = self.spawn("hipfile bench --remote", argv, timeout=240)
        got = [r for r in out if r.get("type") == "measurement"]
        for r in got:
            r.update({"tool": "ours", "rep": self.rep})
            self.record(r)
            if r.get("verified") is False:
                self.failed.append(f"ours {r.get('key')}: wrong bytes")
        if not got:
            self.failed.append("hipfile bench --remote gave no measurement")
        return got

    def curl(self, streams, size):
        part = -(-size // streams)
        argv = [
            "bash",
            "-c",
            " & ".join(
                f"curl -s -o /dev/null -r {i * part}-{min(size, (i + 1) * part) - 1} {self.url}"
                for i in range(streams)
            )
            + " & wait",
        ]
        _, dt, dc = self.spawn(f"curl x{streams}", argv)
        self.record(
            {
                "tool": "curl",
                "streams": streams,
                "bytes": size,
                "gbps": size / dt / 1e9,
                "cores": dc / dt,
                "rep": self.rep,
            }
        )


def nginx_up(a, root):
    nginx = os.path.join(a.bundle, "remote", "nginx", "nginx")
    prefix = os.path.join(a.dir, "nginx")
    for sub in ("logs", "tmp"):
        os.makedirs(os.path.join(prefix, sub), exist_ok=True)
    port = free_port()
    conf = os.path.join(prefix, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""user root;
worker_processes 16;
pid {prefix}/nginx.pid;
error_log {prefix}/logs/error.log;
events {{ worker_connections 1024; }}
http {{
    access_log off;
    # Debian's build keeps its temporary files under /var/lib/nginx, which the GPU machine lacks.
    client_body_temp_path {prefix}/tmp/body;
    proxy_temp_path {prefix}/tmp/proxy;
    fastcgi_temp_path {prefix}/tmp/fastcgi;
    uwsgi_temp_path {prefix}/tmp/uwsgi;
    scgi_temp_path {prefix}/tmp/scgi;
    sendfile on;
    sendfile_max_chunk 8m;
    tcp_nopush on;
    keepalive_requests 100000;
    server {{ listen 127.0.0.1:{port}; root {root}; }}
}}
""")
    env = dict(os.environ)
    libs = os.path.join(a.bundle, "remote", "nginx", "lib")
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (libs, env.get("LD_LIBRARY_PATH")) if p)
    proc = subprocess.Popen([nginx, "-p", prefix, "-c", conf, "-g", "daemon off;"], env=env)
    for _ in range(100):
        if proc.poll() is not None:
            break
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, port
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"nginx did not start (exit {proc.wait()}); its messages are above")


def median(rs, key="gbps"):
    v = [r[key] for r in rs if r.get(key) is not None]
    return statistics.median(v) if v else None


def driver(a):
    run = Run(a)
    os.makedirs(a.dir, exist_ok=True)
    sys.path.insert(0, run.clients)
    import common

    root = os.path.join(a.dir, "remote-root")
    os.makedirs(root, exist_ok=True)
    obj = os.path.join(root, "object.bin")
    if not common.has_pattern(obj, a.size):
        common.write_pattern(obj, a.size)
    os.chmod(root, 0o755)
    os.chmod(obj, 0o644)
    wheels = os.path.join(a.bundle, "cufile", "wheels")
    run.site = os.path.join(a.dir, "remote-figures-site")
    if not os.path.isdir(run.site):
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", run.site]
            + [os.path.join(wheels, w) for w in os.listdir(wheels)],
            check=False,
        )
    proc, port = nginx_up(a, root)
    run.url = f"http://127.0.0.1:{port}/object.bin"
    try:
        run.rep = 0
        subprocess.run(["curl", "-s", "-o", "/dev/null", run.url], check=False)  # warm the page cache
        # KvikIO's thread count: a sweep, once; its best is what the repetitions run.
        sweep = {}
        for t in (4, 8, 16, 32, 64):
            if run.left() < 60:
                break
            out = run.kvikio(t)
            if out:
                sweep[t] = out[0]["gbps"]
        best = max(sweep, key=sweep.get) if sweep else 16
        for rep in range(1, a.reps + 1):
            if run.left() < 30:
                break
            run.rep = rep
            run.ours()
            run.kvikio(best)
            run.curl(1, a.size)
            run.curl(16, a.size)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    reps = [r for r in run.records if r.get("rep", 0) >= 1]
    ours = [r for r in reps if r["tool"] == "ours" and r.get("key") == "remote_read"]
    ours_host = [r for r in reps if r["tool"] == "ours" and r.get("key") == "remote_read_host"]
    kv = [r for r in reps if r["tool"] == "kvikio"]
    c1 = [r for r in reps if r["tool"] == "curl" and r["streams"] == 1]
    c16 = [r for r in reps if r["tool"] == "curl" and r["streams"] == 16]
    ceiling = max(x for x in (median(c1), median(c16)) if x is not None) if (c1 or c16) else None

    def ratio(x, y):
        return x / y if x and y else None

    rows = [
        (
            "ours / KvikIO RemoteFile (best threads)",
            "GB/s",
            median(ours),
            median(kv),
            ratio(median(ours), median(kv)),
            f"KvikIO at {best} threads; target >= 1.0",
        ),
        (
            "ours / KvikIO RemoteFile: client cores",
            "cores",
            median(ours, "cores"),
            median(kv, "cores"),
            ratio(median(ours, "cores"), median(kv, "cores")),
            "target <= 1.0",
        ),
        (
            "ours / loopback ceiling (curl, best of 1 and 16 streams)",
            "GB/s",
            median(ours),
            ceiling,
            ratio(median(ours), ceiling),
            "target >= 0.8",
        ),
        (
            "ours into host memory / loopback ceiling",
            "GB/s",
            median(ours_host),
            ceiling,
            ratio(median(ours_host), ceiling),
            "no GPU: the network side alone",
        ),
        ("curl, 1 stream", "GB/s", median(c1), None, None, ""),
        ("curl, 16 streams", "GB/s", median(c16), None, None, ""),
    ]
    lines = [f"{'figure':58} {'unit':6} {'A':>9} {'B':>9} {'A/B':>7}  note"]
    for label, unit, x, y, r, note in rows:
        f = lambda v: f"{v:9.2f}" if isinstance(v, float) else f"{'-':>9}"
        lines.append(f"{label:58} {unit:6} {f(x)} {f(y)} {(f'{r:7.3f}' if r else '      -')}  {note}")
    lines.append("KvikIO sweep (GB/s by threads): " + ", ".join(f"{t}: {g:.2f}" for t, g in sweep.items()))
    lines += [f"failed: {x}" for x in run.failed]
    text = "\n".join(lines)
    print(text)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "remote-figures.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(a.out, "remote-figures.jsonl"), "w") as f:
        for r in run.records:
            f.write(json.dumps(r) + "\n")
    return 1 if run.failed else 0


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        ap = argparse.ArgumentParser(prog="remote_figures.py worker")
        ap.add_argument("--url", required=True)
        ap.add_argument("--threads", type=int, default=16)
        ap.add_argument("--task-size", type=int, default=8 * MIB)
        ap.add_argument("--clients", required=True)
        sys.exit(worker_kvikio(ap.parse_args(sys.argv[2:])))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--size", type=parse_size, default=4 * GIB)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--budget", type=float, default=300)
    ap.add_argument("--platform", default="nvidia", help="hipfile bench's --platform (sim to try it here)")
    sys.exit(driver(ap.parse_args()))


if __name__ == "__main__":
    main()
