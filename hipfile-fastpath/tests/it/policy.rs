//! The per-handle IO policy and the driver-wide mask of direct mechanisms: a direct-only handle
//! gets the direct path or `IoNotSupported` with no byte moved, a fall-back handle the staged
//! engine where the fastpath declines; a mask without the sim's mechanism makes the fastpath
//! decline.

use std::time::Duration;

use hipfile_core::{
    BatchEntry, BatchStatus, DeclineReason, ErrorKind, IoCall, IoOp, IoPolicy, P2pMechanism,
    P2pMechanisms,
};

use crate::support::{pattern, Rig, KIB};

fn refused(rig: &Rig) -> u64 {
    rig.driver
        .session()
        .unwrap()
        .stats_snapshot()
        .refused_by_policy
}

#[test]
fn a_direct_only_handle_refuses_what_the_fastpath_declines_and_moves_nothing() {
    let rig = Rig::new();
    rig.put(&pattern(64 * KIB, 1), 0);
    assert_eq!(
        rig.driver.handle_policy(rig.handle).unwrap(),
        IoPolicy::Fallback
    );
    rig.driver
        .handle_set_policy(rig.handle, IoPolicy::DirectOnly)
        .unwrap();
    assert_eq!(
        rig.driver.handle_policy(rig.handle).unwrap(),
        IoPolicy::DirectOnly
    );
    let mut dst = rig.device(64 * KIB);
    dst.fill(0xee).unwrap();
    // 1000 bytes: off the file's direct IO alignment.
    let e = rig.io(IoOp::Read, dst.ptr(), 1000, 4096, 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::IoNotSupported, "{e}");
    assert!(
        e.context()
            .contains("fastpath: offset, size or address not aligned"),
        "{e}"
    );
    assert!(
        e.context().contains("fallback: staged path, not allowed"),
        "{e}"
    );
    assert_eq!(
        dst.to_vec().unwrap(),
        vec![0xee; 64 * KIB],
        "nothing was read"
    );
    assert_eq!(rig.sim.p2p_faults().calls(), 0);
    assert_eq!(refused(&rig), 1);

    let mut src = rig.device(4 * KIB);
    src.write_at(0, &pattern(4 * KIB, 9)).unwrap();
    let e = rig.io(IoOp::Write, src.ptr(), 1000, 512, 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::IoNotSupported, "{e}");
    assert_eq!(
        rig.get(64 * KIB, 0),
        pattern(64 * KIB, 1),
        "nothing was written"
    );
    assert_eq!(refused(&rig), 2);

    // Falling back, the same request runs on the staged engine.
    rig.driver
        .handle_set_policy(rig.handle, IoPolicy::Fallback)
        .unwrap();
    assert_eq!(
        rig.served(IoOp::Read, dst.ptr(), 1000, 4096, 0).unwrap(),
        (1000, "fallback")
    );
    assert_eq!(
        dst.to_vec().unwrap()[..1000],
        pattern(64 * KIB, 1)[4096..5096]
    );
    assert_eq!(refused(&rig), 2);
}

#[test]
fn a_direct_only_handle_runs_what_the_fastpath_accepts() {
    let rig = Rig::new();
    rig.put(&pattern(64 * KIB, 2), 0);
    rig.driver
        .handle_set_policy(rig.handle, IoPolicy::DirectOnly)
        .unwrap();
    let dst = rig.device(64 * KIB);
    assert_eq!(
        rig.served(IoOp::Read, dst.ptr(), 64 * KIB, 0, 0).unwrap(),
        (64 * KIB, "fastpath")
    );
    assert_eq!(dst.to_vec().unwrap(), pattern(64 * KIB, 2));
    assert_eq!(refused(&rig), 0);
}

#[test]
fn a_direct_only_handle_does_not_fail_over_to_the_staged_engine() {
    let rig = Rig::new();
    rig.put(&pattern(64 * KIB, 3), 0);
    rig.driver
        .handle_set_policy(rig.handle, IoPolicy::DirectOnly)
        .unwrap();
    let mut dst = rig.device(64 * KIB);
    dst.fill(0xee).unwrap();
    rig.sim.p2p_faults().fail_call(1, libc::ENODEV);
    let e = rig.io(IoOp::Read, dst.ptr(), 64 * KIB, 0, 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::IoNotSupported, "{e}");
    assert!(e.context().contains("fastpath: failed over after"), "{e}");
    assert_eq!(dst.to_vec().unwrap(), vec![0xee; 64 * KIB]);
    let snap = rig.driver.session().unwrap().stats_snapshot();
    assert_eq!(snap.backend("fallback").unwrap().ops, 0);
    assert_eq!(snap.refused_by_policy, 1);
}

#[test]
fn the_policy_is_set_at_registration_or_taken_from_the_settings() {
    let rig = Rig::new();
    let dir = tempfile::tempdir().unwrap();
    let other = crate::support::open_rw(&dir.path().join("other"));
    let fd = std::os::fd::AsRawFd::as_raw_fd(&other);
    let handle = rig
        .driver
        .handle_register_with_policy(fd, Some(IoPolicy::DirectOnly))
        .unwrap();
    assert_eq!(
        rig.driver.handle_policy(handle).unwrap(),
        IoPolicy::DirectOnly
    );
    rig.driver.handle_deregister(handle).unwrap();
    assert_eq!(
        rig.driver.handle_policy(handle).unwrap_err().kind(),
        ErrorKind::HandleNotRegistered
    );
    assert_eq!(
        rig.driver
            .handle_set_policy(handle, IoPolicy::Fallback)
            .unwrap_err()
            .kind(),
        ErrorKind::HandleNotRegistered
    );
    rig.driver
        .update_live_settings(|s| s.default_io_policy = IoPolicy::DirectOnly)
        .unwrap();
    let handle = rig.driver.handle_register(fd).unwrap();
    assert_eq!(
        rig.driver.handle_policy(handle).unwrap(),
        IoPolicy::DirectOnly
    );
}

#[test]
fn a_mask_without_the_sims_mechanism_makes_the_fastpath_decline() {
    let rig = Rig::new();
    rig.put(&pattern(64 * KIB, 4), 0);
    let dst = rig.device(64 * KIB);
    assert_eq!(rig.driver.p2p_mechanisms(), P2pMechanisms::ALL);
    rig.driver.set_p2p_mechanisms(P2pMechanisms::of(&[
        P2pMechanism::AmdKfd,
        P2pMechanism::NvidiaFs,
    ]));
    assert!(!rig.driver.p2p_mechanisms().allows(P2pMechanism::Sim));
    assert_eq!(
        rig.served(IoOp::Read, dst.ptr(), 64 * KIB, 0, 0).unwrap(),
        (64 * KIB, "fallback")
    );
    assert_eq!(dst.to_vec().unwrap(), pattern(64 * KIB, 4));
    let snap = rig.driver.session().unwrap().stats_snapshot();
    assert_eq!(
        snap.backend("fastpath")
            .unwrap()
            .declined(DeclineReason::P2pMechanismMasked),
        1
    );
    assert_eq!(snap.p2p_mechanisms, ["amd_kfd", "nvidia_fs"]);
    assert_eq!(rig.sim.p2p_faults().calls(), 0);

    // Direct only, the masked mechanism is an error naming the mask.
    rig.driver
        .handle_set_policy(rig.handle, IoPolicy::DirectOnly)
        .unwrap();
    let e = rig.io(IoOp::Read, dst.ptr(), 64 * KIB, 0, 0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::IoNotSupported, "{e}");
    assert!(
        e.context()
            .contains("fastpath: the P2P driver sim is not an allowed direct mechanism"),
        "{e}"
    );

    // Allowed again, the sim's driver serves.
    rig.driver.set_p2p_mechanisms(P2pMechanisms::ALL);
    assert_eq!(
        rig.served(IoOp::Read, dst.ptr(), 64 * KIB, 0, 0).unwrap(),
        (64 * KIB, "fastpath")
    );
}

#[test]
fn a_mask_set_while_closed_holds_from_the_next_open() {
    let rig = Rig::new();
    rig.driver.close().unwrap();
    rig.driver.set_p2p_mechanisms(P2pMechanisms::NONE);
    rig.driver.open().unwrap();
    assert_eq!(rig.driver.p2p_mechanisms(), P2pMechanisms::NONE);
    let dir = tempfile::tempdir().unwrap();
    let file = crate::support::open_rw(&dir.path().join("reopened"));
    let handle = rig
        .driver
        .handle_register_with_policy(
            std::os::fd::AsRawFd::as_raw_fd(&file),
            Some(IoPolicy::DirectOnly),
        )
        .unwrap();
    let dst = rig.device(4 * KIB);
    let e = rig
        .driver
        .io(IoCall {
            op: IoOp::Read,
            handle,
            buffer: dst.ptr(),
            size: 4 * KIB,
            file_offset: 0,
            buffer_offset: 0,
        })
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::IoNotSupported, "{e}");
    assert!(
        e.context().contains("not an allowed direct mechanism"),
        "{e}"
    );
}

#[test]
fn batch_entries_honour_the_handles_policy() {
    let rig = Rig::new();
    rig.put(&pattern(64 * KIB, 5), 0);
    rig.driver
        .handle_set_policy(rig.handle, IoPolicy::DirectOnly)
        .unwrap();
    let mut dst = rig.device(64 * KIB);
    dst.fill(0xee).unwrap();
    let entry = |size, file_offset, buffer_offset, cookie| BatchEntry {
        call: IoCall {
            op: IoOp::Read,
            handle: rig.handle,
            buffer: dst.ptr(),
            size,
            file_offset,
            buffer_offset,
        },
        cookie,
    };
    let batch = rig.driver.batch_setup(4).unwrap();
    rig.driver
        .batch_submit(
            batch,
            &[entry(1000, 0, 0, 1), entry(32 * KIB, 0, 32 * KIB as i64, 2)],
        )
        .unwrap();
    let mut events = rig
        .driver
        .batch_status(batch, 2, 2, Some(Duration::from_secs(10)))
        .unwrap();
    events.sort_by_key(|e| e.cookie);
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].status, BatchStatus::Failed);
    assert_eq!(
        events[0].result.as_ref().unwrap_err().kind(),
        ErrorKind::IoNotSupported
    );
    assert_eq!(events[1].status, BatchStatus::Complete);
    assert_eq!(*events[1].result.as_ref().unwrap(), 32 * KIB);
    let got = dst.to_vec().unwrap();
    assert_eq!(
        got[..32 * KIB],
        vec![0xee; 32 * KIB],
        "the refused entry moved nothing"
    );
    assert_eq!(got[32 * KIB..], pattern(64 * KIB, 5)[..32 * KIB]);
    let snap = rig.driver.session().unwrap().stats_snapshot();
    assert_eq!(snap.backend("fallback").unwrap().ops, 0);
    assert_eq!(snap.refused_by_policy, 1);
    rig.driver.batch_destroy(batch).unwrap();
}
