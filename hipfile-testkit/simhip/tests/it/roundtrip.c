/* A C program written against the real HIP headers, run on the simulated HIP library. */
#include <hip/hip_runtime_api.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                              \
    do {                                                                         \
        hipError_t err_ = (call);                                                \
        if (err_ != hipSuccess) {                                                \
            fprintf(stderr, "%s failed: %s (%s)\n", #call, hipGetErrorName(err_), \
                    hipGetErrorString(err_));                                    \
            return 1;                                                            \
        }                                                                        \
    } while (0)

#define EXPECT(cond)                                       \
    do {                                                   \
        if (!(cond)) {                                     \
            fprintf(stderr, "expectation failed: %s\n", #cond); \
            return 2;                                      \
        }                                                  \
    } while (0)

enum { LEN = 1 << 16, N = 4096, OFF = 100 };

int main(void) {
    int count = 0;
    CHECK(hipGetDeviceCount(&count));
    EXPECT(count >= 1);

    void *dev = NULL;
    CHECK(hipMalloc(&dev, LEN));
    unsigned char in[N], out[N];
    for (int i = 0; i < N; i++) in[i] = (unsigned char)(i * 7 + 3);
    CHECK(hipMemcpy((char *)dev + OFF, in, N, hipMemcpyHostToDevice));
    memset(out, 0, N);
    CHECK(hipMemcpy(out, (char *)dev + OFF, N, hipMemcpyDeviceToHost));
    EXPECT(memcmp(in, out, N) == 0);

    hipPointerAttribute_t attr;
    memset(&attr, 0xff, sizeof attr);
    CHECK(hipPointerGetAttributes(&attr, (char *)dev + OFF));
    EXPECT(attr.memoryType == hipMemoryTypeDevice);
    EXPECT(attr.isManaged == 0);
    EXPECT(attr.device == 0);

    hipDeviceptr_t base = NULL;
    size_t size = 0;
    CHECK(hipMemGetAddressRange(&base, &size, (char *)dev + OFF));
    EXPECT(base == dev && size == LEN);

    void *host = NULL;
    CHECK(hipHostMalloc(&host, N, 0));
    CHECK(hipPointerGetAttributes(&attr, host));
    EXPECT(attr.memoryType == hipMemoryTypeHost);

    hipStream_t stream;
    CHECK(hipStreamCreate(&stream));
    CHECK(hipMemcpyAsync(host, (char *)dev + OFF, N, hipMemcpyDeviceToHost, stream));
    CHECK(hipStreamSynchronize(stream));
    EXPECT(memcmp(host, in, N) == 0);

    /* Past the end of the allocation: refused, recorded as the last error, nothing written. */
    EXPECT(hipMemcpy(out, (char *)dev + LEN - 10, 100, hipMemcpyDeviceToHost) == hipErrorInvalidValue);
    EXPECT(hipGetLastError() == hipErrorInvalidValue);
    EXPECT(hipGetLastError() == hipSuccess);
    EXPECT(hipMalloc(NULL, 16) == hipErrorInvalidValue);

    CHECK(hipStreamDestroy(stream));
    CHECK(hipHostFree(host));
    CHECK(hipFree(dev));
    printf("simhip C roundtrip ok\n");
    return 0;
}
