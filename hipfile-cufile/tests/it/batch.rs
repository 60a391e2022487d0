//! Batch IO through the cuFile names: events carry bytes or cuFile's negative codes.

use std::ffi::c_void;
use std::os::fd::AsRawFd;
use std::ptr;

use cufile::*;
use hipfile::capi::{hipFileIOParams_batch_t, hipFileIOParams_u};

use crate::support::{op, pattern, register, Registered, Session, SUCCESS};

fn entry(
    fh: CUfileHandle_t,
    base: *mut c_void,
    offset: i64,
    size: usize,
    cookie: usize,
) -> CUfileIOParams_t {
    CUfileIOParams_t {
        mode: CUFILE_BATCH,
        u: hipFileIOParams_u {
            batch: hipFileIOParams_batch_t {
                devPtr_base: base,
                file_offset: offset,
                devPtr_offset: offset,
                size,
            },
        },
        fh,
        opcode: CUFILE_READ,
        cookie: cookie as *mut c_void,
    }
}

#[test]
fn a_batch_reads_and_reports_each_entry() {
    let s = Session::start();
    const LEN: usize = 16 << 10;
    let registered = Registered::new(&s, LEN);
    let (buffer, base, fh) = (&registered.buffer, registered.base, registered.fh);
    // A file open for writing only: reading it fails in the OS, entry by entry.
    let write_only = std::fs::OpenOptions::new()
        .write(true)
        .open(registered.dir.path().join("data"))
        .unwrap();
    let (wfh, answer) = register(write_only.as_raw_fd(), CU_FILE_HANDLE_TYPE_OPAQUE_FD);
    assert_eq!(answer, SUCCESS);
    let mut batch: CUfileBatchHandle_t = ptr::null_mut();
    // SAFETY: live locals; entries name the registered file and the live buffer.
    unsafe {
        assert_eq!(cuFileBatchIOSetUp(&mut batch, 3), SUCCESS);
        let mut params = [
            entry(fh, base, 0, 8192, 1),
            entry(fh, base, 8192, 8192, 2),
            // Reading a write-only file: this entry fails alone.
            entry(wfh, base, 0, 4096, 3),
        ];
        assert_eq!(
            cuFileBatchIOSubmit(batch, 3, params.as_mut_ptr(), 0),
            SUCCESS
        );
        let mut events = [CUfileIOEvents_t {
            cookie: ptr::null_mut(),
            status: 0,
            ret: 0,
        }; 3];
        let mut got = 0;
        while got < 3 {
            let mut nr = 3 - got;
            let status = cuFileBatchIOGetStatus(
                batch,
                1,
                &mut nr,
                events[got as usize..].as_mut_ptr(),
                ptr::null_mut(),
            );
            assert_eq!(status, SUCCESS);
            got += nr;
        }
        events.sort_by_key(|e| e.cookie as usize);
        assert_eq!((events[0].status, events[0].ret), (CUFILE_COMPLETE, 8192));
        assert_eq!((events[1].status, events[1].ret), (CUFILE_COMPLETE, 8192));
        assert_eq!(events[2].status, CUFILE_FAILED);
        assert_eq!(
            events[2].ret as isize,
            -(libc::EBADF as isize),
            "-errno in size_t"
        );
        // More entries than the batch holds.
        assert_eq!(
            cuFileBatchIOSubmit(batch, 4, params.as_mut_ptr(), 0),
            op(5037)
        );
        assert_eq!(cuFileBatchIOCancel(batch), SUCCESS);
        cuFileBatchIODestroy(batch);
        assert_eq!(
            cuFileBatchIOSetUp(ptr::null_mut(), 3),
            op(CU_FILE_INVALID_VALUE)
        );
    }
    let read = buffer.to_vec().unwrap();
    assert!(read.iter().enumerate().all(|(i, b)| *b == pattern(i)));
    cuFileHandleDeregister(fh);
    cuFileHandleDeregister(wfh);
}
