//! Failover: ENODEV and EREMOTEIO with nothing moved rerun the whole request on the fallback, and
//! the caller sees a complete, byte-exact result; every other failure comes back as is.

use hipfile_core::{ErrorKind, IoOp, Settings};

use crate::support::{pattern, Rig, Setup, KIB};

#[test]
fn enodev_and_eremoteio_on_a_read_fail_over_to_the_fallback() {
    for errno in [libc::ENODEV, libc::EREMOTEIO] {
        let rig = Rig::new();
        rig.put(&pattern(256 * KIB, 4), 0);
        let mut dst = rig.device(256 * KIB);
        dst.fill(0xee).unwrap();
        rig.sim.p2p_faults().fail_call(1, errno);
        let (n, by) = rig.served(IoOp::Read, dst.ptr(), 256 * KIB, 0, 0).unwrap();
        assert_eq!((n, by), (256 * KIB, "fallback"), "errno {errno}");
        assert_eq!(
            dst.to_vec().unwrap(),
            pattern(256 * KIB, 4),
            "errno {errno}"
        );
        assert_eq!(
            rig.sim.p2p_faults().calls(),
            1,
            "one failed DMA, then staging"
        );
    }
}

#[test]
fn enodev_and_eremoteio_on_a_write_fail_over_to_the_fallback() {
    for errno in [libc::ENODEV, libc::EREMOTEIO] {
        let rig = Rig::new();
        let mut src = rig.device(128 * KIB);
        src.write_at(0, &pattern(128 * KIB, 5)).unwrap();
        rig.sim.p2p_faults().fail_call(1, errno);
        let (n, by) = rig
            .served(IoOp::Write, src.ptr(), 128 * KIB, 64 * KIB as i64, 0)
            .unwrap();
        assert_eq!((n, by), (128 * KIB, "fallback"), "errno {errno}");
        assert_eq!(rig.get(128 * KIB, 64 * KIB as u64), pattern(128 * KIB, 5));
        assert_eq!(
            rig.get(64 * KIB, 0),
            vec![0u8; 64 * KIB],
            "the hole before stays"
        );
    }
}

#[test]
fn eio_is_returned_and_the_destination_is_untouched() {
    let rig = Rig::new();
    rig.put(&pattern(64 * KIB, 6), 0);
    let mut dst = rig.device(64 * KIB);
    dst.fill(0xee).unwrap();
    rig.sim.p2p_faults().fail_call(1, libc::EIO);
    let err = rig.io(IoOp::Read, dst.ptr(), 64 * KIB, 0, 0).unwrap_err();
    assert_eq!(
        (err.kind(), err.errno()),
        (ErrorKind::Os, Some(libc::EIO)),
        "{err}"
    );
    assert_eq!(dst.to_vec().unwrap(), vec![0xee; 64 * KIB]);
    assert_eq!(
        rig.sim.p2p_faults().calls(),
        1,
        "no second attempt anywhere"
    );
}

#[test]
fn enodev_after_bytes_moved_is_returned_not_rerun() {
    let rig = Rig::with(Setup {
        settings: Settings {
            max_direct_io_size_kb: 4,
            ..Settings::default()
        },
        ..Setup::default()
    });
    rig.put(&pattern(64 * KIB, 7), 0);
    let dst = rig.device(64 * KIB);
    rig.sim.p2p_faults().fail_call(3, libc::ENODEV);
    let err = rig.io(IoOp::Read, dst.ptr(), 64 * KIB, 0, 0).unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENODEV), "{err}");
    assert_eq!(rig.sim.p2p_faults().calls(), 3);
}

#[test]
fn a_write_failing_with_enospc_is_returned() {
    let rig = Rig::new();
    let src = rig.device(16 * KIB);
    rig.sim.p2p_faults().fail_call(1, libc::ENOSPC);
    let err = rig.io(IoOp::Write, src.ptr(), 16 * KIB, 0, 0).unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENOSPC), "{err}");
    assert_eq!(
        rig.get(16 * KIB, 0),
        Vec::<u8>::new(),
        "nothing was written"
    );
}
