/*
 * cufile.h - the cuFile C interface of hipfile-rs (libcufile.so.0).
 *
 * SPDX-License-Identifier: MIT
 *
 * Declarations written for hipfile-rs with the names, values, struct layouts
 * and prototypes of cuFile 1.15 (CUDA 13.0), plus cuFile 1.16's P2P flag
 * calls, so that a program written for cuFile compiles against this header
 * unchanged and runs on hipfile-rs's libcufile.so.0. hipfile-rs's own additions (a file
 * handle's IO policy) come last, marked as extensions.
 *
 * Return conventions:
 *  - Most calls return a CUfileError_t pair: `err` is a CUfileOpError, and
 *    `cu_err` carries the CUDA driver's code when `err` is
 *    CU_FILE_CUDA_DRIVER_ERROR.
 *  - cuFileRead/cuFileWrite return a ssize_t: the bytes moved, -1 with errno
 *    set for OS-level and argument errors, or a negated CUfileOpError.
 *
 * CUDA types: the header needs only CUresult and CUstream from CUDA. When
 * <cuda.h> was included first, or is on the include path (then this header
 * includes it, as cuFile's does), its types are used; otherwise the header
 * declares CUresult as `int` (the size of CUDA's enum) and CUstream as
 * CUDA's pointer to `struct CUstream_st`, so that it builds on a machine
 * without CUDA's headers.
 */

#ifndef HIPFILE_CUFILE_H
#define HIPFILE_CUFILE_H

#include <arpa/inet.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

/* __cuda_cuda_h__ is the include guard of CUDA's <cuda.h>. Where CUDA's headers are on the include
 * path, <cuda.h> is included, as cuFile's header does, so that a program may include <cuda.h>
 * after this header and may use what cuFile's header brings in (CUDA_SUCCESS, ...); define
 * HIPFILE_CUFILE_NO_CUDA_H to leave it out. */
#if !defined(__cuda_cuda_h__) && !defined(HIPFILE_CUFILE_NO_CUDA_H) && defined(__has_include)
#if __has_include(<cuda.h>)
#include <cuda.h>
#endif
#endif
#ifndef __cuda_cuda_h__
typedef int                CUresult;
typedef struct CUstream_st *CUstream;
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------- */
/* Errors                                                                  */
/* ---------------------------------------------------------------------- */

/* Every library error code is CUFILEOP_BASE_ERR plus a small number. */
#define CUFILEOP_BASE_ERR 5000

/* Library status codes; 5021 and 5032 are not assigned. */
typedef enum CUfileOpError {
    CU_FILE_SUCCESS                        = 0,
    CU_FILE_DRIVER_NOT_INITIALIZED         = CUFILEOP_BASE_ERR + 1,
    CU_FILE_DRIVER_INVALID_PROPS           = CUFILEOP_BASE_ERR + 2,
    CU_FILE_DRIVER_UNSUPPORTED_LIMIT       = CUFILEOP_BASE_ERR + 3,
    CU_FILE_DRIVER_VERSION_MISMATCH        = CUFILEOP_BASE_ERR + 4,
    CU_FILE_DRIVER_VERSION_READ_ERROR      = CUFILEOP_BASE_ERR + 5,
    CU_FILE_DRIVER_CLOSING                 = CUFILEOP_BASE_ERR + 6,
    CU_FILE_PLATFORM_NOT_SUPPORTED         = CUFILEOP_BASE_ERR + 7,
    CU_FILE_IO_NOT_SUPPORTED               = CUFILEOP_BASE_ERR + 8,
    CU_FILE_DEVICE_NOT_SUPPORTED           = CUFILEOP_BASE_ERR + 9,
    CU_FILE_NVFS_DRIVER_ERROR              = CUFILEOP_BASE_ERR + 10,
    CU_FILE_CUDA_DRIVER_ERROR              = CUFILEOP_BASE_ERR + 11,
    CU_FILE_CUDA_POINTER_INVALID           = CUFILEOP_BASE_ERR + 12,
    CU_FILE_CUDA_MEMORY_TYPE_INVALID       = CUFILEOP_BASE_ERR + 13,
    CU_FILE_CUDA_POINTER_RANGE_ERROR       = CUFILEOP_BASE_ERR + 14,
    CU_FILE_CUDA_CONTEXT_MISMATCH          = CUFILEOP_BASE_ERR + 15,
    CU_FILE_INVALID_MAPPING_SIZE           = CUFILEOP_BASE_ERR + 16,
    CU_FILE_INVALID_MAPPING_RANGE          = CUFILEOP_BASE_ERR + 17,
    CU_FILE_INVALID_FILE_TYPE              = CUFILEOP_BASE_ERR + 18,
    CU_FILE_INVALID_FILE_OPEN_FLAG         = CUFILEOP_BASE_ERR + 19,
    CU_FILE_DIO_NOT_SET                    = CUFILEOP_BASE_ERR + 20,
    CU_FILE_INVALID_VALUE                  = CUFILEOP_BASE_ERR + 22,
    CU_FILE_MEMORY_ALREADY_REGISTERED      = CUFILEOP_BASE_ERR + 23,
    CU_FILE_MEMORY_NOT_REGISTERED          = CUFILEOP_BASE_ERR + 24,
    CU_FILE_PERMISSION_DENIED              = CUFILEOP_BASE_ERR + 25,
    CU_FILE_DRIVER_ALREADY_OPEN            = CUFILEOP_BASE_ERR + 26,
    CU_FILE_HANDLE_NOT_REGISTERED          = CUFILEOP_BASE_ERR + 27,
    CU_FILE_HANDLE_ALREADY_REGISTERED      = CUFILEOP_BASE_ERR + 28,
    CU_FILE_DEVICE_NOT_FOUND               = CUFILEOP_BASE_ERR + 29,
    CU_FILE_INTERNAL_ERROR                 = CUFILEOP_BASE_ERR + 30,
    CU_FILE_GETNEWFD_FAILED                = CUFILEOP_BASE_ERR + 31,
    CU_FILE_NVFS_SETUP_ERROR               = CUFILEOP_BASE_ERR + 33,
    CU_FILE_IO_DISABLED                    = CUFILEOP_BASE_ERR + 34,
    CU_FILE_BATCH_SUBMIT_FAILED            = CUFILEOP_BASE_ERR + 35,
    CU_FILE_GPU_MEMORY_PINNING_FAILED      = CUFILEOP_BASE_ERR + 36,
    CU_FILE_BATCH_FULL                     = CUFILEOP_BASE_ERR + 37,
    CU_FILE_ASYNC_NOT_SUPPORTED            = CUFILEOP_BASE_ERR + 38,
    CU_FILE_INTERNAL_BATCH_SETUP_ERROR     = CUFILEOP_BASE_ERR + 39,
    CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR    = CUFILEOP_BASE_ERR + 40,
    CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR = CUFILEOP_BASE_ERR + 41,
    CU_FILE_INTERNAL_BATCH_CANCEL_ERROR    = CUFILEOP_BASE_ERR + 42,
    CU_FILE_NOMEM_ERROR                    = CUFILEOP_BASE_ERR + 43,
    CU_FILE_IO_ERROR                       = CUFILEOP_BASE_ERR + 44,
    CU_FILE_INTERNAL_BUF_REGISTER_ERROR    = CUFILEOP_BASE_ERR + 45,
    CU_FILE_HASH_OPR_ERROR                 = CUFILEOP_BASE_ERR + 46,
    CU_FILE_INVALID_CONTEXT_ERROR          = CUFILEOP_BASE_ERR + 47,
    CU_FILE_NVFS_INTERNAL_DRIVER_ERROR     = CUFILEOP_BASE_ERR + 48,
    CU_FILE_BATCH_NOCOMPAT_ERROR           = CUFILEOP_BASE_ERR + 49,
    CU_FILE_IO_MAX_ERROR                   = CUFILEOP_BASE_ERR + 50
} CUfileOpError;

/* A short English text for a status code; never NULL. Header-only, as in cuFile; the texts are
 * hipfile-cufile's STATUS_TEXTS (src/status.rs), which `cargo xtask c-tests` keeps in step. */
static inline const char *
cufileop_status_error(CUfileOpError status)
{
    switch (status) {
        case CU_FILE_SUCCESS: return "success";
        case CU_FILE_DRIVER_NOT_INITIALIZED: return "the cuFile driver is not open";
        case CU_FILE_DRIVER_INVALID_PROPS: return "invalid driver property";
        case CU_FILE_DRIVER_UNSUPPORTED_LIMIT: return "driver property value out of range";
        case CU_FILE_DRIVER_VERSION_MISMATCH: return "storage driver version mismatch";
        case CU_FILE_DRIVER_VERSION_READ_ERROR: return "cannot read the storage driver version";
        case CU_FILE_DRIVER_CLOSING: return "the driver is shutting down";
        case CU_FILE_PLATFORM_NOT_SUPPORTED: return "GPU direct storage is not supported on this platform";
        case CU_FILE_IO_NOT_SUPPORTED: return "GPU direct storage is not supported for this file";
        case CU_FILE_DEVICE_NOT_SUPPORTED: return "GPU direct storage is not supported on this GPU";
        case CU_FILE_NVFS_DRIVER_ERROR: return "storage driver request failed";
        case CU_FILE_CUDA_DRIVER_ERROR: return "GPU runtime error (see cu_err)";
        case CU_FILE_CUDA_POINTER_INVALID: return "invalid GPU pointer";
        case CU_FILE_CUDA_MEMORY_TYPE_INVALID: return "unsupported memory type behind the pointer";
        case CU_FILE_CUDA_POINTER_RANGE_ERROR: return "the range runs past the end of the allocation";
        case CU_FILE_CUDA_CONTEXT_MISMATCH: return "GPU context mismatch";
        case CU_FILE_INVALID_MAPPING_SIZE: return "access beyond the pinned size";
        case CU_FILE_INVALID_MAPPING_RANGE: return "access beyond the mapped range";
        case CU_FILE_INVALID_FILE_TYPE: return "unsupported file type";
        case CU_FILE_INVALID_FILE_OPEN_FLAG: return "unsupported file open flags";
        case CU_FILE_DIO_NOT_SET: return "the descriptor is not open with O_DIRECT";
        case CU_FILE_INVALID_VALUE: return "invalid argument";
        case CU_FILE_MEMORY_ALREADY_REGISTERED: return "the buffer is already registered";
        case CU_FILE_MEMORY_NOT_REGISTERED: return "the buffer is not registered";
        case CU_FILE_PERMISSION_DENIED: return "permission denied";
        case CU_FILE_DRIVER_ALREADY_OPEN: return "the driver is already open";
        case CU_FILE_HANDLE_NOT_REGISTERED: return "the file handle is not registered";
        case CU_FILE_HANDLE_ALREADY_REGISTERED: return "the file is already registered";
        case CU_FILE_DEVICE_NOT_FOUND: return "no GPU found";
        case CU_FILE_INTERNAL_ERROR: return "internal error";
        case CU_FILE_GETNEWFD_FAILED: return "cannot open a new file descriptor";
        case CU_FILE_NVFS_SETUP_ERROR: return "storage driver setup failed";
        case CU_FILE_IO_DISABLED: return "GPU direct storage is disabled for this file";
        case CU_FILE_BATCH_SUBMIT_FAILED: return "batch submission failed";
        case CU_FILE_GPU_MEMORY_PINNING_FAILED: return "pinning GPU memory failed";
        case CU_FILE_BATCH_FULL: return "the batch is full";
        case CU_FILE_ASYNC_NOT_SUPPORTED: return "stream-ordered IO is not supported";
        case CU_FILE_INTERNAL_BATCH_SETUP_ERROR: return "batch setup failed inside the library; retry";
        case CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR: return "batch submission failed inside the library; retry";
        case CU_FILE_INTERNAL_BATCH_GETSTATUS_ERROR: return "batch status failed inside the library; retry";
        case CU_FILE_INTERNAL_BATCH_CANCEL_ERROR: return "batch cancel failed inside the library; retry";
        case CU_FILE_NOMEM_ERROR: return "out of memory; retry";
        case CU_FILE_IO_ERROR: return "IO error";
        case CU_FILE_INTERNAL_BUF_REGISTER_ERROR: return "buffer registration failed inside the library";
        case CU_FILE_HASH_OPR_ERROR: return "lookup table operation failed";
        case CU_FILE_INVALID_CONTEXT_ERROR: return "invalid context";
        case CU_FILE_NVFS_INTERNAL_DRIVER_ERROR: return "storage driver internal error";
        case CU_FILE_BATCH_NOCOMPAT_ERROR: return "compatibility mode is off";
        case CU_FILE_IO_MAX_ERROR: return "largest cuFile error code";
        default: return "unknown cuFile error";
    }
}

/* Status of a call. */
typedef struct CUfileError {
    CUfileOpError err;    /* library status */
    CUresult      cu_err; /* CUDA driver status, for CU_FILE_CUDA_DRIVER_ERROR */
} CUfileError_t;

/* True when `err` (possibly negated, as cuFileRead returns it) is a library error. */
#define IS_CUFILE_ERR(err) (abs((err)) > CUFILEOP_BASE_ERR)

/* Text for a library error code, possibly negated. */
#define CUFILE_ERRSTR(err) cufileop_status_error((CUfileOpError)abs((err)))

/* True when a CUfileError_t reports a CUDA driver failure. */
#define IS_CUDA_ERR(status) ((status).err == CU_FILE_CUDA_DRIVER_ERROR)

/* The CUresult inside a CUfileError_t. */
#define CU_FILE_CUDA_ERR(status) ((status).cu_err)

/* ---------------------------------------------------------------------- */
/* Driver properties                                                       */
/* ---------------------------------------------------------------------- */

/* Bit numbers of CUfileDrvProps_t.nvfs.dstatusflags; 10 is reserved. 13 and 14 are cuFile 1.16's. */
typedef enum CUfileDriverStatusFlags {
    CU_FILE_LUSTRE_SUPPORTED        = 0,
    CU_FILE_WEKAFS_SUPPORTED        = 1,
    CU_FILE_NFS_SUPPORTED           = 2,
    CU_FILE_GPFS_SUPPORTED          = 3,
    CU_FILE_NVME_SUPPORTED          = 4,
    CU_FILE_NVMEOF_SUPPORTED        = 5,
    CU_FILE_SCSI_SUPPORTED          = 6,
    CU_FILE_SCALEFLUX_CSD_SUPPORTED = 7,
    CU_FILE_NVMESH_SUPPORTED        = 8,
    CU_FILE_BEEGFS_SUPPORTED        = 9,
    CU_FILE_NVME_P2P_SUPPORTED      = 11,
    CU_FILE_SCATEFS_SUPPORTED       = 12,
    CU_FILE_VIRTIOFS_SUPPORTED      = 13,
    CU_FILE_MAX_TARGET_TYPES        = 14
} CUfileDriverStatusFlags_t;

/* Bit numbers of CUfileDrvProps_t.nvfs.dcontrolflags. */
typedef enum CUfileDriverControlFlags {
    CU_FILE_USE_POLL_MODE     = 0,
    CU_FILE_ALLOW_COMPAT_MODE = 1
} CUfileDriverControlFlags_t;

/* Bit numbers of CUfileDrvProps_t.fflags; P2P_SUPPORTED is cuFile 1.16's. */
typedef enum CUfileFeatureFlags {
    CU_FILE_DYN_ROUTING_SUPPORTED = 0,
    CU_FILE_BATCH_IO_SUPPORTED    = 1,
    CU_FILE_STREAMS_SUPPORTED     = 2,
    CU_FILE_PARALLEL_IO_SUPPORTED = 3,
    CU_FILE_P2P_SUPPORTED         = 4
} CUfileFeatureFlags_t;

/* Direct-transfer mechanisms (cuFile 1.16), as bit numbers. */
typedef enum CUfileP2PFlags {
    CUFILE_P2PDMA         = 0, /* PCI peer-to-peer DMA */
    CUFILE_NVFS           = 1, /* the nvidia-fs kernel driver */
    CUFILE_DMABUF         = 2, /* DMA-BUF export of GPU memory */
    CUFILE_C2C            = 3, /* chip-to-chip link */
    CUFILE_NVIDIA_PEERMEM = 4  /* the nvidia-peermem module */
} CUfileP2PFlags_t;

/* The masks cuFileDriverSetP2PFlags takes, one bit per mechanism. */
#define CU_FILE_P2P_FLAG_PCI_P2PDMA ((CUfileP2PFlags_t)(1 << CUFILE_P2PDMA))
#define CU_FILE_P2P_FLAG_NVFS       ((CUfileP2PFlags_t)(1 << CUFILE_NVFS))
#define CU_FILE_P2P_FLAG_DMABUF     ((CUfileP2PFlags_t)(1 << CUFILE_DMABUF))
#define CU_FILE_P2P_FLAG_C2C        ((CUfileP2PFlags_t)(1 << CUFILE_C2C))

/* What cuFileDriverGetProperties reports; sizes in KiB. */
typedef struct CUfileDrvProps {
    struct {
        unsigned int major_version;
        unsigned int minor_version;
        size_t       poll_thresh_size;
        size_t       max_direct_io_size;
        unsigned int dstatusflags;  /* bits numbered by CUfileDriverStatusFlags_t */
        unsigned int dcontrolflags; /* bits numbered by CUfileDriverControlFlags_t */
    } nvfs;
    unsigned int fflags; /* bits numbered by CUfileFeatureFlags_t */
    unsigned int max_device_cache_size;
    unsigned int per_buffer_cache_size;
    unsigned int max_device_pinned_mem_size;
    unsigned int max_batch_io_size;
    unsigned int max_batch_io_timeout_msecs;
} CUfileDrvProps_t;

/* ---------------------------------------------------------------------- */
/* File handles                                                            */
/* ---------------------------------------------------------------------- */

typedef struct sockaddr sockaddr_t;

/* RDMA description handed to a user-space file system's read/write. */
typedef struct cufileRDMAInfo {
    int         version;
    int         desc_len;
    const char *desc_str;
} cufileRDMAInfo_t;

/* cufileRDMAInfo_t flag bits. */
#define CU_FILE_RDMA_REGISTER         1
#define CU_FILE_RDMA_RELAXED_ORDERING (1 << 1)

/* glibc's loff_t is __loff_t; it is declared only with _GNU_SOURCE, the type behind it always. */
#ifdef __GLIBC__
typedef __loff_t cufile_loff_t_;
#else
typedef off_t cufile_loff_t_;
#endif

/* Operations of a user-space file system (CU_FILE_HANDLE_TYPE_USERSPACE_FS). */
typedef struct CUfileFSOps {
    const char *(*fs_type)(void *handle);
    int (*getRDMADeviceList)(void *handle, sockaddr_t **hostaddrs);
    int (*getRDMADevicePriority)(void *handle, char *, size_t, cufile_loff_t_, sockaddr_t *hostaddr);
    ssize_t (*read)(void *handle, char *, size_t, cufile_loff_t_, cufileRDMAInfo_t *);
    ssize_t (*write)(void *handle, const char *, size_t, cufile_loff_t_, cufileRDMAInfo_t *);
} CUfileFSOps_t;

enum CUfileFileHandleType {
    CU_FILE_HANDLE_TYPE_OPAQUE_FD    = 1, /* a Linux file descriptor */
    CU_FILE_HANDLE_TYPE_OPAQUE_WIN32 = 2, /* a Windows handle: refused on Linux */
    CU_FILE_HANDLE_TYPE_USERSPACE_FS = 3  /* a user-space file system */
};

/* What cuFileHandleRegister registers. */
typedef struct CUfileDescr_t {
    enum CUfileFileHandleType type;
    union {
        int   fd;
        void *handle;
    } handle;
    const CUfileFSOps_t *fs_ops;
} CUfileDescr_t;

typedef void *CUfileHandle_t;

CUfileError_t cuFileHandleRegister(CUfileHandle_t *fh, CUfileDescr_t *descr);
void          cuFileHandleDeregister(CUfileHandle_t fh);

/* ---------------------------------------------------------------------- */
/* Buffers and synchronous IO                                              */
/* ---------------------------------------------------------------------- */

/*
 * Host memory: every buffer this library is handed (cuFileRead/cuFileWrite,
 * a batch entry's devPtr_base, cuFileReadAsync/cuFileWriteAsync, and
 * cuFileBufRegister) may be device memory or host memory (pinned or
 * pageable). Host bytes are moved with pread/pwrite, so an address the
 * process may not touch fails as the kernel says: -1 with errno EFAULT.
 * What the library relies on, as it does for device memory: the bytes a call
 * names stay allocated, and nothing else writes them (nor reads them where
 * the library writes them) until it is done with them: cuFileRead/cuFileWrite
 * until they return; a batch entry until cuFileBatchIOGetStatus has reported
 * it finished or cuFileBatchIOCancel/cuFileBatchIODestroy of its batch has
 * returned; a stream-ordered op until its stream has passed it. A registered buffer stays allocated until
 * cuFileBufDeregister returns. Breaking this is undefined behaviour.
 */

CUfileError_t cuFileBufRegister(const void *bufPtr_base, size_t length, int flags);
CUfileError_t cuFileBufDeregister(const void *bufPtr_base);

ssize_t cuFileRead(CUfileHandle_t fh, void *bufPtr_base, size_t size, off_t file_offset, off_t bufPtr_offset);
ssize_t cuFileWrite(CUfileHandle_t fh, const void *bufPtr_base, size_t size, off_t file_offset,
                    off_t bufPtr_offset);

/* ---------------------------------------------------------------------- */
/* Driver                                                                  */
/* ---------------------------------------------------------------------- */

CUfileError_t cuFileDriverOpen(void);
/* The symbol programs built against older cuFile headers call; calls compiled against this header
 * go to cuFileDriverClose_v2. */
CUfileError_t cuFileDriverClose(void);
#define cuFileDriverClose cuFileDriverClose_v2
CUfileError_t cuFileDriverClose_v2(void);
long          cuFileUseCount(void);
CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t *props);
CUfileError_t cuFileDriverSetPollMode(bool poll, size_t poll_threshold_size);
CUfileError_t cuFileDriverSetMaxDirectIOSize(size_t max_direct_io_size);
CUfileError_t cuFileDriverSetMaxCacheSize(size_t max_cache_size);
CUfileError_t cuFileDriverSetMaxPinnedMemSize(size_t max_pinned_size);
CUfileError_t cuFileDriverSetP2PFlags(CUfileDriverStatusFlags_t status_flag, CUfileP2PFlags_t p2p_flags);
CUfileError_t cuFileDriverGetP2PFlags(CUfileDriverStatusFlags_t status_flag, CUfileP2PFlags_t *p2p_flags);

/* ---------------------------------------------------------------------- */
/* Batch IO                                                                */
/* ---------------------------------------------------------------------- */

typedef enum CUfileOpcode {
    CUFILE_READ  = 0,
    CUFILE_WRITE = 1
} CUfileOpcode_t;

/* The state of a batch entry; one bit each. */
typedef enum CUFILEStatus_enum {
    CUFILE_WAITING  = 0x01, /* not submitted yet */
    CUFILE_PENDING  = 0x02, /* submitted, not finished */
    CUFILE_INVALID  = 0x04, /* refused at submission */
    CUFILE_CANCELED = 0x08, /* canceled before it finished */
    CUFILE_COMPLETE = 0x10, /* finished; ret is the byte count */
    CUFILE_TIMEOUT  = 0x20, /* timed out */
    CUFILE_FAILED   = 0x40  /* finished with an error; ret is a negative code */
} CUfileStatus_t;

typedef enum cufileBatchMode {
    CUFILE_BATCH = 1
} CUfileBatchMode_t;

/* One batch entry; `mode` must stay the first member. */
typedef struct CUfileIOParams {
    CUfileBatchMode_t mode;
    union {
        struct {
            void  *devPtr_base; /* device or host memory */
            off_t  file_offset;
            off_t  devPtr_offset;
            size_t size;
        } batch;
    } u;
    CUfileHandle_t fh;
    CUfileOpcode_t opcode;
    void          *cookie;
} CUfileIOParams_t;

/* One finished (or pending) entry as cuFileBatchIOGetStatus reports it. */
typedef struct CUfileIOEvents {
    void          *cookie;
    CUfileStatus_t status;
    size_t         ret; /* bytes moved, or a negative error code stored in a size_t */
} CUfileIOEvents_t;

typedef void *CUfileBatchHandle_t;

CUfileError_t cuFileBatchIOSetUp(CUfileBatchHandle_t *batch_idp, unsigned nr);
CUfileError_t cuFileBatchIOSubmit(CUfileBatchHandle_t batch_idp, unsigned nr, CUfileIOParams_t *iocbp,
                                  unsigned int flags);
CUfileError_t cuFileBatchIOGetStatus(CUfileBatchHandle_t batch_idp, unsigned min_nr, unsigned *nr,
                                     CUfileIOEvents_t *iocbp, struct timespec *timeout);
CUfileError_t cuFileBatchIOCancel(CUfileBatchHandle_t batch_idp);
void          cuFileBatchIODestroy(CUfileBatchHandle_t batch_idp);

/* ---------------------------------------------------------------------- */
/* Stream-ordered IO                                                       */
/* ---------------------------------------------------------------------- */

/* cuFileStreamRegister flags: which arguments are final when the call is made (else they are
 * read through their pointers when the stream reaches the operation). */
#define CU_FILE_STREAM_FIXED_BUF_OFFSET    1
#define CU_FILE_STREAM_FIXED_FILE_OFFSET   2
#define CU_FILE_STREAM_FIXED_FILE_SIZE     4
#define CU_FILE_STREAM_PAGE_ALIGNED_INPUTS 8

CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p, off_t *file_offset_p,
                              off_t *bufPtr_offset_p, ssize_t *bytes_read_p, CUstream stream);
CUfileError_t cuFileWriteAsync(CUfileHandle_t fh, void *bufPtr_base, size_t *size_p, off_t *file_offset_p,
                               off_t *bufPtr_offset_p, ssize_t *bytes_written_p, CUstream stream);
CUfileError_t cuFileStreamRegister(CUstream stream, unsigned flags);
CUfileError_t cuFileStreamDeregister(CUstream stream);

/* ---------------------------------------------------------------------- */
/* Version and parameters                                                  */
/* ---------------------------------------------------------------------- */

CUfileError_t cuFileGetVersion(int *version);

typedef enum CUFileSizeTConfigParameter_t {
    CUFILE_PARAM_PROFILE_STATS,
    CUFILE_PARAM_EXECUTION_MAX_IO_QUEUE_DEPTH,
    CUFILE_PARAM_EXECUTION_MAX_IO_THREADS,
    CUFILE_PARAM_EXECUTION_MIN_IO_THRESHOLD_SIZE_KB,
    CUFILE_PARAM_EXECUTION_MAX_REQUEST_PARALLELISM,
    CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB,
    CUFILE_PARAM_PROPERTIES_MAX_DEVICE_CACHE_SIZE_KB,
    CUFILE_PARAM_PROPERTIES_PER_BUFFER_CACHE_SIZE_KB,
    CUFILE_PARAM_PROPERTIES_MAX_DEVICE_PINNED_MEM_SIZE_KB,
    CUFILE_PARAM_PROPERTIES_IO_BATCHSIZE,
    CUFILE_PARAM_POLLTHRESHOLD_SIZE_KB,
    CUFILE_PARAM_PROPERTIES_BATCH_IO_TIMEOUT_MS
} CUFileSizeTConfigParameter_t;

typedef enum CUFileBoolConfigParameter_t {
    CUFILE_PARAM_PROPERTIES_USE_POLL_MODE,
    CUFILE_PARAM_PROPERTIES_ALLOW_COMPAT_MODE,
    CUFILE_PARAM_FORCE_COMPAT_MODE,
    CUFILE_PARAM_FS_MISC_API_CHECK_AGGRESSIVE,
    CUFILE_PARAM_EXECUTION_PARALLEL_IO,
    CUFILE_PARAM_PROFILE_NVTX,
    CUFILE_PARAM_PROPERTIES_ALLOW_SYSTEM_MEMORY,
    CUFILE_PARAM_USE_PCIP2PDMA,
    CUFILE_PARAM_PREFER_IO_URING,
    CUFILE_PARAM_FORCE_ODIRECT_MODE,
    CUFILE_PARAM_SKIP_TOPOLOGY_DETECTION,
    CUFILE_PARAM_STREAM_MEMOPS_BYPASS
} CUFileBoolConfigParameter_t;

typedef enum CUFileStringConfigParameter_t {
    CUFILE_PARAM_LOGGING_LEVEL,
    CUFILE_PARAM_ENV_LOGFILE_PATH,
    CUFILE_PARAM_LOG_DIR
} CUFileStringConfigParameter_t;

typedef enum CUFileArrayConfigParameter_t {
    CUFILE_PARAM_POSIX_POOL_SLAB_SIZE_KB,
    CUFILE_PARAM_POSIX_POOL_SLAB_COUNT
} CUFileArrayConfigParameter_t;

CUfileError_t cuFileGetParameterSizeT(CUFileSizeTConfigParameter_t param, size_t *value);
CUfileError_t cuFileGetParameterBool(CUFileBoolConfigParameter_t param, bool *value);
CUfileError_t cuFileGetParameterString(CUFileStringConfigParameter_t param, char *desc_str, int len);
CUfileError_t cuFileGetParameterMinMaxValue(CUFileSizeTConfigParameter_t param, size_t *min_value,
                                            size_t *max_value);
CUfileError_t cuFileSetParameterSizeT(CUFileSizeTConfigParameter_t param, size_t value);
CUfileError_t cuFileSetParameterBool(CUFileBoolConfigParameter_t param, bool value);
CUfileError_t cuFileSetParameterString(CUFileStringConfigParameter_t param, const char *desc_str);
CUfileError_t cuFileSetParameterPosixPoolSlabArray(const size_t *size_values, const size_t *count_values,
                                                   int len);
CUfileError_t cuFileGetParameterPosixPoolSlabArray(size_t *size_values, size_t *count_values, int len);
CUfileError_t cuFileGetBARSizeInKB(int gpuIndex, size_t *barSize);

/* ---------------------------------------------------------------------- */
/* Statistics                                                              */
/* ---------------------------------------------------------------------- */

CUfileError_t cuFileSetStatsLevel(int level);
CUfileError_t cuFileGetStatsLevel(int *level);

#define CUFILE_GPU_UUID_LEN 16

typedef struct CUfileOpCounter {
    uint64_t ok;
    uint64_t err;
} CUfileOpCounter_t;

/* Level 1: counts, bytes, rates and latencies. */
typedef struct CUfileStatsLevel1 {
    CUfileOpCounter_t read_ops;
    CUfileOpCounter_t write_ops;
    CUfileOpCounter_t hdl_register_ops;
    CUfileOpCounter_t hdl_deregister_ops;
    CUfileOpCounter_t buf_register_ops;
    CUfileOpCounter_t buf_deregister_ops;
    uint64_t          read_bytes;
    uint64_t          write_bytes;
    uint64_t          read_bw_bytes_per_sec;
    uint64_t          write_bw_bytes_per_sec;
    uint64_t          read_lat_avg_us;
    uint64_t          write_lat_avg_us;
    uint64_t          read_ops_per_sec;
    uint64_t          write_ops_per_sec;
    uint64_t          read_lat_sum_us;
    uint64_t          write_lat_sum_us;
    CUfileOpCounter_t batch_submit_ops;
    CUfileOpCounter_t batch_complete_ops;
    CUfileOpCounter_t batch_setup_ops;
    CUfileOpCounter_t batch_cancel_ops;
    CUfileOpCounter_t batch_destroy_ops;
    CUfileOpCounter_t batch_enqueued_ops;
    CUfileOpCounter_t batch_posix_enqueued_ops;
    CUfileOpCounter_t batch_processed_ops;
    CUfileOpCounter_t batch_posix_processed_ops;
    CUfileOpCounter_t batch_nvfs_submit_ops;
    CUfileOpCounter_t batch_p2p_submit_ops;
    CUfileOpCounter_t batch_aio_submit_ops;
    CUfileOpCounter_t batch_iouring_submit_ops;
    CUfileOpCounter_t batch_mixed_io_submit_ops;
    CUfileOpCounter_t batch_total_submit_ops;
    uint64_t          batch_read_bytes;
    uint64_t          batch_write_bytes;
    uint64_t          batch_read_bw_bytes;
    uint64_t          batch_write_bw_bytes;
    uint64_t          batch_submit_lat_avg_us;
    uint64_t          batch_completion_lat_avg_us;
    uint64_t          batch_submit_ops_per_sec;
    uint64_t          batch_complete_ops_per_sec;
    uint64_t          batch_submit_lat_sum_us;
    uint64_t          batch_completion_lat_sum_us;
    uint64_t          last_batch_read_bytes;
    uint64_t          last_batch_write_bytes;
} CUfileStatsLevel1_t;

/* Level 2: level 1 and IO size histograms. */
typedef struct CUfileStatsLevel2 {
    CUfileStatsLevel1_t basic;
    uint64_t            read_size_kb_hist[32];
    uint64_t            write_size_kb_hist[32];
} CUfileStatsLevel2_t;

/* Level 3, per GPU. */
typedef struct CUfilePerGpuStats {
    char     uuid[CUFILE_GPU_UUID_LEN];
    uint64_t read_bytes;
    uint64_t read_bw_bytes_per_sec;
    uint64_t read_utilization;
    uint64_t read_duration_us;
    uint64_t n_total_reads;
    uint64_t n_p2p_reads;
    uint64_t n_nvfs_reads;
    uint64_t n_posix_reads;
    uint64_t n_unaligned_reads;
    uint64_t n_dr_reads;
    uint64_t n_sparse_regions;
    uint64_t n_inline_regions;
    uint64_t n_reads_err;
    uint64_t writes_bytes;
    uint64_t write_bw_bytes_per_sec;
    uint64_t write_utilization;
    uint64_t write_duration_us;
    uint64_t n_total_writes;
    uint64_t n_p2p_writes;
    uint64_t n_nvfs_writes;
    uint64_t n_posix_writes;
    uint64_t n_unaligned_writes;
    uint64_t n_dr_writes;
    uint64_t n_writes_err;
    uint64_t n_mmap;
    uint64_t n_mmap_ok;
    uint64_t n_mmap_err;
    uint64_t n_mmap_free;
    uint64_t reg_bytes;
} CUfilePerGpuStats_t;

/* Level 3: level 2 and up to 16 GPUs. */
typedef struct CUfileStatsLevel3 {
    CUfileStatsLevel2_t detailed;
    uint32_t            num_gpus;
    CUfilePerGpuStats_t per_gpu_stats[16];
} CUfileStatsLevel3_t;

CUfileError_t cuFileStatsStart(void);
CUfileError_t cuFileStatsStop(void);
CUfileError_t cuFileStatsReset(void);
CUfileError_t cuFileGetStatsL1(CUfileStatsLevel1_t *stats);
CUfileError_t cuFileGetStatsL2(CUfileStatsLevel2_t *stats);
CUfileError_t cuFileGetStatsL3(CUfileStatsLevel3_t *stats);

/* ---------------------------------------------------------------------- */
/* hipfile-rs extensions: no NVIDIA library has these; test for them with  */
/* HIPFILE_CUFILE_EXTENSIONS.                                              */
/* ---------------------------------------------------------------------- */

#define HIPFILE_CUFILE_EXTENSIONS 1

/* How the requests of one file handle are served: reads, writes, batch entries and stream-ordered
 * operations alike. */
typedef enum CUfileIoPolicy {
    /* The direct path where it can, the staged path through host memory where it cannot (the
     * default). */
    CU_FILE_IO_POLICY_FALLBACK = 0,
    /* The direct path or an error: a request no direct path serves fails with
     * CU_FILE_IO_NOT_SUPPORTED (-CU_FILE_IO_NOT_SUPPORTED from cuFileRead/cuFileWrite) and moves
     * no byte. */
    CU_FILE_IO_POLICY_DIRECT_ONLY = 1
} CUfileIoPolicy_t;

/* Sets the IO policy of a registered handle for the requests submitted from then on:
 * CU_FILE_INVALID_VALUE for a NULL handle or a value outside CUfileIoPolicy_t,
 * CU_FILE_HANDLE_NOT_REGISTERED for a handle not registered, CU_FILE_DRIVER_NOT_INITIALIZED on a
 * closed driver. */
CUfileError_t cuFileHandleSetIoPolicy(CUfileHandle_t fh, CUfileIoPolicy_t policy);
/* The IO policy of a registered handle; CU_FILE_INVALID_VALUE for a NULL handle or policy,
 * otherwise as cuFileHandleSetIoPolicy. */
CUfileError_t cuFileHandleGetIoPolicy(CUfileHandle_t fh, CUfileIoPolicy_t *policy);

#ifdef __cplusplus
}
#endif

#endif /* HIPFILE_CUFILE_H */
