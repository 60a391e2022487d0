/*
 * semantics.c - cuFile's rules as a user sees them, one check each: the driver's use count and
 * implicit open, the error pairs of registration (NULL pointers, double registration, handle
 * types other than a Linux fd, parameter ids out of range, setters on an open driver), and the
 * return conventions of cuFileRead/cuFileWrite (bytes moved, -1 with errno, -CU_FILE_*).
 *
 * Usage: semantics SCRATCH_DIR
 * Every request is 4 KiB aligned, so each check holds on whichever path serves it.
 * Builds as C11 and as C++17.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <cufile.h>

#include "cufile_checks.h"

#define DEV_SIZE ((size_t)(256 * 1024))
#define FILE_SIZE ((size_t)(64 * 1024))

int
main(int argc, char **argv)
{
    require_scratch_dir(argc, argv);
    const char *dir  = argv[1];
    int         fd_a = scratch_file(dir, "semantics-a.bin");
    int         fd_b = scratch_file(dir, "semantics-b.bin");
    void       *dev  = device_alloc(DEV_SIZE);
    void       *dev_small = device_alloc(64 * 1024);
    CUfileHandle_t fh     = NULL;
    ssize_t        io;
    int            err;

    /* ---- 1. driver closed ------------------------------------------------ */

    expect_use_count(0, "the driver starts closed");
    expect_status(cuFileDriverClose(), CU_FILE_DRIVER_NOT_INITIALIZED,
                  "cuFileDriverClose on a closed driver -> CU_FILE_DRIVER_NOT_INITIALIZED");
    {
        CUfileStatsLevel1_t l1;
        expect_status(cuFileGetStatsL1(&l1), CU_FILE_DRIVER_NOT_INITIALIZED,
                      "cuFileGetStatsL1 on a closed driver -> CU_FILE_DRIVER_NOT_INITIALIZED");
    }
    {
        /* Which code is in bad_input_cases.c (fd/minus-one); here: it fails and opens nothing. */
        CUfileError_t refused = register_handle(&fh, -1, CU_FILE_HANDLE_TYPE_OPAQUE_FD);
        check(refused.err != CU_FILE_SUCCESS, "cuFileHandleRegister of fd -1 fails", "it succeeded");
        expect_use_count(0, "a failed cuFileHandleRegister leaves the driver closed");
    }
    expect_status(register_handle(&fh, fd_a, CU_FILE_HANDLE_TYPE_OPAQUE_FD), CU_FILE_SUCCESS,
                  "cuFileHandleRegister on a closed driver");
    expect_use_count(1, "cuFileHandleRegister opens the driver (0 -> 1)");
    cuFileHandleDeregister(fh);
    expect_status(cuFileDriverClose(), CU_FILE_SUCCESS, "cuFileDriverClose (1 -> 0)");
    CUfileHandle_t stale = fh;
    errno                = 0;
    io                   = cuFileRead(stale, dev, 4096, 0, 0);
    err                  = errno;
    expect_errno(io, err, EINVAL, "cuFileRead with the driver closed -> -1/EINVAL");
    errno = 0;
    io    = cuFileWrite(stale, dev, 4096, 0, 0);
    err   = errno;
    expect_errno(io, err, EINVAL, "cuFileWrite with the driver closed -> -1/EINVAL");
    expect_use_count(0, "IO on a closed driver does not open it");

    /* ---- 2. driver open ---------------------------------------------------- */

    expect_status(cuFileDriverOpen(), CU_FILE_SUCCESS, "cuFileDriverOpen");
    expect_status(cuFileHandleRegister(NULL, NULL), CU_FILE_INVALID_VALUE,
                  "cuFileHandleRegister(NULL, NULL) -> CU_FILE_INVALID_VALUE");
    {
        CUfileDescr_t descr;
        memset(&descr, 0, sizeof descr);
        descr.type      = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
        descr.handle.fd = fd_a;
        expect_status(cuFileHandleRegister(NULL, &descr), CU_FILE_INVALID_VALUE,
                      "cuFileHandleRegister with a NULL handle pointer -> CU_FILE_INVALID_VALUE");
        expect_status(cuFileHandleRegister(&fh, NULL), CU_FILE_INVALID_VALUE,
                      "cuFileHandleRegister with a NULL descriptor -> CU_FILE_INVALID_VALUE");
    }
    expect_status(register_handle(&fh, fd_a, CU_FILE_HANDLE_TYPE_OPAQUE_FD), CU_FILE_SUCCESS,
                  "cuFileHandleRegister on an open driver");
    CUfileHandle_t twice = NULL;
    expect_status(register_handle(&twice, fd_a, CU_FILE_HANDLE_TYPE_OPAQUE_FD), CU_FILE_HANDLE_ALREADY_REGISTERED,
                  "registering one fd twice -> CU_FILE_HANDLE_ALREADY_REGISTERED");
    expect_use_count(1, "registrations on an open driver keep the count");
    CUfileHandle_t other = NULL;
    expect_status(register_handle(&other, fd_b, CU_FILE_HANDLE_TYPE_OPAQUE_WIN32), CU_FILE_IO_NOT_SUPPORTED,
                  "CU_FILE_HANDLE_TYPE_OPAQUE_WIN32 -> CU_FILE_IO_NOT_SUPPORTED");
    /* As NVIDIA's library: the descriptor in handle.fd is registered, the fs_ops are not called. */
    expect_status(register_handle(&other, fd_b, CU_FILE_HANDLE_TYPE_USERSPACE_FS), CU_FILE_SUCCESS,
                  "CU_FILE_HANDLE_TYPE_USERSPACE_FS registers handle.fd");
    cuFileHandleDeregister(other);
    expect_status(register_handle(&other, fd_b, (enum CUfileFileHandleType)0), CU_FILE_INVALID_VALUE,
                  "handle type 0 -> CU_FILE_INVALID_VALUE");

    expect_status(cuFileBufRegister(NULL, 4096, 0), CU_FILE_INVALID_VALUE,
                  "cuFileBufRegister(NULL) -> CU_FILE_INVALID_VALUE");
    expect_status(cuFileBufRegister(dev, DEV_SIZE, 0), CU_FILE_SUCCESS, "cuFileBufRegister of device memory");
    expect_status(cuFileBufRegister(dev, DEV_SIZE, 0), CU_FILE_MEMORY_ALREADY_REGISTERED,
                  "registering one buffer twice -> CU_FILE_MEMORY_ALREADY_REGISTERED");
    expect_status(cuFileBufDeregister(dev_small), CU_FILE_MEMORY_NOT_REGISTERED,
                  "cuFileBufDeregister of an unregistered buffer -> CU_FILE_MEMORY_NOT_REGISTERED");
    expect_status(cuFileBufRegister(dev_small, 64 * 1024 + 1, 0), CU_FILE_CUDA_POINTER_RANGE_ERROR,
                  "cuFileBufRegister past the allocation -> CU_FILE_CUDA_POINTER_RANGE_ERROR");

    /* Parameters and properties. */
    expect_status(cuFileSetParameterSizeT(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, 1024),
                  CU_FILE_DRIVER_ALREADY_OPEN, "cuFileSetParameterSizeT on an open driver -> CU_FILE_DRIVER_ALREADY_OPEN");
    expect_status(cuFileSetParameterBool(CUFILE_PARAM_PROPERTIES_USE_POLL_MODE, true), CU_FILE_DRIVER_ALREADY_OPEN,
                  "cuFileSetParameterBool on an open driver -> CU_FILE_DRIVER_ALREADY_OPEN");
    {
        size_t value = 0;
        bool   flag  = false;
        char   text[32];
        expect_status(cuFileGetParameterSizeT((CUFileSizeTConfigParameter_t)999, &value), CU_FILE_INVALID_VALUE,
                      "cuFileGetParameterSizeT of parameter 999 -> CU_FILE_INVALID_VALUE");
        expect_status(cuFileGetParameterBool((CUFileBoolConfigParameter_t)999, &flag), CU_FILE_INVALID_VALUE,
                      "cuFileGetParameterBool of parameter 999 -> CU_FILE_INVALID_VALUE");
        expect_status(cuFileGetParameterString((CUFileStringConfigParameter_t)999, text, (int)sizeof text),
                      CU_FILE_INVALID_VALUE, "cuFileGetParameterString of parameter 999 -> CU_FILE_INVALID_VALUE");
        expect_status(cuFileGetParameterSizeT(CUFILE_PARAM_PROPERTIES_MAX_DIRECT_IO_SIZE_KB, NULL),
                      CU_FILE_INVALID_VALUE, "cuFileGetParameterSizeT(NULL) -> CU_FILE_INVALID_VALUE");
        expect_status(cuFileDriverGetProperties(NULL), CU_FILE_INVALID_VALUE,
                      "cuFileDriverGetProperties(NULL) -> CU_FILE_INVALID_VALUE");
        expect_status(cuFileGetVersion(NULL), CU_FILE_INVALID_VALUE, "cuFileGetVersion(NULL) -> CU_FILE_INVALID_VALUE");
        expect_status(cuFileDriverGetP2PFlags(CU_FILE_NVME_SUPPORTED, NULL), CU_FILE_INVALID_VALUE,
                      "cuFileDriverGetP2PFlags(NULL) -> CU_FILE_INVALID_VALUE");
        CUfileP2PFlags_t p2p;
        expect_status(cuFileDriverGetP2PFlags(CU_FILE_MAX_TARGET_TYPES, &p2p), CU_FILE_INVALID_VALUE,
                      "cuFileDriverGetP2PFlags of a status flag past the last -> CU_FILE_INVALID_VALUE");
        expect_status(cuFileDriverSetP2PFlags(CU_FILE_MAX_TARGET_TYPES, CU_FILE_P2P_FLAG_PCI_P2PDMA),
                      CU_FILE_INVALID_VALUE,
                      "cuFileDriverSetP2PFlags of a status flag past the last -> CU_FILE_INVALID_VALUE");
    }

    /* ---- IO conventions ------------------------------------------------------ */

    unsigned char *pattern = (unsigned char *)malloc(FILE_SIZE);
    unsigned char *back    = (unsigned char *)malloc(FILE_SIZE);
    if (pattern == NULL || back == NULL) {
        setup_failed("malloc");
    }
    fill_pattern(pattern, FILE_SIZE, 3);
    copy_or_exit(dev, pattern, FILE_SIZE, cudaMemcpyHostToDevice);
    expect_bytes(cuFileWrite(fh, dev, FILE_SIZE, 0, 0), (ssize_t)FILE_SIZE, "cuFileWrite returns the bytes written");
    expect_bytes(cuFileRead(fh, dev, FILE_SIZE, 0, 4096), (ssize_t)FILE_SIZE,
                 "cuFileRead at a buffer offset returns the bytes read");
    copy_or_exit(back, (char *)dev + 4096, FILE_SIZE, cudaMemcpyDeviceToHost);
    check(memcmp(back, pattern, FILE_SIZE) == 0, "the bytes read land at the buffer offset", "they differ");
    expect_bytes(cuFileRead(fh, dev, 2 * FILE_SIZE, 0, 0), (ssize_t)FILE_SIZE,
                 "a read past the end of the file is short: the bytes there");
    expect_bytes(cuFileRead(fh, dev, 4096, (off_t)FILE_SIZE, 0), 0, "a read at the end of the file returns 0");
    errno = 0;
    io    = cuFileRead(fh, dev, 4096, -4096, 0);
    err   = errno;
    expect_errno(io, err, EINVAL, "cuFileRead with a negative file offset -> -1/EINVAL");
    errno = 0;
    io    = cuFileWrite(fh, dev, 4096, 0, -4096);
    err   = errno;
    expect_errno(io, err, EINVAL, "cuFileWrite with a negative buffer offset -> -1/EINVAL");
    expect_status(cuFileBufRegister(dev_small, 32 * 1024, 0), CU_FILE_SUCCESS, "cuFileBufRegister of part of an allocation");
    expect_negated(cuFileRead(fh, dev_small, 36 * 1024, 0, 0), CU_FILE_INVALID_VALUE,
                   "cuFileRead past the registered length -> -CU_FILE_INVALID_VALUE");
    expect_status(cuFileBufDeregister(dev_small), CU_FILE_SUCCESS, "cuFileBufDeregister");

    CUfileHandle_t gone = NULL;
    expect_status(register_handle(&gone, fd_b, CU_FILE_HANDLE_TYPE_OPAQUE_FD), CU_FILE_SUCCESS,
                  "cuFileHandleRegister of a second file");
    cuFileHandleDeregister(gone);
    expect_negated(cuFileRead(gone, dev, 4096, 0, 0), CU_FILE_HANDLE_NOT_REGISTERED,
                   "cuFileRead on a deregistered handle -> -CU_FILE_HANDLE_NOT_REGISTERED");
    expect_negated(cuFileWrite(gone, dev, 4096, 0, 0), CU_FILE_HANDLE_NOT_REGISTERED,
                   "cuFileWrite on a deregistered handle -> -CU_FILE_HANDLE_NOT_REGISTERED");

    {
        CUfileHandle_t wo         = NULL;
        int            write_only = write_only_handle(dir, "semantics-c.bin", &wo);
        errno = 0;
        io    = cuFileRead(wo, dev, 4096, 0, 0);
        err   = errno;
        expect_errno(io, err, EBADF, "cuFileRead through an O_WRONLY descriptor -> -1/EBADF, as pread");
        cuFileHandleDeregister(wo);
        close(write_only);
    }

    /* ---- 3. closing to zero drops every registration ------------------------------ */

    expect_use_count(1, "the count is still 1 before the last close");
    expect_status(cuFileDriverClose(), CU_FILE_SUCCESS, "cuFileDriverClose (1 -> 0) with registrations");
    expect_use_count(0, "the driver is closed");
    expect_status(register_handle(&fh, fd_a, CU_FILE_HANDLE_TYPE_OPAQUE_FD), CU_FILE_SUCCESS,
                  "the same fd registers again after the close");
    expect_status(cuFileBufRegister(dev, DEV_SIZE, 0), CU_FILE_SUCCESS, "the same buffer registers again after the close");
    expect_status(cuFileBufDeregister(dev), CU_FILE_SUCCESS, "cuFileBufDeregister");
    cuFileHandleDeregister(fh);
    expect_status(cuFileDriverClose(), CU_FILE_SUCCESS, "the last cuFileDriverClose");

    free(pattern);
    free(back);
    if (cudaFree(dev) != cudaSuccess || cudaFree(dev_small) != cudaSuccess) {
        printf("# cudaFree failed\n");
    }
    close(fd_a);
    close(fd_b);
    return tap_finish();
}
