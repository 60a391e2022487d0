/*
 * cuda_runtime_subset.h - the CUDA runtime calls the cuFile test programs make, declared with
 * CUDA's C ABI (error codes as int, streams as CUDA's struct pointer), so that the programs build
 * without CUDA's headers and link against the simulated CUDA library (libsimcuda.so) or the real
 * libcudart. Where <cuda_runtime_api.h> was included first, its declarations are used.
 *
 * SPDX-License-Identifier: MIT
 */

#ifndef HIPFILE_CUFILE_TESTS_CUDA_RUNTIME_SUBSET_H
#define HIPFILE_CUFILE_TESTS_CUDA_RUNTIME_SUBSET_H

#include <stddef.h>

/* __CUDA_RUNTIME_API_H__ is the include guard of CUDA's <cuda_runtime_api.h>. */
#ifndef __CUDA_RUNTIME_API_H__

#ifdef __cplusplus
extern "C" {
#endif

typedef int                 cudaError_t;
typedef struct CUstream_st *cudaStream_t;
typedef void (*cudaHostFn_t)(void *user_data);

#define cudaSuccess 0

/* cudaMemcpyKind */
#define cudaMemcpyHostToDevice 1
#define cudaMemcpyDeviceToHost 2
#define cudaMemcpyDefault      4

/* cudaStreamCreateWithFlags flags */
#define cudaStreamNonBlocking 0x01

/* cudaHostAlloc flags */
#define cudaHostAllocDefault 0x00

cudaError_t cudaMalloc(void **ptr, size_t size);
cudaError_t cudaFree(void *ptr);
cudaError_t cudaHostAlloc(void **ptr, size_t size, unsigned int flags);
cudaError_t cudaFreeHost(void *ptr);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t count, int kind);
cudaError_t cudaMemset(void *ptr, int value, size_t count);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void *user_data);

#ifdef __cplusplus
}
#endif

#endif /* __CUDA_RUNTIME_API_H__ */

#endif /* HIPFILE_CUFILE_TESTS_CUDA_RUNTIME_SUBSET_H */
