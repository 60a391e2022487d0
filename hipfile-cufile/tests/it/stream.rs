//! Stream-ordered IO and stream registration through the cuFile names.

use std::ptr;

use cufile::*;
use hipfile_hip::StreamHandle;

use crate::support::{op, pattern, Registered, Session, SUCCESS};

#[test]
fn an_async_read_lands_and_reports_its_bytes() {
    let s = Session::start();
    const LEN: usize = 16 << 10;
    let registered = Registered::new(&s, LEN);
    let (buffer, base, fh) = (&registered.buffer, registered.base, registered.fh);
    let (mut size, mut file_offset, mut buffer_offset, mut bytes) = (LEN, 0i64, 0i64, -7isize);
    // SAFETY: the slots outlive the op (the stream is synchronized before they go); the null
    // stream is the runtime's.
    unsafe {
        let answer = cuFileReadAsync(
            fh,
            base,
            &mut size,
            &mut file_offset,
            &mut buffer_offset,
            &mut bytes,
            ptr::null_mut(),
        );
        assert_eq!(answer, SUCCESS);
        s.runtime
            .stream_synchronize(StreamHandle::from_raw(0))
            .unwrap();
    }
    assert_eq!(bytes, LEN as isize);
    let read = buffer.to_vec().unwrap();
    assert!(read.iter().enumerate().all(|(i, b)| *b == pattern(i)));
    // A missing slot is an invalid value.
    // SAFETY: NULL slots, refused before anything is queued.
    let null = unsafe {
        cuFileReadAsync(
            fh,
            base,
            ptr::null_mut(),
            &mut file_offset,
            &mut buffer_offset,
            &mut bytes,
            ptr::null_mut(),
        )
    };
    assert_eq!(null, op(CU_FILE_INVALID_VALUE));
    cuFileHandleDeregister(fh);
}

#[test]
fn stream_flags_and_unknown_streams() {
    let _s = Session::start();
    assert_eq!(cuFileDriverOpen(), SUCCESS);
    let stream = ptr::null_mut();
    let flags = CU_FILE_STREAM_FIXED_BUF_OFFSET | CU_FILE_STREAM_PAGE_ALIGNED_INPUTS;
    // SAFETY: the null stream is the runtime's; a made-up handle is what must be refused.
    unsafe {
        assert_eq!(
            cuFileStreamRegister(stream, 0x10),
            op(CU_FILE_INVALID_VALUE)
        );
        assert_eq!(cuFileStreamRegister(stream, flags), SUCCESS);
        assert_eq!(cuFileStreamDeregister(stream), SUCCESS);
        let unknown = cuFileStreamRegister(0xdead0 as CUstream, 0);
        assert_eq!(unknown.err, CU_FILE_CUDA_DRIVER_ERROR);
        assert_ne!(unknown.cu_err, 0, "the runtime's error rides in cu_err");
    }
}
