//! The chunk and alignment arithmetic of both built-in backends, as the `chunking` fuzz body
//! (`hipfile_testkit::fuzz::chunking`) takes it. One list for the stable test (`chunking.rs`
//! here) and the cargo-fuzz target (`fuzz/fuzz_targets/chunking.rs`, which includes this file).

use hipfile_core::DioAlign;
use hipfile_testkit::fuzz::{Arithmetic, StagedPlan};

/// The functions under test.
pub const ARITHMETIC: Arithmetic = Arithmetic {
    staged_plan: |size, chunk, min_piece, inline, threads| {
        let plan = hipfile_fallback::plan::Plan::new(size, chunk, min_piece, inline, threads);
        StagedPlan {
            piece: plan.piece,
            pieces: plan.pieces,
            helpers: plan.helpers,
        }
    },
    staged_piece: |plan, size, k| {
        hipfile_fallback::plan::Plan {
            piece: plan.piece,
            pieces: plan.pieces,
            helpers: plan.helpers,
        }
        .piece_range(size, k)
    },
    staged_direct: hipfile_fallback::piece_io::direct_aligned,
    direct_call: hipfile_fastpath::call_size,
    direct_accepts,
};

/// The fastpath's verdict on a request that is supported in every other respect.
fn direct_accepts(align: DioAlign, file_offset: u64, size: usize, address: usize) -> bool {
    let fs = hipfile_core::FsKind::Xfs;
    let env = hipfile_core::EnvConfig::default();
    hipfile_fastpath::verdict(&hipfile_fastpath::Facts {
        has_p2p_driver: true,
        has_direct_fd: true,
        memory: hipfile_hip::MemoryKind::Device,
        align,
        fs: &fs,
        file_offset,
        size,
        device_address: address,
        compat: hipfile_core::CompatMode {
            allowed: true,
            forced: false,
        },
        env: &env,
    })
    .is_ok()
}
