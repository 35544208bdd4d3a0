#!/bin/sh
# Builds epbuild's NVSHMEM smoke test against one NVSHMEM (an install prefix or the
# nvidia-nvshmem wheel directory): the same headers, host library and device library
# DeepEP links, with the same relocatable device code link.
#
#   NVSHMEM_HOME      the NVSHMEM (include/, lib/libnvshmem_host.so.*, lib/libnvshmem_device.a)
#   CUDA_HOME         the CUDA toolkit (default /usr/local/cuda)
#   NVCC              the nvcc to run (default $CUDA_HOME/bin/nvcc; epbuild gives its
#                     reproducible wrapper)
#   ARCHS             SM numbers, space-separated (default 90)
#   NVSHMEM_RUNPATH   RUNPATH of the binary (default $NVSHMEM_HOME/lib)
#   PREFIX, DESTDIR   the binary goes to $DESTDIR$PREFIX/bin/epbuild-nvshmem-smoke
set -eu
: "${NVSHMEM_HOME:?set NVSHMEM_HOME to the NVSHMEM to build against}"
: "${PREFIX:?set PREFIX}"
CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
NVCC="${NVCC:-$CUDA_HOME/bin/nvcc}"
ARCHS="${ARCHS:-90}"
NVSHMEM_RUNPATH="${NVSHMEM_RUNPATH:-$NVSHMEM_HOME/lib}"
here="$(cd "$(dirname "$0")" && pwd)"

[ -x "$NVCC" ] || { echo "build.sh: no nvcc at $NVCC" >&2; exit 3; }
[ -f "$NVSHMEM_HOME/include/nvshmem.h" ] || { echo "build.sh: no include/nvshmem.h in $NVSHMEM_HOME" >&2; exit 3; }
[ -f "$NVSHMEM_HOME/lib/libnvshmem_device.a" ] || { echo "build.sh: no lib/libnvshmem_device.a in $NVSHMEM_HOME" >&2; exit 3; }
host_so=""
for f in "$NVSHMEM_HOME"/lib/libnvshmem_host.so.*; do
    [ -e "$f" ] && { host_so="$f"; break; }
done
[ -n "$host_so" ] || { echo "build.sh: no lib/libnvshmem_host.so.* in $NVSHMEM_HOME" >&2; exit 3; }

# beside the sources, not under a random name: nvcc writes the objects' paths into the
# binary it links
work="$here/build"
rm -rf "$work" && mkdir -p "$work"
trap 'rm -rf "$work"' EXIT
# a wheel ships only libnvshmem_host.so.<major>: the linker needs a plain name; the
# binary records the soname (libnvshmem_host.so.3), as DeepEP's extension does
ln -s "$host_so" "$work/libnvshmem_host.so"

gencode=""
for a in $ARCHS; do
    gencode="$gencode -gencode arch=compute_$a,code=sm_$a"
done
cccl=""
[ -d "$CUDA_HOME/include/cccl" ] && cccl="-I$CUDA_HOME/include/cccl"   # CUDA 13 moved cuda/std (R12)

mkdir -p "${DESTDIR:-}$PREFIX/bin"
out="${DESTDIR:-}$PREFIX/bin/epbuild-nvshmem-smoke"
# compile with relocatable device code, device-link against libnvshmem_device, then
# link with the host compiler, as DeepEP's extension is built (and so that the
# RUNPATH, which may hold $ORIGIN, reaches the linker untouched)
# shellcheck disable=SC2086
"$NVCC" -std=c++17 -O2 -rdc=true $gencode -I"$NVSHMEM_HOME/include" $cccl \
    -c "$here/nvshmem_smoke.cu" -o "$work/smoke.o"
# shellcheck disable=SC2086
"$NVCC" -dlink $gencode "$work/smoke.o" -o "$work/smoke_dlink.o" -L"$NVSHMEM_HOME/lib" -lnvshmem_device
"${CXX:-g++}" "$work/smoke.o" "$work/smoke_dlink.o" -o "$out" \
    -L"$work" -L"$NVSHMEM_HOME/lib" -lnvshmem_host -l:libnvshmem_device.a \
    -L"$CUDA_HOME/lib64" -lcudart_static -lpthread -ldl -lrt \
    "-Wl,-rpath,$NVSHMEM_RUNPATH"
echo "built $out against $host_so"
