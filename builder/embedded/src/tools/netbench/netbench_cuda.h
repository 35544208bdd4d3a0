/* The CUDA side of netbench: one stream, one event per window slot, one launch
 * configuration for the unpack kernel, all made once and reused for every chunk. */
#ifndef NETBENCH_CUDA_H
#define NETBENCH_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Select the device, create its primary context, the stream and nslots events. */
int nbc_init(int gpu, int nslots);
const char* nbc_error(void);
void* nbc_malloc(size_t n);
void* nbc_host_alloc(size_t n);
/* Synchronous copy; to_device 1: host to device, 0: device to host. */
int nbc_memcpy(void* dst, const void* src, size_t n, int to_device);
/* cudaMemcpyAsync on the stream, then the slot's event. */
int nbc_copy_async(int slot, void* dst, const void* src, size_t n);
/* The unpack kernel for receive number step on the stream, then the slot's event. */
int nbc_unpack_async(int slot, const void* dev_handle, void* dst, uint64_t step);
/* 1: the slot's work finished, 0: not yet, -1: error. */
int nbc_query(int slot);
/* Reads the head field of the plugin's device handle. */
int nbc_read_head(const void* dev_handle, uint64_t* head);

#ifdef __cplusplus
}
#endif

#endif
