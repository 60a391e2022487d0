//! hipfile-rs extensions to the hipFile C ABI, not in upstream hipFile: the per-file-handle IO
//! policy ([`hipFileHandleSetIoPolicy`], [`hipFileHandleGetIoPolicy`]) and the driver-wide set
//! of direct (P2P) mechanisms ([`hipFileDriverSetP2PMechanisms`],
//! [`hipFileDriverGetP2PMechanisms`]). Programs that use them name symbols upstream's library
//! does not export; the header marks them so.
//!
//! The mechanisms are named by their own bits rather than cuFile's P2P flags, whose setter
//! (`cuFileDriverSetP2PFlags`) takes them per filesystem and selects a mode rather than a set:
//! upstream may one day add `hipFileDriverSetP2PFlags` with cuFile's signature, so these keep
//! their own names.

use std::ffi::{c_int, c_uint};

use hipfile_core::{IoPolicy, P2pMechanisms};

use super::conventions::{guarded_pair, handle_id, pair, Door, HipFile, StatusPair};
use super::types::*;

/// Set the IO policy (a `hipFileIoPolicy_t` value, the same numbers in cuFile's extension) of a
/// file registered with door `D`'s driver.
pub fn handle_set_io_policy<D: Door>(fh: hipFileHandle_t, policy: c_int) -> D::Pair {
    let Some(policy) = u32::try_from(policy).ok().and_then(IoPolicy::from_code) else {
        return D::Pair::op(hipFileInvalidValue);
    };
    if fh.is_null() {
        return D::Pair::op(hipFileInvalidValue);
    }
    match D::driver().handle_set_policy(handle_id(fh), policy) {
        Ok(()) => D::Pair::SUCCESS,
        Err(e) => pair(&e),
    }
}

/// The IO policy of a file registered with door `D`'s driver, into the caller's `policy`.
///
/// # Safety
/// `policy` is NULL or the caller's int.
pub unsafe fn handle_get_io_policy<D: Door>(fh: hipFileHandle_t, policy: *mut c_int) -> D::Pair {
    if fh.is_null() || policy.is_null() {
        return D::Pair::op(hipFileInvalidValue);
    }
    match D::driver().handle_policy(handle_id(fh)) {
        Ok(p) => {
            // SAFETY: `policy` is non-null and points to the caller's enum.
            unsafe { policy.write(p.code() as c_int) };
            D::Pair::SUCCESS
        }
        Err(e) => pair(&e),
    }
}

/// Choose how the requests of a registered file are served from now on.
#[no_mangle]
pub extern "C" fn hipFileHandleSetIoPolicy(
    fh: hipFileHandle_t,
    policy: hipFileIoPolicy_t,
) -> hipFileError_t {
    guarded_pair(|| handle_set_io_policy::<HipFile>(fh, policy))
}

/// How the requests of a registered file are served.
#[no_mangle]
pub unsafe extern "C" fn hipFileHandleGetIoPolicy(
    fh: hipFileHandle_t,
    policy: *mut hipFileIoPolicy_t,
) -> hipFileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { handle_get_io_policy::<HipFile>(fh, policy) })
}

/// Allow only the direct mechanisms whose bits `mechanisms` sets: on the open driver from the
/// next request on, on a closed one from its next open.
#[no_mangle]
pub extern "C" fn hipFileDriverSetP2PMechanisms(mechanisms: c_uint) -> hipFileError_t {
    guarded_pair(|| match P2pMechanisms::from_bits(mechanisms) {
        Some(set) => {
            HipFile::driver().set_p2p_mechanisms(set);
            hipFileError_t::SUCCESS
        }
        None => hipFileError_t::op(hipFileInvalidValue),
    })
}

/// The direct mechanisms the driver may use, as bits.
#[no_mangle]
pub unsafe extern "C" fn hipFileDriverGetP2PMechanisms(mechanisms: *mut c_uint) -> hipFileError_t {
    guarded_pair(|| {
        if mechanisms.is_null() {
            return hipFileError_t::op(hipFileInvalidValue);
        }
        let bits = HipFile::driver().p2p_mechanisms().bits();
        // SAFETY: `mechanisms` is non-null and points to the caller's integer.
        unsafe { mechanisms.write(bits) };
        hipFileError_t::SUCCESS
    })
}

/// `hipFileIoPolicy_t` keeps `c_int`'s width: C passes an enum as an `int`.
const _: () = assert!(std::mem::size_of::<hipFileIoPolicy_t>() == std::mem::size_of::<c_int>());
