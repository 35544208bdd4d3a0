/*
 * Our own declaration of version 7 of NCCL's network plugin interface, written from
 * NCCL's ext-net documentation (the interface is frozen: NCCL loads a plugin's
 * "ncclNetPlugin_v7" symbol by that name and never changes its layout). Every name
 * carries the nb_ prefix so that abi_check.c can include it beside NCCL's own
 * declaration and prove, field by field, that the two agree.
 */
#ifndef NETBENCH_NCCLNET_V7_H
#define NETBENCH_NCCLNET_V7_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ncclResult_t: 0 is success; any other value is an error. */
typedef enum {
  nb_ncclSuccess = 0,
  nb_ncclUnhandledCudaError = 1,
  nb_ncclSystemError = 2,
  nb_ncclInternalError = 3,
  nb_ncclInvalidArgument = 4,
  nb_ncclInvalidUsage = 5,
  nb_ncclRemoteError = 6
} nb_ncclResult_t;

#define NB_NCCL_PTR_HOST 0x1
#define NB_NCCL_PTR_CUDA 0x2
#define NB_NCCL_PTR_DMABUF 0x4

/* The connection handle a listener hands to its peer, out of band. */
#define NB_NCCL_NET_HANDLE_MAXSIZE 128

/* Device-side networking: with UNPACK, received data lands in the plugin's bounce
 * buffer and a GPU kernel scatters it into place (see unpack_layout.h). */
typedef enum { NB_NCCL_NET_DEVICE_HOST = 0, NB_NCCL_NET_DEVICE_UNPACK = 1 } nb_ncclNetDeviceType;
#define NB_NCCL_NET_DEVICE_UNPACK_VERSION 0x7

typedef struct {
  nb_ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle; /* device pointer to the plugin's device-side state */
  size_t size;
  int needsProxyProgress;
} nb_ncclNetDeviceHandle_v7_t;

/* Debug levels passed to the logger. */
typedef enum {
  NB_NCCL_LOG_NONE = 0,
  NB_NCCL_LOG_VERSION = 1,
  NB_NCCL_LOG_WARN = 2,
  NB_NCCL_LOG_INFO = 3,
  NB_NCCL_LOG_ABORT = 4,
  NB_NCCL_LOG_TRACE = 5
} nb_ncclDebugLogLevel;

typedef void (*nb_ncclDebugLogger_t)(nb_ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                                     const char* fmt, ...);

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport; /* NB_NCCL_PTR_* bits */
  int speed;      /* Mbps */
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  nb_ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} nb_ncclNetProperties_v7_t;

/* connect and accept do not block: they return a NULL comm until the connection is up
 * and are called again. isend and irecv may return a NULL request when they cannot
 * post now. test reports completion; for an UNPACK receiver a completed request stays
 * the plugin's until irecvConsumed says the device consumed it. */
typedef struct {
  const char* name;
  nb_ncclResult_t (*init)(nb_ncclDebugLogger_t logFunction);
  nb_ncclResult_t (*devices)(int* ndev);
  nb_ncclResult_t (*getProperties)(int dev, nb_ncclNetProperties_v7_t* props);
  nb_ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  nb_ncclResult_t (*connect)(int dev, void* handle, void** sendComm, nb_ncclNetDeviceHandle_v7_t** sendDevComm);
  nb_ncclResult_t (*accept)(void* listenComm, void** recvComm, nb_ncclNetDeviceHandle_v7_t** recvDevComm);
  nb_ncclResult_t (*regMr)(void* comm, void* data, int size, int type, void** mhandle);
  nb_ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                                 void** mhandle);
  nb_ncclResult_t (*deregMr)(void* comm, void* mhandle);
  nb_ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle, void** request);
  nb_ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                           void** request);
  nb_ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
  nb_ncclResult_t (*test)(void* request, int* done, int* sizes);
  nb_ncclResult_t (*closeSend)(void* sendComm);
  nb_ncclResult_t (*closeRecv)(void* recvComm);
  nb_ncclResult_t (*closeListen)(void* listenComm);
  nb_ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  nb_ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
} nb_ncclNet_v7_t;

/* The symbol a v7 plugin exports. */
#define NB_NCCL_NET_PLUGIN_V7_SYMBOL "ncclNetPlugin_v7"

#ifdef __cplusplus
}
#endif

#endif
