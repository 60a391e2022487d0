//! Host memory through the C ABI: `hipFileSetParameterBool(hipFileParamPropertiesAllowSystemMemory)`
//! admits it, reads and writes (synchronous, batch entries, stream-ordered ops, each lending the
//! bytes it names) move it straight to and from the file, a buffer of it registers,
//! and an address the process cannot touch is -1 with `errno` `EFAULT`, never a crash; with the
//! parameter off it is `-hipFileHipMemoryTypeInvalid`, as upstream hipFile answers.
//!
//! The C ABI has one process-wide driver, so this is a test binary of its own with one test, on
//! the simulated HIP runtime library as `capi_stats.rs` is.
#![cfg(feature = "fallback")]

#[path = "support/capi_handle.rs"]
mod capi_handle;
#[path = "support/no_access_page.rs"]
mod no_access_page;

use std::ffi::c_void;
use std::os::fd::AsRawFd;
use std::ptr;

use hipfile::capi::{
    hipFileBatch, hipFileBatchHandle_t, hipFileBatchIODestroy, hipFileBatchIOGetStatus,
    hipFileBatchIOSetUp, hipFileBatchIOSubmit, hipFileBatchRead, hipFileBufDeregister,
    hipFileBufRegister, hipFileDriverClose, hipFileDriverOpen, hipFileGetParameterBool,
    hipFileHandleDeregister, hipFileHipMemoryTypeInvalid, hipFileIOEvents_t,
    hipFileIOParams_batch_t, hipFileIOParams_t, hipFileIOParams_u,
    hipFileParamPropertiesAllowSystemMemory, hipFileRead, hipFileSetParameterBool, hipFileSuccess,
    hipFileWrite, hipFileWriteAsync,
};
use hipfile_hip::StreamRef;

fn allowed() -> bool {
    let mut value = false;
    // SAFETY: `value` is a live local bool.
    let answer =
        unsafe { hipFileGetParameterBool(hipFileParamPropertiesAllowSystemMemory, &mut value) };
    assert_eq!(answer.err, hipFileSuccess);
    value
}

#[test]
fn the_parameter_admits_host_memory_and_a_bad_address_is_efault() {
    std::env::remove_var("HIPFILE_ALLOW_SYSTEM_MEMORY");
    std::env::remove_var("HIPFILE_BACKENDS");
    let runtime = hipfile_testkit::target::c_abi_runtime().expect("the runtime under test opens");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data");
    let data: Vec<u8> = (0..16384u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();

    assert!(!allowed(), "off by default, as in hipFile");
    assert_eq!(
        hipFileSetParameterBool(hipFileParamPropertiesAllowSystemMemory, true).err,
        hipFileSuccess
    );
    assert!(allowed());
    assert_eq!(hipFileDriverOpen().err, hipFileSuccess);
    let (fh, registered) = capi_handle::register_fd(file.as_raw_fd());
    assert_eq!(registered.err, hipFileSuccess);

    let mut buf = vec![0u8; 8192];
    let base = buf.as_mut_ptr().cast::<c_void>();
    // SAFETY: `base` is `buf`, live host memory that no reference touches during the call
    // (hipfile.h, "Host memory").
    assert_eq!(unsafe { hipFileRead(fh, base, 5000, 3, 0) }, 5000);
    assert_eq!(buf[..5000], data[3..5003]);
    buf[..4].copy_from_slice(b"host");
    // SAFETY: as above; the library only reads `buf`.
    assert_eq!(unsafe { hipFileWrite(fh, base, 4, 100, 0) }, 4);
    // SAFETY: `buf` outlives its registration (deregistered below), and is touched here only
    // between the calls that name it.
    let buf_registered = unsafe { hipFileBufRegister(base, buf.len(), 0) };
    assert_eq!(buf_registered.err, hipFileSuccess);
    // SAFETY: `base` is `buf`, which no reference touches during the call.
    assert_eq!(unsafe { hipFileRead(fh, base, 4096, 8192, 4096) }, 4096);
    assert_eq!(buf[4096..], data[8192..12288]);
    assert_eq!(hipFileBufDeregister(base).err, hipFileSuccess);

    // A batch entry and a stream-ordered op lend the bytes they name, at an interior offset.
    let mut batch: hipFileBatchHandle_t = ptr::null_mut();
    // SAFETY: `batch` and `events` are live locals; the entry names `buf`, which nothing else
    // touches until the entry is reaped.
    unsafe {
        assert_eq!(hipFileBatchIOSetUp(&mut batch, 1).err, hipFileSuccess);
        let mut entry = hipFileIOParams_t {
            mode: hipFileBatch,
            u: hipFileIOParams_u {
                batch: hipFileIOParams_batch_t {
                    devPtr_base: base,
                    file_offset: 12288,
                    devPtr_offset: 512,
                    size: 4096,
                },
            },
            fh,
            opcode: hipFileBatchRead,
            cookie: ptr::null_mut(),
        };
        assert_eq!(
            hipFileBatchIOSubmit(batch, 1, &mut entry, 0).err,
            hipFileSuccess
        );
        let mut events: [hipFileIOEvents_t; 1] = std::mem::zeroed();
        let mut got: u32 = 1;
        assert_eq!(
            hipFileBatchIOGetStatus(batch, 1, &mut got, events.as_mut_ptr(), ptr::null_mut()).err,
            hipFileSuccess
        );
        assert_eq!((got, events[0].ret), (1, 4096));
        hipFileBatchIODestroy(batch);
    }
    assert_eq!(buf[512..4608], data[12288..16384]);
    let (mut size, mut file_offset, mut buffer_offset, mut written) = (8usize, 200, 2, -7);
    // SAFETY: the slots are live locals, read and written only by the op until the null stream
    // is synchronized below; the op names `buf`, which nothing else touches until then.
    unsafe {
        let queued = hipFileWriteAsync(
            fh,
            base,
            &mut size,
            &mut file_offset,
            &mut buffer_offset,
            &mut written,
            ptr::null_mut(),
        );
        assert_eq!(queued.err, hipFileSuccess);
    }
    StreamRef::null(&runtime).synchronize().unwrap();
    assert_eq!(written, 8);

    let page = no_access_page::NoAccessPage::new();
    let bad = page.addr() as *mut c_void;
    // SAFETY: no Rust reference covers the no-access page `bad`: the kernel refuses it (EFAULT)
    // and no byte anywhere moves.
    let answers = unsafe {
        [
            ("read", hipFileRead(fh, bad, 4096, 0, 0)),
            ("write", hipFileWrite(fh, bad, 4096, 0, 0)),
        ]
    };
    for (what, answer) in answers {
        let errno = std::io::Error::last_os_error().raw_os_error();
        assert_eq!((answer, errno), (-1, Some(libc::EFAULT)), "{what}");
    }
    let mut expected = data.clone();
    expected[100..104].copy_from_slice(b"host");
    expected[200..208].copy_from_slice(&buf[2..10]);
    assert_eq!(std::fs::read(&path).unwrap(), expected);

    hipFileHandleDeregister(fh);
    assert_eq!(hipFileDriverClose().err, hipFileSuccess);
    assert_eq!(
        hipFileSetParameterBool(hipFileParamPropertiesAllowSystemMemory, false).err,
        hipFileSuccess
    );
    assert_eq!(hipFileDriverOpen().err, hipFileSuccess);
    let (fh, registered) = capi_handle::register_fd(file.as_raw_fd());
    assert_eq!(registered.err, hipFileSuccess);
    // SAFETY: `base` is `buf`, live and untouched during the calls (which refuse host memory
    // now, so nothing is registered past them).
    unsafe {
        assert_eq!(
            hipFileRead(fh, base, 4096, 0, 0),
            -(hipFileHipMemoryTypeInvalid as isize)
        );
        assert_eq!(
            hipFileBufRegister(base, buf.len(), 0).err,
            hipFileHipMemoryTypeInvalid
        );
    }
    hipFileHandleDeregister(fh);
    assert_eq!(hipFileDriverClose().err, hipFileSuccess);
}
