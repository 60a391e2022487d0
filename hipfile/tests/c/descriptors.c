/*
 * descriptors.c - the application's file descriptor is the authority for
 * every request, as it is in upstream hipFile (which reads and writes through
 * it): what it was opened for, O_APPEND, and whether it is still open. Also
 * the answers upstream gives to a few edge cases of registration, versions,
 * end of file and parameters.
 *
 * Usage: descriptors SCRATCH_DIR
 * Prints one TAP-like line per check; exits 0 only if every check passed.
 * Builds as C11 and as C++17.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_PATH, setresuid */
#endif

#include <hipfile.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tap.h"

#define BLOCK ((size_t)4096)
#define DEV_SIZE ((size_t)(64 * 1024))

static void
expect_status(hipFileError_t got, hipFileOpError_t want, const char *name)
{
    check(got.err == want && got.hip_drv_err == hipSuccess, name, "got err %d (%s) hip_drv_err %d, want %d (%s)",
          (int)got.err, HIPFILE_ERRSTR(got.err), (int)got.hip_drv_err, (int)want, HIPFILE_ERRSTR(want));
}

/* An IO call returned -1 with errno `want`. */
static void
expect_errno(ssize_t got, int err, int want, const char *name)
{
    check(got == -1 && err == want, name, "returned %zd, errno %d (%s), want -1/%d (%s)", got, err, strerror(err),
          want, strerror(want));
}

static void
expect_bytes(ssize_t got, ssize_t want, const char *name)
{
    check(got == want, name, "returned %zd (errno %d), want %zd", got, errno, want);
}

static void
path_of(char *out, size_t room, const char *dir, const char *name)
{
    snprintf(out, room, "%s/%s", dir, name);
}

/* A file of `size` bytes, every byte `fill`. */
static void
make_file(const char *path, size_t size, unsigned char fill)
{
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0) {
        printf("not ok - create %s (%s)\n", path, strerror(errno));
        exit(1);
    }
    unsigned char block[4096];
    memset(block, fill, sizeof block);
    for (size_t done = 0; done < size; done += sizeof block) {
        size_t n = size - done < sizeof block ? size - done : sizeof block;
        if (write(fd, block, n) != (ssize_t)n) {
            printf("not ok - fill %s (%s)\n", path, strerror(errno));
            exit(1);
        }
    }
    close(fd);
}

static int
open_or_die(const char *path, int flags)
{
    int fd = open(path, flags);
    if (fd < 0) {
        printf("not ok - open %s (%s)\n", path, strerror(errno));
        exit(1);
    }
    return fd;
}

static hipFileError_t
register_fd(hipFileHandle_t *fh, int fd)
{
    hipFileDescr_t descr;
    memset(&descr, 0, sizeof descr);
    descr.type      = hipFileHandleTypeOpaqueFD;
    descr.handle.fd = fd;
    return hipFileHandleRegister(fh, &descr);
}

/* HIPFILE_ALLOW_COMPAT_MODE=false without HIPFILE_FORCE_COMPAT_MODE=true: no staged path. */
static int
compat_disallowed(void)
{
    const char *allow = getenv("HIPFILE_ALLOW_COMPAT_MODE");
    const char *force = getenv("HIPFILE_FORCE_COMPAT_MODE");
    return allow != NULL && strcasecmp(allow, "false") == 0 && !(force != NULL && strcasecmp(force, "true") == 0);
}

static off_t
file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_size : -1;
}

/* Whether every byte of [offset, offset + len) of the file at `path` is `fill`. */
static int
file_bytes_are(const char *path, off_t offset, size_t len, unsigned char fill)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        return 0;
    }
    unsigned char *buf = (unsigned char *)malloc(len);
    int            ok  = buf != NULL && pread(fd, buf, len, offset) == (ssize_t)len;
    for (size_t i = 0; ok && i < len; i++) {
        ok = buf[i] == fill;
    }
    free(buf);
    close(fd);
    return ok;
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    char        data[4096], append_path[4096], other[4096], odd[4096];
    path_of(data, sizeof data, dir, "descriptors-data.bin");
    path_of(append_path, sizeof append_path, dir, "descriptors-append.bin");
    path_of(other, sizeof other, dir, "descriptors-other.bin");
    path_of(odd, sizeof odd, dir, "descriptors-odd.bin");
    make_file(data, 2 * BLOCK, 0x11);
    make_file(other, 2 * BLOCK, 0x22);

    void *dev = NULL;
    if (hipMalloc(&dev, DEV_SIZE) != hipSuccess || dev == NULL || hipMemset(dev, 0x5a, DEV_SIZE) != hipSuccess) {
        printf("not ok - hipMalloc and hipMemset\n");
        return 1;
    }

    hipFileHandle_t fh = NULL;
    ssize_t         io;

    /* ---- versions and registration edge cases ------------------------- */

    {
        unsigned major = 0, minor = 99, patch = 99;
        expect_status(hipFileGetVersion(&major, NULL, NULL), hipFileSuccess,
                      "hipFileGetVersion(&major, NULL, NULL) -> success");
        check(major == HIPFILE_VERSION_MAJOR, "hipFileGetVersion writes the major version", "major %u", major);
        expect_status(hipFileGetVersion(NULL, NULL, NULL), hipFileSuccess,
                      "hipFileGetVersion(NULL, NULL, NULL) -> success");
        expect_status(hipFileGetVersion(NULL, &minor, &patch), hipFileSuccess,
                      "hipFileGetVersion(NULL, &minor, &patch) -> success");
        check(minor == HIPFILE_VERSION_MINOR && patch == HIPFILE_VERSION_PATCH,
              "hipFileGetVersion writes minor and patch", "%u.%u", minor, patch);
    }

    expect_status(register_fd(&fh, -1), hipFileInternalError, "hipFileHandleRegister(fd -1) -> hipFileInternalError");
    check(hipFileUseCount() == 0, "a refused fd -1 leaves the driver closed", "use count %lld",
          (long long)hipFileUseCount());
    {
        int closed = open_or_die(data, O_RDONLY);
        close(closed);
        expect_status(register_fd(&fh, closed), hipFileInternalError,
                      "hipFileHandleRegister(closed fd) -> hipFileInternalError");
        check(hipFileUseCount() == 0, "a refused closed fd leaves the driver closed", "use count %lld",
              (long long)hipFileUseCount());
    }

    expect_status(hipFileDriverOpen(), hipFileSuccess, "hipFileDriverOpen");
    expect_status(hipFileBufRegister(dev, DEV_SIZE, 0), hipFileSuccess, "hipFileBufRegister");

    /* ---- access mode ---------------------------------------------------- */

    {
        int path_fd = open_or_die(data, O_PATH);
        expect_status(register_fd(&fh, path_fd), hipFileSuccess, "an O_PATH descriptor registers (as upstream)");
        errno = 0;
        io    = hipFileRead(fh, dev, BLOCK, 0, 0);
        expect_errno(io, errno, EBADF, "hipFileRead through an O_PATH descriptor -> -1/EBADF");
        errno = 0;
        io    = hipFileWrite(fh, dev, BLOCK, 0, 0);
        expect_errno(io, errno, EBADF, "hipFileWrite through an O_PATH descriptor -> -1/EBADF");
        hipFileHandleDeregister(fh);
        close(path_fd);
        check(file_bytes_are(data, 0, 2 * BLOCK, 0x11), "the O_PATH file is unchanged", "bytes differ");
    }
    {
        int wo = open_or_die(data, O_WRONLY);
        expect_status(register_fd(&fh, wo), hipFileSuccess, "an O_WRONLY descriptor registers");
        errno = 0;
        io    = hipFileRead(fh, dev, BLOCK, 0, 0);
        expect_errno(io, errno, EBADF, "hipFileRead through an O_WRONLY descriptor -> -1/EBADF");
        hipFileHandleDeregister(fh);
        close(wo);
    }
    {
        int ro = open_or_die(data, O_RDONLY);
        expect_status(register_fd(&fh, ro), hipFileSuccess, "an O_RDONLY descriptor registers");
        errno = 0;
        io    = hipFileWrite(fh, dev, BLOCK, 0, 0);
        expect_errno(io, errno, EBADF, "hipFileWrite through an O_RDONLY descriptor -> -1/EBADF");
        expect_bytes(hipFileRead(fh, dev, BLOCK, 0, 0), (ssize_t)BLOCK, "hipFileRead through it reads");
        hipFileHandleDeregister(fh);
        close(ro);
        check(file_bytes_are(data, 0, 2 * BLOCK, 0x11), "the O_RDONLY file is unchanged", "bytes differ");
    }

    /* ---- O_APPEND: writes go to the end, never over existing bytes ------- */

    if (hipMemset(dev, 0x5a, DEV_SIZE) != hipSuccess) {
        printf("not ok - hipMemset\n");
        return 1;
    }
    if (compat_disallowed()) {
        /* Direct IO writes at an offset: with no staged path to append, the write is refused. */
        make_file(append_path, 2 * BLOCK, 0x33);
        int ap = open_or_die(append_path, O_RDWR | O_APPEND);
        expect_status(register_fd(&fh, ap), hipFileSuccess, "an O_APPEND descriptor registers");
        check(hipFileWrite(fh, dev, BLOCK, 0, 0) < 0, "compat disallowed: hipFileWrite on O_APPEND is refused",
              "it reported success");
        check(file_size(append_path) == (off_t)(2 * BLOCK) && file_bytes_are(append_path, 0, 2 * BLOCK, 0x33),
              "compat disallowed: the O_APPEND file is unchanged", "size %lld", (long long)file_size(append_path));
        hipFileHandleDeregister(fh);
        close(ap);
    } else {
        make_file(append_path, 2 * BLOCK, 0x33);
        int ap = open_or_die(append_path, O_RDWR | O_APPEND);
        expect_status(register_fd(&fh, ap), hipFileSuccess, "an O_APPEND descriptor registers");
        expect_bytes(hipFileWrite(fh, dev, BLOCK, 0, 0), (ssize_t)BLOCK, "hipFileWrite(offset 0) on O_APPEND");
        check(file_size(append_path) == (off_t)(3 * BLOCK), "the O_APPEND write grew the file by 4 KiB", "size %lld",
              (long long)file_size(append_path));
        check(file_bytes_are(append_path, 0, 2 * BLOCK, 0x33), "the bytes before the append are unchanged",
              "the first 8 KiB were overwritten");
        check(file_bytes_are(append_path, (off_t)(2 * BLOCK), BLOCK, 0x5a), "the appended bytes are the buffer's",
              "bytes differ");
        /* Large enough to be spread over several threads if it were positional. */
        expect_bytes(hipFileWrite(fh, dev, DEV_SIZE, 4096, 0), (ssize_t)DEV_SIZE,
                     "a 64 KiB hipFileWrite on O_APPEND");
        check(file_size(append_path) == (off_t)(3 * BLOCK + DEV_SIZE), "it appended 64 KiB", "size %lld",
              (long long)file_size(append_path));
        check(file_bytes_are(append_path, 0, 2 * BLOCK, 0x33), "the original bytes are still unchanged",
              "overwritten");
        hipFileHandleDeregister(fh);
        close(ap);
    }

    /* ---- closed or reused descriptor ------------------------------------ */

    {
        int fd = open_or_die(data, O_RDWR);
        expect_status(register_fd(&fh, fd), hipFileSuccess, "register a descriptor, then close it");
        close(fd);
        errno = 0;
        io    = hipFileRead(fh, dev, BLOCK, 0, 0);
        expect_errno(io, errno, EBADF, "hipFileRead after the application closed its descriptor -> -1/EBADF");
        errno = 0;
        io    = hipFileWrite(fh, dev, BLOCK, 0, 0);
        expect_errno(io, errno, EBADF, "hipFileWrite after the application closed its descriptor -> -1/EBADF");

        /* The number now names another file: nothing of that file is touched. */
        int reused = open_or_die(other, O_RDWR);
        if (reused != fd) {
            if (dup2(reused, fd) < 0) {
                printf("not ok - dup2 (%s)\n", strerror(errno));
                return 1;
            }
            close(reused);
        }
        errno = 0;
        io    = hipFileWrite(fh, dev, BLOCK, 0, 0);
        expect_errno(io, errno, EBADF, "hipFileWrite when the number names another file -> -1/EBADF");
        errno = 0;
        io    = hipFileRead(fh, dev, BLOCK, 0, 0);
        expect_errno(io, errno, EBADF, "hipFileRead when the number names another file -> -1/EBADF");
        check(file_bytes_are(other, 0, 2 * BLOCK, 0x22), "the other file is unchanged", "bytes differ");
        hipFileHandleDeregister(fh);
        expect_status(register_fd(&fh, fd), hipFileSuccess, "after deregistration the number registers again");
        hipFileHandleDeregister(fh);
        close(fd);
    }

    /* ---- parameters the engine cannot honour ----------------------------- */

    expect_status(hipFileDriverClose(), hipFileSuccess, "hipFileDriverClose (1 -> 0)");
    {
        const size_t sixteen_gib_kb = (size_t)16 * 1024 * 1024;
        expect_status(hipFileSetParameterSizeT(hipFileParamPropertiesMaxDirectIOSizeKB, sixteen_gib_kb),
                      hipFileDriverUnsupportedLimit, "MaxDirectIOSizeKB = 16 GiB -> hipFileDriverUnsupportedLimit");
        expect_status(hipFileSetParameterSizeT(hipFileParamPropertiesPerBufferCacheSizeKB, sixteen_gib_kb),
                      hipFileDriverUnsupportedLimit, "PerBufferCacheSizeKB = 16 GiB -> hipFileDriverUnsupportedLimit");
        expect_status(hipFileSetParameterSizeT(hipFileParamPropertiesMaxDevicePinnedMemSizeKB, SIZE_MAX),
                      hipFileDriverUnsupportedLimit,
                      "MaxDevicePinnedMemSizeKB = SIZE_MAX -> hipFileDriverUnsupportedLimit");
        size_t value = 0;
        expect_status(hipFileGetParameterSizeT(hipFileParamPropertiesMaxDirectIOSizeKB, &value), hipFileSuccess,
                      "hipFileGetParameterSizeT(MaxDirectIOSizeKB)");
        check(value == 16 * 1024, "a refused value leaves the parameter as it was", "%zu KiB", value);
    }

    /* ---- compat mode disallowed: an unaligned read at end of file is 0 --- */

    {
        make_file(odd, 2 * BLOCK + 100, 0x44);
        expect_status(hipFileSetParameterBool(hipFileParamPropertiesAllowCompatMode, false), hipFileSuccess,
                      "disallow compat mode");
        int fd = open_or_die(odd, O_RDONLY);
        expect_status(register_fd(&fh, fd), hipFileSuccess, "register a file of 8292 bytes");
        expect_bytes(hipFileRead(fh, dev, BLOCK, (hoff_t)(2 * BLOCK + 100), 0), 0,
                     "compat disallowed: a read at the (unaligned) end of file returns 0");
        expect_bytes(hipFileRead(fh, dev, BLOCK, (hoff_t)(3 * BLOCK + 1), 0), 0,
                     "compat disallowed: a read past the end of file returns 0");
        hipFileHandleDeregister(fh);
        close(fd);
        expect_status(hipFileDriverClose(), hipFileSuccess, "hipFileDriverClose (1 -> 0)");
        expect_status(hipFileSetParameterBool(hipFileParamPropertiesAllowCompatMode, true), hipFileSuccess,
                      "allow compat mode again");
    }

    /* ---- a file created read-only through a read-write descriptor ------- */

    /* open(O_CREAT | O_RDWR, 0444) gives a descriptor that may write a file its mode makes
     * read-only; a fresh open of it for writing is refused. Upstream registers it and writes
     * through the descriptor; so must hipfile-rs. Root opens anything, so a root run gives up
     * root first (the program's last part: nothing after it needs root). */
    unlink(data);
    unlink(append_path);
    unlink(other);
    unlink(odd);
    {
        char ro_dir[4096], ro_path[4096];
        path_of(ro_dir, sizeof ro_dir, dir, "descriptors-nobody");
        path_of(ro_path, sizeof ro_path, ro_dir, "created-read-only.bin");
        expect_status(hipFileDriverOpen(), hipFileSuccess, "hipFileDriverOpen (before giving up root)");
        if (geteuid() == 0) {
            const uid_t nobody = 65534;
            if (mkdir(ro_dir, 0700) != 0 || chown(ro_dir, nobody, nobody) != 0 || setgroups(0, NULL) != 0 ||
                setresgid(nobody, nobody, nobody) != 0 || setresuid(nobody, nobody, nobody) != 0) {
                printf("not ok - giving up root for user 65534 (%s)\n", strerror(errno));
                return 1;
            }
        } else if (mkdir(ro_dir, 0700) != 0) {
            printf("not ok - mkdir %s (%s)\n", ro_dir, strerror(errno));
            return 1;
        }
        int fd = open(ro_path, O_CREAT | O_EXCL | O_RDWR, 0444);
        check(fd >= 0, "open(O_CREAT | O_RDWR, 0444)", "%s", strerror(errno));
        int again = open(ro_path, O_RDWR);
        check(again < 0 && errno == EACCES, "a fresh read-write open of it is refused (the case under test)",
              "open returned %d", again);
        expect_status(register_fd(&fh, fd), hipFileSuccess, "hipFileHandleRegister of the read-only-mode file");
        if (hipMemset(dev, 0x66, DEV_SIZE) != hipSuccess) {
            printf("not ok - hipMemset\n");
            return 1;
        }
        /* Compat mode is allowed again by now (above), whatever the variant. */
        expect_bytes(hipFileWrite(fh, dev, 2 * BLOCK + 100, 0, 0), (ssize_t)(2 * BLOCK + 100),
                     "hipFileWrite through it writes");
        if (hipMemset(dev, 0, DEV_SIZE) != hipSuccess) {
            printf("not ok - hipMemset\n");
            return 1;
        }
        expect_bytes(hipFileRead(fh, dev, 2 * BLOCK + 100, 0, 0), (ssize_t)(2 * BLOCK + 100),
                     "hipFileRead through it reads");
        unsigned char back[2 * BLOCK + 100];
        int           same = hipMemcpy(back, dev, sizeof back, hipMemcpyDeviceToHost) == hipSuccess;
        for (size_t i = 0; same && i < sizeof back; i++) {
            same = back[i] == 0x66;
        }
        check(same, "the bytes read back are those written", "bytes differ");
        unsigned char disk[2 * BLOCK + 100];
        same = pread(fd, disk, sizeof disk, 0) == (ssize_t)sizeof disk;
        for (size_t i = 0; same && i < sizeof disk; i++) {
            same = disk[i] == 0x66;
        }
        check(same && file_size(ro_path) == (off_t)sizeof disk, "the file holds them", "bytes differ");
        hipFileHandleDeregister(fh);
        close(fd);
        unlink(ro_path);
        rmdir(ro_dir);
        expect_status(hipFileDriverClose(), hipFileSuccess, "hipFileDriverClose (1 -> 0)");
    }

    check(hipFileUseCount() == 0, "driver closed at the end", "use count %lld", (long long)hipFileUseCount());
    if (hipFree(dev) != hipSuccess) {
        printf("# hipFree failed\n");
    }
    return tap_finish();
}
