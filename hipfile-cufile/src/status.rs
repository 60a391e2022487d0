//! The text of every `CUfileOpError`, for `cufileop_status_error`.
//!
//! cuFile's header defines `cufileop_status_error` as a `static inline` function, so NVIDIA's
//! library exports no such symbol and neither does this one: our `cufile.h` defines it from this
//! table (code, enumerator, text; the texts are this project's own words). Codes 5001 to 5038
//! are hipFile's codes of the same number (hipfile-core's `op_error_table!`); 5039 to 5049 are
//! cuFile's alone, answered by nothing in this library but named so a program can print them.
//! Any other value is "unknown cuFile error" ([`UNKNOWN_STATUS_TEXT`]).

/// `(code, enumerator, text)` of every `CUfileOpError`, success first, in numeric order.
pub const STATUS_TEXTS: &[(i32, &str, &str)] = &[
    (0, "CU_FILE_SUCCESS", "success"),
    (
        5001,
        "CU_FILE_DRIVER_NOT_INITIALIZED",
        "the cuFile driver is not open",
    ),
    (
        5002,
        "CU_FILE_DRIVER_INVALID_PROPS",
        "invalid driver property",
    ),
    (
        5003,
        "CU_FILE_DRIVER_UNSUPPORTED_LIMIT",
        "driver property value out of range",
    ),
    (
        5004,
        "CU_FILE_DRIVER_VERSION_MISMATCH",
        "storage driver version mismatch",
    ),
    (
        5005,
        "CU_FILE_DRIVER_VERSION_READ_ERROR",
        "cannot read the storage driver version",
    ),
    (
        5006,
        "CU_FILE_DRIVER_CLOSING",
        "the driver is shutting down",
    ),
    (
        5007,
        "CU_FILE_PLATFORM_NOT_SUPPORTED",
        "GPU direct storage is not supported on this platform",
    ),
    (
        5008,
        "CU_FILE_IO_NOT_SUPPORTED",
        "GPU direct storage is not supported for this file",
    ),
    (
        5009,
        "CU_FILE_DEVICE_NOT_SUPPORTED",
        "GPU direct storage is not supported on this GPU",
    ),
    (
        5010,
        "CU_FILE_NVFS_DRIVER_ERROR",
        "storage driver request failed",
    ),
    (
        5011,
        "CU_FILE_CUDA_DRIVER_ERROR",
        "GPU runtime error (see cu_err)",
    ),
    (5012, "CU_FILE_CUDA_POINTER_INVALID", "invalid GPU pointer"),
    (
        5013,
        "CU_FILE_CUDA_MEMORY_TYPE_INVALID",
        "unsupported memory type behind the pointer",
    ),
    (
        5014,
        "CU_FILE_CUDA_POINTER_RANGE_ERROR",
        "the range runs past the end of the allocation",
    ),
    (
        5015,
        "CU_FILE_CUDA_CONTEXT_MISMATCH",
        "GPU context mismatch",
    ),
    (
        5016,
        "CU_FILE_INVALID_MAPPING_SIZE",
        "access beyond the pinned size",
    ),
    (
        5017,
        "CU_FILE_INVALID_MAPPING_RANGE",
        "access beyond the mapped range",
    ),
    (5018, "CU_FILE_INVALID_FILE_TYPE", "unsupported file type"),
    (
        5019,
        "CU_FILE_INVALID_FILE_OPEN_FLAG",
        "unsupported file open flags",
    ),
    (
        5020,
        "CU_FILE_DIO_NOT_SET",
        "the descriptor is not open with O_DIRECT",
    ),
    (5022, "CU_FILE_INVALID_VALUE", "invalid argument"),
    (
        5023,
        "CU_FILE_MEMORY_ALREADY_REGISTERED",
        "the buffer is already registered",
    ),
    (
        5024,
        "CU_FILE_MEMORY_NOT_REGISTERED",
        "the buffer is not registered",
    ),
    (5025, "CU_FILE_PERMISSION_DENIED", "permission denied"),
    (
        5026,
        "CU_FILE_DRIVER_ALREADY_OPEN",
        "the driver is already open",
    ),
    (
        5027,
        "CU_FILE_HANDLE_NOT_REGISTERED",
        "the file handle is not registered",
    ),
    (
        5028,
        "CU_FILE_HANDLE_ALREADY_REGISTERED",
        "the file is already registered",
    ),
    (5029, "CU_FILE_DEVICE_NOT_FOUND", "no GPU found"),
    (5030, "CU_FILE_INTERNAL_ERROR", "internal error"),
    (
        5031,
        "CU_FILE_GETNEWFD_FAILED",
        "cannot open a new file descriptor",
    ),
    (
        5033,
        "CU_FILE_NVFS_SETUP_ERROR",
        "storage driver setup failed",
    ),
    (
        5034,
        "CU_FILE_IO_DISABLED",
        "GPU direct storage is disabled for this file",
    ),
    (
        5035,
        "CU_FILE_BATCH_SUBMIT_FAILED",
        "batch submission failed",
    ),
    (
        5036,
        "CU_FILE_GPU_MEMORY_PINNING_FAILED",
        "pinning GPU memory failed",
    ),
    (5037, "CU_FILE_BATCH_FULL", "the batch is full"),
    (
        5038,
        "CU_FILE_ASYNC_NOT_SUPPORTED",
        "stream-ordered IO is not supported",
    ),
    (
        5039,
        "CU_FILE_INTERNAL_BATCH_SETUP_ERROR",
        "batch setup failed inside the library; retry",
    ),
    (
        5040,
        "CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR",
        "batch submission failed inside the library; retry",
    ),
    (
        5041,
        "CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR",
        "batch status failed inside the library; retry",
    ),
    (
        5042,
        "CU_FILE_INTERNAL_BATCH_CANCEL_ERROR",
        "batch cancel failed inside the library; retry",
    ),
    (5043, "CU_FILE_NOMEM_ERROR", "out of memory; retry"),
    (5044, "CU_FILE_IO_ERROR", "IO error"),
    (
        5045,
        "CU_FILE_INTERNAL_BUF_REGISTER_ERROR",
        "buffer registration failed inside the library",
    ),
    (
        5046,
        "CU_FILE_HASH_OPR_ERROR",
        "lookup table operation failed",
    ),
    (5047, "CU_FILE_INVALID_CONTEXT_ERROR", "invalid context"),
    (
        5048,
        "CU_FILE_NVFS_INTERNAL_DRIVER_ERROR",
        "storage driver internal error",
    ),
    (
        5049,
        "CU_FILE_BATCH_NOCOMPAT_ERROR",
        "compatibility mode is off",
    ),
    (5050, "CU_FILE_IO_MAX_ERROR", "largest cuFile error code"),
];

/// The text of a value no entry of [`STATUS_TEXTS`] has.
pub const UNKNOWN_STATUS_TEXT: &str = "unknown cuFile error";

/// The text `cufileop_status_error` gives `status`.
pub fn status_text(status: i32) -> &'static str {
    STATUS_TEXTS
        .iter()
        .find(|(code, _, _)| *code == status)
        .map_or(UNKNOWN_STATUS_TEXT, |(_, _, text)| text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code of the core's table is listed under cuFile's number, and the table is cuFile's
    /// code set: success, 5001 to 5050 but 5021 and 5032.
    #[test]
    fn the_table_is_cufiles_code_set_and_covers_the_core() {
        let codes: Vec<i32> = STATUS_TEXTS.iter().map(|e| e.0).collect();
        let expected: Vec<i32> = std::iter::once(0)
            .chain((5001..=5050).filter(|c| *c != 5021 && *c != 5032))
            .collect();
        assert_eq!(codes, expected);
        for kind in hipfile_core::ErrorKind::ALL {
            if let Some(code) = kind.code() {
                assert!(codes.contains(&code), "{kind:?} ({code})");
            }
        }
        assert_eq!(status_text(5022), "invalid argument");
        assert_eq!(status_text(5021), UNKNOWN_STATUS_TEXT);
        assert_eq!(status_text(-5022), UNKNOWN_STATUS_TEXT);
    }

    /// The table as the C header's `switch` needs it (`cargo test -p hipfile-cufile --lib
    /// status -- --nocapture` prints it).
    #[test]
    fn print_the_table_for_the_header() {
        for (code, name, text) in STATUS_TEXTS {
            println!("{code}\t{name}\t{text}");
            assert!(name.starts_with("CU_FILE_") && !text.is_empty());
        }
    }
}
