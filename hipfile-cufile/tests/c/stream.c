/*
 * stream.c - cuFile's stream-ordered IO (cuFileReadAsync, cuFileWriteAsync,
 * cuFileStream{Register,Deregister}), one check per rule: argument checks at submission, bytes
 * and *bytes_p on registered, unregistered and NULL streams, end of file and OS errors in
 * *bytes_p, and the arguments behind the pointers read when the stream reaches the operation
 * (not at submission) unless the stream was registered with the FIXED flags.
 *
 * A stream is held by a host function waiting for a flag (at most GATE_WAIT_MS); just before it
 * lets the stream go on, it stores new values through the caller's size and offset pointers.
 *
 * Usage: stream SCRATCH_DIR
 * Builds as C11 and as C++17.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* nanosleep, clock_gettime */
#endif

#include <cufile.h>

#include <time.h>

#include "cufile_checks.h"

#define KIB ((size_t)1024)
#define FILE_SIZE (1024 * KIB)
#define SENTINEL 0x5A
#define BYTES_UNSET ((ssize_t)-12345)
#define GATE_WAIT_MS 30000.0

static double
now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

typedef struct {
    int     released;
    int     gave_up;
    size_t *size_p;
    size_t  size;
    off_t  *file_offset_p;
    off_t   file_offset;
    off_t  *buf_offset_p;
    off_t   buf_offset;
} gate;

static void
gate_fn(void *arg)
{
    gate  *g     = (gate *)arg;
    double until = now_ms() + GATE_WAIT_MS;
    while (!__atomic_load_n(&g->released, __ATOMIC_ACQUIRE)) {
        if (now_ms() > until) {
            __atomic_store_n(&g->gave_up, 1, __ATOMIC_RELEASE);
            break;
        }
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    if (g->size_p != NULL) {
        *g->size_p = g->size;
    }
    if (g->file_offset_p != NULL) {
        *g->file_offset_p = g->file_offset;
    }
    if (g->buf_offset_p != NULL) {
        *g->buf_offset_p = g->buf_offset;
    }
}

static void
hold(cudaStream_t s, gate *g)
{
    if (cudaLaunchHostFunc(s, gate_fn, g) != cudaSuccess) {
        printf("not ok - cudaLaunchHostFunc (holding a stream)\n");
        exit(1);
    }
}

static cudaStream_t
stream_new(void)
{
    cudaStream_t s = NULL;
    if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
        printf("not ok - cudaStreamCreateWithFlags\n");
        exit(1);
    }
    return s;
}

static void
sync_stream(cudaStream_t s)
{
    if (cudaStreamSynchronize(s) != cudaSuccess) {
        printf("# cudaStreamSynchronize failed\n");
    }
}

static unsigned char *g_file;
static unsigned char *g_host;

static void
dev_fill(void *dev, size_t size)
{
    memset(g_host, SENTINEL, size);
    copy_or_exit(dev, g_host, size, cudaMemcpyHostToDevice);
}

/* Whether dev[at .. at+len) holds the file's bytes from `file_at`. */
static int
dev_holds_file(void *dev, size_t at, size_t len, size_t file_at)
{
    copy_or_exit(g_host, (char *)dev + at, len, cudaMemcpyDeviceToHost);
    return memcmp(g_host, g_file + file_at, len) == 0;
}

static int
dev_untouched(void *dev, size_t at, size_t len)
{
    copy_or_exit(g_host, (char *)dev + at, len, cudaMemcpyDeviceToHost);
    for (size_t i = 0; i < len; i++) {
        if (g_host[i] != SENTINEL) {
            return 0;
        }
    }
    return 1;
}

int
main(int argc, char **argv)
{
    require_scratch_dir(argc, argv);
    const char *dir = argv[1];
    g_file          = (unsigned char *)malloc(FILE_SIZE);
    g_host          = (unsigned char *)malloc(FILE_SIZE);
    if (g_file == NULL || g_host == NULL) {
        setup_failed("malloc");
    }
    fill_pattern(g_file, FILE_SIZE, 9);
    int fd = scratch_file(dir, "stream.bin");
    if (pwrite(fd, g_file, FILE_SIZE, 0) != (ssize_t)FILE_SIZE) {
        setup_failed("pwrite");
    }
    void          *dst = device_alloc(FILE_SIZE);
    CUfileHandle_t fh  = NULL;
    size_t         size;
    off_t          file_offset, buf_offset;
    ssize_t        bytes;

    /* ---- closed driver and argument checks ---------------------------------------- */
    size = 4096, file_offset = 0, buf_offset = 0, bytes = BYTES_UNSET;
    expect_status(cuFileReadAsync(NULL, dst, &size, &file_offset, &buf_offset, &bytes, NULL), CU_FILE_INVALID_VALUE,
                  "cuFileReadAsync with the driver closed -> CU_FILE_INVALID_VALUE");

    expect_status(register_handle(&fh, fd, CU_FILE_HANDLE_TYPE_OPAQUE_FD), CU_FILE_SUCCESS, "cuFileHandleRegister");
    cudaStream_t registered = stream_new(), plain = stream_new(), fixed = stream_new();
    expect_status(cuFileStreamRegister((CUstream)registered, 0), CU_FILE_SUCCESS, "cuFileStreamRegister(stream, 0)");
    expect_status(cuFileStreamRegister((CUstream)fixed, CU_FILE_STREAM_FIXED_BUF_OFFSET | CU_FILE_STREAM_FIXED_FILE_OFFSET
                                                            | CU_FILE_STREAM_FIXED_FILE_SIZE),
                  CU_FILE_SUCCESS, "cuFileStreamRegister(stream, FIXED flags 7)");
    expect_status(cuFileStreamRegister((CUstream)plain, 0xffff0000u), CU_FILE_INVALID_VALUE,
                  "cuFileStreamRegister with unknown flag bits -> CU_FILE_INVALID_VALUE");
    expect_status(cuFileStreamDeregister((CUstream)plain), CU_FILE_INVALID_VALUE,
                  "cuFileStreamDeregister of an unregistered stream -> CU_FILE_INVALID_VALUE");

    expect_status(cuFileReadAsync(fh, dst, NULL, &file_offset, &buf_offset, &bytes, (CUstream)registered),
                  CU_FILE_INVALID_VALUE, "NULL size_p -> CU_FILE_INVALID_VALUE");
    expect_status(cuFileReadAsync(fh, dst, &size, NULL, &buf_offset, &bytes, (CUstream)registered),
                  CU_FILE_INVALID_VALUE, "NULL file_offset_p -> CU_FILE_INVALID_VALUE");
    expect_status(cuFileReadAsync(fh, dst, &size, &file_offset, NULL, &bytes, (CUstream)registered),
                  CU_FILE_INVALID_VALUE, "NULL bufPtr_offset_p -> CU_FILE_INVALID_VALUE");
    expect_status(cuFileWriteAsync(fh, dst, &size, &file_offset, &buf_offset, NULL, (CUstream)registered),
                  CU_FILE_INVALID_VALUE, "NULL bytes_written_p -> CU_FILE_INVALID_VALUE");
    expect_status(cuFileReadAsync(fh, NULL, &size, &file_offset, &buf_offset, &bytes, (CUstream)registered),
                  CU_FILE_INVALID_VALUE, "NULL buffer -> CU_FILE_INVALID_VALUE");
    sync_stream(registered);
    check(bytes == BYTES_UNSET, "refused submissions queue nothing: *bytes_p untouched", "*bytes_p %zd", bytes);

    /* ---- bytes on registered, unregistered and NULL streams --------------------------- */
    cudaStream_t streams[3] = {registered, plain, NULL};
    const char  *names[3]   = {"a 256 KiB read on a registered stream: *bytes_p 262144, bytes exact",
                               "a 256 KiB read on an unregistered stream: *bytes_p 262144, bytes exact",
                               "a 256 KiB read on the NULL stream: *bytes_p 262144, bytes exact"};
    for (int i = 0; i < 3; i++) {
        dev_fill(dst, FILE_SIZE);
        size = 256 * KIB, file_offset = (off_t)(i * 64 * KIB), buf_offset = (off_t)(128 * KIB), bytes = BYTES_UNSET;
        CUfileError_t e = cuFileReadAsync(fh, dst, &size, &file_offset, &buf_offset, &bytes, (CUstream)streams[i]);
        sync_stream(streams[i]);
        check(e.err == CU_FILE_SUCCESS && bytes == (ssize_t)(256 * KIB)
                  && dev_holds_file(dst, 128 * KIB, 256 * KIB, (size_t)i * 64 * KIB) && dev_untouched(dst, 0, 128 * KIB),
              names[i], "submit err %d (%s), *bytes_p %zd", (int)e.err, cufileop_status_error(e.err), bytes);
    }
    {
        copy_or_exit(dst, g_file, 64 * KIB, cudaMemcpyHostToDevice);
        size = 64 * KIB, file_offset = (off_t)FILE_SIZE, buf_offset = 0, bytes = BYTES_UNSET;
        CUfileError_t e = cuFileWriteAsync(fh, dst, &size, &file_offset, &buf_offset, &bytes, (CUstream)registered);
        sync_stream(registered);
        unsigned char tail[64 * 1024];
        check(e.err == CU_FILE_SUCCESS && bytes == (ssize_t)(64 * KIB)
                  && pread(fd, tail, sizeof tail, (off_t)FILE_SIZE) == (ssize_t)sizeof tail
                  && memcmp(tail, g_file, sizeof tail) == 0,
              "cuFileWriteAsync of 64 KiB: *bytes_p 65536, the file holds the bytes", "submit err %d, *bytes_p %zd",
              (int)e.err, bytes);
        if (ftruncate(fd, (off_t)FILE_SIZE) != 0) {
            setup_failed("ftruncate");
        }
    }

    /* ---- end of file and OS errors arrive in *bytes_p -------------------------------- */
    {
        dev_fill(dst, FILE_SIZE);
        size = 64 * KIB, file_offset = (off_t)(FILE_SIZE - 8 * KIB), buf_offset = 0, bytes = BYTES_UNSET;
        CUfileError_t e = cuFileReadAsync(fh, dst, &size, &file_offset, &buf_offset, &bytes, (CUstream)registered);
        sync_stream(registered);
        check(e.err == CU_FILE_SUCCESS && bytes == (ssize_t)(8 * KIB) && dev_holds_file(dst, 0, 8 * KIB, FILE_SIZE - 8 * KIB),
              "a read across the end of the file: *bytes_p = the bytes left (8192)", "submit err %d, *bytes_p %zd",
              (int)e.err, bytes);
        size = 4096, file_offset = (off_t)FILE_SIZE, bytes = BYTES_UNSET;
        e = cuFileReadAsync(fh, dst, &size, &file_offset, &buf_offset, &bytes, (CUstream)registered);
        sync_stream(registered);
        check(e.err == CU_FILE_SUCCESS && bytes == 0, "a read at the end of the file: *bytes_p 0",
              "submit err %d, *bytes_p %zd", (int)e.err, bytes);

        CUfileHandle_t wo         = NULL;
        int            write_only = write_only_handle(dir, "stream-write-only.bin", &wo);
        dev_fill(dst, 64 * KIB);
        size = 4096, file_offset = 0, bytes = BYTES_UNSET;
        e = cuFileReadAsync(wo, dst, &size, &file_offset, &buf_offset, &bytes, (CUstream)registered);
        sync_stream(registered);
        check(e.err == CU_FILE_SUCCESS && bytes == -1 && dev_untouched(dst, 0, 64 * KIB),
              "a read through an O_WRONLY descriptor: submitted, then *bytes_p -1 when the stream reaches it",
              "submit err %d, *bytes_p %zd", (int)e.err, bytes);
        cuFileHandleDeregister(wo);
        close(write_only);
    }

    /* ---- the pointers are read when the stream reaches the operation ------------------- */
    cudaStream_t late[2]       = {registered, plain};
    const char  *late_names[2] = {"registered stream, flags 0: size and offsets changed after submit are the ones used",
                                  "unregistered stream: size and offsets changed after submit are the ones used"};
    for (int i = 0; i < 2; i++) {
        gate g;
        memset(&g, 0, sizeof g);
        dev_fill(dst, FILE_SIZE);
        hold(late[i], &g);
        size = 128 * KIB, file_offset = 0, buf_offset = 0, bytes = BYTES_UNSET;
        CUfileError_t e = cuFileReadAsync(fh, dst, &size, &file_offset, &buf_offset, &bytes, (CUstream)late[i]);
        ssize_t seen_before = __atomic_load_n(&bytes, __ATOMIC_ACQUIRE);
        g.size_p = &size, g.size = 64 * KIB;
        g.file_offset_p = &file_offset, g.file_offset = (off_t)(256 * KIB);
        g.buf_offset_p = &buf_offset, g.buf_offset = (off_t)(512 * KIB);
        __atomic_store_n(&g.released, 1, __ATOMIC_RELEASE);
        sync_stream(late[i]);
        check(e.err == CU_FILE_SUCCESS && seen_before != (ssize_t)(64 * KIB) && bytes == (ssize_t)(64 * KIB)
                  && dev_holds_file(dst, 512 * KIB, 64 * KIB, 256 * KIB) && dev_untouched(dst, 0, 512 * KIB)
                  && !g.gave_up,
              late_names[i], "submit err %d, *bytes_p %zd before release, %zd after", (int)e.err, seen_before, bytes);
    }
    {
        gate g;
        memset(&g, 0, sizeof g);
        dev_fill(dst, FILE_SIZE);
        hold(fixed, &g);
        size = 64 * KIB, file_offset = 0, buf_offset = 0, bytes = BYTES_UNSET;
        CUfileError_t e = cuFileReadAsync(fh, dst, &size, &file_offset, &buf_offset, &bytes, (CUstream)fixed);
        g.size_p = &size, g.size = 32 * KIB;
        g.file_offset_p = &file_offset, g.file_offset = (off_t)(256 * KIB);
        g.buf_offset_p = &buf_offset, g.buf_offset = (off_t)(512 * KIB);
        __atomic_store_n(&g.released, 1, __ATOMIC_RELEASE);
        sync_stream(fixed);
        check(e.err == CU_FILE_SUCCESS && bytes == (ssize_t)(64 * KIB) && dev_holds_file(dst, 0, 64 * KIB, 0)
                  && dev_untouched(dst, 64 * KIB, FILE_SIZE - 64 * KIB),
              "FIXED flags (7): changes after submit have no effect", "submit err %d, *bytes_p %zd", (int)e.err, bytes);
    }

    expect_status(cuFileStreamDeregister((CUstream)registered), CU_FILE_SUCCESS, "cuFileStreamDeregister");
    expect_status(cuFileStreamDeregister((CUstream)fixed), CU_FILE_SUCCESS, "cuFileStreamDeregister (fixed)");
    cuFileHandleDeregister(fh);
    expect_status(cuFileDriverClose(), CU_FILE_SUCCESS, "cuFileDriverClose");

    if (cudaStreamDestroy(registered) != cudaSuccess || cudaStreamDestroy(plain) != cudaSuccess
        || cudaStreamDestroy(fixed) != cudaSuccess || cudaFree(dst) != cudaSuccess) {
        printf("# releasing CUDA resources failed\n");
    }
    free(g_file);
    free(g_host);
    close(fd);
    return tap_finish();
}
