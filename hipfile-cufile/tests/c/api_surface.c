/*
 * api_surface.c - every function cufile.h declares, assigned to a pointer of its spelled-out
 * cuFile type (compiling checks the prototypes, linking checks the exports) and called at least
 * once in an ordinary session; and the header's macros and static inline function.
 *
 * Usage: api_surface SCRATCH_DIR
 * Builds as C11 and as C++17.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <cufile.h>

#include <time.h>

#include "cufile_checks.h"

#define SIZE ((size_t)(64 * 1024))

/* The old close symbol, under its own name (the header maps calls to _v2). */
#undef cuFileDriverClose
static CUfileError_t (*const legacy_close)(void) = cuFileDriverClose;
#define cuFileDriverClose cuFileDriverClose_v2

/* Each function as a pointer of its cuFile type: a prototype that differs does not compile. */
static CUfileError_t (*const p_handle_register)(CUfileHandle_t *, CUfileDescr_t *) = cuFileHandleRegister;
static void (*const p_handle_deregister)(CUfileHandle_t) = cuFileHandleDeregister;
static CUfileError_t (*const p_buf_register)(const void *, size_t, int) = cuFileBufRegister;
static CUfileError_t (*const p_buf_deregister)(const void *) = cuFileBufDeregister;
static ssize_t (*const p_read)(CUfileHandle_t, void *, size_t, off_t, off_t) = cuFileRead;
static ssize_t (*const p_write)(CUfileHandle_t, const void *, size_t, off_t, off_t) = cuFileWrite;
static CUfileError_t (*const p_driver_open)(void) = cuFileDriverOpen;
static CUfileError_t (*const p_driver_close_v2)(void) = cuFileDriverClose_v2;
static long (*const p_use_count)(void) = cuFileUseCount;
static CUfileError_t (*const p_get_properties)(CUfileDrvProps_t *) = cuFileDriverGetProperties;
static CUfileError_t (*const p_set_poll_mode)(bool, size_t) = cuFileDriverSetPollMode;
static CUfileError_t (*const p_set_max_direct_io)(size_t) = cuFileDriverSetMaxDirectIOSize;
static CUfileError_t (*const p_set_max_cache)(size_t) = cuFileDriverSetMaxCacheSize;
static CUfileError_t (*const p_set_max_pinned)(size_t) = cuFileDriverSetMaxPinnedMemSize;
static CUfileError_t (*const p_set_p2p)(CUfileDriverStatusFlags_t, CUfileP2PFlags_t) = cuFileDriverSetP2PFlags;
static CUfileError_t (*const p_get_p2p)(CUfileDriverStatusFlags_t, CUfileP2PFlags_t *) = cuFileDriverGetP2PFlags;
static CUfileError_t (*const p_batch_setup)(CUfileBatchHandle_t *, unsigned) = cuFileBatchIOSetUp;
static CUfileError_t (*const p_batch_submit)(CUfileBatchHandle_t, unsigned, CUfileIOParams_t *,
                                             unsigned int) = cuFileBatchIOSubmit;
static CUfileError_t (*const p_batch_status)(CUfileBatchHandle_t, unsigned, unsigned *, CUfileIOEvents_t *,
                                             struct timespec *) = cuFileBatchIOGetStatus;
static CUfileError_t (*const p_batch_cancel)(CUfileBatchHandle_t)  = cuFileBatchIOCancel;
static void (*const p_batch_destroy)(CUfileBatchHandle_t)          = cuFileBatchIODestroy;
static CUfileError_t (*const p_read_async)(CUfileHandle_t, void *, size_t *, off_t *, off_t *, ssize_t *,
                                           CUstream)               = cuFileReadAsync;
static CUfileError_t (*const p_write_async)(CUfileHandle_t, void *, size_t *, off_t *, off_t *, ssize_t *,
                                            CUstream)              = cuFileWriteAsync;
static CUfileError_t (*const p_stream_register)(CUstream, unsigned) = cuFileStreamRegister;
static CUfileError_t (*const p_stream_deregister)(CUstream)         = cuFileStreamDeregister;
static CUfileError_t (*const p_get_version)(int *)                  = cuFileGetVersion;
static CUfileError_t (*const p_get_size_t)(CUFileSizeTConfigParameter_t, size_t *) = cuFileGetParameterSizeT;
static CUfileError_t (*const p_get_bool)(CUFileBoolConfigParameter_t, bool *)      = cuFileGetParameterBool;
static CUfileError_t (*const p_get_string)(CUFileStringConfigParameter_t, char *, int) = cuFileGetParameterString;
static CUfileError_t (*const p_get_min_max)(CUFileSizeTConfigParameter_t, size_t *,
                                            size_t *)                                 = cuFileGetParameterMinMaxValue;
static CUfileError_t (*const p_set_size_t)(CUFileSizeTConfigParameter_t, size_t)      = cuFileSetParameterSizeT;
static CUfileError_t (*const p_set_bool)(CUFileBoolConfigParameter_t, bool)          = cuFileSetParameterBool;
static CUfileError_t (*const p_set_string)(CUFileStringConfigParameter_t, const char *) = cuFileSetParameterString;
static CUfileError_t (*const p_set_slabs)(const size_t *, const size_t *, int) = cuFileSetParameterPosixPoolSlabArray;
static CUfileError_t (*const p_get_slabs)(size_t *, size_t *, int)             = cuFileGetParameterPosixPoolSlabArray;
static CUfileError_t (*const p_bar_size)(int, size_t *)                        = cuFileGetBARSizeInKB;
static CUfileError_t (*const p_set_stats_level)(int)                           = cuFileSetStatsLevel;
static CUfileError_t (*const p_get_stats_level)(int *)                         = cuFileGetStatsLevel;
static CUfileError_t (*const p_stats_start)(void)                              = cuFileStatsStart;
static CUfileError_t (*const p_stats_stop)(void)                               = cuFileStatsStop;
static CUfileError_t (*const p_stats_reset)(void)                              = cuFileStatsReset;
static CUfileError_t (*const p_stats_l1)(CUfileStatsLevel1_t *)                = cuFileGetStatsL1;
static CUfileError_t (*const p_stats_l2)(CUfileStatsLevel2_t *)                = cuFileGetStatsL2;
static CUfileError_t (*const p_stats_l3)(CUfileStatsLevel3_t *)                = cuFileGetStatsL3;
/* hipfile-rs's extensions. */
static CUfileError_t (*const p_set_io_policy)(CUfileHandle_t, CUfileIoPolicy_t)   = cuFileHandleSetIoPolicy;
static CUfileError_t (*const p_get_io_policy)(CUfileHandle_t, CUfileIoPolicy_t *) = cuFileHandleGetIoPolicy;

static void
check_macros(void)
{
    check(CUFILEOP_BASE_ERR == 5000 && CU_FILE_INVALID_VALUE == 5022 && CU_FILE_IO_MAX_ERROR == 5050,
          "CUFILEOP_BASE_ERR and the codes keep cuFile's values", "base %d", CUFILEOP_BASE_ERR);
    check(IS_CUFILE_ERR(-CU_FILE_INVALID_VALUE) && IS_CUFILE_ERR(CU_FILE_HANDLE_NOT_REGISTERED) && !IS_CUFILE_ERR(-EINVAL)
              && !IS_CUFILE_ERR(0),
          "IS_CUFILE_ERR tells library codes (either sign) from errno values", "wrong answer");
    check(strcmp(CUFILE_ERRSTR(-CU_FILE_INVALID_VALUE), cufileop_status_error(CU_FILE_INVALID_VALUE)) == 0,
          "CUFILE_ERRSTR of a negated code is the code's text", "%s", CUFILE_ERRSTR(-CU_FILE_INVALID_VALUE));
    CUfileError_t cuda_failure = {CU_FILE_CUDA_DRIVER_ERROR, (CUresult)1};
    CUfileError_t plain        = {CU_FILE_INVALID_VALUE, (CUresult)0};
    check(IS_CUDA_ERR(cuda_failure) && !IS_CUDA_ERR(plain) && (int)CU_FILE_CUDA_ERR(cuda_failure) == 1,
          "IS_CUDA_ERR and CU_FILE_CUDA_ERR read the pair", "wrong answer");
    const char *unknown = cufileop_status_error((CUfileOpError)4999);
    int         every   = 1;
    for (int code = CUFILEOP_BASE_ERR + 1; code <= CU_FILE_IO_MAX_ERROR; code++) {
        const char *text = cufileop_status_error((CUfileOpError)code);
        int         gap  = code == CUFILEOP_BASE_ERR + 21 || code == CUFILEOP_BASE_ERR + 32;
        if (text == NULL || text[0] == '\0' || (!gap && strcmp(text, unknown) == 0)) {
            every = 0;
        }
    }
    check(every && cufileop_status_error(CU_FILE_SUCCESS)[0] != '\0',
          "cufileop_status_error has a text of its own for every assigned code", "one is missing");
    check(CU_FILE_STREAM_FIXED_BUF_OFFSET == 1 && CU_FILE_STREAM_FIXED_FILE_OFFSET == 2
              && CU_FILE_STREAM_FIXED_FILE_SIZE == 4 && CU_FILE_STREAM_PAGE_ALIGNED_INPUTS == 8
              && CU_FILE_RDMA_REGISTER == 1 && CU_FILE_RDMA_RELAXED_ORDERING == 2,
          "stream and RDMA flags keep cuFile's values", "a value differs");
    check((int)CU_FILE_P2P_FLAG_PCI_P2PDMA == 1 && (int)CU_FILE_P2P_FLAG_NVFS == 2 && (int)CU_FILE_P2P_FLAG_DMABUF == 4
              && (int)CU_FILE_P2P_FLAG_C2C == 8,
          "P2P flag masks are one bit per mechanism", "a value differs");
    check(sizeof(CUfileIOParams_t) == 64 && sizeof(CUfileIOEvents_t) == 24 && sizeof(CUfileDrvProps_t) == 56
              && sizeof(CUfileDescr_t) == 24 && sizeof(CUfileError_t) == 8
              && sizeof(CUfileStatsLevel1_t) == 512 && sizeof(CUfileStatsLevel3_t) == 5000,
          "struct sizes are cuFile's (x86-64)", "IOParams %zu IOEvents %zu DrvProps %zu Descr %zu",
          sizeof(CUfileIOParams_t), sizeof(CUfileIOEvents_t), sizeof(CUfileDrvProps_t), sizeof(CUfileDescr_t));
}

int
main(int argc, char **argv)
{
    require_scratch_dir(argc, argv);
    check_macros();

    int version = 0;
    expect_status(p_get_version(&version), CU_FILE_SUCCESS, "cuFileGetVersion");
    check(version > 0, "cuFileGetVersion reports a version", "%d", version);

    /* Parameters are set while the driver is closed, read at any time. */
    expect_status(p_set_size_t(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, 8192), CU_FILE_SUCCESS,
                  "cuFileSetParameterSizeT (closed)");
    size_t value = 0;
    expect_status(p_get_size_t(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, &value), CU_FILE_SUCCESS,
                  "cuFileGetParameterSizeT");
    check(value == 8192, "cuFileGetParameterSizeT reads back the value set", "%zu", value);
    size_t low = 0, high = 0;
    expect_status(p_get_min_max(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, &low, &high), CU_FILE_SUCCESS,
                  "cuFileGetParameterMinMaxValue");
    check(low <= 8192 && 8192 <= high, "the value set lies within its range", "[%zu, %zu]", low, high);
    expect_status(p_set_bool(CUFILE_PARAM_PROPERTIES_USE_POLL_MODE, false), CU_FILE_SUCCESS,
                  "cuFileSetParameterBool (closed)");
    bool flag = true;
    expect_status(p_get_bool(CUFILE_PARAM_PROPERTIES_USE_POLL_MODE, &flag), CU_FILE_SUCCESS, "cuFileGetParameterBool");
    check(!flag, "cuFileGetParameterBool reads back the value set", "true");
    expect_status(p_set_string(CUFILE_PARAM_LOGGING_LEVEL, "ERROR"), CU_FILE_SUCCESS,
                  "cuFileSetParameterString (closed)");
    char text[64] = {0};
    expect_status(p_get_string(CUFILE_PARAM_LOGGING_LEVEL, text, (int)sizeof text), CU_FILE_SUCCESS,
                  "cuFileGetParameterString");
    check(strcmp(text, "ERROR") == 0, "cuFileGetParameterString reads back the value set", "\"%s\"", text);
    size_t slab_sizes[2] = {4096, 1024 * 1024}, slab_counts[2] = {8, 4};
    expect_status(p_set_slabs(slab_sizes, slab_counts, 2), CU_FILE_SUCCESS,
                  "cuFileSetParameterPosixPoolSlabArray (closed)");
    size_t got_sizes[2] = {0, 0}, got_counts[2] = {0, 0};
    expect_status(p_get_slabs(got_sizes, got_counts, 2), CU_FILE_SUCCESS, "cuFileGetParameterPosixPoolSlabArray");
    check(got_sizes[0] == 4096 && got_sizes[1] == 1024 * 1024 && got_counts[0] == 8 && got_counts[1] == 4,
          "cuFileGetParameterPosixPoolSlabArray reads back the slabs set", "%zu/%zu %zu/%zu", got_sizes[0],
          got_counts[0], got_sizes[1], got_counts[1]);

    /* The counting level is the one in force when the driver opens. */
    expect_status(p_set_stats_level(3), CU_FILE_SUCCESS, "cuFileSetStatsLevel(3) (closed)");
    int level = -1;
    expect_status(p_get_stats_level(&level), CU_FILE_SUCCESS, "cuFileGetStatsLevel");
    check(level == 3, "cuFileGetStatsLevel reads back the level set", "%d", level);

    expect_status(p_driver_open(), CU_FILE_SUCCESS, "cuFileDriverOpen");
    check(p_use_count() == 1, "cuFileUseCount after one open is 1", "%ld", p_use_count());
    CUfileDrvProps_t props;
    memset(&props, 0, sizeof props);
    expect_status(p_get_properties(&props), CU_FILE_SUCCESS, "cuFileDriverGetProperties");
    check(props.max_batch_io_size > 0, "cuFileDriverGetProperties reports a batch size", "%u", props.max_batch_io_size);
    expect_status(p_set_poll_mode(true, 4), CU_FILE_SUCCESS, "cuFileDriverSetPollMode");
    expect_status(p_set_max_direct_io(4096), CU_FILE_SUCCESS, "cuFileDriverSetMaxDirectIOSize");
    expect_status(p_set_max_cache(props.max_device_cache_size > 0 ? props.max_device_cache_size : 1024),
                  CU_FILE_SUCCESS, "cuFileDriverSetMaxCacheSize");
    expect_status(p_set_max_pinned(props.max_device_pinned_mem_size > 0 ? props.max_device_pinned_mem_size : 1024),
                  CU_FILE_SUCCESS, "cuFileDriverSetMaxPinnedMemSize");
    size_t      bar     = 0;
    const char *runtime = getenv("HIPFILE_CUDART_LIBRARY");
    if (runtime != NULL && strstr(runtime, "libsimcuda") != NULL) {
        /* The simulated GPU is no PCI device: it has no BAR to report. */
        expect_status(p_bar_size(0, &bar), CU_FILE_PLATFORM_NOT_SUPPORTED,
                      "cuFileGetBARSizeInKB(0) on the simulated GPU -> CU_FILE_PLATFORM_NOT_SUPPORTED");
    }
    else {
        expect_status(p_bar_size(0, &bar), CU_FILE_SUCCESS, "cuFileGetBARSizeInKB(0)");
        check(bar > 0, "cuFileGetBARSizeInKB reports a size", "%zu", bar);
    }

    CUfileP2PFlags_t p2p = (CUfileP2PFlags_t)0;
    expect_status(p_get_p2p(CU_FILE_NVME_SUPPORTED, &p2p), CU_FILE_SUCCESS, "cuFileDriverGetP2PFlags");
    expect_status(p_set_p2p(CU_FILE_NVME_SUPPORTED, CU_FILE_P2P_FLAG_PCI_P2PDMA), CU_FILE_SUCCESS,
                  "cuFileDriverSetP2PFlags");
    expect_status(p_get_p2p(CU_FILE_NVME_SUPPORTED, &p2p), CU_FILE_SUCCESS, "cuFileDriverGetP2PFlags after a set");
    check(p2p == CU_FILE_P2P_FLAG_PCI_P2PDMA, "cuFileDriverGetP2PFlags reads back the flags set", "%d", (int)p2p);

    expect_status(p_stats_start(), CU_FILE_SUCCESS, "cuFileStatsStart");

    int            fd  = scratch_file(argv[1], "api-surface.bin");
    CUfileHandle_t fh  = NULL;
    void          *dev = device_alloc(SIZE);
    unsigned char *out = (unsigned char *)malloc(SIZE), *back = (unsigned char *)malloc(SIZE);
    if (out == NULL || back == NULL) {
        setup_failed("malloc");
    }
    fill_pattern(out, SIZE, 1);
    copy_or_exit(dev, out, SIZE, cudaMemcpyHostToDevice);
    CUfileDescr_t descr;
    memset(&descr, 0, sizeof descr);
    descr.type      = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    descr.handle.fd = fd;
    expect_status(p_handle_register(&fh, &descr), CU_FILE_SUCCESS, "cuFileHandleRegister");
    expect_status(p_set_io_policy(fh, CU_FILE_IO_POLICY_FALLBACK), CU_FILE_SUCCESS,
                  "cuFileHandleSetIoPolicy (extension)");
    CUfileIoPolicy_t policy = CU_FILE_IO_POLICY_DIRECT_ONLY;
    expect_status(p_get_io_policy(fh, &policy), CU_FILE_SUCCESS, "cuFileHandleGetIoPolicy (extension)");
    check(policy == CU_FILE_IO_POLICY_FALLBACK, "cuFileHandleGetIoPolicy reads back the policy set", "%d",
          (int)policy);
    expect_status(p_buf_register(dev, SIZE, 0), CU_FILE_SUCCESS, "cuFileBufRegister");
    expect_bytes(p_write(fh, dev, SIZE, 0, 0), (ssize_t)SIZE, "cuFileWrite moves every byte");
    if (cudaMemset(dev, 0, SIZE) != cudaSuccess) {
        setup_failed("cudaMemset");
    }
    expect_bytes(p_read(fh, dev, SIZE, 0, 0), (ssize_t)SIZE, "cuFileRead moves every byte");

    CUfileBatchHandle_t batch = NULL;
    expect_status(p_batch_setup(&batch, 1), CU_FILE_SUCCESS, "cuFileBatchIOSetUp");
    CUfileIOParams_t entry;
    memset(&entry, 0, sizeof entry);
    entry.mode                  = CUFILE_BATCH;
    entry.u.batch.devPtr_base   = dev;
    entry.u.batch.size          = SIZE;
    entry.fh                    = fh;
    entry.opcode                = CUFILE_READ;
    entry.cookie                = &entry;
    expect_status(p_batch_submit(batch, 1, &entry, 0), CU_FILE_SUCCESS, "cuFileBatchIOSubmit");
    CUfileIOEvents_t event;
    memset(&event, 0, sizeof event);
    unsigned        nr      = 1;
    struct timespec timeout = {30, 0};
    expect_status(p_batch_status(batch, 1, &nr, &event, &timeout), CU_FILE_SUCCESS, "cuFileBatchIOGetStatus");
    check(nr == 1 && event.status == CUFILE_COMPLETE && event.ret == SIZE && event.cookie == &entry,
          "the batch read completes with every byte", "nr %u status %d ret %zu", nr, (int)event.status, event.ret);
    expect_status(p_batch_cancel(batch), CU_FILE_SUCCESS, "cuFileBatchIOCancel");
    p_batch_destroy(batch);

    cudaStream_t stream = NULL;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
        setup_failed("cudaStreamCreateWithFlags");
    }
    expect_status(p_stream_register((CUstream)stream, 0), CU_FILE_SUCCESS, "cuFileStreamRegister");
    size_t  size = SIZE;
    off_t   file_offset = 0, buf_offset = 0;
    ssize_t written = -7, read_back = -7;
    expect_status(p_write_async(fh, dev, &size, &file_offset, &buf_offset, &written, (CUstream)stream), CU_FILE_SUCCESS,
                  "cuFileWriteAsync");
    expect_status(p_read_async(fh, dev, &size, &file_offset, &buf_offset, &read_back, (CUstream)stream),
                  CU_FILE_SUCCESS, "cuFileReadAsync");
    check(cudaStreamSynchronize(stream) == cudaSuccess && written == (ssize_t)SIZE && read_back == (ssize_t)SIZE,
          "stream IO moves every byte by the time the stream is done", "written %zd read %zd", written, read_back);
    expect_status(p_stream_deregister((CUstream)stream), CU_FILE_SUCCESS, "cuFileStreamDeregister");
    copy_or_exit(back, dev, SIZE, cudaMemcpyDeviceToHost);
    check(memcmp(back, out, SIZE) == 0, "the bytes read back are the bytes written", "they differ");

    CUfileStatsLevel1_t l1;
    CUfileStatsLevel2_t l2;
    CUfileStatsLevel3_t l3;
    expect_status(p_stats_l1(&l1), CU_FILE_SUCCESS, "cuFileGetStatsL1");
    check(l1.write_bytes >= SIZE && l1.read_bytes >= SIZE, "level 1 statistics count the bytes moved",
          "read %llu write %llu", (unsigned long long)l1.read_bytes, (unsigned long long)l1.write_bytes);
    expect_status(p_stats_l2(&l2), CU_FILE_SUCCESS, "cuFileGetStatsL2");
    expect_status(p_stats_l3(&l3), CU_FILE_SUCCESS, "cuFileGetStatsL3");
    expect_status(p_stats_reset(), CU_FILE_SUCCESS, "cuFileStatsReset");
    expect_status(p_stats_l1(&l1), CU_FILE_SUCCESS, "cuFileGetStatsL1 after a reset");
    check(l1.read_bytes == 0 && l1.write_bytes == 0, "cuFileStatsReset zeroes the counters", "read %llu write %llu",
          (unsigned long long)l1.read_bytes, (unsigned long long)l1.write_bytes);
    expect_status(p_stats_stop(), CU_FILE_SUCCESS, "cuFileStatsStop");

    expect_status(p_buf_deregister(dev), CU_FILE_SUCCESS, "cuFileBufDeregister");
    p_handle_deregister(fh);
    expect_status(p_driver_open(), CU_FILE_SUCCESS, "a second cuFileDriverOpen");
    check(p_use_count() == 2, "cuFileUseCount counts each open", "%ld", p_use_count());
    expect_status(legacy_close(), CU_FILE_SUCCESS, "cuFileDriverClose (the symbol older headers name)");
    expect_status(p_driver_close_v2(), CU_FILE_SUCCESS, "cuFileDriverClose_v2");
    check(p_use_count() == 0, "the driver is closed after as many closes as opens", "%ld", p_use_count());

    if (cudaStreamDestroy(stream) != cudaSuccess || cudaFree(dev) != cudaSuccess) {
        printf("# releasing CUDA resources failed\n");
    }
    free(out);
    free(back);
    close(fd);
    return tap_finish();
}
