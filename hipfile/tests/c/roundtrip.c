/*
 * roundtrip.c - write a pattern from GPU memory to a file and read it back.
 *
 * Written the way a user of upstream hipFile writes a program: plain HIP
 * allocations and copies, the public hipfile.h API, nothing else.
 *
 * Usage: roundtrip SCRATCH_DIR
 * Prints one TAP-like line per check; exits 0 only if every check passed.
 *
 * With HIPFILE_ALLOW_COMPAT_MODE=false (and compat mode not forced) only the
 * direct path may serve IO: the aligned checks must still pass, and the
 * unaligned requests must fail with -hipFileInternalError, touching nothing.
 * Builds as C11 and as C++17.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT, pread */
#endif

#include <hipfile.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tap.h"

#define BUF_SIZE ((size_t)(1024 * 1024 + 4096))
#define SENTINEL 0xA5

static void
check_status(hipFileError_t status, const char *name)
{
    check(status.err == hipFileSuccess, name, "err %d (%s), hip_drv_err %d", (int)status.err,
          HIPFILE_ERRSTR(status.err), (int)status.hip_drv_err);
}

static void
check_hip(hipError_t status, const char *name)
{
    check(status == hipSuccess, name, "hipError_t %d", (int)status);
}

/* An upstream-style switch: set only when the variable is "true" or "false", in any case. */
static int
env_switch_is(const char *name, const char *value)
{
    const char *v = getenv(name);
    return v != NULL && strcasecmp(v, value) == 0;
}

/* Whether a request the direct path declines must fail rather than be staged. */
static int
compat_disallowed(void)
{
    return env_switch_is("HIPFILE_ALLOW_COMPAT_MODE", "false") &&
           !env_switch_is("HIPFILE_FORCE_COMPAT_MODE", "true");
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

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        return 2;
    }

    char path[4096];
    snprintf(path, sizeof path, "%s/roundtrip.bin", argv[1]);

    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC | O_DIRECT, 0644);
    if (fd < 0 && errno == EINVAL) {
        /* The filesystem refuses O_DIRECT (tmpfs, for example). */
        fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    }
    check(fd >= 0, "open scratch file", "%s: %s", path, strerror(errno));
    if (fd < 0) {
        return 1;
    }

    hipFileError_t status = hipFileDriverOpen();
    check_status(status, "hipFileDriverOpen");

    hipFileDescr_t descr;
    memset(&descr, 0, sizeof descr);
    descr.type      = hipFileHandleTypeOpaqueFD;
    descr.handle.fd = fd;
    /* Real programs leave fs_ops uninitialised; a garbage value proves it is never read. */
    descr.fs_ops = (const hipFileFSOps_t *)(uintptr_t)0xdeadbeefUL;

    hipFileHandle_t fh = NULL;
    status             = hipFileHandleRegister(&fh, &descr);
    check_status(status, "hipFileHandleRegister");

    void *src = NULL;
    void *dst = NULL;
    check_hip(hipMalloc(&src, BUF_SIZE), "hipMalloc source buffer");
    check_hip(hipMalloc(&dst, BUF_SIZE), "hipMalloc destination buffer");

    unsigned char *expected = (unsigned char *)malloc(BUF_SIZE);
    unsigned char *actual   = (unsigned char *)malloc(BUF_SIZE);
    unsigned char *sentinel = (unsigned char *)malloc(BUF_SIZE);
    if (expected == NULL || actual == NULL || sentinel == NULL || src == NULL || dst == NULL) {
        printf("not ok - allocations (out of memory)\n");
        return 1;
    }
    for (size_t i = 0; i < BUF_SIZE; i++) {
        expected[i] = pattern_byte(i);
    }
    memset(sentinel, SENTINEL, BUF_SIZE);
    check_hip(hipMemcpy(src, expected, BUF_SIZE, hipMemcpyHostToDevice), "hipMemcpy pattern to device");
    check_hip(hipMemcpy(dst, sentinel, BUF_SIZE, hipMemcpyHostToDevice), "hipMemcpy sentinel to device");

    status = hipFileBufRegister(src, BUF_SIZE, 0);
    check_status(status, "hipFileBufRegister source");

    /* Whole buffer, aligned: registered source, unregistered destination. */
    ssize_t written = hipFileWrite(fh, src, BUF_SIZE, 0, 0);
    check(written == (ssize_t)BUF_SIZE, "hipFileWrite whole buffer", "returned %zd, errno %d", written, errno);

    ssize_t nread = hipFileRead(fh, dst, BUF_SIZE, 0, 0);
    check(nread == (ssize_t)BUF_SIZE, "hipFileRead whole buffer (unregistered destination)",
          "returned %zd, errno %d", nread, errno);

    check_hip(hipMemcpy(actual, dst, BUF_SIZE, hipMemcpyDeviceToHost), "hipMemcpy result to host");
    long diff = first_difference(actual, expected, BUF_SIZE);
    check(diff < 0, "whole buffer read back byte-exactly", "first difference at byte %ld", diff);

    /* Unaligned file offset, buffer offset and size: only the target range may change. */
    const size_t  un_size  = 100003;
    const hoff_t  un_foff  = 12345;
    const hoff_t  un_boff  = 777;
    check_hip(hipMemcpy(dst, sentinel, BUF_SIZE, hipMemcpyHostToDevice), "hipMemcpy sentinel to device again");
    nread = hipFileRead(fh, dst, un_size, un_foff, un_boff);
    check_hip(hipMemcpy(actual, dst, BUF_SIZE, hipMemcpyDeviceToHost), "hipMemcpy unaligned result to host");
    if (compat_disallowed()) {
        check(nread == -(ssize_t)hipFileInternalError,
              "hipFileRead unaligned with compat mode disallowed -> -hipFileInternalError", "returned %zd",
              nread);
        diff = first_not(actual + un_boff, SENTINEL, un_size);
        check(diff < 0, "refused unaligned read leaves the range alone", "byte %ld changed", diff);
    } else {
        check(nread == (ssize_t)un_size, "hipFileRead unaligned offset and size", "returned %zd, errno %d",
              nread, errno);
        diff = first_difference(actual + un_boff, expected + un_foff, un_size);
        check(diff < 0, "unaligned read lands byte-exactly", "first difference at byte %ld of the range", diff);
    }
    diff = first_not(actual, SENTINEL, (size_t)un_boff);
    check(diff < 0, "unaligned read leaves bytes before the range alone", "byte %ld changed", diff);
    size_t tail = (size_t)un_boff + un_size;
    diff        = first_not(actual + tail, SENTINEL, BUF_SIZE - tail);
    check(diff < 0, "unaligned read leaves bytes after the range alone", "byte %ld after the range changed",
          diff);

    /* Unaligned write from the registered buffer, checked through the plain fd. */
    const size_t uw_size = 5000;
    const hoff_t uw_foff = 3 * 4096 + 1;
    const hoff_t uw_boff = 333;
    written              = hipFileWrite(fh, src, uw_size, uw_foff, uw_boff);
    int plain_fd         = open(path, O_RDONLY);
    memset(actual, 0, uw_size);
    ssize_t got = plain_fd >= 0 ? pread(plain_fd, actual, uw_size, uw_foff) : -1;
    if (compat_disallowed()) {
        check(written == -(ssize_t)hipFileInternalError,
              "hipFileWrite unaligned with compat mode disallowed -> -hipFileInternalError", "returned %zd",
              written);
        /* The file still holds the whole-buffer write. */
        check(got == (ssize_t)uw_size && first_difference(actual, expected + uw_foff, uw_size) < 0,
              "refused unaligned write leaves the file alone", "pread returned %zd", got);
    } else {
        check(written == (ssize_t)uw_size, "hipFileWrite unaligned offset and size", "returned %zd, errno %d",
              written, errno);
        check(got == (ssize_t)uw_size && first_difference(actual, expected + uw_boff, uw_size) < 0,
              "unaligned write lands byte-exactly in the file", "pread returned %zd", got);
    }
    if (plain_fd >= 0) {
        close(plain_fd);
    }

    status = hipFileBufDeregister(src);
    check_status(status, "hipFileBufDeregister source");
    hipFileHandleDeregister(fh);

    check_hip(hipFree(src), "hipFree source");
    check_hip(hipFree(dst), "hipFree destination");

    status = hipFileDriverClose();
    check_status(status, "hipFileDriverClose");
    int64_t use_count = hipFileUseCount();
    check(use_count == 0, "hipFileUseCount is 0 after close", "use count %lld", (long long)use_count);

    close(fd);
    unlink(path);
    free(expected);
    free(actual);
    free(sentinel);

    return tap_finish();
}
