#!/usr/bin/env python3
"""fio's libcufile engine on a libcufile.so.0: fio_cufile_verify.fio (cuFileWrite from GPU
memory, cuFileRead back, crc32c of every block checked), one JSON line per fio job.

  python3 fio_client.py --lib ours|nvidia --dir SCRATCH --fio PATH_TO_FIO

A job passes when fio reports no error for it and no verify failure, and it moved bytes; fio's
exit status 0 is required too. A verify failure is a byte mismatch (fail on either library); any
other error is a failure on ours and a refusal recorded on NVIDIA's. `--fio` missing or not
executable (no fio tarball in the bundle, or its build failed) is reported on a `build` line:
skipped when no tarball was shipped, else fail. See common.py for the lines and the exit status.
"""

import argparse
import errno
import json
import os
import re
import subprocess

import common

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--lib", choices=("ours", "nvidia"), required=True)
ap.add_argument("--dir", required=True)
ap.add_argument("--fio", required=True)
ap.add_argument("--no-tarball", action="store_true", help="no fio sources were shipped")
args = ap.parse_args()
report = common.Report("fio-libcufile", args.lib)

if not os.access(args.fio, os.X_OK):
    report.line("build", "skipped" if args.no_tarball else "fail", fio=args.fio)
    report.finish()

job = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fio_cufile_verify.fio")
work = os.path.join(args.dir, f"fio-{args.lib}")
os.makedirs(work, exist_ok=True)
out = os.path.join(work, "fio.json")
env = dict(os.environ, FIO_DIR=work, GPU_DEV_IDS="0")
run = subprocess.run(
    [args.fio, "--output-format=json", f"--output={out}", job],
    env=env,
    # fio leaves its verify state files in the working directory: the scratch folder, not ours.
    cwd=work,
    capture_output=True,
    text=True,
    timeout=240,
)
text = run.stdout + run.stderr
try:
    with open(out) as f:
        raw = f.read()
    # fio may print notes before the JSON document in its output file.
    result = json.loads(raw[raw.index("{") :])
except (OSError, ValueError) as exc:
    result = None
    parse_error = str(exc)

refusal = "fail" if args.lib == "ours" else "refused"
if result is None:
    report.line("run", refusal, exit=run.returncode, error=parse_error, output=text[-2000:])
else:
    jobs = result.get("jobs", [])
    # fio ends a job whose verify found a wrong block with EILSEQ (verify_fatal=1) and says why.
    said_bad = re.search(r"verify.*(bad|fail)|bad (magic|header)", text, re.IGNORECASE)
    for i, one in enumerate(jobs):
        name = f"{one.get('jobname')}#{i}"
        error = one.get("error", 0)
        read_bytes = one.get("read", {}).get("io_bytes", 0)
        written = one.get("write", {}).get("io_bytes", 0)
        if error == errno.EILSEQ or said_bad:
            status = "fail"
        elif error == 0 and read_bytes + written > 0 and run.returncode == 0:
            status = "pass"
        else:
            status = refusal
        report.line(
            name,
            status,
            error=error,
            read_bytes=read_bytes,
            write_bytes=written,
            read_gbps=round(one.get("read", {}).get("bw_bytes", 0) / 1e9, 3),
            write_gbps=round(one.get("write", {}).get("bw_bytes", 0) / 1e9, 3),
            fio_exit=run.returncode,
        )
    if not jobs:
        report.line("run", refusal, exit=run.returncode, output=text[-2000:])
    if run.returncode != 0:
        report.line("fio_exit", refusal, exit=run.returncode, output=text[-2000:])
for name in os.listdir(work):
    os.unlink(os.path.join(work, name))
os.rmdir(work)
report.finish()
