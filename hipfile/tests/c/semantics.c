/*
 * semantics.c - the driver, registration and IO semantics of upstream
 * hipFile, one check each, written as a user of upstream hipFile would.
 *
 * Usage: semantics SCRATCH_DIR
 * Prints one TAP-like line per check; exits 0 only if every check passed.
 * Builds as C11 and as C++17.
 *
 * The checks run in order and depend on the driver's reference count:
 *   1. driver closed (count 0): closing, handle registration, IO and buffer
 *      deregistration while closed;
 *   2. driver implicitly opened by a failed buffer registration (count 1):
 *      duplicates, memory kinds, ranges, handle types, IO argument checks,
 *      properties, parameters, batch and stream entry points;
 *   3. close to zero: registrations are gone and can be made again.
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
#include <unistd.h>

#include "tap.h"

#define DEV_SIZE ((size_t)(256 * 1024))
#define FILE_SIZE ((size_t)(64 * 1024))

/* The call returned exactly `want` (and hipSuccess as the HIP half). */
static void
expect_status(hipFileError_t got, hipFileOpError_t want, const char *name)
{
    check(got.err == want && got.hip_drv_err == hipSuccess, name, "got err %d (%s) hip_drv_err %d, want %d (%s)",
          (int)got.err, HIPFILE_ERRSTR(got.err), (int)got.hip_drv_err, (int)want, HIPFILE_ERRSTR(want));
}

static void
expect_use_count(int64_t want, const char *name)
{
    int64_t got = hipFileUseCount();
    check(got == want, name, "hipFileUseCount() = %lld, want %lld", (long long)got, (long long)want);
}

/* An IO call returned -1 and set errno to EINVAL. */
static void
expect_einval(ssize_t got, int err, const char *name)
{
    check(got == -1 && err == EINVAL, name, "returned %zd, errno %d (%s)", got, err, strerror(err));
}

/* Whether a request the direct path declines must fail rather than be staged
 * (HIPFILE_ALLOW_COMPAT_MODE=false without HIPFILE_FORCE_COMPAT_MODE=true). */
static int
compat_disallowed(void)
{
    const char *allow = getenv("HIPFILE_ALLOW_COMPAT_MODE");
    const char *force = getenv("HIPFILE_FORCE_COMPAT_MODE");
    return allow != NULL && strcasecmp(allow, "false") == 0 && !(force != NULL && strcasecmp(force, "true") == 0);
}

/* An IO call returned the negated library code `want`. */
static void
expect_negated(ssize_t got, hipFileOpError_t want, const char *name)
{
    check(got == -(ssize_t)want, name, "returned %zd, want -%d (%s)", got, (int)want, HIPFILE_ERRSTR(want));
}

static int
open_scratch_file(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC | O_DIRECT, 0644);
    if (fd < 0 && errno == EINVAL) {
        fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    }
    if (fd < 0) {
        printf("not ok - open %s (%s)\n", path, strerror(errno));
        exit(1);
    }
    /* Give reads something to find. */
    if (ftruncate(fd, (off_t)FILE_SIZE) != 0) {
        printf("not ok - ftruncate %s (%s)\n", path, strerror(errno));
        exit(1);
    }
    return fd;
}

static void
remove_scratch_file(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    unlink(path);
}

static hipFileError_t
register_fd(hipFileHandle_t *fh, int fd, hipFileFileHandleType_t type)
{
    hipFileDescr_t descr;
    memset(&descr, 0, sizeof descr);
    descr.type      = type;
    descr.handle.fd = fd;
    return hipFileHandleRegister(fh, &descr);
}

static void *
device_alloc(size_t size, const char *what)
{
    void      *ptr    = NULL;
    hipError_t status = hipMalloc(&ptr, size);
    if (status != hipSuccess || ptr == NULL) {
        printf("not ok - hipMalloc %s (hipError_t %d)\n", what, (int)status);
        exit(1);
    }
    return ptr;
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];

    int fd_a = open_scratch_file(dir, "semantics-a.bin");
    int fd_b = open_scratch_file(dir, "semantics-b.bin");

    void *dev       = device_alloc(DEV_SIZE, "main buffer");
    void *dev_other = device_alloc(DEV_SIZE, "unregistered buffer");
    void *dev_small = device_alloc(64 * 1024, "partly registered buffer");

    hipFileHandle_t fh = NULL;
    hipFileError_t  status;
    ssize_t         io;

    /* ---- 1. driver closed ---------------------------------------------- */

    expect_use_count(0, "driver starts closed");
    expect_status(hipFileSetParameterSizeT(hipFileParamProfileStats, 1), hipFileSuccess,
                  "hipFileSetParameterSizeT(hipFileParamProfileStats) while closed");
    {
        hipFileStatsLevel1_t l1;
        expect_status(hipFileGetStatsL1(&l1), hipFileDriverNotInitialized,
                      "hipFileGetStatsL1 with the driver closed -> hipFileDriverNotInitialized");
    }
    expect_status(hipFileDriverClose(), hipFileDriverNotInitialized,
                  "hipFileDriverClose on a closed driver -> hipFileDriverNotInitialized");

    status = register_fd(&fh, -1, hipFileHandleTypeOpaqueFD);
    check(status.err != hipFileSuccess, "hipFileHandleRegister with fd -1 fails", "returned success");
    expect_use_count(0, "failed hipFileHandleRegister leaves the driver closed");

    status = register_fd(&fh, fd_a, hipFileHandleTypeOpaqueFD);
    expect_status(status, hipFileSuccess, "hipFileHandleRegister with a good fd");
    expect_use_count(1, "hipFileHandleRegister opens the driver (0 -> 1)");

    hipFileHandleDeregister(fh);
    expect_status(hipFileDriverClose(), hipFileSuccess, "hipFileDriverClose (1 -> 0)");
    hipFileHandle_t stale_fh = fh;

    errno = 0;
    io    = hipFileRead(stale_fh, dev, 4096, 0, 0);
    expect_einval(io, errno, "hipFileRead with the driver closed -> -1/EINVAL");
    errno = 0;
    io    = hipFileWrite(stale_fh, dev, 4096, 0, 0);
    expect_einval(io, errno, "hipFileWrite with the driver closed -> -1/EINVAL");
    expect_use_count(0, "IO with the driver closed does not open it");

    expect_status(hipFileBufDeregister(dev), hipFileDriverClosing,
                  "hipFileBufDeregister with the driver closed -> hipFileDriverClosing");

    void *host = malloc(4096);
    expect_status(hipFileBufRegister(host, 4096, 0), hipFileHipMemoryTypeInvalid,
                  "hipFileBufRegister of malloc memory -> hipFileHipMemoryTypeInvalid");
    expect_use_count(1, "hipFileBufRegister opens the driver even when it fails");

    /* ---- 2. driver open (count 1) --------------------------------------- */

    status = register_fd(&fh, fd_a, hipFileHandleTypeOpaqueFD);
    expect_status(status, hipFileSuccess, "hipFileHandleRegister while open");
    hipFileHandle_t dup_fh = NULL;
    expect_status(register_fd(&dup_fh, fd_a, hipFileHandleTypeOpaqueFD), hipFileHandleAlreadyRegistered,
                  "registering the same fd twice -> hipFileHandleAlreadyRegistered");
    expect_use_count(1, "registrations on an open driver keep the count");

    expect_status(hipFileBufRegister(dev, DEV_SIZE, 0), hipFileSuccess, "hipFileBufRegister device memory");
    expect_status(hipFileBufRegister(dev, DEV_SIZE, 0), hipFileMemoryAlreadyRegistered,
                  "registering the same buffer twice -> hipFileMemoryAlreadyRegistered");

    void *pinned = NULL;
    if (hipHostMalloc(&pinned, 4096, 0) == hipSuccess && pinned != NULL) {
        expect_status(hipFileBufRegister(pinned, 4096, 0), hipFileHipMemoryTypeInvalid,
                      "hipFileBufRegister of hipHostMalloc memory -> hipFileHipMemoryTypeInvalid");
        if (hipHostFree(pinned) != hipSuccess) {
            printf("# hipHostFree failed\n");
        }
    }
    else {
        check(0, "hipFileBufRegister of hipHostMalloc memory -> hipFileHipMemoryTypeInvalid",
              "hipHostMalloc failed");
    }

    void *managed = NULL;
    if (hipMallocManaged(&managed, 4096, hipMemAttachGlobal) == hipSuccess && managed != NULL) {
        expect_status(hipFileBufRegister(managed, 4096, 0), hipFileHipMemoryTypeInvalid,
                      "hipFileBufRegister of hipMallocManaged memory -> hipFileHipMemoryTypeInvalid");
        if (hipFree(managed) != hipSuccess) {
            printf("# hipFree(managed) failed\n");
        }
    }
    else {
        check(0, "hipFileBufRegister of hipMallocManaged memory -> hipFileHipMemoryTypeInvalid",
              "hipMallocManaged failed");
    }

    expect_status(hipFileBufRegister(dev_other, DEV_SIZE + 1, 0), hipFileHipPointerRangeError,
                  "hipFileBufRegister past the allocation -> hipFileHipPointerRangeError");
    expect_status(hipFileBufDeregister(dev_other), hipFileMemoryNotRegistered,
                  "hipFileBufDeregister of an unknown buffer -> hipFileMemoryNotRegistered");

    hipFileHandle_t other_fh = NULL;
    expect_status(register_fd(&other_fh, fd_b, hipFileHandleTypeOpaqueWin32), hipFileIONotSupported,
                  "hipFileHandleTypeOpaqueWin32 -> hipFileIONotSupported");
    expect_status(register_fd(&other_fh, fd_b, hipFileHandleTypeUserspaceFS), hipFileIONotSupported,
                  "hipFileHandleTypeUserspaceFS -> hipFileIONotSupported");

    /* An unregistered handle: one that was registered, then deregistered. */
    status = register_fd(&other_fh, fd_b, hipFileHandleTypeOpaqueFD);
    expect_status(status, hipFileSuccess, "hipFileHandleRegister second file");
    hipFileHandleDeregister(other_fh);
    expect_negated(hipFileRead(other_fh, dev, 4096, 0, 0), hipFileHandleNotRegistered,
                   "hipFileRead on a deregistered handle -> -hipFileHandleNotRegistered");
    expect_negated(hipFileWrite(other_fh, dev, 4096, 0, 0), hipFileHandleNotRegistered,
                   "hipFileWrite on a deregistered handle -> -hipFileHandleNotRegistered");

    errno = 0;
    io    = hipFileRead(fh, dev, 4096, -4096, 0);
    expect_einval(io, errno, "hipFileRead with a negative file offset -> -1/EINVAL");
    errno = 0;
    io    = hipFileRead(fh, dev, 4096, 0, -1);
    expect_einval(io, errno, "hipFileRead with a negative buffer offset -> -1/EINVAL");
    errno = 0;
    io    = hipFileWrite(fh, dev, 4096, -4096, 0);
    expect_einval(io, errno, "hipFileWrite with a negative file offset -> -1/EINVAL");

    /* Registered length (32 KiB) is smaller than the allocation (64 KiB). */
    expect_status(hipFileBufRegister(dev_small, 32 * 1024, 0), hipFileSuccess,
                  "hipFileBufRegister part of an allocation");
    expect_negated(hipFileRead(fh, dev_small, 36 * 1024, 0, 0), hipFileInvalidValue,
                   "hipFileRead past the registered length -> -hipFileInvalidValue");
    expect_negated(hipFileRead(fh, dev_small, 4096, 0, 30 * 1024), hipFileInvalidValue,
                   "hipFileRead with buffer offset + size past the registered length -> -hipFileInvalidValue");
    expect_status(hipFileBufDeregister(dev_small), hipFileSuccess, "hipFileBufDeregister partly registered buffer");

    /* Interior pointer of an unregistered allocation. */
    {
        unsigned char *pattern = (unsigned char *)malloc(DEV_SIZE);
        unsigned char *back    = (unsigned char *)malloc(DEV_SIZE);
        for (size_t i = 0; i < DEV_SIZE; i++) {
            pattern[i] = (unsigned char)(i * 7u + 3u);
        }
        int copied = hipMemcpy(dev_other, pattern, DEV_SIZE, hipMemcpyHostToDevice) == hipSuccess;
        char *interior = (char *)dev_other + 4096;
        io             = hipFileWrite(fh, interior, 8192, 0, 0);
        check(copied && io == 8192, "hipFileWrite from an interior pointer of an unregistered allocation",
              "returned %zd, errno %d", io, errno);
        /* Statistics are on (hipFileParamProfileStats): the write is counted, and levels 2 and 3
         * start with level 1. */
        hipFileStatsLevel1_t  l1;
        hipFileStatsLevel2_t *l2 = (hipFileStatsLevel2_t *)calloc(1, sizeof *l2);
        hipFileStatsLevel3_t *l3 = (hipFileStatsLevel3_t *)calloc(1, sizeof *l3);
        memset(&l1, 0, sizeof l1);
        expect_status(hipFileGetStatsL1(NULL), hipFileInvalidValue, "hipFileGetStatsL1(NULL) -> hipFileInvalidValue");
        expect_status(hipFileGetStatsL2(NULL), hipFileInvalidValue, "hipFileGetStatsL2(NULL) -> hipFileInvalidValue");
        expect_status(hipFileGetStatsL3(NULL), hipFileInvalidValue, "hipFileGetStatsL3(NULL) -> hipFileInvalidValue");
        expect_status(hipFileGetStatsL1(&l1), hipFileSuccess, "hipFileGetStatsL1");
        check(l1.write_bytes >= 8192, "level 1 statistics count the bytes written", "write_bytes %llu",
              (unsigned long long)l1.write_bytes);
        expect_status(hipFileGetStatsL2(l2), hipFileSuccess, "hipFileGetStatsL2");
        check(memcmp(&l2->basic, &l1, sizeof l1) == 0, "level 2 statistics start with level 1", "they differ");
        expect_status(hipFileGetStatsL3(l3), hipFileSuccess, "hipFileGetStatsL3");
        check(memcmp(&l3->detailed.basic, &l1, sizeof l1) == 0, "level 3 statistics start with level 1",
              "they differ");
        free(l2);
        free(l3);
        /* Only the direct path may serve when compat mode is disallowed: it needs an aligned address,
         * and refuses the unaligned one with -hipFileInternalError. */
        size_t at = 65536 + 123;
        if (compat_disallowed()) {
            expect_negated(hipFileRead(fh, (char *)dev_other + at, 8192, 0, 0), hipFileInternalError,
                           "hipFileRead to an unaligned address, compat mode disallowed -> -hipFileInternalError");
            at = 65536;
        }
        io = hipFileRead(fh, (char *)dev_other + at, 8192, 0, 0);
        check(io == 8192, "hipFileRead into an interior pointer of an unregistered allocation",
              "returned %zd, errno %d", io, errno);
        copied = hipMemcpy(back, dev_other, DEV_SIZE, hipMemcpyDeviceToHost) == hipSuccess;
        check(copied && memcmp(back + at, pattern + 4096, 8192) == 0,
              "interior pointer IO moves the right bytes", "data differs");
        free(pattern);
        free(back);
    }

    {
        int all_have_text = 1;
        int bad_code      = 0;
        for (int code = 0; code < (int)hipFileIOMaxError; code++) {
            int unassigned = code == HIPFILE_BASE_ERR + 21 || code == HIPFILE_BASE_ERR + 32;
            if ((code != 0 && code <= HIPFILE_BASE_ERR) || unassigned) {
                continue;
            }
            const char *text = hipFileGetOpErrorString((hipFileOpError_t)code);
            if (text == NULL || text[0] == '\0') {
                all_have_text = 0;
                bad_code      = code;
            }
        }
        check(all_have_text, "hipFileGetOpErrorString has text for every code", "code %d", bad_code);
    }

    expect_status(hipFileDriverGetProperties(NULL), hipFileInvalidValue,
                  "hipFileDriverGetProperties(NULL) -> hipFileInvalidValue");
    {
        hipFileDriverProps_t props;
        memset(&props, 0, sizeof props);
        status = hipFileDriverGetProperties(&props);
        check(status.err == hipFileSuccess && props.nvfs.max_direct_io_size != 0,
              "hipFileDriverGetProperties reports max_direct_io_size", "err %d, max_direct_io_size %llu",
              (int)status.err, (unsigned long long)props.nvfs.max_direct_io_size);
    }

    expect_status(hipFileSetParameterSizeT(hipFileParamPropertiesMaxDirectIOSizeKB, 1024),
                  hipFileDriverAlreadyOpen, "hipFileSetParameterSizeT while open -> hipFileDriverAlreadyOpen");

    {
        hipFileBatchHandle_t batch = NULL;
        status                     = hipFileBatchIOSetUp(&batch, 8);
        check(status.err == hipFileSuccess && batch != NULL, "hipFileBatchIOSetUp(8) -> success",
              "err %d (%s), handle %p", (int)status.err, HIPFILE_ERRSTR(status.err), batch);
        expect_use_count(1, "hipFileBatchIOSetUp keeps the count");
        hipFileBatchIODestroy(batch);
    }

    expect_status(hipFileStreamRegister((hipStream_t)0, 0), hipFileSuccess,
                  "hipFileStreamRegister(NULL stream, 0) -> success");
    expect_use_count(1, "hipFileStreamRegister keeps the count");
    expect_status(hipFileStreamDeregister((hipStream_t)0), hipFileSuccess,
                  "hipFileStreamDeregister(NULL stream) -> success");

    /* ---- 3. close to zero clears registrations -------------------------- */

    expect_use_count(1, "count is still 1 before the final close");
    expect_status(hipFileDriverClose(), hipFileSuccess, "hipFileDriverClose (1 -> 0) with registrations");
    expect_use_count(0, "driver closed");

    status = register_fd(&fh, fd_a, hipFileHandleTypeOpaqueFD);
    expect_status(status, hipFileSuccess, "same fd registers again after close to zero");
    expect_status(hipFileBufRegister(dev, DEV_SIZE, 0), hipFileSuccess,
                  "same buffer registers again after close to zero");

    expect_status(hipFileBufDeregister(dev), hipFileSuccess, "hipFileBufDeregister");
    hipFileHandleDeregister(fh);
    expect_status(hipFileDriverClose(), hipFileSuccess, "final hipFileDriverClose");
    expect_use_count(0, "driver closed at the end");

    free(host);
    if (hipFree(dev) != hipSuccess || hipFree(dev_other) != hipSuccess || hipFree(dev_small) != hipSuccess) {
        printf("# hipFree failed\n");
    }
    close(fd_a);
    close(fd_b);
    remove_scratch_file(dir, "semantics-a.bin");
    remove_scratch_file(dir, "semantics-b.bin");

    return tap_finish();
}
