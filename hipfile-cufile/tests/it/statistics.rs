//! Statistics through the cuFile names: the level, reads of a known workload, reset, stop and
//! start.

use cufile::*;

use crate::support::{op, Registered, Session, SUCCESS};

fn level1() -> CUfileStatsLevel1_t {
    let mut stats = CUfileStatsLevel1_t::default();
    // SAFETY: a live struct of the right type.
    assert_eq!(unsafe { cuFileGetStatsL1(&mut stats) }, SUCCESS);
    stats
}

#[test]
fn levels_reads_reset_stop_and_start() {
    let s = Session::start();
    let mut level = -1;
    // SAFETY: live locals; NULL where it must be refused.
    unsafe {
        assert_eq!(cuFileSetStatsLevel(4), op(CU_FILE_INVALID_VALUE));
        assert_eq!(cuFileSetStatsLevel(-1), op(CU_FILE_INVALID_VALUE));
        assert_eq!(cuFileSetStatsLevel(3), SUCCESS);
        assert_eq!(cuFileGetStatsLevel(&mut level), SUCCESS);
        assert_eq!(
            cuFileGetStatsLevel(std::ptr::null_mut()),
            op(CU_FILE_INVALID_VALUE)
        );
        let mut l1 = CUfileStatsLevel1_t::default();
        assert_eq!(
            cuFileGetStatsL1(&mut l1),
            op(CU_FILE_DRIVER_NOT_INITIALIZED)
        );
    }
    assert_eq!(level, 3);
    assert_eq!(cuFileStatsReset(), op(CU_FILE_DRIVER_NOT_INITIALIZED));

    const LEN: usize = 16 << 10;
    let registered = Registered::new(&s, LEN);
    let (base, fh) = (registered.base, registered.fh);
    for _ in 0..3 {
        // SAFETY: `base` is the registered device buffer's live memory, which nothing else
        // touches during the call (cufile.h, "Host memory").
        assert_eq!(unsafe { cuFileRead(fh, base, 4096, 0, 0) }, 4096);
    }
    let l1 = level1();
    assert_eq!((l1.read_ops.ok, l1.read_bytes), (3, 3 * 4096));
    assert_eq!(l1.hdl_register_ops.ok, 1);
    let mut l3 = Box::<CUfileStatsLevel3_t>::default();
    // SAFETY: a live struct of the right type.
    assert_eq!(unsafe { cuFileGetStatsL3(&mut *l3) }, SUCCESS);
    assert_eq!(l3.detailed.basic.read_ops.ok, 3);
    assert_eq!(l3.detailed.read_size_kb_hist.iter().sum::<u64>(), 3);
    assert_eq!(l3.num_gpus, 1);

    // Reset: counts start again from zero.
    assert_eq!(cuFileStatsReset(), SUCCESS);
    assert_eq!(level1().read_ops.ok, 0);
    // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the call
    // (cufile.h, "Host memory").
    assert_eq!(unsafe { cuFileRead(fh, base, 4096, 0, 0) }, 4096);
    assert_eq!(level1().read_ops.ok, 1);
    // Stop: reads keep answering the counters of the stop.
    assert_eq!(cuFileStatsStop(), SUCCESS);
    // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the call
    // (cufile.h, "Host memory").
    assert_eq!(unsafe { cuFileRead(fh, base, 4096, 0, 0) }, 4096);
    assert_eq!(level1().read_ops.ok, 1);
    // Start: live again (the core counted on).
    assert_eq!(cuFileStatsStart(), SUCCESS);
    assert_eq!(level1().read_ops.ok, 2);
    cuFileHandleDeregister(fh);
    // A new opening starts afresh: no reset or stop carries over.
    assert_eq!(cuFileDriverClose(), SUCCESS);
    assert_eq!(cuFileDriverOpen(), SUCCESS);
    assert_eq!(level1().read_ops.ok, 0);
    assert_eq!(cuFileSetStatsLevel(0), SUCCESS);
}

/// cuda.bindings' order: open, then set the level, start, and read the counters of the IO that
/// follows.
#[test]
fn a_level_set_on_the_open_driver_counts_from_then_on() {
    let s = Session::start();
    assert_eq!(cuFileSetStatsLevel(0), SUCCESS);
    assert_eq!(cuFileDriverOpen(), SUCCESS);
    let registered = Registered::new(&s, 8192);
    let (base, fh) = (registered.base, registered.fh);
    // SAFETY: `base` is the registered device buffer's live memory, which nothing else touches
    // during the call (cufile.h, "Host memory").
    assert_eq!(unsafe { cuFileRead(fh, base, 4096, 0, 0) }, 4096);
    assert_eq!(level1().read_ops.ok, 0, "level 0 counts nothing");
    for level in [1, 2, 3, 0] {
        assert_eq!(cuFileSetStatsLevel(level), SUCCESS);
        let mut got = -1;
        // SAFETY: a live int.
        assert_eq!(unsafe { cuFileGetStatsLevel(&mut got) }, SUCCESS);
        assert_eq!(got, level);
    }
    assert_eq!(cuFileSetStatsLevel(1), SUCCESS);
    assert_eq!(cuFileStatsStart(), SUCCESS);
    // SAFETY: `base` is `buffer`'s live device memory, which nothing else touches during the call
    // (cufile.h, "Host memory").
    assert_eq!(unsafe { cuFileRead(fh, base, 4096, 4096, 0) }, 4096);
    let l1 = level1();
    assert_eq!((l1.read_ops.ok, l1.read_bytes), (1, 4096));
    assert_eq!(cuFileStatsStop(), SUCCESS);
    cuFileHandleDeregister(fh);
    assert_eq!(cuFileSetStatsLevel(0), SUCCESS);
}
