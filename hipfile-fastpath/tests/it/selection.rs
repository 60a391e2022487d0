//! Which backend a request goes to: every precondition of the fastpath flipped alone sends an
//! otherwise identical request to the fallback (or, with compat mode disallowed, to an error).

use hipfile_core::{EnvConfig, ErrorKind, FsKind, IoOp};
use hipfile_hip::sim::SimConfig;

use crate::support::{env, pattern, Rig, Setup, KIB};

#[test]
fn an_aligned_request_on_the_build_filesystem_goes_to_the_fastpath() {
    let rig = Rig::new();
    let file = rig.registered();
    assert!(
        file.direct_fd().is_some(),
        "the build filesystem has O_DIRECT"
    );
    assert!(
        matches!(
            file.fs().kind,
            FsKind::Ext4 { ordered: true } | FsKind::Xfs | FsKind::BlockDevice
        ),
        "the build filesystem is one the fastpath serves: {:?}",
        file.fs()
    );
    let mut src = rig.device(64 * KIB);
    src.write_at(0, &pattern(64 * KIB, 1)).unwrap();
    assert_eq!(
        rig.served(IoOp::Write, src.ptr(), 64 * KIB, 0, 0).unwrap(),
        (64 * KIB, "fastpath")
    );
    let dst = rig.device(64 * KIB);
    assert_eq!(
        rig.served(IoOp::Read, dst.ptr(), 64 * KIB, 0, 0).unwrap(),
        (64 * KIB, "fastpath")
    );
    assert_eq!(dst.to_vec().unwrap(), pattern(64 * KIB, 1));
}

/// The baseline request of the flips below: 16 KiB at file offset 16 KiB into a device buffer.
fn baseline_goes_to(rig: &Rig, expected: &str) {
    rig.put(&pattern(64 * KIB, 2), 0);
    let dst = rig.device(64 * KIB);
    let (n, by) = rig
        .served(IoOp::Read, dst.ptr(), 16 * KIB, 16 * KIB as i64, 0)
        .unwrap();
    assert_eq!((n, by), (16 * KIB, expected));
    assert_eq!(
        dst.to_vec().unwrap()[..16 * KIB],
        pattern(64 * KIB, 2)[16 * KIB..32 * KIB]
    );
}

#[test]
fn without_a_p2p_driver_the_fallback_serves() {
    baseline_goes_to(&Rig::new(), "fastpath");
    let rig = Rig::with(Setup {
        sim: SimConfig {
            p2p: false,
            ..SimConfig::default()
        },
        ..Setup::default()
    });
    baseline_goes_to(&rig, "fallback");
}

#[test]
fn forced_compat_mode_sends_everything_to_the_fallback() {
    let rig = Rig::with(Setup {
        env: EnvConfig {
            force_compat_mode: Some(true),
            ..env()
        },
        ..Setup::default()
    });
    baseline_goes_to(&rig, "fallback");
    assert_eq!(rig.sim.p2p_faults().calls(), 0);
}

#[test]
fn a_misaligned_file_offset_size_or_address_goes_to_the_fallback() {
    let rig = Rig::new();
    let align = rig.registered().dio_align();
    rig.put(&pattern(64 * KIB, 3), 0);
    let dst = rig.device(64 * KIB);
    let expect = pattern(64 * KIB, 3);
    // (size, file offset, buffer offset) each off the alignment alone.
    let mut cases = Vec::new();
    if align.offset > 1 {
        cases.push((16 * KIB, 16 * KIB + 1, 0));
        cases.push((16 * KIB - 1, 16 * KIB, 0));
    }
    if align.memory > 1 {
        cases.push((16 * KIB, 16 * KIB, 1));
    } else {
        // The offset and size flips still run: the test is not skipped, one of its flips is.
        println!("not flipped: the build filesystem needs no memory alignment for O_DIRECT");
    }
    assert!(
        !cases.is_empty(),
        "alignment {align:?} leaves nothing to flip"
    );
    for (size, foff, boff) in cases {
        let (n, by) = rig
            .served(IoOp::Read, dst.ptr(), size, foff as i64, boff as i64)
            .unwrap();
        assert_eq!((n, by), (size, "fallback"), "{size} at {foff}, +{boff}");
        let got = dst.to_vec().unwrap();
        assert_eq!(got[boff..boff + size], expect[foff..foff + size]);
    }
    baseline_goes_to(&rig, "fastpath");
}

#[test]
fn compat_mode_disallowed_fails_what_the_fastpath_declines_and_serves_the_rest() {
    let rig = Rig::with(Setup {
        env: EnvConfig {
            allow_compat_mode: Some(false),
            ..env()
        },
        ..Setup::default()
    });
    baseline_goes_to(&rig, "fastpath");
    let dst = rig.device(64 * KIB);
    let err = rig
        .io(IoOp::Read, dst.ptr(), 4 * KIB - 1, 0, 0)
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InternalError, "{err}");
    assert!(err.context().contains("compat mode is disallowed"), "{err}");
}

#[test]
fn forcing_compat_mode_wins_over_disallowing_it() {
    let rig = Rig::with(Setup {
        env: EnvConfig {
            allow_compat_mode: Some(false),
            force_compat_mode: Some(true),
            ..env()
        },
        ..Setup::default()
    });
    baseline_goes_to(&rig, "fallback");
}

#[test]
fn an_unsupported_filesystem_is_served_only_when_allowed() {
    // tmpfs takes O_DIRECT on recent kernels and is not a filesystem the fastpath serves.
    let shm = std::path::Path::new("/dev/shm");
    let Ok(dir) = tempfile::tempdir_in(shm) else {
        hipfile_testkit::ledger::skip("no /dev/shm to hold a file on an unsupported filesystem");
        return;
    };
    let probe = Rig::with(Setup {
        dir,
        ..Setup::default()
    });
    let file = probe.registered();
    if file.direct_fd().is_none() || !matches!(file.fs().kind, FsKind::Other(_)) {
        hipfile_testkit::ledger::skip(&format!(
            "/dev/shm is {:?} with{} O_DIRECT",
            file.fs().kind,
            if file.direct_fd().is_some() {
                ""
            } else {
                "out"
            }
        ));
        return;
    }
    baseline_goes_to(&probe, "fallback");
    let allowed = Rig::with(Setup {
        dir: tempfile::tempdir_in(shm).unwrap(),
        env: EnvConfig {
            unsupported_file_systems: Some(true),
            ..env()
        },
        ..Setup::default()
    });
    baseline_goes_to(&allowed, "fastpath");
}

#[test]
fn the_declines_that_the_driver_cannot_produce_are_covered_by_the_verdict() {
    // Core hands backends device memory only, and the build filesystem has O_DIRECT: these two
    // preconditions are flipped on the pure verdict that `accepts` runs.
    let rig = Rig::new();
    let file = rig.registered();
    let env = env();
    let base = hipfile_fastpath::Facts {
        has_p2p_driver: true,
        has_direct_fd: true,
        memory: hipfile_hip::MemoryKind::Device,
        align: file.dio_align(),
        fs: &file.fs().kind,
        file_offset: 0,
        size: 4096,
        device_address: 0x20_0000,
        compat: hipfile_core::CompatMode {
            allowed: true,
            forced: false,
        },
        env: &env,
    };
    assert_eq!(hipfile_fastpath::verdict(&base), Ok(()));
    assert_eq!(
        hipfile_fastpath::verdict(&hipfile_fastpath::Facts {
            has_direct_fd: false,
            ..base
        }),
        Err(hipfile_core::Decline::NoDirectIo)
    );
    assert_eq!(
        hipfile_fastpath::verdict(&hipfile_fastpath::Facts {
            memory: hipfile_hip::MemoryKind::Managed,
            ..base
        }),
        Err(hipfile_core::Decline::NotDeviceMemory)
    );
}

#[test]
fn the_file_verdict_reports_what_check_shows() {
    let rig = Rig::new();
    let file = rig.registered();
    let compat = hipfile_core::CompatMode {
        allowed: true,
        forced: false,
    };
    let env = env();
    assert_eq!(
        hipfile_fastpath::file_verdict(&file, &*rig.gpu, compat, &env),
        Ok(())
    );
    let no_p2p = hipfile_hip::sim::SimRuntime::new(SimConfig {
        p2p: false,
        ..SimConfig::default()
    });
    assert_eq!(
        hipfile_fastpath::file_verdict(&file, &no_p2p, compat, &env),
        Err(hipfile_core::Decline::NoP2pDriver)
    );
    let forced = hipfile_core::CompatMode {
        allowed: true,
        forced: true,
    };
    assert_eq!(
        hipfile_fastpath::file_verdict(&file, &*rig.gpu, forced, &env),
        Err(hipfile_core::Decline::CompatModeForced)
    );
}
