// Proves at compile time that unpack_layout.h describes the unpack queue the way the
// NCCL tree a recipe builds against does (src/device/network/unpack/unpack_defs.h).
// Built only with CUDA (NCCL's device headers need it) and NCCL_SRC and NCCL_INCLUDE.
#include <cstddef>

#include "unpack_defs.h"

#include "unpack_layout.h"

static_assert(NCCL_NET_DEVICE_UNPACK_MAX_QUEUE_DEPTH == NB_UNPACK_QUEUE_DEPTH, "queue depth");
static_assert(NET_UNPACK_MAX_SLICE_SIZE == NB_UNPACK_MAX_SLICE_SIZE, "slice size");
static_assert(SLICE_PAGE_SIZE == NB_UNPACK_PAGE_SIZE, "page size");
static_assert(NET_UNPACK_MAX_SLICE_PAGES == NB_UNPACK_MAX_SLICE_PAGES, "pages per slice");

static_assert(sizeof(loadMeta) == sizeof(nb_loadMeta) && alignof(loadMeta) == alignof(nb_loadMeta), "loadMeta");
static_assert(offsetof(loadMeta, src_off) == offsetof(nb_loadMeta, src_off), "loadMeta.src_off");
static_assert(offsetof(loadMeta, len) == offsetof(nb_loadMeta, len), "loadMeta.len");
static_assert(offsetof(loadMeta, dst_off) == offsetof(nb_loadMeta, dst_off), "loadMeta.dst_off");

static_assert(sizeof(netUnpackMeta) == sizeof(nb_netUnpackMeta), "netUnpackMeta");
static_assert(offsetof(netUnpackMeta, mem) == offsetof(nb_netUnpackMeta, mem), "netUnpackMeta.mem");
static_assert(offsetof(netUnpackMeta, cnt) == offsetof(nb_netUnpackMeta, cnt), "netUnpackMeta.cnt");

static_assert(sizeof(unpackNetDeviceHandle) == sizeof(nb_unpackNetDeviceHandle), "unpackNetDeviceHandle");
static_assert(offsetof(unpackNetDeviceHandle, meta) == offsetof(nb_unpackNetDeviceHandle, meta), "handle.meta");
static_assert(offsetof(unpackNetDeviceHandle, bounce_buf) == offsetof(nb_unpackNetDeviceHandle, bounce_buf), "handle.bounce_buf");
static_assert(offsetof(unpackNetDeviceHandle, head) == offsetof(nb_unpackNetDeviceHandle, head), "handle.head");

extern "C" int netbench_unpack_abi_checked(void) { return 1; }
