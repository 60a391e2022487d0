//! What the tests share: one simulated GPU for the driver and the test (the simulated HIP
//! runtime library, as the facade's C ABI tests use it), a lock, and a driver left closed.

use std::ffi::c_void;
use std::os::fd::{AsRawFd, RawFd};
use std::ptr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

use cufile::*;
use hipfile_hip::{DeviceBuffer, GpuRuntime};

/// The tests' cuFile configuration file.
pub const CUFILE_JSON: &str = r#"{
    // as cuFile's own file: comments are allowed
    "properties": {
        /* the largest batch */
        "max_batch_io_size": 96
    }
}"#;

/// `properties.max_batch_io_size` of [`CUFILE_JSON`].
pub const JSON_MAX_BATCH: usize = 96;

/// A test's hold on the process-wide driver: the lock, and the runtime the driver also uses.
pub struct Session {
    pub runtime: Arc<dyn GpuRuntime>,
    _lock: MutexGuard<'static, ()>,
}

impl Session {
    pub fn start() -> Self {
        static LOCK: Mutex<()> = Mutex::new(());
        static RUNTIME: OnceLock<Arc<dyn GpuRuntime>> = OnceLock::new();
        let lock = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
        let runtime = RUNTIME.get_or_init(|| {
            for name in [
                "HIPFILE_BACKENDS",
                "HIPFILE_STATS_LEVEL",
                "HIPFILE_FORCE_COMPAT_MODE",
            ] {
                std::env::remove_var(name);
            }
            // cuFile's configuration file, as NVIDIA ships it: comments, and one key the tests
            // read back (`driver::the_driver_reads_cufile_json`).
            let json = std::env::temp_dir().join(format!("cufile-it-{}.json", std::process::id()));
            std::fs::write(&json, CUFILE_JSON).expect("write the test's cufile.json");
            std::env::set_var("CUFILE_ENV_PATH_JSON", &json);
            hipfile_testkit::target::c_abi_runtime().expect("the simulated runtime opens")
        });
        close_all();
        Session {
            runtime: Arc::clone(runtime),
            _lock: lock,
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        close_all();
    }
}

fn close_all() {
    while cuFileUseCount() > 0 {
        assert_eq!(cuFileDriverClose().err, 0);
    }
}

/// `cuFileHandleRegister` of `fd` with descriptor type `kind`: the handle and the answer.
pub fn register(fd: RawFd, kind: i32) -> (CUfileHandle_t, CUfileError_t) {
    let mut descr = CUfileDescr_t {
        type_: kind,
        handle: hipfile::capi::hipFileDescr_handle_t { fd },
        fs_ops: ptr::null(),
    };
    let mut fh: CUfileHandle_t = ptr::null_mut();
    // SAFETY: both pointers are live locals of the right types.
    let answer = unsafe { cuFileHandleRegister(&mut fh, &mut descr) };
    (fh, answer)
}

/// A scratch file of `len` bytes of `pattern(i)`, open for reading and writing.
pub fn scratch_file(len: usize) -> (tempfile::TempDir, std::fs::File) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let bytes: Vec<u8> = (0..len).map(pattern).collect();
    std::fs::write(&path, bytes).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    (dir, file)
}

/// A scratch file of `len` bytes of `pattern(i)` registered with cuFile (the driver opened
/// implicitly), and a device buffer as long: where most IO tests start.
pub struct Registered {
    pub dir: tempfile::TempDir,
    /// Kept open for the handle's descriptor.
    _file: std::fs::File,
    pub buffer: DeviceBuffer,
    /// The buffer's first byte, as the C calls take it.
    pub base: *mut c_void,
    pub fh: CUfileHandle_t,
}

impl Registered {
    pub fn new(session: &Session, len: usize) -> Self {
        let (dir, file) = scratch_file(len);
        let buffer = DeviceBuffer::new(session.runtime.clone(), len).unwrap();
        let base = buffer.ptr() as *mut c_void;
        let (fh, answer) = register(file.as_raw_fd(), CU_FILE_HANDLE_TYPE_OPAQUE_FD);
        assert_eq!(answer, SUCCESS);
        Registered {
            dir,
            _file: file,
            buffer,
            base,
            fh,
        }
    }
}

pub fn pattern(i: usize) -> u8 {
    (i % 251) as u8
}

pub const SUCCESS: CUfileError_t = CUfileError_t { err: 0, cu_err: 0 };

pub fn op(err: i32) -> CUfileError_t {
    CUfileError_t { err, cu_err: 0 }
}
