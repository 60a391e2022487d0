/*
 * hipfile.h - C interface of hipfile-rs.
 *
 * SPDX-License-Identifier: MIT
 *
 * hipfile-rs is a Rust implementation of the hipFile GPU-direct storage
 * API. This header declares the same types, enumerators (with the same
 * values), struct layouts, macros and function prototypes as the upstream
 * hipFile header, so a program written for upstream hipFile compiles against
 * it and runs on libhipfile.so from hipfile-rs unchanged.
 *
 * Return conventions:
 *  - Most calls return a hipFileError_t pair: `err` is a hipFileOpError_t,
 *    and `hip_drv_err` carries the HIP runtime's error when `err` is
 *    hipFileHipDriverError.
 *  - hipFileRead/hipFileWrite return a ssize_t: the byte count on success,
 *    -1 with errno set for OS-level and argument errors, the negated
 *    hipError_t for GPU runtime failures, or the negated hipFileOpError_t
 *    value for library errors.
 *
 * Building without HIP headers:
 *  Define HIPFILE_NO_HIP_HEADERS before including this header to skip
 *  <hip/hip_runtime_api.h>. The header then declares the two HIP types it
 *  uses itself: `hipError_t` as `int` and `hipStream_t` as `void *`. Both
 *  match the HIP ABI (an int-sized enum and a pointer), so a program built
 *  this way (for example against the CUDA runtime, passing a cudaStream_t as
 *  hipStream_t) links against the same library. Do not define the macro in a
 *  translation unit that also includes HIP headers.
 */

#ifndef HIPFILE_H
#define HIPFILE_H

#ifdef HIPFILE_NO_HIP_HEADERS
typedef int hipError_t;
typedef void *hipStream_t;
#else
#include <hip/hip_runtime_api.h>
#endif

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>
#include <time.h>

#ifdef _WIN32
#include <winsock2.h>
#else
#include <sys/socket.h>
#endif

/* Symbols exported from libhipfile.so. */
#if defined(__GNUC__)
#define HIPFILE_API __attribute__((visibility("default")))
#else
#define HIPFILE_API
#endif

/* Discarding a hipFileError_t is a warning where the language allows it. */
#if defined(__cplusplus) && __cplusplus >= 201703L
#define HIPFILE_NODISCARD_ [[nodiscard]]
#elif !defined(__cplusplus) && defined(__STDC_VERSION__) && __STDC_VERSION__ >= 202311L
#define HIPFILE_NODISCARD_ [[nodiscard]]
#else
#define HIPFILE_NODISCARD_
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------- */
/* Version                                                                 */
/* ---------------------------------------------------------------------- */

/** API version this header describes (major). */
#define HIPFILE_VERSION_MAJOR 0
/** API version this header describes (minor). */
#define HIPFILE_VERSION_MINOR 2
/** API version this header describes (patch). */
#define HIPFILE_VERSION_PATCH 0

/* ---------------------------------------------------------------------- */
/* Portable types                                                          */
/* ---------------------------------------------------------------------- */

/** File offset: off_t on POSIX systems (64-bit on every supported target). */
#ifdef _WIN32
typedef __int64 hoff_t;
#else
typedef off_t hoff_t;
#endif

#ifdef _WIN32
#include <BaseTsd.h>
typedef SSIZE_T ssize_t;
#endif

/* ---------------------------------------------------------------------- */
/* Errors                                                                  */
/* ---------------------------------------------------------------------- */

/** Every library error code is HIPFILE_BASE_ERR plus a small number. */
#define HIPFILE_BASE_ERR 5000

/**
 * Library status codes. Zero is success; every other code lies above
 * HIPFILE_BASE_ERR. Codes 5021 and 5032 are not assigned.
 */
typedef enum hipFileOpError {
    hipFileSuccess                 = 0,                     /**< Success. */
    hipFileDriverNotInitialized    = HIPFILE_BASE_ERR + 1,  /**< Driver not open. */
    hipFileDriverInvalidProps      = HIPFILE_BASE_ERR + 2,  /**< Bad driver property. */
    hipFileDriverUnsupportedLimit  = HIPFILE_BASE_ERR + 3,  /**< Property value out of range. */
    hipFileDriverVersionMismatch   = HIPFILE_BASE_ERR + 4,  /**< Library/driver version mismatch. */
    hipFileDriverVersionReadError  = HIPFILE_BASE_ERR + 5,  /**< Driver version unreadable. */
    hipFileDriverClosing           = HIPFILE_BASE_ERR + 6,  /**< Driver closed or closing. */
    hipFilePlatformNotSupported    = HIPFILE_BASE_ERR + 7,  /**< Platform unsupported. */
    hipFileIONotSupported          = HIPFILE_BASE_ERR + 8,  /**< File or operation unsupported. */
    hipFileDeviceNotSupported      = HIPFILE_BASE_ERR + 9,  /**< GPU unsupported. */
    hipFileDriverError             = HIPFILE_BASE_ERR + 10, /**< Storage driver failure. */
    hipFileHipDriverError          = HIPFILE_BASE_ERR + 11, /**< HIP runtime failure; see hip_drv_err. */
    hipFileHipPointerInvalid       = HIPFILE_BASE_ERR + 12, /**< Pointer unknown to the GPU runtime. */
    hipFileHipMemoryTypeInvalid    = HIPFILE_BASE_ERR + 13, /**< Memory kind not usable. */
    hipFileHipPointerRangeError    = HIPFILE_BASE_ERR + 14, /**< Range leaves the allocation. */
    hipFileHipContextMismatch      = HIPFILE_BASE_ERR + 15, /**< GPU context mismatch. */
    hipFileInvalidMappingSize      = HIPFILE_BASE_ERR + 16, /**< Beyond the pinned buffer. */
    hipFileInvalidMappingRange     = HIPFILE_BASE_ERR + 17, /**< Beyond the mapped region. */
    hipFileInvalidFileType         = HIPFILE_BASE_ERR + 18, /**< File type unsupported. */
    hipFileInvalidFileOpenFlag     = HIPFILE_BASE_ERR + 19, /**< Open flags unsupported. */
    hipFileDIONotSet               = HIPFILE_BASE_ERR + 20, /**< O_DIRECT missing. */
    hipFileInvalidValue            = HIPFILE_BASE_ERR + 22, /**< Invalid argument. */
    hipFileMemoryAlreadyRegistered = HIPFILE_BASE_ERR + 23, /**< Buffer already registered. */
    hipFileMemoryNotRegistered     = HIPFILE_BASE_ERR + 24, /**< Buffer not registered. */
    hipFilePermissionDenied        = HIPFILE_BASE_ERR + 25, /**< Permission denied. */
    hipFileDriverAlreadyOpen       = HIPFILE_BASE_ERR + 26, /**< Driver open; not allowed now. */
    hipFileHandleNotRegistered     = HIPFILE_BASE_ERR + 27, /**< File handle not registered. */
    hipFileHandleAlreadyRegistered = HIPFILE_BASE_ERR + 28, /**< File already registered. */
    hipFileDeviceNotFound          = HIPFILE_BASE_ERR + 29, /**< No usable GPU. */
    hipFileInternalError           = HIPFILE_BASE_ERR + 30, /**< Library bug. */
    hipFileGetNewFDFailed          = HIPFILE_BASE_ERR + 31, /**< Could not open a new fd. */
    hipFileDriverSetupError        = HIPFILE_BASE_ERR + 33, /**< Driver setup failed. */
    hipFileIODisabled              = HIPFILE_BASE_ERR + 34, /**< GPU IO disabled for this file. */
    hipFileBatchSubmitFailed       = HIPFILE_BASE_ERR + 35, /**< Batch submission failed. */
    hipFileGPUMemoryPinningFailed  = HIPFILE_BASE_ERR + 36, /**< GPU memory pinning failed. */
    hipFileBatchFull               = HIPFILE_BASE_ERR + 37, /**< Batch queue full. */
    hipFileAsyncNotSupported       = HIPFILE_BASE_ERR + 38, /**< Async IO unsupported. */
    hipFileIOMaxError              = HIPFILE_BASE_ERR + 39  /**< One past the last code. */
} hipFileOpError_t;

/** Human-readable text for a status code; never NULL. */
HIPFILE_API
const char *hipFileGetOpErrorString(hipFileOpError_t status);

/** Status of a call: library code plus, for hipFileHipDriverError, HIP's code. */
typedef struct HIPFILE_NODISCARD_ hipFileError {
    hipFileOpError_t err;         /**< Library status. */
    hipError_t       hip_drv_err; /**< HIP runtime status. */
} hipFileError_t;

/**
 * True when `code` (possibly negated, as from hipFileRead) is a library error.
 * Both macros take an int or a hipFileOpError_t (converted to int first).
 */
#define IS_HIPFILE_ERR(code) (abs((int)(code)) > HIPFILE_BASE_ERR)

/** Text for a library error code, possibly negated. */
#define HIPFILE_ERRSTR(code) hipFileGetOpErrorString((hipFileOpError_t)abs((int)(code)))

/** True when a hipFileError_t reports a HIP runtime failure. */
#ifndef IS_HIP_DRV_ERR
#define IS_HIP_DRV_ERR(status) ((status).err == hipFileHipDriverError)
#endif

/** The hipError_t inside a hipFileError_t. */
#ifndef HIP_DRV_ERR
#define HIP_DRV_ERR(status) ((status).hip_drv_err)
#endif

/* ---------------------------------------------------------------------- */
/* Driver properties                                                       */
/* ---------------------------------------------------------------------- */

/** Bit positions in hipFileDriverProps_t.nvfs.driver_status_flags. 10 is reserved. */
typedef enum hipFileDriverStatusFlags {
    hipFileLustreSupported       = 0,  /**< Lustre. */
    hipFileWekaFSSupported       = 1,  /**< WekaFS. */
    hipFileNFSSupported          = 2,  /**< NFS. */
    hipFileGPFSSupported         = 3,  /**< GPFS / Storage Scale. */
    hipFileNVMeSupported         = 4,  /**< Local NVMe. */
    hipFileNVMeoFSupported       = 5,  /**< NVMe over fabrics. */
    hipFileSCSISupported         = 6,  /**< SCSI. */
    hipFileScaleFluxCSDSupported = 7,  /**< ScaleFlux CSD. */
    hipFileNVMeshSupported       = 8,  /**< NVMesh. */
    hipFileBeeGFSSupported       = 9,  /**< BeeGFS. */
    hipFileNVMeP2PSupported      = 11, /**< NVMe P2P. */
    hipFileScatefsSupported      = 12  /**< ScateFS. */
} hipFileDriverStatusFlags_t;

/** Bit positions in hipFileDriverProps_t.nvfs.driver_control_flags. */
typedef enum hipFileDriverControlFlags {
    hipFileUsePollMode     = 0, /**< Poll for completion. */
    hipFileAllowCompatMode = 1  /**< Allow the staged (compat) path. */
} hipFileDriverControlFlags_t;

/** Bit positions in hipFileDriverProps_t.feature_flags. */
typedef enum hipFileFeatureFlags {
    hipFileDynRoutingSupported = 0, /**< Dynamic routing. */
    hipFileBatchIOSupported    = 1, /**< Batch API. */
    hipFileStreamsSupported    = 2, /**< Stream (async) API. */
    hipFileParallelIOSupported = 3  /**< Parallel IO. */
} hipFileFeatureFlags_t;

/** Driver configuration as reported by hipFileDriverGetProperties. Sizes in KiB. */
typedef struct hipFileDriverProps {
    struct {
        unsigned major_version;        /**< Storage driver major version. */
        unsigned minor_version;        /**< Storage driver minor version. */
        uint64_t poll_thresh_size;     /**< Largest IO (KiB) that polls in poll mode. */
        uint64_t max_direct_io_size;   /**< Largest single IO chunk (KiB). */
        unsigned driver_status_flags;  /**< Bits from hipFileDriverStatusFlags_t. */
        unsigned driver_control_flags; /**< Bits from hipFileDriverControlFlags_t. */
    } nvfs;                            /**< Storage driver settings. */
    unsigned feature_flags;              /**< Bits from hipFileFeatureFlags_t. */
    uint64_t max_device_cache_size;      /**< GPU memory for bounce buffers (KiB). */
    uint64_t per_buffer_cache_size;      /**< Size of one bounce buffer (KiB). */
    uint64_t max_device_pinned_mem_size; /**< Pinnable GPU memory (KiB). */
    unsigned max_batch_io_count;         /**< Most requests in one batch. */
    unsigned max_batch_io_timeout_msecs; /**< Batch timeout (ms). */
} hipFileDriverProps_t;

/* ---------------------------------------------------------------------- */
/* Userspace RDMA                                                          */
/* ---------------------------------------------------------------------- */

/** RDMA description handed to hipFileFSOps_t read/write callbacks. */
typedef struct hipFileRDMAInfo {
    int         version;  /**< RDMA API version. */
    int         desc_len; /**< Length of desc_str. */
    const char *desc_str; /**< Description of the RDMA setup. */
} hipFileRDMAInfo_t;

/** RDMA flag: memory is registered. */
#define HIPFILE_RDMA_REGISTER 1
/** RDMA flag: relaxed ordering allowed. */
#define HIPFILE_RDMA_RELAXED_ORDERING (1 << 1)

/* ---------------------------------------------------------------------- */
/* File handles                                                            */
/* ---------------------------------------------------------------------- */

/** Callbacks of a userspace (RDMA) filesystem. Only read for hipFileHandleTypeUserspaceFS. */
typedef struct hipFileFSOps {
    /** Filesystem type name; NULL means discover it. */
    const char *(*fs_type)(void *handle);
    /** Host RDMA addresses; NULL means any. */
    int (*getRDMADeviceList)(void *handle, struct sockaddr **hostaddrs);
    /** Priority of an RDMA device; -1 means no preference. */
    int (*getRDMADevicePriority)(void *handle, char *, size_t, hoff_t, struct sockaddr *hostaddr);
    /** Read callback; NULL means use the kernel VFS. */
    ssize_t (*read)(void *handle, char *, size_t, hoff_t, hipFileRDMAInfo_t *);
    /** Write callback; NULL means use the kernel VFS. */
    ssize_t (*write)(void *handle, const char *, size_t, hoff_t, hipFileRDMAInfo_t *);
} hipFileFSOps_t;

/** Kind of OS handle in a hipFileDescr_t. */
typedef enum hipFileFileHandleType {
    hipFileHandleTypeOpaqueFD    = 1, /**< POSIX fd in handle.fd. */
    hipFileHandleTypeOpaqueWin32 = 2, /**< Windows HANDLE in handle.hFile. */
    hipFileHandleTypeUserspaceFS = 3  /**< fd plus fs_ops callbacks. */
} hipFileFileHandleType_t;

/**
 * Describes a file to hipFileHandleRegister. For hipFileHandleTypeOpaqueFD
 * only `type` and `handle.fd` are read; `fs_ops` may be left uninitialised.
 */
typedef struct hipFileDescr {
    hipFileFileHandleType_t type; /**< Which union member is valid. */
    union {
        int   fd;                 /**< POSIX file descriptor. */
        void *hFile;              /**< Windows HANDLE. */
    } handle;                     /**< The OS handle. */
    const hipFileFSOps_t *fs_ops; /**< Userspace filesystem callbacks. */
} hipFileDescr_t;

/** Opaque handle of a registered file. */
typedef void *hipFileHandle_t;

/**
 * Register an open file for GPU IO. Opens the driver (refcount +1) once the arguments check out.
 * A descriptor that names no open file (-1, closed) gives hipFileInternalError, as upstream.
 *
 * The application's descriptor stays the authority for every request, as in upstream, which
 * reads and writes through it: keep it open while the handle is in use. Before each
 * hipFileRead/hipFileWrite the library checks it and answers -1 with errno EBADF when it was
 * closed, when its number now names another file, or when it was not opened for the direction
 * (O_PATH allows neither; O_RDONLY no writes; O_WRONLY no reads). On a descriptor with O_APPEND,
 * hipFileWrite appends, as Linux pwrite(2) does there: the file offset is not used and bytes
 * already in the file are never overwritten (such writes are staged, and appending requests of
 * one process to one file land whole; with compat mode disallowed they are refused).
 */
HIPFILE_API
hipFileError_t hipFileHandleRegister(hipFileHandle_t *fh, hipFileDescr_t *descr);

/** Forget a registered file. The caller still owns and closes the fd. */
HIPFILE_API
void hipFileHandleDeregister(hipFileHandle_t fh);

/** Register GPU memory [buffer_base, buffer_base+length) for IO. Opens the driver (refcount +1). */
HIPFILE_API
hipFileError_t hipFileBufRegister(const void *buffer_base, size_t length, int flags);

/** Deregister memory registered with hipFileBufRegister. */
HIPFILE_API
hipFileError_t hipFileBufDeregister(const void *buffer_base);

/**
 * Read `size` bytes at `file_offset` into buffer_base + buffer_offset.
 * Returns bytes read, -1 with errno, or a negated hipFileOpError_t.
 */
HIPFILE_API
ssize_t hipFileRead(hipFileHandle_t fh, void *buffer_base, size_t size, hoff_t file_offset,
                    hoff_t buffer_offset);

/**
 * Write `size` bytes from buffer_base + buffer_offset at `file_offset`.
 * Returns bytes written, -1 with errno, or a negated hipFileOpError_t.
 */
HIPFILE_API
ssize_t hipFileWrite(hipFileHandle_t fh, const void *buffer_base, size_t size, hoff_t file_offset,
                     hoff_t buffer_offset);

/* ---------------------------------------------------------------------- */
/* Driver lifetime and settings                                            */
/* ---------------------------------------------------------------------- */

/** Open the driver, or add a reference if it is open. */
HIPFILE_API
hipFileError_t hipFileDriverOpen(void);

/** Drop a reference; the last one releases every file, buffer and batch. */
HIPFILE_API
hipFileError_t hipFileDriverClose(void);

/** Current driver reference count (0 when closed). */
HIPFILE_API
int64_t hipFileUseCount(void);

/** Fill `props` with the driver's configuration. */
HIPFILE_API
hipFileError_t hipFileDriverGetProperties(hipFileDriverProps_t *props);

/** Turn poll mode on or off; threshold in KiB. */
HIPFILE_API
hipFileError_t hipFileDriverSetPollMode(bool poll, size_t poll_threshold_size);

/** Set the largest single IO chunk (KiB). */
HIPFILE_API
hipFileError_t hipFileDriverSetMaxDirectIOSize(size_t max_direct_io_size);

/** Set the GPU memory limit for bounce buffers (KiB). */
HIPFILE_API
hipFileError_t hipFileDriverSetMaxCacheSize(size_t max_cache_size);

/** Set the pinnable GPU memory limit (KiB). */
HIPFILE_API
hipFileError_t hipFileDriverSetMaxPinnedMemSize(size_t max_pinned_size);

/* ---------------------------------------------------------------------- */
/* Batch IO                                                                */
/* ---------------------------------------------------------------------- */

/** Direction of one batch request. */
typedef enum hipFileOpcode {
    hipFileBatchRead  = 0, /**< File to GPU. */
    hipFileBatchWrite = 1  /**< GPU to file. */
} hipFileOpcode_t;

/** State of one batch request (single bits, so they can be combined as masks). */
typedef enum hipFileStatus {
    hipFileWaiting  = 1 << 0, /**< Not yet accepted. */
    hipFilePending  = 1 << 1, /**< Queued. */
    hipFileInvalid  = 1 << 2, /**< Rejected. */
    hipFileCanceled = 1 << 3, /**< Canceled. */
    hipFileComplete = 1 << 4, /**< Done. */
    hipFileTimeout  = 1 << 5, /**< Timed out. */
    hipFileFailed   = 1 << 6  /**< Failed. */
} hipFileStatus_t;

/** Kind of batch request. */
typedef enum hipFileBatchMode {
    hipFileBatch = 1 /**< Plain read/write request. */
} hipFileBatchMode_t;

/** One batch request. */
typedef struct hipFileIOParams {
    hipFileBatchMode_t mode; /**< Request kind. */
    union {
        struct {
            void   *devPtr_base;   /**< GPU buffer base. */
            int64_t file_offset;   /**< Offset in the file. */
            int64_t devPtr_offset; /**< Offset in the buffer. */
            size_t  size;          /**< Bytes to move. */
        } batch;                   /**< Read/write arguments. */
    } u;                           /**< Arguments by mode. */
    hipFileHandle_t fh;            /**< Registered file. */
    hipFileOpcode_t opcode;        /**< Direction. */
    void           *cookie;        /**< Caller's tag, echoed in hipFileIOEvents_t. */
} hipFileIOParams_t;

/** Completion record of one batch request. */
typedef struct hipFileIOEvents {
    void           *cookie; /**< The request's cookie. */
    hipFileStatus_t status; /**< Final or current state. */
    size_t          ret;    /**< Bytes moved, or a negative error cast to size_t. */
} hipFileIOEvents_t;

/** Opaque batch handle. */
typedef void *hipFileBatchHandle_t;

/** Create a batch that holds up to `max_nr` requests. */
HIPFILE_API
hipFileError_t hipFileBatchIOSetUp(hipFileBatchHandle_t *batch_idp, unsigned max_nr);

/** Submit `nr` requests; `flags` is reserved (0). */
HIPFILE_API
hipFileError_t hipFileBatchIOSubmit(hipFileBatchHandle_t batch_idp, unsigned nr, hipFileIOParams_t *iocbp,
                                    unsigned flags);

/** Collect between `min_nr` and `*nr` completions, waiting at most `timeout` (NULL: forever). */
HIPFILE_API
hipFileError_t hipFileBatchIOGetStatus(hipFileBatchHandle_t batch_idp, unsigned min_nr, unsigned *nr,
                                       hipFileIOEvents_t *iocbp, struct timespec *timeout);

/** Cancel the batch's outstanding requests. */
HIPFILE_API
hipFileError_t hipFileBatchIOCancel(hipFileBatchHandle_t batch_idp);

/** Release a batch handle. */
HIPFILE_API
void hipFileBatchIODestroy(hipFileBatchHandle_t batch_idp);

/* ---------------------------------------------------------------------- */
/* Stream (async) IO                                                       */
/* ---------------------------------------------------------------------- */

/** Stream flag: buffer offset known at submission. */
#define HIPFILE_STREAM_FIXED_BUF_OFFSET 1
/** Stream flag: file offset known at submission. */
#define HIPFILE_STREAM_FIXED_FILE_OFFSET (1 << 1)
/** Stream flag: size known at submission. */
#define HIPFILE_STREAM_FIXED_FILE_SIZE (1 << 2)
/** Stream flag: offsets and size are 4 KiB aligned. */
#define HIPFILE_STREAM_PAGE_ALIGNED_INPUTS (1 << 3)
/** All stream flag bits. */
#define HIPFILE_STREAM_FLAGS_MASK 0xf

/**
 * Enqueue a read on `stream`. Arguments are read through their pointers when
 * the stream reaches the operation; the result lands in *bytes_read_p.
 */
HIPFILE_API
hipFileError_t hipFileReadAsync(hipFileHandle_t fh, void *buffer_base, size_t *size_p, hoff_t *file_offset_p,
                                hoff_t *buffer_offset_p, ssize_t *bytes_read_p, hipStream_t stream);

/** Enqueue a write on `stream`; see hipFileReadAsync. */
HIPFILE_API
hipFileError_t hipFileWriteAsync(hipFileHandle_t fh, void *buffer_base, size_t *size_p, hoff_t *file_offset_p,
                                 hoff_t *buffer_offset_p, ssize_t *bytes_written_p, hipStream_t stream);

/** Prepare `stream` for async IO; `flags` are HIPFILE_STREAM_* bits. */
HIPFILE_API
hipFileError_t hipFileStreamRegister(hipStream_t stream, unsigned flags);

/** Release what hipFileStreamRegister set up for `stream`. */
HIPFILE_API
hipFileError_t hipFileStreamDeregister(hipStream_t stream);

/* ---------------------------------------------------------------------- */
/* Library version                                                         */
/* ---------------------------------------------------------------------- */

/** Version of the loaded library; any pointer may be NULL. */
HIPFILE_API
hipFileError_t hipFileGetVersion(unsigned *major, unsigned *minor, unsigned *patch);

/* ---------------------------------------------------------------------- */
/* Parameters (set while the driver is closed, applied at open)            */
/* ---------------------------------------------------------------------- */

/** size_t-valued parameters. */
typedef enum hipFileSizeTConfigParameter_t {
    hipFileParamProfileStats,                       /**< Stats level. */
    hipFileParamExecutionMaxIOQueueDepth,           /**< IO queue depth. */
    hipFileParamExecutionMaxIOThreads,              /**< IO threads. */
    hipFileParamExecutionMinIOThresholdSizeKB,      /**< Smallest IO split across threads (KiB). */
    hipFileParamExecutionMaxRequestParallelism,     /**< Parallel pieces per request. */
    hipFileParamPropertiesMaxDirectIOSizeKB,        /**< Largest IO chunk (KiB). */
    hipFileParamPropertiesMaxDeviceCacheSizeKB,     /**< Bounce buffer memory (KiB). */
    hipFileParamPropertiesPerBufferCacheSizeKB,     /**< One bounce buffer (KiB). */
    hipFileParamPropertiesMaxDevicePinnedMemSizeKB, /**< Pinnable memory (KiB). */
    hipFileParamPropertiesIOBatchsize,              /**< Batch size. */
    hipFileParamPollthresholdSizeKB,                /**< Poll threshold (KiB). */
    hipFileParamPropertiesBatchIOTimeoutMs          /**< Batch timeout (ms). */
} hipFileSizeTConfigParameter_t;

/** bool-valued parameters. */
typedef enum hipFileBoolConfigParameter_t {
    hipFileParamPropertiesUsePollMode,       /**< Poll mode. */
    hipFileParamPropertiesAllowCompatMode,   /**< Allow compat (staged) mode. */
    hipFileParamForceCompatMode,             /**< Force compat mode. */
    hipFileParamFsMiscApiCheckAggressive,    /**< Extra argument checks. */
    hipFileParamExecutionParallelIO,         /**< Parallel IO. */
    hipFileParamProfileNvtx,                 /**< NVTX ranges. */
    hipFileParamPropertiesAllowSystemMemory, /**< Allow host memory buffers. */
    hipFileParamUsePcip2pdma,                /**< PCI P2P DMA. */
    hipFileParamPreferIOUring,               /**< Prefer io_uring. */
    hipFileParamForceOdirectMode,            /**< Force O_DIRECT. */
    hipFileParamSkipTopologyDetection,       /**< Skip topology probing. */
    hipFileParamStreamMemopsBypass           /**< Bypass stream memops. */
} hipFileBoolConfigParameter_t;

/** String-valued parameters. */
typedef enum hipFileStringConfigParameter_t {
    hipFileParamLoggingLevel,   /**< Log level. */
    hipFileParamEnvLogfilePath, /**< Log file path. */
    hipFileParamLogDir          /**< Log directory. */
} hipFileStringConfigParameter_t;

/** Read a size_t parameter (the value in use when open, else the staged one). */
HIPFILE_API
hipFileError_t hipFileGetParameterSizeT(hipFileSizeTConfigParameter_t param, size_t *value);

/** Read a bool parameter. */
HIPFILE_API
hipFileError_t hipFileGetParameterBool(hipFileBoolConfigParameter_t param, bool *value);

/** Copy a string parameter into desc_str (capacity `len` bytes). */
HIPFILE_API
hipFileError_t hipFileGetParameterString(hipFileStringConfigParameter_t param, char *desc_str, int len);

/** Stage a size_t parameter; fails with hipFileDriverAlreadyOpen while open. */
HIPFILE_API
hipFileError_t hipFileSetParameterSizeT(hipFileSizeTConfigParameter_t param, size_t value);

/** Stage a bool parameter; fails with hipFileDriverAlreadyOpen while open. */
HIPFILE_API
hipFileError_t hipFileSetParameterBool(hipFileBoolConfigParameter_t param, bool value);

/** Stage a string parameter; fails with hipFileDriverAlreadyOpen while open. */
HIPFILE_API
hipFileError_t hipFileSetParameterString(hipFileStringConfigParameter_t param, const char *desc_str);

/* ---------------------------------------------------------------------- */
/* Statistics                                                              */
/* ---------------------------------------------------------------------- */

/** Capacity of hipFileStatsLevel3_t.per_gpu_stats. */
#define HIPFILE_MAX_GPUS 16
/** Bytes in hipFilePerGpuStats_t.uuid. */
#define HIPFILE_GPU_UUID_LEN 16

/** Success and failure counts of one operation. */
typedef struct hipFileOpCounter {
    uint64_t ok;  /**< Successes. */
    uint64_t err; /**< Failures. */
} hipFileOpCounter_t;

/** Level 1 statistics: operation counters, bytes, latency. Untracked fields read 0. */
typedef struct hipFileStatsLevel1 {
    hipFileOpCounter_t read_ops;                  /**< Reads. */
    hipFileOpCounter_t write_ops;                 /**< Writes. */
    hipFileOpCounter_t hdl_register_ops;          /**< File registrations. */
    hipFileOpCounter_t hdl_deregister_ops;        /**< File deregistrations. */
    hipFileOpCounter_t buf_register_ops;          /**< Buffer registrations. */
    hipFileOpCounter_t buf_deregister_ops;        /**< Buffer deregistrations. */
    uint64_t           read_bytes;                /**< Bytes read. */
    uint64_t           write_bytes;               /**< Bytes written. */
    uint64_t           read_bw_bytes_per_sec;     /**< Read bandwidth. */
    uint64_t           write_bw_bytes_per_sec;    /**< Write bandwidth. */
    uint64_t           read_lat_avg_us;           /**< Mean read latency (us). */
    uint64_t           write_lat_avg_us;          /**< Mean write latency (us). */
    uint64_t           read_ops_per_sec;          /**< Read rate. */
    uint64_t           write_ops_per_sec;         /**< Write rate. */
    uint64_t           read_lat_sum_us;           /**< Total read latency (us). */
    uint64_t           write_lat_sum_us;          /**< Total write latency (us). */
    hipFileOpCounter_t batch_submit_ops;          /**< Batch submits. */
    hipFileOpCounter_t batch_complete_ops;        /**< Batch completions. */
    hipFileOpCounter_t batch_setup_ops;           /**< Batch setups. */
    hipFileOpCounter_t batch_cancel_ops;          /**< Batch cancels. */
    hipFileOpCounter_t batch_destroy_ops;         /**< Batch destroys. */
    hipFileOpCounter_t batch_enqueued_ops;        /**< Batch requests enqueued. */
    hipFileOpCounter_t batch_posix_enqueued_ops;  /**< Batch requests enqueued (POSIX). */
    hipFileOpCounter_t batch_processed_ops;       /**< Batch requests processed. */
    hipFileOpCounter_t batch_posix_processed_ops; /**< Batch requests processed (POSIX). */
    hipFileOpCounter_t batch_nvfs_submit_ops;     /**< Batch submits (driver). */
    hipFileOpCounter_t batch_p2p_submit_ops;      /**< Batch submits (P2P). */
    hipFileOpCounter_t batch_aio_submit_ops;      /**< Batch submits (AIO). */
    hipFileOpCounter_t batch_iouring_submit_ops;  /**< Batch submits (io_uring). */
    hipFileOpCounter_t batch_mixed_io_submit_ops; /**< Batch submits (mixed). */
    hipFileOpCounter_t batch_total_submit_ops;    /**< Batch submits (all). */
    uint64_t           batch_read_bytes;            /**< Batch bytes read. */
    uint64_t           batch_write_bytes;           /**< Batch bytes written. */
    uint64_t           batch_read_bw_bytes;         /**< Batch read bandwidth. */
    uint64_t           batch_write_bw_bytes;        /**< Batch write bandwidth. */
    uint64_t           batch_submit_lat_avg_us;     /**< Mean batch submit latency (us). */
    uint64_t           batch_completion_lat_avg_us; /**< Mean batch completion latency (us). */
    uint64_t           batch_submit_ops_per_sec;    /**< Batch submit rate. */
    uint64_t           batch_complete_ops_per_sec;  /**< Batch completion rate. */
    uint64_t           batch_submit_lat_sum_us;     /**< Total batch submit latency (us). */
    uint64_t           batch_completion_lat_sum_us; /**< Total batch completion latency (us). */
    uint64_t           last_batch_read_bytes;       /**< Bytes read by the last batch. */
    uint64_t           last_batch_write_bytes;      /**< Bytes written by the last batch. */
} hipFileStatsLevel1_t;

/** Level 2 statistics: level 1 plus IO size histograms. */
typedef struct hipFileStatsLevel2 {
    hipFileStatsLevel1_t basic;                  /**< Level 1. */
    uint64_t             read_size_kb_hist[32];  /**< Read sizes (KiB buckets). */
    uint64_t             write_size_kb_hist[32]; /**< Write sizes (KiB buckets). */
} hipFileStatsLevel2_t;

/** Per-GPU counters of level 3 statistics. */
typedef struct hipFilePerGpuStats {
    char     uuid[HIPFILE_GPU_UUID_LEN]; /**< GPU UUID. */
    uint64_t read_bytes;                 /**< Bytes read. */
    uint64_t read_bw_bytes_per_sec;      /**< Read bandwidth. */
    uint64_t read_utilization;           /**< Read utilisation (%). */
    uint64_t read_duration_us;           /**< Time reading (us). */
    uint64_t n_total_reads;              /**< Reads, all paths. */
    uint64_t n_p2p_reads;                /**< Reads by P2P DMA. */
    uint64_t n_nvfs_reads;               /**< Reads by the direct path. */
    uint64_t n_posix_reads;              /**< Reads by the staged path. */
    uint64_t n_unaligned_reads;          /**< Unaligned reads. */
    uint64_t n_dr_reads;                 /**< Dynamic-routing reads. */
    uint64_t n_sparse_regions;           /**< Sparse regions. */
    uint64_t n_inline_regions;           /**< Inline regions. */
    uint64_t n_reads_err;                /**< Failed reads. */
    uint64_t write_bytes;                /**< Bytes written. */
    uint64_t write_bw_bytes_per_sec;     /**< Write bandwidth. */
    uint64_t write_utilization;          /**< Write utilisation (%). */
    uint64_t write_duration_us;          /**< Time writing (us). */
    uint64_t n_total_writes;             /**< Writes, all paths. */
    uint64_t n_p2p_writes;               /**< Writes by P2P DMA. */
    uint64_t n_nvfs_writes;              /**< Writes by the direct path. */
    uint64_t n_posix_writes;             /**< Writes by the staged path. */
    uint64_t n_unaligned_writes;         /**< Unaligned writes. */
    uint64_t n_dr_writes;                /**< Dynamic-routing writes. */
    uint64_t n_writes_err;               /**< Failed writes. */
    uint64_t n_mmap;                     /**< Buffer registrations. */
    uint64_t n_mmap_ok;                  /**< Successful buffer registrations. */
    uint64_t n_mmap_err;                 /**< Failed buffer registrations. */
    uint64_t n_mmap_free;                /**< Buffer deregistrations. */
    uint64_t reg_bytes;                  /**< Bytes registered. */
} hipFilePerGpuStats_t;

/** Level 3 statistics: level 2 plus per-GPU counters. */
typedef struct hipFileStatsLevel3 {
    hipFileStatsLevel2_t detailed;                        /**< Level 2. */
    uint32_t             num_gpus;                        /**< Valid entries in per_gpu_stats. */
    hipFilePerGpuStats_t per_gpu_stats[HIPFILE_MAX_GPUS]; /**< Per-GPU counters. */
} hipFileStatsLevel3_t;

/** Fill level 1 statistics. */
HIPFILE_API
hipFileError_t hipFileGetStatsL1(hipFileStatsLevel1_t *stats);

/** Fill level 2 statistics. */
HIPFILE_API
hipFileError_t hipFileGetStatsL2(hipFileStatsLevel2_t *stats);

/** Fill level 3 statistics. */
HIPFILE_API
hipFileError_t hipFileGetStatsL3(hipFileStatsLevel3_t *stats);

/* ------------------------------------------------------------------------
 * hipfile-rs extensions: NOT part of upstream hipFile.
 *
 * The declarations below exist only in hipfile-rs's libhipfile.so. A program
 * that calls them does not link against upstream's library; test for them
 * with HIPFILE_RS_EXTENSIONS.
 * ------------------------------------------------------------------------ */

/** Defined by hipfile-rs's header: the extensions below are declared. */
#define HIPFILE_RS_EXTENSIONS 1

/**
 * How the requests of one file handle are served (hipfile-rs extension).
 * Applies to hipFileRead/Write, batch entries and stream-ordered ops alike.
 */
typedef enum hipFileIoPolicy {
    /** The direct path where it can, the staged path where it cannot (default). */
    hipFileIoPolicyFallback   = 0,
    /** The direct path or an error: a request no direct backend runs fails with
     *  hipFileIONotSupported (-hipFileIONotSupported from hipFileRead/Write) and
     *  moves no byte; nothing is staged through host memory. */
    hipFileIoPolicyDirectOnly = 1
} hipFileIoPolicy_t;

/** Direct (P2P) mechanisms, as bits (hipfile-rs extension). */
#define hipFileP2PMechanismAmdKfd   0x1u /**< AMD KFD direct IO (hipAmdFileRead/Write). */
#define hipFileP2PMechanismNvidiaFs 0x2u /**< NVIDIA GPUDirect Storage through nvidia-fs. */
#define hipFileP2PMechanismSim      0x4u /**< The simulated GPU's P2P driver. */
#define hipFileP2PMechanismAll      0x7u /**< Every mechanism (the default). */

/**
 * hipfile-rs extension. Set the IO policy of a registered file handle, for the
 * requests submitted from now on. Returns hipFileInvalidValue for a NULL handle
 * or a value outside hipFileIoPolicy_t, hipFileHandleNotRegistered for a handle
 * not registered (or deregistered), hipFileDriverNotInitialized when the
 * driver is closed.
 */
HIPFILE_API
hipFileError_t hipFileHandleSetIoPolicy(hipFileHandle_t fh, hipFileIoPolicy_t policy);

/**
 * hipfile-rs extension. The IO policy of a registered file handle. Returns
 * hipFileInvalidValue for a NULL handle or NULL policy, otherwise as
 * hipFileHandleSetIoPolicy.
 */
HIPFILE_API
hipFileError_t hipFileHandleGetIoPolicy(hipFileHandle_t fh, hipFileIoPolicy_t *policy);

/**
 * hipfile-rs extension. Allow only the direct mechanisms whose bits are set
 * (hipFileP2PMechanism*): when the platform's mechanism is not among them,
 * the direct path declines every request, which then takes the staged path or
 * fails per its handle's hipFileIoPolicy_t. On an open driver it holds from
 * the next request on; on a closed one from its next open. Unknown bits are
 * hipFileInvalidValue.
 */
HIPFILE_API
hipFileError_t hipFileDriverSetP2PMechanisms(unsigned mechanisms);

/** hipfile-rs extension. The allowed direct mechanisms; NULL is hipFileInvalidValue. */
HIPFILE_API
hipFileError_t hipFileDriverGetP2PMechanisms(unsigned *mechanisms);

#ifdef __cplusplus
}
#endif

#undef HIPFILE_NODISCARD_

#endif /* HIPFILE_H */
