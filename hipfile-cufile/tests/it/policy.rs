//! P2P flags per target and the per-file IO policy through the cuFile names.

use cufile::door::process_driver;
use cufile::*;
use hipfile_core::{P2pMechanism, P2pMechanisms};

use crate::support::{op, Registered, Session, SUCCESS};

fn flags_of(target: i32) -> i32 {
    let mut f = -7;
    // SAFETY: a live enum-sized int.
    assert_eq!(unsafe { cuFileDriverGetP2PFlags(target, &mut f) }, SUCCESS);
    f
}

/// The answers NVIDIA's library gives (cuFile 1.16 on x86-64): nothing set at first, P2PDMA
/// taken per target, every other flag refused, no flag a no-op, and the final close forgets.
#[test]
fn p2p_flags_are_kept_per_target_and_forgotten_at_the_final_close() {
    let _s = Session::start();
    let before = process_driver().p2p_mechanisms();
    let p2pdma = CU_FILE_P2P_FLAG_PCI_P2PDMA;
    let mut f = 0;
    // SAFETY: a live int.
    let closed = unsafe { cuFileDriverGetP2PFlags(CU_FILE_NVME_SUPPORTED, &mut f) };
    assert_eq!(
        closed,
        op(CU_FILE_DRIVER_NOT_INITIALIZED),
        "a closed driver"
    );
    assert_eq!(
        cuFileDriverSetP2PFlags(CU_FILE_NVME_SUPPORTED, p2pdma),
        op(CU_FILE_DRIVER_NOT_INITIALIZED),
        "a closed driver"
    );
    assert_eq!(cuFileDriverOpen(), SUCCESS);
    assert_eq!(flags_of(CU_FILE_NVME_SUPPORTED), 0, "nothing set at first");
    assert_eq!(
        flags_of(CU_FILE_VIRTIOFS_SUPPORTED),
        0,
        "cuFile 1.16's last target"
    );
    // SAFETY: NULL, which must be refused.
    let null = unsafe { cuFileDriverGetP2PFlags(CU_FILE_NVME_SUPPORTED, std::ptr::null_mut()) };
    assert_eq!(null, op(CU_FILE_INVALID_VALUE));
    // SAFETY: a live int.
    let past = unsafe { cuFileDriverGetP2PFlags(CU_FILE_MAX_TARGET_TYPES, &mut f) };
    assert_eq!(past, op(CU_FILE_INVALID_VALUE));
    assert_eq!(
        cuFileDriverSetP2PFlags(CU_FILE_MAX_TARGET_TYPES, p2pdma),
        op(CU_FILE_INVALID_VALUE)
    );
    assert_eq!(
        cuFileDriverSetP2PFlags(-1, p2pdma),
        op(CU_FILE_INVALID_VALUE)
    );
    assert_eq!(
        process_driver().p2p_mechanisms(),
        before,
        "refusals change nothing"
    );
    assert_eq!(
        cuFileDriverSetP2PFlags(CU_FILE_NVME_SUPPORTED, p2pdma),
        SUCCESS
    );
    assert_eq!(flags_of(CU_FILE_NVME_SUPPORTED), 1);
    assert_eq!(
        flags_of(CU_FILE_LUSTRE_SUPPORTED),
        0,
        "each target's flags are its own"
    );
    for bad in [2, 4, 8, 3, 15, 16, -1] {
        assert_eq!(
            cuFileDriverSetP2PFlags(CU_FILE_NVME_SUPPORTED, bad),
            op(CU_FILE_INVALID_VALUE),
            "{bad:#x}"
        );
    }
    assert_eq!(cuFileDriverSetP2PFlags(CU_FILE_NVME_SUPPORTED, 0), SUCCESS);
    assert_eq!(
        flags_of(CU_FILE_NVME_SUPPORTED),
        1,
        "no flag changes nothing"
    );
    // P2PDMA on a block target: nvidia-fs masked, the PCI peer-to-peer mechanisms kept.
    let now = process_driver().p2p_mechanisms();
    assert!(!now.allows(P2pMechanism::NvidiaFs), "{now:?}");
    assert!(
        now.allows(P2pMechanism::AmdKfd) && now.allows(P2pMechanism::Sim),
        "{now:?}"
    );
    // A target the direct path does not serve changes no mechanism.
    assert_eq!(
        cuFileDriverSetP2PFlags(CU_FILE_LUSTRE_SUPPORTED, p2pdma),
        SUCCESS
    );
    assert_eq!(process_driver().p2p_mechanisms(), now);
    assert_eq!(cuFileDriverOpen(), SUCCESS);
    assert_eq!(cuFileDriverClose(), SUCCESS);
    assert_eq!(
        flags_of(CU_FILE_NVME_SUPPORTED),
        1,
        "only the final close forgets"
    );
    assert_eq!(cuFileDriverClose_v2(), SUCCESS);
    assert_eq!(process_driver().p2p_mechanisms(), before);
    assert_eq!(cuFileDriverOpen(), SUCCESS);
    assert_eq!(flags_of(CU_FILE_NVME_SUPPORTED), 0);
    assert_eq!(flags_of(CU_FILE_LUSTRE_SUPPORTED), 0);
    assert_eq!(cuFileDriverClose(), SUCCESS);
    assert_eq!(before, P2pMechanisms::ALL);
}

/// A direct-only file fails closed where the direct path declines (an unaligned read), with
/// no byte moved; the same read falls back under the default policy.
#[test]
fn a_direct_only_file_fails_closed() {
    let s = Session::start();
    let registered = Registered::new(&s, 16 << 10);
    let (base, fh) = (registered.base, registered.fh);
    let mut policy = -1;
    // SAFETY: a live int; NULL where it must be refused.
    unsafe {
        assert_eq!(cuFileHandleGetIoPolicy(fh, &mut policy), SUCCESS);
        assert_eq!(policy, CU_FILE_IO_POLICY_FALLBACK);
        assert_eq!(
            cuFileHandleGetIoPolicy(fh, std::ptr::null_mut()),
            op(CU_FILE_INVALID_VALUE)
        );
    }
    assert_eq!(cuFileHandleSetIoPolicy(fh, 7), op(CU_FILE_INVALID_VALUE));
    assert_eq!(
        cuFileHandleSetIoPolicy(std::ptr::null_mut(), 1),
        op(CU_FILE_INVALID_VALUE)
    );
    assert_eq!(
        cuFileHandleSetIoPolicy(0x7777 as CUfileHandle_t, 1),
        op(5027)
    );
    assert_eq!(
        cuFileHandleSetIoPolicy(fh, CU_FILE_IO_POLICY_DIRECT_ONLY),
        SUCCESS
    );
    // SAFETY: a live int.
    unsafe { cuFileHandleGetIoPolicy(fh, &mut policy) };
    assert_eq!(policy, CU_FILE_IO_POLICY_DIRECT_ONLY);
    assert_eq!(
        // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the
        // call (cufile.h, "Host memory").
        unsafe { cuFileRead(fh, base, 4096, 0, 0) },
        4096,
        "aligned: the direct path"
    );
    assert_eq!(
        // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the
        // call (cufile.h, "Host memory").
        unsafe { cuFileRead(fh, base, 1000, 1, 3) },
        -(CU_FILE_IO_NOT_SUPPORTED as isize),
        "unaligned: no direct path, and no fallback"
    );
    assert_eq!(
        cuFileHandleSetIoPolicy(fh, CU_FILE_IO_POLICY_FALLBACK),
        SUCCESS
    );
    // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the call
    // (cufile.h, "Host memory").
    assert_eq!(unsafe { cuFileRead(fh, base, 1000, 1, 3) }, 1000);
    cuFileHandleDeregister(fh);
}
