/*
 * A loopback NCCL net plugin (interface v7) for testing transfer programs: TCP over
 * 127.0.0.1, one device, host buffers (and CUDA buffers when built with
 * LOOPBACK_CUDA). It enforces the rules GPUDirect-TCPX enforces, and fails hard
 * (abort) where TCPX would fail a job:
 *
 *   - at most LOOPBACK_MAX_REQUESTS (default 16, TCPX's MAX_REQUESTS) requests held
 *     per comm; posting one more aborts with "request limit exceeded";
 *   - test() only on the oldest request not yet reported done;
 *   - with LOOPBACK_UNPACK=1 the plugin behaves like an NCCL_NET_DEVICE_UNPACK
 *     plugin: received data lands in a bounce buffer, scattered page by page in
 *     reverse order, described by the unpack metadata of unpack_layout.h; a
 *     completed receive stays held until irecvConsumed() (in order), which then
 *     poisons its bounce pages, so a consumer that reads after consuming gets
 *     garbage.
 *
 * Environment: LOOPBACK_MAX_REQUESTS, LOOPBACK_UNPACK, LOOPBACK_HOST_ONLY=1 (a CUDA build
 * offers host buffers only, as a plugin without GPUDirect does), LOOPBACK_VERBOSE=1 (a
 * line per comm at close with the most requests it held).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ncclnet_v7.h"
#include "unpack_layout.h"

#ifdef LOOPBACK_CUDA
#include <cuda_runtime.h>
#endif

#define LB_MAGIC 0x4c425031u /* "LBP1" */
#define LB_RING 256          /* request slots; the limit is enforced below this */
#define LB_SLOT_BYTES NB_UNPACK_MAX_SLICE_SIZE

enum { LB_SEND = 0, LB_RECV = 1 };

typedef struct {
  uint32_t magic;
  uint16_t port;
} lb_handle;

typedef struct {
  void* data;
  int size;
  int cuda;
} lb_mr;

struct lb_comm;

typedef struct {
  struct lb_comm* comm;
  unsigned seq;
  char* data;
  int size;
  int cuda;
  char* host; /* host copy of a CUDA buffer being sent or received */
  uint64_t hdr;
  size_t hdr_done;
  size_t body_done;
} lb_req;

typedef struct lb_comm {
  int fd;
  int dir;
  int unpack;
  int limit;
  unsigned posted;    /* requests posted */
  unsigned completed; /* transport finished */
  unsigned tested;    /* test() reported done */
  unsigned released;  /* given back: at test (send, host recv) or irecvConsumed */
  int max_held;
  lb_req reqs[LB_RING];
  /* UNPACK state: the device handle points at handle */
  nb_unpackNetDeviceHandle* handle;
  nb_netUnpackMeta* meta;
  char* bounce;
} lb_comm;

typedef struct {
  int fd;
} lb_listener;

static nb_ncclDebugLogger_t lb_log;

static void lb_fatal(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("loopback plugin: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  fflush(stderr);
  abort();
}

static int lb_env_int(const char* name, int def) {
  const char* v = getenv(name);
  return v && *v ? atoi(v) : def;
}

static nb_ncclResult_t lb_init(nb_ncclDebugLogger_t logFunction) {
  lb_log = logFunction;
  return nb_ncclSuccess;
}

static nb_ncclResult_t lb_devices(int* ndev) {
  *ndev = 1;
  return nb_ncclSuccess;
}

static nb_ncclResult_t lb_get_properties(int dev, nb_ncclNetProperties_v7_t* props) {
  if (dev != 0) return nb_ncclInvalidArgument;
  memset(props, 0, sizeof *props);
  props->name = (char*)"lo";
  props->pciPath = NULL;
  props->guid = 0x6c6f6f70;
  props->ptrSupport = NB_NCCL_PTR_HOST;
#ifdef LOOPBACK_CUDA
  if (!lb_env_int("LOOPBACK_HOST_ONLY", 0)) props->ptrSupport |= NB_NCCL_PTR_CUDA;
#endif
  props->speed = 100000;
  props->maxComms = 1024;
  props->maxRecvs = 1;
  if (lb_env_int("LOOPBACK_UNPACK", 0)) {
    props->netDeviceType = NB_NCCL_NET_DEVICE_UNPACK;
    props->netDeviceVersion = NB_NCCL_NET_DEVICE_UNPACK_VERSION;
  }
  return nb_ncclSuccess;
}

static int lb_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  return fl < 0 ? -1 : fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static void lb_tune(int fd) {
  int one = 1, buf = 4 << 20;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
}

static nb_ncclResult_t lb_listen(int dev, void* handle, void** listenComm) {
  if (dev != 0) return nb_ncclInvalidArgument;
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return nb_ncclSystemError;
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, (struct sockaddr*)&a, sizeof a) || listen(fd, 16) || getsockname(fd, (struct sockaddr*)&a, &len) ||
      lb_nonblock(fd)) {
    close(fd);
    return nb_ncclSystemError;
  }
  lb_handle h = {LB_MAGIC, ntohs(a.sin_port)};
  memset(handle, 0, NB_NCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &h, sizeof h);
  lb_listener* l = calloc(1, sizeof *l);
  if (!l) return nb_ncclSystemError;
  l->fd = fd;
  *listenComm = l;
  return nb_ncclSuccess;
}

static lb_comm* lb_new_comm(int fd, int dir) {
  lb_comm* c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->fd = fd;
  c->dir = dir;
  c->limit = lb_env_int("LOOPBACK_MAX_REQUESTS", 16);
  if (c->limit < 1 || c->limit > LB_RING) c->limit = 16;
  lb_tune(fd);
  lb_nonblock(fd);
  return c;
}

static nb_ncclResult_t lb_connect(int dev, void* handle, void** sendComm, nb_ncclNetDeviceHandle_v7_t** sendDevComm) {
  (void)sendDevComm;
  lb_handle h;
  memcpy(&h, handle, sizeof h);
  if (dev != 0 || h.magic != LB_MAGIC) {
    fprintf(stderr, "loopback plugin: connect: not a loopback handle\n");
    return nb_ncclInvalidArgument;
  }
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return nb_ncclSystemError;
  struct sockaddr_in a = {0};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(h.port);
  if (connect(fd, (struct sockaddr*)&a, sizeof a)) {
    close(fd);
    return nb_ncclSystemError;
  }
  lb_comm* c = lb_new_comm(fd, LB_SEND);
  if (!c) {
    close(fd);
    return nb_ncclSystemError;
  }
  *sendComm = c;
  return nb_ncclSuccess;
}

static void* lb_host_alloc(size_t n) {
#ifdef LOOPBACK_CUDA
  void* p = NULL;
  if (cudaHostAlloc(&p, n, cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess) return NULL;
  memset(p, 0, n);
  return p;
#else
  return calloc(1, n);
#endif
}

static void lb_host_free(void* p) {
#ifdef LOOPBACK_CUDA
  if (p) cudaFreeHost(p);
#else
  free(p);
#endif
}

/* What a kernel (or, without CUDA, the host) dereferences. */
static void* lb_dev_ptr(void* p) {
#ifdef LOOPBACK_CUDA
  void* d = NULL;
  if (cudaHostGetDevicePointer(&d, p, 0) != cudaSuccess) return NULL;
  return d;
#else
  return p;
#endif
}

static nb_ncclResult_t lb_accept(void* listenComm, void** recvComm, nb_ncclNetDeviceHandle_v7_t** recvDevComm) {
  lb_listener* l = listenComm;
  *recvComm = NULL;
  int fd = accept(l->fd, NULL, NULL);
  if (fd < 0) return (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) ? nb_ncclSuccess : nb_ncclSystemError;
  lb_comm* c = lb_new_comm(fd, LB_RECV);
  if (!c) {
    close(fd);
    return nb_ncclSystemError;
  }
  if (lb_env_int("LOOPBACK_UNPACK", 0)) {
    if (!recvDevComm || !*recvDevComm) lb_fatal("accept: an UNPACK plugin needs the caller's device handle (NCCL passes one)");
    c->unpack = 1;
    c->handle = lb_host_alloc(sizeof *c->handle);
    c->meta = lb_host_alloc(sizeof *c->meta);
    c->bounce = lb_host_alloc((size_t)NB_UNPACK_QUEUE_DEPTH * LB_SLOT_BYTES);
    if (!c->handle || !c->meta || !c->bounce) lb_fatal("accept: cannot allocate the unpack state");
    c->handle->meta = lb_dev_ptr(c->meta);
    c->handle->bounce_buf = lb_dev_ptr(c->bounce);
    c->handle->head = (uint64_t)-1;
    nb_ncclNetDeviceHandle_v7_t* dh = *recvDevComm;
    dh->netDeviceType = NB_NCCL_NET_DEVICE_UNPACK;
    dh->netDeviceVersion = NB_NCCL_NET_DEVICE_UNPACK_VERSION;
    dh->handle = lb_dev_ptr(c->handle);
    dh->size = sizeof *c->handle;
    dh->needsProxyProgress = 1;
  }
  *recvComm = c;
  return nb_ncclSuccess;
}

static nb_ncclResult_t lb_reg_mr(void* comm, void* data, int size, int type, void** mhandle) {
  (void)comm;
  if (type != NB_NCCL_PTR_HOST) {
#ifdef LOOPBACK_CUDA
    if (type != NB_NCCL_PTR_CUDA || lb_env_int("LOOPBACK_HOST_ONLY", 0)) return nb_ncclInvalidArgument;
#else
    fprintf(stderr, "loopback plugin: regMr: host buffers only (built without CUDA)\n");
    return nb_ncclInvalidArgument;
#endif
  }
  lb_mr* m = calloc(1, sizeof *m);
  if (!m) return nb_ncclSystemError;
  m->data = data;
  m->size = size;
  m->cuda = type == NB_NCCL_PTR_CUDA;
  *mhandle = m;
  return nb_ncclSuccess;
}

static nb_ncclResult_t lb_dereg_mr(void* comm, void* mhandle) {
  (void)comm;
  free(mhandle);
  return nb_ncclSuccess;
}

static lb_req* lb_post(lb_comm* c, void* data, int size, void* mhandle) {
  unsigned held = c->posted - c->released;
  if ((int)held >= c->limit)
    lb_fatal("request limit exceeded: %s request %u posted while %u are held (limit %d)",
             c->dir == LB_SEND ? "send" : "recv", c->posted + 1, held, c->limit);
  lb_mr* m = mhandle;
  if (!m || (char*)data < (char*)m->data || (char*)data + size > (char*)m->data + m->size)
    lb_fatal("%s: buffer outside its registered region", c->dir == LB_SEND ? "isend" : "irecv");
  lb_req* r = &c->reqs[c->posted % LB_RING];
  memset(r, 0, sizeof *r);
  r->comm = c;
  r->seq = c->posted;
  r->data = data;
  r->size = size;
  r->cuda = m->cuda;
  c->posted++;
  if ((int)(c->posted - c->released) > c->max_held) c->max_held = c->posted - c->released;
  return r;
}

static nb_ncclResult_t lb_isend(void* sendComm, void* data, int size, int tag, void* mhandle, void** request) {
  (void)tag;
  lb_comm* c = sendComm;
  lb_req* r = lb_post(c, data, size, mhandle);
  r->hdr = (uint64_t)size;
#ifdef LOOPBACK_CUDA
  if (r->cuda) {
    r->host = malloc(size ? size : 1);
    if (!r->host || cudaMemcpy(r->host, data, size, cudaMemcpyDeviceToHost) != cudaSuccess) lb_fatal("isend: copy from the device");
  }
#endif
  *request = r;
  return nb_ncclSuccess;
}

static nb_ncclResult_t lb_irecv(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request) {
  (void)tags;
  lb_comm* c = recvComm;
  if (n != 1) return nb_ncclInvalidArgument; /* maxRecvs is 1 */
  if (c->unpack && sizes[0] > LB_SLOT_BYTES) lb_fatal("irecv: %d bytes is more than an unpack slot holds (%d)", sizes[0], LB_SLOT_BYTES);
  lb_req* r = lb_post(c, data[0], sizes[0], mhandles[0]);
#ifdef LOOPBACK_CUDA
  if (r->cuda && !c->unpack) {
    r->host = malloc(sizes[0] ? sizes[0] : 1);
    if (!r->host) lb_fatal("irecv: out of memory");
  }
#endif
  *request = r;
  return nb_ncclSuccess;
}

/* Where byte off of receive r goes: its destination, or with UNPACK its bounce slot,
 * pages in reverse order. Returns how many bytes may go there contiguously. */
static char* lb_recv_dst(lb_comm* c, lb_req* r, size_t off, size_t* room) {
  if (!c->unpack) {
    *room = r->hdr - off;
    return (r->host ? r->host : r->data) + off;
  }
  size_t npages = (r->hdr + NB_UNPACK_PAGE_SIZE - 1) / NB_UNPACK_PAGE_SIZE;
  size_t page = off / NB_UNPACK_PAGE_SIZE, within = off % NB_UNPACK_PAGE_SIZE;
  size_t slot = r->seq % NB_UNPACK_QUEUE_DEPTH;
  *room = NB_UNPACK_PAGE_SIZE - within;
  if (*room > r->hdr - off) *room = r->hdr - off;
  return c->bounce + slot * (size_t)LB_SLOT_BYTES + (npages - 1 - page) * NB_UNPACK_PAGE_SIZE + within;
}

static void lb_finish_recv(lb_comm* c, lb_req* r) {
  if (c->unpack) {
    size_t slot = r->seq % NB_UNPACK_QUEUE_DEPTH, npages = (r->hdr + NB_UNPACK_PAGE_SIZE - 1) / NB_UNPACK_PAGE_SIZE;
    for (size_t i = 0; i < npages; i++) {
      nb_loadMeta* m = &c->meta->mem[slot][i];
      size_t len = r->hdr - i * NB_UNPACK_PAGE_SIZE;
      m->src_off = (uint32_t)(slot * (size_t)LB_SLOT_BYTES + (npages - 1 - i) * NB_UNPACK_PAGE_SIZE);
      m->len = (uint32_t)(len < NB_UNPACK_PAGE_SIZE ? len : NB_UNPACK_PAGE_SIZE);
      m->dst_off = i * NB_UNPACK_PAGE_SIZE;
    }
    __atomic_store_n(&c->meta->cnt[slot], (uint64_t)npages, __ATOMIC_RELEASE);
    return;
  }
#ifdef LOOPBACK_CUDA
  if (r->host && cudaMemcpy(r->data, r->host, r->hdr, cudaMemcpyHostToDevice) != cudaSuccess) lb_fatal("irecv: copy to the device");
#endif
}

/* Move bytes for the oldest unfinished requests; returns 0 or an error. */
static nb_ncclResult_t lb_progress(lb_comm* c) {
  while (c->completed != c->posted) {
    lb_req* r = &c->reqs[c->completed % LB_RING];
    while (r->hdr_done < sizeof r->hdr) {
      ssize_t n = c->dir == LB_SEND ? send(c->fd, (char*)&r->hdr + r->hdr_done, sizeof r->hdr - r->hdr_done, MSG_NOSIGNAL)
                                    : recv(c->fd, (char*)&r->hdr + r->hdr_done, sizeof r->hdr - r->hdr_done, 0);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return nb_ncclSuccess;
      if (n <= 0) {
        fprintf(stderr, "loopback plugin: connection lost: %s\n", n ? strerror(errno) : "closed by the peer");
        return nb_ncclRemoteError;
      }
      r->hdr_done += n;
    }
    if (c->dir == LB_RECV && r->hdr > (uint64_t)r->size) {
      fprintf(stderr, "loopback plugin: message of %llu bytes for a %d-byte receive\n", (unsigned long long)r->hdr, r->size);
      return nb_ncclInvalidUsage;
    }
    while (r->body_done < r->hdr) {
      ssize_t n;
      if (c->dir == LB_SEND) {
        const char* src = (r->host ? r->host : r->data) + r->body_done;
        n = send(c->fd, src, r->hdr - r->body_done, MSG_NOSIGNAL);
      } else {
        size_t room;
        char* dst = lb_recv_dst(c, r, r->body_done, &room);
        n = recv(c->fd, dst, room, 0);
      }
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return nb_ncclSuccess;
      if (n <= 0) {
        fprintf(stderr, "loopback plugin: connection lost: %s\n", n ? strerror(errno) : "closed by the peer");
        return nb_ncclRemoteError;
      }
      r->body_done += n;
    }
    if (c->dir == LB_RECV) lb_finish_recv(c, r);
    free(r->host);
    r->host = NULL;
    c->completed++;
  }
  return nb_ncclSuccess;
}

static nb_ncclResult_t lb_test(void* request, int* done, int* sizes) {
  lb_req* r = request;
  lb_comm* c = r->comm;
  *done = 0;
  if (r->seq != c->tested) lb_fatal("test on request %u while request %u is the oldest not reported done (GPUDirect-TCPX fails this too)", r->seq + 1, c->tested + 1);
  nb_ncclResult_t res = lb_progress(c);
  if (res != nb_ncclSuccess) return res;
  if (c->completed > r->seq) {
    *done = 1;
    if (sizes) *sizes = (int)r->hdr;
    c->tested++;
    if (c->dir == LB_SEND || !c->unpack) c->released++;
  }
  return nb_ncclSuccess;
}

static nb_ncclResult_t lb_irecv_consumed(void* recvComm, int n, void* request) {
  lb_comm* c = recvComm;
  lb_req* r = request;
  if (!c->unpack) return nb_ncclSuccess;
  if (n != 1 || !r || r->comm != c) lb_fatal("irecvConsumed: not a request of this comm");
  if (r->seq != c->released || c->released == c->tested)
    lb_fatal("irecvConsumed on request %u: the oldest completed, unconsumed request is %u (in order, after test reported done)", r->seq + 1, c->released + 1);
  size_t slot = r->seq % NB_UNPACK_QUEUE_DEPTH;
  size_t used = (r->hdr + NB_UNPACK_PAGE_SIZE - 1) / NB_UNPACK_PAGE_SIZE * NB_UNPACK_PAGE_SIZE;
  /* the pages go back to the pool: whoever reads them now reads garbage */
  memset(c->bounce + slot * (size_t)LB_SLOT_BYTES, 0xA5, used);
  __atomic_store_n(&c->meta->cnt[slot], 0, __ATOMIC_RELEASE);
  c->released++;
  return nb_ncclSuccess;
}

static nb_ncclResult_t lb_iflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  (void)recvComm, (void)n, (void)data, (void)sizes, (void)mhandles;
  *request = NULL; /* nothing to flush: data is in place when test says done */
  return nb_ncclSuccess;
}

static nb_ncclResult_t lb_get_device_mr(void* comm, void* mhandle, void** dptr_mhandle) {
  (void)comm, (void)mhandle;
  *dptr_mhandle = NULL;
  return nb_ncclSuccess;
}

static nb_ncclResult_t lb_close(void* comm) {
  lb_comm* c = comm;
  if (!c) return nb_ncclSuccess;
  if (lb_env_int("LOOPBACK_VERBOSE", 0))
    fprintf(stderr, "loopback plugin: %s comm closed: %u requests, at most %d held (limit %d)\n",
            c->dir == LB_SEND ? "send" : "recv", c->posted, c->max_held, c->limit);
  if (c->unpack && c->released != c->posted)
    fprintf(stderr, "loopback plugin: recv comm closed with %u requests never consumed\n", c->posted - c->released);
  close(c->fd);
  lb_host_free(c->handle);
  lb_host_free(c->meta);
  lb_host_free(c->bounce);
  free(c);
  return nb_ncclSuccess;
}

static nb_ncclResult_t lb_close_listen(void* listenComm) {
  lb_listener* l = listenComm;
  if (l) {
    close(l->fd);
    free(l);
  }
  return nb_ncclSuccess;
}

__attribute__((visibility("default"))) const nb_ncclNet_v7_t ncclNetPlugin_v7 = {
    .name = "Loopback",
    .init = lb_init,
    .devices = lb_devices,
    .getProperties = lb_get_properties,
    .listen = lb_listen,
    .connect = lb_connect,
    .accept = lb_accept,
    .regMr = lb_reg_mr,
    .regMrDmaBuf = NULL,
    .deregMr = lb_dereg_mr,
    .isend = lb_isend,
    .irecv = lb_irecv,
    .iflush = lb_iflush,
    .test = lb_test,
    .closeSend = lb_close,
    .closeRecv = lb_close,
    .closeListen = lb_close_listen,
    .getDeviceMr = lb_get_device_mr,
    .irecvConsumed = lb_irecv_consumed,
};
