"""hipfile-rs from Python through the C ABI, on device memory that CuPy and PyTorch allocated.

Run by the GPU bundle's run.sh: python3 frameworks.py LIBHIPFILE SCRATCH_FILE. Registers a file
(fs_ops left as garbage, as C programs leave it), registers each framework's buffer, reads the file
into it, then reads again through an unregistered interior pointer; prints `ok - ...` /
`not ok - ...` lines and exits 0 only when every check passed.
"""
import ctypes, os, sys
import numpy as np

lib = ctypes.CDLL(sys.argv[1])
class Err(ctypes.Structure):
    _fields_ = [("err", ctypes.c_int), ("hip_drv_err", ctypes.c_int)]
class Descr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("pad0", ctypes.c_int), ("fd", ctypes.c_int), ("pad1", ctypes.c_int), ("fs_ops", ctypes.c_void_p)]
for name in ("hipFileDriverOpen", "hipFileDriverClose"):
    getattr(lib, name).restype = Err
lib.hipFileHandleRegister.restype = Err
lib.hipFileHandleRegister.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(Descr)]
lib.hipFileBufRegister.restype = Err
lib.hipFileBufRegister.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
lib.hipFileBufDeregister.restype = Err
lib.hipFileBufDeregister.argtypes = [ctypes.c_void_p]
lib.hipFileRead.restype = ctypes.c_ssize_t
lib.hipFileRead.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64, ctypes.c_int64]
lib.hipFileHandleDeregister.argtypes = [ctypes.c_void_p]

n = 64 << 20
data = np.random.default_rng(7).integers(0, 256, n, dtype=np.uint8)
path = sys.argv[2]
data.tofile(path)
fd = os.open(path, os.O_RDONLY)
assert lib.hipFileDriverOpen().err == 0
d = Descr(1, 0, fd, 0, 0xDEADBEEF)
fh = ctypes.c_void_p()
e = lib.hipFileHandleRegister(ctypes.byref(fh), ctypes.byref(d)); assert e.err == 0, e.err
ok = True
import cupy, torch
for name, arr, ptr, back in [
    ("cupy", *(lambda a: (a, a.data.ptr, lambda: cupy.asnumpy(a)))(cupy.zeros(n, dtype=cupy.uint8))),
    ("torch", *(lambda t: (t, t.data_ptr(), lambda: t.cpu().numpy()))(torch.zeros(n, dtype=torch.uint8, device="cuda"))),
]:
    r = lib.hipFileBufRegister(ptr, n, 0)
    got = lib.hipFileRead(fh, ptr, n, 0, 0)
    same = got == n and np.array_equal(back(), data)
    unreg = lib.hipFileBufDeregister(ptr).err
    # interior pointer, unregistered
    got2 = lib.hipFileRead(fh, ptr + 4096, n - 8192, 4096, 0)
    same2 = got2 == n - 8192 and np.array_equal(back()[4096:n - 4096], data[4096:n - 4096])
    print(f"{'ok' if r.err == 0 and same and unreg == 0 and same2 else 'not ok'} - {name}: register {r.err}, read {got}, exact {same}, interior {got2} exact {same2}")
    ok = ok and r.err == 0 and same and same2
lib.hipFileHandleDeregister(fh)
assert lib.hipFileDriverClose().err == 0
sys.exit(0 if ok else 1)
