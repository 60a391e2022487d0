/*
 * cufile_checks.h - the checks the cuFile C programs share, printed through tap.h: a
 * CUfileError_t pair, a ssize_t IO result (bytes, -1 with errno, -CU_FILE_*), the use count;
 * and their set-up: scratch files, device memory, file handles, a one-read batch. One copy per
 * program (static).
 *
 * SPDX-License-Identifier: MIT
 */

#ifndef HIPFILE_CUFILE_TESTS_CHECKS_H
#define HIPFILE_CUFILE_TESTS_CHECKS_H

#include <cufile.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cuda_runtime_subset.h"
#include "tap.h"

/* The call returned exactly `want`, with CUDA's half 0 (CUDA_SUCCESS). */
static inline void
expect_status(CUfileError_t got, CUfileOpError want, const char *name)
{
    check(got.err == want && (int)got.cu_err == 0, name, "got err %d (%s) cu_err %d, want %d (%s)", (int)got.err,
          cufileop_status_error(got.err), (int)got.cu_err, (int)want, cufileop_status_error(want));
}

/* An IO call moved exactly `want` bytes. */
static inline void
expect_bytes(ssize_t got, ssize_t want, const char *name)
{
    int err = errno;
    check(got == want, name, "returned %zd (errno %d), want %zd", got, err, want);
}

/* An IO call returned -1 with errno `want`; `err` is errno read right after the call. */
static inline void
expect_errno(ssize_t got, int err, int want, const char *name)
{
    check(got == -1 && err == want, name, "returned %zd errno %d (%s), want -1 errno %d (%s)", got, err,
          strerror(err), want, strerror(want));
}

/* An IO call returned the negated library code `want`. */
static inline void
expect_negated(ssize_t got, CUfileOpError want, const char *name)
{
    check(got == -(ssize_t)want, name, "returned %zd, want -%d (%s)", got, (int)want, cufileop_status_error(want));
}

static inline void
expect_use_count(long want, const char *name)
{
    long got = cuFileUseCount();
    check(got == want, name, "cuFileUseCount() = %ld, want %ld", got, want);
}

/* The programs' one argument, the scratch directory: without it, the usage and exit status 2. */
static inline void
require_scratch_dir(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        exit(2);
    }
}

/* A fresh read-write file `name` in `dir` (set-up: exits on failure). */
static inline int
scratch_file(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
        setup_failed(path);
    }
    return fd;
}

/* `size` bytes of simulated device memory (set-up: exits on failure). */
static inline void *
device_alloc(size_t size)
{
    void       *ptr    = NULL;
    cudaError_t status = cudaMalloc(&ptr, size);
    if (status != cudaSuccess || ptr == NULL) {
        printf("not ok - cudaMalloc(%zu) (cudaError_t %d)\n", size, (int)status);
        exit(1);
    }
    return ptr;
}

/* Fill device memory from host memory, or read it back (set-up: exits on failure). */
static inline void
copy_or_exit(void *dst, const void *src, size_t size, int kind)
{
    cudaError_t status = cudaMemcpy(dst, src, size, kind);
    if (status != cudaSuccess) {
        printf("not ok - cudaMemcpy of %zu bytes, kind %d (cudaError_t %d)\n", size, kind, (int)status);
        exit(1);
    }
}

static inline CUfileError_t
register_handle(CUfileHandle_t *fh, int fd, enum CUfileFileHandleType type)
{
    CUfileDescr_t descr;
    memset(&descr, 0, sizeof descr);
    descr.type      = type;
    descr.handle.fd = fd;
    return cuFileHandleRegister(fh, &descr);
}

/* A file handle registered on an O_WRONLY descriptor of the fresh file `name` in `dir`, for the
 * checks of a read it refuses (its registration is checked); gives the descriptor, for close(). */
static inline int
write_only_handle(const char *dir, const char *name, CUfileHandle_t *wo)
{
    close(scratch_file(dir, name));
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int write_only = open(path, O_WRONLY);
    *wo            = NULL;
    if (write_only < 0) {
        setup_failed("open O_WRONLY");
    }
    expect_status(register_handle(wo, write_only, CU_FILE_HANDLE_TYPE_OPAQUE_FD), CU_FILE_SUCCESS,
                  "cuFileHandleRegister of an O_WRONLY descriptor");
    return write_only;
}

/* One batch of one read of `size` bytes from offset 0 of `fh` into `buf`, submitted (checked as
 * `submit_name`) and waited for, up to 30 s; the batch is destroyed. Gives GetStatus's answer,
 * with the entries reaped in `*nr` and the entry's event in `*event`. */
static inline CUfileError_t
batch_read_one(CUfileHandle_t fh, void *buf, size_t size, const char *submit_name, unsigned *nr,
               CUfileIOEvents_t *event)
{
    CUfileBatchHandle_t batch = NULL;
    expect_status(cuFileBatchIOSetUp(&batch, 1), CU_FILE_SUCCESS, "cuFileBatchIOSetUp");
    CUfileIOParams_t p;
    memset(&p, 0, sizeof p);
    p.mode                = CUFILE_BATCH;
    p.u.batch.devPtr_base = buf;
    p.u.batch.size        = size;
    p.fh                  = fh;
    p.opcode              = CUFILE_READ;
    expect_status(cuFileBatchIOSubmit(batch, 1, &p, 0), CU_FILE_SUCCESS, submit_name);
    memset(event, 0, sizeof *event);
    *nr                     = 1;
    struct timespec timeout = {30, 0};
    CUfileError_t   status  = cuFileBatchIOGetStatus(batch, 1, nr, event, &timeout);
    cuFileBatchIODestroy(batch);
    return status;
}

/* Byte i of a test pattern seeded with `seed`. */
static inline unsigned char
pattern_byte(size_t i, unsigned seed)
{
    return (unsigned char)((i * 31u + seed * 7u + (i >> 12)) & 0xffu);
}

static inline void
fill_pattern(unsigned char *buf, size_t size, unsigned seed)
{
    for (size_t i = 0; i < size; i++) {
        buf[i] = pattern_byte(i, seed);
    }
}

#endif /* HIPFILE_CUFILE_TESTS_CHECKS_H */
