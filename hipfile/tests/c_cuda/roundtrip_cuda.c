/*
 * roundtrip_cuda.c - hipFile from a plain CUDA program, with no HIP headers anywhere.
 *
 * On an NVIDIA machine without ROCm a program allocates with the CUDA runtime and includes
 * hipfile.h with HIPFILE_NO_HIP_HEADERS defined; the library speaks HIP over the CUDA runtime.
 * This program checks that such a program compiles (as C11 and C++17) and that its IO lands
 * byte-exactly: registered and unregistered buffers, unaligned offsets, interior pointers,
 * memory kinds that must be refused, IO from a fresh thread and from 16 threads at once.
 *
 * Usage: roundtrip_cuda SCRATCH_DIR   (a directory on a real disk: O_DIRECT is used if accepted)
 * Prints one TAP-like line per check (hipfile/tests/c/tap.h); exits 0 only if every check passed.
 * Build, in the GPU bundle (its include/ holds hipfile.h and tap.h):
 *   cc -std=c11 -I include -I CUDA_INCLUDE roundtrip_cuda.c -L lib -lhipfile -lcudart -lpthread
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT, pread */
#endif

#include <cuda_runtime_api.h>

#ifndef HIPFILE_NO_HIP_HEADERS
#define HIPFILE_NO_HIP_HEADERS /* the build may pass -DHIPFILE_NO_HIP_HEADERS too */
#endif
#include <hipfile.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tap.h"

#define BUF_SIZE ((size_t)(1024 * 1024 + 4096))
#define SENTINEL 0xA5
#define THREADS 16
#define THREAD_ROUNDS 4
#define THREAD_READ ((size_t)(64 * 1024 + 17))

static void
check_status(hipFileError_t status, const char *name)
{
    check(status.err == hipFileSuccess, name, "err %d (%s), hip_drv_err %d", (int)status.err,
          HIPFILE_ERRSTR(status.err), (int)status.hip_drv_err);
}

static void
expect_err(hipFileError_t status, hipFileOpError_t want, const char *name)
{
    check(status.err == want, name, "err %d (%s), want %d (%s)", (int)status.err,
          HIPFILE_ERRSTR(status.err), (int)want, HIPFILE_ERRSTR(want));
}

static void
check_cuda(cudaError_t status, const char *name)
{
    check(status == cudaSuccess, name, "cudaError_t %d (%s)", (int)status, cudaGetErrorString(status));
}

/* A pattern that does not repeat with any power-of-two period up to 1 MiB. */
static unsigned char
pattern_byte(size_t i)
{
    return (unsigned char)((i * 131u) ^ (i >> 9) ^ (i >> 17));
}

/* Index of the first differing byte, or -1. */
static long
first_difference(const unsigned char *a, const unsigned char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (a[i] != b[i]) {
            return (long)i;
        }
    }
    return -1;
}

static long
first_not(const unsigned char *a, unsigned char value, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (a[i] != value) {
            return (long)i;
        }
    }
    return -1;
}

/* Shared by every check: the registered file, the bytes it holds, host sentinel bytes. */
static hipFileHandle_t      g_fh;
static const unsigned char *g_expected;
static const unsigned char *g_sentinel;

/* Fills a device buffer with the sentinel byte. */
static int
fill_sentinel(void *dev)
{
    return cudaMemcpy(dev, g_sentinel, BUF_SIZE, cudaMemcpyHostToDevice) == cudaSuccess;
}

/* One read from a thread of its own: result and the first wrong byte (or -1). */
struct thread_read {
    void   *dev;
    size_t  size;
    hoff_t  file_offset;
    ssize_t result;
    int     err;
};

static void *
read_on_fresh_thread(void *arg)
{
    struct thread_read *job = (struct thread_read *)arg;
    errno                   = 0;
    job->result             = hipFileRead(g_fh, job->dev, job->size, job->file_offset, 0);
    job->err                = errno;
    return NULL;
}

/* One of THREADS concurrent readers, each with its own device buffer. */
struct reader {
    int                index;
    void              *dev;
    unsigned char     *host;
    pthread_barrier_t *start;
    char               failure[160];
};

static void *
concurrent_reader(void *arg)
{
    struct reader *r = (struct reader *)arg;
    pthread_barrier_wait(r->start);
    for (int round = 0; round < THREAD_ROUNDS; round++) {
        /* Distinct, unaligned file offsets per thread and round, all inside the file. */
        hoff_t  foff = (hoff_t)((size_t)(r->index * THREAD_ROUNDS + round) * 12289u % (BUF_SIZE - THREAD_READ));
        ssize_t got  = hipFileRead(g_fh, r->dev, THREAD_READ, foff, 0);
        if (got != (ssize_t)THREAD_READ) {
            snprintf(r->failure, sizeof r->failure, "round %d: hipFileRead returned %zd, errno %d", round, got,
                     errno);
            return NULL;
        }
        cudaError_t copied = cudaMemcpy(r->host, r->dev, THREAD_READ, cudaMemcpyDeviceToHost);
        if (copied != cudaSuccess) {
            snprintf(r->failure, sizeof r->failure, "round %d: cudaMemcpy: %s", round,
                     cudaGetErrorString(copied));
            return NULL;
        }
        long diff = first_difference(r->host, g_expected + foff, THREAD_READ);
        if (diff >= 0) {
            snprintf(r->failure, sizeof r->failure, "round %d: file offset %lld: first difference at byte %ld",
                     round, (long long)foff, diff);
            return NULL;
        }
    }
    return NULL;
}

static void
check_concurrent_reads(void)
{
    struct reader     readers[THREADS];
    pthread_t         threads[THREADS];
    pthread_barrier_t start;
    int               ready = 1;
    memset(readers, 0, sizeof readers);
    pthread_barrier_init(&start, NULL, THREADS);
    for (int i = 0; i < THREADS; i++) {
        readers[i].index = i;
        readers[i].start = &start;
        readers[i].host  = (unsigned char *)malloc(THREAD_READ);
        if (cudaMalloc(&readers[i].dev, THREAD_READ) != cudaSuccess || readers[i].host == NULL) {
            ready = 0;
        }
    }
    check(ready, "cudaMalloc a buffer for each of 16 reader threads", "allocation failed");
    int started = 0;
    for (; ready && started < THREADS; started++) {
        if (pthread_create(&threads[started], NULL, concurrent_reader, &readers[started]) != 0) {
            break;
        }
    }
    if (ready && started != THREADS) {
        /* The barrier never opens for a partial set of threads; there is no clean way on. */
        printf("not ok - start 16 reader threads (only %d started)\n", started);
        exit(1);
    }
    for (int i = 0; ready && i < THREADS; i++) {
        pthread_join(threads[i], NULL);
    }
    int  bad = 0;
    char detail[200] = "";
    for (int i = 0; i < THREADS; i++) {
        if (readers[i].failure[0] != '\0') {
            if (bad == 0) {
                snprintf(detail, sizeof detail, "thread %d: %s", i, readers[i].failure);
            }
            bad++;
        }
    }
    check(ready && bad == 0, "16 threads read concurrently into distinct buffers byte-exactly",
          "%d thread(s) failed; %s", bad, detail);
    for (int i = 0; i < THREADS; i++) {
        if (readers[i].dev != NULL) {
            cudaFree(readers[i].dev);
        }
        free(readers[i].host);
    }
    pthread_barrier_destroy(&start);
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        return 2;
    }

    int devices = 0;
    check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    check(devices > 0, "a CUDA device is present", "%d devices", devices);
    if (devices <= 0) {
        return 1;
    }

    char path[4096];
    snprintf(path, sizeof path, "%s/roundtrip_cuda.bin", argv[1]);
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC | O_DIRECT, 0644);
    if (fd < 0 && errno == EINVAL) {
        /* The filesystem refuses O_DIRECT (tmpfs, for example). */
        fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    }
    check(fd >= 0, "open scratch file", "%s: %s", path, strerror(errno));
    if (fd < 0) {
        return 1;
    }

    void          *src      = NULL;
    void          *dst      = NULL;
    unsigned char *expected = (unsigned char *)malloc(BUF_SIZE);
    unsigned char *actual   = (unsigned char *)malloc(BUF_SIZE);
    unsigned char *sentinel = (unsigned char *)malloc(BUF_SIZE);
    check_cuda(cudaMalloc(&src, BUF_SIZE), "cudaMalloc source buffer (1 MiB + 4 KiB)");
    check_cuda(cudaMalloc(&dst, BUF_SIZE), "cudaMalloc destination buffer (1 MiB + 4 KiB)");
    if (expected == NULL || actual == NULL || sentinel == NULL || src == NULL || dst == NULL) {
        printf("not ok - allocations (out of memory)\n");
        return 1;
    }
    for (size_t i = 0; i < BUF_SIZE; i++) {
        expected[i] = pattern_byte(i);
    }
    memset(sentinel, SENTINEL, BUF_SIZE);
    g_expected = expected;
    g_sentinel = sentinel;
    check_cuda(cudaMemcpy(src, expected, BUF_SIZE, cudaMemcpyHostToDevice), "cudaMemcpy pattern to device");
    check(fill_sentinel(dst), "cudaMemcpy sentinel to device", "cudaMemcpy failed");

    check_status(hipFileDriverOpen(), "hipFileDriverOpen");

    hipFileDescr_t descr;
    memset(&descr, 0, sizeof descr);
    descr.type      = hipFileHandleTypeOpaqueFD;
    descr.handle.fd = fd;
    /* Real programs leave fs_ops uninitialised; a garbage value proves it is never read. */
    descr.fs_ops = (const hipFileFSOps_t *)(uintptr_t)0xdeadbeefUL;
    check_status(hipFileHandleRegister(&g_fh, &descr), "hipFileHandleRegister (fs_ops garbage)");

    check_status(hipFileBufRegister(src, BUF_SIZE, 0), "hipFileBufRegister cudaMalloc source");

    /* Whole buffer, aligned: registered source, unregistered destination. */
    ssize_t written = hipFileWrite(g_fh, src, BUF_SIZE, 0, 0);
    check(written == (ssize_t)BUF_SIZE, "hipFileWrite whole buffer", "returned %zd, errno %d", written, errno);
    ssize_t nread = hipFileRead(g_fh, dst, BUF_SIZE, 0, 0);
    check(nread == (ssize_t)BUF_SIZE, "hipFileRead whole buffer into unregistered cudaMalloc memory",
          "returned %zd, errno %d", nread, errno);
    check_cuda(cudaMemcpy(actual, dst, BUF_SIZE, cudaMemcpyDeviceToHost), "cudaMemcpy result to host");
    long diff = first_difference(actual, expected, BUF_SIZE);
    check(diff < 0, "whole buffer read back byte-exactly", "first difference at byte %ld", diff);

    /* Unaligned file offset, buffer offset and size: only the target range may change. */
    const size_t un_size = 100003;
    const hoff_t un_foff = 12345;
    const hoff_t un_boff = 777;
    check(fill_sentinel(dst), "cudaMemcpy sentinel to device again", "cudaMemcpy failed");
    nread = hipFileRead(g_fh, dst, un_size, un_foff, un_boff);
    check(nread == (ssize_t)un_size, "hipFileRead unaligned offset, buffer offset and size",
          "returned %zd, errno %d", nread, errno);
    check_cuda(cudaMemcpy(actual, dst, BUF_SIZE, cudaMemcpyDeviceToHost), "cudaMemcpy unaligned result to host");
    diff = first_difference(actual + un_boff, expected + un_foff, un_size);
    check(diff < 0, "unaligned read lands byte-exactly", "first difference at byte %ld of the range", diff);
    diff = first_not(actual, SENTINEL, (size_t)un_boff);
    check(diff < 0, "unaligned read leaves bytes before the range alone", "byte %ld changed", diff);
    size_t tail = (size_t)un_boff + un_size;
    diff        = first_not(actual + tail, SENTINEL, BUF_SIZE - tail);
    check(diff < 0, "unaligned read leaves bytes after the range alone", "byte %ld after the range changed",
          diff);

    /* A pointer into the middle of an allocation: the library must find the allocation around it. */
    const size_t in_skip = 8192;
    const size_t in_size = 256 * 1024;
    const hoff_t in_foff = 4096;
    check(fill_sentinel(dst), "cudaMemcpy sentinel before the interior-pointer read", "cudaMemcpy failed");
    nread = hipFileRead(g_fh, (unsigned char *)dst + in_skip, in_size, in_foff, 0);
    check(nread == (ssize_t)in_size, "hipFileRead into an interior pointer", "returned %zd, errno %d", nread,
          errno);
    check_cuda(cudaMemcpy(actual, dst, BUF_SIZE, cudaMemcpyDeviceToHost),
               "cudaMemcpy interior-pointer result to host");
    diff = first_difference(actual + in_skip, expected + in_foff, in_size);
    check(diff < 0 && first_not(actual, SENTINEL, in_skip) < 0 &&
              first_not(actual + in_skip + in_size, SENTINEL, BUF_SIZE - in_skip - in_size) < 0,
          "interior-pointer read lands byte-exactly and nowhere else", "first difference at byte %ld", diff);

    /* Memory kinds hipFile must refuse to register. */
    void *managed = NULL;
    if (cudaMallocManaged(&managed, 4096, cudaMemAttachGlobal) == cudaSuccess && managed != NULL) {
        expect_err(hipFileBufRegister(managed, 4096, 0), hipFileHipMemoryTypeInvalid,
                   "hipFileBufRegister of cudaMallocManaged memory -> hipFileHipMemoryTypeInvalid");
        cudaFree(managed);
    }
    else {
        check(0, "hipFileBufRegister of cudaMallocManaged memory -> hipFileHipMemoryTypeInvalid", "%s",
              "cudaMallocManaged failed");
    }
    void *pinned = NULL;
    if (cudaHostAlloc(&pinned, 4096, cudaHostAllocDefault) == cudaSuccess && pinned != NULL) {
        expect_err(hipFileBufRegister(pinned, 4096, 0), hipFileHipMemoryTypeInvalid,
                   "hipFileBufRegister of cudaHostAlloc memory -> hipFileHipMemoryTypeInvalid");
        cudaFreeHost(pinned);
    }
    else {
        check(0, "hipFileBufRegister of cudaHostAlloc memory -> hipFileHipMemoryTypeInvalid", "%s",
              "cudaHostAlloc failed");
    }

    /* A thread that never touched CUDA: the library must make the device current itself. */
    check(fill_sentinel(dst), "cudaMemcpy sentinel before the fresh-thread read", "cudaMemcpy failed");
    struct thread_read job;
    memset(&job, 0, sizeof job);
    job.dev         = dst;
    job.size        = 1024 * 1024;
    job.file_offset = 4096;
    pthread_t thread;
    int       spawned = pthread_create(&thread, NULL, read_on_fresh_thread, &job) == 0;
    if (spawned) {
        pthread_join(thread, NULL);
    }
    check(spawned && job.result == (ssize_t)job.size, "hipFileRead from a freshly spawned thread",
          "spawned %d, returned %zd, errno %d", spawned, job.result, job.err);
    check_cuda(cudaMemcpy(actual, dst, BUF_SIZE, cudaMemcpyDeviceToHost), "cudaMemcpy fresh-thread result to host");
    diff = first_difference(actual, expected + job.file_offset, job.size);
    check(diff < 0, "fresh-thread read lands byte-exactly", "first difference at byte %ld", diff);

    check_concurrent_reads();

    check_status(hipFileBufDeregister(src), "hipFileBufDeregister source");
    hipFileHandleDeregister(g_fh);
    check_cuda(cudaFree(src), "cudaFree source");
    check_cuda(cudaFree(dst), "cudaFree destination");
    check_status(hipFileDriverClose(), "hipFileDriverClose");
    int64_t use_count = hipFileUseCount();
    check(use_count == 0, "hipFileUseCount is 0 after close", "use count %lld", (long long)use_count);

    close(fd);
    unlink(path);
    free(expected);
    free(actual);
    free(sentinel);

    return tap_finish();
}
