/*
 * api_surface.c - every function and macro of the upstream hipFile API.
 *
 * Compiling proves each prototype has exactly the upstream type (each
 * function is assigned to a pointer of the spelled-out type; a mismatch is
 * an incompatible-pointer error under -Werror, or a hard error in C++).
 * Linking proves libhipfile.so exports every symbol. Running prints one
 * TAP-like line per function and per constant checked at run time.
 *
 * Usage: api_surface SCRATCH_DIR   (the directory is not used)
 * Builds as C11 and as C++17.
 */

#include <hipfile.h>

#include <stdio.h>
#include <time.h>

#include "tap.h"

#if !defined(HIPFILE_VERSION_MAJOR) || !defined(HIPFILE_VERSION_MINOR) || !defined(HIPFILE_VERSION_PATCH)
#error "version macros missing"
#endif
#if !defined(HIPFILE_BASE_ERR) || !defined(IS_HIPFILE_ERR) || !defined(HIPFILE_ERRSTR)
#error "error macros missing"
#endif
#if !defined(IS_HIP_DRV_ERR) || !defined(HIP_DRV_ERR)
#error "driver error macros missing"
#endif
#if !defined(HIPFILE_RDMA_REGISTER) || !defined(HIPFILE_RDMA_RELAXED_ORDERING)
#error "RDMA flag macros missing"
#endif
#if !defined(HIPFILE_STREAM_FIXED_BUF_OFFSET) || !defined(HIPFILE_STREAM_FIXED_FILE_OFFSET) ||                  \
    !defined(HIPFILE_STREAM_FIXED_FILE_SIZE) || !defined(HIPFILE_STREAM_PAGE_ALIGNED_INPUTS) ||              \
    !defined(HIPFILE_STREAM_FLAGS_MASK)
#error "stream flag macros missing"
#endif
#if !defined(HIPFILE_MAX_GPUS) || !defined(HIPFILE_GPU_UUID_LEN)
#error "stats macros missing"
#endif

#define SIGNATURE(name, ret, params)                                                                        \
    do {                                                                                                       \
        ret(*volatile fn) params = name;                                                                       \
        check(fn != NULL, #name " has the upstream prototype and links", "%s", "its address is NULL");       \
    } while (0)

int
main(int argc, char **argv)
{
    (void)argc;
    (void)argv;

    SIGNATURE(hipFileGetOpErrorString, const char *, (hipFileOpError_t));
    SIGNATURE(hipFileHandleRegister, hipFileError_t, (hipFileHandle_t *, hipFileDescr_t *));
    SIGNATURE(hipFileHandleDeregister, void, (hipFileHandle_t));
    SIGNATURE(hipFileBufRegister, hipFileError_t, (const void *, size_t, int));
    SIGNATURE(hipFileBufDeregister, hipFileError_t, (const void *));
    SIGNATURE(hipFileRead, ssize_t, (hipFileHandle_t, void *, size_t, hoff_t, hoff_t));
    SIGNATURE(hipFileWrite, ssize_t, (hipFileHandle_t, const void *, size_t, hoff_t, hoff_t));
    SIGNATURE(hipFileDriverOpen, hipFileError_t, (void));
    SIGNATURE(hipFileDriverClose, hipFileError_t, (void));
    SIGNATURE(hipFileUseCount, int64_t, (void));
    SIGNATURE(hipFileDriverGetProperties, hipFileError_t, (hipFileDriverProps_t *));
    SIGNATURE(hipFileDriverSetPollMode, hipFileError_t, (bool, size_t));
    SIGNATURE(hipFileDriverSetMaxDirectIOSize, hipFileError_t, (size_t));
    SIGNATURE(hipFileDriverSetMaxCacheSize, hipFileError_t, (size_t));
    SIGNATURE(hipFileDriverSetMaxPinnedMemSize, hipFileError_t, (size_t));
    SIGNATURE(hipFileBatchIOSetUp, hipFileError_t, (hipFileBatchHandle_t *, unsigned));
    SIGNATURE(hipFileBatchIOSubmit, hipFileError_t, (hipFileBatchHandle_t, unsigned, hipFileIOParams_t *, unsigned));
    SIGNATURE(hipFileBatchIOGetStatus, hipFileError_t,
              (hipFileBatchHandle_t, unsigned, unsigned *, hipFileIOEvents_t *, struct timespec *));
    SIGNATURE(hipFileBatchIOCancel, hipFileError_t, (hipFileBatchHandle_t));
    SIGNATURE(hipFileBatchIODestroy, void, (hipFileBatchHandle_t));
    SIGNATURE(hipFileReadAsync, hipFileError_t,
              (hipFileHandle_t, void *, size_t *, hoff_t *, hoff_t *, ssize_t *, hipStream_t));
    SIGNATURE(hipFileWriteAsync, hipFileError_t,
              (hipFileHandle_t, void *, size_t *, hoff_t *, hoff_t *, ssize_t *, hipStream_t));
    SIGNATURE(hipFileStreamRegister, hipFileError_t, (hipStream_t, unsigned));
    SIGNATURE(hipFileStreamDeregister, hipFileError_t, (hipStream_t));
    SIGNATURE(hipFileGetVersion, hipFileError_t, (unsigned *, unsigned *, unsigned *));
    SIGNATURE(hipFileGetParameterSizeT, hipFileError_t, (hipFileSizeTConfigParameter_t, size_t *));
    SIGNATURE(hipFileGetParameterBool, hipFileError_t, (hipFileBoolConfigParameter_t, bool *));
    SIGNATURE(hipFileGetParameterString, hipFileError_t, (hipFileStringConfigParameter_t, char *, int));
    SIGNATURE(hipFileSetParameterSizeT, hipFileError_t, (hipFileSizeTConfigParameter_t, size_t));
    SIGNATURE(hipFileSetParameterBool, hipFileError_t, (hipFileBoolConfigParameter_t, bool));
    SIGNATURE(hipFileSetParameterString, hipFileError_t, (hipFileStringConfigParameter_t, const char *));
    SIGNATURE(hipFileGetStatsL1, hipFileError_t, (hipFileStatsLevel1_t *));
    SIGNATURE(hipFileGetStatsL2, hipFileError_t, (hipFileStatsLevel2_t *));
    SIGNATURE(hipFileGetStatsL3, hipFileError_t, (hipFileStatsLevel3_t *));

    /* The macros work on both shapes they are used with. */
    hipFileError_t hip_failure;
    hip_failure.err         = hipFileHipDriverError;
    hip_failure.hip_drv_err = (hipError_t)1;
    check(IS_HIP_DRV_ERR(hip_failure) && HIP_DRV_ERR(hip_failure) == (hipError_t)1,
          "IS_HIP_DRV_ERR / HIP_DRV_ERR read a hipFileError_t", "IS_HIP_DRV_ERR %d, HIP_DRV_ERR %d",
          (int)IS_HIP_DRV_ERR(hip_failure), (int)HIP_DRV_ERR(hip_failure));
    ssize_t negated = -(ssize_t)hipFileHandleNotRegistered;
    check(IS_HIPFILE_ERR(negated) && !IS_HIPFILE_ERR(-1) && IS_HIPFILE_ERR(hipFileInvalidValue),
          "IS_HIPFILE_ERR accepts negated and plain codes, rejects -1", "negated %d, -1 %d, plain %d",
          (int)IS_HIPFILE_ERR(negated), (int)IS_HIPFILE_ERR(-1), (int)IS_HIPFILE_ERR(hipFileInvalidValue));

    return tap_finish();
}
