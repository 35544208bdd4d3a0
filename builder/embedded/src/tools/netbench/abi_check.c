/*
 * Proves at compile time that ncclnet_v7.h declares the same interface as the NCCL tree
 * a recipe builds against: built only when NCCL_SRC is given, with NCCL's ext-net
 * plugin headers (ext-net/example/nccl) on the include path. A mismatch fails the build.
 */
#include <stddef.h>

#include "net.h"

#include "ncclnet_v7.h"

#define SAME_SIZE(A, B) _Static_assert(sizeof(A) == sizeof(B), "sizeof " #A " != sizeof " #B)
#define SAME_FIELD(A, B, f)                                                                            \
  _Static_assert(offsetof(A, f) == offsetof(B, f) && sizeof(((A*)0)->f) == sizeof(((B*)0)->f), \
                 #A "." #f " differs from " #B "." #f)
#define SAME_VALUE(a, b) _Static_assert((long)(a) == (long)(b), #a " != " #b)

SAME_SIZE(ncclResult_t, nb_ncclResult_t);
SAME_VALUE(ncclSuccess, nb_ncclSuccess);
SAME_VALUE(ncclInternalError, nb_ncclInternalError);
SAME_VALUE(ncclRemoteError, nb_ncclRemoteError);
SAME_VALUE(NCCL_PTR_HOST, NB_NCCL_PTR_HOST);
SAME_VALUE(NCCL_PTR_CUDA, NB_NCCL_PTR_CUDA);
SAME_VALUE(NCCL_PTR_DMABUF, NB_NCCL_PTR_DMABUF);
SAME_VALUE(NCCL_NET_HANDLE_MAXSIZE, NB_NCCL_NET_HANDLE_MAXSIZE);
SAME_SIZE(ncclNetDeviceType, nb_ncclNetDeviceType);
SAME_VALUE(NCCL_NET_DEVICE_HOST, NB_NCCL_NET_DEVICE_HOST);
SAME_VALUE(NCCL_NET_DEVICE_UNPACK, NB_NCCL_NET_DEVICE_UNPACK);
SAME_VALUE(NCCL_NET_DEVICE_UNPACK_VERSION, NB_NCCL_NET_DEVICE_UNPACK_VERSION);
SAME_VALUE(NCCL_LOG_WARN, NB_NCCL_LOG_WARN);
SAME_VALUE(NCCL_LOG_INFO, NB_NCCL_LOG_INFO);

SAME_SIZE(ncclNetDeviceHandle_v7_t, nb_ncclNetDeviceHandle_v7_t);
SAME_FIELD(ncclNetDeviceHandle_v7_t, nb_ncclNetDeviceHandle_v7_t, netDeviceType);
SAME_FIELD(ncclNetDeviceHandle_v7_t, nb_ncclNetDeviceHandle_v7_t, netDeviceVersion);
SAME_FIELD(ncclNetDeviceHandle_v7_t, nb_ncclNetDeviceHandle_v7_t, handle);
SAME_FIELD(ncclNetDeviceHandle_v7_t, nb_ncclNetDeviceHandle_v7_t, size);
SAME_FIELD(ncclNetDeviceHandle_v7_t, nb_ncclNetDeviceHandle_v7_t, needsProxyProgress);

SAME_SIZE(ncclNetProperties_v7_t, nb_ncclNetProperties_v7_t);
SAME_FIELD(ncclNetProperties_v7_t, nb_ncclNetProperties_v7_t, name);
SAME_FIELD(ncclNetProperties_v7_t, nb_ncclNetProperties_v7_t, pciPath);
SAME_FIELD(ncclNetProperties_v7_t, nb_ncclNetProperties_v7_t, guid);
SAME_FIELD(ncclNetProperties_v7_t, nb_ncclNetProperties_v7_t, ptrSupport);
SAME_FIELD(ncclNetProperties_v7_t, nb_ncclNetProperties_v7_t, speed);
SAME_FIELD(ncclNetProperties_v7_t, nb_ncclNetProperties_v7_t, port);
SAME_FIELD(ncclNetProperties_v7_t, nb_ncclNetProperties_v7_t, latency);
SAME_FIELD(ncclNetProperties_v7_t, nb_ncclNetProperties_v7_t, maxComms);
SAME_FIELD(ncclNetProperties_v7_t, nb_ncclNetProperties_v7_t, maxRecvs);
SAME_FIELD(ncclNetProperties_v7_t, nb_ncclNetProperties_v7_t, netDeviceType);
SAME_FIELD(ncclNetProperties_v7_t, nb_ncclNetProperties_v7_t, netDeviceVersion);

SAME_SIZE(ncclNet_v7_t, nb_ncclNet_v7_t);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, name);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, init);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, devices);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, getProperties);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, listen);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, connect);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, accept);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, regMr);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, regMrDmaBuf);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, deregMr);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, isend);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, irecv);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, iflush);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, test);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, closeSend);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, closeRecv);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, closeListen);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, getDeviceMr);
SAME_FIELD(ncclNet_v7_t, nb_ncclNet_v7_t, irecvConsumed);

/* The parameter lists: each list below is declared once with NCCL's result type and
 * once with ours; storing each declaration in the other side's member compiles only if
 * both structs take exactly these parameters (the declarations are never defined: they
 * only appear inside sizeof). */
#define ARGS_init (ncclDebugLogger_t logFunction)
#define ARGS_devices (int* ndev)
#define ARGS_getProperties (int dev, nb_ncclNetProperties_v7_t* props)
#define ARGS_listen (int dev, void* handle, void** listenComm)
#define ARGS_connect (int dev, void* handle, void** sendComm, ncclNetDeviceHandle_v7_t** sendDevComm)
#define ARGS_accept (void* listenComm, void** recvComm, ncclNetDeviceHandle_v7_t** recvDevComm)
#define ARGS_regMr (void* comm, void* data, int size, int type, void** mhandle)
#define ARGS_regMrDmaBuf (void* comm, void* data, size_t size, int type, uint64_t offset, int fd, void** mhandle)
#define ARGS_deregMr (void* comm, void* mhandle)
#define ARGS_isend (void* sendComm, void* data, int size, int tag, void* mhandle, void** request)
#define ARGS_irecv (void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles, void** request)
#define ARGS_iflush (void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request)
#define ARGS_test (void* request, int* done, int* sizes)
#define ARGS_close (void* comm)
#define ARGS_getDeviceMr (void* comm, void* mhandle, void** dptr_mhandle)
#define ARGS_irecvConsumed (void* recvComm, int n, void* request)

/* the structs of the two sides are the same size field by field (above), so a pointer
 * to one is a pointer to the other where only the layout matters */
#define nb_ncclNetProperties_v7_t ncclNetProperties_v7_t
#define SAME_ARGS(member, args)                                                              \
  ncclResult_t nccl_##member args;                                                           \
  _Static_assert(sizeof(((ncclNet_v7_t*)0)->member = nccl_##member) != 0, #member);
SAME_ARGS(devices, ARGS_devices)
SAME_ARGS(getProperties, ARGS_getProperties)
SAME_ARGS(listen, ARGS_listen)
SAME_ARGS(connect, ARGS_connect)
SAME_ARGS(accept, ARGS_accept)
SAME_ARGS(regMr, ARGS_regMr)
SAME_ARGS(regMrDmaBuf, ARGS_regMrDmaBuf)
SAME_ARGS(deregMr, ARGS_deregMr)
SAME_ARGS(isend, ARGS_isend)
SAME_ARGS(irecv, ARGS_irecv)
SAME_ARGS(iflush, ARGS_iflush)
SAME_ARGS(test, ARGS_test)
SAME_ARGS(closeSend, ARGS_close)
SAME_ARGS(getDeviceMr, ARGS_getDeviceMr)
SAME_ARGS(irecvConsumed, ARGS_irecvConsumed)
ncclResult_t nccl_init ARGS_init;
_Static_assert(sizeof(((ncclNet_v7_t*)0)->init = nccl_init) != 0, "init");
#undef nb_ncclNetProperties_v7_t
#undef ncclNetDeviceHandle_v7_t

/* and ours */
#define ncclNetDeviceHandle_v7_t nb_ncclNetDeviceHandle_v7_t
#define NB_ARGS(member, args)                                                                \
  nb_ncclResult_t nb_##member args;                                                          \
  _Static_assert(sizeof(((nb_ncclNet_v7_t*)0)->member = nb_##member) != 0, #member);
NB_ARGS(devices, ARGS_devices)
NB_ARGS(getProperties, ARGS_getProperties)
NB_ARGS(listen, ARGS_listen)
NB_ARGS(connect, ARGS_connect)
NB_ARGS(accept, ARGS_accept)
NB_ARGS(regMr, ARGS_regMr)
NB_ARGS(regMrDmaBuf, ARGS_regMrDmaBuf)
NB_ARGS(deregMr, ARGS_deregMr)
NB_ARGS(isend, ARGS_isend)
NB_ARGS(irecv, ARGS_irecv)
NB_ARGS(iflush, ARGS_iflush)
NB_ARGS(test, ARGS_test)
NB_ARGS(closeSend, ARGS_close)
NB_ARGS(getDeviceMr, ARGS_getDeviceMr)
NB_ARGS(irecvConsumed, ARGS_irecvConsumed)
#undef ncclNetDeviceHandle_v7_t

int netbench_abi_checked(void) { return 1; }
