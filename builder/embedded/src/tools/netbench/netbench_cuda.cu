// The CUDA side of netbench. The unpack kernel reads the layout of unpack_layout.h the
// way NCCL's own kernel does: the metadata of queue slot step % 16 lists which bounce
// buffer bytes go where in the destination.
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "netbench_cuda.h"
#include "unpack_layout.h"

namespace {

struct State {
  cudaStream_t stream = nullptr;
  cudaEvent_t* events = nullptr;
  int nslots = 0;
  char err[256] = "";
};

State st;  // one per process: netbench drives one transfer

int fail(cudaError_t e, const char* what) {
  snprintf(st.err, sizeof st.err, "%s: %s", what, cudaGetErrorString(e));
  return -1;
}

constexpr int kBlocks = 32;
constexpr int kThreads = 256;

__global__ void unpackKernel(nb_unpackNetDeviceHandle* h, char* dst, uint64_t step) {
  const int slot = step % NB_UNPACK_QUEUE_DEPTH;
  nb_netUnpackMeta* meta = h->meta;
  const char* bounce = static_cast<const char*>(h->bounce_buf);
  // the plugin wrote the metadata to mapped host memory before test() said done
  const uint64_t cnt = *reinterpret_cast<volatile uint64_t*>(&meta->cnt[slot]);
  for (uint64_t i = blockIdx.x; i < cnt; i += gridDim.x) {
    nb_loadMeta m;
    m.r64[0] = reinterpret_cast<volatile uint64_t*>(&meta->mem[slot][i])[0];
    m.r64[1] = reinterpret_cast<volatile uint64_t*>(&meta->mem[slot][i])[1];
    const char* s = bounce + m.src_off;
    char* d = dst + m.dst_off;
    if (((m.src_off | m.dst_off | m.len) & 15) == 0 && (reinterpret_cast<uintptr_t>(dst) & 15) == 0 &&
        (reinterpret_cast<uintptr_t>(bounce) & 15) == 0) {
      for (uint32_t j = threadIdx.x; j < m.len / 16; j += blockDim.x)
        reinterpret_cast<uint4*>(d)[j] = reinterpret_cast<const uint4*>(s)[j];
    } else {
      for (uint32_t j = threadIdx.x; j < m.len; j += blockDim.x) d[j] = s[j];
    }
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) h->head = step;  // as NCCL saves its head
}

}  // namespace

extern "C" {

int nbc_init(int gpu, int nslots) {
  cudaError_t e;
  if ((e = cudaSetDevice(gpu)) != cudaSuccess) return fail(e, "cudaSetDevice");
  if ((e = cudaFree(nullptr)) != cudaSuccess) return fail(e, "create the primary context");
  if ((e = cudaStreamCreateWithFlags(&st.stream, cudaStreamNonBlocking)) != cudaSuccess) return fail(e, "cudaStreamCreate");
  st.events = static_cast<cudaEvent_t*>(calloc(nslots, sizeof(cudaEvent_t)));
  if (!st.events) return fail(cudaErrorMemoryAllocation, "allocate events");
  st.nslots = nslots;
  for (int i = 0; i < nslots; i++)
    if ((e = cudaEventCreateWithFlags(&st.events[i], cudaEventDisableTiming)) != cudaSuccess) return fail(e, "cudaEventCreate");
  return 0;
}

const char* nbc_error(void) { return st.err; }

void* nbc_malloc(size_t n) {
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, n);
  if (e != cudaSuccess) {
    fail(e, "cudaMalloc");
    return nullptr;
  }
  return p;
}

void* nbc_host_alloc(size_t n) {
  void* p = nullptr;
  cudaError_t e = cudaHostAlloc(&p, n, cudaHostAllocPortable);
  if (e != cudaSuccess) {
    fail(e, "cudaHostAlloc");
    return nullptr;
  }
  return p;
}

int nbc_memcpy(void* dst, const void* src, size_t n, int to_device) {
  cudaError_t e = cudaMemcpy(dst, src, n, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost);
  return e == cudaSuccess ? 0 : fail(e, "cudaMemcpy");
}

int nbc_copy_async(int slot, void* dst, const void* src, size_t n) {
  cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, st.stream);
  if (e != cudaSuccess) return fail(e, "cudaMemcpyAsync");
  e = cudaEventRecord(st.events[slot], st.stream);
  return e == cudaSuccess ? 0 : fail(e, "cudaEventRecord");
}

int nbc_unpack_async(int slot, const void* dev_handle, void* dst, uint64_t step) {
  unpackKernel<<<kBlocks, kThreads, 0, st.stream>>>(
      static_cast<nb_unpackNetDeviceHandle*>(const_cast<void*>(dev_handle)), static_cast<char*>(dst), step);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fail(e, "launch the unpack kernel");
  e = cudaEventRecord(st.events[slot], st.stream);
  return e == cudaSuccess ? 0 : fail(e, "cudaEventRecord");
}

int nbc_query(int slot) {
  cudaError_t e = cudaEventQuery(st.events[slot]);
  if (e == cudaSuccess) return 1;
  if (e == cudaErrorNotReady) return 0;
  return fail(e, "cudaEventQuery");
}

int nbc_read_head(const void* dev_handle, uint64_t* head) {
  nb_unpackNetDeviceHandle h;
  cudaError_t e = cudaMemcpy(&h, dev_handle, sizeof h, cudaMemcpyDefault);
  if (e != cudaSuccess) return fail(e, "read the device handle");
  *head = h.head;
  return 0;
}

}  // extern "C"
