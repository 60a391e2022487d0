//! Parameters: `hipFileSetParameter*` stages a value for the next driver open (the driver must be
//! closed); `hipFileGetParameter*` reads the value in force.
//!
//! The logging parameters are live: `hipFileParamLoggingLevel` (a level name or number, see
//! [`LogLevel::parse`]; another value is `hipFileInvalidValue`, and reads back as the upper-case
//! name) and `hipFileParamEnvLogfilePath` reconfigure the log as soon as they are set.

use std::ffi::{c_char, c_int, CStr};
use std::ptr;

use hipfile_core::{DirectIoPolicy, LogLevel, Settings};

use super::conventions::{driver, guarded_pair, pair};
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

/// Stage a change; `Err(code)` when the parameter is unknown.
fn stage(change: impl FnOnce(&mut Settings) -> bool) -> hipFileError_t {
    let mut known = true;
    let r = driver().stage_settings(|s| known = change(s));
    match r {
        Err(e) => pair(&e),
        Ok(()) if !known => hipFileError_t::op(hipFileInvalidValue),
        Ok(()) => hipFileError_t::SUCCESS,
    }
}

/// Read a size_t parameter (the value in force).
#[no_mangle]
pub unsafe extern "C" fn hipFileGetParameterSizeT(
    param: hipFileSizeTConfigParameter_t,
    value: *mut usize,
) -> hipFileError_t {
    guarded_pair(|| {
        let mut s = driver().settings();
        match (value.is_null(), size_param(&mut s, param)) {
            (false, Some(v)) => {
                // SAFETY: `value` is non-null and points to the caller's size_t.
                unsafe { value.write(usize::try_from(*v).unwrap_or(usize::MAX)) };
                hipFileError_t::SUCCESS
            }
            _ => hipFileError_t::op(hipFileInvalidValue),
        }
    })
}

/// Read a bool parameter (the value in force).
#[no_mangle]
pub unsafe extern "C" fn hipFileGetParameterBool(
    param: hipFileBoolConfigParameter_t,
    value: *mut bool,
) -> hipFileError_t {
    guarded_pair(|| {
        let mut s = driver().settings();
        match (value.is_null(), bool_param(&mut s, param, None)) {
            (false, Some(v)) => {
                // SAFETY: `value` is non-null and points to the caller's bool.
                unsafe { value.write(v) };
                hipFileError_t::SUCCESS
            }
            _ => hipFileError_t::op(hipFileInvalidValue),
        }
    })
}

/// Read a string parameter into `desc_str` (`len` bytes, NUL included).
#[no_mangle]
pub unsafe extern "C" fn hipFileGetParameterString(
    param: hipFileStringConfigParameter_t,
    desc_str: *mut c_char,
    len: c_int,
) -> hipFileError_t {
    guarded_pair(|| {
        let Some(text) = get_string_param(&driver().settings(), param) else {
            return hipFileError_t::op(hipFileInvalidValue);
        };
        let room = usize::try_from(len).unwrap_or(0);
        if desc_str.is_null() || room < text.len() + 1 {
            return hipFileError_t::op(hipFileInvalidValue);
        }
        // SAFETY: `desc_str` is non-null with room for `len` >= text + NUL bytes.
        unsafe {
            ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), desc_str, text.len());
            desc_str.add(text.len()).write(0);
        }
        hipFileError_t::SUCCESS
    })
}

/// Stage a size_t parameter (driver closed only).
#[no_mangle]
pub extern "C" fn hipFileSetParameterSizeT(
    param: hipFileSizeTConfigParameter_t,
    value: usize,
) -> hipFileError_t {
    guarded_pair(|| {
        stage(|s| match size_param(s, param) {
            Some(field) => {
                *field = value as u64;
                true
            }
            None => false,
        })
    })
}

/// Stage a bool parameter (driver closed only).
#[no_mangle]
pub extern "C" fn hipFileSetParameterBool(
    param: hipFileBoolConfigParameter_t,
    value: bool,
) -> hipFileError_t {
    guarded_pair(|| stage(|s| bool_param(s, param, Some(value)).is_some()))
}

/// Stage a string parameter (driver closed only).
#[no_mangle]
pub unsafe extern "C" fn hipFileSetParameterString(
    param: hipFileStringConfigParameter_t,
    desc_str: *const c_char,
) -> hipFileError_t {
    guarded_pair(|| {
        if desc_str.is_null() {
            return hipFileError_t::op(hipFileInvalidValue);
        }
        // SAFETY: `desc_str` is a non-null, NUL-terminated string of the caller.
        let text = unsafe { CStr::from_ptr(desc_str) }
            .to_string_lossy()
            .into_owned();
        let mut bad_value = false;
        let staged = stage(|s| match set_string_param(s, param, &text) {
            StringSet::Done => true,
            StringSet::UnknownParam => false,
            StringSet::BadValue => {
                bad_value = true;
                true
            }
        });
        if bad_value {
            return hipFileError_t::op(hipFileInvalidValue);
        }
        if staged.err == hipFileSuccess
            && (param == hipFileParamLoggingLevel || param == hipFileParamEnvLogfilePath)
        {
            // The log follows the parameter at once, not only from the next open: what the
            // closed driver answers is logged at the level just set.
            let s = driver().settings();
            hipfile_core::logging::configure(s.logging_level, &s.log_file_path);
        }
        staged
    })
}
