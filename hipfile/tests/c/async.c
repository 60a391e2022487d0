/*
 * async.c - stream-ordered IO (hipFileReadAsync, hipFileWriteAsync,
 * hipFileStreamRegister, hipFileStreamDeregister) as a user of upstream
 * hipFile sees it, one check per rule.
 *
 * Usage: async SCRATCH_DIR
 * Prints one TAP-like line per check; exits 0 only if every check passed.
 * Builds as C11 and as C++17.
 *
 * Every IO request is 4 KiB aligned (offsets, sizes, addresses) so that each
 * check holds whichever path serves it, compat mode disallowed included; only
 * reads that meet the end of a file come back short. The checks run in order:
 *   1. driver closed: async IO answers hipFileInvalidValue and opens the driver
 *      (as cuFile); stream registration works and leaves the count alone;
 *   2. driver open: registration rules, argument checks at submission, results
 *      (counts, data, end of file, OS errors), late binding of size and offsets
 *      through the caller's pointers, the FIXED and PAGE_ALIGNED stream flags,
 *      ordering with other work on the stream and independence of streams,
 *      deregistration of a stream with work queued;
 *   3. closing the driver to zero with work queued on a held stream; a stream
 *      registration outlives the close.
 *
 * A stream is "held" by a host function (hipLaunchHostFunc) that waits for a
 * flag the main thread sets: what is queued behind it has not run until the
 * flag is set. Held streams are hipStreamNonBlocking, so that hipMemcpy (the
 * legacy default stream) never waits for them. Every wait is bounded: a
 * stream that does not drain within LONG_WAIT_MS is a `not ok` and ends the
 * program, and a holding host function stops waiting after GATE_WAIT_MS.
 *
 * HIPFILE_SIM_DEVICES=2 is set (unless already set) before any HIP call: the
 * simulated runtime then has a second device for the check of a buffer on
 * another device than the stream's. A real runtime ignores it; with a single
 * device that check is reported as skipped.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT, clock_gettime, nanosleep, setenv */
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
/* The data file and every device buffer. */
#define DATA_SIZE (2 * MIB)
/* The file whose end the short reads meet: 72 KiB. */
#define SHORT_SIZE (72 * KIB)
#define SENTINEL 0x5A
#define BYTES_UNSET ((ssize_t)12345)
/* How long a stream may take to drain before the check calls it a hang. */
#define LONG_WAIT_MS 30000.0
/* How long a holding host function waits for its flag before it gives up. */
#define GATE_WAIT_MS 20000.0

#define GARBAGE_STREAM ((hipStream_t)(uintptr_t)0x5eed5eed000ull)

static int
is_success(hipFileError_t e)
{
    return e.err == hipFileSuccess && e.hip_drv_err == hipSuccess;
}

/* The call returned exactly `want` (and hipSuccess as the HIP half). */
static void
expect_status(hipFileError_t got, hipFileOpError_t want, const char *name)
{
    check(got.err == want && got.hip_drv_err == hipSuccess, name, "got err %d (%s) hip_drv_err %d, want %d (%s)",
          (int)got.err, HIPFILE_ERRSTR(got.err), (int)got.hip_drv_err, (int)want, HIPFILE_ERRSTR(want));
}

/* Both calls returned exactly `want`. */
static void
expect_both(hipFileError_t read, hipFileError_t write, hipFileOpError_t want, const char *name)
{
    int ok = read.err == want && read.hip_drv_err == hipSuccess && write.err == want && write.hip_drv_err == hipSuccess;
    check(ok, name, "read: err %d (%s) hip %d; write: err %d (%s) hip %d; want %d (%s)", (int)read.err,
          HIPFILE_ERRSTR(read.err), (int)read.hip_drv_err, (int)write.err, HIPFILE_ERRSTR(write.err),
          (int)write.hip_drv_err, (int)want, HIPFILE_ERRSTR(want));
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

/* A pattern that does not repeat with any power-of-two period up to 1 MiB. */
static unsigned char
pattern_byte(size_t i)
{
    return (unsigned char)((i * 131u) ^ (i >> 9) ^ (i >> 17));
}

/* ---- files ------------------------------------------------------------------ */

static const char *g_dir;

static void
path_of(char *out, size_t room, const char *name)
{
    snprintf(out, room, "%s/%s", g_dir, name);
}

/* Create `name` holding `size` pattern bytes. */
static void
make_file(const char *name, size_t size)
{
    char path[4096];
    path_of(path, sizeof path, name);
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0) {
        setup_failed(path);
    }
    unsigned char block[4096];
    for (size_t done = 0; done < size;) {
        size_t n = size - done < sizeof block ? size - done : sizeof block;
        for (size_t i = 0; i < n; i++) {
            block[i] = pattern_byte(done + i);
        }
        if (write(fd, block, n) != (ssize_t)n) {
            setup_failed(path);
        }
        done += n;
    }
    close(fd);
}

/* The application's descriptor: O_DIRECT where the filesystem takes it (not with O_WRONLY
 * reads in mind: that one is plain). */
static int
open_app(const char *name, int flags)
{
    char path[4096];
    path_of(path, sizeof path, name);
    int fd = open(path, flags | O_DIRECT);
    if (fd < 0 && errno == EINVAL) {
        fd = open(path, flags);
    }
    if (fd < 0) {
        setup_failed(path);
    }
    return fd;
}

/* `len` bytes of `name` at `offset`, read with a plain descriptor; returns the count read. */
static ssize_t
read_back(const char *name, off_t offset, unsigned char *out, size_t len)
{
    char path[4096];
    path_of(path, sizeof path, name);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        return -1;
    }
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, out + done, len - done, offset + (off_t)done);
        if (n <= 0) {
            break;
        }
        done += (size_t)n;
    }
    close(fd);
    return (ssize_t)done;
}

static hipFileHandle_t
must_register(int fd, const char *what)
{
    hipFileDescr_t descr;
    memset(&descr, 0, sizeof descr);
    descr.type         = hipFileHandleTypeOpaqueFD;
    descr.handle.fd    = fd;
    hipFileHandle_t fh = NULL;
    hipFileError_t  e  = hipFileHandleRegister(&fh, &descr);
    if (!is_success(e)) {
        printf("not ok - register %s (err %d)\n", what, (int)e.err);
        exit(1);
    }
    return fh;
}

/* ---- device memory ------------------------------------------------------------- */

static unsigned char *g_host; /* DATA_SIZE bytes of host scratch */

static void *
dev_alloc(size_t size, const char *what)
{
    void *ptr = NULL;
    if (hipMalloc(&ptr, size) != hipSuccess || ptr == NULL) {
        printf("not ok - hipMalloc %s\n", what);
        exit(1);
    }
    return ptr;
}

static void
dev_fill(void *dev, size_t size)
{
    if (hipMemset(dev, SENTINEL, size) != hipSuccess) {
        printf("not ok - hipMemset\n");
        exit(1);
    }
}

static void
to_host(unsigned char *host, const void *dev, size_t size)
{
    if (hipMemcpy(host, dev, size, hipMemcpyDeviceToHost) != hipSuccess) {
        printf("not ok - hipMemcpy to host\n");
        exit(1);
    }
}

/* Where `dev[at .. at+len)` first differs from the file's pattern from `file_at`, or -1. */
static long
dev_differs(const void *dev, size_t at, size_t len, size_t file_at)
{
    to_host(g_host, (const unsigned char *)dev + at, len);
    for (size_t i = 0; i < len; i++) {
        if (g_host[i] != pattern_byte(file_at + i)) {
            return (long)i;
        }
    }
    return -1;
}

/* Whether `dev[at .. at+len)` still holds SENTINEL. */
static int
dev_untouched(const void *dev, size_t at, size_t len)
{
    to_host(g_host, (const unsigned char *)dev + at, len);
    for (size_t i = 0; i < len; i++) {
        if (g_host[i] != SENTINEL) {
            return 0;
        }
    }
    return 1;
}

/* ---- streams ----------------------------------------------------------------------- */

static hipStream_t
stream_new(unsigned flags, const char *what)
{
    hipStream_t s = NULL;
    if (hipStreamCreateWithFlags(&s, flags) != hipSuccess || s == NULL) {
        printf("not ok - hipStreamCreateWithFlags %s\n", what);
        exit(1);
    }
    return s;
}

/* Whether everything queued on `s` so far finished within `ms`: an event recorded now, polled. */
static int
drained_within(hipStream_t s, double ms)
{
    hipEvent_t ev = NULL;
    if (hipEventCreate(&ev) != hipSuccess || hipEventRecord(ev, s) != hipSuccess) {
        printf("# hipEventCreate/hipEventRecord failed\n");
        return 0;
    }
    double     until = now_ms() + ms;
    hipError_t q;
    while ((q = hipEventQuery(ev)) == hipErrorNotReady && now_ms() < until) {
        sleep_ms(1);
    }
    if (hipEventDestroy(ev) != hipSuccess) {
        printf("# hipEventDestroy failed\n");
    }
    return q == hipSuccess;
}

/* Wait for `s` to drain, then synchronize it; a stream that does not drain is a hang: the check
 * `what` fails and the program ends (what is queued can no longer be trusted to finish). */
static void
sync_stream(hipStream_t s, const char *what)
{
    if (!drained_within(s, LONG_WAIT_MS)) {
        check(0, what, "the stream did not drain within %.0f s", LONG_WAIT_MS / 1e3);
        printf("# stopping: a stream hangs\n");
        fflush(stdout);
        _exit(1);
    }
    if (hipStreamSynchronize(s) != hipSuccess) {
        printf("# hipStreamSynchronize failed after the stream drained (%s)\n", what);
    }
}

/* A host function that holds its stream until `released` is set, then applies the changes it
 * carries to the caller's size and offsets (late binding: the op queued behind it reads them). */
typedef struct {
    int     released; /* set by the main thread */
    int     entered;  /* the host function has started */
    int     gave_up;  /* it stopped waiting at GATE_WAIT_MS */
    size_t *size_p;
    size_t  size;
    hoff_t *file_offset_p;
    hoff_t  file_offset;
    hoff_t *buffer_offset_p;
    hoff_t  buffer_offset;
} gate;

static void
gate_fn(void *arg)
{
    gate *g = (gate *)arg;
    __atomic_store_n(&g->entered, 1, __ATOMIC_RELEASE);
    double until = now_ms() + GATE_WAIT_MS;
    while (!__atomic_load_n(&g->released, __ATOMIC_ACQUIRE)) {
        if (now_ms() > until) {
            __atomic_store_n(&g->gave_up, 1, __ATOMIC_RELEASE);
            break;
        }
        sleep_ms(1);
    }
    if (g->size_p != NULL) {
        *g->size_p = g->size;
    }
    if (g->file_offset_p != NULL) {
        *g->file_offset_p = g->file_offset;
    }
    if (g->buffer_offset_p != NULL) {
        *g->buffer_offset_p = g->buffer_offset;
    }
}

static void
hold(hipStream_t s, gate *g)
{
    if (hipLaunchHostFunc(s, gate_fn, g) != hipSuccess) {
        printf("not ok - hipLaunchHostFunc (holding a stream)\n");
        exit(1);
    }
}

static void
release(gate *g)
{
    __atomic_store_n(&g->released, 1, __ATOMIC_RELEASE);
}

static int
gave_up(gate *g)
{
    return __atomic_load_n(&g->gave_up, __ATOMIC_ACQUIRE);
}

/* A host function queued after an op: copies the op's result as it stands when it runs. */
typedef struct {
    const ssize_t *from;
    ssize_t        seen;
} result_copy;

static void
copy_fn(void *arg)
{
    result_copy *c = (result_copy *)arg;
    c->seen        = *(const volatile ssize_t *)c->from;
}

static ssize_t
peek(const ssize_t *p)
{
    return *(const volatile ssize_t *)p;
}

/* ---- one submission ------------------------------------------------------------------ */

/* The arguments of one async call, kept where the library may read them until it ran. */
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

static hipFileError_t
read_async(hipFileHandle_t fh, void *buf, io_args *a, hipStream_t s)
{
    return hipFileReadAsync(fh, buf, &a->size, &a->file_offset, &a->buffer_offset, &a->bytes, s);
}

static hipFileError_t
write_async(hipFileHandle_t fh, void *buf, io_args *a, hipStream_t s)
{
    return hipFileWriteAsync(fh, buf, &a->size, &a->file_offset, &a->buffer_offset, &a->bytes, s);
}

/* A read of `size` bytes at `file_at` into `buf` at `buf_at` that must have moved them all. */
static void
expect_read(hipFileError_t submitted, const io_args *a, const void *buf, size_t buf_at, size_t size, size_t file_at,
            const char *name)
{
    long diff = is_success(submitted) && a->bytes == (ssize_t)size ? dev_differs(buf, buf_at, size, file_at) : -2;
    check(diff == -1, name, "submit err %d (%s) hip %d, *bytes_p %zd (want %zu), first difference at %ld",
          (int)submitted.err, HIPFILE_ERRSTR(submitted.err), (int)submitted.hip_drv_err, a->bytes, size, diff);
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];
    /* Before any HIP call: the simulated runtime reads it once. */
    setenv("HIPFILE_SIM_DEVICES", "2", 0);

    g_host = (unsigned char *)malloc(DATA_SIZE);
    if (g_host == NULL) {
        printf("not ok - host allocation\n");
        return 1;
    }
    make_file("async-data.bin", DATA_SIZE);
    make_file("async-short.bin", SHORT_SIZE);
    make_file("async-written.bin", 0);

    void          *dst = dev_alloc(DATA_SIZE, "destination");
    void          *src = dev_alloc(DATA_SIZE, "source");
    hipFileError_t e, e2;
    io_args        a, b;

    /* ---- 1. driver closed ------------------------------------------------------- */

    check(hipFileUseCount() == 0, "the driver starts closed", "use count %lld", (long long)hipFileUseCount());
    args_set(&a, 4096, 0, 0);
    e = read_async(NULL, dst, &a, NULL);
    expect_status(e, hipFileInvalidValue, "driver closed: hipFileReadAsync -> hipFileInvalidValue");
    check(hipFileUseCount() == 1, "driver closed: hipFileReadAsync opens the driver (use count 1, as cuFile)",
          "use count %lld", (long long)hipFileUseCount());
    expect_status(hipFileDriverClose(), hipFileSuccess, "hipFileDriverClose after hipFileReadAsync opened it");
    args_set(&a, 4096, 0, 0);
    e = write_async(NULL, dst, &a, NULL);
    expect_status(e, hipFileInvalidValue, "driver closed: hipFileWriteAsync -> hipFileInvalidValue");
    check(hipFileUseCount() == 1, "driver closed: hipFileWriteAsync opens the driver (use count 1, as cuFile)",
          "use count %lld", (long long)hipFileUseCount());
    expect_status(hipFileDriverClose(), hipFileSuccess, "hipFileDriverClose after hipFileWriteAsync opened it");

    hipStream_t survivor = stream_new(hipStreamNonBlocking, "survivor");
    expect_status(hipFileStreamRegister(survivor, 0), hipFileSuccess,
                  "hipFileStreamRegister with the driver closed succeeds");
    check(hipFileUseCount() == 0, "hipFileStreamRegister leaves a closed driver closed", "use count %lld",
          (long long)hipFileUseCount());

    /* ---- 2. driver open ---------------------------------------------------------- */

    expect_status(hipFileDriverOpen(), hipFileSuccess, "hipFileDriverOpen");
    {
        hipFileDriverProps_t props;
        memset(&props, 0, sizeof props);
        e = hipFileDriverGetProperties(&props);
        check(is_success(e) && (props.feature_flags & (1u << hipFileStreamsSupported)) != 0,
              "feature_flags has hipFileStreamsSupported", "err %d, feature_flags %#x", (int)e.err,
              props.feature_flags);
    }

    /* ---- registration ---- */

    expect_status(hipFileStreamRegister(survivor, 0), hipFileInvalidValue,
                  "hipFileStreamRegister of a registered stream -> hipFileInvalidValue");
    {
        hipStream_t s = stream_new(hipStreamNonBlocking, "flags");
        expect_status(hipFileStreamRegister(s, HIPFILE_STREAM_FLAGS_MASK + 1u), hipFileInvalidValue,
                      "hipFileStreamRegister with a flag outside HIPFILE_STREAM_FLAGS_MASK -> hipFileInvalidValue");
        expect_status(hipFileStreamDeregister(s), hipFileInvalidValue,
                      "hipFileStreamDeregister of a never registered stream -> hipFileInvalidValue");
        if (hipStreamDestroy(s) != hipSuccess) {
            printf("# hipStreamDestroy failed\n");
        }
    }

    int             fd_data = open_app("async-data.bin", O_RDWR);
    hipFileHandle_t fh      = must_register(fd_data, "async-data.bin");
    int             fd_wr   = open_app("async-written.bin", O_RDWR);
    hipFileHandle_t fh_wr   = must_register(fd_wr, "async-written.bin");
    int             fd_sh   = open_app("async-short.bin", O_RDWR);
    hipFileHandle_t fh_sh   = must_register(fd_sh, "async-short.bin");
    expect_status(hipFileBufRegister(src, DATA_SIZE, 0), hipFileSuccess, "hipFileBufRegister source");

    hipStream_t plain = stream_new(0, "plain"); /* never registered */
    hipStream_t reg   = stream_new(0, "registered");
    expect_status(hipFileStreamRegister(reg, 0), hipFileSuccess, "hipFileStreamRegister(stream, 0)");

    /* ---- argument checks at submission ---- */

    {
        hoff_t  off = 0, boff = 0;
        size_t  size = 4096;
        ssize_t bytes = BYTES_UNSET;
        expect_both(hipFileReadAsync(fh, NULL, &size, &off, &boff, &bytes, plain),
                    hipFileWriteAsync(fh, NULL, &size, &off, &boff, &bytes, plain), hipFileInvalidValue,
                    "NULL buffer -> hipFileInvalidValue");
        expect_both(hipFileReadAsync(fh, dst, NULL, &off, &boff, &bytes, plain),
                    hipFileWriteAsync(fh, src, NULL, &off, &boff, &bytes, plain), hipFileInvalidValue,
                    "NULL size_p -> hipFileInvalidValue");
        expect_both(hipFileReadAsync(fh, dst, &size, NULL, &boff, &bytes, plain),
                    hipFileWriteAsync(fh, src, &size, NULL, &boff, &bytes, plain), hipFileInvalidValue,
                    "NULL file_offset_p -> hipFileInvalidValue");
        expect_both(hipFileReadAsync(fh, dst, &size, &off, NULL, &bytes, plain),
                    hipFileWriteAsync(fh, src, &size, &off, NULL, &bytes, plain), hipFileInvalidValue,
                    "NULL buffer_offset_p -> hipFileInvalidValue");
        expect_both(hipFileReadAsync(fh, dst, &size, &off, &boff, NULL, plain),
                    hipFileWriteAsync(fh, src, &size, &off, &boff, NULL, plain), hipFileInvalidValue,
                    "NULL bytes_p -> hipFileInvalidValue");

        int             fd_gone = open_app("async-short.bin", O_RDWR);
        hipFileHandle_t gone    = must_register(fd_gone, "async-short.bin (to deregister)");
        hipFileHandleDeregister(gone);
        expect_both(hipFileReadAsync(gone, dst, &size, &off, &boff, &bytes, plain),
                    hipFileWriteAsync(gone, src, &size, &off, &boff, &bytes, plain), hipFileHandleNotRegistered,
                    "a deregistered file handle -> hipFileHandleNotRegistered");
        close(fd_gone);

        size = 8192;
        boff = (hoff_t)(DATA_SIZE - 4096);
        expect_both(hipFileReadAsync(fh, dst, &size, &off, &boff, &bytes, plain),
                    hipFileWriteAsync(fh, src, &size, &off, &boff, &bytes, plain), hipFileInvalidValue,
                    "buffer offset + size past the allocation -> hipFileInvalidValue");
        size = 4096;
        boff = 0;
        off  = -4096;
        expect_both(hipFileReadAsync(fh, dst, &size, &off, &boff, &bytes, plain),
                    hipFileWriteAsync(fh, src, &size, &off, &boff, &bytes, plain), hipFileInvalidValue,
                    "a negative file offset -> hipFileInvalidValue");
        off  = 0;
        boff = -4096;
        expect_both(hipFileReadAsync(fh, dst, &size, &off, &boff, &bytes, plain),
                    hipFileWriteAsync(fh, src, &size, &off, &boff, &bytes, plain), hipFileInvalidValue,
                    "a negative buffer offset -> hipFileInvalidValue");
        sync_stream(plain, "refused submissions queue nothing");
        check(bytes == BYTES_UNSET, "refused submissions queue nothing: *bytes_p untouched", "*bytes_p %zd",
              bytes);
    }

    {
        const char *name  = "a buffer on another device than the stream -> hipFileInvalidValue";
        int         count = 0;
        if (hipGetDeviceCount(&count) != hipSuccess || count < 2) {
            skip(name, "one device");
        }
        else {
            void *far = NULL;
            int   ok  = hipSetDevice(1) == hipSuccess && hipMalloc(&far, DATA_SIZE) == hipSuccess && far != NULL;
            ok        = hipSetDevice(0) == hipSuccess && ok;
            if (!ok) {
                check(0, name, "hipSetDevice/hipMalloc on device 1 failed");
            }
            else {
                hipStream_t near = stream_new(hipStreamNonBlocking, "device 0");
                args_set(&a, 4096, 0, 0);
                e = read_async(fh, far, &a, near);
                args_set(&b, 4096, 0, 0);
                e2 = write_async(fh, far, &b, near);
                expect_both(e, e2, hipFileInvalidValue, name);
                sync_stream(near, name);
                if (hipStreamDestroy(near) != hipSuccess || hipFree(far) != hipSuccess) {
                    printf("# freeing the device 1 buffer or its stream failed\n");
                }
            }
        }
    }

    args_set(&a, 0, 0, 0);
    e = read_async(fh, dst, &a, plain);
    sync_stream(plain, "a read of size 0");
    check(is_success(e) && a.bytes == 0, "a read of size 0: success, *bytes_p 0 once the stream synchronized",
          "submit err %d (%s), *bytes_p %zd", (int)e.err, HIPFILE_ERRSTR(e.err), a.bytes);

    /* ---- results ---- */

    dev_fill(dst, DATA_SIZE);
    args_set(&a, MIB, 0, 0);
    e = read_async(fh, dst, &a, reg);
    sync_stream(reg, "1 MiB read on a registered stream");
    expect_read(e, &a, dst, 0, MIB, 0, "1 MiB read on a registered stream: *bytes_p 1048576, bytes exact");

    dev_fill(dst, DATA_SIZE);
    args_set(&a, MIB, MIB, 0);
    e = read_async(fh, dst, &a, plain);
    sync_stream(plain, "1 MiB read on an unregistered stream");
    expect_read(e, &a, dst, 0, MIB, MIB, "1 MiB read on an unregistered stream: *bytes_p 1048576, bytes exact");

    dev_fill(dst, DATA_SIZE);
    args_set(&a, MIB, 512 * KIB, MIB);
    e = read_async(fh, dst, &a, NULL);
    sync_stream(NULL, "1 MiB read on the NULL stream");
    expect_read(e, &a, dst, MIB, MIB, 512 * KIB, "1 MiB read on the NULL stream: *bytes_p 1048576, bytes exact");

    /* Write then read back in stream order, no synchronize between. */
    {
        /* src holds the data file's pattern from byte 4096 on: what the write stores is told apart
         * from the data file's first MiB. */
        for (size_t i = 0; i < MIB; i++) {
            g_host[i] = pattern_byte(4096 + i);
        }
        if (hipMemcpy(src, g_host, MIB, hipMemcpyHostToDevice) != hipSuccess) {
            printf("not ok - hipMemcpy to device\n");
            exit(1);
        }
        dev_fill(dst, DATA_SIZE);
        args_set(&a, MIB, 0, 0);
        args_set(&b, MIB, 0, 0);
        e  = write_async(fh_wr, src, &a, reg);
        e2 = read_async(fh_wr, dst, &b, reg);
        sync_stream(reg, "write then read back on one stream");
        long    diff = -2;
        ssize_t got  = read_back("async-written.bin", 0, g_host, MIB);
        if (got == (ssize_t)MIB) {
            diff = -1;
            for (size_t i = 0; i < MIB && diff < 0; i++) {
                if (g_host[i] != pattern_byte(4096 + i)) {
                    diff = (long)i;
                }
            }
        }
        check(is_success(e) && a.bytes == (ssize_t)MIB && diff == -1,
              "WriteAsync of 1 MiB: *bytes_p 1048576, the file holds the bytes",
              "submit err %d (%s), *bytes_p %zd, file has %zd bytes, first difference at %ld", (int)e.err,
              HIPFILE_ERRSTR(e.err), a.bytes, got, diff);
        expect_read(e2, &b, dst, 0, MIB, 4096,
                    "ReadAsync queued right behind the WriteAsync on the same stream reads what it wrote");
    }

    dev_fill(dst, DATA_SIZE);
    args_set(&a, 64 * KIB, 64 * KIB, 0);
    e = read_async(fh_sh, dst, &a, reg);
    args_set(&b, 64 * KIB, SHORT_SIZE, 64 * KIB);
    e2 = read_async(fh_sh, dst, &b, reg);
    io_args c;
    args_set(&c, 64 * KIB, 16 * SHORT_SIZE, 128 * KIB);
    hipFileError_t e3 = read_async(fh_sh, dst, &c, reg);
    sync_stream(reg, "reads at the end of a file");
    expect_read(e, &a, dst, 0, SHORT_SIZE - 64 * KIB, 64 * KIB,
                "a read across the end of file: *bytes_p = the bytes left (8192), bytes exact");
    check(is_success(e2) && b.bytes == 0 && dev_untouched(dst, 64 * KIB, 64 * KIB),
          "a read at the end of file: *bytes_p 0, buffer untouched", "submit err %d, *bytes_p %zd", (int)e2.err,
          b.bytes);
    check(is_success(e3) && c.bytes == 0 && dev_untouched(dst, 128 * KIB, 64 * KIB),
          "a read past the end of file: *bytes_p 0, buffer untouched", "submit err %d, *bytes_p %zd", (int)e3.err,
          c.bytes);

    {
        char path[4096];
        path_of(path, sizeof path, "async-short.bin");
        int fd_wo = open(path, O_WRONLY);
        if (fd_wo < 0) {
            setup_failed(path);
        }
        hipFileHandle_t fh_wo = must_register(fd_wo, "async-short.bin (O_WRONLY)");
        dev_fill(dst, DATA_SIZE);
        args_set(&a, 64 * KIB, 0, 0);
        e = read_async(fh_wo, dst, &a, reg);
        sync_stream(reg, "a read through an O_WRONLY descriptor");
        check(is_success(e) && a.bytes == -1 && dev_untouched(dst, 0, 64 * KIB),
              "a read through an O_WRONLY descriptor: submitted, then *bytes_p -1 when the stream reaches it",
              "submit err %d (%s), *bytes_p %zd", (int)e.err, HIPFILE_ERRSTR(e.err), a.bytes);
        hipFileHandleDeregister(fh_wo);
        close(fd_wo);
    }

    /* ---- late binding: size and offsets read through the pointers when the stream gets there ---- */

    {
        hipStream_t held_reg   = stream_new(hipStreamNonBlocking, "held, registered");
        hipStream_t held_plain = stream_new(hipStreamNonBlocking, "held, unregistered");
        hipStream_t held_fixed = stream_new(hipStreamNonBlocking, "held, fixed");
        expect_status(hipFileStreamRegister(held_reg, 0), hipFileSuccess, "hipFileStreamRegister(held stream, 0)");
        const unsigned fixed = HIPFILE_STREAM_FIXED_BUF_OFFSET | HIPFILE_STREAM_FIXED_FILE_OFFSET |
                               HIPFILE_STREAM_FIXED_FILE_SIZE;
        expect_status(hipFileStreamRegister(held_fixed, fixed), hipFileSuccess,
                      "hipFileStreamRegister(held stream, FIXED_BUF_OFFSET|FIXED_FILE_OFFSET|FIXED_FILE_SIZE)");

        hipStream_t late[2] = {held_reg, held_plain};
        const char *late_names[2] = {
            "registered stream, flags 0: size and offsets changed after submit are the ones used",
            "unregistered stream: size and offsets changed after submit are the ones used"};
        for (int i = 0; i < 2; i++) {
            gate g;
            memset(&g, 0, sizeof g);
            dev_fill(dst, DATA_SIZE);
            hold(late[i], &g);
            args_set(&a, 128 * KIB, 0, 0);
            e                 = read_async(fh, dst, &a, late[i]);
            g.size_p          = &a.size;
            g.size            = 64 * KIB;
            g.file_offset_p   = &a.file_offset;
            g.file_offset     = (hoff_t)(256 * KIB);
            g.buffer_offset_p = &a.buffer_offset;
            g.buffer_offset   = (hoff_t)(512 * KIB);
            release(&g);
            sync_stream(late[i], late_names[i]);
            int  moved = is_success(e) && a.bytes == (ssize_t)(64 * KIB);
            long diff  = moved ? dev_differs(dst, 512 * KIB, 64 * KIB, 256 * KIB) : -2;
            int  rest = dev_untouched(dst, 0, 512 * KIB);
            check(diff == -1 && rest && !gave_up(&g), late_names[i],
                  "submit err %d (%s), *bytes_p %zd (want 65536), difference at %ld, bytes at the submitted "
                  "offsets %s",
                  (int)e.err, HIPFILE_ERRSTR(e.err), a.bytes, diff, rest ? "untouched" : "written");
        }

        {
            gate g;
            memset(&g, 0, sizeof g);
            dev_fill(dst, DATA_SIZE);
            hold(held_reg, &g);
            args_set(&a, 64 * KIB, 0, 0);
            e        = read_async(fh, dst, &a, held_reg);
            g.size_p = &a.size;
            g.size   = 128 * KIB;
            release(&g);
            sync_stream(held_reg, "a size grown after submit");
            check(is_success(e) && a.bytes == -(ssize_t)hipFileInvalidValue && dev_untouched(dst, 0, 128 * KIB),
                  "a size grown after submit: *bytes_p -hipFileInvalidValue, buffer untouched",
                  "submit err %d (%s), *bytes_p %zd", (int)e.err, HIPFILE_ERRSTR(e.err), a.bytes);
        }

        {
            gate g;
            memset(&g, 0, sizeof g);
            dev_fill(dst, DATA_SIZE);
            hold(held_fixed, &g);
            args_set(&a, 64 * KIB, 0, 0);
            e                 = read_async(fh, dst, &a, held_fixed);
            g.size_p          = &a.size;
            g.size            = 32 * KIB;
            g.file_offset_p   = &a.file_offset;
            g.file_offset     = (hoff_t)(256 * KIB);
            g.buffer_offset_p = &a.buffer_offset;
            g.buffer_offset   = (hoff_t)(512 * KIB);
            release(&g);
            sync_stream(held_fixed, "FIXED flags (7)");
            long diff = is_success(e) && a.bytes == (ssize_t)(64 * KIB) ? dev_differs(dst, 0, 64 * KIB, 0) : -2;
            int  rest = dev_untouched(dst, 64 * KIB, DATA_SIZE - 64 * KIB);
            check(diff == -1 && rest, "FIXED flags (7): changes after submit have no effect",
                  "submit err %d (%s), *bytes_p %zd (want 65536), difference at %ld, rest of the buffer %s",
                  (int)e.err, HIPFILE_ERRSTR(e.err), a.bytes, diff, rest ? "untouched" : "written");
        }

        expect_status(hipFileStreamDeregister(held_reg), hipFileSuccess, "hipFileStreamDeregister(held stream)");
        expect_status(hipFileStreamDeregister(held_fixed), hipFileSuccess,
                      "hipFileStreamDeregister(fixed stream)");
        if (hipStreamDestroy(held_reg) != hipSuccess || hipStreamDestroy(held_plain) != hipSuccess ||
            hipStreamDestroy(held_fixed) != hipSuccess) {
            printf("# hipStreamDestroy failed\n");
        }
    }

    {
        hipStream_t aligned = stream_new(0, "page aligned");
        expect_status(hipFileStreamRegister(aligned, HIPFILE_STREAM_PAGE_ALIGNED_INPUTS), hipFileSuccess,
                      "hipFileStreamRegister(stream, PAGE_ALIGNED_INPUTS)");
        args_set(&a, 4096 + 512, 0, 0);
        expect_status(read_async(fh, dst, &a, aligned), hipFileInvalidValue,
                      "PAGE_ALIGNED_INPUTS: an unaligned size -> hipFileInvalidValue");
        args_set(&a, 4096, 512, 0);
        expect_status(read_async(fh, dst, &a, aligned), hipFileInvalidValue,
                      "PAGE_ALIGNED_INPUTS: an unaligned file offset -> hipFileInvalidValue");
        args_set(&a, 4096, 0, 512);
        expect_status(read_async(fh, dst, &a, aligned), hipFileInvalidValue,
                      "PAGE_ALIGNED_INPUTS: an unaligned buffer offset -> hipFileInvalidValue");
        dev_fill(dst, DATA_SIZE);
        args_set(&a, 64 * KIB, 128 * KIB, 4096);
        e = read_async(fh, dst, &a, aligned);
        sync_stream(aligned, "PAGE_ALIGNED_INPUTS: an aligned read");
        expect_read(e, &a, dst, 4096, 64 * KIB, 128 * KIB, "PAGE_ALIGNED_INPUTS: an aligned read works");
        expect_status(hipFileStreamDeregister(aligned), hipFileSuccess, "hipFileStreamDeregister(aligned stream)");
        if (hipStreamDestroy(aligned) != hipSuccess) {
            printf("# hipStreamDestroy failed\n");
        }
    }

    /* ---- ordering with other work ---- */

    {
        result_copy copy;
        args_set(&a, 256 * KIB, 0, 0);
        copy.from = &a.bytes;
        copy.seen = BYTES_UNSET;
        e         = read_async(fh, dst, &a, plain);
        if (hipLaunchHostFunc(plain, copy_fn, &copy) != hipSuccess) {
            printf("not ok - hipLaunchHostFunc (copying the result)\n");
            exit(1);
        }
        sync_stream(plain, "*bytes_p is set before later work on the stream runs");
        check(is_success(e) && a.bytes == (ssize_t)(256 * KIB) && copy.seen == a.bytes,
              "*bytes_p is set before later work on the stream runs",
              "submit err %d (%s), *bytes_p %zd, a host function queued after it saw %zd", (int)e.err,
              HIPFILE_ERRSTR(e.err), a.bytes, copy.seen);
    }

    {
        unsigned char *pinned = NULL;
        if (hipHostMalloc((void **)&pinned, MIB, 0) != hipSuccess || pinned == NULL) {
            printf("not ok - hipHostMalloc\n");
            exit(1);
        }
        memset(pinned, 0, MIB);
        dev_fill(dst, DATA_SIZE);
        args_set(&a, MIB, 4096, 0);
        e             = read_async(fh, dst, &a, reg);
        hipError_t cp = hipMemcpyAsync(pinned, dst, MIB, hipMemcpyDeviceToHost, reg);
        sync_stream(reg, "hipMemcpyAsync after ReadAsync");
        long diff = -1;
        for (size_t i = 0; i < MIB && diff < 0; i++) {
            if (pinned[i] != pattern_byte(4096 + i)) {
                diff = (long)i;
            }
        }
        check(is_success(e) && cp == hipSuccess && diff == -1,
              "hipMemcpyAsync queued after a ReadAsync on the same stream sees the file's bytes",
              "submit err %d (%s), hipMemcpyAsync %d, first difference at %ld", (int)e.err, HIPFILE_ERRSTR(e.err),
              (int)cp, diff);
        if (hipHostFree(pinned) != hipSuccess) {
            printf("# hipHostFree failed\n");
        }
    }

    {
        hipStream_t held  = stream_new(hipStreamNonBlocking, "held");
        hipStream_t other = stream_new(hipStreamNonBlocking, "other");
        void       *dst_b = dev_alloc(DATA_SIZE, "second destination");
        gate        g;
        memset(&g, 0, sizeof g);
        dev_fill(dst, DATA_SIZE);
        dev_fill(dst_b, DATA_SIZE);
        hold(held, &g);
        args_set(&a, 256 * KIB, 0, 0);
        e = read_async(fh, dst, &a, held);
        args_set(&b, 256 * KIB, 0, 0);
        e2         = read_async(fh, dst_b, &b, other);
        /* The other stream's op ends (its bytes in place, its result written) while the held
         * stream's op waits. The other stream itself may go on only later: on CUDA the library
         * holds a stream with a host function, and host functions run one at a time on the
         * runtime's thread, which the held stream's gate occupies. */
        double b_until = now_ms() + LONG_WAIT_MS;
        while (peek(&b.bytes) == 0 && now_ms() < b_until) {
            sleep_ms(1);
        }
        int b_done = peek(&b.bytes) != 0;
        ssize_t a_meanwhile = peek(&a.bytes);
        int     a_untouched = dev_untouched(dst, 0, 256 * KIB);
        long    diff_b      = b_done && is_success(e2) && b.bytes == (ssize_t)(256 * KIB)
                                  ? dev_differs(dst_b, 0, 256 * KIB, 0)
                                  : -2;
        /* Upstream writes 0 into *bytes_p at submission; the result comes when the stream
         * passes the op. */
        check(diff_b == -1 && a_meanwhile == 0 && a_untouched && !gave_up(&g),
              "a read on another stream completes while a held stream's read waits",
              "other stream %s, its submit err %d, *bytes_p %zd, difference at %ld; held read's *bytes_p %zd, "
              "its buffer %s",
              b_done ? "ended" : "did not end", (int)e2.err, b.bytes, diff_b, a_meanwhile,
              a_untouched ? "untouched" : "written");
        release(&g);
        sync_stream(held, "the held stream's read, once released");
        sync_stream(other, "the other stream");
        expect_read(e, &a, dst, 0, 256 * KIB, 0, "the held stream's read runs once released");
        if (hipStreamDestroy(held) != hipSuccess || hipStreamDestroy(other) != hipSuccess ||
            hipFree(dst_b) != hipSuccess) {
            printf("# releasing the concurrency check's stream or buffer failed\n");
        }
    }

    /* ---- a bogus stream ---- */

    args_set(&a, 4096, 0, 0);
    e = read_async(fh, dst, &a, GARBAGE_STREAM);
    check(e.err == hipFileHipDriverError && e.hip_drv_err != hipSuccess && a.bytes == BYTES_UNSET,
          "a bogus stream handle -> hipFileHipDriverError with the runtime's error, *bytes_p untouched",
          "err %d (%s), hip_drv_err %d, *bytes_p %zd", (int)e.err, HIPFILE_ERRSTR(e.err), (int)e.hip_drv_err,
          a.bytes);

    /* ---- deregistering a stream with work queued ---- */

    {
        hipStream_t held = stream_new(hipStreamNonBlocking, "deregistered while queued");
        gate        g;
        memset(&g, 0, sizeof g);
        expect_status(hipFileStreamRegister(held, 0), hipFileSuccess, "hipFileStreamRegister(stream to deregister, 0)");
        dev_fill(dst, DATA_SIZE);
        hold(held, &g);
        args_set(&a, 128 * KIB, 64 * KIB, 0);
        e = read_async(fh, dst, &a, held);
        hipFileError_t gone  = hipFileStreamDeregister(held);
        int            early = !gave_up(&g);
        check(is_success(gone) && early, "hipFileStreamDeregister with a read queued on a held stream succeeds at once",
              "err %d (%s); %s", (int)gone.err, HIPFILE_ERRSTR(gone.err),
              early ? "returned at once" : "returned only after the held stream's host function gave up");
        release(&g);
        sync_stream(held, "the read queued on a deregistered stream");
        expect_read(e, &a, dst, 0, 128 * KIB, 64 * KIB, "the read queued before the deregistration completes normally");
        if (hipStreamDestroy(held) != hipSuccess) {
            printf("# hipStreamDestroy failed\n");
        }
    }

    /* ---- 3. closing the driver to zero with work queued ------------------------------ */

    {
        hipStream_t held = stream_new(hipStreamNonBlocking, "held across the close");
        gate        g;
        memset(&g, 0, sizeof g);
        dev_fill(dst, DATA_SIZE);
        hold(held, &g);
        args_set(&a, 64 * KIB, 0, 0);
        e = read_async(fh, dst, &a, held);
        args_set(&b, 64 * KIB, 64 * KIB, 64 * KIB);
        e2               = read_async(fh, dst, &b, held);
        long long before = (long long)hipFileUseCount();
        hipFileError_t closed = hipFileDriverClose();
        int early = !gave_up(&g);
        check(is_success(e) && is_success(e2) && before == 1 && is_success(closed) && early,
              "hipFileDriverClose (1 -> 0) returns while reads are queued on a held stream",
              "submits err %d, %d; use count %lld; close err %d (%s); %s", (int)e.err, (int)e2.err, before,
              (int)closed.err, HIPFILE_ERRSTR(closed.err),
              early ? "returned at once" : "returned only after the held stream's host function gave up");
        release(&g);
        sync_stream(held, "the reads queued across the close");
        int ok_a = a.bytes == -(ssize_t)hipFileDriverClosing ||
                   (a.bytes == (ssize_t)(64 * KIB) && dev_differs(dst, 0, 64 * KIB, 0) == -1);
        int ok_b = b.bytes == -(ssize_t)hipFileDriverClosing ||
                   (b.bytes == (ssize_t)(64 * KIB) && dev_differs(dst, 64 * KIB, 64 * KIB, 64 * KIB) == -1);
        check(is_success(e) && is_success(e2) && ok_a && ok_b,
              "reads queued across the close end with their bytes moved or -hipFileDriverClosing",
              "*bytes_p %zd and %zd", a.bytes, b.bytes);
        if (hipStreamDestroy(held) != hipSuccess) {
            printf("# hipStreamDestroy failed\n");
        }
    }
    check(hipFileUseCount() == 0, "the driver is closed", "use count %lld", (long long)hipFileUseCount());

    expect_status(hipFileDriverOpen(), hipFileSuccess, "hipFileDriverOpen again");
    expect_status(hipFileStreamRegister(survivor, 0), hipFileInvalidValue,
                  "a stream registration survives hipFileDriverClose: registering it again -> hipFileInvalidValue");
    expect_status(hipFileStreamDeregister(survivor), hipFileSuccess,
                  "hipFileStreamDeregister of the registration that survived the close");
    expect_status(hipFileStreamDeregister(reg), hipFileSuccess, "hipFileStreamDeregister(stream)");
    expect_status(hipFileDriverClose(), hipFileSuccess, "final hipFileDriverClose");

    if (hipStreamDestroy(survivor) != hipSuccess || hipStreamDestroy(plain) != hipSuccess ||
        hipStreamDestroy(reg) != hipSuccess) {
        printf("# hipStreamDestroy failed\n");
    }
    if (hipFree(src) != hipSuccess || hipFree(dst) != hipSuccess) {
        printf("# hipFree failed\n");
    }
    close(fd_data);
    close(fd_wr);
    close(fd_sh);
    free(g_host);

    return tap_finish();
}
