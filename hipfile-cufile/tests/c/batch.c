/*
 * batch.c - cuFile's batch IO (cuFileBatchIO{SetUp,Submit,GetStatus,Cancel,Destroy}), one check
 * per rule: set-up limits, round trips of many entries with their cookies, waiting with min_nr
 * and a timeout, capacity counting unreaped entries, the encoding of each entry's outcome
 * (status and ret: bytes, or a negative errno in the size_t), cancel and destroy.
 *
 * Usage: batch SCRATCH_DIR
 * Builds as C11 and as C++17.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <cufile.h>

#include <time.h>

#include "cufile_checks.h"

#define CHUNK ((size_t)(64 * 1024))
#define ENTRIES 8
#define FILE_SIZE ((size_t)ENTRIES * CHUNK)

/* A batch entry moving CHUNK bytes between `buf + i * CHUNK` and file offset `i * CHUNK`. */
static CUfileIOParams_t
entry(CUfileHandle_t fh, void *buf, unsigned i, CUfileOpcode_t opcode, void *cookie)
{
    CUfileIOParams_t p;
    memset(&p, 0, sizeof p);
    p.mode                  = CUFILE_BATCH;
    p.u.batch.devPtr_base   = buf;
    p.u.batch.file_offset   = (off_t)(i * CHUNK);
    p.u.batch.devPtr_offset = (off_t)(i * CHUNK);
    p.u.batch.size          = CHUNK;
    p.fh                    = fh;
    p.opcode                = opcode;
    p.cookie                = cookie;
    return p;
}

/* Reaps exactly `want` events of `batch` within 30 s; returns how many came. */
static unsigned
reap(CUfileBatchHandle_t batch, unsigned want, CUfileIOEvents_t *events)
{
    unsigned        nr      = want;
    struct timespec timeout = {30, 0};
    CUfileError_t   status  = cuFileBatchIOGetStatus(batch, want, &nr, events, &timeout);
    return status.err == CU_FILE_SUCCESS ? nr : 0;
}

int
main(int argc, char **argv)
{
    require_scratch_dir(argc, argv);
    const char    *dir  = argv[1];
    int            fd   = scratch_file(dir, "batch.bin");
    void          *src  = device_alloc(FILE_SIZE);
    void          *dst  = device_alloc(FILE_SIZE);
    unsigned char *data = (unsigned char *)malloc(FILE_SIZE);
    unsigned char *back = (unsigned char *)malloc(FILE_SIZE);
    if (data == NULL || back == NULL) {
        setup_failed("malloc");
    }
    fill_pattern(data, FILE_SIZE, 5);
    copy_or_exit(src, data, FILE_SIZE, cudaMemcpyHostToDevice);

    expect_status(cuFileDriverOpen(), CU_FILE_SUCCESS, "cuFileDriverOpen");
    CUfileDrvProps_t props;
    memset(&props, 0, sizeof props);
    expect_status(cuFileDriverGetProperties(&props), CU_FILE_SUCCESS, "cuFileDriverGetProperties");
    CUfileBatchHandle_t batch = NULL;
    expect_status(cuFileBatchIOSetUp(NULL, 4), CU_FILE_INVALID_VALUE, "cuFileBatchIOSetUp(NULL) -> CU_FILE_INVALID_VALUE");
    expect_status(cuFileBatchIOSetUp(&batch, 0), CU_FILE_INVALID_VALUE,
                  "cuFileBatchIOSetUp of 0 entries -> CU_FILE_INVALID_VALUE");
    expect_status(cuFileBatchIOSetUp(&batch, props.max_batch_io_size + 1), CU_FILE_INVALID_VALUE,
                  "cuFileBatchIOSetUp past max_batch_io_size -> CU_FILE_INVALID_VALUE");

    CUfileHandle_t fh = NULL;
    expect_status(register_handle(&fh, fd, CU_FILE_HANDLE_TYPE_OPAQUE_FD), CU_FILE_SUCCESS, "cuFileHandleRegister");
    expect_status(cuFileBatchIOSetUp(&batch, ENTRIES), CU_FILE_SUCCESS, "cuFileBatchIOSetUp(8)");

    /* ---- a round trip of 8 writes and 8 reads ------------------------------------ */
    /* One more than a batch holds, for the over-capacity submission. */
    CUfileIOParams_t params[ENTRIES + 1];
    CUfileIOEvents_t events[ENTRIES];
    int              cookies[ENTRIES];
    for (unsigned i = 0; i < ENTRIES; i++) {
        params[i] = entry(fh, src, i, CUFILE_WRITE, &cookies[i]);
    }
    expect_status(cuFileBatchIOSubmit(batch, ENTRIES, params, 0), CU_FILE_SUCCESS, "cuFileBatchIOSubmit of 8 writes");
    memset(events, 0, sizeof events);
    unsigned nr = ENTRIES;
    expect_status(cuFileBatchIOGetStatus(batch, ENTRIES, &nr, events, NULL), CU_FILE_SUCCESS,
                  "cuFileBatchIOGetStatus(min_nr 8, no timeout) waits for all 8");
    int all_complete = nr == ENTRIES, cookies_seen = 0;
    for (unsigned i = 0; i < nr; i++) {
        all_complete = all_complete && events[i].status == CUFILE_COMPLETE && events[i].ret == CHUNK;
        for (unsigned j = 0; j < ENTRIES; j++) {
            cookies_seen += events[i].cookie == &cookies[j];
        }
    }
    check(all_complete, "every write is CUFILE_COMPLETE with ret = its size", "nr %u, first status %d ret %zu", nr,
          (int)events[0].status, events[0].ret);
    check(cookies_seen == ENTRIES, "each event carries its entry's cookie", "%d of 8", cookies_seen);
    check(pread(fd, back, FILE_SIZE, 0) == (ssize_t)FILE_SIZE && memcmp(back, data, FILE_SIZE) == 0,
          "the 8 writes landed byte-exactly", "the file differs");

    for (unsigned i = 0; i < ENTRIES; i++) {
        params[i] = entry(fh, dst, i, CUFILE_READ, &cookies[i]);
    }
    expect_status(cuFileBatchIOSubmit(batch, ENTRIES, params, 0), CU_FILE_SUCCESS, "cuFileBatchIOSubmit of 8 reads");
    unsigned got = reap(batch, ENTRIES, events);
    copy_or_exit(back, dst, FILE_SIZE, cudaMemcpyDeviceToHost);
    check(got == ENTRIES && memcmp(back, data, FILE_SIZE) == 0, "the 8 reads brought the file back byte-exactly",
          "%u reaped", got);

    /* ---- waiting ------------------------------------------------------------------- */
    {
        unsigned        none    = ENTRIES;
        struct timespec instant = {0, 1000000};
        expect_status(cuFileBatchIOGetStatus(batch, 1, &none, events, &instant), CU_FILE_SUCCESS,
                      "cuFileBatchIOGetStatus with nothing outstanding");
        check(none == 0, "nothing outstanding: no event, at the timeout", "%u events", none);
        unsigned two = 2;
        expect_status(cuFileBatchIOGetStatus(batch, 3, &two, events, &instant), CU_FILE_INVALID_VALUE,
                      "cuFileBatchIOGetStatus with min_nr above nr -> CU_FILE_INVALID_VALUE");
    }

    /* ---- capacity: submitted entries count until they are reaped ---------------------- */
    params[ENTRIES] = entry(fh, dst, 0, CUFILE_READ, &cookies[0]);
    expect_status(cuFileBatchIOSubmit(batch, ENTRIES + 1, params, 0), CU_FILE_BATCH_FULL,
                  "9 entries into a batch of 8 -> CU_FILE_BATCH_FULL");
    expect_status(cuFileBatchIOSubmit(batch, ENTRIES, params, 0), CU_FILE_SUCCESS, "8 entries into a batch of 8");
    expect_status(cuFileBatchIOSubmit(batch, 1, params, 0), CU_FILE_BATCH_FULL,
                  "a 9th entry while 8 are outstanding -> CU_FILE_BATCH_FULL");
    check(reap(batch, ENTRIES, events) == ENTRIES, "the 8 are reaped", "they were not");

    /* ---- per-entry outcomes: short reads, end of file, a refused descriptor ------------ */
    {
        CUfileHandle_t wo         = NULL;
        int            write_only = write_only_handle(dir, "batch-write-only.bin", &wo);
        CUfileIOParams_t mixed[4];
        mixed[0]                     = entry(fh, dst, 0, CUFILE_READ, &cookies[0]);
        mixed[1]                     = entry(fh, dst, 1, CUFILE_READ, &cookies[1]);
        mixed[1].u.batch.file_offset = (off_t)(FILE_SIZE - 1);
        mixed[2]                     = entry(fh, dst, 2, CUFILE_READ, &cookies[2]);
        mixed[2].u.batch.file_offset = (off_t)FILE_SIZE;
        mixed[3]                     = entry(wo, dst, 3, CUFILE_READ, &cookies[3]);
        expect_status(cuFileBatchIOSubmit(batch, 4, mixed, 0), CU_FILE_SUCCESS, "cuFileBatchIOSubmit of 4 mixed reads");
        CUfileIOEvents_t by_cookie[4];
        memset(by_cookie, 0, sizeof by_cookie);
        unsigned n = reap(batch, 4, events);
        for (unsigned i = 0; i < n; i++) {
            for (unsigned j = 0; j < 4; j++) {
                if (events[i].cookie == &cookies[j]) {
                    by_cookie[j] = events[i];
                }
            }
        }
        check(n == 4, "the 4 mixed reads are reaped", "%u", n);
        check(by_cookie[0].status == CUFILE_COMPLETE && by_cookie[0].ret == CHUNK, "a whole read: COMPLETE, ret 65536",
              "status %d ret %zu", (int)by_cookie[0].status, by_cookie[0].ret);
        check(by_cookie[1].status == CUFILE_COMPLETE && by_cookie[1].ret == 1,
              "a read across the end of the file: COMPLETE, ret 1", "status %d ret %zu", (int)by_cookie[1].status,
              by_cookie[1].ret);
        check(by_cookie[2].status == CUFILE_COMPLETE && by_cookie[2].ret == 0,
              "a read at the end of the file: COMPLETE, ret 0", "status %d ret %zu", (int)by_cookie[2].status,
              by_cookie[2].ret);
        check(by_cookie[3].status == CUFILE_FAILED && by_cookie[3].ret == (size_t)-(ssize_t)EBADF,
              "a read through an O_WRONLY descriptor: FAILED, ret -EBADF", "status %d ret %lld",
              (int)by_cookie[3].status, (long long)(ssize_t)by_cookie[3].ret);
        cuFileHandleDeregister(wo);
        close(write_only);
    }

    /* ---- cancel and destroy ------------------------------------------------------------ */
    expect_status(cuFileBatchIOCancel(batch), CU_FILE_SUCCESS, "cuFileBatchIOCancel with nothing outstanding");
    for (unsigned i = 0; i < ENTRIES; i++) {
        params[i] = entry(fh, dst, i, CUFILE_READ, &cookies[i]);
    }
    expect_status(cuFileBatchIOSubmit(batch, ENTRIES, params, 0), CU_FILE_SUCCESS, "cuFileBatchIOSubmit before a cancel");
    expect_status(cuFileBatchIOCancel(batch), CU_FILE_SUCCESS, "cuFileBatchIOCancel with entries in flight");
    {
        unsigned        n       = ENTRIES;
        struct timespec instant = {0, 0};
        CUfileError_t   status  = cuFileBatchIOGetStatus(batch, 0, &n, events, &instant);
        int             terminal = status.err == CU_FILE_SUCCESS && n == ENTRIES;
        for (unsigned i = 0; terminal && i < n; i++) {
            terminal = (events[i].status == CUFILE_COMPLETE && events[i].ret == CHUNK)
                       || (events[i].status == CUFILE_CANCELED && events[i].ret == 0);
        }
        check(terminal, "after a cancel every entry is COMPLETE (its bytes) or CANCELED (ret 0), at once",
              "err %d, %u events", (int)status.err, n);
    }
    cuFileBatchIODestroy(batch);
    expect_use_count(1, "batches leave the use count alone");

    CUfileBatchHandle_t open_at_close = NULL;
    expect_status(cuFileBatchIOSetUp(&open_at_close, 2), CU_FILE_SUCCESS, "cuFileBatchIOSetUp to outlive the driver");
    cuFileHandleDeregister(fh);
    expect_status(cuFileDriverClose(), CU_FILE_SUCCESS, "cuFileDriverClose with a batch set up");
    expect_use_count(0, "the driver is closed");

    free(data);
    free(back);
    if (cudaFree(src) != cudaSuccess || cudaFree(dst) != cudaSuccess) {
        printf("# cudaFree failed\n");
    }
    close(fd);
    return tap_finish();
}
