/*
 * hip_on_cuda.h - the few HIP runtime names that hipfile-rs's C tests and examples use, spelled
 * with the CUDA runtime, for a GPU machine that has CUDA and no HIP headers.
 *
 * Shipped in the GPU bundle (`cargo xtask gpu-bundle`) and force-included by its run.sh:
 *   cc -DHIPFILE_NO_HIP_HEADERS -include hip_on_cuda.h ... -lhipfile -lcudart
 * With HIPFILE_NO_HIP_HEADERS, hipfile.h declares hipError_t (int) and hipStream_t (void *) itself;
 * this header only maps function and constant names. hipSuccess is a plain 0 so that comparing it
 * with a hipError_t (int) is an int comparison in C++ too. Not part of the library's API.
 */
#ifndef HIPFILE_HIP_ON_CUDA_H
#define HIPFILE_HIP_ON_CUDA_H

#include <cuda_runtime_api.h>

#define hipSuccess 0
#define hipMalloc cudaMalloc
#define hipFree cudaFree
#define hipMemcpy cudaMemcpy
#define hipMemset cudaMemset
#define hipMemcpyHostToDevice cudaMemcpyHostToDevice
#define hipMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define hipHostMalloc cudaHostAlloc
#define hipHostFree cudaFreeHost
#define hipMallocManaged cudaMallocManaged
#define hipMemAttachGlobal cudaMemAttachGlobal
#define hipGetDeviceCount cudaGetDeviceCount
#define hipSetDevice cudaSetDevice
#define hipErrorNotReady cudaErrorNotReady

/* Streams and events: hipStream_t is hipfile.h's void *, so handles are cast to CUDA's types. */
typedef cudaEvent_t hipEvent_t;
#define hipStreamNonBlocking cudaStreamNonBlocking
#define hipStreamCreate(stream) cudaStreamCreate((cudaStream_t *)(stream))
#define hipStreamCreateWithFlags(stream, flags) \
    cudaStreamCreateWithFlags((cudaStream_t *)(stream), (flags))
#define hipStreamSynchronize(stream) cudaStreamSynchronize((cudaStream_t)(stream))
#define hipStreamDestroy(stream) cudaStreamDestroy((cudaStream_t)(stream))
#define hipEventCreate cudaEventCreate
#define hipEventRecord(event, stream) cudaEventRecord((event), (cudaStream_t)(stream))
#define hipEventQuery cudaEventQuery
#define hipEventDestroy cudaEventDestroy
#define hipLaunchHostFunc(stream, fn, data) \
    cudaLaunchHostFunc((cudaStream_t)(stream), (fn), (data))
#define hipMemcpyAsync(dst, src, count, kind, stream) \
    cudaMemcpyAsync((dst), (src), (count), (kind), (cudaStream_t)(stream))

#endif
