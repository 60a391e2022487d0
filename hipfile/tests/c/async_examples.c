/*
 * async_examples.c - what upstream hipFile's four stream (async) IO examples
 * do, as tests: each writes GPU memory to a file with hipFileWriteAsync, reads
 * it back into other GPU memory with hipFileReadAsync on the same stream, and
 * compares both the file and the buffer byte for byte:
 *   1. on the default (NULL) stream;
 *   2. on a stream created with hipStreamNonBlocking;
 *   3. on 4 streams at once, 8 operations each on its own file ranges, all in
 *      flight before any stream is synchronized;
 *   4. on registered streams, with the FIXED flags (7) and with
 *      PAGE_ALIGNED_INPUTS too (8|7), size and offsets passed through
 *      pointers that stay valid until the stream synchronized.
 *
 * Usage: async_examples SCRATCH_DIR
 * Prints one TAP-like line per check; exits 0 only if every check passed.
 * Builds as C11 and as C++17. Every request is 4 KiB aligned, so any path may
 * serve it (compat mode disallowed included). Every wait is bounded: a stream
 * that does not drain within LONG_WAIT_MS is a `not ok` and ends the program.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT, clock_gettime, nanosleep */
#endif

#include <hipfile.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"

#define KIB ((size_t)1024)
#define MIB ((size_t)(1024 * 1024))
#define SIZE MIB
#define STREAMS 4
#define OPS_PER_STREAM 8
/* Each stream writes OPS_PER_STREAM / 2 chunks, then reads them back. */
#define CHUNKS_PER_STREAM (OPS_PER_STREAM / 2)
#define CHUNK (SIZE / (STREAMS * CHUNKS_PER_STREAM))
#define SENTINEL 0x5A
#define BYTES_UNSET ((ssize_t)12345)
#define LONG_WAIT_MS 30000.0

static int
is_success(hipFileError_t e)
{
    return e.err == hipFileSuccess && e.hip_drv_err == hipSuccess;
}

static void
expect_status(hipFileError_t got, hipFileOpError_t want, const char *name)
{
    check(got.err == want && got.hip_drv_err == hipSuccess, name, "got err %d (%s) hip_drv_err %d, want %d (%s)",
          (int)got.err, HIPFILE_ERRSTR(got.err), (int)got.hip_drv_err, (int)want, HIPFILE_ERRSTR(want));
}

static double
now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void
sleep_ms(long ms)
{
    struct timespec t;
    t.tv_sec  = ms / 1000;
    t.tv_nsec = (ms % 1000) * 1000000L;
    nanosleep(&t, NULL);
}

/* A pattern that does not repeat with any power-of-two period up to 1 MiB; `seed` tells the
 * examples' data apart. */
static unsigned char
pattern_byte(size_t i, unsigned seed)
{
    return (unsigned char)((i * 131u) ^ (i >> 9) ^ (i >> 17) ^ (seed * 29u));
}

static const char *g_dir;
static unsigned char *g_host; /* SIZE bytes of host scratch */

/* A new empty file `name`, opened read-write (O_DIRECT where the filesystem takes it), and its
 * handle. */
static hipFileHandle_t
new_file(const char *name, int *fd_out)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC | O_DIRECT, 0644);
    if (fd < 0 && errno == EINVAL) {
        fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    }
    if (fd < 0) {
        setup_failed(path);
    }
    hipFileDescr_t descr;
    memset(&descr, 0, sizeof descr);
    descr.type         = hipFileHandleTypeOpaqueFD;
    descr.handle.fd    = fd;
    hipFileHandle_t fh = NULL;
    hipFileError_t  e  = hipFileHandleRegister(&fh, &descr);
    if (!is_success(e)) {
        printf("not ok - register %s (err %d)\n", path, (int)e.err);
        exit(1);
    }
    *fd_out = fd;
    return fh;
}

/* Where file `name` first differs from the pattern of `seed` over SIZE bytes, or -1; -2 when it
 * does not hold SIZE bytes. */
static long
file_differs(const char *name, unsigned seed)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        return -2;
    }
    size_t done = 0;
    while (done < SIZE) {
        ssize_t n = pread(fd, g_host + done, SIZE - done, (off_t)done);
        if (n <= 0) {
            break;
        }
        done += (size_t)n;
    }
    close(fd);
    if (done != SIZE) {
        return -2;
    }
    for (size_t i = 0; i < SIZE; i++) {
        if (g_host[i] != pattern_byte(i, seed)) {
            return (long)i;
        }
    }
    return -1;
}

/* Where device buffer `dev` first differs from the pattern of `seed` over SIZE bytes, or -1. */
static long
dev_differs(const void *dev, unsigned seed)
{
    if (hipMemcpy(g_host, dev, SIZE, hipMemcpyDeviceToHost) != hipSuccess) {
        return -2;
    }
    for (size_t i = 0; i < SIZE; i++) {
        if (g_host[i] != pattern_byte(i, seed)) {
            return (long)i;
        }
    }
    return -1;
}

/* Device buffers: `src` holding the pattern of `seed`, `dst` holding SENTINEL. */
static void
buffers(void **src, void **dst, unsigned seed)
{
    for (size_t i = 0; i < SIZE; i++) {
        g_host[i] = pattern_byte(i, seed);
    }
    if (hipMalloc(src, SIZE) != hipSuccess || hipMalloc(dst, SIZE) != hipSuccess ||
        hipMemcpy(*src, g_host, SIZE, hipMemcpyHostToDevice) != hipSuccess ||
        hipMemset(*dst, SENTINEL, SIZE) != hipSuccess) {
        printf("not ok - device buffers\n");
        exit(1);
    }
}

static void
free_buffers(void *src, void *dst)
{
    if (hipFree(src) != hipSuccess || hipFree(dst) != hipSuccess) {
        printf("# hipFree failed\n");
    }
}

/* Synchronize `s` once an event recorded on it completed within LONG_WAIT_MS; a stream that does
 * not drain is a hang: the check `what` fails and the program ends. */
static void
sync_stream(hipStream_t s, const char *what)
{
    hipEvent_t ev = NULL;
    if (hipEventCreate(&ev) != hipSuccess || hipEventRecord(ev, s) != hipSuccess) {
        printf("not ok - hipEventCreate/hipEventRecord (%s)\n", what);
        exit(1);
    }
    double     until = now_ms() + LONG_WAIT_MS;
    hipError_t q;
    while ((q = hipEventQuery(ev)) == hipErrorNotReady && now_ms() < until) {
        sleep_ms(1);
    }
    if (q == hipErrorNotReady) {
        check(0, what, "the stream did not drain within %.0f s", LONG_WAIT_MS / 1e3);
        printf("# stopping: a stream hangs\n");
        fflush(stdout);
        _exit(1);
    }
    if (hipEventDestroy(ev) != hipSuccess || hipStreamSynchronize(s) != hipSuccess) {
        printf("# hipEventDestroy/hipStreamSynchronize failed (%s)\n", what);
    }
}

/* The size and offsets of one op, and its result: they stay valid until the stream synchronized. */
typedef struct {
    size_t  size;
    hoff_t  file_offset;
    hoff_t  buffer_offset;
    ssize_t bytes;
} io_args;

static void
args_set(io_args *a, size_t size, size_t file_offset, size_t buffer_offset)
{
    a->size          = size;
    a->file_offset   = (hoff_t)file_offset;
    a->buffer_offset = (hoff_t)buffer_offset;
    a->bytes         = BYTES_UNSET;
}

/* One whole-buffer round trip on stream `s`: write src to file `name`, read it back into dst,
 * then the checks, named after `label`. */
static void
round_trip(const char *label, const char *name, hipStream_t s, unsigned seed)
{
    char            what[256];
    int             fd;
    hipFileHandle_t fh = new_file(name, &fd);
    void           *src, *dst;
    buffers(&src, &dst, seed);
    io_args w, r;
    args_set(&w, SIZE, 0, 0);
    args_set(&r, SIZE, 0, 0);
    hipFileError_t ew = hipFileWriteAsync(fh, src, &w.size, &w.file_offset, &w.buffer_offset, &w.bytes, s);
    hipFileError_t er = hipFileReadAsync(fh, dst, &r.size, &r.file_offset, &r.buffer_offset, &r.bytes, s);
    snprintf(what, sizeof what, "%s: WriteAsync and ReadAsync of 1 MiB submitted", label);
    check(is_success(ew) && is_success(er), what, "write err %d (%s), read err %d (%s)", (int)ew.err,
          HIPFILE_ERRSTR(ew.err), (int)er.err, HIPFILE_ERRSTR(er.err));
    snprintf(what, sizeof what, "%s: the stream synchronizes", label);
    sync_stream(s, what);
    snprintf(what, sizeof what, "%s: *bytes_written_p and *bytes_read_p are 1048576", label);
    check(w.bytes == (ssize_t)SIZE && r.bytes == (ssize_t)SIZE, what, "%zd and %zd", w.bytes, r.bytes);
    long f = file_differs(name, seed);
    snprintf(what, sizeof what, "%s: the file holds the GPU buffer byte for byte", label);
    check(f == -1, what, "first difference at %ld (-2: short file)", f);
    long d = dev_differs(dst, seed);
    snprintf(what, sizeof what, "%s: the buffer read back matches byte for byte", label);
    check(d == -1, what, "first difference at %ld", d);
    free_buffers(src, dst);
    hipFileHandleDeregister(fh);
    close(fd);
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    g_dir  = argv[1];
    g_host = (unsigned char *)malloc(SIZE);
    if (g_host == NULL) {
        printf("not ok - host allocation\n");
        return 1;
    }
    expect_status(hipFileDriverOpen(), hipFileSuccess, "hipFileDriverOpen");

    /* 1. The default stream. */
    round_trip("NULL stream", "async-null-stream.bin", NULL, 1);

    /* 2. A non-blocking stream. */
    {
        hipStream_t s = NULL;
        if (hipStreamCreateWithFlags(&s, hipStreamNonBlocking) != hipSuccess) {
            printf("not ok - hipStreamCreateWithFlags\n");
            return 1;
        }
        round_trip("non-blocking stream", "async-nonblocking.bin", s, 2);
        if (hipStreamDestroy(s) != hipSuccess) {
            printf("# hipStreamDestroy failed\n");
        }
    }

    /* 3. Several streams at once: stream k writes chunks k, k + 4, k + 8, k + 12, then reads them
     * back, all 32 ops queued before any stream is synchronized. */
    {
        static io_args  ops[STREAMS][OPS_PER_STREAM];
        hipStream_t     s[STREAMS];
        int             fd;
        hipFileHandle_t fh = new_file("async-streams.bin", &fd);
        void           *src, *dst;
        buffers(&src, &dst, 3);
        for (int k = 0; k < STREAMS; k++) {
            if (hipStreamCreate(&s[k]) != hipSuccess) {
                printf("not ok - hipStreamCreate\n");
                return 1;
            }
        }
        int            submitted = 0;
        hipFileError_t bad;
        memset(&bad, 0, sizeof bad);
        for (int k = 0; k < STREAMS; k++) {
            for (int j = 0; j < OPS_PER_STREAM; j++) {
                size_t   chunk = (size_t)(k + STREAMS * (j % CHUNKS_PER_STREAM));
                io_args *a     = &ops[k][j];
                args_set(a, CHUNK, chunk * CHUNK, chunk * CHUNK);
                hipFileError_t e = j < CHUNKS_PER_STREAM
                                       ? hipFileWriteAsync(fh, src, &a->size, &a->file_offset, &a->buffer_offset,
                                                           &a->bytes, s[k])
                                       : hipFileReadAsync(fh, dst, &a->size, &a->file_offset, &a->buffer_offset,
                                                          &a->bytes, s[k]);
                if (is_success(e)) {
                    submitted++;
                }
                else {
                    bad = e;
                }
            }
        }
        check(submitted == STREAMS * OPS_PER_STREAM, "4 streams x 8 ops: all 32 submitted before any synchronize",
              "%d submitted; a refusal: err %d (%s)", submitted, (int)bad.err, HIPFILE_ERRSTR(bad.err));
        for (int k = 0; k < STREAMS; k++) {
            sync_stream(s[k], "4 streams x 8 ops: every stream synchronizes");
        }
        int counted = 0;
        for (int k = 0; k < STREAMS; k++) {
            for (int j = 0; j < OPS_PER_STREAM; j++) {
                counted += ops[k][j].bytes == (ssize_t)CHUNK;
            }
        }
        check(counted == STREAMS * OPS_PER_STREAM, "4 streams x 8 ops: every op's *bytes_p is its size (64 KiB)",
              "%d of 32", counted);
        long f = file_differs("async-streams.bin", 3);
        check(f == -1, "4 streams x 8 ops: the file holds the GPU buffer byte for byte",
              "first difference at %ld (-2: short file)", f);
        long d = dev_differs(dst, 3);
        check(d == -1, "4 streams x 8 ops: the buffer read back matches byte for byte", "first difference at %ld", d);
        for (int k = 0; k < STREAMS; k++) {
            if (hipStreamDestroy(s[k]) != hipSuccess) {
                printf("# hipStreamDestroy failed\n");
            }
        }
        free_buffers(src, dst);
        hipFileHandleDeregister(fh);
        close(fd);
    }

    /* 4. Registered streams with the FIXED flags, and with PAGE_ALIGNED_INPUTS too. */
    {
        const unsigned fixed    = HIPFILE_STREAM_FIXED_BUF_OFFSET | HIPFILE_STREAM_FIXED_FILE_OFFSET |
                               HIPFILE_STREAM_FIXED_FILE_SIZE;
        const unsigned flags[2] = {fixed, fixed | HIPFILE_STREAM_PAGE_ALIGNED_INPUTS};
        const char    *labels[2] = {"registered stream, flags 7", "registered stream, flags 15"};
        const char    *files[2]  = {"async-fixed.bin", "async-fixed-aligned.bin"};
        for (int i = 0; i < 2; i++) {
            char        what[256];
            hipStream_t s = NULL;
            if (hipStreamCreate(&s) != hipSuccess) {
                printf("not ok - hipStreamCreate\n");
                return 1;
            }
            snprintf(what, sizeof what, "hipFileStreamRegister(stream, %u)", flags[i]);
            expect_status(hipFileStreamRegister(s, flags[i]), hipFileSuccess, what);
            round_trip(labels[i], files[i], s, 4 + (unsigned)i);
            snprintf(what, sizeof what, "hipFileStreamDeregister(stream registered with %u)", flags[i]);
            expect_status(hipFileStreamDeregister(s), hipFileSuccess, what);
            if (hipStreamDestroy(s) != hipSuccess) {
                printf("# hipStreamDestroy failed\n");
            }
        }
    }

    expect_status(hipFileDriverClose(), hipFileSuccess, "hipFileDriverClose");
    free(g_host);

    return tap_finish();
}
