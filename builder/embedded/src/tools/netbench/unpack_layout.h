/*
 * Our declaration of the memory layout an NCCL_NET_DEVICE_UNPACK (version 7) plugin
 * shares with the GPU: the device handle points at a struct whose meta field is
 * host memory mapped to the device, holding for each of 16 queue slots the list of
 * (bounce offset, length, destination offset) copies that one completed receive needs.
 * NCCL's own kernel reads it the same way (src/device/network/unpack); abi_check.c
 * proves the layout against the NCCL tree a recipe builds against.
 */
#ifndef NETBENCH_UNPACK_LAYOUT_H
#define NETBENCH_UNPACK_LAYOUT_H

#include <stdint.h>

/* queue depth: one slot per outstanding receive (GPUDirect-TCPX's MAX_REQUESTS) */
#define NB_UNPACK_QUEUE_DEPTH 16
/* at most 4 MiB per receive, in 4 KiB pages, with 2x slack */
#define NB_UNPACK_MAX_SLICE_SIZE 4194304
#define NB_UNPACK_PAGE_SIZE 4096
#define NB_UNPACK_MAX_SLICE_PAGES (NB_UNPACK_MAX_SLICE_SIZE / NB_UNPACK_PAGE_SIZE * 2)

typedef union {
  uint64_t r64[2];
  struct {
    uint32_t src_off; /* offset in the bounce buffer */
    uint32_t len;
    uint64_t dst_off; /* offset in the receive's destination */
  };
} __attribute__((aligned(16))) nb_loadMeta;

typedef struct {
  nb_loadMeta mem[NB_UNPACK_QUEUE_DEPTH][NB_UNPACK_MAX_SLICE_PAGES];
  uint64_t cnt[NB_UNPACK_QUEUE_DEPTH]; /* entries of mem[slot] that are valid */
} nb_netUnpackMeta;

typedef struct {
  nb_netUnpackMeta* meta; /* host memory, mapped for the device */
  void* bounce_buf;
  uint64_t head; /* receives consumed so far, minus one: the slot is (head + 1) % depth */
} nb_unpackNetDeviceHandle;

#endif
