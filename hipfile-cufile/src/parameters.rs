//! Parameters: the facade's tables (cuFile's enumerators are hipFile's, value for value), plus
//! cuFile's range query and POSIX pool slab arrays.

use std::ffi::{c_char, c_int};
use std::sync::{Mutex, PoisonError};

use hipfile::capi::{self, guarded_pair, Door, StatusPair};

use crate::door::CuFile;
use crate::types::*;

/// Read a size_t parameter (the value in force).
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterSizeT(
    param: CUFileSizeTConfigParameter_t,
    value: *mut usize,
) -> CUfileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { capi::get_parameter_size_t::<CuFile>(param, value) })
}

/// Read a bool parameter (the value in force).
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterBool(
    param: CUFileBoolConfigParameter_t,
    value: *mut bool,
) -> CUfileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { capi::get_parameter_bool::<CuFile>(param, value) })
}

/// Read a string parameter into `desc_str` (`len` bytes, NUL included).
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterString(
    param: CUFileStringConfigParameter_t,
    desc_str: *mut c_char,
    len: c_int,
) -> CUfileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { capi::get_parameter_string::<CuFile>(param, desc_str, len) })
}

/// Stage a size_t parameter (driver closed only).
#[no_mangle]
pub extern "C" fn cuFileSetParameterSizeT(
    param: CUFileSizeTConfigParameter_t,
    value: usize,
) -> CUfileError_t {
    guarded_pair(|| capi::set_parameter_size_t::<CuFile>(param, value))
}

/// Stage a bool parameter (driver closed only).
#[no_mangle]
pub extern "C" fn cuFileSetParameterBool(
    param: CUFileBoolConfigParameter_t,
    value: bool,
) -> CUfileError_t {
    guarded_pair(|| capi::set_parameter_bool::<CuFile>(param, value))
}

/// Stage a string parameter (driver closed only).
#[no_mangle]
pub unsafe extern "C" fn cuFileSetParameterString(
    param: CUFileStringConfigParameter_t,
    desc_str: *const c_char,
) -> CUfileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { capi::set_parameter_string::<CuFile>(param, desc_str) })
}

/// The range of a size_t parameter into the caller's two slots.
///
/// # Safety
/// `min_value` and `max_value` are NULL or the caller's `size_t`s.
pub unsafe fn parameter_range(
    param: CUFileSizeTConfigParameter_t,
    min_value: *mut usize,
    max_value: *mut usize,
) -> CUfileError_t {
    let Some((min, max)) = capi::size_param_range(param) else {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    };
    if min_value.is_null() || max_value.is_null() {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    let as_size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
    // SAFETY: both non-null: the caller's size_t slots.
    unsafe {
        min_value.write(as_size(min));
        max_value.write(as_size(max));
    }
    CUfileError_t::SUCCESS
}

/// The smallest and largest value a size_t parameter takes (what `cuFileSetParameterSizeT`
/// accepts, both ends included).
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterMinMaxValue(
    param: CUFileSizeTConfigParameter_t,
    min_value: *mut usize,
    max_value: *mut usize,
) -> CUfileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { parameter_range(param, min_value, max_value) })
}

/// cuFile's POSIX pool slabs: sizes and how many of each. cuFile's compat engine stages through
/// such a pool; hipfile-rs's staged engine sizes its pinned lanes from
/// `max_device_pinned_mem_size_kb` and the chunk size instead, so the arrays are stored and
/// reported. The defaults are cufile.json's (`posix_pool_slab_size_kb`, in KiB); programs are
/// seen passing bytes through the API (cuda.bindings' tests set 4096 to 16777216), so a size is
/// taken as given and only checked to be page aligned in either unit (a positive multiple of 4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlabArray {
    /// Slab sizes, each a positive multiple of 4 (KiB in cufile.json).
    pub sizes_kb: Vec<usize>,
    /// Slabs of each size.
    pub counts: Vec<usize>,
}

impl Default for SlabArray {
    /// cuFile's defaults.
    fn default() -> Self {
        SlabArray {
            sizes_kb: vec![4, 1024, 16384],
            counts: vec![128, 64, 64],
        }
    }
}

fn slabs() -> std::sync::MutexGuard<'static, Option<SlabArray>> {
    static SLABS: Mutex<Option<SlabArray>> = Mutex::new(None);
    SLABS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The slab arrays in force.
pub fn slab_array() -> SlabArray {
    slabs().clone().unwrap_or_default()
}

/// Set the slab arrays from the caller's `len` sizes and counts: the driver must be closed (as
/// every `cuFileSetParameter*`), `len` positive, every size a positive multiple of 4 and every
/// count positive.
///
/// # Safety
/// `size_values` and `count_values` are NULL or hold `len` readable values each.
pub unsafe fn set_slab_array(
    size_values: *const usize,
    count_values: *const usize,
    len: c_int,
) -> CUfileError_t {
    let invalid = CUfileError_t::op(CU_FILE_INVALID_VALUE);
    let Ok(n) = usize::try_from(len) else {
        return invalid;
    };
    if n == 0 || size_values.is_null() || count_values.is_null() {
        return invalid;
    }
    if CuFile::driver().session().is_some() {
        return CUfileError_t::op(CU_FILE_DRIVER_ALREADY_OPEN);
    }
    // SAFETY: both non-null and, by the caller's contract, hold `n` values each.
    let (sizes_kb, counts) = unsafe {
        (
            std::slice::from_raw_parts(size_values, n).to_vec(),
            std::slice::from_raw_parts(count_values, n).to_vec(),
        )
    };
    if sizes_kb.iter().any(|&s| s == 0 || s % 4 != 0) || counts.contains(&0) {
        return invalid;
    }
    *slabs() = Some(SlabArray { sizes_kb, counts });
    CUfileError_t::SUCCESS
}

/// Copy the slab arrays into the caller's two arrays of `len` entries, which must be the
/// arrays' length.
///
/// # Safety
/// `size_values` and `count_values` are NULL or have room for `len` values each.
pub unsafe fn get_slab_array(
    size_values: *mut usize,
    count_values: *mut usize,
    len: c_int,
) -> CUfileError_t {
    let slabs = slab_array();
    if size_values.is_null()
        || count_values.is_null()
        || usize::try_from(len) != Ok(slabs.sizes_kb.len())
    {
        return CUfileError_t::op(CU_FILE_INVALID_VALUE);
    }
    // SAFETY: both non-null with room for `len` = the arrays' length values each.
    unsafe {
        std::ptr::copy_nonoverlapping(slabs.sizes_kb.as_ptr(), size_values, slabs.sizes_kb.len());
        std::ptr::copy_nonoverlapping(slabs.counts.as_ptr(), count_values, slabs.counts.len());
    }
    CUfileError_t::SUCCESS
}

/// Set the POSIX pool slab sizes (KiB) and counts.
#[no_mangle]
pub unsafe extern "C" fn cuFileSetParameterPosixPoolSlabArray(
    size_values: *const usize,
    count_values: *const usize,
    len: c_int,
) -> CUfileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { set_slab_array(size_values, count_values, len) })
}

/// Read the POSIX pool slab sizes (KiB) and counts.
#[no_mangle]
pub unsafe extern "C" fn cuFileGetParameterPosixPoolSlabArray(
    size_values: *mut usize,
    count_values: *mut usize,
    len: c_int,
) -> CUfileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { get_slab_array(size_values, count_values, len) })
}
