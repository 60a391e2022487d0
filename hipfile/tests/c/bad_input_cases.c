/*
 * bad_input_cases.c - every hipfile.h entry point called with NULL, garbage,
 * stale and out-of-range arguments, one case per process.
 *
 * Usage:
 *   bad_input_cases --list             one `class/name` per line
 *   bad_input_cases --table            the case table (markdown): expected code and its basis
 *   bad_input_cases SCRATCH_DIR CASE   run one case in SCRATCH_DIR (a fresh directory)
 *
 * A case makes one bad call (sometimes a short loop of them) and compares what
 * it returned with the table's expectation, then runs its post-checks: the use
 * count is what upstream leaves, the library still serves a good request, no
 * byte outside the caller's buffer changed. It prints one line, `ok - CASE` or
 * `not ok - CASE: why`, then the plan `1..1`, and exits 0 or 1. Anything else
 * (a signal, another exit status, a hang, "panicked" on stderr, no result
 * line) is a crash; the runner
 * (`cargo xtask c-tests`, which runs every `*_cases.c` program this way) starts
 * each case in its own process under every environment variant it uses.
 *
 * The expectation is upstream hipFile's answer (basis "upstream", followed by
 * the rule that decides it where the arguments leave a choice); where
 * upstream leaves a call unimplemented or its answer is an accident of its
 * exception plumbing, the answer this library documents ("hipfile-rs").
 * "kernel" means the answer pread(2)/pwrite(2) give for the same request on
 * the same file.
 *
 * Builds as C11 and as C++17.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_PATH */
#endif

#include <hipfile.h>

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#define CASES_PAIR_T hipFileError_t
#define CASES_RUNTIME_ERROR(pair) ((int)(pair).hip_drv_err)
#include "cases.h"

/* Size of the scratch files. */
#define FILE_SIZE ((size_t)(64 * 1024))
/* Size of the device buffers. */
#define DEV_SIZE ((size_t)(256 * 1024))
/* Largest transfer Linux performs in one call (MAX_RW_COUNT): 2 GiB - 4 KiB. */
#define MAX_RW ((size_t)0x7ffff000)

/* ------------------------------------------------------------------------ */
/* Expectations and outcomes                                                 */
/* ------------------------------------------------------------------------ */

/* A HIP runtime failure beside `c`. */
#define CODE_HIP(c) {X_RUNTIME, (long long)(c), 0}

/* ------------------------------------------------------------------------ */
/* Names                                                                     */
/* ------------------------------------------------------------------------ */

static const char *
code_name(long long code)
{
    switch (code) {
        case hipFileSuccess: return "hipFileSuccess";
        case hipFileDriverNotInitialized: return "hipFileDriverNotInitialized";
        case hipFileDriverInvalidProps: return "hipFileDriverInvalidProps";
        case hipFileDriverUnsupportedLimit: return "hipFileDriverUnsupportedLimit";
        case hipFileDriverVersionMismatch: return "hipFileDriverVersionMismatch";
        case hipFileDriverVersionReadError: return "hipFileDriverVersionReadError";
        case hipFileDriverClosing: return "hipFileDriverClosing";
        case hipFilePlatformNotSupported: return "hipFilePlatformNotSupported";
        case hipFileIONotSupported: return "hipFileIONotSupported";
        case hipFileDeviceNotSupported: return "hipFileDeviceNotSupported";
        case hipFileDriverError: return "hipFileDriverError";
        case hipFileHipDriverError: return "hipFileHipDriverError";
        case hipFileHipPointerInvalid: return "hipFileHipPointerInvalid";
        case hipFileHipMemoryTypeInvalid: return "hipFileHipMemoryTypeInvalid";
        case hipFileHipPointerRangeError: return "hipFileHipPointerRangeError";
        case hipFileHipContextMismatch: return "hipFileHipContextMismatch";
        case hipFileInvalidMappingSize: return "hipFileInvalidMappingSize";
        case hipFileInvalidMappingRange: return "hipFileInvalidMappingRange";
        case hipFileInvalidFileType: return "hipFileInvalidFileType";
        case hipFileInvalidFileOpenFlag: return "hipFileInvalidFileOpenFlag";
        case hipFileDIONotSet: return "hipFileDIONotSet";
        case hipFileInvalidValue: return "hipFileInvalidValue";
        case hipFileMemoryAlreadyRegistered: return "hipFileMemoryAlreadyRegistered";
        case hipFileMemoryNotRegistered: return "hipFileMemoryNotRegistered";
        case hipFilePermissionDenied: return "hipFilePermissionDenied";
        case hipFileDriverAlreadyOpen: return "hipFileDriverAlreadyOpen";
        case hipFileHandleNotRegistered: return "hipFileHandleNotRegistered";
        case hipFileHandleAlreadyRegistered: return "hipFileHandleAlreadyRegistered";
        case hipFileDeviceNotFound: return "hipFileDeviceNotFound";
        case hipFileInternalError: return "hipFileInternalError";
        case hipFileGetNewFDFailed: return "hipFileGetNewFDFailed";
        case hipFileDriverSetupError: return "hipFileDriverSetupError";
        case hipFileIODisabled: return "hipFileIODisabled";
        case hipFileBatchSubmitFailed: return "hipFileBatchSubmitFailed";
        case hipFileGPUMemoryPinningFailed: return "hipFileGPUMemoryPinningFailed";
        case hipFileBatchFull: return "hipFileBatchFull";
        case hipFileAsyncNotSupported: return "hipFileAsyncNotSupported";
        default: return "an unknown code";
    }
}

static const char *
errno_name(long long e)
{
    switch (e) {
        case 0: return "0";
        case EBADF: return "EBADF";
        case EINVAL: return "EINVAL";
        case EFBIG: return "EFBIG";
        case EFAULT: return "EFAULT";
        case EOVERFLOW: return "EOVERFLOW";
        case EISDIR: return "EISDIR";
        case ENOSPC: return "ENOSPC";
        default: return "errno";
    }
}

/* `want` in words, for the table and for failure lines. */
static void
describe_expect(expect x, char *out, size_t room)
{
    switch (x.kind) {
        case X_CODE: snprintf(out, room, "%s (%lld)", code_name(x.a), x.a); break;
        case X_CODE2:
            snprintf(out, room, "%s (%lld) or %s (%lld)", code_name(x.a), x.a, code_name(x.b), x.b);
            break;
        case X_RUNTIME: snprintf(out, room, "%s (%lld) with a HIP error", code_name(x.a), x.a); break;
        case X_NEG: snprintf(out, room, "-%s (-%lld)", code_name(x.a), x.a); break;
        case X_ERRNO: snprintf(out, room, "-1, errno %s", errno_name(x.a)); break;
        case X_BYTES: snprintf(out, room, "%lld bytes", x.a); break;
        case X_VALUE: snprintf(out, room, "%lld", x.a); break;
        case X_TEXT: snprintf(out, room, "a non-empty string"); break;
        case X_VOID: snprintf(out, room, "(void) library state intact"); break;
        case X_KERNEL: snprintf(out, room, "what pread/pwrite return"); break;
    }
}

static void
describe_outcome(const outcome *o, char *out, size_t room)
{
    switch (o->kind) {
        case O_PAIR:
            snprintf(out, room, "%s (%d), hip_drv_err %d", code_name(o->pair.err), (int)o->pair.err,
                     (int)o->pair.hip_drv_err);
            break;
        case O_IO:
            if (o->ret == -1) {
                snprintf(out, room, "-1, errno %s (%d)", errno_name(o->err), o->err);
            }
            else if (o->ret < 0) {
                snprintf(out, room, "-%s (%zd)", code_name(-(long long)o->ret), o->ret);
            }
            else {
                snprintf(out, room, "%zd bytes", o->ret);
            }
            break;
        case O_VALUE: snprintf(out, room, "%lld", o->value); break;
        case O_TEXT:
            if (o->text == NULL) {
                snprintf(out, room, "NULL");
            }
            else {
                snprintf(out, room, "\"%s\"", o->text);
            }
            break;
        case O_VOID: snprintf(out, room, "(void)"); break;
    }
}

/* ------------------------------------------------------------------------ */
/* Post-checks and setup                                                     */
/* ------------------------------------------------------------------------ */

/* Whether only the direct path may serve (HIPFILE_ALLOW_COMPAT_MODE=false without
 * HIPFILE_FORCE_COMPAT_MODE=true): what it declines fails instead of being staged. */
static int
compat_disallowed(void)
{
    const char *allow = getenv("HIPFILE_ALLOW_COMPAT_MODE");
    const char *force = getenv("HIPFILE_FORCE_COMPAT_MODE");
    return allow != NULL && strcasecmp(allow, "false") == 0 && !(force != NULL && strcasecmp(force, "true") == 0);
}

/* A step the case needs that is not under test failed: the case cannot run. */
#if defined(__GNUC__)
__attribute__((format(printf, 1, 2), noreturn))
#endif
static void
setup_failed(const char *fmt, ...)
{
    char    why[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(why, sizeof why, fmt, args);
    va_end(args);
    printf("not ok - %s: setup failed: %s\n", g_case, why);
    fflush(stdout);
    exit(1);
}

static void
post_use_count(long long want)
{
    long long got = (long long)hipFileUseCount();
    post(got == want, "hipFileUseCount() = %lld afterwards, want %lld", got, want);
}

static unsigned char
pattern_byte(size_t i, unsigned seed)
{
    return (unsigned char)((i * 131u + seed * 17u + (i >> 12)) & 0xff);
}

static void
path_of(const char *name, char *out, size_t room)
{
    snprintf(out, room, "%s/%s", g_dir, name);
}

/* Create `name` holding FILE_SIZE pattern bytes (seed), then open it with `flags`. */
static int
make_file(const char *name, unsigned seed, int flags)
{
    char path[4096];
    path_of(name, path, sizeof path);
    int fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (fd < 0) {
        setup_failed("create %s: %s", path, strerror(errno));
    }
    unsigned char *bytes = (unsigned char *)malloc(FILE_SIZE);
    for (size_t i = 0; i < FILE_SIZE; i++) {
        bytes[i] = pattern_byte(i, seed);
    }
    if (pwrite(fd, bytes, FILE_SIZE, 0) != (ssize_t)FILE_SIZE) {
        setup_failed("write %s: %s", path, strerror(errno));
    }
    free(bytes);
    close(fd);
    fd = open(path, flags);
    if (fd < 0) {
        setup_failed("open %s (flags %#x): %s", path, flags, strerror(errno));
    }
    return fd;
}

/* Whether `name` still holds its FILE_SIZE pattern bytes (seed), and nothing more. */
static int
file_intact(const char *name, unsigned seed)
{
    char path[4096];
    path_of(name, path, sizeof path);
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        return 0;
    }
    struct stat st;
    int         ok = fstat(fd, &st) == 0 && (size_t)st.st_size == FILE_SIZE;
    unsigned char *bytes = (unsigned char *)malloc(FILE_SIZE);
    ok = ok && pread(fd, bytes, FILE_SIZE, 0) == (ssize_t)FILE_SIZE;
    for (size_t i = 0; ok && i < FILE_SIZE; i++) {
        ok = bytes[i] == pattern_byte(i, seed);
    }
    free(bytes);
    close(fd);
    return ok;
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

static hipFileHandle_t
must_register(int fd)
{
    hipFileHandle_t fh = NULL;
    hipFileError_t  e  = register_fd(&fh, fd);
    if (e.err != hipFileSuccess) {
        setup_failed("hipFileHandleRegister(fd %d) = %s", fd, code_name(e.err));
    }
    return fh;
}

/* A registered read-write file "good.bin" (pattern seed 1); opens the driver. */
static hipFileHandle_t
good_handle(void)
{
    return must_register(make_file("good.bin", 1, O_RDWR));
}

static void *
dev_alloc(size_t size)
{
    void      *p = NULL;
    hipError_t e = hipMalloc(&p, size);
    if (e != hipSuccess || p == NULL) {
        setup_failed("hipMalloc(%zu) = %d", size, (int)e);
    }
    return p;
}

static void
dev_fill(void *dev, size_t size, unsigned char value)
{
    unsigned char *host = (unsigned char *)malloc(size);
    memset(host, value, size);
    if (hipMemcpy(dev, host, size, hipMemcpyHostToDevice) != hipSuccess) {
        setup_failed("hipMemcpy to the device");
    }
    free(host);
}

static void
must_open_driver(void)
{
    hipFileError_t e = hipFileDriverOpen();
    if (e.err != hipFileSuccess) {
        setup_failed("hipFileDriverOpen = %s", code_name(e.err));
    }
}

static void
must_close_driver(void)
{
    hipFileError_t e = hipFileDriverClose();
    if (e.err != hipFileSuccess) {
        setup_failed("hipFileDriverClose = %s", code_name(e.err));
    }
}

/* The library still serves a good request: 4 KiB of "good.bin" (seed 1) at offset 8 KiB. */
static void
post_good_read(hipFileHandle_t fh)
{
    void          *dev  = dev_alloc(DEV_SIZE);
    ssize_t        got  = hipFileRead(fh, dev, 4096, 8192, 0);
    unsigned char *host = (unsigned char *)malloc(4096);
    int            same = got == 4096 && hipMemcpy(host, dev, 4096, hipMemcpyDeviceToHost) == hipSuccess;
    for (size_t i = 0; same && i < 4096; i++) {
        same = host[i] == pattern_byte(8192 + i, 1);
    }
    post(same, "a good 4 KiB read afterwards returned %zd%s", got, got == 4096 ? " with wrong bytes" : "");
    free(host);
    if (hipFree(dev) != hipSuccess) {
        post(0, "hipFree failed");
    }
}

/* A read-write memory area of `size` bytes that ends where an inaccessible page begins. */
static void *
guarded(size_t size)
{
    long   page  = sysconf(_SC_PAGESIZE);
    size_t pages = (size + (size_t)page - 1) / (size_t)page;
    char  *base  = (char *)mmap(NULL, (pages + 1) * (size_t)page, PROT_READ | PROT_WRITE,
                                MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        setup_failed("mmap: %s", strerror(errno));
    }
    if (mprotect(base + pages * (size_t)page, (size_t)page, PROT_NONE) != 0) {
        setup_failed("mprotect: %s", strerror(errno));
    }
    return base + pages * (size_t)page - size;
}

/* Deterministic garbage: a 64-bit LCG. */
static uint64_t g_rand = 0x9e3779b97f4a7c15ull;

static uint64_t
next_random(void)
{
    g_rand = g_rand * 6364136223846793005ull + 1442695040888963407ull;
    return g_rand ^ (g_rand >> 29);
}

#define GARBAGE_HANDLE ((hipFileHandle_t)(uintptr_t)0xdeadbeefcafe0000ull)
#define GARBAGE_POINTER ((void *)(uintptr_t)0x0000dead00000000ull)

/* ------------------------------------------------------------------------ */
/* driver: lifetime and use count                                            */
/* ------------------------------------------------------------------------ */

static outcome
driver_close_unopened(void)
{
    outcome o = got_pair(hipFileDriverClose());
    post_use_count(0);
    return o;
}

static outcome
driver_close_more_than_opened(void)
{
    must_open_driver();
    must_open_driver();
    must_close_driver();
    must_close_driver();
    outcome o = got_pair(hipFileDriverClose());
    post_use_count(0);
    hipFileError_t again = hipFileDriverOpen();
    post(again.err == hipFileSuccess, "hipFileDriverOpen afterwards = %s", code_name(again.err));
    post_use_count(1);
    return o;
}

static outcome
driver_close_after_implicit_open(void)
{
    hipFileHandle_t fh = good_handle();
    (void)fh;
    must_close_driver();
    return got_pair(hipFileDriverClose());
}

static outcome
driver_close_many_times(void)
{
    hipFileError_t last = hipFileDriverClose();
    for (int i = 0; i < 100; i++) {
        last = hipFileDriverClose();
    }
    post_use_count(0);
    return got_pair(last);
}

static outcome
driver_use_count_two_opens(void)
{
    must_open_driver();
    must_open_driver();
    return got_value(hipFileUseCount());
}

static outcome
driver_use_count_implicit_open_adds_nothing(void)
{
    must_open_driver();
    hipFileHandle_t fh = good_handle();
    void           *dev = dev_alloc(DEV_SIZE);
    hipFileError_t  e   = hipFileBufRegister(dev, DEV_SIZE, 0);
    post(e.err == hipFileSuccess, "hipFileBufRegister = %s", code_name(e.err));
    (void)fh;
    return got_value(hipFileUseCount());
}

static outcome
driver_open_close_cycles(void)
{
    for (int i = 0; i < 20; i++) {
        hipFileError_t o = hipFileDriverOpen();
        hipFileError_t c = hipFileDriverClose();
        if (o.err != hipFileSuccess || c.err != hipFileSuccess) {
            post(0, "cycle %d: open %s, close %s", i, code_name(o.err), code_name(c.err));
            break;
        }
    }
    return got_value(hipFileUseCount());
}

static outcome
driver_get_properties_null_closed(void)
{
    outcome o = got_pair(hipFileDriverGetProperties(NULL));
    post_use_count(0);
    return o;
}

static outcome
driver_get_properties_null_open(void)
{
    must_open_driver();
    return got_pair(hipFileDriverGetProperties(NULL));
}

static outcome
driver_get_properties_exact_fit(void)
{
    must_open_driver();
    hipFileDriverProps_t *props = (hipFileDriverProps_t *)guarded(sizeof *props);
    return got_pair(hipFileDriverGetProperties(props));
}

static outcome
driver_set_poll_mode_closed(void)
{
    outcome o = got_pair(hipFileDriverSetPollMode(true, 4));
    post_use_count(0);
    return o;
}

static outcome
driver_set_max_cache_size_closed(void)
{
    outcome o = got_pair(hipFileDriverSetMaxCacheSize(1024));
    post_use_count(0);
    return o;
}

static outcome
driver_set_max_direct_io_size_zero(void)
{
    hipFileHandle_t fh = good_handle();
    outcome         o  = got_pair(hipFileDriverSetMaxDirectIOSize(0));
    post_good_read(fh);
    return o;
}

static outcome
driver_set_max_direct_io_size_huge(void)
{
    hipFileHandle_t fh = good_handle();
    outcome         o  = got_pair(hipFileDriverSetMaxDirectIOSize(SIZE_MAX));
    post_good_read(fh);
    return o;
}

static outcome
driver_set_max_pinned_size_zero(void)
{
    hipFileHandle_t fh = good_handle();
    outcome         o  = got_pair(hipFileDriverSetMaxPinnedMemSize(0));
    post_good_read(fh);
    return o;
}

static outcome
driver_set_max_pinned_size_huge(void)
{
    hipFileHandle_t fh = good_handle();
    outcome         o  = got_pair(hipFileDriverSetMaxPinnedMemSize(SIZE_MAX));
    post_good_read(fh);
    return o;
}

static outcome
driver_set_poll_threshold_huge(void)
{
    hipFileHandle_t fh = good_handle();
    outcome         o  = got_pair(hipFileDriverSetPollMode(true, SIZE_MAX));
    post_good_read(fh);
    return o;
}

/* ------------------------------------------------------------------------ */
/* register: hipFileHandleRegister arguments                                 */
/* ------------------------------------------------------------------------ */

static outcome
register_null_fh(void)
{
    hipFileDescr_t descr;
    memset(&descr, 0, sizeof descr);
    descr.type      = hipFileHandleTypeOpaqueFD;
    descr.handle.fd = make_file("a.bin", 2, O_RDWR);
    outcome o       = got_pair(hipFileHandleRegister(NULL, &descr));
    post_use_count(0);
    return o;
}

static outcome
register_null_descr(void)
{
    hipFileHandle_t fh = NULL;
    outcome         o  = got_pair(hipFileHandleRegister(&fh, NULL));
    post_use_count(0);
    return o;
}

static outcome
register_null_both(void)
{
    outcome o = got_pair(hipFileHandleRegister(NULL, NULL));
    post_use_count(0);
    return o;
}

static outcome
register_null_fh_driver_open(void)
{
    must_open_driver();
    hipFileDescr_t descr;
    memset(&descr, 0, sizeof descr);
    descr.type      = hipFileHandleTypeOpaqueFD;
    descr.handle.fd = make_file("a.bin", 2, O_RDWR);
    outcome o       = got_pair(hipFileHandleRegister(NULL, &descr));
    post_use_count(1);
    return o;
}

static outcome
register_type(int type)
{
    hipFileHandle_t fh = NULL;
    hipFileDescr_t  descr;
    memset(&descr, 0, sizeof descr);
    descr.type      = (hipFileFileHandleType_t)type;
    descr.handle.fd = make_file("a.bin", 2, O_RDWR);
    outcome o       = got_pair(hipFileHandleRegister(&fh, &descr));
    post_use_count(0);
    return o;
}

static outcome
register_type_zero(void)
{
    return register_type(0);
}

static outcome
register_type_99(void)
{
    return register_type(99);
}

static outcome
register_type_negative(void)
{
    return register_type(-1);
}

static outcome
register_type_win32(void)
{
    return register_type(hipFileHandleTypeOpaqueWin32);
}

static outcome
register_type_userspace_fs(void)
{
    return register_type(hipFileHandleTypeUserspaceFS);
}

/* For an OpaqueFD descriptor upstream reads only `type` and `handle.fd`: fs_ops may be garbage. */
static outcome
register_garbage_fs_ops(void)
{
    hipFileHandle_t fh = NULL;
    hipFileDescr_t  descr;
    memset(&descr, 0, sizeof descr);
    descr.type      = hipFileHandleTypeOpaqueFD;
    descr.handle.fd = make_file("a.bin", 2, O_RDWR);
    descr.fs_ops    = (const hipFileFSOps_t *)GARBAGE_POINTER;
    outcome o       = got_pair(hipFileHandleRegister(&fh, &descr));
    post_use_count(1);
    return o;
}

static outcome
register_twice(void)
{
    int             fd = make_file("a.bin", 2, O_RDWR);
    hipFileHandle_t fh = must_register(fd);
    hipFileHandle_t again = NULL;
    outcome         o     = got_pair(register_fd(&again, fd));
    post_use_count(1);
    post(again == NULL, "the failed registration wrote a handle");
    (void)fh;
    return o;
}

static outcome
register_dup_of_registered(void)
{
    int             fd = make_file("a.bin", 2, O_RDWR);
    hipFileHandle_t fh = must_register(fd);
    hipFileHandle_t other = NULL;
    outcome         o     = got_pair(register_fd(&other, dup(fd)));
    post(o.pair.err != hipFileSuccess || other != fh, "the dup got the same handle as the original");
    return o;
}

static outcome
register_after_failed_register(void)
{
    hipFileHandle_t fh = NULL;
    hipFileError_t  bad = register_fd(&fh, -1);
    (void)bad;
    outcome o = got_pair(register_fd(&fh, make_file("a.bin", 2, O_RDWR)));
    post_use_count(1);
    return o;
}

/* ------------------------------------------------------------------------ */
/* fd: what the descriptor is                                                */
/* ------------------------------------------------------------------------ */

static outcome
register_fd_value(int fd)
{
    hipFileHandle_t fh = NULL;
    outcome         o  = got_pair(register_fd(&fh, fd));
    post_use_count(0);
    return o;
}

static outcome
fd_minus_one(void)
{
    return register_fd_value(-1);
}

static outcome
fd_int_min(void)
{
    return register_fd_value(INT_MIN);
}

static outcome
fd_int_max(void)
{
    return register_fd_value(INT_MAX);
}

static outcome
fd_closed(void)
{
    int fd = make_file("a.bin", 2, O_RDWR);
    close(fd);
    return register_fd_value(fd);
}

static outcome
fd_pipe_read_end(void)
{
    int ends[2];
    if (pipe(ends) != 0) {
        setup_failed("pipe: %s", strerror(errno));
    }
    return register_fd_value(ends[0]);
}

static outcome
fd_pipe_write_end(void)
{
    int ends[2];
    if (pipe(ends) != 0) {
        setup_failed("pipe: %s", strerror(errno));
    }
    return register_fd_value(ends[1]);
}

static outcome
fd_socket(void)
{
    int ends[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, ends) != 0) {
        setup_failed("socketpair: %s", strerror(errno));
    }
    return register_fd_value(ends[0]);
}

static outcome
fd_directory(void)
{
    int fd = open(g_dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        setup_failed("open %s: %s", g_dir, strerror(errno));
    }
    return register_fd_value(fd);
}

static outcome
fd_dev_null(void)
{
    int fd = open("/dev/null", O_RDWR);
    if (fd < 0) {
        setup_failed("open /dev/null: %s", strerror(errno));
    }
    return register_fd_value(fd);
}

static outcome
fd_o_path_symlink(void)
{
    char target[4096], link[4096];
    close(make_file("a.bin", 2, O_RDWR));
    path_of("a.bin", target, sizeof target);
    path_of("link", link, sizeof link);
    if (symlink(target, link) != 0) {
        setup_failed("symlink: %s", strerror(errno));
    }
    int fd = open(link, O_PATH | O_NOFOLLOW);
    if (fd < 0) {
        setup_failed("open %s O_PATH|O_NOFOLLOW: %s", link, strerror(errno));
    }
    return register_fd_value(fd);
}

static outcome
fd_o_path_registers(void)
{
    hipFileHandle_t fh = NULL;
    outcome         o  = got_pair(register_fd(&fh, make_file("a.bin", 2, O_PATH)));
    post_use_count(o.pair.err == hipFileSuccess ? 1 : 0);
    return o;
}

static outcome
fd_o_path_read(void)
{
    hipFileHandle_t fh  = must_register(make_file("a.bin", 2, O_PATH));
    void           *dev = dev_alloc(DEV_SIZE);
    errno               = 0;
    return got_io(hipFileRead(fh, dev, 4096, 0, 0));
}

static outcome
fd_o_path_write(void)
{
    hipFileHandle_t fh  = must_register(make_file("a.bin", 2, O_PATH));
    void           *dev = dev_alloc(DEV_SIZE);
    errno               = 0;
    outcome o           = got_io(hipFileWrite(fh, dev, 4096, 0, 0));
    post(file_intact("a.bin", 2), "the file changed");
    return o;
}

static outcome
fd_write_only_read(void)
{
    hipFileHandle_t fh  = must_register(make_file("a.bin", 2, O_WRONLY));
    void           *dev = dev_alloc(DEV_SIZE);
    errno               = 0;
    return got_io(hipFileRead(fh, dev, 4096, 0, 0));
}

static outcome
fd_read_only_write(void)
{
    hipFileHandle_t fh  = must_register(make_file("a.bin", 2, O_RDONLY));
    void           *dev = dev_alloc(DEV_SIZE);
    errno               = 0;
    outcome o           = got_io(hipFileWrite(fh, dev, 4096, 0, 0));
    post(file_intact("a.bin", 2), "the file changed");
    return o;
}

static outcome
fd_append_write(void)
{
    hipFileHandle_t fh  = must_register(make_file("a.bin", 2, O_WRONLY | O_APPEND));
    void           *dev = dev_alloc(DEV_SIZE);
    dev_fill(dev, 4096, 0xab);
    errno     = 0;
    outcome o = got_io(hipFileWrite(fh, dev, 4096, 0, 0));
    if (o.ret < 0) {
        post(file_intact("a.bin", 2), "the refused write changed the file");
        return o;
    }

    char path[4096];
    path_of("a.bin", path, sizeof path);
    int            fd   = open(path, O_RDONLY);
    unsigned char *back = (unsigned char *)calloc(1, FILE_SIZE + 4096);
    struct stat    st;
    int            sized = fd >= 0 && fstat(fd, &st) == 0;
    post(sized && (size_t)st.st_size == FILE_SIZE + 4096, "file size %lld afterwards, want %zu (appended)",
         sized ? (long long)st.st_size : -1LL, FILE_SIZE + 4096);
    ssize_t got  = fd >= 0 ? pread(fd, back, FILE_SIZE + 4096, 0) : -1;
    int     kept = got >= (ssize_t)FILE_SIZE;
    for (size_t i = 0; kept && i < FILE_SIZE; i++) {
        kept = back[i] == pattern_byte(i, 2);
    }
    int appended = got == (ssize_t)(FILE_SIZE + 4096);
    for (size_t i = 0; appended && i < 4096; i++) {
        appended = back[FILE_SIZE + i] == 0xab;
    }
    post(kept, "existing bytes were overwritten");
    post(appended, "the written bytes are not at the end");
    free(back);
    if (fd >= 0) {
        close(fd);
    }
    return o;
}

static outcome
fd_closed_after_register_read(void)
{
    int             fd  = make_file("a.bin", 2, O_RDWR);
    hipFileHandle_t fh  = must_register(fd);
    void           *dev = dev_alloc(DEV_SIZE);
    close(fd);
    errno     = 0;
    outcome o = got_io(hipFileRead(fh, dev, 4096, 0, 0));
    hipFileHandleDeregister(fh);
    /* The deregistration freed the descriptor's slot: the number registers again. */
    int             again = make_file("b.bin", 3, O_RDWR);
    hipFileHandle_t fh2   = NULL;
    hipFileError_t  e     = register_fd(&fh2, again);
    post(e.err == hipFileSuccess, "registering a new file afterwards = %s", code_name(e.err));
    return o;
}

static outcome
fd_closed_after_register_write(void)
{
    int             fd  = make_file("a.bin", 2, O_RDWR);
    hipFileHandle_t fh  = must_register(fd);
    void           *dev = dev_alloc(DEV_SIZE);
    close(fd);
    errno     = 0;
    outcome o = got_io(hipFileWrite(fh, dev, 4096, 0, 0));
    post(file_intact("a.bin", 2), "the closed file changed");
    return o;
}

static outcome
fd_number_reused_write(void)
{
    int             fd  = make_file("a.bin", 2, O_RDWR);
    hipFileHandle_t fh  = must_register(fd);
    void           *dev = dev_alloc(DEV_SIZE);
    dev_fill(dev, 4096, 0xcd);
    close(fd);
    int other = make_file("other.bin", 3, O_RDWR);
    if (other != fd && (dup2(other, fd) != fd || close(other) != 0)) {
        setup_failed("dup2: %s", strerror(errno));
    }
    errno     = 0;
    outcome o = got_io(hipFileWrite(fh, dev, 4096, 0, 0));
    post(file_intact("other.bin", 3), "the file now behind the descriptor number changed");
    post(file_intact("a.bin", 2), "the closed file changed");
    return o;
}

static outcome
fd_number_reused_read(void)
{
    int             fd  = make_file("a.bin", 2, O_RDWR);
    hipFileHandle_t fh  = must_register(fd);
    void           *dev = dev_alloc(DEV_SIZE);
    close(fd);
    int other = make_file("other.bin", 3, O_RDWR);
    if (other != fd && (dup2(other, fd) != fd || close(other) != 0)) {
        setup_failed("dup2: %s", strerror(errno));
    }
    errno = 0;
    return got_io(hipFileRead(fh, dev, 4096, 0, 0));
}

/* ------------------------------------------------------------------------ */
/* handle: stale and garbage hipFileHandle_t                                 */
/* ------------------------------------------------------------------------ */

static outcome
handle_read_deregistered(void)
{
    hipFileHandle_t fh  = good_handle();
    void           *dev = dev_alloc(DEV_SIZE);
    hipFileHandleDeregister(fh);
    return got_io(hipFileRead(fh, dev, 4096, 0, 0));
}

static outcome
handle_write_deregistered(void)
{
    hipFileHandle_t fh  = good_handle();
    void           *dev = dev_alloc(DEV_SIZE);
    hipFileHandleDeregister(fh);
    outcome o = got_io(hipFileWrite(fh, dev, 4096, 0, 0));
    post(file_intact("good.bin", 1), "the file changed");
    return o;
}

static outcome
handle_read_null(void)
{
    hipFileHandle_t fh  = good_handle();
    void           *dev = dev_alloc(DEV_SIZE);
    outcome         o   = got_io(hipFileRead(NULL, dev, 4096, 0, 0));
    post_good_read(fh);
    return o;
}

static outcome
handle_write_null(void)
{
    hipFileHandle_t fh  = good_handle();
    void           *dev = dev_alloc(DEV_SIZE);
    outcome         o   = got_io(hipFileWrite(NULL, dev, 4096, 0, 0));
    post_good_read(fh);
    return o;
}

static outcome
handle_read_garbage(void)
{
    hipFileHandle_t fh  = good_handle();
    void           *dev = dev_alloc(DEV_SIZE);
    outcome         o   = got_io(hipFileRead(GARBAGE_HANDLE, dev, 4096, 0, 0));
    post_good_read(fh);
    return o;
}

static outcome
handle_read_all_ones(void)
{
    hipFileHandle_t fh  = good_handle();
    void           *dev = dev_alloc(DEV_SIZE);
    outcome         o   = got_io(hipFileRead((hipFileHandle_t)(uintptr_t)UINTPTR_MAX, dev, 4096, 0, 0));
    post_good_read(fh);
    return o;
}

static outcome
handle_read_neighbour(void)
{
    hipFileHandle_t fh  = good_handle();
    void           *dev = dev_alloc(DEV_SIZE);
    outcome o = got_io(hipFileRead((hipFileHandle_t)((uintptr_t)fh + 1), dev, 4096, 0, 0));
    outcome p = got_io(hipFileRead((hipFileHandle_t)((uintptr_t)fh - 1), dev, 4096, 0, 0));
    post(p.ret == o.ret, "the handle below the live one answered %zd, the one above %zd", p.ret, o.ret);
    post_good_read(fh);
    return o;
}

static outcome
handle_read_stack_address(void)
{
    hipFileHandle_t fh  = good_handle();
    void           *dev = dev_alloc(DEV_SIZE);
    int             local[4];
    memset(local, 0, sizeof local);
    outcome o = got_io(hipFileRead((hipFileHandle_t)local, dev, 4096, 0, 0));
    post_good_read(fh);
    return o;
}

static outcome
handle_read_random(void)
{
    hipFileHandle_t fh  = good_handle();
    void           *dev = dev_alloc(DEV_SIZE);
    outcome         o   = got_nothing();
    for (int i = 0; i < 64; i++) {
        hipFileHandle_t garbage = (hipFileHandle_t)(uintptr_t)next_random();
        if (garbage == fh) {
            continue;
        }
        o = got_io(hipFileRead(garbage, dev, 4096, 0, 0));
        if (o.ret != -(ssize_t)hipFileHandleNotRegistered) {
            break;
        }
    }
    post_good_read(fh);
    return o;
}

static outcome
handle_read_closed_driver(void)
{
    hipFileHandle_t fh  = good_handle();
    void           *dev = dev_alloc(DEV_SIZE);
    must_close_driver();
    errno     = 0;
    outcome o = got_io(hipFileRead(fh, dev, 4096, 0, 0));
    post_use_count(0);
    return o;
}

static outcome
handle_write_closed_driver(void)
{
    hipFileHandle_t fh  = good_handle();
    void           *dev = dev_alloc(DEV_SIZE);
    must_close_driver();
    errno     = 0;
    outcome o = got_io(hipFileWrite(fh, dev, 4096, 0, 0));
    post_use_count(0);
    post(file_intact("good.bin", 1), "the file changed");
    return o;
}

static outcome
handle_read_garbage_never_opened(void)
{
    void *dev = dev_alloc(DEV_SIZE);
    errno     = 0;
    outcome o = got_io(hipFileRead(GARBAGE_HANDLE, dev, 4096, 0, 0));
    post_use_count(0);
    return o;
}

static outcome
handle_read_after_reopen(void)
{
    hipFileHandle_t fh  = good_handle();
    void           *dev = dev_alloc(DEV_SIZE);
    must_close_driver();
    must_open_driver();
    outcome o = got_io(hipFileRead(fh, dev, 4096, 0, 0));
    post_use_count(1);
    return o;
}

static outcome
handle_deregister_null(void)
{
    hipFileHandle_t fh = good_handle();
    hipFileHandleDeregister(NULL);
    post_use_count(1);
    post_good_read(fh);
    return got_nothing();
}

static outcome
handle_deregister_garbage(void)
{
    hipFileHandle_t fh = good_handle();
    hipFileHandleDeregister(GARBAGE_HANDLE);
    hipFileHandleDeregister((hipFileHandle_t)(uintptr_t)UINTPTR_MAX);
    post_use_count(1);
    post_good_read(fh);
    return got_nothing();
}

static outcome
handle_deregister_random(void)
{
    hipFileHandle_t fh = good_handle();
    for (int i = 0; i < 64; i++) {
        hipFileHandle_t garbage = (hipFileHandle_t)(uintptr_t)next_random();
        if (garbage != fh) {
            hipFileHandleDeregister(garbage);
        }
    }
    post_use_count(1);
    post_good_read(fh);
    return got_nothing();
}

static outcome
handle_deregister_twice(void)
{
    int             fd = make_file("a.bin", 2, O_RDWR);
    hipFileHandle_t fh = must_register(fd);
    hipFileHandle_t good = good_handle();
    hipFileHandleDeregister(fh);
    hipFileHandleDeregister(fh);
    post_use_count(1);
    post_good_read(good);
    hipFileHandle_t again = NULL;
    hipFileError_t  e     = register_fd(&again, fd);
    post(e.err == hipFileSuccess, "registering the descriptor again = %s", code_name(e.err));
    return got_nothing();
}

static outcome
handle_deregister_closed_driver(void)
{
    hipFileHandle_t fh = good_handle();
    must_close_driver();
    hipFileHandleDeregister(fh);
    post_use_count(0);
    return got_nothing();
}

static outcome
handle_deregister_never_opened(void)
{
    hipFileHandleDeregister(GARBAGE_HANDLE);
    post_use_count(0);
    return got_nothing();
}

/* ------------------------------------------------------------------------ */
/* buffer: hipFileBufRegister / hipFileBufDeregister                         */
/* ------------------------------------------------------------------------ */

static outcome
buf_register_expect_open(const void *ptr, size_t len)
{
    outcome o = got_pair(hipFileBufRegister(ptr, len, 0));
    /* Upstream opens the driver before it looks at the arguments. */
    post_use_count(1);
    return o;
}

static outcome
buf_register_null(void)
{
    return buf_register_expect_open(NULL, 4096);
}

static outcome
buf_register_null_zero(void)
{
    return buf_register_expect_open(NULL, 0);
}

static outcome
buf_register_zero_length(void)
{
    return buf_register_expect_open(dev_alloc(DEV_SIZE), 0);
}

static outcome
buf_register_size_max(void)
{
    return buf_register_expect_open(dev_alloc(DEV_SIZE), SIZE_MAX);
}

static outcome
buf_register_past_allocation(void)
{
    return buf_register_expect_open(dev_alloc(DEV_SIZE), DEV_SIZE + 1);
}

static outcome
buf_register_interior(void)
{
    char *dev = (char *)dev_alloc(DEV_SIZE);
    return buf_register_expect_open(dev + 4096, DEV_SIZE - 4096);
}

static outcome
buf_register_interior_past_end(void)
{
    char *dev = (char *)dev_alloc(DEV_SIZE);
    return buf_register_expect_open(dev + 4096, DEV_SIZE);
}

static outcome
buf_register_malloc(void)
{
    return buf_register_expect_open(calloc(1, DEV_SIZE), DEV_SIZE);
}

static outcome
buf_register_stack(void)
{
    char local[8192];
    memset(local, 0, sizeof local);
    return buf_register_expect_open(local, sizeof local);
}

static outcome
buf_register_pinned(void)
{
    void *pinned = NULL;
    if (hipHostMalloc(&pinned, DEV_SIZE, 0) != hipSuccess || pinned == NULL) {
        setup_failed("hipHostMalloc");
    }
    return buf_register_expect_open(pinned, DEV_SIZE);
}

static outcome
buf_register_managed(void)
{
    void *managed = NULL;
    if (hipMallocManaged(&managed, DEV_SIZE, hipMemAttachGlobal) != hipSuccess || managed == NULL) {
        setup_failed("hipMallocManaged");
    }
    return buf_register_expect_open(managed, DEV_SIZE);
}

static outcome
buf_register_freed(void)
{
    void *dev = dev_alloc(DEV_SIZE);
    if (hipFree(dev) != hipSuccess) {
        setup_failed("hipFree");
    }
    return buf_register_expect_open(dev, DEV_SIZE);
}

static outcome
buf_register_garbage_pointer(void)
{
    return buf_register_expect_open(GARBAGE_POINTER, 4096);
}

static outcome
buf_register_twice(void)
{
    void          *dev = dev_alloc(DEV_SIZE);
    hipFileError_t e   = hipFileBufRegister(dev, DEV_SIZE, 0);
    post(e.err == hipFileSuccess, "first hipFileBufRegister = %s", code_name(e.err));
    return buf_register_expect_open(dev, DEV_SIZE);
}

static outcome
buf_register_twice_other_length(void)
{
    void          *dev = dev_alloc(DEV_SIZE);
    hipFileError_t e   = hipFileBufRegister(dev, 4096, 0);
    post(e.err == hipFileSuccess, "first hipFileBufRegister = %s", code_name(e.err));
    return buf_register_expect_open(dev, DEV_SIZE);
}

static outcome
buf_register_overlapping(void)
{
    char          *dev = (char *)dev_alloc(DEV_SIZE);
    hipFileError_t e   = hipFileBufRegister(dev, DEV_SIZE, 0);
    post(e.err == hipFileSuccess, "first hipFileBufRegister = %s", code_name(e.err));
    return buf_register_expect_open(dev + 4096, 8192);
}

static outcome
buf_register_odd_flags(void)
{
    outcome o = got_pair(hipFileBufRegister(dev_alloc(DEV_SIZE), DEV_SIZE, -1));
    post_use_count(1);
    return o;
}

static outcome
buf_overlapping_io_uses_its_own_length(void)
{
    hipFileHandle_t fh  = good_handle();
    char           *dev = (char *)dev_alloc(DEV_SIZE);
    hipFileError_t  a   = hipFileBufRegister(dev, DEV_SIZE, 0);
    hipFileError_t  b   = hipFileBufRegister(dev + 4096, 4096, 0);
    if (a.err != hipFileSuccess || b.err != hipFileSuccess) {
        setup_failed("hipFileBufRegister = %s / %s", code_name(a.err), code_name(b.err));
    }
    outcome o = got_io(hipFileRead(fh, dev + 4096, 8192, 0, 0));
    post_good_read(fh);
    return o;
}

static outcome
buf_deregister_null_open(void)
{
    must_open_driver();
    return got_pair(hipFileBufDeregister(NULL));
}

static outcome
buf_deregister_null_closed(void)
{
    outcome o = got_pair(hipFileBufDeregister(NULL));
    post_use_count(0);
    return o;
}

static outcome
buf_deregister_never_registered(void)
{
    must_open_driver();
    return got_pair(hipFileBufDeregister(dev_alloc(DEV_SIZE)));
}

static outcome
buf_deregister_garbage(void)
{
    must_open_driver();
    return got_pair(hipFileBufDeregister(GARBAGE_POINTER));
}

static outcome
buf_deregister_twice(void)
{
    void          *dev = dev_alloc(DEV_SIZE);
    hipFileError_t r   = hipFileBufRegister(dev, DEV_SIZE, 0);
    hipFileError_t d   = hipFileBufDeregister(dev);
    if (r.err != hipFileSuccess || d.err != hipFileSuccess) {
        setup_failed("register %s, deregister %s", code_name(r.err), code_name(d.err));
    }
    outcome o = got_pair(hipFileBufDeregister(dev));
    post_use_count(1);
    return o;
}

static outcome
buf_deregister_interior(void)
{
    char          *dev = (char *)dev_alloc(DEV_SIZE);
    hipFileError_t r   = hipFileBufRegister(dev, DEV_SIZE, 0);
    if (r.err != hipFileSuccess) {
        setup_failed("hipFileBufRegister = %s", code_name(r.err));
    }
    outcome        o = got_pair(hipFileBufDeregister(dev + 4096));
    hipFileError_t d = hipFileBufDeregister(dev);
    post(d.err == hipFileSuccess, "deregistering the real base afterwards = %s", code_name(d.err));
    return o;
}

static outcome
buf_deregister_closed_driver(void)
{
    void          *dev = dev_alloc(DEV_SIZE);
    hipFileError_t r   = hipFileBufRegister(dev, DEV_SIZE, 0);
    if (r.err != hipFileSuccess) {
        setup_failed("hipFileBufRegister = %s", code_name(r.err));
    }
    must_close_driver();
    outcome o = got_pair(hipFileBufDeregister(dev));
    post_use_count(0);
    return o;
}

static outcome
buf_deregister_after_reopen(void)
{
    void          *dev = dev_alloc(DEV_SIZE);
    hipFileError_t r   = hipFileBufRegister(dev, DEV_SIZE, 0);
    if (r.err != hipFileSuccess) {
        setup_failed("hipFileBufRegister = %s", code_name(r.err));
    }
    must_close_driver();
    must_open_driver();
    return got_pair(hipFileBufDeregister(dev));
}

static outcome
buf_deregister_after_hip_free(void)
{
    void          *dev = dev_alloc(DEV_SIZE);
    hipFileError_t r   = hipFileBufRegister(dev, DEV_SIZE, 0);
    if (r.err != hipFileSuccess || hipFree(dev) != hipSuccess) {
        setup_failed("hipFileBufRegister = %s, or hipFree failed", code_name(r.err));
    }
    return got_pair(hipFileBufDeregister(dev));
}

/* ------------------------------------------------------------------------ */
/* memory: what the buffer pointer points at                                 */
/* ------------------------------------------------------------------------ */

static outcome
read_into(void *buffer, size_t size)
{
    hipFileHandle_t fh = good_handle();
    errno              = 0;
    outcome o          = got_io(hipFileRead(fh, buffer, size, 0, 0));
    post_good_read(fh);
    return o;
}

static outcome
write_from(const void *buffer, size_t size)
{
    hipFileHandle_t fh = good_handle();
    errno              = 0;
    outcome o          = got_io(hipFileWrite(fh, buffer, size, 0, 0));
    if (o.ret < 0) {
        post(file_intact("good.bin", 1), "the failed write changed the file");
    }
    return o;
}

static outcome
mem_read_null(void)
{
    return read_into(NULL, 4096);
}

static outcome
mem_write_null(void)
{
    return write_from(NULL, 4096);
}

static outcome
mem_read_null_size_zero(void)
{
    return read_into(NULL, 0);
}

static outcome
mem_read_malloc(void)
{
    void   *host = malloc(DEV_SIZE);
    outcome o    = read_into(host, 4096);
    free(host);
    return o;
}

static outcome
mem_write_malloc(void)
{
    void *host = calloc(1, DEV_SIZE);
    return write_from(host, 4096);
}

static outcome
mem_read_stack(void)
{
    char local[8192];
    memset(local, 0x5a, sizeof local);
    outcome o = read_into(local, 4096);
    int     same = 1;
    for (size_t i = 0; i < sizeof local; i++) {
        same = same && local[i] == 0x5a;
    }
    post(same, "the refused read changed the stack buffer");
    return o;
}

static outcome
mem_write_stack(void)
{
    char local[8192];
    memset(local, 0x5a, sizeof local);
    return write_from(local, 4096);
}

static outcome
mem_read_pinned(void)
{
    void *pinned = NULL;
    if (hipHostMalloc(&pinned, DEV_SIZE, 0) != hipSuccess || pinned == NULL) {
        setup_failed("hipHostMalloc");
    }
    return read_into(pinned, 4096);
}

static outcome
mem_write_pinned(void)
{
    void *pinned = NULL;
    if (hipHostMalloc(&pinned, DEV_SIZE, 0) != hipSuccess || pinned == NULL) {
        setup_failed("hipHostMalloc");
    }
    return write_from(pinned, 4096);
}

static outcome
mem_read_managed(void)
{
    void *managed = NULL;
    if (hipMallocManaged(&managed, DEV_SIZE, hipMemAttachGlobal) != hipSuccess || managed == NULL) {
        setup_failed("hipMallocManaged");
    }
    return read_into(managed, 4096);
}

static outcome
mem_read_freed(void)
{
    void *dev = dev_alloc(DEV_SIZE);
    if (hipFree(dev) != hipSuccess) {
        setup_failed("hipFree");
    }
    return read_into(dev, 4096);
}

static outcome
mem_write_freed(void)
{
    void *dev = dev_alloc(DEV_SIZE);
    if (hipFree(dev) != hipSuccess) {
        setup_failed("hipFree");
    }
    return write_from(dev, 4096);
}

static outcome
mem_read_garbage_pointer(void)
{
    return read_into(GARBAGE_POINTER, 4096);
}

static outcome
mem_read_unmapped_page(void)
{
    char *page = (char *)guarded(0) ; /* the inaccessible page itself */
    return read_into(page, 4096);
}

static outcome
mem_read_interior(void)
{
    char *dev = (char *)dev_alloc(DEV_SIZE);
    return read_into(dev + 4096, 8192);
}

static outcome
mem_write_interior(void)
{
    char *dev = (char *)dev_alloc(DEV_SIZE);
    return write_from(dev + 4096, 8192);
}

static outcome
mem_read_interior_of_registered(void)
{
    char          *dev = (char *)dev_alloc(DEV_SIZE);
    hipFileError_t r   = hipFileBufRegister(dev, DEV_SIZE, 0);
    if (r.err != hipFileSuccess) {
        setup_failed("hipFileBufRegister = %s", code_name(r.err));
    }
    return read_into(dev + 4096, 8192);
}

static outcome
mem_read_interior_past_end(void)
{
    char *dev = (char *)dev_alloc(DEV_SIZE);
    return read_into(dev + DEV_SIZE - 4096, 8192);
}

/* ------------------------------------------------------------------------ */
/* range: offsets and sizes                                                  */
/* ------------------------------------------------------------------------ */

typedef enum { READ, WRITE } direction;

/* One IO on "good.bin" with a fresh (optionally registered) device buffer. */
static outcome
io_with(direction dir, int registered, size_t size, hoff_t file_offset, hoff_t buffer_offset)
{
    hipFileHandle_t fh  = good_handle();
    void           *dev = dev_alloc(DEV_SIZE);
    if (registered) {
        hipFileError_t r = hipFileBufRegister(dev, DEV_SIZE, 0);
        if (r.err != hipFileSuccess) {
            setup_failed("hipFileBufRegister = %s", code_name(r.err));
        }
    }
    errno     = 0;
    outcome o = got_io(dir == READ ? hipFileRead(fh, dev, size, file_offset, buffer_offset)
                                   : hipFileWrite(fh, dev, size, file_offset, buffer_offset));
    if (dir == WRITE && o.ret < 0) {
        post(file_intact("good.bin", 1), "the failed write changed the file");
    }
    post_good_read(fh);
    return o;
}

static outcome
range_read_negative_file_offset(void)
{
    return io_with(READ, 0, 4096, -4096, 0);
}

static outcome
range_write_negative_file_offset(void)
{
    return io_with(WRITE, 0, 4096, -4096, 0);
}

static outcome
range_read_int64_min_file_offset(void)
{
    return io_with(READ, 0, 4096, INT64_MIN, 0);
}

static outcome
range_read_negative_buffer_offset(void)
{
    return io_with(READ, 0, 4096, 0, -1);
}

static outcome
range_write_negative_buffer_offset(void)
{
    return io_with(WRITE, 0, 4096, 0, -4096);
}

static outcome
range_read_negative_buffer_offset_registered(void)
{
    return io_with(READ, 1, 4096, 0, -4096);
}

static outcome
range_read_buffer_offset_at_end(void)
{
    return io_with(READ, 0, 4096, 0, (hoff_t)DEV_SIZE);
}

static outcome
range_read_buffer_offset_at_end_registered(void)
{
    return io_with(READ, 1, 4096, 0, (hoff_t)DEV_SIZE);
}

static outcome
range_write_buffer_offset_past_end(void)
{
    return io_with(WRITE, 0, 4096, 0, (hoff_t)DEV_SIZE + 4096);
}

static outcome
range_read_buffer_offset_int64_max(void)
{
    return io_with(READ, 0, 4096, 0, INT64_MAX);
}

static outcome
range_read_buffer_offset_int64_max_registered(void)
{
    return io_with(READ, 1, 4096, 0, INT64_MAX);
}

static outcome
range_read_size_past_buffer(void)
{
    return io_with(READ, 0, DEV_SIZE + 4096, 0, 0);
}

static outcome
range_write_size_past_buffer(void)
{
    return io_with(WRITE, 0, DEV_SIZE + 4096, 0, 0);
}

static outcome
range_read_size_past_buffer_registered(void)
{
    return io_with(READ, 1, DEV_SIZE + 4096, 0, 0);
}

static outcome
range_read_offset_plus_size_past_buffer(void)
{
    return io_with(READ, 0, 8192, 0, (hoff_t)DEV_SIZE - 4096);
}

static outcome
range_read_size_max(void)
{
    return io_with(READ, 0, SIZE_MAX, 0, 0);
}

static outcome
range_write_size_max(void)
{
    return io_with(WRITE, 0, SIZE_MAX, 0, 0);
}

static outcome
range_read_size_max_registered(void)
{
    return io_with(READ, 1, SIZE_MAX, 0, 0);
}

static outcome
range_read_size_max_with_offset(void)
{
    return io_with(READ, 0, SIZE_MAX, 0, 4096);
}

static outcome
range_write_above_2gib_small_buffer(void)
{
    return io_with(WRITE, 0, MAX_RW + 4096, 0, 0);
}

/* A read of more than 2 GiB - 4 KiB into an allocation that holds all of it: Linux moves at most
 * MAX_RW_COUNT bytes per call and the file holds FILE_SIZE, so the read comes back short. (The
 * simulated runtime touches all of a hipMalloc, so this is the one case that costs 2 GiB.) */
static outcome
range_read_above_2gib(void)
{
    size_t          size = ((size_t)2 << 30) + 4096;
    hipFileHandle_t fh   = good_handle();
    void           *dev  = dev_alloc(size);
    errno                = 0;
    outcome o            = got_io(hipFileRead(fh, dev, size, 0, 0));
    if (hipFree(dev) != hipSuccess) {
        post(0, "hipFree of the 2 GiB buffer failed");
    }
    post_good_read(fh);
    return o;
}

static outcome
range_read_size_zero(void)
{
    return io_with(READ, 0, 0, 0, 0);
}

static outcome
range_write_size_zero(void)
{
    return io_with(WRITE, 0, 0, 0, 0);
}

static outcome
range_read_size_zero_at_buffer_end(void)
{
    return io_with(READ, 0, 0, 0, (hoff_t)DEV_SIZE);
}

static outcome
range_read_at_eof(void)
{
    return io_with(READ, 0, 4096, (hoff_t)FILE_SIZE, 0);
}

static outcome
range_read_past_eof(void)
{
    return io_with(READ, 0, 4096, (hoff_t)(1 << 20), 0);
}

/* The same request through hipFile and through pread/pwrite of a host buffer on a twin file. */
static outcome
kernel_twin(direction dir, hoff_t file_offset)
{
    int            twin = make_file("twin.bin", 1, O_RDWR);
    unsigned char *host = (unsigned char *)calloc(1, 4096);
    errno               = 0;
    ssize_t ref         = dir == READ ? pread(twin, host, 4096, file_offset) : pwrite(twin, host, 4096, file_offset);
    int     ref_err     = errno;
    free(host);
    close(twin);
    outcome o = io_with(dir, 0, 4096, file_offset, 0);
    o.ref_ret = ref;
    o.ref_err = ref_err;
    return o;
}

static outcome
range_read_file_offset_huge(void)
{
    return kernel_twin(READ, (hoff_t)1 << 62);
}

static outcome
range_write_file_offset_huge(void)
{
    return kernel_twin(WRITE, (hoff_t)1 << 62);
}

static outcome
range_read_file_offset_int64_max(void)
{
    return kernel_twin(READ, INT64_MAX - 4095);
}

static outcome
range_write_file_offset_int64_max(void)
{
    return kernel_twin(WRITE, INT64_MAX - 4095);
}

/* ------------------------------------------------------------------------ */
/* param: hipFileGet/SetParameter*                                           */
/* ------------------------------------------------------------------------ */

#define SIZE_PARAM(v) ((hipFileSizeTConfigParameter_t)(v))
#define BOOL_PARAM(v) ((hipFileBoolConfigParameter_t)(v))
#define STRING_PARAM(v) ((hipFileStringConfigParameter_t)(v))

static outcome
param_set_size_unknown_12(void)
{
    outcome o = got_pair(hipFileSetParameterSizeT(SIZE_PARAM(12), 1));
    post_use_count(0);
    return o;
}

static outcome
param_set_size_unknown_negative(void)
{
    return got_pair(hipFileSetParameterSizeT(SIZE_PARAM(-1), 1));
}

static outcome
param_set_size_unknown_int_max(void)
{
    return got_pair(hipFileSetParameterSizeT(SIZE_PARAM(INT_MAX), 1));
}

static outcome
param_set_size_while_open(void)
{
    must_open_driver();
    return got_pair(hipFileSetParameterSizeT(hipFileParamPropertiesMaxDirectIOSizeKB, 1024));
}

static outcome
param_set_size_while_implicitly_open(void)
{
    hipFileHandle_t fh = good_handle();
    (void)fh;
    return got_pair(hipFileSetParameterSizeT(hipFileParamExecutionMaxIOThreads, 2));
}

static outcome
param_set_size_after_close(void)
{
    must_open_driver();
    must_close_driver();
    return got_pair(hipFileSetParameterSizeT(hipFileParamPropertiesMaxDirectIOSizeKB, 1024));
}

/* Stage an impossible value, then open the driver and read: the open and the IO must work. */
static outcome
stage_then_use(hipFileSizeTConfigParameter_t param, size_t value)
{
    outcome         o  = got_pair(hipFileSetParameterSizeT(param, value));
    hipFileError_t  e  = hipFileDriverOpen();
    post(e.err == hipFileSuccess || e.err == hipFileDriverSetupError, "hipFileDriverOpen afterwards = %s",
         code_name(e.err));
    if (e.err == hipFileSuccess) {
        post_good_read(good_handle());
    }
    return o;
}

static outcome
param_max_direct_io_size_max(void)
{
    return stage_then_use(hipFileParamPropertiesMaxDirectIOSizeKB, SIZE_MAX);
}

static outcome
param_max_direct_io_16gib(void)
{
    return stage_then_use(hipFileParamPropertiesMaxDirectIOSizeKB, (size_t)16 << 20);
}

static outcome
param_per_buffer_cache_16gib(void)
{
    return stage_then_use(hipFileParamPropertiesPerBufferCacheSizeKB, (size_t)16 << 20);
}

static outcome
param_pinned_size_max(void)
{
    return stage_then_use(hipFileParamPropertiesMaxDevicePinnedMemSizeKB, SIZE_MAX);
}

static outcome
param_pinned_above_physical_memory(void)
{
    long   pages = sysconf(_SC_PHYS_PAGES);
    long   page  = sysconf(_SC_PAGESIZE);
    size_t kib   = (size_t)pages / 1024 * (size_t)page * 2;
    return stage_then_use(hipFileParamPropertiesMaxDevicePinnedMemSizeKB, kib);
}

static outcome
param_io_threads_size_max(void)
{
    return stage_then_use(hipFileParamExecutionMaxIOThreads, SIZE_MAX);
}

static outcome
param_max_direct_io_zero(void)
{
    return stage_then_use(hipFileParamPropertiesMaxDirectIOSizeKB, 0);
}

static outcome
param_pinned_zero(void)
{
    return stage_then_use(hipFileParamPropertiesMaxDevicePinnedMemSizeKB, 0);
}

static outcome
param_get_size_null(void)
{
    return got_pair(hipFileGetParameterSizeT(hipFileParamExecutionMaxIOThreads, NULL));
}

static outcome
param_get_size_unknown(void)
{
    size_t value = 12345;
    outcome o    = got_pair(hipFileGetParameterSizeT(SIZE_PARAM(12), &value));
    post(value == 12345, "the refused call wrote %zu", value);
    return o;
}

static outcome
param_get_size_unknown_null(void)
{
    return got_pair(hipFileGetParameterSizeT(SIZE_PARAM(-1), NULL));
}

static outcome
param_get_size_null_open(void)
{
    must_open_driver();
    return got_pair(hipFileGetParameterSizeT(hipFileParamPropertiesMaxDirectIOSizeKB, NULL));
}

static outcome
param_set_bool_unknown(void)
{
    return got_pair(hipFileSetParameterBool(BOOL_PARAM(12), true));
}

static outcome
param_set_bool_unknown_negative(void)
{
    return got_pair(hipFileSetParameterBool(BOOL_PARAM(-1), false));
}

static outcome
param_set_bool_while_open(void)
{
    must_open_driver();
    return got_pair(hipFileSetParameterBool(hipFileParamPropertiesUsePollMode, true));
}

static outcome
param_get_bool_null(void)
{
    return got_pair(hipFileGetParameterBool(hipFileParamPropertiesUsePollMode, NULL));
}

static outcome
param_get_bool_unknown(void)
{
    bool value = true;
    return got_pair(hipFileGetParameterBool(BOOL_PARAM(99), &value));
}

static outcome
param_set_string_null(void)
{
    return got_pair(hipFileSetParameterString(hipFileParamLogDir, NULL));
}

static outcome
param_set_string_unknown(void)
{
    return got_pair(hipFileSetParameterString(STRING_PARAM(3), "x"));
}

static outcome
param_set_string_unknown_null(void)
{
    return got_pair(hipFileSetParameterString(STRING_PARAM(-1), NULL));
}

static outcome
param_set_string_while_open(void)
{
    must_open_driver();
    return got_pair(hipFileSetParameterString(hipFileParamLoggingLevel, "ERROR"));
}

static outcome
param_set_string_long(void)
{
    size_t len  = (size_t)1 << 20;
    char  *text = (char *)malloc(len + 1);
    memset(text, 'x', len);
    text[len]  = '\0';
    outcome o  = got_pair(hipFileSetParameterString(hipFileParamLogDir, text));
    free(text);
    char small[16];
    memset(small, 0x5a, sizeof small);
    hipFileError_t g = hipFileGetParameterString(hipFileParamLogDir, small, (int)sizeof small);
    post(g.err != hipFileSuccess || memchr(small, '\0', sizeof small) != NULL,
         "a 16-byte read of the string came back unterminated");
    return o;
}

/* Stage "WARN", then read it into a guarded buffer of `len` bytes (`room` usable). */
static outcome
get_string(char *buffer, int len)
{
    hipFileError_t s = hipFileSetParameterString(hipFileParamLoggingLevel, "WARN");
    if (s.err != hipFileSuccess) {
        setup_failed("hipFileSetParameterString = %s", code_name(s.err));
    }
    return got_pair(hipFileGetParameterString(hipFileParamLoggingLevel, buffer, len));
}

static outcome
param_get_string_null(void)
{
    return get_string(NULL, 64);
}

static outcome
param_get_string_len_zero(void)
{
    return get_string((char *)guarded(0), 0);
}

static outcome
param_get_string_len_negative(void)
{
    char *buffer = (char *)guarded(8);
    return get_string(buffer, -8);
}

static outcome
param_get_string_too_small(void)
{
    char *buffer = (char *)guarded(4); /* "WARN" needs 5 bytes with its NUL */
    memset(buffer, 0x5a, 4);
    outcome o = get_string(buffer, 4);
    return o;
}

static outcome
param_get_string_exact_fit(void)
{
    char   *buffer = (char *)guarded(5);
    outcome o      = get_string(buffer, 5);
    post(o.pair.err != hipFileSuccess || strcmp(buffer, "WARN") == 0, "read back \"%.5s\"", buffer);
    return o;
}

static outcome
param_get_string_unknown(void)
{
    char buffer[64];
    return got_pair(hipFileGetParameterString(STRING_PARAM(7), buffer, (int)sizeof buffer));
}

/* ------------------------------------------------------------------------ */
/* stats                                                                     */
/* ------------------------------------------------------------------------ */

static outcome
stats_l1_null_closed(void)
{
    outcome o = got_pair(hipFileGetStatsL1(NULL));
    post_use_count(0);
    return o;
}

static outcome
stats_l2_null_closed(void)
{
    return got_pair(hipFileGetStatsL2(NULL));
}

static outcome
stats_l3_null_closed(void)
{
    return got_pair(hipFileGetStatsL3(NULL));
}

static outcome
stats_l1_null_open(void)
{
    must_open_driver();
    return got_pair(hipFileGetStatsL1(NULL));
}

static outcome
stats_l2_null_open(void)
{
    must_open_driver();
    return got_pair(hipFileGetStatsL2(NULL));
}

static outcome
stats_l3_null_open(void)
{
    must_open_driver();
    return got_pair(hipFileGetStatsL3(NULL));
}

static outcome
stats_l1_closed(void)
{
    hipFileStatsLevel1_t *s = (hipFileStatsLevel1_t *)guarded(sizeof *s);
    outcome               o = got_pair(hipFileGetStatsL1(s));
    post_use_count(0);
    return o;
}

static outcome
stats_l3_exact_fit(void)
{
    hipFileHandle_t       fh = good_handle();
    hipFileStatsLevel3_t *s  = (hipFileStatsLevel3_t *)guarded(sizeof *s);
    post_good_read(fh);
    return got_pair(hipFileGetStatsL3(s));
}

static outcome
stats_l2_exact_fit(void)
{
    must_open_driver();
    hipFileStatsLevel2_t *s = (hipFileStatsLevel2_t *)guarded(sizeof *s);
    return got_pair(hipFileGetStatsL2(s));
}

/* ------------------------------------------------------------------------ */
/* version and error strings                                                 */
/* ------------------------------------------------------------------------ */

static outcome
version_all_null(void)
{
    return got_pair(hipFileGetVersion(NULL, NULL, NULL));
}

static outcome
version_major_null(void)
{
    unsigned minor = 99, patch = 99;
    outcome  o     = got_pair(hipFileGetVersion(NULL, &minor, &patch));
    post(minor == HIPFILE_VERSION_MINOR && patch == HIPFILE_VERSION_PATCH, "minor %u patch %u", minor, patch);
    return o;
}

static outcome
version_minor_null(void)
{
    unsigned major = 99, patch = 99;
    outcome  o     = got_pair(hipFileGetVersion(&major, NULL, &patch));
    post(major == HIPFILE_VERSION_MAJOR && patch == HIPFILE_VERSION_PATCH, "major %u patch %u", major, patch);
    return o;
}

static outcome
version_patch_null(void)
{
    unsigned major = 99, minor = 99;
    outcome  o     = got_pair(hipFileGetVersion(&major, &minor, NULL));
    post(major == HIPFILE_VERSION_MAJOR && minor == HIPFILE_VERSION_MINOR, "major %u minor %u", major, minor);
    return o;
}

static outcome
error_string(int code)
{
    const char *first  = hipFileGetOpErrorString((hipFileOpError_t)code);
    const char *second = hipFileGetOpErrorString((hipFileOpError_t)code);
    post(first == second || (first && second && strcmp(first, second) == 0), "two calls gave different text");
    return got_text(first);
}

static outcome
errstr_minus_one(void)
{
    return error_string(-1);
}

static outcome
errstr_one(void)
{
    return error_string(1);
}

static outcome
errstr_below_base(void)
{
    return error_string(HIPFILE_BASE_ERR);
}

static outcome
errstr_unassigned_5021(void)
{
    return error_string(HIPFILE_BASE_ERR + 21);
}

static outcome
errstr_unassigned_5032(void)
{
    return error_string(HIPFILE_BASE_ERR + 32);
}

static outcome
errstr_max_error(void)
{
    return error_string(hipFileIOMaxError);
}

static outcome
errstr_past_max(void)
{
    return error_string(hipFileIOMaxError + 1);
}

static outcome
errstr_int_max(void)
{
    return error_string(INT_MAX);
}

static outcome
errstr_int_min(void)
{
    return error_string(INT_MIN);
}

static outcome
errstr_negated_code(void)
{
    return error_string(-(int)hipFileInvalidValue);
}

static outcome
errstr_every_code(void)
{
    const char *worst = "";
    for (int code = -100; code < 5200; code++) {
        const char *text = hipFileGetOpErrorString((hipFileOpError_t)code);
        if (!printable(text)) {
            post(0, "code %d: %s", code, text ? "unprintable or empty text" : "NULL");
            worst = text;
            break;
        }
        worst = text;
    }
    return got_text(worst);
}

/* ------------------------------------------------------------------------ */
/* batch; async and stream                                                   */
/* ------------------------------------------------------------------------ */

#define GARBAGE_BATCH ((hipFileBatchHandle_t)(uintptr_t)0xbadbadbad000ull)
#define GARBAGE_STREAM ((hipStream_t)(uintptr_t)0x5eed5eed000ull)

static outcome
batch_setup_null(void)
{
    outcome o = got_pair(hipFileBatchIOSetUp(NULL, 8));
    post_use_count(0);
    return o;
}

static outcome
batch_setup_zero(void)
{
    hipFileBatchHandle_t batch = NULL;
    return got_pair(hipFileBatchIOSetUp(&batch, 0));
}

static outcome
batch_setup_uint_max(void)
{
    hipFileBatchHandle_t batch = NULL;
    must_open_driver();
    return got_pair(hipFileBatchIOSetUp(&batch, UINT_MAX));
}

static outcome
batch_submit_garbage(void)
{
    must_open_driver();
    return got_pair(hipFileBatchIOSubmit(GARBAGE_BATCH, 1, NULL, 0));
}

static outcome
batch_submit_garbage_params(void)
{
    hipFileIOParams_t params[2];
    memset(params, 0xff, sizeof params);
    must_open_driver();
    return got_pair(hipFileBatchIOSubmit(NULL, UINT_MAX, params, UINT_MAX));
}

static outcome
batch_get_status_garbage(void)
{
    must_open_driver();
    return got_pair(hipFileBatchIOGetStatus(GARBAGE_BATCH, 1, NULL, NULL, NULL));
}

static outcome
batch_get_status_min_above_nr(void)
{
    unsigned          nr = 1;
    hipFileIOEvents_t events[1];
    struct timespec   timeout;
    timeout.tv_sec  = -1;
    timeout.tv_nsec = -1;
    must_open_driver();
    return got_pair(hipFileBatchIOGetStatus(NULL, 5, &nr, events, &timeout));
}

static outcome
batch_cancel_garbage(void)
{
    return got_pair(hipFileBatchIOCancel(GARBAGE_BATCH));
}

static outcome
batch_cancel_null(void)
{
    return got_pair(hipFileBatchIOCancel(NULL));
}

static outcome
batch_destroy_garbage(void)
{
    hipFileHandle_t fh = good_handle();
    hipFileBatchIODestroy(GARBAGE_BATCH);
    hipFileBatchIODestroy(NULL);
    post_use_count(1);
    post_good_read(fh);
    return got_nothing();
}

/* A batch of `capacity` entries set up on an open driver. */
static hipFileBatchHandle_t
must_set_up(unsigned capacity)
{
    hipFileBatchHandle_t batch = NULL;
    hipFileError_t       e     = hipFileBatchIOSetUp(&batch, capacity);
    if (e.err != hipFileSuccess || batch == NULL) {
        setup_failed("hipFileBatchIOSetUp(%u) = %s", capacity, code_name(e.err));
    }
    return batch;
}

/* The batch holds no entry: GetStatus with a zero timeout answers none. */
static void
post_batch_empty(hipFileBatchHandle_t batch)
{
    hipFileIOEvents_t events[4];
    unsigned          nr = 4;
    struct timespec   now;
    now.tv_sec       = 0;
    now.tv_nsec      = 0;
    hipFileError_t e = hipFileBatchIOGetStatus(batch, 0, &nr, events, &now);
    post(e.err == hipFileSuccess && nr == 0, "GetStatus afterwards: %s, %u event(s)", code_name(e.err), nr);
}

static outcome
batch_submit_destroyed(void)
{
    hipFileHandle_t      fh    = good_handle();
    void                *dev   = dev_alloc(DEV_SIZE);
    hipFileBatchHandle_t batch = must_set_up(4);
    hipFileBatchIODestroy(batch);
    hipFileIOParams_t params;
    memset(&params, 0, sizeof params);
    params.mode                = hipFileBatch;
    params.opcode              = hipFileBatchWrite;
    params.fh                  = fh;
    params.u.batch.devPtr_base = dev;
    params.u.batch.size        = 4096;
    outcome o                  = got_pair(hipFileBatchIOSubmit(batch, 1, &params, 0));
    post(file_intact("good.bin", 1), "good.bin changed");
    post_good_read(fh);
    return o;
}

static outcome
batch_submit_garbage_entries(void)
{
    hipFileHandle_t      fh    = good_handle();
    hipFileBatchHandle_t batch = must_set_up(4);
    hipFileIOParams_t    params[4];
    memset(params, 0xff, sizeof params);
    outcome o = got_pair(hipFileBatchIOSubmit(batch, 4, params, 0));
    post_batch_empty(batch);
    post(file_intact("good.bin", 1), "good.bin changed");
    post_good_read(fh);
    hipFileBatchIODestroy(batch);
    return o;
}

static outcome
batch_get_status_huge_nsec(void)
{
    hipFileBatchHandle_t batch = NULL;
    hipFileIOEvents_t    events[4];
    unsigned             nr = 4;
    struct timespec      timeout;
    must_open_driver();
    batch           = must_set_up(4);
    timeout.tv_sec  = 0;
    timeout.tv_nsec = LONG_MAX;
    outcome o       = got_pair(hipFileBatchIOGetStatus(batch, 1, &nr, events, &timeout));
    post(nr == 4, "the refused call wrote %u to *nr", nr);
    post_batch_empty(batch);
    hipFileBatchIODestroy(batch);
    return o;
}

static outcome
async_read_all_null(void)
{
    outcome o = got_pair(hipFileReadAsync(NULL, NULL, NULL, NULL, NULL, NULL, NULL));
    post_use_count(1);
    return o;
}

static outcome
async_write_all_null(void)
{
    outcome o = got_pair(hipFileWriteAsync(NULL, NULL, NULL, NULL, NULL, NULL, NULL));
    post_use_count(1);
    return o;
}

static outcome
async_read_garbage(void)
{
    hipFileHandle_t fh        = good_handle();
    size_t          size      = SIZE_MAX;
    hoff_t          file_off  = -1;
    hoff_t          buf_off   = -1;
    ssize_t         bytes     = 12345;
    void           *dev       = dev_alloc(DEV_SIZE);
    outcome o = got_pair(hipFileReadAsync(fh, dev, &size, &file_off, &buf_off, &bytes, GARBAGE_STREAM));
    post(bytes == 12345, "the refused call wrote %zd to bytes_read_p", bytes);
    post_good_read(fh);
    return o;
}

static outcome
async_write_garbage(void)
{
    size_t  size     = 4096;
    hoff_t  file_off = 0;
    hoff_t  buf_off  = 0;
    ssize_t bytes    = 12345;
    must_open_driver();
    outcome o = got_pair(
        hipFileWriteAsync(GARBAGE_HANDLE, GARBAGE_POINTER, &size, &file_off, &buf_off, &bytes, GARBAGE_STREAM));
    post(bytes == 12345, "the refused call wrote %zd to bytes_written_p", bytes);
    return o;
}

static outcome
async_read_garbage_stream(void)
{
    hipFileHandle_t fh       = good_handle();
    size_t          size     = 4096;
    hoff_t          file_off = 0;
    hoff_t          buf_off  = 0;
    ssize_t         bytes    = 12345;
    void           *dev      = dev_alloc(DEV_SIZE);
    outcome o = got_pair(hipFileReadAsync(fh, dev, &size, &file_off, &buf_off, &bytes, GARBAGE_STREAM));
    post(bytes == 12345, "the refused call wrote %zd to bytes_read_p", bytes);
    post_good_read(fh);
    return o;
}

static outcome
stream_register_null(void)
{
    outcome o = got_pair(hipFileStreamRegister(NULL, 0));
    post_use_count(0);
    hipFileError_t again = hipFileStreamDeregister(NULL);
    post(again.err == hipFileSuccess, "hipFileStreamDeregister(NULL) afterwards: %s", code_name(again.err));
    return o;
}

static outcome
stream_register_garbage(void)
{
    return got_pair(hipFileStreamRegister(GARBAGE_STREAM, 0xffffffffu));
}

static outcome
stream_deregister_garbage(void)
{
    must_open_driver();
    return got_pair(hipFileStreamDeregister(GARBAGE_STREAM));
}

static outcome
stream_deregister_null(void)
{
    return got_pair(hipFileStreamDeregister(NULL));
}

/* ------------------------------------------------------------------------ */
/* The table                                                                 */
/* ------------------------------------------------------------------------ */

typedef struct {
    const char *name; /* class/case */
    expect      want;
    const char *basis;
    outcome (*run)(void);
} bad_case;

#define UP "upstream"
#define RS "hipfile-rs"
#define KERNEL_BASIS "kernel"

static const bad_case CASES[] = {
    /* driver lifetime and use count */
    {"driver/close-unopened", CODE(hipFileDriverNotInitialized), UP, driver_close_unopened},
    {"driver/close-more-than-opened", CODE(hipFileDriverNotInitialized), UP, driver_close_more_than_opened},
    {"driver/close-after-implicit-open", CODE(hipFileDriverNotInitialized), UP, driver_close_after_implicit_open},
    {"driver/close-101-times", CODE(hipFileDriverNotInitialized), UP, driver_close_many_times},
    {"driver/use-count-two-opens", VALUE(2), UP, driver_use_count_two_opens},
    {"driver/use-count-implicit-open-adds-nothing", VALUE(1), UP, driver_use_count_implicit_open_adds_nothing},
    {"driver/open-close-20-cycles", VALUE(0), UP, driver_open_close_cycles},
    {"driver/get-properties-null-closed", CODE(hipFileInvalidValue), RS, driver_get_properties_null_closed},
    {"driver/get-properties-null-open", CODE(hipFileInvalidValue), RS, driver_get_properties_null_open},
    {"driver/get-properties-exact-fit", CODE(hipFileSuccess), RS, driver_get_properties_exact_fit},
    {"driver/set-poll-mode-closed", CODE(hipFileDriverNotInitialized), RS, driver_set_poll_mode_closed},
    {"driver/set-max-cache-size-closed", CODE(hipFileDriverNotInitialized), RS, driver_set_max_cache_size_closed},
    {"driver/set-max-direct-io-size-zero", CODE(hipFileInvalidValue), RS, driver_set_max_direct_io_size_zero},
    {"driver/set-max-direct-io-size-size-max", CODE(hipFileDriverUnsupportedLimit), RS,
     driver_set_max_direct_io_size_huge},
    {"driver/set-max-pinned-size-zero", CODE(hipFileInvalidValue), RS, driver_set_max_pinned_size_zero},
    {"driver/set-max-pinned-size-size-max", CODE(hipFileDriverUnsupportedLimit), RS,
     driver_set_max_pinned_size_huge},
    {"driver/set-poll-threshold-size-max", CODE(hipFileDriverUnsupportedLimit), RS,
     driver_set_poll_threshold_huge},

    /* hipFileHandleRegister arguments */
    {"register/fh-null", CODE(hipFileInvalidValue), UP, register_null_fh},
    {"register/descr-null", CODE(hipFileInvalidValue), UP, register_null_descr},
    {"register/both-null", CODE(hipFileInvalidValue), UP, register_null_both},
    {"register/fh-null-driver-open", CODE(hipFileInvalidValue), UP, register_null_fh_driver_open},
    {"register/type-zero", CODE(hipFileIONotSupported), UP, register_type_zero},
    {"register/type-99", CODE(hipFileIONotSupported), UP, register_type_99},
    {"register/type-negative", CODE(hipFileIONotSupported), UP, register_type_negative},
    {"register/type-opaque-win32", CODE(hipFileIONotSupported), UP, register_type_win32},
    {"register/type-userspace-fs", CODE(hipFileIONotSupported), UP, register_type_userspace_fs},
    {"register/garbage-fs-ops", CODE(hipFileSuccess), UP, register_garbage_fs_ops},
    {"register/same-fd-twice", CODE(hipFileHandleAlreadyRegistered), UP, register_twice},
    {"register/dup-of-registered-fd", CODE(hipFileSuccess), UP, register_dup_of_registered},
    {"register/after-failed-register", CODE(hipFileSuccess), UP, register_after_failed_register},

    /* what the descriptor is */
    {"fd/minus-one", CODE(hipFileInternalError), UP, fd_minus_one},
    {"fd/int-min", CODE(hipFileInternalError), UP, fd_int_min},
    {"fd/int-max", CODE(hipFileInternalError), UP, fd_int_max},
    {"fd/closed", CODE(hipFileInternalError), UP, fd_closed},
    {"fd/pipe-read-end", CODE(hipFileInvalidFileType), UP, fd_pipe_read_end},
    {"fd/pipe-write-end", CODE(hipFileInvalidFileType), UP, fd_pipe_write_end},
    {"fd/socket", CODE(hipFileInvalidFileType), UP, fd_socket},
    {"fd/directory", CODE(hipFileInvalidFileType), UP, fd_directory},
    {"fd/dev-null", CODE(hipFileInvalidFileType), UP, fd_dev_null},
    {"fd/o-path-symlink", CODE(hipFileInvalidFileType), UP, fd_o_path_symlink},
    {"fd/o-path-registers", CODE(hipFileSuccess), UP, fd_o_path_registers},
    {"fd/o-path-read", ERRNO(EBADF), UP, fd_o_path_read},
    {"fd/o-path-write", ERRNO(EBADF), UP, fd_o_path_write},
    {"fd/write-only-read", ERRNO(EBADF), UP, fd_write_only_read},
    {"fd/read-only-write", ERRNO(EBADF), UP, fd_read_only_write},
    {"fd/append-write-appends", BYTES(4096), UP, fd_append_write},
    {"fd/closed-after-register-read", ERRNO(EBADF), UP, fd_closed_after_register_read},
    {"fd/closed-after-register-write", ERRNO(EBADF), UP, fd_closed_after_register_write},
    {"fd/number-reused-write", ERRNO(EBADF), UP, fd_number_reused_write},
    {"fd/number-reused-read", ERRNO(EBADF), UP, fd_number_reused_read},

    /* stale and garbage file handles */
    {"handle/read-deregistered", NEG(hipFileHandleNotRegistered), UP, handle_read_deregistered},
    {"handle/write-deregistered", NEG(hipFileHandleNotRegistered), UP, handle_write_deregistered},
    {"handle/read-null", NEG(hipFileHandleNotRegistered), UP, handle_read_null},
    {"handle/write-null", NEG(hipFileHandleNotRegistered), UP, handle_write_null},
    {"handle/read-garbage", NEG(hipFileHandleNotRegistered), UP, handle_read_garbage},
    {"handle/read-all-ones", NEG(hipFileHandleNotRegistered), UP, handle_read_all_ones},
    {"handle/read-neighbours-of-live-handle", NEG(hipFileHandleNotRegistered), UP, handle_read_neighbour},
    {"handle/read-stack-address", NEG(hipFileHandleNotRegistered), UP, handle_read_stack_address},
    {"handle/read-64-random", NEG(hipFileHandleNotRegistered), UP, handle_read_random},
    {"handle/read-driver-closed", ERRNO(EINVAL), UP, handle_read_closed_driver},
    {"handle/write-driver-closed", ERRNO(EINVAL), UP, handle_write_closed_driver},
    {"handle/read-garbage-never-opened", ERRNO(EINVAL), UP, handle_read_garbage_never_opened},
    {"handle/read-after-close-and-reopen", NEG(hipFileHandleNotRegistered), UP, handle_read_after_reopen},
    {"handle/deregister-null", NOTHING, UP, handle_deregister_null},
    {"handle/deregister-garbage", NOTHING, UP, handle_deregister_garbage},
    {"handle/deregister-64-random", NOTHING, UP, handle_deregister_random},
    {"handle/deregister-twice", NOTHING, UP, handle_deregister_twice},
    {"handle/deregister-driver-closed", NOTHING, UP, handle_deregister_closed_driver},
    {"handle/deregister-never-opened", NOTHING, UP, handle_deregister_never_opened},

    /* hipFileBufRegister / hipFileBufDeregister */
    {"buffer/register-null", CODE(hipFileInvalidValue), UP, buf_register_null},
    {"buffer/register-null-zero-length", CODE(hipFileInvalidValue), UP, buf_register_null_zero},
    {"buffer/register-zero-length", CODE(hipFileInvalidValue), RS, buf_register_zero_length},
    {"buffer/register-size-max", CODE(hipFileHipPointerRangeError), UP, buf_register_size_max},
    {"buffer/register-past-allocation", CODE(hipFileHipPointerRangeError), UP, buf_register_past_allocation},
    {"buffer/register-interior", CODE(hipFileSuccess), UP, buf_register_interior},
    {"buffer/register-interior-past-end", CODE(hipFileHipPointerRangeError), UP, buf_register_interior_past_end},
    {"buffer/register-malloc", CODE(hipFileHipMemoryTypeInvalid), UP, buf_register_malloc},
    {"buffer/register-stack", CODE(hipFileHipMemoryTypeInvalid), UP, buf_register_stack},
    {"buffer/register-pinned-host", CODE(hipFileHipMemoryTypeInvalid), UP, buf_register_pinned},
    {"buffer/register-managed", CODE(hipFileHipMemoryTypeInvalid), UP, buf_register_managed},
    {"buffer/register-freed-device", CODE(hipFileHipMemoryTypeInvalid), UP, buf_register_freed},
    {"buffer/register-garbage-pointer", CODE(hipFileHipMemoryTypeInvalid), UP, buf_register_garbage_pointer},
    {"buffer/register-twice", CODE(hipFileMemoryAlreadyRegistered), UP, buf_register_twice},
    {"buffer/register-twice-other-length", CODE(hipFileMemoryAlreadyRegistered), UP,
     buf_register_twice_other_length},
    {"buffer/register-overlapping", CODE(hipFileSuccess), UP, buf_register_overlapping},
    {"buffer/register-flags-minus-one", CODE(hipFileSuccess), UP, buf_register_odd_flags},
    {"buffer/overlapping-io-bounded-by-own-length", NEG(hipFileInvalidValue), UP,
     buf_overlapping_io_uses_its_own_length},
    {"buffer/deregister-null-open", CODE(hipFileMemoryNotRegistered), UP, buf_deregister_null_open},
    {"buffer/deregister-null-closed", CODE(hipFileDriverClosing), UP, buf_deregister_null_closed},
    {"buffer/deregister-never-registered", CODE(hipFileMemoryNotRegistered), UP, buf_deregister_never_registered},
    {"buffer/deregister-garbage", CODE(hipFileMemoryNotRegistered), UP, buf_deregister_garbage},
    {"buffer/deregister-twice", CODE(hipFileMemoryNotRegistered), UP, buf_deregister_twice},
    {"buffer/deregister-interior", CODE(hipFileMemoryNotRegistered), UP, buf_deregister_interior},
    {"buffer/deregister-driver-closed", CODE(hipFileDriverClosing), UP, buf_deregister_closed_driver},
    {"buffer/deregister-after-close-and-reopen", CODE(hipFileMemoryNotRegistered), UP,
     buf_deregister_after_reopen},
    {"buffer/deregister-after-hip-free", CODE(hipFileSuccess), UP, buf_deregister_after_hip_free},

    /* what the IO buffer points at */
    {"memory/read-null", NEG(hipFileInvalidValue), UP, mem_read_null},
    {"memory/write-null", NEG(hipFileInvalidValue), UP, mem_write_null},
    {"memory/read-null-size-zero", NEG(hipFileInvalidValue), UP, mem_read_null_size_zero},
    {"memory/read-malloc", NEG(hipFileHipMemoryTypeInvalid), UP, mem_read_malloc},
    {"memory/write-malloc", NEG(hipFileHipMemoryTypeInvalid), UP, mem_write_malloc},
    {"memory/read-stack", NEG(hipFileHipMemoryTypeInvalid), UP, mem_read_stack},
    {"memory/write-stack", NEG(hipFileHipMemoryTypeInvalid), UP, mem_write_stack},
    {"memory/read-pinned-host", NEG(hipFileHipMemoryTypeInvalid), UP, mem_read_pinned},
    {"memory/write-pinned-host", NEG(hipFileHipMemoryTypeInvalid), UP, mem_write_pinned},
    {"memory/read-managed", NEG(hipFileHipMemoryTypeInvalid), UP, mem_read_managed},
    {"memory/read-freed-device", NEG(hipFileHipMemoryTypeInvalid), UP, mem_read_freed},
    {"memory/write-freed-device", NEG(hipFileHipMemoryTypeInvalid), UP, mem_write_freed},
    {"memory/read-garbage-pointer", NEG(hipFileHipMemoryTypeInvalid), UP, mem_read_garbage_pointer},
    {"memory/read-inaccessible-page", NEG(hipFileHipMemoryTypeInvalid), UP, mem_read_unmapped_page},
    {"memory/read-device-interior", BYTES(8192), UP, mem_read_interior},
    {"memory/write-device-interior", BYTES(8192), UP, mem_write_interior},
    {"memory/read-interior-of-registered", BYTES(8192), UP, mem_read_interior_of_registered},
    {"memory/read-interior-past-allocation", NEG(hipFileInvalidValue), RS, mem_read_interior_past_end},

    /* offsets and sizes */
    {"range/read-negative-file-offset", ERRNO(EINVAL), UP, range_read_negative_file_offset},
    {"range/write-negative-file-offset", ERRNO(EINVAL), UP, range_write_negative_file_offset},
    {"range/read-int64-min-file-offset", ERRNO(EINVAL), UP, range_read_int64_min_file_offset},
    {"range/read-negative-buffer-offset", ERRNO(EINVAL), UP, range_read_negative_buffer_offset},
    {"range/write-negative-buffer-offset", ERRNO(EINVAL), UP, range_write_negative_buffer_offset},
    {"range/read-negative-buffer-offset-registered", ERRNO(EINVAL), UP,
     range_read_negative_buffer_offset_registered},
    {"range/read-buffer-offset-at-end", NEG(hipFileInvalidValue), RS, range_read_buffer_offset_at_end},
    {"range/read-buffer-offset-at-end-registered", NEG(hipFileInvalidValue), UP,
     range_read_buffer_offset_at_end_registered},
    {"range/write-buffer-offset-past-end", NEG(hipFileInvalidValue), RS, range_write_buffer_offset_past_end},
    {"range/read-buffer-offset-int64-max", NEG(hipFileInvalidValue), RS, range_read_buffer_offset_int64_max},
    {"range/read-buffer-offset-int64-max-registered", NEG(hipFileInvalidValue), UP,
     range_read_buffer_offset_int64_max_registered},
    {"range/read-size-past-buffer", NEG(hipFileInvalidValue), RS, range_read_size_past_buffer},
    {"range/write-size-past-buffer", NEG(hipFileInvalidValue), RS, range_write_size_past_buffer},
    {"range/read-size-past-buffer-registered", NEG(hipFileInvalidValue), UP, range_read_size_past_buffer_registered},
    {"range/read-offset-plus-size-past-buffer", NEG(hipFileInvalidValue), RS, range_read_offset_plus_size_past_buffer},
    {"range/read-size-max", NEG(hipFileInvalidValue), RS, range_read_size_max},
    {"range/write-size-max", NEG(hipFileInvalidValue), RS, range_write_size_max},
    {"range/read-size-max-registered", NEG(hipFileInvalidValue), UP, range_read_size_max_registered},
    {"range/read-size-max-buffer-offset-4k", NEG(hipFileInvalidValue), RS, range_read_size_max_with_offset},
    {"range/write-above-2gib-small-buffer", NEG(hipFileInvalidValue), RS, range_write_above_2gib_small_buffer},
    {"range/read-above-2gib", BYTES(FILE_SIZE), UP, range_read_above_2gib},
    {"range/read-size-zero", BYTES(0), UP, range_read_size_zero},
    {"range/write-size-zero", BYTES(0), UP, range_write_size_zero},
    {"range/read-size-zero-at-buffer-end", BYTES(0), UP, range_read_size_zero_at_buffer_end},
    {"range/read-at-eof", BYTES(0), UP, range_read_at_eof},
    {"range/read-past-eof", BYTES(0), UP, range_read_past_eof},
    {"range/read-file-offset-2^62", KERNEL, KERNEL_BASIS, range_read_file_offset_huge},
    {"range/write-file-offset-2^62", KERNEL, KERNEL_BASIS, range_write_file_offset_huge},
    {"range/read-file-offset-int64-max", KERNEL, KERNEL_BASIS, range_read_file_offset_int64_max},
    {"range/write-file-offset-int64-max", KERNEL, KERNEL_BASIS, range_write_file_offset_int64_max},

    /* hipFileGet/SetParameter* */
    {"param/set-size-unknown-12", CODE(hipFileInvalidValue), RS, param_set_size_unknown_12},
    {"param/set-size-unknown-negative", CODE(hipFileInvalidValue), RS, param_set_size_unknown_negative},
    {"param/set-size-unknown-int-max", CODE(hipFileInvalidValue), RS, param_set_size_unknown_int_max},
    {"param/set-size-while-open", CODE(hipFileDriverAlreadyOpen), RS, param_set_size_while_open},
    {"param/set-size-while-implicitly-open", CODE(hipFileDriverAlreadyOpen), RS,
     param_set_size_while_implicitly_open},
    {"param/set-size-after-close", CODE(hipFileSuccess), RS, param_set_size_after_close},
    {"param/set-max-direct-io-size-max", CODE(hipFileDriverUnsupportedLimit), RS, param_max_direct_io_size_max},
    {"param/set-max-direct-io-16gib", CODE(hipFileDriverUnsupportedLimit), RS, param_max_direct_io_16gib},
    {"param/set-per-buffer-cache-16gib", CODE(hipFileDriverUnsupportedLimit), RS, param_per_buffer_cache_16gib},
    {"param/set-pinned-size-max", CODE(hipFileDriverUnsupportedLimit), RS, param_pinned_size_max},
    {"param/set-pinned-twice-physical-memory", CODE(hipFileDriverUnsupportedLimit), RS,
     param_pinned_above_physical_memory},
    {"param/set-io-threads-size-max", CODE(hipFileDriverUnsupportedLimit), RS,
     param_io_threads_size_max},
    {"param/set-max-direct-io-zero", CODE(hipFileInvalidValue), RS, param_max_direct_io_zero},
    {"param/set-pinned-zero", CODE(hipFileInvalidValue), RS, param_pinned_zero},
    {"param/get-size-null", CODE(hipFileInvalidValue), RS, param_get_size_null},
    {"param/get-size-unknown", CODE(hipFileInvalidValue), RS, param_get_size_unknown},
    {"param/get-size-unknown-null", CODE(hipFileInvalidValue), RS, param_get_size_unknown_null},
    {"param/get-size-null-open", CODE(hipFileInvalidValue), RS, param_get_size_null_open},
    {"param/set-bool-unknown", CODE(hipFileInvalidValue), RS, param_set_bool_unknown},
    {"param/set-bool-unknown-negative", CODE(hipFileInvalidValue), RS, param_set_bool_unknown_negative},
    {"param/set-bool-while-open", CODE(hipFileDriverAlreadyOpen), RS, param_set_bool_while_open},
    {"param/get-bool-null", CODE(hipFileInvalidValue), RS, param_get_bool_null},
    {"param/get-bool-unknown", CODE(hipFileInvalidValue), RS, param_get_bool_unknown},
    {"param/set-string-null", CODE(hipFileInvalidValue), RS, param_set_string_null},
    {"param/set-string-unknown", CODE(hipFileInvalidValue), RS, param_set_string_unknown},
    {"param/set-string-unknown-null", CODE(hipFileInvalidValue), RS, param_set_string_unknown_null},
    {"param/set-string-while-open", CODE(hipFileDriverAlreadyOpen), RS, param_set_string_while_open},
    {"param/set-string-1mib", CODE_OR(hipFileSuccess, hipFileInvalidValue), RS, param_set_string_long},
    {"param/get-string-null", CODE(hipFileInvalidValue), RS, param_get_string_null},
    {"param/get-string-len-zero", CODE(hipFileInvalidValue), RS, param_get_string_len_zero},
    {"param/get-string-len-negative", CODE(hipFileInvalidValue), RS, param_get_string_len_negative},
    {"param/get-string-too-small", CODE(hipFileInvalidValue), RS, param_get_string_too_small},
    {"param/get-string-exact-fit", CODE(hipFileSuccess), RS, param_get_string_exact_fit},
    {"param/get-string-unknown", CODE(hipFileInvalidValue), RS, param_get_string_unknown},

    /* statistics */
    {"stats/l1-null-closed", CODE(hipFileInvalidValue), RS, stats_l1_null_closed},
    {"stats/l2-null-closed", CODE(hipFileInvalidValue), RS, stats_l2_null_closed},
    {"stats/l3-null-closed", CODE(hipFileInvalidValue), RS, stats_l3_null_closed},
    {"stats/l1-null-open", CODE(hipFileInvalidValue), RS, stats_l1_null_open},
    {"stats/l2-null-open", CODE(hipFileInvalidValue), RS, stats_l2_null_open},
    {"stats/l3-null-open", CODE(hipFileInvalidValue), RS, stats_l3_null_open},
    {"stats/l1-driver-closed", CODE(hipFileDriverNotInitialized), RS, stats_l1_closed},
    {"stats/l2-exact-fit", CODE(hipFileSuccess), RS, stats_l2_exact_fit},
    {"stats/l3-exact-fit", CODE(hipFileSuccess), RS, stats_l3_exact_fit},

    /* hipFileGetVersion and hipFileGetOpErrorString */
    {"version/all-null", CODE(hipFileSuccess), UP, version_all_null},
    {"version/major-null", CODE(hipFileSuccess), UP, version_major_null},
    {"version/minor-null", CODE(hipFileSuccess), UP, version_minor_null},
    {"version/patch-null", CODE(hipFileSuccess), UP, version_patch_null},
    {"errstr/minus-one", TEXT, UP, errstr_minus_one},
    {"errstr/one", TEXT, UP, errstr_one},
    {"errstr/base-5000", TEXT, UP, errstr_below_base},
    {"errstr/unassigned-5021", TEXT, UP, errstr_unassigned_5021},
    {"errstr/unassigned-5032", TEXT, UP, errstr_unassigned_5032},
    {"errstr/io-max-error", TEXT, UP, errstr_max_error},
    {"errstr/past-io-max-error", TEXT, UP, errstr_past_max},
    {"errstr/int-max", TEXT, UP, errstr_int_max},
    {"errstr/int-min", TEXT, UP, errstr_int_min},
    {"errstr/negated-code", TEXT, UP, errstr_negated_code},
    {"errstr/every-code-minus-100-to-5200", TEXT, UP, errstr_every_code},

    /* batch entry points */
    {"batch/setup-null-out", CODE(hipFileInvalidValue), UP, batch_setup_null},
    {"batch/setup-zero-entries", CODE(hipFileInvalidValue), UP, batch_setup_zero},
    {"batch/setup-uint-max-entries", CODE(hipFileInvalidValue), UP, batch_setup_uint_max},
    {"batch/submit-garbage-handle", CODE(hipFileInvalidValue), UP, batch_submit_garbage},
    {"batch/submit-garbage-params", CODE(hipFileInvalidValue), UP, batch_submit_garbage_params},
    {"batch/submit-destroyed-handle", CODE(hipFileInvalidValue), UP, batch_submit_destroyed},
    {"batch/submit-garbage-entries", CODE(hipFileInvalidValue), RS, batch_submit_garbage_entries},
    {"batch/get-status-garbage-handle", CODE(hipFileInvalidValue), UP, batch_get_status_garbage},
    {"batch/get-status-min-above-nr", CODE(hipFileInvalidValue), UP, batch_get_status_min_above_nr},
    {"batch/get-status-nsec-long-max", CODE(hipFileInvalidValue), UP, batch_get_status_huge_nsec},
    {"batch/cancel-garbage-handle", CODE(hipFileInvalidValue), UP, batch_cancel_garbage},
    {"batch/cancel-null", CODE(hipFileInvalidValue), UP, batch_cancel_null},
    {"batch/destroy-garbage-and-null", NOTHING, UP, batch_destroy_garbage},

    /* async and stream entry points */
    {"async/read-all-null", CODE(hipFileInvalidValue),
     UP ": a closed driver answers InvalidValue before the arguments are read, and is left open (cuFile)",
     async_read_all_null},
    {"async/write-all-null", CODE(hipFileInvalidValue),
     UP ": a closed driver answers InvalidValue before the arguments are read, and is left open (cuFile)",
     async_write_all_null},
    {"async/read-garbage-arguments", CODE(hipFileInvalidValue),
     UP ": negative offsets are refused at submission, before the stream is used", async_read_garbage},
    {"async/write-garbage-arguments", CODE(hipFileHandleNotRegistered),
     UP ": the file handle is looked up first; an unknown one is not registered", async_write_garbage},
    {"async/read-garbage-stream", CODE_HIP(hipFileHipDriverError),
     UP ": good arguments; queuing on the bogus stream fails in the HIP runtime", async_read_garbage_stream},
    {"stream/register-null", CODE(hipFileSuccess),
     UP ": any stream handle registers, the NULL stream too, with the driver closed too", stream_register_null},
    {"stream/register-garbage-all-flags", CODE(hipFileInvalidValue),
     UP ": flag bits outside HIPFILE_STREAM_FLAGS_MASK", stream_register_garbage},
    {"stream/deregister-garbage", CODE(hipFileInvalidValue), UP ": the stream is not registered",
     stream_deregister_garbage},
    {"stream/deregister-null", CODE(hipFileInvalidValue), UP ": the stream is not registered",
     stream_deregister_null},
};

#define N_CASES (sizeof CASES / sizeof CASES[0])

/* Where the answer differs when only the direct path may serve (compat_disallowed()). */
typedef struct {
    const char *name;
    expect      want;
} direct_only_case;

static const direct_only_case DIRECT_ONLY[] = {
    /* The direct path writes at the offset given: with no staged path to append, it refuses. */
    {"fd/append-write-appends", NEG(hipFileInternalError)},
};

#define N_DIRECT_ONLY (sizeof DIRECT_ONLY / sizeof DIRECT_ONLY[0])

static const expect *
direct_only_expectation(const char *name)
{
    for (size_t i = 0; i < N_DIRECT_ONLY; i++) {
        if (strcmp(DIRECT_ONLY[i].name, name) == 0) {
            return &DIRECT_ONLY[i].want;
        }
    }
    return NULL;
}

static expect
expectation(const bad_case *c)
{
    const expect *strict = direct_only_expectation(c->name);
    return strict != NULL && compat_disallowed() ? *strict : c->want;
}

static int
run_case(size_t i)
{
    const bad_case *c        = &CASES[i];
    expect          expected = expectation(c);
    outcome         o        = c->run();
    int             passed   = matches(expected, &o);
    char            want[256], got[256];
    describe_expect(expected, want, sizeof want);
    describe_outcome(&o, got, sizeof got);
    if (expected.kind == X_KERNEL) {
        char ref[128];
        if (o.ref_ret == -1) {
            snprintf(ref, sizeof ref, " (-1, errno %s (%d))", errno_name(o.ref_err), o.ref_err);
        }
        else {
            snprintf(ref, sizeof ref, " (%zd bytes)", o.ref_ret);
        }
        strncat(want, ref, sizeof want - strlen(want) - 1);
    }
    return case_result(c->name, passed, got, want, c->basis);
}

static const char *
case_name(size_t i)
{
    return CASES[i].name;
}

static const char *
describe_case(size_t i, char *want, size_t room)
{
    char          strict_want[256];
    const expect *strict = direct_only_expectation(CASES[i].name);
    describe_expect(CASES[i].want, want, room);
    if (strict != NULL) {
        describe_expect(*strict, strict_want, sizeof strict_want);
        strncat(want, "; compat mode disallowed: ", room - strlen(want) - 1);
        strncat(want, strict_want, room - strlen(want) - 1);
    }
    return CASES[i].basis;
}

int
main(int argc, char **argv)
{
    const case_table table = {N_CASES, case_name, describe_case, run_case};
    return cases_main(argc, argv, &table);
}
