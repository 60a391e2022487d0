/* Copy a file through GPU memory with hipFile, as a data loader or checkpoint tool does:
 * read a chunk from the source file into device memory, write it from there to the
 * destination file, repeat; then compare the two files.
 *
 * Usage: copy_through_gpu SCRATCH_DIR   (creates SCRATCH_DIR/src.bin and SCRATCH_DIR/dst.bin)
 * Prints TAP-style "ok - ..." / "not ok - ..." lines; exits 0 when all pass. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_DIRECT */
#endif
#include <hipfile.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK (1u << 20)
#define FILE_SIZE (5u * CHUNK + 12345u)

static int failures = 0;
/* Checks reported; printed as the plan `1..N` at the end, which the runners compare with
 * the ok / not ok lines (a program that stops early prints no plan). */
static int checks;

static void check(int cond, const char *what)
{
    checks++;
    printf("%s - %s\n", cond ? "ok" : "not ok", what);
    if (!cond) {
        failures++;
    }
}

static int open_registered(const char *path, int flags, hipFileHandle_t *fh)
{
    int fd = open(path, flags | O_DIRECT, 0644);
    if (fd < 0 && errno == EINVAL) {
        fd = open(path, flags, 0644);
    }
    if (fd < 0) {
        return -1;
    }
    hipFileDescr_t descr;
    memset(&descr, 0, sizeof descr);
    descr.type      = hipFileHandleTypeOpaqueFD;
    descr.handle.fd = fd;
    hipFileError_t st = hipFileHandleRegister(fh, &descr);
    if (st.err != hipFileSuccess) {
        close(fd);
        return -1;
    }
    return fd;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s SCRATCH_DIR\n", argv[0]);
        return 2;
    }
    char src_path[4096], dst_path[4096];
    snprintf(src_path, sizeof src_path, "%s/src.bin", argv[1]);
    snprintf(dst_path, sizeof dst_path, "%s/dst.bin", argv[1]);

    unsigned char *data = (unsigned char *)malloc(FILE_SIZE);
    for (size_t i = 0; i < FILE_SIZE; i++) {
        data[i] = (unsigned char)((i * 131u) ^ (i >> 9));
    }
    FILE *f = fopen(src_path, "wb");
    check(f != NULL && fwrite(data, 1, FILE_SIZE, f) == FILE_SIZE && fclose(f) == 0, "source file written");

    hipFileError_t st = hipFileDriverOpen();
    check(st.err == hipFileSuccess, "hipFileDriverOpen");

    hipFileHandle_t in_fh = NULL, out_fh = NULL;
    int in_fd  = open_registered(src_path, O_RDONLY, &in_fh);
    int out_fd = open_registered(dst_path, O_CREAT | O_TRUNC | O_WRONLY, &out_fh);
    check(in_fd >= 0 && out_fd >= 0, "both files registered");

    void *gpu = NULL;
    check(hipMalloc(&gpu, CHUNK) == hipSuccess, "hipMalloc");
    st = hipFileBufRegister(gpu, CHUNK, 0);
    check(st.err == hipFileSuccess, "hipFileBufRegister");

    hoff_t offset = 0;
    int    copy_ok = 1;
    for (;;) {
        ssize_t n = hipFileRead(in_fh, gpu, CHUNK, offset, 0);
        if (n <= 0) {
            copy_ok = (n == 0);
            break;
        }
        ssize_t w = hipFileWrite(out_fh, gpu, (size_t)n, offset, 0);
        if (w != n) {
            copy_ok = 0;
            break;
        }
        offset += n;
    }
    check(copy_ok && offset == (hoff_t)FILE_SIZE, "copied every byte through GPU memory");

    check(hipFileBufDeregister(gpu).err == hipFileSuccess, "hipFileBufDeregister");
    hipFileHandleDeregister(in_fh);
    hipFileHandleDeregister(out_fh);
    close(in_fd);
    close(out_fd);
    check(hipFree(gpu) == hipSuccess, "hipFree");
    check(hipFileDriverClose().err == hipFileSuccess, "hipFileDriverClose");

    unsigned char *back = (unsigned char *)malloc(FILE_SIZE);
    f = fopen(dst_path, "rb");
    size_t got = f ? fread(back, 1, FILE_SIZE + 1, f) : 0;
    if (f) {
        fclose(f);
    }
    check(got == FILE_SIZE && memcmp(back, data, FILE_SIZE) == 0, "destination identical to source");
    free(back);
    free(data);
    printf("1..%d\n", checks);
    return failures == 0 ? 0 : 1;
}
