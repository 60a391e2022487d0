//! Aligned IO through the fastpath end to end: round trips, many chunks, short transfers, end of
//! file, holes, zero size. Every request here is one the fastpath must serve itself.

use hipfile_core::{IoOp, Settings};

use crate::support::{pattern, Rig, Setup, KIB};

fn small_chunks() -> Rig {
    Rig::with(Setup {
        settings: Settings {
            max_direct_io_size_kb: 4,
            ..Settings::default()
        },
        ..Setup::default()
    })
}

#[test]
fn a_round_trip_through_a_registered_buffer_is_byte_exact() {
    let rig = Rig::new();
    let len = 1024 * KIB + 4 * KIB;
    let mut src = rig.device(len);
    src.write_at(0, &pattern(len, 8)).unwrap();
    rig.driver.buf_register(src.ptr(), len, 0).unwrap();
    assert_eq!(
        rig.served(IoOp::Write, src.ptr(), len, 0, 0).unwrap(),
        (len, "fastpath")
    );
    assert_eq!(rig.get(len, 0), pattern(len, 8));
    let mut dst = rig.device(len + 8 * KIB);
    dst.fill(0xee).unwrap();
    assert_eq!(
        rig.served(
            IoOp::Read,
            dst.ptr(),
            len - 8 * KIB,
            8 * KIB as i64,
            8 * KIB as i64
        )
        .unwrap(),
        (len - 8 * KIB, "fastpath")
    );
    let got = dst.to_vec().unwrap();
    assert_eq!(got[8 * KIB..len], pattern(len, 8)[8 * KIB..]);
    assert!(
        got[..8 * KIB].iter().chain(&got[len..]).all(|&b| b == 0xee),
        "bytes around the target range were written"
    );
}

#[test]
fn large_requests_run_as_many_chunks_of_the_configured_size() {
    let rig = small_chunks();
    let mut src = rig.device(64 * KIB);
    src.write_at(0, &pattern(64 * KIB, 9)).unwrap();
    assert_eq!(
        rig.served(IoOp::Write, src.ptr(), 64 * KIB, 0, 0).unwrap(),
        (64 * KIB, "fastpath")
    );
    assert_eq!(rig.sim.p2p_faults().calls(), 16);
    let dst = rig.device(64 * KIB);
    assert_eq!(
        rig.served(IoOp::Read, dst.ptr(), 64 * KIB, 0, 0).unwrap(),
        (64 * KIB, "fastpath")
    );
    assert_eq!(rig.sim.p2p_faults().calls(), 32);
    assert_eq!(dst.to_vec().unwrap(), pattern(64 * KIB, 9));
}

#[test]
fn short_transfers_are_continued_and_eintr_is_retried() {
    let rig = Rig::new();
    rig.put(&pattern(64 * KIB, 10), 0);
    let dst = rig.device(64 * KIB);
    rig.sim.p2p_faults().short_call(1, 16 * KIB);
    rig.sim.p2p_faults().fail_call(2, libc::EINTR);
    assert_eq!(
        rig.served(IoOp::Read, dst.ptr(), 64 * KIB, 0, 0).unwrap(),
        (64 * KIB, "fastpath")
    );
    assert_eq!(rig.sim.p2p_faults().calls(), 3);
    assert_eq!(dst.to_vec().unwrap(), pattern(64 * KIB, 10));

    let mut src = rig.device(32 * KIB);
    src.write_at(0, &pattern(32 * KIB, 11)).unwrap();
    rig.sim.p2p_faults().short_call(1, 4 * KIB);
    assert_eq!(
        rig.served(IoOp::Write, src.ptr(), 32 * KIB, 0, 0).unwrap(),
        (32 * KIB, "fastpath")
    );
    assert_eq!(rig.get(32 * KIB, 0), pattern(32 * KIB, 11));
}

#[test]
fn reads_stop_at_end_of_file() {
    let rig = Rig::new();
    let size = 12 * KIB + 100;
    rig.put(&pattern(size, 12), 0);
    let dst = rig.device(16 * KIB);
    assert_eq!(
        rig.served(IoOp::Read, dst.ptr(), 16 * KIB, 0, 0).unwrap(),
        (size, "fastpath")
    );
    assert_eq!(dst.to_vec().unwrap()[..size], pattern(size, 12));
    // At or past the end of the file the driver answers 0 itself: no backend is asked.
    assert_eq!(
        rig.served(IoOp::Read, dst.ptr(), 4 * KIB, 16 * KIB as i64, 0)
            .unwrap(),
        (0, "nobody")
    );
    let chunked = small_chunks();
    chunked.put(&pattern(size, 13), 0);
    let mut dst = chunked.device(64 * KIB);
    dst.fill(0xee).unwrap();
    assert_eq!(
        chunked
            .served(IoOp::Read, dst.ptr(), 64 * KIB, 0, 0)
            .unwrap(),
        (size, "fastpath")
    );
    let got = dst.to_vec().unwrap();
    assert_eq!(got[..size], pattern(size, 13));
    // Past the file's last block the buffer keeps what it held; inside that block, after the
    // end of file, a direct read may leave zeros (O_DIRECT moves whole blocks).
    assert!(
        got[size..16 * KIB].iter().all(|&b| b == 0 || b == 0xee),
        "tail of the last block: {:?}",
        &got[size..size + 16]
    );
    assert!(
        got[16 * KIB..].iter().all(|&b| b == 0xee),
        "past the last block"
    );
}

#[test]
fn holes_read_as_zeros() {
    let rig = Rig::new();
    rig.file.set_len(64 * KIB as u64).unwrap();
    rig.put(&pattern(4 * KIB, 14), 32 * KIB as u64);
    let mut dst = rig.device(64 * KIB);
    dst.fill(0xee).unwrap();
    assert_eq!(
        rig.served(IoOp::Read, dst.ptr(), 64 * KIB, 0, 0).unwrap(),
        (64 * KIB, "fastpath")
    );
    let mut expect = vec![0u8; 64 * KIB];
    expect[32 * KIB..36 * KIB].copy_from_slice(&pattern(4 * KIB, 14));
    assert_eq!(dst.to_vec().unwrap(), expect);
}

#[test]
fn zero_size_moves_nothing_and_calls_no_driver() {
    let rig = Rig::new();
    let dst = rig.device(4 * KIB);
    assert_eq!(rig.io(IoOp::Read, dst.ptr(), 0, 0, 0).unwrap(), 0);
    assert_eq!(rig.io(IoOp::Write, dst.ptr(), 0, 0, 0).unwrap(), 0);
    assert_eq!(rig.sim.p2p_faults().calls(), 0);
}
