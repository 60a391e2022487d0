//! CUDA errors in HIP's terms: the one table from CUDA error numbers to HIP's ([`hip_code`]), and
//! the checks that turn the return codes of runtime and driver calls into [`HipError`]s carrying
//! the HIP number, with the CUDA number and name in the detail text.

use super::NvidiaRuntime;
use crate::error::{HipError, HipErrorCode, HipResult};
use crate::ffi::cuda::Failed;

/// The HIP error number for a CUDA runtime (`cudaError_t`) or driver (`CUresult`) code.
///
/// The one table of the NVIDIA platform. HIP numbered its errors after CUDA's, so most codes map to
/// themselves; the few CUDA-only codes map to the HIP error of the same meaning, and anything else
/// is `hipErrorUnknown` (the caller keeps the CUDA number in the error's detail text).
pub fn hip_code(cuda: i32) -> HipErrorCode {
    let hip = match cuda {
        // cudaSuccess / CUDA_SUCCESS.
        0 => 0,
        // InvalidValue, MemoryAllocation / OUT_OF_MEMORY, InitializationError / NOT_INITIALIZED,
        // CudartUnloading / DEINITIALIZED.
        1..=4 => cuda,
        // Profiler codes (runtime 5, driver 5-8).
        5..=8 => cuda,
        // cudaErrorInvalidConfiguration, InvalidPitchValue, InvalidSymbol.
        9 | 12 | 13 => cuda,
        // cudaErrorInvalidHostPointer: HIP has no twin; it is an invalid argument.
        16 => 1,
        // cudaErrorInvalidDevicePointer, cudaErrorInvalidMemcpyDirection.
        17 | 21 => cuda,
        // cudaErrorStubLibrary, cudaErrorInsufficientDriver, cudaErrorCallRequiresNewerDriver:
        // the driver cannot serve this runtime.
        34..=36 => 35,
        // cudaErrorMissingConfiguration, cudaErrorInvalidDeviceFunction.
        52 | 98 => cuda,
        // NoDevice, InvalidDevice.
        100 | 101 => cuda,
        // InvalidKernelImage / INVALID_IMAGE; DeviceUninitialized / INVALID_CONTEXT (both are
        // hipErrorInvalidContext); CONTEXT_ALREADY_CURRENT; mapping, ECC, limit, peer and PTX codes.
        200..=202 | 205..=219 => cuda,
        // InvalidSource, FileNotFound, SharedObjectSymbolNotFound, SharedObjectInitFailed,
        // OperatingSystem.
        300..=304 => cuda,
        // InvalidResourceHandle / INVALID_HANDLE, IllegalState.
        400 | 401 => cuda,
        // cudaErrorSymbolNotFound / CUDA_ERROR_NOT_FOUND: hipErrorNotFound.
        500 => cuda,
        // NotReady.
        600 => cuda,
        // IllegalAddress, LaunchOutOfResources, LaunchTimeout, PeerAccessAlreadyEnabled,
        // PeerAccessNotEnabled, SetOnActiveProcess / PRIMARY_CONTEXT_ACTIVE, ContextIsDestroyed,
        // Assert, HostMemoryAlreadyRegistered, HostMemoryNotRegistered.
        700..=702 | 704 | 705 | 708..=710 | 712 | 713 => cuda,
        // LaunchFailure, CooperativeLaunchTooLarge.
        719 | 720 => cuda,
        // NotSupported.
        801 => cuda,
        // Unknown.
        999 => cuda,
        _ => 999,
    };
    HipErrorCode(hip)
}

impl NvidiaRuntime {
    /// A runtime-API failure of `call`, with the CUDA name and text in the detail.
    pub(super) fn check(&self, call: &'static str, rc: i32) -> HipResult<()> {
        if rc == 0 {
            return Ok(());
        }
        let name = self
            .rt
            .error_name(rc)
            .unwrap_or_else(|| "cudaError_t".to_string());
        let text = self.rt.common.error_string(rc);
        let detail = match text {
            Some(text) => format!("{name} (CUDA error {rc}): {text}"),
            None => format!("{name} (CUDA error {rc})"),
        };
        Err(HipError::Call {
            call,
            code: hip_code(rc),
            detail: Some(detail),
        })
    }

    /// A driver-API failure of `call` (the driver's own strings are not part of our symbol set).
    pub(super) fn check_driver(&self, call: &'static str, rc: i32) -> HipResult<()> {
        if rc == 0 {
            return Ok(());
        }
        Err(driver_failed(Failed { call, rc }))
    }
}

/// The error of a failed driver call (the driver's own strings are not part of our symbol set).
pub(super) fn driver_failed(failed: Failed) -> HipError {
    let Failed { call, rc } = failed;
    HipError::Call {
        call,
        code: hip_code(rc),
        detail: Some(format!("CUresult {rc}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuda_codes_with_a_hip_twin_keep_their_number() {
        for code in [
            0, 1, 2, 3, 4, 17, 21, 35, 100, 101, 201, 302, 400, 500, 600, 700, 712, 713, 719, 801,
            999,
        ] {
            assert_eq!(hip_code(code), HipErrorCode(code), "CUDA {code}");
        }
        assert_eq!(hip_code(2), HipErrorCode::OUT_OF_MEMORY);
        assert_eq!(hip_code(201), HipErrorCode::INVALID_CONTEXT);
        assert_eq!(hip_code(400), HipErrorCode::INVALID_HANDLE);
        assert_eq!(hip_code(500), HipErrorCode::NOT_FOUND);
        assert_eq!(hip_code(600), HipErrorCode::NOT_READY);
    }

    #[test]
    fn cuda_only_codes_map_by_meaning_and_the_rest_are_unknown() {
        assert_eq!(hip_code(16), HipErrorCode::INVALID_VALUE);
        assert_eq!(hip_code(34), HipErrorCode::INSUFFICIENT_DRIVER);
        assert_eq!(hip_code(36), HipErrorCode::INSUFFICIENT_DRIVER);
        for code in [-1, 10, 46, 800, 802, 900, 1000, i32::MAX] {
            assert_eq!(hip_code(code), HipErrorCode::UNKNOWN, "CUDA {code}");
        }
    }
}
