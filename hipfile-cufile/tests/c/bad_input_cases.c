/*
 * bad_input_cases.c - cufile.h entry points called with NULL, garbage, stale and out-of-range
 * arguments, one case per process.
 *
 * Usage:
 *   bad_input_cases --list             one `class/name` per line
 *   bad_input_cases --table            the case table (markdown): expected answer and its basis
 *   bad_input_cases SCRATCH_DIR CASE   run one case in SCRATCH_DIR (a fresh directory)
 *
 * A case makes one bad call (sometimes a short loop of them), compares the answer with the
 * table, then checks that the library still serves a good request (a 4 KiB write and read back
 * of a fresh file). It prints `ok - CASE` or `not ok - CASE: why`, then the plan `1..1`, and
 * exits 0 or 1; a signal, a hang, another exit or "panicked" on stderr is a crash (the runner,
 * `cargo xtask c-tests`, starts each case in its own process).
 *
 * Basis: "cuFile" is cuFile's documented answer; "facade" is the answer hipfile-rs's hipFile C
 * ABI gives to the same call (upstream hipFile's, which follows cuFile), where cuFile's own is
 * not documented: those are to be confirmed against NVIDIA's library on the GPU machine; the
 * IO policy calls are hipfile-rs's extension, answering as hipFileHandleSetIoPolicy does.
 *
 * Builds as C11 and as C++17.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <cufile.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_runtime_subset.h"

#define CASES_PAIR_T CUfileError_t
#define CASES_RUNTIME_ERROR(pair) ((int)(pair).cu_err)
#include "cufile_cases.h"

#define DEV_SIZE ((size_t)(64 * 1024))

/* CU_FILE_CUDA_DRIVER_ERROR with the CUDA failure's number (not 0) in cu_err. */
#define CUDA_FAILURE {X_RUNTIME, (long long)CU_FILE_CUDA_DRIVER_ERROR, 0}

/* ------------------------------------------------------------------------ */
/* Scratch, memory, post-checks                                              */
/* ------------------------------------------------------------------------ */

static int
file_in_scratch(const char *name, int flags)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    int fd = open(path, flags | O_CREAT, 0644);
    if (fd < 0) {
        setup_failed(path);
    }
    return fd;
}

static void *
dev_alloc(size_t size)
{
    void *ptr = NULL;
    if (cudaMalloc(&ptr, size) != cudaSuccess || ptr == NULL) {
        setup_failed("cudaMalloc");
    }
    return ptr;
}

static CUfileError_t
register_fd(CUfileHandle_t *fh, int fd, int type)
{
    CUfileDescr_t descr;
    memset(&descr, 0, sizeof descr);
    descr.type      = (enum CUfileFileHandleType)type;
    descr.handle.fd = fd;
    return cuFileHandleRegister(fh, &descr);
}

/* A registered handle of a fresh 64 KiB file (set-up: exits on failure). */
static CUfileHandle_t
good_handle(const char *name)
{
    int           fd = file_in_scratch(name, O_RDWR | O_TRUNC);
    unsigned char block[4096];
    memset(block, 0x33, sizeof block);
    for (int i = 0; i < 16; i++) {
        if (pwrite(fd, block, sizeof block, (off_t)i * 4096) != (ssize_t)sizeof block) {
            setup_failed("pwrite");
        }
    }
    CUfileHandle_t fh = NULL;
    if (register_fd(&fh, fd, CU_FILE_HANDLE_TYPE_OPAQUE_FD).err != CU_FILE_SUCCESS) {
        errno = 0;
        setup_failed("cuFileHandleRegister of a good file");
    }
    return fh;
}

/* The library still serves a good request: 4 KiB written to a fresh file and read back. */
static void
post_still_serves(void)
{
    static int     round = 0;
    char           name[64];
    snprintf(name, sizeof name, "post-%d.bin", round++);
    int            fd  = file_in_scratch(name, O_RDWR | O_TRUNC);
    CUfileHandle_t fh  = NULL;
    CUfileError_t  reg = register_fd(&fh, fd, CU_FILE_HANDLE_TYPE_OPAQUE_FD);
    if (reg.err != CU_FILE_SUCCESS) {
        note("afterwards a good file does not register (err %d)", (int)reg.err);
        close(fd);
        return;
    }
    void         *dev = dev_alloc(4096);
    unsigned char out[4096], back[4096];
    for (size_t i = 0; i < sizeof out; i++) {
        out[i] = (unsigned char)(i * 13u + 7u);
    }
    int     copied = cudaMemcpy(dev, out, sizeof out, cudaMemcpyHostToDevice) == cudaSuccess;
    ssize_t put    = cuFileWrite(fh, dev, sizeof out, 0, 0);
    int     read   = pread(fd, back, sizeof back, 0) == (ssize_t)sizeof back;
    if (!copied || put != 4096 || !read || memcmp(out, back, sizeof out) != 0) {
        note("afterwards a good 4 KiB write returned %zd%s", put, put == 4096 ? " with wrong bytes" : "");
    }
    cuFileHandleDeregister(fh);
    if (cudaFree(dev) != cudaSuccess) {
        note("cudaFree failed");
    }
    close(fd);
}

static void
post_use_count(long want)
{
    long got = cuFileUseCount();
    if (got != want) {
        note("cuFileUseCount() = %ld afterwards, want %ld", got, want);
    }
}

#define GARBAGE_HANDLE ((CUfileHandle_t)(uintptr_t)0xdeadbeefcafe0000ull)
#define GARBAGE_BATCH ((CUfileBatchHandle_t)(uintptr_t)0xdeadbeefcafe0000ull)
#define GARBAGE_STREAM ((CUstream)(uintptr_t)0xdeadbeefcafe0000ull)

/* ------------------------------------------------------------------------ */
/* Cases                                                                     */
/* ------------------------------------------------------------------------ */

static outcome
driver_close_unopened(void)
{
    outcome o = got_pair(cuFileDriverClose());
    post_use_count(0);
    return o;
}

static outcome
driver_close_more_than_opened(void)
{
    if (cuFileDriverOpen().err != CU_FILE_SUCCESS || cuFileDriverClose().err != CU_FILE_SUCCESS) {
        setup_failed("open and close");
    }
    outcome o = got_pair(cuFileDriverClose());
    post_use_count(0);
    return o;
}

static outcome
driver_two_opens(void)
{
    CUfileError_t a = cuFileDriverOpen(), b = cuFileDriverOpen();
    if (a.err != CU_FILE_SUCCESS || b.err != CU_FILE_SUCCESS) {
        note("cuFileDriverOpen failed");
    }
    return got_value(cuFileUseCount());
}

static outcome
driver_properties_null(void)
{
    return got_pair(cuFileDriverGetProperties(NULL));
}

static outcome
driver_poll_mode_closed(void)
{
    return got_pair(cuFileDriverSetPollMode(true, 4));
}

static outcome
driver_max_direct_io_zero(void)
{
    if (cuFileDriverOpen().err != CU_FILE_SUCCESS) {
        setup_failed("cuFileDriverOpen");
    }
    return got_pair(cuFileDriverSetMaxDirectIOSize(0));
}

static outcome
version_null(void)
{
    return got_pair(cuFileGetVersion(NULL));
}

static outcome
register_fh_null(void)
{
    int fd = file_in_scratch("a.bin", O_RDWR);
    return got_pair(register_fd(NULL, fd, CU_FILE_HANDLE_TYPE_OPAQUE_FD));
}

static outcome
register_descr_null(void)
{
    CUfileHandle_t fh = NULL;
    return got_pair(cuFileHandleRegister(&fh, NULL));
}

static outcome
register_type(int type)
{
    int            fd = file_in_scratch("a.bin", O_RDWR);
    CUfileHandle_t fh = NULL;
    return got_pair(register_fd(&fh, fd, type));
}

static outcome
register_type_win32(void)
{
    return register_type(CU_FILE_HANDLE_TYPE_OPAQUE_WIN32);
}

static outcome
register_type_userspace_fs(void)
{
    return register_type(CU_FILE_HANDLE_TYPE_USERSPACE_FS);
}

static outcome
register_type_zero(void)
{
    return register_type(0);
}

static outcome
register_type_99(void)
{
    return register_type(99);
}

static outcome
register_same_fd_twice(void)
{
    int            fd = file_in_scratch("a.bin", O_RDWR);
    CUfileHandle_t fh = NULL, again = NULL;
    if (register_fd(&fh, fd, CU_FILE_HANDLE_TYPE_OPAQUE_FD).err != CU_FILE_SUCCESS) {
        setup_failed("first registration");
    }
    return got_pair(register_fd(&again, fd, CU_FILE_HANDLE_TYPE_OPAQUE_FD));
}

static outcome
register_fd_minus_one(void)
{
    CUfileHandle_t fh = NULL;
    outcome        o  = got_pair(register_fd(&fh, -1, CU_FILE_HANDLE_TYPE_OPAQUE_FD));
    return o;
}

static outcome
register_fd_closed(void)
{
    int fd = file_in_scratch("a.bin", O_RDWR);
    close(fd);
    CUfileHandle_t fh = NULL;
    return got_pair(register_fd(&fh, fd, CU_FILE_HANDLE_TYPE_OPAQUE_FD));
}

static outcome
register_fd_directory(void)
{
    int fd = open(g_dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        setup_failed("open the scratch directory");
    }
    CUfileHandle_t fh = NULL;
    return got_pair(register_fd(&fh, fd, CU_FILE_HANDLE_TYPE_OPAQUE_FD));
}

static outcome
register_fd_pipe(void)
{
    int ends[2];
    if (pipe(ends) != 0) {
        setup_failed("pipe");
    }
    CUfileHandle_t fh = NULL;
    return got_pair(register_fd(&fh, ends[0], CU_FILE_HANDLE_TYPE_OPAQUE_FD));
}

static outcome
read_handle(CUfileHandle_t fh)
{
    void *dev = dev_alloc(DEV_SIZE);
    errno     = 0;
    return got_io(cuFileRead(fh, dev, 4096, 0, 0));
}

static outcome
handle_read_null(void)
{
    (void)good_handle("a.bin");
    return read_handle(NULL);
}

static outcome
handle_read_garbage(void)
{
    (void)good_handle("a.bin");
    return read_handle(GARBAGE_HANDLE);
}

static outcome
handle_read_deregistered(void)
{
    CUfileHandle_t fh = good_handle("a.bin");
    cuFileHandleDeregister(fh);
    return read_handle(fh);
}

static outcome
handle_write_deregistered(void)
{
    CUfileHandle_t fh = good_handle("a.bin");
    void          *dev = dev_alloc(DEV_SIZE);
    cuFileHandleDeregister(fh);
    errno = 0;
    return got_io(cuFileWrite(fh, dev, 4096, 0, 0));
}

static outcome
handle_read_driver_closed(void)
{
    CUfileHandle_t fh = good_handle("a.bin");
    if (cuFileDriverClose().err != CU_FILE_SUCCESS) {
        setup_failed("cuFileDriverClose");
    }
    return read_handle(fh);
}

static outcome
handle_deregister_null(void)
{
    (void)good_handle("a.bin");
    cuFileHandleDeregister(NULL);
    return got_nothing();
}

static outcome
handle_deregister_garbage(void)
{
    (void)good_handle("a.bin");
    cuFileHandleDeregister(GARBAGE_HANDLE);
    return got_nothing();
}

static outcome
handle_deregister_twice(void)
{
    CUfileHandle_t fh = good_handle("a.bin");
    cuFileHandleDeregister(fh);
    cuFileHandleDeregister(fh);
    return got_nothing();
}

static outcome
buffer_register_null(void)
{
    return got_pair(cuFileBufRegister(NULL, 4096, 0));
}

static outcome
buffer_register_zero_length(void)
{
    return got_pair(cuFileBufRegister(dev_alloc(DEV_SIZE), 0, 0));
}

static outcome
buffer_register_past_allocation(void)
{
    return got_pair(cuFileBufRegister(dev_alloc(DEV_SIZE), DEV_SIZE + 1, 0));
}

static outcome
buffer_register_twice(void)
{
    void *dev = dev_alloc(DEV_SIZE);
    if (cuFileBufRegister(dev, DEV_SIZE, 0).err != CU_FILE_SUCCESS) {
        setup_failed("first cuFileBufRegister");
    }
    return got_pair(cuFileBufRegister(dev, DEV_SIZE, 0));
}

static outcome
buffer_deregister_never_registered(void)
{
    if (cuFileDriverOpen().err != CU_FILE_SUCCESS) {
        setup_failed("cuFileDriverOpen");
    }
    return got_pair(cuFileBufDeregister(dev_alloc(DEV_SIZE)));
}

static outcome
buffer_deregister_twice(void)
{
    void *dev = dev_alloc(DEV_SIZE);
    if (cuFileBufRegister(dev, DEV_SIZE, 0).err != CU_FILE_SUCCESS
        || cuFileBufDeregister(dev).err != CU_FILE_SUCCESS) {
        setup_failed("register and deregister");
    }
    return got_pair(cuFileBufDeregister(dev));
}

static outcome
range_read(off_t file_offset, off_t buf_offset, size_t size)
{
    CUfileHandle_t fh  = good_handle("a.bin");
    void          *dev = dev_alloc(DEV_SIZE);
    errno              = 0;
    return got_io(cuFileRead(fh, dev, size, file_offset, buf_offset));
}

static outcome
range_read_negative_file_offset(void)
{
    return range_read(-4096, 0, 4096);
}

static outcome
range_read_negative_buffer_offset(void)
{
    return range_read(0, -4096, 4096);
}

static outcome
range_read_size_past_buffer(void)
{
    CUfileHandle_t fh  = good_handle("a.bin");
    void          *dev = dev_alloc(DEV_SIZE);
    if (cuFileBufRegister(dev, DEV_SIZE, 0).err != CU_FILE_SUCCESS) {
        setup_failed("cuFileBufRegister");
    }
    errno = 0;
    return got_io(cuFileRead(fh, dev, DEV_SIZE + 4096, 0, 0));
}

static outcome
range_read_size_max(void)
{
    return range_read(0, 0, SIZE_MAX);
}

static outcome
range_read_size_zero(void)
{
    return range_read(0, 0, 0);
}

static outcome
range_read_at_eof(void)
{
    return range_read(64 * 1024, 0, 4096);
}

static outcome
param_set_size_unknown(void)
{
    return got_pair(cuFileSetParameterSizeT((CUFileSizeTConfigParameter_t)12, 1));
}

static outcome
param_get_bool_unknown(void)
{
    bool value = false;
    return got_pair(cuFileGetParameterBool((CUFileBoolConfigParameter_t)-1, &value));
}

static outcome
param_get_string_null(void)
{
    return got_pair(cuFileGetParameterString(CUFILE_PARAM_LOGGING_LEVEL, NULL, 16));
}

static outcome
param_get_string_zero_length(void)
{
    char text[4] = {0};
    return got_pair(cuFileGetParameterString(CUFILE_PARAM_LOGGING_LEVEL, text, 0));
}

static outcome
param_set_string_null(void)
{
    return got_pair(cuFileSetParameterString(CUFILE_PARAM_LOGGING_LEVEL, NULL));
}

static outcome
param_set_size_while_open(void)
{
    if (cuFileDriverOpen().err != CU_FILE_SUCCESS) {
        setup_failed("cuFileDriverOpen");
    }
    return got_pair(cuFileSetParameterSizeT(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, 1024));
}

static outcome
param_min_max_null(void)
{
    size_t high = 0;
    return got_pair(cuFileGetParameterMinMaxValue(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, NULL, &high));
}

static outcome
param_slabs_null(void)
{
    size_t counts[1] = {1};
    return got_pair(cuFileSetParameterPosixPoolSlabArray(NULL, counts, 1));
}

static outcome
param_slabs_negative_length(void)
{
    size_t sizes[1] = {4096}, counts[1] = {1};
    return got_pair(cuFileGetParameterPosixPoolSlabArray(sizes, counts, -1));
}

static outcome
bar_size_null(void)
{
    if (cuFileDriverOpen().err != CU_FILE_SUCCESS) {
        setup_failed("cuFileDriverOpen");
    }
    return got_pair(cuFileGetBARSizeInKB(0, NULL));
}

static outcome
bar_size_no_such_gpu(void)
{
    if (cuFileDriverOpen().err != CU_FILE_SUCCESS) {
        setup_failed("cuFileDriverOpen");
    }
    size_t bar = 0;
    return got_pair(cuFileGetBARSizeInKB(1000, &bar));
}

static void
open_or_exit(void)
{
    if (cuFileDriverOpen().err != CU_FILE_SUCCESS) {
        setup_failed("cuFileDriverOpen");
    }
}

static outcome
p2p_get_closed(void)
{
    CUfileP2PFlags_t flags;
    return got_pair(cuFileDriverGetP2PFlags(CU_FILE_NVME_SUPPORTED, &flags));
}

static outcome
p2p_set_closed(void)
{
    return got_pair(cuFileDriverSetP2PFlags(CU_FILE_NVME_SUPPORTED, CU_FILE_P2P_FLAG_PCI_P2PDMA));
}

static outcome
p2p_get_null(void)
{
    open_or_exit();
    return got_pair(cuFileDriverGetP2PFlags(CU_FILE_NVME_SUPPORTED, NULL));
}

static outcome
p2p_status_flag_out_of_range(void)
{
    open_or_exit();
    CUfileP2PFlags_t flags;
    return got_pair(cuFileDriverGetP2PFlags((CUfileDriverStatusFlags_t)99, &flags));
}

static outcome
p2p_set_status_flag_out_of_range(void)
{
    open_or_exit();
    return got_pair(cuFileDriverSetP2PFlags((CUfileDriverStatusFlags_t)99, CU_FILE_P2P_FLAG_PCI_P2PDMA));
}

static outcome
p2p_get_virtiofs(void)
{
    open_or_exit();
    CUfileP2PFlags_t flags = CU_FILE_P2P_FLAG_C2C;
    outcome          o     = got_pair(cuFileDriverGetP2PFlags(CU_FILE_VIRTIOFS_SUPPORTED, &flags));
    if (o.pair.err == CU_FILE_SUCCESS && (int)flags != 0) {
        note("the flags of a target nobody set read %d, want 0", (int)flags);
    }
    return o;
}

static outcome
p2p_set_nvfs(void)
{
    open_or_exit();
    return got_pair(cuFileDriverSetP2PFlags(CU_FILE_NVME_SUPPORTED, CU_FILE_P2P_FLAG_NVFS));
}

static outcome
policy_set_null(void)
{
    open_or_exit();
    return got_pair(cuFileHandleSetIoPolicy(NULL, CU_FILE_IO_POLICY_DIRECT_ONLY));
}

static outcome
policy_set_garbage_handle(void)
{
    (void)good_handle("a.bin");
    return got_pair(cuFileHandleSetIoPolicy(GARBAGE_HANDLE, CU_FILE_IO_POLICY_DIRECT_ONLY));
}

static outcome
policy_set_out_of_range(void)
{
    CUfileHandle_t fh = good_handle("a.bin");
    return got_pair(cuFileHandleSetIoPolicy(fh, (CUfileIoPolicy_t)-1));
}

static outcome
policy_get_null(void)
{
    CUfileHandle_t fh = good_handle("a.bin");
    return got_pair(cuFileHandleGetIoPolicy(fh, NULL));
}

static outcome
policy_set_driver_closed(void)
{
    CUfileHandle_t fh = good_handle("a.bin");
    if (cuFileDriverClose().err != CU_FILE_SUCCESS) {
        setup_failed("cuFileDriverClose");
    }
    return got_pair(cuFileHandleSetIoPolicy(fh, CU_FILE_IO_POLICY_DIRECT_ONLY));
}

static outcome
p2p_set_unknown_bits(void)
{
    open_or_exit();
    return got_pair(cuFileDriverSetP2PFlags(CU_FILE_NVME_SUPPORTED, (CUfileP2PFlags_t)0x100));
}

static outcome
stats_level_out_of_range(void)
{
    return got_pair(cuFileSetStatsLevel(4));
}

static outcome
stats_get_level_null(void)
{
    return got_pair(cuFileGetStatsLevel(NULL));
}

static outcome
stats_l1_null(void)
{
    if (cuFileDriverOpen().err != CU_FILE_SUCCESS) {
        setup_failed("cuFileDriverOpen");
    }
    return got_pair(cuFileGetStatsL1(NULL));
}

static outcome
batch_setup_null(void)
{
    return got_pair(cuFileBatchIOSetUp(NULL, 4));
}

static outcome
batch_setup_zero(void)
{
    CUfileBatchHandle_t batch = NULL;
    return got_pair(cuFileBatchIOSetUp(&batch, 0));
}

static outcome
batch_setup_uint_max(void)
{
    CUfileBatchHandle_t batch = NULL;
    return got_pair(cuFileBatchIOSetUp(&batch, 0xffffffffu));
}

static outcome
batch_submit_garbage_handle(void)
{
    CUfileHandle_t   fh = good_handle("a.bin");
    CUfileIOParams_t p;
    memset(&p, 0, sizeof p);
    p.mode                = CUFILE_BATCH;
    p.u.batch.devPtr_base = dev_alloc(DEV_SIZE);
    p.u.batch.size        = 4096;
    p.fh                  = fh;
    p.opcode              = CUFILE_READ;
    return got_pair(cuFileBatchIOSubmit(GARBAGE_BATCH, 1, &p, 0));
}

static outcome
batch_submit_null_params(void)
{
    CUfileBatchHandle_t batch = NULL;
    if (cuFileBatchIOSetUp(&batch, 4).err != CU_FILE_SUCCESS) {
        setup_failed("cuFileBatchIOSetUp");
    }
    return got_pair(cuFileBatchIOSubmit(batch, 1, NULL, 0));
}

static outcome
batch_submit_bad_opcode(void)
{
    CUfileHandle_t      fh    = good_handle("a.bin");
    CUfileBatchHandle_t batch = NULL;
    if (cuFileBatchIOSetUp(&batch, 4).err != CU_FILE_SUCCESS) {
        setup_failed("cuFileBatchIOSetUp");
    }
    CUfileIOParams_t p;
    memset(&p, 0, sizeof p);
    p.mode                = CUFILE_BATCH;
    p.u.batch.devPtr_base = dev_alloc(DEV_SIZE);
    p.u.batch.size        = 4096;
    p.fh                  = fh;
    p.opcode              = (CUfileOpcode_t)7;
    return got_pair(cuFileBatchIOSubmit(batch, 1, &p, 0));
}

static outcome
batch_submit_destroyed(void)
{
    CUfileHandle_t      fh    = good_handle("a.bin");
    CUfileBatchHandle_t batch = NULL;
    if (cuFileBatchIOSetUp(&batch, 4).err != CU_FILE_SUCCESS) {
        setup_failed("cuFileBatchIOSetUp");
    }
    cuFileBatchIODestroy(batch);
    CUfileIOParams_t p;
    memset(&p, 0, sizeof p);
    p.mode                = CUFILE_BATCH;
    p.u.batch.devPtr_base = dev_alloc(DEV_SIZE);
    p.u.batch.size        = 4096;
    p.fh                  = fh;
    p.opcode              = CUFILE_READ;
    return got_pair(cuFileBatchIOSubmit(batch, 1, &p, 0));
}

static outcome
batch_status_garbage(void)
{
    CUfileIOEvents_t events[1];
    unsigned         nr      = 1;
    struct timespec  timeout = {0, 0};
    return got_pair(cuFileBatchIOGetStatus(GARBAGE_BATCH, 0, &nr, events, &timeout));
}

static outcome
batch_status_null_nr(void)
{
    CUfileBatchHandle_t batch = NULL;
    if (cuFileBatchIOSetUp(&batch, 4).err != CU_FILE_SUCCESS) {
        setup_failed("cuFileBatchIOSetUp");
    }
    CUfileIOEvents_t events[1];
    struct timespec  timeout = {0, 0};
    return got_pair(cuFileBatchIOGetStatus(batch, 0, NULL, events, &timeout));
}

static outcome
batch_status_bad_timeout(void)
{
    CUfileBatchHandle_t batch = NULL;
    if (cuFileBatchIOSetUp(&batch, 4).err != CU_FILE_SUCCESS) {
        setup_failed("cuFileBatchIOSetUp");
    }
    CUfileIOEvents_t events[4];
    unsigned         nr      = 4;
    struct timespec  timeout = {0, 2000000000L};
    return got_pair(cuFileBatchIOGetStatus(batch, 0, &nr, events, &timeout));
}

static outcome
batch_cancel_null(void)
{
    return got_pair(cuFileBatchIOCancel(NULL));
}

static outcome
batch_destroy_garbage(void)
{
    if (cuFileDriverOpen().err != CU_FILE_SUCCESS) {
        setup_failed("cuFileDriverOpen");
    }
    cuFileBatchIODestroy(NULL);
    cuFileBatchIODestroy(GARBAGE_BATCH);
    return got_nothing();
}

static outcome
stream_register_bad_flags(void)
{
    return got_pair(cuFileStreamRegister(NULL, 0x10));
}

static outcome
stream_deregister_unregistered(void)
{
    if (cuFileDriverOpen().err != CU_FILE_SUCCESS) {
        setup_failed("cuFileDriverOpen");
    }
    cudaStream_t s = NULL;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        setup_failed("cudaStreamCreateWithFlags");
    }
    return got_pair(cuFileStreamDeregister((CUstream)s));
}

static outcome
async_read_all_null(void)
{
    return got_pair(cuFileReadAsync(NULL, NULL, NULL, NULL, NULL, NULL, NULL));
}

static outcome
async_read_deregistered_handle(void)
{
    CUfileHandle_t fh  = good_handle("a.bin");
    void          *dev = dev_alloc(DEV_SIZE);
    cuFileHandleDeregister(fh);
    size_t  size = 4096;
    off_t   file_offset = 0, buf_offset = 0;
    ssize_t bytes = 0;
    return got_pair(cuFileReadAsync(fh, dev, &size, &file_offset, &buf_offset, &bytes, NULL));
}

static outcome
async_read_garbage_stream(void)
{
    CUfileHandle_t fh   = good_handle("a.bin");
    void          *dev  = dev_alloc(DEV_SIZE);
    size_t         size = 4096;
    off_t          file_offset = 0, buf_offset = 0;
    ssize_t        bytes = 12345;
    outcome o = got_pair(cuFileReadAsync(fh, dev, &size, &file_offset, &buf_offset, &bytes, GARBAGE_STREAM));
    if (bytes != 12345) {
        note("the refused call wrote %zd to bytes_read_p", bytes);
    }
    return o;
}

static outcome
async_write_negative_offset(void)
{
    CUfileHandle_t fh   = good_handle("a.bin");
    void          *dev  = dev_alloc(DEV_SIZE);
    size_t         size = 4096;
    off_t          file_offset = -4096, buf_offset = 0;
    ssize_t        bytes = 0;
    return got_pair(cuFileWriteAsync(fh, dev, &size, &file_offset, &buf_offset, &bytes, NULL));
}

/* ------------------------------------------------------------------------ */
/* The table                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct {
    const char *name;
    expect      want;
    const char *basis;
    outcome (*run)(void);
} bad_case;

#define CU "cuFile"
#define FA "facade (hipFile's answer to the same call)"
#define HR "hipfile-rs extension, as hipFileHandleSetIoPolicy"

static const bad_case CASES[] = {
    {"driver/close-unopened", CODE(CU_FILE_DRIVER_NOT_INITIALIZED), CU, driver_close_unopened},
    {"driver/close-more-than-opened", CODE(CU_FILE_DRIVER_NOT_INITIALIZED), CU, driver_close_more_than_opened},
    {"driver/use-count-two-opens", VALUE(2), CU, driver_two_opens},
    {"driver/get-properties-null", CODE(CU_FILE_INVALID_VALUE), CU, driver_properties_null},
    {"driver/set-poll-mode-closed", CODE(CU_FILE_DRIVER_NOT_INITIALIZED), CU, driver_poll_mode_closed},
    {"driver/set-max-direct-io-size-zero", CODE(CU_FILE_INVALID_VALUE), FA, driver_max_direct_io_zero},
    {"driver/get-version-null", CODE(CU_FILE_INVALID_VALUE), CU, version_null},
    {"register/fh-null", CODE(CU_FILE_INVALID_VALUE), CU, register_fh_null},
    {"register/descr-null", CODE(CU_FILE_INVALID_VALUE), CU, register_descr_null},
    {"register/type-opaque-win32", CODE(CU_FILE_IO_NOT_SUPPORTED), FA, register_type_win32},
    {"register/type-userspace-fs", CODE(CU_FILE_SUCCESS), CU ": handle.fd registers, fs_ops unused",
     register_type_userspace_fs},
    {"register/type-zero", CODE(CU_FILE_INVALID_VALUE), CU, register_type_zero},
    {"register/type-99", CODE(CU_FILE_INVALID_VALUE), CU, register_type_99},
    {"register/same-fd-twice", CODE(CU_FILE_HANDLE_ALREADY_REGISTERED), CU, register_same_fd_twice},
    {"fd/minus-one", CODE_OR(CU_FILE_INVALID_VALUE, CU_FILE_INTERNAL_ERROR), FA ", or cuFile's INVALID_VALUE",
     register_fd_minus_one},
    {"fd/closed", CODE_OR(CU_FILE_INVALID_VALUE, CU_FILE_INTERNAL_ERROR), FA ", or cuFile's INVALID_VALUE",
     register_fd_closed},
    {"fd/directory", CODE(CU_FILE_INVALID_FILE_TYPE), CU, register_fd_directory},
    {"fd/pipe", CODE(CU_FILE_INVALID_FILE_TYPE), CU, register_fd_pipe},
    {"handle/read-null", NEG(CU_FILE_HANDLE_NOT_REGISTERED), FA, handle_read_null},
    {"handle/read-garbage", NEG(CU_FILE_HANDLE_NOT_REGISTERED), FA, handle_read_garbage},
    {"handle/read-deregistered", NEG(CU_FILE_HANDLE_NOT_REGISTERED), FA, handle_read_deregistered},
    {"handle/write-deregistered", NEG(CU_FILE_HANDLE_NOT_REGISTERED), FA, handle_write_deregistered},
    {"handle/read-driver-closed", ERRNO(EINVAL), FA, handle_read_driver_closed},
    {"handle/deregister-null", NOTHING, CU ": a void call, ignored", handle_deregister_null},
    {"handle/deregister-garbage", NOTHING, CU ": a void call, ignored", handle_deregister_garbage},
    {"handle/deregister-twice", NOTHING, CU ": a void call, ignored", handle_deregister_twice},
    {"buffer/register-null", CODE(CU_FILE_INVALID_VALUE), CU, buffer_register_null},
    {"buffer/register-zero-length", CODE(CU_FILE_INVALID_VALUE), CU, buffer_register_zero_length},
    {"buffer/register-past-allocation", CODE(CU_FILE_CUDA_POINTER_RANGE_ERROR), CU, buffer_register_past_allocation},
    {"buffer/register-twice", CODE(CU_FILE_MEMORY_ALREADY_REGISTERED), CU, buffer_register_twice},
    {"buffer/deregister-never-registered", CODE(CU_FILE_MEMORY_NOT_REGISTERED), CU,
     buffer_deregister_never_registered},
    {"buffer/deregister-twice", CODE(CU_FILE_MEMORY_NOT_REGISTERED), CU, buffer_deregister_twice},
    {"range/read-negative-file-offset", ERRNO(EINVAL), CU, range_read_negative_file_offset},
    {"range/read-negative-buffer-offset", ERRNO(EINVAL), CU, range_read_negative_buffer_offset},
    {"range/read-size-past-registered-buffer", NEG(CU_FILE_INVALID_VALUE), FA, range_read_size_past_buffer},
    {"range/read-size-max", NEG(CU_FILE_INVALID_VALUE), FA, range_read_size_max},
    {"range/read-size-zero", BYTES(0), CU, range_read_size_zero},
    {"range/read-at-eof", BYTES(0), CU ": as pread", range_read_at_eof},
    {"param/set-size-unknown-12", CODE(CU_FILE_INVALID_VALUE), CU, param_set_size_unknown},
    {"param/get-bool-unknown-negative", CODE(CU_FILE_INVALID_VALUE), CU, param_get_bool_unknown},
    {"param/get-string-null", CODE(CU_FILE_INVALID_VALUE), CU, param_get_string_null},
    {"param/get-string-zero-length", CODE(CU_FILE_INVALID_VALUE), CU, param_get_string_zero_length},
    {"param/set-string-null", CODE(CU_FILE_INVALID_VALUE), CU, param_set_string_null},
    {"param/set-size-while-open", CODE(CU_FILE_DRIVER_ALREADY_OPEN), CU, param_set_size_while_open},
    {"param/min-max-null", CODE(CU_FILE_INVALID_VALUE), CU, param_min_max_null},
    {"param/slab-array-null", CODE(CU_FILE_INVALID_VALUE), CU, param_slabs_null},
    {"param/slab-array-negative-length", CODE(CU_FILE_INVALID_VALUE), CU, param_slabs_negative_length},
    {"param/bar-size-null", CODE(CU_FILE_INVALID_VALUE), CU, bar_size_null},
    {"param/bar-size-no-such-gpu", CODE(CU_FILE_INVALID_VALUE), CU, bar_size_no_such_gpu},
    {"p2p/get-driver-closed", CODE(CU_FILE_DRIVER_NOT_INITIALIZED), CU, p2p_get_closed},
    {"p2p/set-driver-closed", CODE(CU_FILE_DRIVER_NOT_INITIALIZED), CU, p2p_set_closed},
    {"p2p/get-null", CODE(CU_FILE_INVALID_VALUE), CU, p2p_get_null},
    {"p2p/get-status-flag-99", CODE(CU_FILE_INVALID_VALUE), CU, p2p_status_flag_out_of_range},
    {"p2p/set-status-flag-99", CODE(CU_FILE_INVALID_VALUE), CU, p2p_set_status_flag_out_of_range},
    {"p2p/get-virtiofs-target", CODE(CU_FILE_SUCCESS),
     "cuFile 1.16: CU_FILE_VIRTIOFS_SUPPORTED (13) is a target, CU_FILE_MAX_TARGET_TYPES is 14", p2p_get_virtiofs},
    {"p2p/set-nvfs", CODE(CU_FILE_INVALID_VALUE),
     "cuFile: on x86-64 only PCI_P2PDMA may be set (its CU_FILE_P2P_FLAG_NOT_SUPPORTED has no value in any cufile.h)",
     p2p_set_nvfs},
    {"policy/set-null-handle", CODE(CU_FILE_INVALID_VALUE), HR, policy_set_null},
    {"policy/set-garbage-handle", CODE(CU_FILE_HANDLE_NOT_REGISTERED), HR, policy_set_garbage_handle},
    {"policy/set-out-of-range", CODE(CU_FILE_INVALID_VALUE), HR, policy_set_out_of_range},
    {"policy/get-null-policy", CODE(CU_FILE_INVALID_VALUE), HR, policy_get_null},
    {"policy/set-driver-closed", CODE(CU_FILE_DRIVER_NOT_INITIALIZED), HR, policy_set_driver_closed},
    {"p2p/set-unknown-bits", CODE(CU_FILE_INVALID_VALUE),
     "hipfile-rs: cuFile documents CU_FILE_P2P_FLAG_NOT_SUPPORTED, which no cufile.h gives a value",
     p2p_set_unknown_bits},
    {"stats/set-level-4", CODE(CU_FILE_INVALID_VALUE), CU, stats_level_out_of_range},
    {"stats/get-level-null", CODE(CU_FILE_INVALID_VALUE), CU, stats_get_level_null},
    {"stats/l1-null", CODE(CU_FILE_INVALID_VALUE), CU, stats_l1_null},
    {"batch/setup-null-out", CODE(CU_FILE_INVALID_VALUE), CU, batch_setup_null},
    {"batch/setup-zero-entries", CODE(CU_FILE_INVALID_VALUE), CU, batch_setup_zero},
    {"batch/setup-uint-max-entries", CODE(CU_FILE_INVALID_VALUE), CU, batch_setup_uint_max},
    {"batch/submit-garbage-handle", CODE(CU_FILE_INVALID_VALUE), CU, batch_submit_garbage_handle},
    {"batch/submit-null-params", CODE(CU_FILE_INVALID_VALUE), CU, batch_submit_null_params},
    {"batch/submit-bad-opcode", CODE(CU_FILE_INVALID_VALUE), CU, batch_submit_bad_opcode},
    {"batch/submit-destroyed-handle", CODE(CU_FILE_INVALID_VALUE), CU, batch_submit_destroyed},
    {"batch/get-status-garbage-handle", CODE(CU_FILE_INVALID_VALUE), CU, batch_status_garbage},
    {"batch/get-status-null-nr", CODE(CU_FILE_INVALID_VALUE), CU, batch_status_null_nr},
    {"batch/get-status-nsec-2e9", CODE(CU_FILE_INVALID_VALUE), FA, batch_status_bad_timeout},
    {"batch/cancel-null", CODE(CU_FILE_INVALID_VALUE), CU, batch_cancel_null},
    {"batch/destroy-null-and-garbage", NOTHING, CU ": a void call, ignored", batch_destroy_garbage},
    {"stream/register-unknown-flag-bit", CODE(CU_FILE_INVALID_VALUE), CU, stream_register_bad_flags},
    {"stream/deregister-unregistered", CODE(CU_FILE_INVALID_VALUE), CU, stream_deregister_unregistered},
    {"async/read-all-null", CODE(CU_FILE_INVALID_VALUE), CU, async_read_all_null},
    {"async/read-deregistered-handle", CODE(CU_FILE_HANDLE_NOT_REGISTERED), FA, async_read_deregistered_handle},
    {"async/read-garbage-stream", CUDA_FAILURE, CU ": queuing on the bogus stream fails in the CUDA runtime",
     async_read_garbage_stream},
    {"async/write-negative-offset", CODE(CU_FILE_INVALID_VALUE), FA, async_write_negative_offset},
};

#define N_CASES (sizeof CASES / sizeof CASES[0])

static void
describe_expect(expect e, char *out, size_t room)
{
    switch (e.kind) {
        case X_CODE: snprintf(out, room, "err %lld (%s)", e.a, cufileop_status_error((CUfileOpError)e.a)); break;
        case X_CODE2:
            snprintf(out, room, "err %lld or %lld (%s / %s)", e.a, e.b, cufileop_status_error((CUfileOpError)e.a),
                     cufileop_status_error((CUfileOpError)e.b));
            break;
        case X_RUNTIME: snprintf(out, room, "err %lld (%s) with a CUDA code in cu_err", e.a,
                              cufileop_status_error((CUfileOpError)e.a)); break;
        case X_NEG: snprintf(out, room, "-%lld (%s)", e.a, cufileop_status_error((CUfileOpError)e.a)); break;
        case X_ERRNO: snprintf(out, room, "-1, errno %lld (%s)", e.a, strerror((int)e.a)); break;
        case X_BYTES: snprintf(out, room, "%lld bytes", e.a); break;
        case X_VALUE: snprintf(out, room, "%lld", e.a); break;
        case X_TEXT: snprintf(out, room, "a non-empty string"); break;
        case X_VOID: snprintf(out, room, "nothing (a void call)"); break;
        case X_KERNEL: snprintf(out, room, "what pread/pwrite return"); break;
    }
}

static void
describe_outcome(const outcome *o, char *out, size_t room)
{
    switch (o->kind) {
        case O_PAIR:
            snprintf(out, room, "err %d (%s) cu_err %d", (int)o->pair.err, cufileop_status_error(o->pair.err),
                     (int)o->pair.cu_err);
            break;
        case O_IO: snprintf(out, room, "%zd (errno %d)", o->ret, o->err); break;
        case O_VALUE: snprintf(out, room, "%lld", o->value); break;
        case O_TEXT: snprintf(out, room, "\"%s\"", o->text == NULL ? "(NULL)" : o->text); break;
        case O_VOID: snprintf(out, room, "nothing"); break;
    }
}

static int
run_case(size_t i)
{
    const bad_case *c      = &CASES[i];
    outcome         o      = c->run();
    int             passed = matches(c->want, &o);
    post_still_serves();
    char want[256], got[256];
    describe_expect(c->want, want, sizeof want);
    describe_outcome(&o, got, sizeof got);
    return case_result(c->name, passed, got, want, c->basis);
}

static const char *
case_name(size_t i)
{
    return CASES[i].name;
}

static const char *
describe_case(size_t i, char *want, size_t room)
{
    describe_expect(CASES[i].want, want, room);
    return CASES[i].basis;
}

int
main(int argc, char **argv)
{
    const case_table table = {N_CASES, case_name, describe_case, run_case};
    return cases_main(argc, argv, &table);
}
