//! Registration and synchronous IO, and cuFile's answers to bad input.

use std::ffi::c_void;
use std::os::fd::AsRawFd;
use std::ptr;

use cufile::*;
use hipfile_hip::DeviceBuffer;

use crate::support::{op, pattern, register, scratch_file, Session, SUCCESS};

const LEN: usize = 64 << 10;

#[test]
fn a_registered_file_and_buffer_round_trip() {
    let s = Session::start();
    let (_dir, file) = scratch_file(LEN);
    let mut buffer = DeviceBuffer::new(s.runtime.clone(), LEN).unwrap();
    let base = buffer.ptr() as *mut c_void;
    // Implicit open: registration opens the driver.
    let (fh, answer) = register(file.as_raw_fd(), CU_FILE_HANDLE_TYPE_OPAQUE_FD);
    assert_eq!(answer, SUCCESS);
    assert_eq!(cuFileUseCount(), 1);
    // SAFETY: `base` is `buffer`'s live device memory, deregistered before `buffer` is freed
    // (cufile.h, "Host memory").
    assert_eq!(unsafe { cuFileBufRegister(base, LEN, 0) }, SUCCESS);
    // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the call
    // (cufile.h, "Host memory").
    assert_eq!(unsafe { cuFileRead(fh, base, LEN, 0, 0) }, LEN as isize);
    let read = buffer.to_vec().unwrap();
    assert!(read.iter().enumerate().all(|(i, b)| *b == pattern(i)));
    // Write the second half back over the first at an offset.
    buffer.fill(0x5a).unwrap();
    // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the call
    // (cufile.h, "Host memory").
    assert_eq!(unsafe { cuFileWrite(fh, base, 4096, 8192, 4096) }, 4096);
    let mut back = vec![0u8; 4096];
    use std::os::unix::fs::FileExt;
    file.read_exact_at(&mut back, 8192).unwrap();
    assert_eq!(back, vec![0x5a; 4096]);
    assert_eq!(
        // SAFETY: `base` is `buffer`'s live device memory, deregistered before `buffer` is freed
        // (cufile.h, "Host memory").
        unsafe { cuFileBufRegister(base, LEN, 0) },
        op(5023),
        "already registered"
    );
    assert_eq!(cuFileBufDeregister(base), SUCCESS);
    assert_eq!(cuFileBufDeregister(base), op(5024), "not registered");
    cuFileHandleDeregister(fh);
    // The handle is gone: IO on it is cuFile's -CU_FILE_HANDLE_NOT_REGISTERED... or EBADF.
    // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the call
    // (cufile.h, "Host memory").
    let after = unsafe { cuFileRead(fh, base, 4096, 0, 0) };
    assert!(after == -5027 || after == -1, "{after}");
}

#[test]
fn descriptor_types_get_cufiles_codes() {
    let _s = Session::start();
    let (_dir, file) = scratch_file(4096);
    let fd = file.as_raw_fd();
    assert_eq!(
        register(fd, CU_FILE_HANDLE_TYPE_OPAQUE_WIN32).1,
        op(CU_FILE_IO_NOT_SUPPORTED)
    );
    assert_eq!(register(fd, 0).1, op(CU_FILE_INVALID_VALUE));
    assert_eq!(register(fd, 7).1, op(CU_FILE_INVALID_VALUE));
    // A refused type opens nothing.
    assert_eq!(cuFileUseCount(), 0);
    // A userspace filesystem registers the descriptor in `handle.fd`, as NVIDIA's library does.
    let (fh, answer) = register(fd, CU_FILE_HANDLE_TYPE_USERSPACE_FS);
    assert_eq!(answer, SUCCESS);
    cuFileHandleDeregister(fh);
    // NULL pointers.
    let mut fh: CUfileHandle_t = ptr::null_mut();
    // SAFETY: NULL descriptor and NULL handle slot, which must be refused.
    unsafe {
        assert_eq!(
            cuFileHandleRegister(&mut fh, ptr::null_mut()),
            op(CU_FILE_INVALID_VALUE)
        );
        let mut descr = CUfileDescr_t {
            type_: CU_FILE_HANDLE_TYPE_OPAQUE_FD,
            handle: hipfile::capi::hipFileDescr_handle_t { fd },
            fs_ops: ptr::null(),
        };
        assert_eq!(
            cuFileHandleRegister(ptr::null_mut(), &mut descr),
            op(CU_FILE_INVALID_VALUE)
        );
    }
    // A closed descriptor: the OS says EBADF, the pair convention has no errno.
    assert_ne!(register(-1, CU_FILE_HANDLE_TYPE_OPAQUE_FD).1, SUCCESS);
}

#[test]
fn io_results_are_bytes_errno_or_negative_codes() {
    let s = Session::start();
    let (_dir, file) = scratch_file(LEN);
    let buffer = DeviceBuffer::new(s.runtime.clone(), LEN).unwrap();
    let base = buffer.ptr() as *mut c_void;
    // IO on a closed driver is -1 with EINVAL, as cuFile.
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the call
    // (cufile.h, "Host memory").
    assert_eq!(unsafe { cuFileRead(ptr::null_mut(), base, 4096, 0, 0) }, -1);
    // SAFETY: as above.
    assert_eq!(unsafe { *libc::__errno_location() }, libc::EINVAL);
    let (fh, answer) = register(file.as_raw_fd(), CU_FILE_HANDLE_TYPE_OPAQUE_FD);
    assert_eq!(answer, SUCCESS);
    // A negative file offset is what pread(2) says of it: -1 with EINVAL.
    // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the call
    // (cufile.h, "Host memory").
    assert_eq!(unsafe { cuFileRead(fh, base, 4096, -4096, 0) }, -1);
    // SAFETY: the calling thread's errno slot.
    assert_eq!(unsafe { *libc::__errno_location() }, libc::EINVAL);
    // Past the end of an unregistered allocation: an invalid value, negated (hipFile's answer
    // too).
    assert_eq!(
        // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the
        // call (cufile.h, "Host memory").
        unsafe { cuFileRead(fh, base, 2 * LEN, 0, 0) },
        -(CU_FILE_INVALID_VALUE as isize)
    );
    // An unknown handle.
    assert_eq!(
        // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the
        // call (cufile.h, "Host memory").
        unsafe { cuFileRead(0x7777 as CUfileHandle_t, base, 4096, 0, 0) },
        -5027
    );
    cuFileHandleDeregister(fh);
}

/// A GPU runtime failure: the pair carries `CU_FILE_CUDA_DRIVER_ERROR` and the runtime's code;
/// an IO result has room for `-CU_FILE_CUDA_DRIVER_ERROR` only.
#[test]
fn gpu_failures_are_cuda_driver_errors() {
    use hipfile::capi::{pair, ssize, StatusPair};
    use hipfile_hip::{HipError, HipErrorCode};
    let gpu = hipfile_core::Error::hip(&HipError::call("cudaMemcpy", HipErrorCode(700)), "copy");
    assert_eq!(
        pair::<CUfileError_t>(&gpu),
        CUfileError_t {
            err: CU_FILE_CUDA_DRIVER_ERROR,
            cu_err: 700
        }
    );
    assert_eq!(ssize::<CuFile>(Err(gpu)), -5011);
    assert_eq!(CUfileError_t::gpu(1).err, 5011);
    // hipFile's door keeps the runtime's number in its IO result.
    assert_eq!(
        ssize::<hipfile::capi::HipFile>(Err(hipfile_core::Error::hip(
            &HipError::call("hipMemcpy", HipErrorCode(700)),
            "copy"
        ))),
        -700
    );
}

/// torch.cuda.gds's sequence: no explicit open; a file opened for writing only is registered,
/// a registered buffer written to it; the file opened for reading is registered and read back.
#[test]
fn torch_gds_calls_work_without_an_explicit_open() {
    let s = Session::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tensor");
    let mut buffer = DeviceBuffer::new(s.runtime.clone(), 8192).unwrap();
    let pattern_bytes: Vec<u8> = (0..8192).map(pattern).collect();
    buffer.write_at(0, &pattern_bytes).unwrap();
    let base = buffer.ptr() as *mut c_void;
    let writer = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    let (wfh, answer) = register(writer.as_raw_fd(), CU_FILE_HANDLE_TYPE_OPAQUE_FD);
    assert_eq!(answer, SUCCESS);
    // SAFETY: `base` is `buffer`'s live device memory, deregistered before `buffer` is freed
    // (cufile.h, "Host memory").
    assert_eq!(unsafe { cuFileBufRegister(base, 8192, 0) }, SUCCESS);
    // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the call
    // (cufile.h, "Host memory").
    assert_eq!(unsafe { cuFileWrite(wfh, base, 8192, 0, 0) }, 8192);
    cuFileHandleDeregister(wfh);
    buffer.fill(0).unwrap();
    let reader = std::fs::File::open(&path).unwrap();
    let (rfh, answer) = register(reader.as_raw_fd(), CU_FILE_HANDLE_TYPE_OPAQUE_FD);
    assert_eq!(answer, SUCCESS);
    // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the call
    // (cufile.h, "Host memory").
    assert_eq!(unsafe { cuFileRead(rfh, base, 8192, 0, 0) }, 8192);
    assert_eq!(buffer.to_vec().unwrap(), pattern_bytes);
    assert_eq!(cuFileBufDeregister(base), SUCCESS);
    cuFileHandleDeregister(rfh);
}

/// cuFile's clients read and write whole objects in one call (torch.cuda.gds loads a storage
/// with one `cuFileRead`), so the cuFile door moves a request's whole size in calls of at most
/// `MAX_RW_COUNT` bytes where hipFile, as `pread(2)`, stops at one. Shown with pieces of 8 KiB:
/// every piece lands where it belongs, a short read at the end of the file ends the request,
/// and a failure is the request's answer even after pieces moved.
#[test]
fn the_cufile_door_moves_a_request_larger_than_one_call_whole() {
    use hipfile::capi::{io_in_calls, Door, HipFile};
    use hipfile_core::{IoOp, MAX_RW_COUNT};
    const { assert!(cufile::door::CuFile::WHOLE_REQUESTS && !HipFile::WHOLE_REQUESTS) };
    assert_eq!(
        MAX_RW_COUNT % 4096,
        0,
        "pieces keep the first one's alignment"
    );

    let s = Session::start();
    let len = 64 << 10;
    let mut r = crate::support::Registered::new(&s, len);
    let (fh, base) = (r.fh, r.base as usize);
    let piece = 8192;
    // SAFETY: `base` is the registered device buffer's live memory, which nothing else touches
    // during the calls (cufile.h, "Host memory").
    let read = |size, file_offset, buffer_offset| unsafe {
        io_in_calls::<cufile::door::CuFile>(
            IoOp::Read,
            fh,
            base,
            size,
            file_offset,
            buffer_offset,
            piece,
        )
    };
    assert_eq!(read(len - 100, 100, 0), (len - 100) as isize);
    let got = r.buffer.to_vec().unwrap();
    assert!(got[..len - 100]
        .iter()
        .enumerate()
        .all(|(i, b)| *b == pattern(i + 100)));
    // Past the end of the file: the pieces stop at the first short read.
    assert_eq!(read(len, len as i64 - 5000, 0), 5000);
    // A piece the driver refuses (from 12 KiB into the 64 KiB buffer, the seventh piece runs
    // past its end) fails the request, though six pieces moved.
    assert_eq!(
        read(len, 0, 4096 * 3),
        -(CU_FILE_INVALID_VALUE as isize),
        "a failure after pieces moved is the request's answer"
    );

    r.buffer.fill(0x33).unwrap();
    // SAFETY: as above.
    let wrote = unsafe {
        io_in_calls::<cufile::door::CuFile>(IoOp::Write, fh, base, 3 * piece + 10, 0, 0, piece)
    };
    assert_eq!(wrote, (3 * piece + 10) as isize);
    let on_disk = std::fs::read(r.dir.path().join("data")).unwrap();
    assert!(on_disk[..3 * piece + 10].iter().all(|b| *b == 0x33));
    assert_eq!(on_disk[3 * piece + 10], pattern(3 * piece + 10));
}
