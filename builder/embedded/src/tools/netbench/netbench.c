/*
 * netbench: moves a message between two ranks through any NCCL net plugin, loaded by
 * its public ncclNet_v7 interface, and reports bandwidth and per-chunk latency.
 *
 * The discipline it follows is the one GPUDirect-TCPX demands and that NCCL itself
 * keeps:
 *   - a sliding window: never more than --window requests held per comm, and the
 *     window may not exceed the plugin's request limit (--request-limit, 16: TCPX's
 *     MAX_REQUESTS; a 17th isend/irecv fails with "unable to allocate requests");
 *   - requests are tested oldest first, and released oldest first;
 *   - a receive into device memory through an UNPACK plugin (TCPX) completes in the
 *     plugin's bounce buffer; the receiver scatters it into place with a kernel and
 *     gives the request back (irecvConsumed) only after that kernel's CUDA event
 *     completed, because the plugin reuses the bounce pages at once;
 *   - one CUDA stream and one launch configuration serve every chunk (a stream or
 *     launcher made per chunk costs tens of milliseconds a chunk).
 *
 * Rank 1 receives and listens on --oob HOST:PORT for rank 0, which sends: the
 * plugin's connection handle travels over that socket.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ncclnet_v7.h"
#include "unpack_layout.h"
#ifdef NETBENCH_CUDA
#include "netbench_cuda.h"
#endif

#define NB_VERSION "0.1.0"
#define NB_MAX_WINDOW 64

enum { EXIT_FAIL = 1, EXIT_USAGE = 2, EXIT_ENV = 3 };

static void die(int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("netbench: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(code);
}

static int g_verbose;

static void nb_logger(nb_ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)flags;
  if (level > NB_NCCL_LOG_WARN && !g_verbose) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "netbench: plugin %s %s:%d ", level <= NB_NCCL_LOG_WARN ? "WARN" : "INFO", file ? file : "?", line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
  const char* plugin;
  int rank;
  const char* oob;
  int dev;
  size_t size;
  size_t chunk;
  int window;
  int limit;
  int device_mem;
  int gpu;
  int iters;
  int json;
  int timeout;
} opts_t;

typedef enum { M_HOST_DIRECT, M_HOST_UNPACK, M_DEVICE_DIRECT, M_DEVICE_UNPACK, M_DEVICE_STAGED } nb_mode;
static const char* mode_name[] = {"host-direct", "host-unpack", "device-direct", "device-unpack", "device-staged"};

static void usage(FILE* f) {
  fprintf(f,
          "usage: netbench --rank 0|1 --oob HOST:PORT [options]\n"
          "  rank 1 receives and listens on HOST:PORT; rank 0 sends and connects to it\n"
          "  --plugin PATH|NAME   net plugin (default $NCCL_NET_PLUGIN, else libnccl-net.so; a NAME\n"
          "                       is also tried as libnccl-net-NAME.so, as NCCL does)\n"
          "  --size BYTES         message size per iteration (default 256M; K, M, G suffixes)\n"
          "  --chunk BYTES        bytes per request (default 512K)\n"
          "  --window N           requests held at once per comm (default: the request limit)\n"
          "  --request-limit N    the plugin's requests per comm (default 16, GPUDirect-TCPX's MAX_REQUESTS)\n"
          "  --mem host|device    where the message lives (default host)\n"
          "  --gpu N              CUDA device for --mem device (default 0)\n"
          "  --dev N              plugin device (NIC) index (default 0)\n"
          "  --iters N            iterations (default 3)\n"
          "  --timeout SECONDS    give up when nothing completes for this long (default 60)\n"
          "  --json               print the result as one JSON line\n"
          "  --verbose            print the plugin's INFO lines\n");
}

static size_t parse_size(const char* s, const char* flag) {
  char* end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s) die(EXIT_USAGE, "%s %s: not a size", flag, s);
  switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
  }
  if (*end == 'i' || *end == 'B') end++;
  if (*end == 'B') end++;
  if (*end) die(EXIT_USAGE, "%s %s: not a size (use e.g. 512K, 256M)", flag, s);
  return (size_t)v;
}

static int parse_int(const char* s, const char* flag) {
  char* end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < INT_MIN || v > INT_MAX) die(EXIT_USAGE, "%s %s: not a number", flag, s);
  return (int)v;
}

static void parse(int argc, char** argv, opts_t* o) {
  memset(o, 0, sizeof *o);
  o->rank = -1;
  o->size = 256u << 20;
  o->chunk = 512u << 10;
  o->limit = 16;
  o->iters = 3;
  o->timeout = 60;
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV() \
  if (!v) die(EXIT_USAGE, "%s needs a value", a); \
  i++
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      exit(0);
    } else if (!strcmp(a, "--version")) {
      printf("netbench %s (ncclNet_v7)\n", NB_VERSION);
      exit(0);
    } else if (!strcmp(a, "--rank")) { NEEDV(); o->rank = parse_int(v, a);
    } else if (!strcmp(a, "--oob")) { NEEDV(); o->oob = v;
    } else if (!strcmp(a, "--plugin")) { NEEDV(); o->plugin = v;
    } else if (!strcmp(a, "--size")) { NEEDV(); o->size = parse_size(v, a);
    } else if (!strcmp(a, "--chunk")) { NEEDV(); o->chunk = parse_size(v, a);
    } else if (!strcmp(a, "--window")) { NEEDV(); o->window = parse_int(v, a);
    } else if (!strcmp(a, "--request-limit")) { NEEDV(); o->limit = parse_int(v, a);
    } else if (!strcmp(a, "--mem")) {
      NEEDV();
      if (!strcmp(v, "host")) o->device_mem = 0;
      else if (!strcmp(v, "device")) o->device_mem = 1;
      else die(EXIT_USAGE, "--mem %s: use host or device", v);
    } else if (!strcmp(a, "--gpu")) { NEEDV(); o->gpu = parse_int(v, a);
    } else if (!strcmp(a, "--dev")) { NEEDV(); o->dev = parse_int(v, a);
    } else if (!strcmp(a, "--iters")) { NEEDV(); o->iters = parse_int(v, a);
    } else if (!strcmp(a, "--timeout")) { NEEDV(); o->timeout = parse_int(v, a);
    } else if (!strcmp(a, "--json")) { o->json = 1;
    } else if (!strcmp(a, "--verbose")) { g_verbose = 1;
    } else {
      usage(stderr);
      die(EXIT_USAGE, "unknown argument %s", a);
    }
#undef NEEDV
  }
  if (o->rank != 0 && o->rank != 1) die(EXIT_USAGE, "--rank 0 (sender) or --rank 1 (receiver) is required");
  if (!o->oob) die(EXIT_USAGE, "--oob HOST:PORT is required (rank 1 listens there, rank 0 connects)");
  if (o->limit < 1 || o->limit > NB_MAX_WINDOW) die(EXIT_USAGE, "--request-limit %d: use 1..%d", o->limit, NB_MAX_WINDOW);
  if (o->window == 0) o->window = o->limit;
  if (o->window < 1) die(EXIT_USAGE, "--window %d: use at least 1", o->window);
  if (o->window > o->limit)
    die(EXIT_USAGE, "--window %d exceeds the plugin's request limit %d: a request past the limit fails in the plugin", o->window, o->limit);
  if (o->chunk == 0 || o->chunk > INT_MAX) die(EXIT_USAGE, "--chunk: use 1 byte to 2 GiB");
  if (o->size == 0 || o->size > INT_MAX) die(EXIT_USAGE, "--size: use 1 byte to 2 GiB (plugins register with an int size)");
  if (o->chunk > o->size) o->chunk = o->size;
  if (o->iters < 1) die(EXIT_USAGE, "--iters: use at least 1");
  if (o->timeout < 1) die(EXIT_USAGE, "--timeout: use at least 1 second");
}

/* ---- out-of-band socket ---- */

static void split_hostport(const char* s, char* host, size_t hl, char* port, size_t pl) {
  const char* c = strrchr(s, ':');
  if (!c || c == s || !c[1]) die(EXIT_USAGE, "--oob %s: use HOST:PORT", s);
  size_t n = (size_t)(c - s);
  if (s[0] == '[' && n >= 2 && s[n - 1] == ']') s++, n -= 2;
  if (n >= hl || strlen(c + 1) >= pl) die(EXIT_USAGE, "--oob %s: too long", s);
  memcpy(host, s, n);
  host[n] = 0;
  strcpy(port, c + 1);
}

static int oob_listen_accept(const char* hostport, int timeout) {
  char host[256], port[32];
  split_hostport(hostport, host, sizeof host, port, sizeof port);
  struct addrinfo hints = {0}, *ai;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  int rc = getaddrinfo(host, port, &hints, &ai);
  if (rc) die(EXIT_USAGE, "--oob %s: %s", hostport, gai_strerror(rc));
  int fd = socket(ai->ai_family, SOCK_STREAM, 0), one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 1))
    die(EXIT_ENV, "listen on %s: %s", hostport, strerror(errno));
  freeaddrinfo(ai);
  struct pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, timeout * 1000) != 1) die(EXIT_FAIL, "rank 0 did not connect to %s within %d s", hostport, timeout);
  int c = accept(fd, NULL, NULL);
  if (c < 0) die(EXIT_FAIL, "accept on %s: %s", hostport, strerror(errno));
  close(fd);
  setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return c;
}

static int oob_connect(const char* hostport, int timeout) {
  char host[256], port[32];
  split_hostport(hostport, host, sizeof host, port, sizeof port);
  double deadline = now() + timeout;
  for (;;) {
    struct addrinfo hints = {0}, *ai;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, port, &hints, &ai);
    if (rc) die(EXIT_USAGE, "--oob %s: %s", hostport, gai_strerror(rc));
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    int ok = fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0;
    freeaddrinfo(ai);
    if (ok) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    if (fd >= 0) close(fd);
    if (now() > deadline) die(EXIT_FAIL, "rank 1 is not listening on %s (waited %d s)", hostport, timeout);
    usleep(50 * 1000);
  }
}

static void oob_write(int fd, const void* p, size_t n) {
  const char* b = p;
  while (n) {
    ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) die(EXIT_FAIL, "out-of-band socket: %s", w ? strerror(errno) : "closed");
    b += w, n -= (size_t)w;
  }
}

static void oob_read(int fd, void* p, size_t n, int timeout) {
  char* b = p;
  while (n) {
    struct pollfd pf = {fd, POLLIN, 0};
    if (poll(&pf, 1, timeout * 1000) != 1) die(EXIT_FAIL, "the peer said nothing for %d s", timeout);
    ssize_t r = recv(fd, b, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) die(EXIT_FAIL, "the peer went away (out-of-band socket %s)", r ? strerror(errno) : "closed");
    b += r, n -= (size_t)r;
  }
}

typedef struct {
  char magic[8];
  uint64_t size, chunk;
  int32_t iters, window;
  char handle[NB_NCCL_NET_HANDLE_MAXSIZE];
} hello_t;

/* ---- the plugin ---- */

static nb_ncclNet_v7_t* load_plugin(const char* want, char* used, size_t usedlen) {
  const char* name = want ? want : getenv("NCCL_NET_PLUGIN");
  char alt[PATH_MAX];
  const char* tries[2] = {name && *name ? name : "libnccl-net.so", NULL};
  if (name && *name && !strchr(name, '/') && strncmp(name, "lib", 3)) {
    snprintf(alt, sizeof alt, "libnccl-net-%s.so", name);
    tries[1] = alt;
  }
  char errs[2048] = "";
  for (int i = 0; i < 2 && tries[i]; i++) {
    void* h = dlopen(tries[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      size_t l = strlen(errs);
      snprintf(errs + l, sizeof errs - l, "\n  %s", dlerror());
      continue;
    }
    nb_ncclNet_v7_t* net = dlsym(h, NB_NCCL_NET_PLUGIN_V7_SYMBOL);
    if (!net) die(EXIT_ENV, "%s exports no %s symbol: it is not an NCCL net plugin of interface v7", tries[i], NB_NCCL_NET_PLUGIN_V7_SYMBOL);
    snprintf(used, usedlen, "%s", tries[i]);
    return net;
  }
  die(EXIT_ENV, "cannot load the net plugin (--plugin or NCCL_NET_PLUGIN):%s", errs);
  return NULL;
}

#define NETCHECK(call)                                                                 \
  do {                                                                                 \
    nb_ncclResult_t r_ = (call);                                                       \
    if (r_ != nb_ncclSuccess) die(EXIT_FAIL, "%s failed: plugin error %d", #call, (int)r_); \
  } while (0)

/* ---- data ---- */

static uint64_t pattern_word(size_t i, int iter) { return (uint64_t)(i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)(iter + 1) << 56); }

static void fill(char* p, size_t n, int iter) {
  size_t words = n / 8;
  for (size_t i = 0; i < words; i++) {
    uint64_t w = pattern_word(i, iter);
    memcpy(p + i * 8, &w, 8);
  }
  uint64_t w = pattern_word(words, iter);
  memcpy(p + words * 8, &w, n - words * 8);
}

/* Returns the first wrong offset, or -1. */
static long long check(const char* p, size_t n, int iter) {
  size_t words = n / 8;
  for (size_t i = 0; i < words; i++) {
    uint64_t w = pattern_word(i, iter);
    if (memcmp(p + i * 8, &w, 8)) return (long long)(i * 8);
  }
  uint64_t w = pattern_word(words, iter);
  if (memcmp(p + words * 8, &w, n - words * 8)) return (long long)(words * 8);
  return -1;
}

/* The host-side counterpart of the unpack kernel, for an UNPACK plugin whose buffers
 * are host memory (the loopback plugin's emulation): the same metadata, read the same
 * way. */
static void cpu_unpack(nb_unpackNetDeviceHandle* h, char* dst, uint64_t step) {
  size_t slot = step % NB_UNPACK_QUEUE_DEPTH;
  uint64_t cnt = __atomic_load_n(&h->meta->cnt[slot], __ATOMIC_ACQUIRE);
  for (uint64_t i = 0; i < cnt; i++) {
    nb_loadMeta m = h->meta->mem[slot][i];
    memcpy(dst + m.dst_off, (char*)h->bounce_buf + m.src_off, m.len);
  }
  h->head = step;
}

/* ---- the transfer ---- */

enum { S_FREE, S_STAGING, S_POSTED, S_DONE, S_DONE_WAIT };

typedef struct {
  void* req;
  size_t off, len;
  double t_post;
  int state;
} slot_t;

typedef struct {
  opts_t* o;
  nb_ncclNet_v7_t* net;
  int recv;
  nb_mode mode;
  void* comm;
  void* mh;
  char* msg;     /* the message: host or device memory */
  char* staging; /* window * chunk of pinned host memory (staged modes) */
  nb_ncclNetDeviceHandle_v7_t* dh;
  uint64_t step; /* receives unpacked so far (the unpack queue's head + 1) */
  slot_t ring[NB_MAX_WINDOW];
  int max_held;
  double* lat;
  size_t nlat;
} xfer_t;

static int async_done(xfer_t* x, int slot) {
#ifdef NETBENCH_CUDA
  int q = nbc_query(slot);
  if (q < 0) die(EXIT_FAIL, "CUDA: %s", nbc_error());
  return q;
#else
  (void)x, (void)slot;
  return 1;
#endif
}

/* on_done: what a receiver does when test() reports a request done. */
static void on_recv_done(xfer_t* x, int s, slot_t* sl) {
  switch (x->mode) {
    case M_HOST_DIRECT:
    case M_DEVICE_DIRECT:
      sl->state = S_DONE;
      break;
    case M_HOST_UNPACK:
      cpu_unpack(x->dh->handle, x->msg + sl->off, x->step++);
      sl->state = S_DONE;
      break;
#ifdef NETBENCH_CUDA
    case M_DEVICE_UNPACK:
      if (nbc_unpack_async(s, x->dh->handle, x->msg + sl->off, x->step++)) die(EXIT_FAIL, "CUDA unpack: %s", nbc_error());
      sl->state = S_DONE_WAIT;
      break;
    case M_DEVICE_STAGED:
      if (nbc_copy_async(s, x->msg + sl->off, x->staging + (size_t)s * x->o->chunk, sl->len)) die(EXIT_FAIL, "CUDA copy: %s", nbc_error());
      sl->state = S_DONE_WAIT;
      break;
#endif
    default:
      (void)s;
      die(EXIT_FAIL, "mode %s needs CUDA", mode_name[x->mode]);
  }
}

static double transfer(xfer_t* x) {
  opts_t* o = x->o;
  int W = o->window;
  size_t n = (o->size + o->chunk - 1) / o->chunk;
  size_t posted = 0, tested = 0, released = 0;
  int staged = x->mode == M_DEVICE_STAGED;
  double t0 = now(), last = t0;
  while (released < n) {
    size_t before = posted + tested + released;
    /* post while the window has room, in order */
    while (posted < n && posted - released < (size_t)W) {
      int s = (int)(posted % W);
      slot_t* sl = &x->ring[s];
      char* buf;
      if (sl->state == S_FREE) {
        sl->off = posted * o->chunk;
        sl->len = o->size - sl->off < o->chunk ? o->size - sl->off : o->chunk;
      }
      if (staged) {
        buf = x->staging + (size_t)s * o->chunk;
#ifdef NETBENCH_CUDA
        if (!x->recv && sl->state == S_FREE) {
          if (nbc_copy_async(s, buf, x->msg + sl->off, sl->len)) die(EXIT_FAIL, "CUDA copy: %s", nbc_error());
          sl->state = S_STAGING;
        }
#endif
        if (sl->state == S_STAGING) {
          if (!async_done(x, s)) break;
          sl->state = S_FREE;
        }
      } else {
        buf = x->msg + sl->off;
      }
      void* req = NULL;
      int len = (int)sl->len, tag = 0;
      if (x->recv) {
        void* data = buf;
        NETCHECK(x->net->irecv(x->comm, 1, &data, &len, &tag, &x->mh, &req));
      } else {
        NETCHECK(x->net->isend(x->comm, buf, len, tag, x->mh, &req));
      }
      if (!req) break; /* the plugin cannot take it now: progress and try again */
      sl->req = req;
      sl->t_post = now();
      sl->state = S_POSTED;
      posted++;
      if ((int)(posted - released) > x->max_held) x->max_held = (int)(posted - released);
    }
    /* test the oldest request not yet done */
    if (tested < posted) {
      int s = (int)(tested % W), done = 0, size = 0;
      slot_t* sl = &x->ring[s];
      NETCHECK(x->net->test(sl->req, &done, &size));
      if (done) {
        if (x->recv && (size_t)size != sl->len)
          die(EXIT_FAIL, "chunk %zu: received %d bytes, expected %zu (are both ranks using the same --size and --chunk?)", tested, size, sl->len);
        if (x->recv) on_recv_done(x, s, sl);
        else sl->state = S_DONE;
        tested++;
        last = now();
      }
    }
    /* give back the oldest requests whose data is where it belongs */
    while (released < tested) {
      int s = (int)(released % W);
      slot_t* sl = &x->ring[s];
      if (sl->state == S_DONE_WAIT && !async_done(x, s)) break;
      if (x->recv && x->dh) NETCHECK(x->net->irecvConsumed(x->comm, 1, sl->req));
      x->lat[x->nlat++] = now() - sl->t_post;
      sl->state = S_FREE;
      sl->req = NULL;
      released++;
      last = now();
    }
    if (posted + tested + released == before) sched_yield(); /* share the cores while the plugin works */
    if (now() - last > o->timeout)
      die(EXIT_FAIL, "no request completed for %d s (%zu of %zu chunks done, %zu posted)", o->timeout, released, n, posted);
  }
  return now() - t0;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static double pct(double* v, size_t n, double p) {
  size_t i = (size_t)(p * (n - 1) + 0.5);
  return v[i < n ? i : n - 1];
}

int main(int argc, char** argv) {
  opts_t o;
  parse(argc, argv, &o);
  xfer_t x;
  memset(&x, 0, sizeof x);
  x.o = &o;
  x.recv = o.rank == 1;
  if (o.device_mem) {
#ifdef NETBENCH_CUDA
    /* the primary context exists before the plugin initialises (TCPX uses it) */
    if (nbc_init(o.gpu, o.window)) die(EXIT_ENV, "CUDA device %d: %s", o.gpu, nbc_error());
#else
    die(EXIT_ENV, "--mem device: this netbench was built without CUDA");
#endif
  }
  char used[PATH_MAX];
  x.net = load_plugin(o.plugin, used, sizeof used);
  NETCHECK(x.net->init(nb_logger));
  int ndev = 0;
  NETCHECK(x.net->devices(&ndev));
  if (o.dev < 0 || o.dev >= ndev) die(EXIT_USAGE, "--dev %d: the plugin %s has %d device(s)", o.dev, x.net->name, ndev);
  nb_ncclNetProperties_v7_t props;
  memset(&props, 0, sizeof props);
  NETCHECK(x.net->getProperties(o.dev, &props));
  int cuda_ptr = (props.ptrSupport & NB_NCCL_PTR_CUDA) != 0;
  int unpack = props.netDeviceType == NB_NCCL_NET_DEVICE_UNPACK;
  if (unpack && props.netDeviceVersion != NB_NCCL_NET_DEVICE_UNPACK_VERSION)
    die(EXIT_ENV, "the plugin's unpack version is %d; this netbench knows version %d", props.netDeviceVersion, NB_NCCL_NET_DEVICE_UNPACK_VERSION);

  /* how data moves, from where the message lives and what the plugin offers */
  if (!o.device_mem) {
    if (!(props.ptrSupport & NB_NCCL_PTR_HOST)) die(EXIT_ENV, "the plugin %s takes no host buffers: use --mem device", x.net->name);
    x.mode = M_HOST_DIRECT;
    if (x.recv && unpack) {
      if (cuda_ptr) die(EXIT_USAGE, "the plugin %s unpacks received data on the GPU: use --mem device", x.net->name);
      x.mode = M_HOST_UNPACK;
    }
  } else if (cuda_ptr) {
    x.mode = x.recv && unpack ? M_DEVICE_UNPACK : M_DEVICE_DIRECT;
  } else {
    if (x.recv && unpack) die(EXIT_USAGE, "the plugin %s unpacks into host memory only: use --mem host", x.net->name);
    x.mode = M_DEVICE_STAGED;
  }
  if (x.recv && unpack && o.chunk > NB_UNPACK_MAX_SLICE_SIZE)
    die(EXIT_USAGE, "--chunk %zu: an UNPACK plugin receives at most %d bytes per request", o.chunk, NB_UNPACK_MAX_SLICE_SIZE);

  /* the connection: rank 1 listens and hands its handle to rank 0 over the socket */
  int oob;
  hello_t hello;
  memset(&hello, 0, sizeof hello);
  void* listen_comm = NULL;
  if (x.recv) {
    NETCHECK(x.net->listen(o.dev, hello.handle, &listen_comm));
    memcpy(hello.magic, "netbnch1", 8);
    hello.size = o.size, hello.chunk = o.chunk, hello.iters = o.iters, hello.window = o.window;
    oob = oob_listen_accept(o.oob, o.timeout);
    oob_write(oob, &hello, sizeof hello);
    if (unpack) {
      x.dh = calloc(1, sizeof *x.dh); /* NCCL hands an UNPACK plugin a handle to fill */
      x.dh->netDeviceType = props.netDeviceType;
      x.dh->netDeviceVersion = props.netDeviceVersion;
    }
    double deadline = now() + o.timeout;
    while (!x.comm) {
      nb_ncclNetDeviceHandle_v7_t* dh = x.dh;
      NETCHECK(x.net->accept(listen_comm, &x.comm, &dh));
      if (!x.comm && now() > deadline) die(EXIT_FAIL, "accept: rank 0 did not connect within %d s", o.timeout);
      if (!x.comm) sched_yield();
    }
    if (unpack && !x.dh->handle) die(EXIT_FAIL, "the UNPACK plugin %s gave no device handle at accept", x.net->name);
  } else {
    oob = oob_connect(o.oob, o.timeout);
    oob_read(oob, &hello, sizeof hello, o.timeout);
    if (memcmp(hello.magic, "netbnch1", 8)) die(EXIT_FAIL, "the peer on %s is not a netbench receiver", o.oob);
    if (hello.size != o.size || hello.chunk != o.chunk || hello.iters != o.iters)
      die(EXIT_USAGE, "the ranks disagree: receiver --size %llu --chunk %llu --iters %d, sender --size %zu --chunk %zu --iters %d",
          (unsigned long long)hello.size, (unsigned long long)hello.chunk, hello.iters, o.size, o.chunk, o.iters);
    double deadline = now() + o.timeout;
    while (!x.comm) {
      nb_ncclNetDeviceHandle_v7_t* dh = NULL; /* NCCL passes none on the send side */
      NETCHECK(x.net->connect(o.dev, hello.handle, &x.comm, &dh));
      if (!x.comm && now() > deadline) die(EXIT_FAIL, "connect: no connection within %d s", o.timeout);
      if (!x.comm) sched_yield();
    }
  }

  /* buffers, registered once */
  char* host = NULL;
  if (posix_memalign((void**)&host, 4096, o.size)) die(EXIT_ENV, "cannot allocate %zu bytes", o.size);
  int regtype = NB_NCCL_PTR_HOST;
  void* regbuf;
  size_t reglen;
  if (!o.device_mem) {
    x.msg = host;
    regbuf = x.msg, reglen = o.size;
  } else {
#ifdef NETBENCH_CUDA
    x.msg = nbc_malloc(o.size);
    if (!x.msg) die(EXIT_ENV, "cudaMalloc %zu bytes: %s", o.size, nbc_error());
    if (x.mode == M_DEVICE_STAGED) {
      x.staging = nbc_host_alloc((size_t)o.window * o.chunk);
      if (!x.staging) die(EXIT_ENV, "cudaHostAlloc: %s", nbc_error());
      regbuf = x.staging, reglen = (size_t)o.window * o.chunk;
    } else {
      regbuf = x.msg, reglen = o.size, regtype = NB_NCCL_PTR_CUDA;
    }
    if (x.mode == M_DEVICE_UNPACK && nbc_read_head(x.dh->handle, &x.step)) die(EXIT_FAIL, "read the unpack queue head: %s", nbc_error());
    if (x.mode == M_DEVICE_UNPACK) x.step++;
#else
    regbuf = NULL, reglen = 0;
#endif
  }
  if (x.mode == M_HOST_UNPACK) x.step = ((nb_unpackNetDeviceHandle*)x.dh->handle)->head + 1;
  if (reglen > INT_MAX) die(EXIT_USAGE, "the registered region (%zu bytes) exceeds what a v7 plugin registers", reglen);
  NETCHECK(x.net->regMr(x.comm, regbuf, (int)reglen, regtype, &x.mh));

  size_t nchunks = (o.size + o.chunk - 1) / o.chunk;
  x.lat = calloc(nchunks * (size_t)o.iters, sizeof *x.lat);
  double total = 0;
  int verified = 1;
  for (int it = 0; it < o.iters; it++) {
    char flag = 1;
    if (x.recv) {
      /* a cleared buffer, so that a chunk that never lands is seen */
      memset(host, 0, o.size);
#ifdef NETBENCH_CUDA
      if (o.device_mem && nbc_memcpy(x.msg, host, o.size, 1)) die(EXIT_FAIL, "CUDA: %s", nbc_error());
#endif
      oob_write(oob, &flag, 1);
      total += transfer(&x);
#ifdef NETBENCH_CUDA
      if (o.device_mem && nbc_memcpy(host, x.msg, o.size, 0)) die(EXIT_FAIL, "CUDA: %s", nbc_error());
#endif
      long long bad = check(host, o.size, it);
      if (bad >= 0) {
        fprintf(stderr, "netbench: iteration %d: wrong data at offset %lld (chunk %lld)\n", it, bad, bad / (long long)o.chunk);
        verified = 0;
      }
      flag = bad < 0;
      oob_write(oob, &flag, 1);
    } else {
      fill(host, o.size, it);
#ifdef NETBENCH_CUDA
      if (o.device_mem && nbc_memcpy(x.msg, host, o.size, 1)) die(EXIT_FAIL, "CUDA: %s", nbc_error());
#endif
      oob_read(oob, &flag, 1, o.timeout);
      total += transfer(&x);
      oob_read(oob, &flag, 1, o.timeout);
      verified = verified && flag;
    }
  }
  NETCHECK(x.net->deregMr(x.comm, x.mh));
  NETCHECK(x.recv ? x.net->closeRecv(x.comm) : x.net->closeSend(x.comm));
  if (listen_comm) NETCHECK(x.net->closeListen(listen_comm));
  close(oob);

  qsort(x.lat, x.nlat, sizeof *x.lat, cmp_double);
  double bytes = (double)o.size * o.iters, gbps = bytes / total / 1e9;
  double p50 = pct(x.lat, x.nlat, 0.5) * 1e6, p99 = pct(x.lat, x.nlat, 0.99) * 1e6;
  double lmin = x.lat[0] * 1e6, lmax = x.lat[x.nlat - 1] * 1e6;
  const char* role = x.recv ? "recv" : "send";
  if (o.json) {
    printf("{\"netbench\":\"%s\",\"rank\":%d,\"role\":\"%s\",\"plugin\":\"%s\",\"plugin_path\":\"%s\",\"mode\":\"%s\","
           "\"bytes\":%zu,\"iters\":%d,\"chunk\":%zu,\"chunks\":%zu,\"window\":%d,\"request_limit\":%d,\"max_held\":%d,"
           "\"seconds\":%.6f,\"gbps\":%.3f,\"lat_us\":{\"min\":%.1f,\"p50\":%.1f,\"p99\":%.1f,\"max\":%.1f},\"verified\":%s}\n",
           NB_VERSION, o.rank, role, x.net->name, used, mode_name[x.mode], o.size, o.iters, o.chunk, nchunks, o.window,
           o.limit, x.max_held, total, gbps, lmin, p50, p99, lmax, verified ? "true" : "false");
  } else {
    printf("netbench %s (%s, %s): %zu bytes x %d in %zu-byte chunks, window %d (limit %d, most held %d): %.3f GB/s; "
           "chunk latency us min %.1f p50 %.1f p99 %.1f max %.1f; %s\n",
           role, x.net->name, mode_name[x.mode], o.size, o.iters, o.chunk, o.window, o.limit, x.max_held, gbps, lmin, p50, p99,
           lmax, verified ? "data verified" : "DATA WRONG");
  }
  return verified ? 0 : EXIT_FAIL;
}
