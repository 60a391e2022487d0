//! cuFile 1.16's P2P flags (`cuFileDriverSetP2PFlags`, `cuFileDriverGetP2PFlags`) and
//! hipfile-rs's per-file IO policy under cuFile's prefix (`cuFileHandleSetIoPolicy`,
//! `cuFileHandleGetIoPolicy`, extensions no NVIDIA library exports).
//!
//! P2P flags are kept per target (a `CUfileDriverStatusFlags_t`: a file system or block device
//! type), as cuFile keeps them, and read back per target, while the driver is open (a closed
//! driver answers both calls `CU_FILE_DRIVER_NOT_INITIALIZED`, as cuFile documents); nothing is
//! set at first, and the driver's final close forgets them. As NVIDIA's library on x86-64, only
//! `CU_FILE_P2P_FLAG_PCI_P2PDMA` may be set (`CU_FILE_P2P_FLAG_C2C` on aarch64; nvidia-fs and
//! dma-buf are the library's own choice): other flags are `CU_FILE_INVALID_VALUE`, no flag at
//! all changes nothing, and a target outside the enum is `CU_FILE_INVALID_VALUE`.
//!
//! What the flags change: the direct path of this library serves local block storage, so the
//! flags of the block device targets (NVMe, NVMe over fabrics, SCSI, NVMe P2P) choose its
//! mechanisms, mapped by hipfile-core (`P2pMechanisms::from_cufile_flags`): P2PDMA asks for PCI
//! peer-to-peer DMA instead of nvidia-fs, so on NVIDIA the nvidia-fs path is masked and requests
//! take the staged engine (or fail closed under a direct-only policy), while AMD's KFD and the
//! simulated GPU, which are PCI peer-to-peer DMA, stay allowed. The mechanisms in force before
//! the first flag was set come back at the final close.
//!
//! The IO policy codes are hipFile's extension's: `CU_FILE_IO_POLICY_FALLBACK` (0, the direct
//! path where it can, the staged engine where it cannot) and `CU_FILE_IO_POLICY_DIRECT_ONLY`
//! (1, the direct path or `CU_FILE_IO_NOT_SUPPORTED` with no byte moved).

#![allow(non_camel_case_types)] // cuFile's type names

use std::ffi::c_int;
use std::sync::{Mutex, MutexGuard, PoisonError};

use hipfile::capi::{self, guarded_pair, Door, StatusPair};
use hipfile_core::{cufile_p2p, P2pMechanisms};

use crate::door::CuFile;
use crate::types::*;

/// `CUfileP2PFlags_t`: cuFile 1.16's P2P flags (C enum, received as `c_int`).
pub type CUfileP2PFlags_t = c_int;
/// `CU_FILE_P2P_FLAG_PCI_P2PDMA`.
pub const CU_FILE_P2P_FLAG_PCI_P2PDMA: CUfileP2PFlags_t = cufile_p2p::PCI_P2PDMA as c_int;
/// `CU_FILE_P2P_FLAG_NVFS`.
pub const CU_FILE_P2P_FLAG_NVFS: CUfileP2PFlags_t = cufile_p2p::NVFS as c_int;
/// `CU_FILE_P2P_FLAG_DMABUF`.
pub const CU_FILE_P2P_FLAG_DMABUF: CUfileP2PFlags_t = cufile_p2p::DMABUF as c_int;
/// `CU_FILE_P2P_FLAG_C2C`.
pub const CU_FILE_P2P_FLAG_C2C: CUfileP2PFlags_t = cufile_p2p::C2C as c_int;
/// `CU_FILE_VIRTIOFS_SUPPORTED`: cuFile 1.16's last `CUfileDriverStatusFlags_t` (a target).
pub const CU_FILE_VIRTIOFS_SUPPORTED: c_int = 13;
/// `CU_FILE_MAX_TARGET_TYPES`: one past the last `CUfileDriverStatusFlags_t`.
pub const CU_FILE_MAX_TARGET_TYPES: c_int = 14;

/// `CU_FILE_IO_POLICY_FALLBACK` (hipfile-rs extension).
pub const CU_FILE_IO_POLICY_FALLBACK: c_int = capi::hipFileIoPolicyFallback;
/// `CU_FILE_IO_POLICY_DIRECT_ONLY` (hipfile-rs extension).
pub const CU_FILE_IO_POLICY_DIRECT_ONLY: c_int = capi::hipFileIoPolicyDirectOnly;

/// The flags a program may set on this platform.
const SETTABLE: u32 = if cfg!(target_arch = "aarch64") {
    cufile_p2p::C2C
} else {
    cufile_p2p::PCI_P2PDMA
};

/// The targets whose storage the direct path serves: block devices under ext4, xfs or raw.
const BLOCK_TARGETS: [c_int; 4] = [
    CU_FILE_NVME_SUPPORTED,
    CU_FILE_NVMEOF_SUPPORTED,
    CU_FILE_SCSI_SUPPORTED,
    CU_FILE_NVME_P2P_SUPPORTED,
];

/// The flags of every target, and the mechanisms in force before the first was set.
struct Targets {
    flags: [u32; CU_FILE_MAX_TARGET_TYPES as usize],
    before: Option<P2pMechanisms>,
}

/// The flags of every target. Callers that read or change them check that the driver is open
/// while they hold this lock, so a final close ([`forget_p2p_flags`], which takes it after the
/// driver closed) cannot slip between the check and the change.
fn targets() -> MutexGuard<'static, Targets> {
    static TARGETS: Mutex<Targets> = Mutex::new(Targets {
        flags: [0; CU_FILE_MAX_TARGET_TYPES as usize],
        before: None,
    });
    TARGETS.lock().unwrap_or_else(PoisonError::into_inner)
}

fn target_index(status_flag: c_int) -> Option<usize> {
    usize::try_from(status_flag)
        .ok()
        .filter(|&i| i < CU_FILE_MAX_TARGET_TYPES as usize)
}

/// The mechanisms the block targets' flags allow within `before`.
fn mechanisms(t: &Targets, before: P2pMechanisms) -> P2pMechanisms {
    let flags = BLOCK_TARGETS
        .iter()
        .fold(0, |acc, &target| acc | t.flags[target as usize]);
    let allowed = P2pMechanisms::from_cufile_flags(flags).unwrap_or(P2pMechanisms::ALL);
    P2pMechanisms::from_bits(allowed.bits() & before.bits()).unwrap_or(P2pMechanisms::NONE)
}

/// `cuFileDriverSetP2PFlags`.
pub fn set_p2p_flags(status_flag: c_int, p2p_flags: CUfileP2PFlags_t) -> CUfileError_t {
    let driver = CuFile::driver();
    let mut t = targets();
    if driver.session().is_none() {
        return CUfileError_t::op(CU_FILE_DRIVER_NOT_INITIALIZED);
    }
    let invalid = CUfileError_t::op(CU_FILE_INVALID_VALUE);
    let (Some(index), Ok(flags)) = (target_index(status_flag), u32::try_from(p2p_flags)) else {
        return invalid;
    };
    if flags & !SETTABLE != 0 {
        return invalid;
    }
    if flags == 0 {
        return CUfileError_t::SUCCESS;
    }
    let before = *t.before.get_or_insert_with(|| driver.p2p_mechanisms());
    t.flags[index] = flags;
    driver.set_p2p_mechanisms(mechanisms(&t, before));
    CUfileError_t::SUCCESS
}

/// `cuFileDriverGetP2PFlags`.
///
/// # Safety
/// `p2p_flags` is NULL or the caller's enum.
pub unsafe fn get_p2p_flags(status_flag: c_int, p2p_flags: *mut CUfileP2PFlags_t) -> CUfileError_t {
    let flags = {
        let t = targets();
        if CuFile::driver().session().is_none() {
            return CUfileError_t::op(CU_FILE_DRIVER_NOT_INITIALIZED);
        }
        let Some(index) = target_index(status_flag) else {
            return CUfileError_t::op(CU_FILE_INVALID_VALUE);
        };
        t.flags[index] as CUfileP2PFlags_t
    };
    // SAFETY: the caller's contract, passed on.
    unsafe { capi::write_out(p2p_flags, flags) }
}

/// The driver's final close: the flags are forgotten and the mechanisms in force before them
/// come back.
pub fn forget_p2p_flags() {
    let mut t = targets();
    if let Some(before) = t.before.take() {
        CuFile::driver().set_p2p_mechanisms(before);
    }
    t.flags = [0; CU_FILE_MAX_TARGET_TYPES as usize];
}

/// Set the P2P flags of a file system or block device type.
#[no_mangle]
pub extern "C" fn cuFileDriverSetP2PFlags(
    status_flag: c_int,
    p2p_flags: CUfileP2PFlags_t,
) -> CUfileError_t {
    guarded_pair(|| set_p2p_flags(status_flag, p2p_flags))
}

/// The P2P flags of a file system or block device type.
#[no_mangle]
pub unsafe extern "C" fn cuFileDriverGetP2PFlags(
    status_flag: c_int,
    p2p_flags: *mut CUfileP2PFlags_t,
) -> CUfileError_t {
    // SAFETY: the C caller passes NULL or its own enum.
    guarded_pair(|| unsafe { get_p2p_flags(status_flag, p2p_flags) })
}

/// Choose how the requests of a registered file are served from now on (hipfile-rs extension).
#[no_mangle]
pub extern "C" fn cuFileHandleSetIoPolicy(fh: CUfileHandle_t, policy: c_int) -> CUfileError_t {
    guarded_pair(|| capi::handle_set_io_policy::<CuFile>(fh, policy))
}

/// How the requests of a registered file are served (hipfile-rs extension).
#[no_mangle]
pub unsafe extern "C" fn cuFileHandleGetIoPolicy(
    fh: CUfileHandle_t,
    policy: *mut c_int,
) -> CUfileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { capi::handle_get_io_policy::<CuFile>(fh, policy) })
}
