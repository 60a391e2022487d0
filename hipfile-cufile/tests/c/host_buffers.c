/*
 * host_buffers.c - cuFileRead/cuFileWrite (and a batch entry) with host memory, as cuFile serves
 * it: malloc'd (pageable) memory and cudaHostAlloc'd (pinned) memory are read into and written
 * from, whole and at a buffer offset, and the bytes compared.
 *
 * Usage: host_buffers SCRATCH_DIR
 * Builds as C11 and as C++17.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <cufile.h>

#include <time.h>

#include "cufile_checks.h"

#define SIZE ((size_t)(256 * 1024))

/* Writes `SIZE` bytes from `buf` and reads them back into `buf + 4096` through `fh`; `kind` names
 * the memory in the check names. */
static void
round_trip(CUfileHandle_t fh, int fd, unsigned char *buf, const char *kind, unsigned seed)
{
    char name[160];
    fill_pattern(buf, SIZE, seed);
    snprintf(name, sizeof name, "cuFileWrite from %s memory moves every byte", kind);
    expect_bytes(cuFileWrite(fh, buf, SIZE, 0, 0), (ssize_t)SIZE, name);
    unsigned char *file = (unsigned char *)malloc(SIZE);
    if (file == NULL) {
        setup_failed("malloc");
    }
    snprintf(name, sizeof name, "the file holds what was written from %s memory", kind);
    check(pread(fd, file, SIZE, 0) == (ssize_t)SIZE && memcmp(file, buf, SIZE) == 0, name, "it differs");
    memset(buf, 0, SIZE + 4096);
    snprintf(name, sizeof name, "cuFileRead into %s memory at a buffer offset moves every byte", kind);
    expect_bytes(cuFileRead(fh, buf, SIZE, 0, 4096), (ssize_t)SIZE, name);
    snprintf(name, sizeof name, "the bytes read into %s memory land at the offset", kind);
    check(memcmp(buf + 4096, file, SIZE) == 0 && buf[0] == 0, name, "they differ");
    free(file);
}

int
main(int argc, char **argv)
{
    require_scratch_dir(argc, argv);
    int            fd = scratch_file(argv[1], "host-buffers.bin");
    CUfileHandle_t fh = NULL;
    expect_status(register_handle(&fh, fd, CU_FILE_HANDLE_TYPE_OPAQUE_FD), CU_FILE_SUCCESS, "cuFileHandleRegister");

    unsigned char *pageable = (unsigned char *)malloc(SIZE + 4096);
    if (pageable == NULL) {
        setup_failed("malloc");
    }
    round_trip(fh, fd, pageable, "malloc'd", 11);

    void *pinned = NULL;
    if (cudaHostAlloc(&pinned, SIZE + 4096, cudaHostAllocDefault) != cudaSuccess || pinned == NULL) {
        setup_failed("cudaHostAlloc");
    }
    round_trip(fh, fd, (unsigned char *)pinned, "cudaHostAlloc'd", 12);

    /* A batch entry whose buffer is host memory. */
    {
        fill_pattern(pageable, SIZE, 13);
        if (pwrite(fd, pageable, SIZE, 0) != (ssize_t)SIZE) {
            setup_failed("pwrite");
        }
        memset(pinned, 0, SIZE);
        CUfileIOEvents_t event;
        unsigned         nr;
        CUfileError_t    status = batch_read_one(fh, pinned, SIZE, "cuFileBatchIOSubmit of a host buffer read", &nr, &event);
        check(status.err == CU_FILE_SUCCESS && nr == 1 && event.status == CUFILE_COMPLETE && event.ret == SIZE
                  && memcmp(pinned, pageable, SIZE) == 0,
              "a batch read into pinned host memory completes byte-exactly", "err %d nr %u status %d ret %zu",
              (int)status.err, nr, (int)event.status, event.ret);
    }

    cuFileHandleDeregister(fh);
    expect_status(cuFileDriverClose(), CU_FILE_SUCCESS, "cuFileDriverClose");
    if (cudaFreeHost(pinned) != cudaSuccess) {
        printf("# cudaFreeHost failed\n");
    }
    free(pageable);
    close(fd);
    return tap_finish();
}
