#!/usr/bin/env python3
"""PyTorch's torch.cuda.gds, unchanged, on a libcufile.so.0: GdsFile (O_DIRECT is added by
torch; cuFileHandleRegister), save_storage/load_storage of tensors' untyped storages at several
offsets (cuFileWrite/cuFileRead), gds_register_buffer/gds_deregister_buffer (cuFileBufRegister),
every byte checked against the host copy and against the file.

  python3 torch_gds_client.py --lib ours|nvidia --dir SCRATCH

libtorch_cuda.so names libcufile.so.0 in its DT_NEEDED entries: with ours preloaded, that entry
is ours. The `loaded` and `cufile_stats` lines show it. See common.py for the lines and the exit
status.
"""

import os

import common

args = common.arguments(__doc__)
report = common.Report("torch.cuda.gds", args.lib)

import torch  # noqa: E402
import torch.cuda.gds as gds  # noqa: E402

report.loaded(common.ours_dir())
path = os.path.join(args.dir, f"torch-gds-{args.lib}.bin")
base = common.tile()

# Storages of different element types and sizes (multiples of 4 KiB: torch opens with
# O_DIRECT), placed one after another in the file.
first = torch.from_numpy(common.expected(0, 16 << 20, base).copy()).cuda()
second = torch.from_numpy(common.expected(1 << 30, 8 << 20, base).copy()).view(torch.float32).cuda()
third = torch.from_numpy(common.expected(3 << 30, 4096, base).copy()).view(torch.int64).cuda()
tensors = [("uint8_16MiB", first, 0), ("float32_8MiB", second, 16 << 20), ("int64_4KiB", third, 24 << 20)]
file_size = (24 << 20) + 4096

try:
    f = gds.GdsFile(path, os.O_CREAT | os.O_RDWR)
    report.line("register_handle", "pass", handle=f.handle)
except Exception as exc:
    report.error("register_handle", exc)
    f = None

stats = None
before = None
try:
    stats, before = report.stats_start()
except Exception as exc:
    report.error("stats_start", exc)
    stats = None

moved_read = 0
moved_written = 0
if f is not None:
    try:
        for name, t, offset in tensors:
            f.save_storage(t.untyped_storage(), offset)
            moved_written += t.untyped_storage().nbytes()
        torch.cuda.synchronize()
        with open(path, "rb") as raw:
            on_disk = raw.read()
        want = b"".join(t.cpu().numpy().tobytes() for _, t, _ in tensors)
        report.bytes_check(
            "save_storage",
            common.np.frombuffer(on_disk[:file_size], dtype=common.np.uint8),
            common.np.frombuffer(want, dtype=common.np.uint8),
            file_bytes=len(on_disk),
        )
    except Exception as exc:
        report.error("save_storage", exc)

    for registered in (False, True):
        label = "registered" if registered else "unregistered"
        for name, t, offset in tensors:
            check = f"load_storage_{name}_{label}"
            try:
                dst = torch.zeros_like(t)
                storage = dst.untyped_storage()
                if registered:
                    gds.gds_register_buffer(storage)
                f.load_storage(storage, offset)
                torch.cuda.synchronize()
                moved_read += storage.nbytes()
                if registered:
                    gds.gds_deregister_buffer(storage)
                report.bytes_check(
                    check,
                    dst.cpu().view(torch.uint8).numpy().reshape(-1),
                    t.cpu().view(torch.uint8).numpy().reshape(-1),
                    offset=offset,
                )
            except Exception as exc:
                report.error(check, exc, offset=offset)

    # A storage registered, used for a save, then deregistered: the buffer path of writes.
    try:
        src = torch.from_numpy(common.expected(7 << 30, 1 << 20, base).copy()).cuda()
        gds.gds_register_buffer(src.untyped_storage())
        f.save_storage(src.untyped_storage(), file_size)
        gds.gds_deregister_buffer(src.untyped_storage())
        moved_written += src.untyped_storage().nbytes()
        with open(path, "rb") as raw:
            raw.seek(file_size)
            on_disk = raw.read(1 << 20)
        report.bytes_check(
            "save_storage_registered",
            common.np.frombuffer(on_disk, dtype=common.np.uint8),
            src.cpu().numpy(),
        )
    except Exception as exc:
        report.error("save_storage_registered", exc)

    try:
        f.deregister_handle()
        report.line("deregister_handle", "pass")
    except Exception as exc:
        report.error("deregister_handle", exc)

report.stats_counted(stats, before, moved_read, moved_written)

del f
if os.path.exists(path):
    os.unlink(path)
report.finish()
