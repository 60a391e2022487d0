//! Parameters: `hipFileSetParameter*` stages a value for the next driver open (the driver must be
//! closed); `hipFileGetParameter*` reads the value in force.
//!
//! The logging parameters are live: `hipFileParamLoggingLevel` (a level name or number, see
//! [`LogLevel::parse`]; another value is `hipFileInvalidValue`, and reads back as the upper-case
//! name) and `hipFileParamEnvLogfilePath` reconfigure the log as soon as they are set.

use std::ffi::{c_char, c_int, CStr};
use std::ptr;

use hipfile_core::{limits, DirectIoPolicy, LogLevel, Settings};

use super::conventions::{guarded_pair, pair, Door, HipFile, StatusPair};
use super::types::*;

/// The field of `Settings` behind a size_t parameter.
fn size_param(s: &mut Settings, param: hipFileSizeTConfigParameter_t) -> Option<&mut u64> {
    Some(match param {
        hipFileParamProfileStats => &mut s.stats_level,
        hipFileParamExecutionMaxIOQueueDepth => &mut s.io_queue_depth,
        hipFileParamExecutionMaxIOThreads => &mut s.max_io_threads,
        hipFileParamExecutionMinIOThresholdSizeKB => &mut s.min_io_threshold_kb,
        hipFileParamExecutionMaxRequestParallelism => &mut s.max_request_parallelism,
        hipFileParamPropertiesMaxDirectIOSizeKB => &mut s.max_direct_io_size_kb,
        hipFileParamPropertiesMaxDeviceCacheSizeKB => &mut s.max_device_cache_size_kb,
        hipFileParamPropertiesPerBufferCacheSizeKB => &mut s.per_buffer_cache_size_kb,
        hipFileParamPropertiesMaxDevicePinnedMemSizeKB => &mut s.max_pinned_mem_size_kb,
        hipFileParamPropertiesIOBatchsize => &mut s.max_batch_io_size,
        hipFileParamPollthresholdSizeKB => &mut s.poll_thresh_size_kb,
        hipFileParamPropertiesBatchIOTimeoutMs => &mut s.batch_io_timeout_ms,
        _ => return None,
    })
}

/// The smallest and largest value a size_t parameter takes: the floors and ceilings of
/// [`Settings::check`] (cuFile's `cuFileGetParameterMinMaxValue`). `None` for an unknown
/// parameter.
pub fn size_param_range(param: hipFileSizeTConfigParameter_t) -> Option<(u64, u64)> {
    Some(match param {
        hipFileParamProfileStats => (0, limits::MAX_STATS_LEVEL),
        hipFileParamExecutionMaxIOQueueDepth => (0, limits::MAX_COUNT),
        hipFileParamExecutionMaxIOThreads => (0, limits::MAX_IO_THREADS),
        hipFileParamExecutionMinIOThresholdSizeKB => (0, limits::MAX_TRANSFER_KB),
        hipFileParamExecutionMaxRequestParallelism => (0, limits::MAX_IO_THREADS + 1),
        hipFileParamPropertiesMaxDirectIOSizeKB => (4, limits::MAX_TRANSFER_KB),
        hipFileParamPropertiesMaxDeviceCacheSizeKB => (0, limits::MAX_REPORTED_KB),
        hipFileParamPropertiesPerBufferCacheSizeKB => (4, limits::MAX_CHUNK_KB),
        hipFileParamPropertiesMaxDevicePinnedMemSizeKB => (8, limits::physical_memory_kb()),
        hipFileParamPropertiesIOBatchsize => (0, limits::MAX_COUNT),
        hipFileParamPollthresholdSizeKB => (0, limits::MAX_TRANSFER_KB),
        hipFileParamPropertiesBatchIOTimeoutMs => (0, limits::MAX_COUNT),
        _ => return None,
    })
}

/// A bool parameter: read it from `s`, or write `value` into `s`.
fn bool_param(
    s: &mut Settings,
    param: hipFileBoolConfigParameter_t,
    value: Option<bool>,
) -> Option<bool> {
    let env = hipfile_core::EnvConfig::cached();
    match param {
        hipFileParamPropertiesAllowCompatMode => {
            if let Some(v) = value {
                s.allow_compat_mode = Some(v);
            }
            return Some(s.compat_mode(&env).allowed);
        }
        hipFileParamForceCompatMode => {
            if let Some(v) = value {
                s.force_compat_mode = Some(v);
            }
            return Some(s.compat_mode(&env).forced);
        }
        _ => {}
    }
    if param == hipFileParamForceOdirectMode {
        if let Some(v) = value {
            s.direct_io = if v {
                DirectIoPolicy::Always
            } else {
                DirectIoPolicy::Auto
            };
        }
        return Some(s.direct_io == DirectIoPolicy::Always);
    }
    let field = match param {
        hipFileParamPropertiesUsePollMode => &mut s.poll_mode,
        hipFileParamFsMiscApiCheckAggressive => &mut s.api_check_aggressive,
        hipFileParamExecutionParallelIO => &mut s.parallel_io,
        hipFileParamProfileNvtx => &mut s.nvtx,
        hipFileParamPropertiesAllowSystemMemory => &mut s.allow_system_memory,
        hipFileParamUsePcip2pdma => &mut s.use_pci_p2pdma,
        hipFileParamPreferIOUring => &mut s.prefer_io_uring,
        hipFileParamSkipTopologyDetection => &mut s.skip_topology_detection,
        hipFileParamStreamMemopsBypass => &mut s.stream_memops_bypass,
        _ => return None,
    };
    if let Some(v) = value {
        *field = v;
    }
    Some(*field)
}

/// The text of a string parameter; `None` when the parameter is unknown.
fn get_string_param(s: &Settings, param: hipFileStringConfigParameter_t) -> Option<String> {
    Some(match param {
        hipFileParamLoggingLevel => s.logging_level.name().to_string(),
        hipFileParamEnvLogfilePath => s.log_file_path.clone(),
        hipFileParamLogDir => s.log_dir.clone(),
        _ => return None,
    })
}

/// How setting a string parameter went.
enum StringSet {
    Done,
    UnknownParam,
    BadValue,
}

/// Write `text` into the string parameter `param` of `s`. A log level must parse
/// ([`LogLevel::parse`]).
fn set_string_param(
    s: &mut Settings,
    param: hipFileStringConfigParameter_t,
    text: &str,
) -> StringSet {
    match param {
        hipFileParamLoggingLevel => match LogLevel::parse(text) {
            Some(level) => s.logging_level = level,
            None => return StringSet::BadValue,
        },
        hipFileParamEnvLogfilePath => s.log_file_path = text.to_string(),
        hipFileParamLogDir => s.log_dir = text.to_string(),
        _ => return StringSet::UnknownParam,
    }
    StringSet::Done
}

/// Stage a change on door `D`'s driver; `change` answers whether the parameter is known, and so
/// does the result.
fn stage_known<D: Door>(change: impl FnOnce(&mut Settings) -> bool) -> hipfile_core::Result<bool> {
    let mut known = true;
    D::driver().stage_settings(|s| known = change(s))?;
    Ok(known)
}

/// [`stage_known`] as a status pair: an unknown parameter is `InvalidValue`.
fn stage<D: Door>(change: impl FnOnce(&mut Settings) -> bool) -> D::Pair {
    match stage_known::<D>(change) {
        Err(e) => pair(&e),
        Ok(false) => D::Pair::op(hipFileInvalidValue),
        Ok(true) => D::Pair::SUCCESS,
    }
}

/// Read a size_t parameter of door `D`'s driver (the value in force).
///
/// # Safety
/// `value` is NULL or the caller's `size_t`.
pub unsafe fn get_parameter_size_t<D: Door>(
    param: hipFileSizeTConfigParameter_t,
    value: *mut usize,
) -> D::Pair {
    let mut s = D::driver().settings();
    match (value.is_null(), size_param(&mut s, param)) {
        (false, Some(v)) => {
            // SAFETY: `value` is non-null and points to the caller's size_t.
            unsafe { value.write(usize::try_from(*v).unwrap_or(usize::MAX)) };
            D::Pair::SUCCESS
        }
        _ => D::Pair::op(hipFileInvalidValue),
    }
}

/// Read a bool parameter of door `D`'s driver (the value in force).
///
/// # Safety
/// `value` is NULL or the caller's `bool`.
pub unsafe fn get_parameter_bool<D: Door>(
    param: hipFileBoolConfigParameter_t,
    value: *mut bool,
) -> D::Pair {
    let mut s = D::driver().settings();
    match (value.is_null(), bool_param(&mut s, param, None)) {
        (false, Some(v)) => {
            // SAFETY: `value` is non-null and points to the caller's bool.
            unsafe { value.write(v) };
            D::Pair::SUCCESS
        }
        _ => D::Pair::op(hipFileInvalidValue),
    }
}

/// Read a string parameter of door `D`'s driver into `desc_str` (`len` bytes, NUL included).
///
/// # Safety
/// `desc_str` is NULL or the caller's buffer of `len` bytes.
pub unsafe fn get_parameter_string<D: Door>(
    param: hipFileStringConfigParameter_t,
    desc_str: *mut c_char,
    len: c_int,
) -> D::Pair {
    let Some(text) = get_string_param(&D::driver().settings(), param) else {
        return D::Pair::op(hipFileInvalidValue);
    };
    let room = usize::try_from(len).unwrap_or(0);
    if desc_str.is_null() || room < text.len() + 1 {
        return D::Pair::op(hipFileInvalidValue);
    }
    // SAFETY: `desc_str` is non-null with room for `len` >= text + NUL bytes.
    unsafe {
        ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), desc_str, text.len());
        desc_str.add(text.len()).write(0);
    }
    D::Pair::SUCCESS
}

/// Stage a size_t parameter on door `D`'s driver (closed only).
pub fn set_parameter_size_t<D: Door>(
    param: hipFileSizeTConfigParameter_t,
    value: usize,
) -> D::Pair {
    stage::<D>(|s| match size_param(s, param) {
        Some(field) => {
            *field = value as u64;
            true
        }
        None => false,
    })
}

/// Stage a bool parameter on door `D`'s driver (closed only).
pub fn set_parameter_bool<D: Door>(param: hipFileBoolConfigParameter_t, value: bool) -> D::Pair {
    stage::<D>(|s| bool_param(s, param, Some(value)).is_some())
}

/// Stage a string parameter on door `D`'s driver (closed only); the log parameters apply at once.
///
/// # Safety
/// `desc_str` is NULL or a NUL-terminated string of the caller.
pub unsafe fn set_parameter_string<D: Door>(
    param: hipFileStringConfigParameter_t,
    desc_str: *const c_char,
) -> D::Pair {
    if desc_str.is_null() {
        return D::Pair::op(hipFileInvalidValue);
    }
    // SAFETY: `desc_str` is a non-null, NUL-terminated string of the caller.
    let text = unsafe { CStr::from_ptr(desc_str) }
        .to_string_lossy()
        .into_owned();
    let mut bad_value = false;
    let staged = stage_known::<D>(|s| match set_string_param(s, param, &text) {
        StringSet::Done => true,
        StringSet::UnknownParam => false,
        StringSet::BadValue => {
            bad_value = true;
            true
        }
    });
    match staged {
        Err(e) => pair(&e),
        Ok(false) => D::Pair::op(hipFileInvalidValue),
        Ok(true) if bad_value => D::Pair::op(hipFileInvalidValue),
        Ok(true) => {
            if param == hipFileParamLoggingLevel || param == hipFileParamEnvLogfilePath {
                // The log follows the parameter at once, not only from the next open: what the
                // closed driver answers is logged at the level just set.
                let s = D::driver().settings();
                hipfile_core::logging::configure(s.logging_level, &s.log_file_path);
            }
            D::Pair::SUCCESS
        }
    }
}

/// Read a size_t parameter (the value in force).
#[no_mangle]
pub unsafe extern "C" fn hipFileGetParameterSizeT(
    param: hipFileSizeTConfigParameter_t,
    value: *mut usize,
) -> hipFileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { get_parameter_size_t::<HipFile>(param, value) })
}

/// Read a bool parameter (the value in force).
#[no_mangle]
pub unsafe extern "C" fn hipFileGetParameterBool(
    param: hipFileBoolConfigParameter_t,
    value: *mut bool,
) -> hipFileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { get_parameter_bool::<HipFile>(param, value) })
}

/// Read a string parameter into `desc_str` (`len` bytes, NUL included).
#[no_mangle]
pub unsafe extern "C" fn hipFileGetParameterString(
    param: hipFileStringConfigParameter_t,
    desc_str: *mut c_char,
    len: c_int,
) -> hipFileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { get_parameter_string::<HipFile>(param, desc_str, len) })
}

/// Stage a size_t parameter (driver closed only).
#[no_mangle]
pub extern "C" fn hipFileSetParameterSizeT(
    param: hipFileSizeTConfigParameter_t,
    value: usize,
) -> hipFileError_t {
    guarded_pair(|| set_parameter_size_t::<HipFile>(param, value))
}

/// Stage a bool parameter (driver closed only).
#[no_mangle]
pub extern "C" fn hipFileSetParameterBool(
    param: hipFileBoolConfigParameter_t,
    value: bool,
) -> hipFileError_t {
    guarded_pair(|| set_parameter_bool::<HipFile>(param, value))
}

/// Stage a string parameter (driver closed only).
#[no_mangle]
pub unsafe extern "C" fn hipFileSetParameterString(
    param: hipFileStringConfigParameter_t,
    desc_str: *const c_char,
) -> hipFileError_t {
    // SAFETY: the C caller's contract, passed on.
    guarded_pair(|| unsafe { set_parameter_string::<HipFile>(param, desc_str) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(param: hipFileSizeTConfigParameter_t, value: u64) -> hipfile_core::Result<()> {
        let mut s = Settings::default();
        *size_param(&mut s, param).expect("a known parameter") = value;
        s.check()
    }

    /// Every size_t parameter's range is exactly what the settings' check accepts: both ends
    /// pass, one past either end fails.
    #[test]
    fn size_param_ranges_are_what_the_check_accepts() {
        for param in hipFileParamProfileStats..=hipFileParamPropertiesBatchIOTimeoutMs {
            let (min, max) = size_param_range(param).expect("every parameter has a range");
            assert!(with(param, min).is_ok(), "{param}: min {min}");
            assert!(with(param, max).is_ok(), "{param}: max {max}");
            assert!(with(param, max + 1).is_err(), "{param}: above {max}");
            if min > 0 {
                assert!(with(param, min - 1).is_err(), "{param}: below {min}");
            }
        }
        assert_eq!(
            size_param_range(hipFileParamPropertiesBatchIOTimeoutMs + 1),
            None
        );
        assert_eq!(size_param_range(-1), None);
    }
}
