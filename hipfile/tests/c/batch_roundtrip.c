/*
 * batch_roundtrip.c - upstream hipFile's batch round trip, as a test: a file
 * of 1 MiB + 1 byte read into GPU memory by one batch of 4 reads (the last one
 * short), compared byte for byte on the host, then written to a new file by a
 * batch of 4 writes and compared again.
 *
 * Usage: batch_roundtrip SCRATCH_DIR
 * Prints one TAP-like line per check; exits 0 only if every check passed.
 *
 * Entries are reaped the way cuFile programs do: GetStatus(min_nr 1) until as
 * many events came back as entries went in. Every offset and size is 4 KiB
 * aligned except the last write, which ends the file at its odd size: with
 * HIPFILE_ALLOW_COMPAT_MODE=false (and compat mode not forced) only the direct
 * path may serve, which refuses it: that entry must fail with
 * -hipFileInternalError while the other three complete.
 * Builds as C11 and as C++17.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT */
#endif

#include <hipfile.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tap.h"

#define FILE_SIZE ((size_t)(1024 * 1024 + 1))
#define ENTRIES 4
/* 288 KiB: three entries cover 864 KiB, the fourth the remaining 160 KiB + 1 byte. */
#define ENTRY_SIZE ((size_t)(288 * 1024))
#define BUF_SIZE ((size_t)ENTRIES * ENTRY_SIZE)

static void
check_status(hipFileError_t status, const char *name)
{
    check(status.err == hipFileSuccess && status.hip_drv_err == hipSuccess, name, "err %d (%s), hip_drv_err %d",
          (int)status.err, HIPFILE_ERRSTR(status.err), (int)status.hip_drv_err);
}

/* Whether a request the direct path declines must fail rather than be staged. */
static int
compat_disallowed(void)
{
    const char *allow = getenv("HIPFILE_ALLOW_COMPAT_MODE");
    const char *force = getenv("HIPFILE_FORCE_COMPAT_MODE");
    return allow != NULL && strcasecmp(allow, "false") == 0 && !(force != NULL && strcasecmp(force, "true") == 0);
}

/* A pattern that does not repeat with any power-of-two period up to 1 MiB. */
static unsigned char
pattern_byte(size_t i)
{
    return (unsigned char)((i * 131u) ^ (i >> 9) ^ (i >> 17));
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

static int
open_direct(const char *path, int flags)
{
    int fd = open(path, flags | O_DIRECT, 0644);
    if (fd < 0 && errno == EINVAL) {
        /* The filesystem refuses O_DIRECT (tmpfs, for example). */
        fd = open(path, flags, 0644);
    }
    if (fd < 0) {
        printf("not ok - open %s (%s)\n", path, strerror(errno));
        exit(1);
    }
    return fd;
}

static hipFileHandle_t
register_fd(int fd, const char *name)
{
    hipFileDescr_t descr;
    memset(&descr, 0, sizeof descr);
    descr.type         = hipFileHandleTypeOpaqueFD;
    descr.handle.fd    = fd;
    hipFileHandle_t fh = NULL;
    check_status(hipFileHandleRegister(&fh, &descr), name);
    return fh;
}

/* Submit `nr` entries and reap them with GetStatus(min_nr 1, timeout NULL) until as many events
 * came back; events land at the index their cookie names. Returns the count reaped. */
static unsigned
run_batch(hipFileBatchHandle_t batch, hipFileIOParams_t *params, unsigned nr, hipFileIOEvents_t *by_entry,
          const char *what)
{
    char name[256];
    snprintf(name, sizeof name, "hipFileBatchIOSubmit of the %u %s", nr, what);
    check_status(hipFileBatchIOSubmit(batch, nr, params, 0), name);
    unsigned done  = 0;
    int      stray = 0;
    while (done < nr) {
        hipFileIOEvents_t events[ENTRIES];
        unsigned          got    = nr - done;
        hipFileError_t    status = hipFileBatchIOGetStatus(batch, 1, &got, events, NULL);
        if (status.err != hipFileSuccess || got == 0) {
            snprintf(name, sizeof name, "GetStatus(min_nr 1) while %u %s are outstanding", nr - done, what);
            check(0, name, "err %d, %u events", (int)status.err, got);
            break;
        }
        for (unsigned i = 0; i < got; i++) {
            uintptr_t at = (uintptr_t)events[i].cookie;
            if (at < 1 || at > nr) {
                stray = 1;
                continue;
            }
            by_entry[at - 1] = events[i];
        }
        done += got;
    }
    snprintf(name, sizeof name, "GetStatus reaps the %u %s, each once, by its cookie", nr, what);
    check(done == nr && !stray, name, "%u reaped, a stray cookie: %s", done, stray ? "yes" : "no");
    return done;
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    char in_path[4096], out_path[4096];
    snprintf(in_path, sizeof in_path, "%s/batch-roundtrip-in.bin", argv[1]);
    snprintf(out_path, sizeof out_path, "%s/batch-roundtrip-out.bin", argv[1]);

    unsigned char *expected = (unsigned char *)malloc(BUF_SIZE);
    unsigned char *actual   = (unsigned char *)malloc(BUF_SIZE);
    if (expected == NULL || actual == NULL) {
        printf("not ok - host allocations\n");
        return 1;
    }
    for (size_t i = 0; i < BUF_SIZE; i++) {
        expected[i] = pattern_byte(i);
    }
    {
        int plain = open(in_path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        check(plain >= 0 && write(plain, expected, FILE_SIZE) == (ssize_t)FILE_SIZE,
              "write the 1 MiB + 1 byte input file", "%s", strerror(errno));
        if (plain >= 0) {
            close(plain);
        }
    }

    check_status(hipFileDriverOpen(), "hipFileDriverOpen");
    int             in_fd  = open_direct(in_path, O_RDONLY);
    int             out_fd = open_direct(out_path, O_CREAT | O_RDWR | O_TRUNC);
    hipFileHandle_t in_fh  = register_fd(in_fd, "hipFileHandleRegister input file");
    hipFileHandle_t out_fh = register_fd(out_fd, "hipFileHandleRegister output file");

    void *gpu = NULL;
    check(hipMalloc(&gpu, BUF_SIZE) == hipSuccess && gpu != NULL, "hipMalloc 1152 KiB", "failed");
    if (gpu == NULL) {
        return 1;
    }
    memset(actual, 0xA5, BUF_SIZE);
    check(hipMemcpy(gpu, actual, BUF_SIZE, hipMemcpyHostToDevice) == hipSuccess, "hipMemcpy sentinel to device",
          "failed");
    check_status(hipFileBufRegister(gpu, BUF_SIZE, 0), "hipFileBufRegister");

    hipFileBatchHandle_t batch = NULL;
    check_status(hipFileBatchIOSetUp(&batch, ENTRIES), "hipFileBatchIOSetUp(4)");

    /* ---- read the file through one batch ---------------------------------- */

    hipFileIOParams_t params[ENTRIES];
    hipFileIOEvents_t by_entry[ENTRIES];
    memset(params, 0, sizeof params);
    memset(by_entry, 0, sizeof by_entry);
    for (unsigned i = 0; i < ENTRIES; i++) {
        params[i].mode                  = hipFileBatch;
        params[i].opcode                = hipFileBatchRead;
        params[i].fh                    = in_fh;
        params[i].cookie                = (void *)(uintptr_t)(i + 1);
        params[i].u.batch.devPtr_base   = gpu;
        params[i].u.batch.file_offset   = (int64_t)(i * ENTRY_SIZE);
        params[i].u.batch.devPtr_offset = (int64_t)(i * ENTRY_SIZE);
        params[i].u.batch.size          = ENTRY_SIZE;
    }
    run_batch(batch, params, ENTRIES, by_entry, "reads");
    for (unsigned i = 0; i < ENTRIES; i++) {
        size_t want = i + 1 < ENTRIES ? ENTRY_SIZE : FILE_SIZE - (ENTRIES - 1) * ENTRY_SIZE;
        char   name[128];
        snprintf(name, sizeof name, "read %u: Complete, ret %zu%s", i, want, i + 1 < ENTRIES ? "" : " (short)");
        check(by_entry[i].status == hipFileComplete && by_entry[i].ret == want, name, "status %d ret %zu",
              (int)by_entry[i].status, by_entry[i].ret);
    }
    check(hipMemcpy(actual, gpu, BUF_SIZE, hipMemcpyDeviceToHost) == hipSuccess, "hipMemcpy result to host",
          "failed");
    long diff = first_difference(actual, expected, FILE_SIZE);
    check(diff < 0, "every byte of the file arrived in GPU memory", "first difference at byte %ld", diff);

    /* ---- write it to a new file through another submission ------------------ */

    for (unsigned i = 0; i < ENTRIES; i++) {
        params[i].opcode       = hipFileBatchWrite;
        params[i].fh           = out_fh;
        params[i].u.batch.size = i + 1 < ENTRIES ? ENTRY_SIZE : FILE_SIZE - (ENTRIES - 1) * ENTRY_SIZE;
    }
    memset(by_entry, 0, sizeof by_entry);
    run_batch(batch, params, ENTRIES, by_entry, "writes");
    int    refused = compat_disallowed();
    size_t landed  = refused ? (ENTRIES - 1) * ENTRY_SIZE : FILE_SIZE;
    for (unsigned i = 0; i < ENTRIES; i++) {
        char name[160];
        if (refused && i + 1 == ENTRIES) {
            snprintf(name, sizeof name, "write %u (odd size), compat mode disallowed: Failed, -hipFileInternalError",
                     i);
            check(by_entry[i].status == hipFileFailed && by_entry[i].ret == (size_t)(-(ssize_t)hipFileInternalError),
                  name, "status %d ret %lld", (int)by_entry[i].status, (long long)(ssize_t)by_entry[i].ret);
            continue;
        }
        snprintf(name, sizeof name, "write %u: Complete, ret %zu", i, (size_t)params[i].u.batch.size);
        check(by_entry[i].status == hipFileComplete && by_entry[i].ret == params[i].u.batch.size, name,
              "status %d ret %zu", (int)by_entry[i].status, by_entry[i].ret);
    }
    {
        struct stat st;
        int         sized = stat(out_path, &st) == 0 && st.st_size == (off_t)landed;
        check(sized, refused ? "the output file holds the three aligned writes" : "the output file is 1 MiB + 1 byte",
              "size %lld, want %zu", (long long)st.st_size, landed);
        int     plain = open(out_path, O_RDONLY);
        ssize_t got   = plain >= 0 ? pread(plain, actual, landed, 0) : -1;
        diff          = got == (ssize_t)landed ? first_difference(actual, expected, landed) : 0;
        check(got == (ssize_t)landed && diff < 0, "every byte written matches the input file",
              "read %zd bytes, first difference at byte %ld", got, diff);
        if (plain >= 0) {
            close(plain);
        }
    }

    hipFileBatchIODestroy(batch);
    check_status(hipFileBufDeregister(gpu), "hipFileBufDeregister");
    hipFileHandleDeregister(in_fh);
    hipFileHandleDeregister(out_fh);
    check(hipFree(gpu) == hipSuccess, "hipFree", "failed");
    check_status(hipFileDriverClose(), "hipFileDriverClose");
    check(hipFileUseCount() == 0, "hipFileUseCount is 0 after close", "use count %lld", (long long)hipFileUseCount());
    close(in_fd);
    close(out_fd);
    unlink(in_path);
    unlink(out_path);
    free(expected);
    free(actual);

    return tap_finish();
}
