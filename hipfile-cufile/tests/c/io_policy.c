/*
 * io_policy.c - hipfile-rs's per-handle IO policy under cuFile's prefix
 * (cuFileHandleSetIoPolicy / cuFileHandleGetIoPolicy, HIPFILE_CUFILE_EXTENSIONS), one check
 * per rule: a handle starts with CU_FILE_IO_POLICY_FALLBACK; under
 * CU_FILE_IO_POLICY_DIRECT_ONLY a request no direct path serves fails closed with
 * CU_FILE_IO_NOT_SUPPORTED and moves no byte (reads, writes, batch entries, stream-ordered
 * operations); setting it back serves requests again; the argument checks.
 *
 * The simulated NVIDIA platform has no direct path (GPUDirect Storage is NVIDIA's library
 * itself), so every request of a direct-only handle fails closed here; on a GPU machine with
 * nvidia-fs, aligned requests would be served.
 *
 * Usage: io_policy SCRATCH_DIR
 * Builds as C11 and as C++17.
 */

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <cufile.h>

#include <time.h>

#include "cufile_checks.h"

#define SIZE ((size_t)(64 * 1024))

int
main(int argc, char **argv)
{
    require_scratch_dir(argc, argv);
    check(HIPFILE_CUFILE_EXTENSIONS == 1, "cufile.h declares hipfile-rs's extensions", "it does not");
    int            fd   = scratch_file(argv[1], "io-policy.bin");
    void          *dev  = device_alloc(SIZE);
    unsigned char *data = (unsigned char *)malloc(SIZE);
    unsigned char *back = (unsigned char *)malloc(SIZE);
    if (data == NULL || back == NULL) {
        setup_failed("malloc");
    }
    fill_pattern(data, SIZE, 21);
    copy_or_exit(dev, data, SIZE, cudaMemcpyHostToDevice);

    CUfileHandle_t fh = NULL;
    expect_status(register_handle(&fh, fd, CU_FILE_HANDLE_TYPE_OPAQUE_FD), CU_FILE_SUCCESS, "cuFileHandleRegister");
    CUfileIoPolicy_t policy = CU_FILE_IO_POLICY_DIRECT_ONLY;
    expect_status(cuFileHandleGetIoPolicy(fh, &policy), CU_FILE_SUCCESS, "cuFileHandleGetIoPolicy");
    check(policy == CU_FILE_IO_POLICY_FALLBACK, "a handle starts with CU_FILE_IO_POLICY_FALLBACK", "%d", (int)policy);
    expect_bytes(cuFileWrite(fh, dev, SIZE, 0, 0), (ssize_t)SIZE, "a fallback handle's write is served");

    /* ---- direct only: nothing is staged -------------------------------------------- */
    expect_status(cuFileHandleSetIoPolicy(fh, CU_FILE_IO_POLICY_DIRECT_ONLY), CU_FILE_SUCCESS,
                  "cuFileHandleSetIoPolicy(DIRECT_ONLY)");
    expect_status(cuFileHandleGetIoPolicy(fh, &policy), CU_FILE_SUCCESS, "cuFileHandleGetIoPolicy after a set");
    check(policy == CU_FILE_IO_POLICY_DIRECT_ONLY, "cuFileHandleGetIoPolicy reads back DIRECT_ONLY", "%d", (int)policy);

    fill_pattern(back, SIZE, 22);
    copy_or_exit(dev, back, SIZE, cudaMemcpyHostToDevice);
    expect_negated(cuFileWrite(fh, dev, SIZE, 0, 0), CU_FILE_IO_NOT_SUPPORTED,
                   "a direct-only write no direct path serves -> -CU_FILE_IO_NOT_SUPPORTED");
    check(pread(fd, back, SIZE, 0) == (ssize_t)SIZE && memcmp(back, data, SIZE) == 0,
          "the refused write moved no byte: the file is unchanged", "the file changed");
    expect_negated(cuFileRead(fh, dev, SIZE, 0, 0), CU_FILE_IO_NOT_SUPPORTED,
                   "a direct-only read no direct path serves -> -CU_FILE_IO_NOT_SUPPORTED");
    copy_or_exit(back, dev, SIZE, cudaMemcpyDeviceToHost);
    {
        unsigned char *other = (unsigned char *)malloc(SIZE);
        if (other == NULL) {
            setup_failed("malloc");
        }
        fill_pattern(other, SIZE, 22);
        check(memcmp(back, other, SIZE) == 0, "the refused read moved no byte: the buffer is unchanged",
              "the buffer changed");
        free(other);
    }

    {
        CUfileIOEvents_t event;
        unsigned         nr;
        CUfileError_t    status = batch_read_one(fh, dev, SIZE, "cuFileBatchIOSubmit (direct only)", &nr, &event);
        check(status.err == CU_FILE_SUCCESS && nr == 1 && event.status == CUFILE_FAILED
                  && (ssize_t)event.ret == -(ssize_t)CU_FILE_IO_NOT_SUPPORTED,
              "a direct-only batch entry: CUFILE_FAILED, ret -CU_FILE_IO_NOT_SUPPORTED", "err %d nr %u status %d ret %lld",
              (int)status.err, nr, (int)event.status, (long long)(ssize_t)event.ret);
    }
    {
        cudaStream_t stream = NULL;
        if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
            setup_failed("cudaStreamCreateWithFlags");
        }
        size_t        size = SIZE;
        off_t         file_offset = 0, buf_offset = 0;
        ssize_t       bytes = 12345;
        CUfileError_t e = cuFileReadAsync(fh, dev, &size, &file_offset, &buf_offset, &bytes, (CUstream)stream);
        if (cudaStreamSynchronize(stream) != cudaSuccess) {
            printf("# cudaStreamSynchronize failed\n");
        }
        check(e.err == CU_FILE_SUCCESS && bytes == -(ssize_t)CU_FILE_IO_NOT_SUPPORTED,
              "a direct-only stream-ordered read: *bytes_p -CU_FILE_IO_NOT_SUPPORTED", "submit err %d, *bytes_p %zd",
              (int)e.err, bytes);
        if (cudaStreamDestroy(stream) != cudaSuccess) {
            printf("# cudaStreamDestroy failed\n");
        }
    }

    /* ---- back to fallback ---------------------------------------------------------- */
    expect_status(cuFileHandleSetIoPolicy(fh, CU_FILE_IO_POLICY_FALLBACK), CU_FILE_SUCCESS,
                  "cuFileHandleSetIoPolicy(FALLBACK)");
    expect_bytes(cuFileRead(fh, dev, SIZE, 0, 0), (ssize_t)SIZE, "set back to fallback, the read is served");
    copy_or_exit(back, dev, SIZE, cudaMemcpyDeviceToHost);
    check(memcmp(back, data, SIZE) == 0, "and brings the file's bytes", "they differ");

    /* ---- argument checks ----------------------------------------------------------- */
    expect_status(cuFileHandleSetIoPolicy(NULL, CU_FILE_IO_POLICY_DIRECT_ONLY), CU_FILE_INVALID_VALUE,
                  "cuFileHandleSetIoPolicy(NULL) -> CU_FILE_INVALID_VALUE");
    expect_status(cuFileHandleSetIoPolicy(fh, (CUfileIoPolicy_t)7), CU_FILE_INVALID_VALUE,
                  "a policy outside CUfileIoPolicy_t -> CU_FILE_INVALID_VALUE");
    expect_status(cuFileHandleGetIoPolicy(fh, NULL), CU_FILE_INVALID_VALUE,
                  "cuFileHandleGetIoPolicy(fh, NULL) -> CU_FILE_INVALID_VALUE");
    cuFileHandleDeregister(fh);
    expect_status(cuFileHandleSetIoPolicy(fh, CU_FILE_IO_POLICY_DIRECT_ONLY), CU_FILE_HANDLE_NOT_REGISTERED,
                  "cuFileHandleSetIoPolicy on a deregistered handle -> CU_FILE_HANDLE_NOT_REGISTERED");
    expect_status(cuFileHandleGetIoPolicy(fh, &policy), CU_FILE_HANDLE_NOT_REGISTERED,
                  "cuFileHandleGetIoPolicy on a deregistered handle -> CU_FILE_HANDLE_NOT_REGISTERED");

    expect_status(cuFileDriverClose(), CU_FILE_SUCCESS, "cuFileDriverClose");
    if (cudaFree(dev) != cudaSuccess) {
        printf("# cudaFree failed\n");
    }
    free(data);
    free(back);
    close(fd);
    return tap_finish();
}
