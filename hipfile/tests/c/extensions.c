/*
 * extensions.c - the hipfile-rs extensions of hipfile.h (not in upstream
 * hipFile): the IO policy of a file handle and the allowed direct (P2P)
 * mechanisms, with the code each bad argument gets.
 *
 * Usage: extensions SCRATCH_DIR
 * Prints one TAP-like line per check; exits 0 only if every check passed.
 * Builds as C11 and as C++17.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <hipfile.h>

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "tap.h"

#ifndef HIPFILE_RS_EXTENSIONS
#error "hipfile.h declares no hipfile-rs extensions"
#endif

#define SIZE ((size_t)(64 * 1024))

static void
expect_status(hipFileError_t got, hipFileOpError_t want, const char *name)
{
    check(got.err == want, name, "got err %d (%s), want %d (%s)", (int)got.err, HIPFILE_ERRSTR(got.err), (int)want,
          HIPFILE_ERRSTR(want));
}

/* Whether a request the direct path declines must fail rather than be staged
 * (HIPFILE_ALLOW_COMPAT_MODE=false without HIPFILE_FORCE_COMPAT_MODE=true): the
 * fallback policy then has nothing to fall back to. */
static int
compat_disallowed(void)
{
    const char *allow = getenv("HIPFILE_ALLOW_COMPAT_MODE");
    const char *force = getenv("HIPFILE_FORCE_COMPAT_MODE");
    return allow != NULL && strcasecmp(allow, "false") == 0 && !(force != NULL && strcasecmp(force, "true") == 0);
}

/* No byte of the first `n` of device memory `dev` changed from 0. */
static int
device_untouched(const void *dev, size_t n)
{
    unsigned char head[1000];
    if (n > sizeof head || hipMemcpy(head, dev, n, hipMemcpyDeviceToHost) != hipSuccess)
        setup_failed("hipMemcpy");
    int untouched = 1;
    for (size_t i = 0; i < n; i++)
        untouched &= head[i] == 0;
    return untouched;
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    char path[4096];
    snprintf(path, sizeof path, "%s/extensions.dat", argv[1]);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0600);
    if (fd < 0)
        setup_failed("open scratch file");
    static char bytes[SIZE];
    memset(bytes, 7, sizeof bytes);
    if (pwrite(fd, bytes, sizeof bytes, 0) != (ssize_t)sizeof bytes)
        setup_failed("fill scratch file");
    void *dev = NULL;
    if (hipMalloc(&dev, SIZE) != hipSuccess)
        setup_failed("hipMalloc");
    if (hipMemset(dev, 0, SIZE) != hipSuccess)
        setup_failed("hipMemset");

    unsigned mechanisms = 0;
    expect_status(hipFileDriverGetP2PMechanisms(&mechanisms), hipFileSuccess, "mechanisms read while closed");
    check(mechanisms == hipFileP2PMechanismAll, "every mechanism is allowed at first", "got %#x", mechanisms);
    expect_status(hipFileDriverGetP2PMechanisms(NULL), hipFileInvalidValue, "NULL mechanisms pointer");
    expect_status(hipFileDriverSetP2PMechanisms(0x8u), hipFileInvalidValue, "an unknown mechanism bit");
    expect_status(hipFileHandleSetIoPolicy((hipFileHandle_t)(uintptr_t)999, hipFileIoPolicyDirectOnly),
                  hipFileDriverNotInitialized, "a policy set while the driver is closed");

    hipFileDescr_t descr;
    memset(&descr, 0, sizeof descr);
    descr.type = hipFileHandleTypeOpaqueFD;
    descr.handle.fd = fd;
    hipFileHandle_t fh = NULL;
    expect_status(hipFileHandleRegister(&fh, &descr), hipFileSuccess, "register the file");

    hipFileIoPolicy_t policy = hipFileIoPolicyDirectOnly;
    expect_status(hipFileHandleGetIoPolicy(fh, &policy), hipFileSuccess, "read the policy");
    check(policy == hipFileIoPolicyFallback, "a handle falls back by default", "got %d", (int)policy);
    expect_status(hipFileHandleGetIoPolicy(NULL, &policy), hipFileInvalidValue, "get: NULL handle");
    expect_status(hipFileHandleGetIoPolicy(fh, NULL), hipFileInvalidValue, "get: NULL policy pointer");
    expect_status(hipFileHandleSetIoPolicy(NULL, hipFileIoPolicyDirectOnly), hipFileInvalidValue, "set: NULL handle");
    expect_status(hipFileHandleSetIoPolicy(fh, (hipFileIoPolicy_t)7), hipFileInvalidValue, "set: unknown policy");
    expect_status(hipFileHandleSetIoPolicy((hipFileHandle_t)(uintptr_t)999, hipFileIoPolicyDirectOnly),
                  hipFileHandleNotRegistered, "set: unknown handle");

    expect_status(hipFileHandleSetIoPolicy(fh, hipFileIoPolicyDirectOnly), hipFileSuccess, "direct only");
    ssize_t got = hipFileRead(fh, dev, 1000, 1, 0);
    check(got == -(ssize_t)hipFileIONotSupported, "a direct-only unaligned read fails closed", "returned %zd", got);
    check(device_untouched(dev, 1000), "the refused read moved nothing", "device memory changed");

    expect_status(hipFileHandleSetIoPolicy(fh, hipFileIoPolicyFallback), hipFileSuccess, "fall back");
    got = hipFileRead(fh, dev, 1000, 1, 0);
    if (compat_disallowed()) {
        /* The staged path is switched off for the whole process: the library's own refusal. */
        check(got == -(ssize_t)hipFileInternalError,
              "the same read, compat mode disallowed, has no staged path -> -hipFileInternalError", "returned %zd",
              got);
        check(device_untouched(dev, 1000), "the read with no path moved nothing", "device memory changed");
    } else {
        check(got == 1000, "the same read falls back to the staged path", "returned %zd", got);
    }

    expect_status(hipFileDriverSetP2PMechanisms(hipFileP2PMechanismNvidiaFs), hipFileSuccess, "allow nvidia-fs only");
    expect_status(hipFileDriverGetP2PMechanisms(&mechanisms), hipFileSuccess, "mechanisms read back");
    check(mechanisms == hipFileP2PMechanismNvidiaFs, "the mechanisms set are read back", "got %#x", mechanisms);
    expect_status(hipFileDriverSetP2PMechanisms(hipFileP2PMechanismAll), hipFileSuccess, "allow every mechanism");

    hipFileHandleDeregister(fh);
    expect_status(hipFileHandleGetIoPolicy(fh, &policy), hipFileHandleNotRegistered, "get: deregistered handle");
    expect_status(hipFileDriverClose(), hipFileSuccess, "close the driver");
    if (hipFree(dev) != hipSuccess)
        setup_failed("hipFree");
    close(fd);
    return tap_finish();
}
