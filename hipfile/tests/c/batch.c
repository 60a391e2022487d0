/*
 * batch.c - batch IO (hipFileBatchIO{SetUp,Submit,GetStatus,Cancel,Destroy})
 * as a user of upstream hipFile sees it, one check per rule.
 *
 * Usage: batch SCRATCH_DIR
 * Prints one TAP-like line per check; exits 0 only if every check passed.
 * Builds as C11 and as C++17.
 *
 * Every IO request here is 4 KiB aligned (offsets, sizes, addresses), except
 * reads that start at the end of a file, so that each check holds whichever
 * path serves it, compat mode disallowed included. The checks run in order:
 *   1. driver closed: set-up arguments and limits, submission on a closed driver;
 *   2. driver open: writes and reads of 128 entries, waiting and timeouts,
 *      argument checks, all-or-nothing submissions, capacity, per-entry
 *      outcomes (short reads, -EBADF), cancel, destroy, deregistration of
 *      what entries use;
 *   3. closing the driver to zero destroys every batch.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT, clock_gettime, nanosleep */
#endif

#include <hipfile.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"

/* One entry's worth of bytes; BIG entries fill BIG_SIZE. */
#define CHUNK ((size_t)(64 * 1024))
#define BIG 128
#define BIG_SIZE ((size_t)BIG * CHUNK)
/* The timeout check reads MIB_ENTRIES entries of 1 MiB each. */
#define MIB ((size_t)(1024 * 1024))
#define MIB_ENTRIES 64
#define SENTINEL 0x5A
/* How long a wait that must end soon may take before the check calls it a hang. */
#define LONG_WAIT_MS 30000L

/* The call returned exactly `want` (and hipSuccess as the HIP half). */
static void
expect_status(hipFileError_t got, hipFileOpError_t want, const char *name)
{
    check(got.err == want && got.hip_drv_err == hipSuccess, name, "got err %d (%s) hip_drv_err %d, want %d (%s)",
          (int)got.err, HIPFILE_ERRSTR(got.err), (int)got.hip_drv_err, (int)want, HIPFILE_ERRSTR(want));
}

static int
is_success(hipFileError_t e)
{
    return e.err == hipFileSuccess && e.hip_drv_err == hipSuccess;
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

/* ---- files ---------------------------------------------------------------- */

static const char *g_dir;

static void
path_of(char *out, size_t room, const char *name)
{
    snprintf(out, room, "%s/%s", g_dir, name);
}

/* Create `name` holding `size` bytes: the pattern from `pattern_from` on, or `fill` when
 * `pattern_from` is SIZE_MAX. */
static void
make_file(const char *name, size_t size, size_t pattern_from, unsigned char fill)
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
            block[i] = pattern_from == SIZE_MAX ? fill : pattern_byte(pattern_from + done + i);
        }
        if (write(fd, block, n) != (ssize_t)n) {
            setup_failed(path);
        }
        done += n;
    }
    close(fd);
}

/* The application's descriptor: O_DIRECT where the filesystem takes it. */
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

/* ---- device memory ---------------------------------------------------------- */

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
to_device(void *dev, const unsigned char *host, size_t size)
{
    if (hipMemcpy(dev, host, size, hipMemcpyHostToDevice) != hipSuccess) {
        printf("not ok - hipMemcpy to device\n");
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

/* ---- batch helpers ------------------------------------------------------------ */

/* Descriptors this process holds now, or -1. */
static int
open_descriptors(void)
{
    DIR *dir = opendir("/proc/self/fd");
    if (dir == NULL) {
        return -1;
    }
    int n = 0;
    for (struct dirent *e = readdir(dir); e != NULL; e = readdir(dir)) {
        n += e->d_name[0] != '.';
    }
    closedir(dir);
    return n - 1; /* the listing's own */
}

static void
set_entry(hipFileIOParams_t *p, hipFileOpcode_t op, hipFileHandle_t fh, void *base, int64_t file_offset,
          int64_t buf_offset, size_t size, void *cookie)
{
    memset(p, 0, sizeof *p);
    p->mode                  = hipFileBatch;
    p->opcode                = op;
    p->fh                    = fh;
    p->cookie                = cookie;
    p->u.batch.devPtr_base   = base;
    p->u.batch.file_offset   = file_offset;
    p->u.batch.devPtr_offset = buf_offset;
    p->u.batch.size          = size;
}

/* hipFileBatchIOGetStatus with `timeout_ms` (negative: NULL, wait as long as it takes);
 * returns the count of events, or -1 when the call did not succeed (its answer in *status). */
static long
reap(hipFileBatchHandle_t h, unsigned min_nr, unsigned max, hipFileIOEvents_t *events, long timeout_ms,
     hipFileError_t *status)
{
    struct timespec t;
    t.tv_sec           = timeout_ms / 1000;
    t.tv_nsec          = (timeout_ms % 1000) * 1000000L;
    unsigned       nr  = max;
    hipFileError_t e   = hipFileBatchIOGetStatus(h, min_nr, &nr, events, timeout_ms < 0 ? NULL : &t);
    if (status != NULL) {
        *status = e;
    }
    return is_success(e) ? (long)nr : -1;
}

/* What a failed entry's `ret` holds for errno `e`. */
static size_t
neg(long e)
{
    return (size_t)(-(ssize_t)e);
}

/* Index of `cookie` in `base[0..n)`, or -1. */
static long
cookie_index(const void *cookie, const int *base, long n)
{
    for (long i = 0; i < n; i++) {
        if (cookie == (const void *)&base[i]) {
            return i;
        }
    }
    return -1;
}

/* Where the first event that is not Complete with `ret` bytes is, or -1. */
static long
first_not_complete(const hipFileIOEvents_t *events, long n, size_t ret)
{
    for (long i = 0; i < n; i++) {
        if (events[i].status != hipFileComplete || events[i].ret != ret) {
            return i;
        }
    }
    return -1;
}

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

#define GARBAGE_BATCH ((hipFileBatchHandle_t)(uintptr_t)0xbadbadbad000ull)

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    g_dir = argv[1];

    /* Each entry's cookie is the address of its int: distinct, and a real pointer. */
    static int               cookies[BIG];
    static hipFileIOEvents_t events[BIG];
    static hipFileIOParams_t params[BIG];
    unsigned char           *pattern = (unsigned char *)malloc(BIG_SIZE);
    unsigned char           *host    = (unsigned char *)malloc(BIG_SIZE);
    if (pattern == NULL || host == NULL) {
        printf("not ok - host allocations\n");
        return 1;
    }
    for (size_t i = 0; i < BIG_SIZE; i++) {
        pattern[i] = pattern_byte(i);
    }
    hipFileError_t e;
    long           n;

    /* ---- 1. driver closed ------------------------------------------------- */

    check(hipFileUseCount() == 0, "the driver starts closed", "use count %lld", (long long)hipFileUseCount());
    hipFileBatchHandle_t h = NULL;
    expect_status(hipFileBatchIOSetUp(NULL, 8), hipFileInvalidValue,
                  "hipFileBatchIOSetUp(NULL, 8) -> hipFileInvalidValue");
    expect_status(hipFileBatchIOSetUp(&h, 0), hipFileInvalidValue,
                  "hipFileBatchIOSetUp of 0 entries -> hipFileInvalidValue");
    expect_status(hipFileBatchIOSetUp(&h, 129), hipFileInvalidValue,
                  "hipFileBatchIOSetUp above the limit (129 > 128) -> hipFileInvalidValue");
    e = hipFileBatchIOSetUp(&h, BIG);
    check(is_success(e) && h != NULL, "hipFileBatchIOSetUp(128) on a closed driver", "err %d, handle %p",
          (int)e.err, h);
    check(hipFileUseCount() == 0, "hipFileBatchIOSetUp leaves a closed driver closed", "use count %lld",
          (long long)hipFileUseCount());

    expect_status(hipFileSetParameterSizeT(hipFileParamPropertiesIOBatchsize, 8), hipFileSuccess,
                  "hipFileSetParameterSizeT(IOBatchsize, 8) while closed");
    {
        hipFileBatchHandle_t small = NULL;
        expect_status(hipFileBatchIOSetUp(&small, 9), hipFileInvalidValue,
                      "with the limit lowered to 8, hipFileBatchIOSetUp(9) -> hipFileInvalidValue");
        e = hipFileBatchIOSetUp(&small, 8);
        check(is_success(e) && small != NULL, "with the limit lowered to 8, hipFileBatchIOSetUp(8) succeeds",
              "err %d", (int)e.err);
        hipFileBatchIODestroy(small);
    }
    expect_status(hipFileSetParameterSizeT(hipFileParamPropertiesIOBatchsize, BIG), hipFileSuccess,
                  "hipFileSetParameterSizeT(IOBatchsize, 128) restores the limit");

    /* Argument errors come before the handle and the driver are looked at. */
    set_entry(&params[0], hipFileBatchRead, (hipFileHandle_t)(uintptr_t)0x1000, (void *)(uintptr_t)0x2000, 0, 0,
              CHUNK, NULL);
    expect_status(hipFileBatchIOSubmit(h, 0, params, 0), hipFileInvalidValue,
                  "closed driver: hipFileBatchIOSubmit of 0 entries -> hipFileInvalidValue");
    expect_status(hipFileBatchIOSubmit(h, 1, NULL, 0), hipFileInvalidValue,
                  "closed driver: hipFileBatchIOSubmit with NULL params -> hipFileInvalidValue");
    params[0].mode = (hipFileBatchMode_t)7;
    expect_status(hipFileBatchIOSubmit(h, 1, params, 0), hipFileInvalidValue,
                  "closed driver: an entry of unknown mode -> hipFileInvalidValue");
    params[0].mode = hipFileBatch;
    expect_status(hipFileBatchIOSubmit(h, 1, params, 0), hipFileDriverNotInitialized,
                  "closed driver: a well-formed entry -> hipFileDriverNotInitialized");

    /* ---- 2. driver open ------------------------------------------------------ */

    expect_status(hipFileDriverOpen(), hipFileSuccess, "hipFileDriverOpen");
    {
        hipFileDriverProps_t props;
        memset(&props, 0, sizeof props);
        e = hipFileDriverGetProperties(&props);
        check(is_success(e) && (props.feature_flags & (1u << hipFileBatchIOSupported)) != 0,
              "feature_flags has hipFileBatchIOSupported", "err %d, feature_flags %#x", (int)e.err,
              props.feature_flags);
        check(props.max_batch_io_count == BIG, "max_batch_io_count is the limit, 128", "%u",
              props.max_batch_io_count);
    }
    {
        hipFileBatchHandle_t other = NULL;
        e = hipFileBatchIOSetUp(&other, 4);
        check(is_success(e) && hipFileUseCount() == 1, "hipFileBatchIOSetUp on an open driver keeps the count at 1",
              "err %d, use count %lld", (int)e.err, (long long)hipFileUseCount());
        check(other != h, "each set-up gets its own handle", "both %p", other);
        hipFileBatchIODestroy(other);
    }

    make_file("batch-data.bin", 0, SIZE_MAX, 0);
    int             fd_data = open_app("batch-data.bin", O_RDWR);
    hipFileHandle_t fh      = must_register(fd_data, "batch-data.bin");

    void *src = dev_alloc(BIG_SIZE, "source"); /* registered */
    void *dst = dev_alloc(BIG_SIZE, "destination"); /* never registered */
    void *rd  = dev_alloc(BIG_SIZE, "registered destination");
    to_device(src, pattern, BIG_SIZE);
    expect_status(hipFileBufRegister(src, BIG_SIZE, 0), hipFileSuccess, "hipFileBufRegister source");
    expect_status(hipFileBufRegister(rd, BIG_SIZE, 0), hipFileSuccess, "hipFileBufRegister registered destination");

    /* 128 writes from a registered buffer, chunk i to file chunk 127 - i. */
    for (int i = 0; i < BIG; i++) {
        set_entry(&params[i], hipFileBatchWrite, fh, src, (int64_t)((BIG - 1 - i) * CHUNK), (int64_t)(i * CHUNK),
                  CHUNK, &cookies[i]);
    }
    expect_status(hipFileBatchIOSubmit(h, BIG, params, 0), hipFileSuccess,
                  "a batch set up while closed takes 128 writes once the driver is open");
    n = reap(h, BIG, BIG, events, -1, &e);
    check(n == BIG, "GetStatus(min_nr 128, timeout NULL) waits for all 128 writes", "returned %ld, err %d", n,
          (int)e.err);
    {
        long bad = -1;
        for (long i = 0; i < n && bad < 0; i++) {
            if (events[i].cookie != (void *)&cookies[i]) {
                bad = i;
            }
        }
        check(n == BIG && bad < 0, "events come in submission order with their cookies",
              "event %ld has cookie index %ld", bad, bad < 0 ? -1 : cookie_index(events[bad].cookie, cookies, BIG));
        bad = first_not_complete(events, n, CHUNK);
        check(n == BIG && bad < 0, "every write is Complete with ret = its size", "event %ld: status %d ret %zu", bad,
              bad < 0 ? 0 : (int)events[bad].status, bad < 0 ? (size_t)0 : events[bad].ret);
    }
    {
        ssize_t got  = read_back("batch-data.bin", 0, host, BIG_SIZE);
        long    diff = -1;
        for (int j = 0; j < BIG && diff < 0 && got == (ssize_t)BIG_SIZE; j++) {
            long d = first_difference(host + (size_t)j * CHUNK, pattern + (size_t)(BIG - 1 - j) * CHUNK, CHUNK);
            if (d >= 0) {
                diff = (long)((size_t)j * CHUNK) + d;
            }
        }
        check(got == (ssize_t)BIG_SIZE && diff < 0, "the 128 writes landed byte-exactly",
              "read %zd bytes, first difference at byte %ld", got, diff);
    }

    /* 128 reads into an unregistered buffer, file chunk i to chunk i. */
    for (int i = 0; i < BIG; i++) {
        set_entry(&params[i], hipFileBatchRead, fh, dst, (int64_t)(i * CHUNK), (int64_t)(i * CHUNK), CHUNK,
                  &cookies[i]);
    }
    expect_status(hipFileBatchIOSubmit(h, BIG, params, 0), hipFileSuccess,
                  "hipFileBatchIOSubmit of 128 reads into an unregistered buffer");
    n = reap(h, BIG, BIG, events, LONG_WAIT_MS, &e);
    {
        long bad = first_not_complete(events, n, CHUNK);
        check(n == BIG && bad < 0, "every read is Complete with ret = its size", "%ld events, event %ld bad", n, bad);
    }
    to_host(host, dst, BIG_SIZE);
    {
        long diff = -1;
        for (int j = 0; j < BIG && diff < 0; j++) {
            long d = first_difference(host + (size_t)j * CHUNK, pattern + (size_t)(BIG - 1 - j) * CHUNK, CHUNK);
            if (d >= 0) {
                diff = (long)((size_t)j * CHUNK) + d;
            }
        }
        check(diff < 0, "the 128 reads brought the file back byte-exactly", "first difference at byte %ld", diff);
    }

    /* ---- waiting -------------------------------------------------------------- */

    {
        hipFileBatchHandle_t idle = NULL;
        expect_status(hipFileBatchIOSetUp(&idle, 4), hipFileSuccess, "hipFileBatchIOSetUp(4)");
        double start = now_ms();
        n            = reap(idle, 1, 4, events, 5000, &e);
        double took  = now_ms() - start;
        check(n == 0 && took < 1000, "nothing outstanding: GetStatus(min_nr 1) answers 0 events at once",
              "returned %ld (err %d) after %.0f ms", n, (int)e.err, took);
        hipFileBatchIODestroy(idle);
    }

    for (int i = 0; i < 16; i++) {
        set_entry(&params[i], hipFileBatchRead, fh, dst, (int64_t)(i * CHUNK), (int64_t)(i * CHUNK), CHUNK,
                  &cookies[i]);
    }
    expect_status(hipFileBatchIOSubmit(h, 16, params, 0), hipFileSuccess, "hipFileBatchIOSubmit of 16 reads");
    n = reap(h, 16, 32, events, -1, &e);
    check(n == 16 && first_not_complete(events, n, CHUNK) < 0,
          "GetStatus(min_nr 16, nr 32, timeout NULL) waits for all 16", "returned %ld, err %d", n, (int)e.err);

    /* min_nr above what is outstanding: upstream caps it to the outstanding count. */
    for (int i = 0; i < 2; i++) {
        set_entry(&params[i], hipFileBatchRead, fh, dst, (int64_t)(i * CHUNK), (int64_t)(i * CHUNK), CHUNK,
                  &cookies[i]);
    }
    expect_status(hipFileBatchIOSubmit(h, 2, params, 0), hipFileSuccess, "hipFileBatchIOSubmit of 2 reads");
    {
        double start = now_ms();
        n            = reap(h, 4, 4, events, 2000, &e);
        double took  = now_ms() - start;
        check(n == 2 && took < 1000,
              "GetStatus(min_nr 4) with 2 outstanding returns both once they finish (as upstream)",
              "returned %ld (err %d) after %.0f ms, timeout 2000 ms", n, (int)e.err, took);
        if (n >= 0 && n < 2) {
            reap(h, (unsigned)(2 - n), 2, events, LONG_WAIT_MS, NULL);
        }
    }

    /* A timeout that passes first: success with fewer than min_nr. Reading 64 MiB takes far
     * longer than 1 ms; a few tries make a stalled scheduler harmless. */
    {
        void *big      = dev_alloc((size_t)MIB_ENTRIES * MIB, "64 MiB destination");
        long  fewer    = -1;
        int   all_ok   = 1;
        int   terminal = 1;
        for (int attempt = 0; attempt < 5 && fewer < 0; attempt++) {
            for (int i = 0; i < MIB_ENTRIES; i++) {
                set_entry(&params[i], hipFileBatchRead, fh, big, (int64_t)((size_t)(i % 8) * MIB),
                          (int64_t)((size_t)i * MIB), MIB, &cookies[i]);
            }
            if (!is_success(hipFileBatchIOSubmit(h, MIB_ENTRIES, params, 0))) {
                all_ok = 0;
                break;
            }
            long first = reap(h, MIB_ENTRIES, MIB_ENTRIES, events, 1, &e);
            if (first < 0) {
                all_ok = 0;
                break;
            }
            if (first < MIB_ENTRIES) {
                fewer = first;
            }
            for (long i = 0; i < first; i++) {
                terminal = terminal && events[i].status == hipFileComplete && events[i].ret == MIB;
            }
            long rest = first < MIB_ENTRIES ? reap(h, (unsigned)(MIB_ENTRIES - first), MIB_ENTRIES, events,
                                                   LONG_WAIT_MS, NULL)
                                            : 0;
            all_ok    = all_ok && first + rest == MIB_ENTRIES && first_not_complete(events, rest, MIB) < 0;
        }
        check(fewer >= 0 && terminal,
              "a 1 ms timeout that passes: GetStatus succeeds with fewer than min_nr (64), all terminal",
              "every try returned all 64, the call failed (err %d), or an event was not Complete", (int)e.err);
        check(all_ok, "the entries left at a timeout are reaped later, all Complete", "they were not");
        if (hipFree(big) != hipSuccess) {
            printf("# hipFree failed\n");
        }
    }

    /* ---- GetStatus arguments, with one entry outstanding ------------------------ */

    set_entry(&params[0], hipFileBatchRead, fh, dst, 0, 0, CHUNK, &cookies[0]);
    expect_status(hipFileBatchIOSubmit(h, 1, params, 0), hipFileSuccess, "hipFileBatchIOSubmit of 1 read");
    {
        unsigned        nr = 4;
        struct timespec t;
        t.tv_sec  = 1;
        t.tv_nsec = 0;
        expect_status(hipFileBatchIOGetStatus(h, 0, NULL, events, &t), hipFileInvalidValue,
                      "GetStatus with NULL nr -> hipFileInvalidValue");
        expect_status(hipFileBatchIOGetStatus(h, 0, &nr, NULL, &t), hipFileInvalidValue,
                      "GetStatus with NULL events -> hipFileInvalidValue");
        nr = 0;
        expect_status(hipFileBatchIOGetStatus(h, 0, &nr, events, &t), hipFileInvalidValue,
                      "GetStatus with *nr = 0 -> hipFileInvalidValue");
        nr = 4;
        expect_status(hipFileBatchIOGetStatus(h, 5, &nr, events, &t), hipFileInvalidValue,
                      "GetStatus with min_nr 5 > *nr 4 -> hipFileInvalidValue");
        t.tv_sec = -1;
        nr       = 4;
        expect_status(hipFileBatchIOGetStatus(h, 1, &nr, events, &t), hipFileInvalidValue,
                      "GetStatus with tv_sec -1 -> hipFileInvalidValue");
        t.tv_sec  = 0;
        t.tv_nsec = -1;
        nr        = 4;
        expect_status(hipFileBatchIOGetStatus(h, 1, &nr, events, &t), hipFileInvalidValue,
                      "GetStatus with tv_nsec -1 -> hipFileInvalidValue");
        t.tv_nsec = 1000000000L;
        nr        = 4;
        expect_status(hipFileBatchIOGetStatus(h, 1, &nr, events, &t), hipFileInvalidValue,
                      "GetStatus with tv_nsec 1e9 -> hipFileInvalidValue");
        t.tv_nsec = 0;
        nr        = 4;
        expect_status(hipFileBatchIOGetStatus(GARBAGE_BATCH, 1, &nr, events, &t), hipFileInvalidValue,
                      "GetStatus on an unknown handle -> hipFileInvalidValue");
        nr = 4;
        expect_status(hipFileBatchIOGetStatus(NULL, 1, &nr, events, &t), hipFileInvalidValue,
                      "GetStatus on a NULL handle -> hipFileInvalidValue");
    }
    n = reap(h, 1, 4, events, LONG_WAIT_MS, &e);
    check(n == 1 && events[0].cookie == (void *)&cookies[0] && events[0].status == hipFileComplete,
          "the refused GetStatus calls took no event: the read is still reaped", "returned %ld", n);

    /* ---- Submit arguments --------------------------------------------------------- */

    set_entry(&params[0], hipFileBatchRead, fh, dst, 0, 0, CHUNK, &cookies[0]);
    expect_status(hipFileBatchIOSubmit(h, 0, params, 0), hipFileInvalidValue,
                  "hipFileBatchIOSubmit of 0 entries -> hipFileInvalidValue");
    expect_status(hipFileBatchIOSubmit(h, 1, NULL, 0), hipFileInvalidValue,
                  "hipFileBatchIOSubmit with NULL params -> hipFileInvalidValue");
    expect_status(hipFileBatchIOSubmit(GARBAGE_BATCH, 1, params, 0), hipFileInvalidValue,
                  "hipFileBatchIOSubmit on an unknown handle -> hipFileInvalidValue");
    expect_status(hipFileBatchIOSubmit(NULL, 1, params, 0), hipFileInvalidValue,
                  "hipFileBatchIOSubmit on a NULL handle -> hipFileInvalidValue");
    {
        hipFileBatchHandle_t gone = NULL;
        expect_status(hipFileBatchIOSetUp(&gone, 4), hipFileSuccess, "hipFileBatchIOSetUp(4) to destroy");
        hipFileBatchIODestroy(gone);
        expect_status(hipFileBatchIOSubmit(gone, 1, params, 0), hipFileInvalidValue,
                      "hipFileBatchIOSubmit on a destroyed handle -> hipFileInvalidValue");
        unsigned nr = 4;
        expect_status(hipFileBatchIOGetStatus(gone, 0, &nr, events, NULL), hipFileInvalidValue,
                      "GetStatus on a destroyed handle -> hipFileInvalidValue");
        expect_status(hipFileBatchIOCancel(gone), hipFileInvalidValue,
                      "hipFileBatchIOCancel on a destroyed handle -> hipFileInvalidValue");
    }

    /* All or nothing: each refused submission holds one good write to an untouched file, then a
     * bad entry. A batch of capacity 2 shows nothing was queued: no event to reap, and a full
     * submission still fits afterwards. */
    {
        make_file("batch-untouched.bin", 2 * CHUNK, SIZE_MAX, SENTINEL);
        int             fd_u = open_app("batch-untouched.bin", O_RDWR);
        hipFileHandle_t fh_u = must_register(fd_u, "batch-untouched.bin");

        /* A file handle that was registered, then deregistered. */
        make_file("batch-stale.bin", CHUNK, SIZE_MAX, SENTINEL);
        int             fd_s  = open_app("batch-stale.bin", O_RDWR);
        hipFileHandle_t stale = must_register(fd_s, "batch-stale.bin");
        hipFileHandleDeregister(stale);

        /* A buffer registered for half of its allocation. */
        void *part = dev_alloc(2 * CHUNK, "partly registered buffer");
        expect_status(hipFileBufRegister(part, CHUNK, 0), hipFileSuccess, "hipFileBufRegister half an allocation");

        hipFileBatchHandle_t two = NULL;
        expect_status(hipFileBatchIOSetUp(&two, 2), hipFileSuccess, "hipFileBatchIOSetUp(2)");

        struct {
            const char      *name;
            hipFileOpError_t want;
            hipFileIOParams_t bad;
        } cases[16];
        int k = 0;
#define BAD_CASE(text, code, op, file, base, foff, boff, size)                                                   \
    do {                                                                                                           \
        cases[k].name = text;                                                                                      \
        cases[k].want = code;                                                                                      \
        set_entry(&cases[k].bad, op, file, base, foff, boff, size, &cookies[1]);                                   \
        k++;                                                                                                       \
    } while (0)
        BAD_CASE("an entry of unknown mode -> hipFileInvalidValue, nothing queued", hipFileInvalidValue,
                 hipFileBatchWrite, fh_u, src, 0, 0, CHUNK);
        cases[k - 1].bad.mode = (hipFileBatchMode_t)0;
        BAD_CASE("an entry of unknown opcode -> hipFileInvalidValue, nothing queued", hipFileInvalidValue,
                 (hipFileOpcode_t)2, fh_u, src, 0, 0, CHUNK);
        BAD_CASE("an entry with a negative file offset -> hipFileInvalidValue, nothing queued", hipFileInvalidValue,
                 hipFileBatchWrite, fh_u, src, -(int64_t)CHUNK, 0, CHUNK);
        BAD_CASE("an entry with a negative buffer offset -> hipFileInvalidValue, nothing queued", hipFileInvalidValue,
                 hipFileBatchWrite, fh_u, src, 0, -(int64_t)CHUNK, CHUNK);
        BAD_CASE("registered buffer: offset at its end -> hipFileInvalidValue, nothing queued", hipFileInvalidValue,
                 hipFileBatchWrite, fh_u, src, 0, (int64_t)BIG_SIZE, CHUNK);
        BAD_CASE("registered buffer: offset at its end, size 0 -> hipFileInvalidValue, nothing queued",
                 hipFileInvalidValue, hipFileBatchWrite, fh_u, src, 0, (int64_t)BIG_SIZE, 0);
        BAD_CASE("registered buffer: size running past its end -> hipFileInvalidValue, nothing queued",
                 hipFileInvalidValue, hipFileBatchRead, fh_u, src, 0, (int64_t)(BIG_SIZE - CHUNK), 2 * CHUNK);
        BAD_CASE("registered length shorter than the allocation: size past it -> hipFileInvalidValue",
                 hipFileInvalidValue, hipFileBatchRead, fh_u, part, 0, 0, 2 * CHUNK);
        BAD_CASE("unregistered buffer: offset at the allocation's end -> hipFileInvalidValue, nothing queued",
                 hipFileInvalidValue, hipFileBatchRead, fh_u, dst, 0, (int64_t)BIG_SIZE, CHUNK);
        BAD_CASE("unregistered buffer: size running past the allocation -> hipFileInvalidValue, nothing queued",
                 hipFileInvalidValue, hipFileBatchRead, fh_u, dst, 0, 0, BIG_SIZE + CHUNK);
        BAD_CASE("an entry with a NULL devPtr_base -> hipFileInvalidValue, nothing queued", hipFileInvalidValue,
                 hipFileBatchRead, fh_u, NULL, 0, 0, CHUNK);
        BAD_CASE("an entry on a deregistered file handle -> hipFileHandleNotRegistered, nothing queued",
                 hipFileHandleNotRegistered, hipFileBatchWrite, stale, src, 0, 0, CHUNK);
#undef BAD_CASE
        for (int c = 0; c < k; c++) {
            set_entry(&params[0], hipFileBatchWrite, fh_u, src, 0, 0, CHUNK, &cookies[0]);
            params[1] = cases[c].bad;
            e         = hipFileBatchIOSubmit(two, 2, params, 0);
            long left = reap(two, 0, 2, events, 0, NULL);
            check(e.err == cases[c].want && e.hip_drv_err == hipSuccess && left == 0, cases[c].name,
                  "got err %d (%s), want %d; %ld event(s) to reap afterwards", (int)e.err, HIPFILE_ERRSTR(e.err),
                  (int)cases[c].want, left);
        }
        ssize_t got  = read_back("batch-untouched.bin", 0, host, 2 * CHUNK);
        long    diff = first_not(host, SENTINEL, 2 * CHUNK);
        check(got == (ssize_t)(2 * CHUNK) && diff < 0, "the refused submissions wrote nothing to the file",
              "read %zd bytes, byte %ld changed", got, diff);

        set_entry(&params[0], hipFileBatchWrite, fh_u, src, 0, 0, CHUNK, &cookies[0]);
        set_entry(&params[1], hipFileBatchWrite, fh_u, src, (int64_t)CHUNK, (int64_t)CHUNK, CHUNK, &cookies[1]);
        expect_status(hipFileBatchIOSubmit(two, 2, params, 0), hipFileSuccess,
                      "after the refused submissions the batch still has room for 2");
        n   = reap(two, 2, 2, events, LONG_WAIT_MS, NULL);
        got = read_back("batch-untouched.bin", 0, host, 2 * CHUNK);
        check(n == 2 && first_not_complete(events, n, CHUNK) < 0 && got == (ssize_t)(2 * CHUNK) &&
                  first_difference(host, pattern, 2 * CHUNK) < 0,
              "and the same good entries, submitted alone, write the file", "%ld events, read %zd bytes", n, got);

        /* The params array is copied: overwritten at once, it changes nothing. */
        make_file("batch-reuse.bin", 4 * CHUNK, SIZE_MAX, SENTINEL);
        int             fd_r = open_app("batch-reuse.bin", O_RDWR);
        hipFileHandle_t fh_r = must_register(fd_r, "batch-reuse.bin");
        for (int i = 0; i < 4; i++) {
            set_entry(&params[i], hipFileBatchWrite, fh_r, src, (int64_t)(i * CHUNK), (int64_t)(i * CHUNK), CHUNK,
                      &cookies[i]);
        }
        e = hipFileBatchIOSubmit(h, 4, params, 0xffffffffu);
        memset(params, 0xff, 4 * sizeof params[0]);
        check(is_success(e), "flags are ignored: hipFileBatchIOSubmit with flags 0xffffffff", "err %d", (int)e.err);
        n   = reap(h, 4, 4, events, LONG_WAIT_MS, NULL);
        got = read_back("batch-reuse.bin", 0, host, 4 * CHUNK);
        {
            int cookies_ok = n == 4;
            for (long i = 0; i < n; i++) {
                cookies_ok = cookies_ok && events[i].cookie == (void *)&cookies[i];
            }
            check(cookies_ok && first_not_complete(events, n, CHUNK) < 0 && got == (ssize_t)(4 * CHUNK) &&
                      first_difference(host, pattern, 4 * CHUNK) < 0,
                  "the params array may be overwritten right after hipFileBatchIOSubmit",
                  "%ld events, read %zd bytes", n, got);
        }

        hipFileBatchIODestroy(two);
        hipFileHandleDeregister(fh_u);
        hipFileHandleDeregister(fh_r);
        close(fd_u);
        close(fd_s);
        close(fd_r);
        expect_status(hipFileBufDeregister(part), hipFileSuccess, "hipFileBufDeregister partly registered buffer");
        if (hipFree(part) != hipSuccess) {
            printf("# hipFree failed\n");
        }
    }

    /* ---- capacity ------------------------------------------------------------------- */

    {
        hipFileBatchHandle_t four = NULL;
        expect_status(hipFileBatchIOSetUp(&four, 4), hipFileSuccess, "hipFileBatchIOSetUp(4)");
        for (int i = 0; i < 5; i++) {
            set_entry(&params[i], hipFileBatchRead, fh, dst, (int64_t)(i * CHUNK), (int64_t)(i * CHUNK), CHUNK,
                      &cookies[i]);
        }
        expect_status(hipFileBatchIOSubmit(four, 5, params, 0), hipFileBatchFull,
                      "5 entries into a batch of 4 -> hipFileBatchFull");
        expect_status(hipFileBatchIOSubmit(four, 4, params, 0), hipFileSuccess, "4 entries into a batch of 4");
        expect_status(hipFileBatchIOSubmit(four, 1, params, 0), hipFileBatchFull,
                      "a 5th entry while 4 are outstanding -> hipFileBatchFull");
        /* After hipFileBatchIOCancel no entry runs: all 4 are finished, none reaped. */
        expect_status(hipFileBatchIOCancel(four), hipFileSuccess, "hipFileBatchIOCancel");
        expect_status(hipFileBatchIOSubmit(four, 1, params, 0), hipFileBatchFull,
                      "finished but unreaped entries still count -> hipFileBatchFull");
        n = reap(four, 2, 2, events, LONG_WAIT_MS, NULL);
        check(n == 2, "reap 2 of the 4", "returned %ld", n);
        expect_status(hipFileBatchIOSubmit(four, 3, params, 0), hipFileBatchFull,
                      "3 entries with 2 unreaped in a batch of 4 -> hipFileBatchFull");
        expect_status(hipFileBatchIOSubmit(four, 2, params, 0), hipFileSuccess,
                      "2 entries with 2 unreaped in a batch of 4");
        n = reap(four, 4, 4, events, LONG_WAIT_MS, NULL);
        check(n == 4, "all 4 reaped", "returned %ld", n);
        hipFileBatchIODestroy(four);
    }

    /* ---- per-entry outcomes: short reads, size 0, -EBADF ------------------------------ */

    {
        make_file("batch-short.bin", CHUNK + 1, 0, 0);
        int             fd_ok = open_app("batch-short.bin", O_RDWR);
        hipFileHandle_t fh_ok = must_register(fd_ok, "batch-short.bin (read-write)");
        char            path[4096];
        path_of(path, sizeof path, "batch-short.bin");
        int fd_wo = open(path, O_WRONLY);
        if (fd_wo < 0) {
            setup_failed(path);
        }
        hipFileHandle_t fh_wo = must_register(fd_wo, "batch-short.bin (O_WRONLY)");
        make_file("batch-closed.bin", CHUNK, 0, 0);
        int             fd_cl = open_app("batch-closed.bin", O_RDWR);
        hipFileHandle_t fh_cl = must_register(fd_cl, "batch-closed.bin");
        close(fd_cl);

        set_entry(&params[0], hipFileBatchRead, fh_ok, dst, 0, 0, CHUNK, &cookies[0]);
        set_entry(&params[1], hipFileBatchRead, fh_ok, dst, (int64_t)CHUNK, (int64_t)CHUNK, CHUNK, &cookies[1]);
        set_entry(&params[2], hipFileBatchRead, fh_wo, dst, 0, (int64_t)(2 * CHUNK), CHUNK, &cookies[2]);
        set_entry(&params[3], hipFileBatchRead, fh_ok, dst, (int64_t)(2 * CHUNK), (int64_t)(3 * CHUNK), CHUNK,
                  &cookies[3]);
        set_entry(&params[4], hipFileBatchRead, fh_cl, dst, 0, (int64_t)(4 * CHUNK), CHUNK, &cookies[4]);
        set_entry(&params[5], hipFileBatchRead, fh_ok, dst, 0, (int64_t)(5 * CHUNK), 0, &cookies[5]);
        set_entry(&params[6], hipFileBatchRead, fh_ok, dst, (int64_t)(CHUNK + 1), (int64_t)(6 * CHUNK), CHUNK,
                  &cookies[6]);
        set_entry(&params[7], hipFileBatchWrite, fh_cl, src, 0, 0, CHUNK, &cookies[7]);
        memset(host, SENTINEL, 8 * CHUNK);
        to_device(dst, host, 8 * CHUNK);
        expect_status(hipFileBatchIOSubmit(h, 8, params, 0), hipFileSuccess,
                      "hipFileBatchIOSubmit of 8 reads and writes, two on bad descriptors");
        n = reap(h, 8, 8, events, LONG_WAIT_MS, &e);
        check(n == 8, "all 8 reaped", "returned %ld, err %d", n, (int)e.err);
        hipFileIOEvents_t by[8];
        memset(by, 0, sizeof by);
        for (long i = 0; i < n; i++) {
            long at = cookie_index(events[i].cookie, cookies, 8);
            if (at >= 0) {
                by[at] = events[i];
            }
        }
        check(by[0].status == hipFileComplete && by[0].ret == CHUNK, "a whole read: Complete, ret 65536",
              "status %d ret %zu", (int)by[0].status, by[0].ret);
        check(by[1].status == hipFileComplete && by[1].ret == 1, "a read across the end of file: Complete, ret 1",
              "status %d ret %zu", (int)by[1].status, by[1].ret);
        check(by[3].status == hipFileComplete && by[3].ret == 0, "a read past the end of file: Complete, ret 0",
              "status %d ret %zu", (int)by[3].status, by[3].ret);
        check(by[6].status == hipFileComplete && by[6].ret == 0, "a read at the end of file: Complete, ret 0",
              "status %d ret %zu", (int)by[6].status, by[6].ret);
        check(by[5].status == hipFileComplete && by[5].ret == 0, "a read of size 0: Complete, ret 0",
              "status %d ret %zu", (int)by[5].status, by[5].ret);
        check(by[2].status == hipFileFailed && by[2].ret == neg(EBADF),
              "a read through an O_WRONLY descriptor: Failed, ret -EBADF", "status %d ret %lld", (int)by[2].status,
              (long long)(ssize_t)by[2].ret);
        check(by[4].status == hipFileFailed && by[4].ret == neg(EBADF),
              "a read through a closed descriptor: Failed, ret -EBADF", "status %d ret %lld", (int)by[4].status,
              (long long)(ssize_t)by[4].ret);
        check(by[7].status == hipFileFailed && by[7].ret == neg(EBADF),
              "a write through a closed descriptor: Failed, ret -EBADF", "status %d ret %lld", (int)by[7].status,
              (long long)(ssize_t)by[7].ret);
        to_host(host, dst, 8 * CHUNK);
        /* Past the count of a short read, its own range may hold anything (a direct read fills
         * the whole block that holds the end of file). */
        {
            long whole = first_difference(host, pattern, CHUNK);
            check(whole < 0 && host[CHUNK] == pattern[CHUNK],
                  "the reads beside the failed ones moved their bytes byte-exactly",
                  "whole read differs at %ld; short read byte %#x, want %#x", whole, host[CHUNK], pattern[CHUNK]);
        }
        check(first_not(host + 2 * CHUNK, SENTINEL, 6 * CHUNK) < 0,
              "failed, empty and past-the-end reads left their ranges alone", "a byte changed");
        hipFileHandleDeregister(fh_ok);
        hipFileHandleDeregister(fh_wo);
        hipFileHandleDeregister(fh_cl);
        close(fd_ok);
        close(fd_wo);
    }

    /* ---- deregistration while entries are in flight ---------------------------------- */

    /* Until GetStatus reports an entry, it is in flight: its registered memory cannot be
     * deregistered (hipFileInvalidValue, cuFile's answer). Its file handle can: the handle is
     * forgotten at once and the file registers again, while the entries finish on the old
     * registration. */
    for (int i = 0; i < 32; i++) {
        set_entry(&params[i], hipFileBatchRead, fh, rd, (int64_t)(i * CHUNK), (int64_t)(i * CHUNK), CHUNK,
                  &cookies[i]);
    }
    expect_status(hipFileBatchIOSubmit(h, 32, params, 0), hipFileSuccess,
                  "hipFileBatchIOSubmit of 32 reads into a registered buffer");
    expect_status(hipFileBufDeregister(rd), hipFileInvalidValue,
                  "hipFileBufDeregister of a buffer with unreaped entries -> hipFileInvalidValue");
    hipFileHandleDeregister(fh);
    {
        hipFileDescr_t descr;
        memset(&descr, 0, sizeof descr);
        descr.type      = hipFileHandleTypeOpaqueFD;
        descr.handle.fd = fd_data;
        expect_status(hipFileHandleRegister(&fh, &descr), hipFileSuccess,
                      "hipFileHandleDeregister with unreaped entries forgets the handle: the file registers again");
    }
    n = reap(h, 32, 32, events, LONG_WAIT_MS, NULL);
    check(n == 32 && first_not_complete(events, n, CHUNK) < 0, "the 32 reads complete", "returned %ld", n);
    to_host(host, rd, 32 * CHUNK);
    {
        long diff = -1;
        for (int j = 0; j < 32 && diff < 0; j++) {
            long d = first_difference(host + (size_t)j * CHUNK, pattern + (size_t)(BIG - 1 - j) * CHUNK, CHUNK);
            if (d >= 0) {
                diff = (long)((size_t)j * CHUNK) + d;
            }
        }
        check(diff < 0, "reads into a registered buffer land byte-exactly", "first difference at byte %ld", diff);
    }

    /* ---- cancel ------------------------------------------------------------------------ */

    expect_status(hipFileBatchIOCancel(NULL), hipFileInvalidValue, "hipFileBatchIOCancel(NULL) -> hipFileInvalidValue");
    expect_status(hipFileBatchIOCancel(GARBAGE_BATCH), hipFileInvalidValue,
                  "hipFileBatchIOCancel of an unknown handle -> hipFileInvalidValue");
    expect_status(hipFileBatchIOCancel(h), hipFileSuccess, "hipFileBatchIOCancel with nothing outstanding");
    /* Four rounds, writes and reads in turn: a cancel meets entries in every state. The bytes
     * each entry would move show whether it ran: the file (writes) or the buffer (reads). */
    {
        make_file("batch-cancel.bin", BIG_SIZE, SIZE_MAX, SENTINEL);
        int             fd_c  = open_app("batch-cancel.bin", O_RDWR);
        hipFileHandle_t fh_c  = must_register(fd_c, "batch-cancel.bin");
        unsigned char  *after = (unsigned char *)malloc(BIG_SIZE);
        int             submitted = 1, canceled_ok = 1, still = 1, at_once = 1, each = 1;
        char            why[256]  = "";
        for (int round = 0; round < 4 && after != NULL; round++) {
            int writes = round % 2 == 0;
            memset(host, SENTINEL, BIG_SIZE);
            if (writes) {
                make_file("batch-cancel.bin", BIG_SIZE, SIZE_MAX, SENTINEL);
            }
            else {
                make_file("batch-cancel.bin", BIG_SIZE, 0, 0);
                to_device(dst, host, BIG_SIZE);
            }
            for (int i = 0; i < BIG; i++) {
                set_entry(&params[i], writes ? hipFileBatchWrite : hipFileBatchRead, fh_c, writes ? src : dst,
                          (int64_t)(i * CHUNK), (int64_t)(i * CHUNK), CHUNK, &cookies[i]);
            }
            submitted   = submitted && is_success(hipFileBatchIOSubmit(h, BIG, params, 0));
            canceled_ok = canceled_ok && is_success(hipFileBatchIOCancel(h));
            ssize_t got1, got2;
            if (writes) {
                got1 = read_back("batch-cancel.bin", 0, host, BIG_SIZE);
                sleep_ms(50);
                got2 = read_back("batch-cancel.bin", 0, after, BIG_SIZE);
            }
            else {
                to_host(host, dst, BIG_SIZE);
                sleep_ms(50);
                to_host(after, dst, BIG_SIZE);
                got1 = got2 = (ssize_t)BIG_SIZE;
            }
            if (got1 != (ssize_t)BIG_SIZE || got2 != got1 || memcmp(host, after, BIG_SIZE) != 0) {
                still = 0;
            }
            double start = now_ms();
            n            = reap(h, BIG, BIG, events, 5000, &e);
            double took  = now_ms() - start;
            if (n != BIG || took >= 1000) {
                at_once = 0;
                snprintf(why, sizeof why, "round %d: %ld events (err %d) after %.0f ms", round, n, (int)e.err, took);
            }
            long canceled = 0;
            for (long i = 0; i < n; i++) {
                long                 at    = cookie_index(events[i].cookie, cookies, BIG);
                const unsigned char *chunk = host + (size_t)(at < 0 ? 0 : at) * CHUNK;
                int                  good;
                if (at < 0) {
                    good = 0;
                }
                else if (events[i].status == hipFileCanceled) {
                    canceled++;
                    good = events[i].ret == 0 && first_not(chunk, SENTINEL, CHUNK) < 0;
                }
                else {
                    good = events[i].status == hipFileComplete && events[i].ret == CHUNK &&
                           first_difference(chunk, pattern + (size_t)at * CHUNK, CHUNK) < 0;
                }
                if (!good && each) {
                    each = 0;
                    snprintf(why, sizeof why, "round %d, event %ld (entry %ld): status %d ret %zu", round, i, at,
                             (int)events[i].status, events[i].ret);
                }
            }
            printf("# round %d: %ld of %d %s canceled\n", round, canceled, BIG, writes ? "writes" : "reads");
        }
        check(after != NULL && submitted && canceled_ok, "hipFileBatchIOCancel with 128 entries in flight (4 rounds)",
              "a submit or cancel failed");
        check(still, "after hipFileBatchIOCancel returns nothing runs: the bytes stay as they are",
              "they changed after the cancel returned");
        check(at_once, "after hipFileBatchIOCancel every entry is terminal: 128 reaped at once", "%s", why);
        check(each, "each entry is Complete (its bytes moved) or Canceled (ret 0, its range untouched)", "%s", why);
        free(after);
        hipFileHandleDeregister(fh_c);
        close(fd_c);
    }

    /* ---- destroy ------------------------------------------------------------------------ */

    hipFileBatchIODestroy(NULL);
    hipFileBatchIODestroy(GARBAGE_BATCH);
    set_entry(&params[0], hipFileBatchRead, fh, dst, 0, 0, CHUNK, &cookies[0]);
    e = hipFileBatchIOSubmit(h, 1, params, 0);
    n = reap(h, 1, 1, events, LONG_WAIT_MS, NULL);
    check(is_success(e) && n == 1 && events[0].status == hipFileComplete,
          "hipFileBatchIODestroy of NULL and of an unknown handle are ignored", "submit err %d, %ld events",
          (int)e.err, n);
    {
        hipFileBatchHandle_t doomed = NULL;
        expect_status(hipFileBatchIOSetUp(&doomed, BIG), hipFileSuccess, "hipFileBatchIOSetUp(128) to destroy");
        for (int i = 0; i < BIG; i++) {
            set_entry(&params[i], hipFileBatchRead, fh, rd, (int64_t)(i * CHUNK), (int64_t)(i * CHUNK), CHUNK,
                      &cookies[i]);
        }
        expect_status(hipFileBatchIOSubmit(doomed, BIG, params, 0), hipFileSuccess,
                      "hipFileBatchIOSubmit of 128 reads into a registered buffer");
        hipFileBatchIODestroy(doomed);
        unsigned nr = 4;
        expect_status(hipFileBatchIOGetStatus(doomed, 0, &nr, events, NULL), hipFileInvalidValue,
                      "destroyed with entries in flight: the handle is unknown to GetStatus");
        expect_status(hipFileBatchIOSubmit(doomed, 1, params, 0), hipFileInvalidValue,
                      "destroyed with entries in flight: the handle is unknown to Submit");
        expect_status(hipFileBufDeregister(rd), hipFileSuccess,
                      "after hipFileBatchIODestroy no entry holds the buffer: it deregisters");
    }

    /* ---- 3. closing the driver to zero destroys every batch ------------------------------ */

    {
        hipFileBatchHandle_t last = NULL;
        expect_status(hipFileBatchIOSetUp(&last, 8), hipFileSuccess, "hipFileBatchIOSetUp(8)");
        for (int i = 0; i < 8; i++) {
            set_entry(&params[i], hipFileBatchRead, fh, dst, (int64_t)(i * CHUNK), (int64_t)(i * CHUNK), CHUNK,
                      &cookies[i]);
        }
        expect_status(hipFileBatchIOSubmit(last, 8, params, 0), hipFileSuccess, "hipFileBatchIOSubmit of 8 reads");
        expect_status(hipFileDriverClose(), hipFileSuccess, "hipFileDriverClose (1 -> 0) with batches set up");
        check(hipFileUseCount() == 0, "the driver is closed", "use count %lld", (long long)hipFileUseCount());
        unsigned nr = 8;
        expect_status(hipFileBatchIOGetStatus(last, 0, &nr, events, NULL), hipFileInvalidValue,
                      "after the close, a batch with entries is gone: GetStatus -> hipFileInvalidValue");
        nr = 8;
        expect_status(hipFileBatchIOGetStatus(h, 0, &nr, events, NULL), hipFileInvalidValue,
                      "after the close, the batch set up while closed is gone too");
        expect_status(hipFileBatchIOCancel(last), hipFileInvalidValue,
                      "after the close, hipFileBatchIOCancel of it -> hipFileInvalidValue");
    }

    /* ---- 4. a handle deregistered under entries in flight leaks nothing ----------------- */

    /* The library's own descriptors of a file (buffered, O_DIRECT) close when the last entry on
     * its registration ends, whether the handle was deregistered before or after. */
    {
        int                  before = open_descriptors();
        hipFileBatchHandle_t late   = NULL;
        hipFileHandle_t      fh2    = NULL;
        hipFileDescr_t       descr;
        memset(&descr, 0, sizeof descr);
        descr.type      = hipFileHandleTypeOpaqueFD;
        descr.handle.fd = fd_data;
        expect_status(hipFileHandleRegister(&fh2, &descr), hipFileSuccess, "register the file again (driver 0 -> 1)");
        expect_status(hipFileBatchIOSetUp(&late, 16), hipFileSuccess, "hipFileBatchIOSetUp(16)");
        for (int i = 0; i < 16; i++) {
            set_entry(&params[i], hipFileBatchRead, fh2, dst, (int64_t)(i * CHUNK), (int64_t)(i * CHUNK), CHUNK,
                      &cookies[i]);
        }
        expect_status(hipFileBatchIOSubmit(late, 16, params, 0), hipFileSuccess, "hipFileBatchIOSubmit of 16 reads");
        hipFileHandleDeregister(fh2);
        hipFileBatchIODestroy(late);
        expect_status(hipFileDriverClose(), hipFileSuccess, "hipFileDriverClose (1 -> 0)");
        int after = open_descriptors();
        check(before >= 0 && after == before,
              "deregistered under entries in flight, destroyed, closed: no descriptor of the file is left",
              "%d descriptors before, %d after", before, after);
    }

    if (hipFree(src) != hipSuccess || hipFree(dst) != hipSuccess || hipFree(rd) != hipSuccess) {
        printf("# hipFree failed\n");
    }
    close(fd_data);
    free(pattern);
    free(host);

    return tap_finish();
}
