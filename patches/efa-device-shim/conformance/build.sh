#!/usr/bin/env bash
# Builds the EFA device shim conformance test.
#
#   NVSHMEM_HOME  NVSHMEM install or the nvidia-nvshmem wheel directory (has include/
#                 and lib/); default: the wheel found by python3.
#   CUDA_HOME     CUDA toolkit; default /usr/local/cuda.
#   ARCH          SM architecture number; default 90.
#   BUILD_DIR     where the header and binary go; default ${TMPDIR:-/tmp}/efa-shim-conformance.
#   NVCC_EXTRA    extra nvcc flags (e.g. -DEFA_DEVICE_SHIM_NUM_RC_PER_PE=512).
#
# The header is taken from the set's patch file, so the test checks exactly what
# the patch adds to DeepEP.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
set_dir="$(dirname "$here")"
patch_file="$set_dir/0001-add-efa-device-shim.patch"
header_path="csrc/kernels/efa_device_shim.cuh"

CUDA_HOME="${CUDA_HOME:-/usr/local/cuda}"
if [ -z "${NVSHMEM_HOME:-}" ]; then
    NVSHMEM_HOME="$(python3 -c 'import importlib.util as u; print(u.find_spec("nvidia.nvshmem").submodule_search_locations[0])')"
fi
ARCH="${ARCH:-90}"
BUILD_DIR="${BUILD_DIR:-${TMPDIR:-/tmp}/efa-shim-conformance}"

[ -x "$CUDA_HOME/bin/nvcc" ] || { echo "build.sh: no nvcc in $CUDA_HOME/bin" >&2; exit 2; }
[ -f "$NVSHMEM_HOME/include/nvshmem.h" ] || { echo "build.sh: no include/nvshmem.h in $NVSHMEM_HOME" >&2; exit 2; }
[ -f "$NVSHMEM_HOME/lib/libnvshmem_device.a" ] || { echo "build.sh: no lib/libnvshmem_device.a in $NVSHMEM_HOME" >&2; exit 2; }

mkdir -p "$BUILD_DIR/include" "$BUILD_DIR/lib"

# The header: the added lines of the patch's new-file hunk.
awk -v want="b/$header_path" '
    /^diff --git / { infile = ($4 == want); inhunk = 0; next }
    infile && /^@@ / { inhunk = 1; next }
    infile && inhunk && /^\+/ { print substr($0, 2); next }
' "$patch_file" > "$BUILD_DIR/include/efa_device_shim.cuh"
grep -q '^#define EPBUILD_EFA_DEVICE_SHIM 1$' "$BUILD_DIR/include/efa_device_shim.cuh" ||
    { echo "build.sh: could not extract $header_path from $patch_file" >&2; exit 2; }

# The wheel ships only libnvshmem_host.so.<major>: give the linker a plain name.
if [ -e "$NVSHMEM_HOME/lib/libnvshmem_host.so" ]; then
    host_lib_dir="$NVSHMEM_HOME/lib"
else
    host_so="$(ls "$NVSHMEM_HOME"/lib/libnvshmem_host.so.* 2>/dev/null | sort | head -n 1)"
    [ -n "$host_so" ] || { echo "build.sh: no libnvshmem_host.so* in $NVSHMEM_HOME/lib" >&2; exit 2; }
    ln -sf "$host_so" "$BUILD_DIR/lib/libnvshmem_host.so"
    host_lib_dir="$BUILD_DIR/lib"
fi

cccl=()
[ -d "$CUDA_HOME/include/cccl" ] && cccl=(-I"$CUDA_HOME/include/cccl")   # CUDA 13 (R12)

build() {  # build OUTPUT [extra nvcc flags...]
    local out="$1"
    shift
    # shellcheck disable=SC2086
    "$CUDA_HOME/bin/nvcc" -std=c++17 -O2 -rdc=true \
        -gencode "arch=compute_${ARCH},code=sm_${ARCH}" \
        -I"$BUILD_DIR/include" -I"$NVSHMEM_HOME/include" "${cccl[@]}" ${NVCC_EXTRA:-} "$@" \
        "$here/efa_shim_conformance.cu" -o "$out" \
        -L"$host_lib_dir" -L"$NVSHMEM_HOME/lib" -lnvshmem_host -lnvshmem_device \
        -Xlinker -rpath -Xlinker "$NVSHMEM_HOME/lib"
    echo "built $out"
}

build "$BUILD_DIR/efa_shim_conformance"
# With the shim's test switch: get_p2p_ptr gives 0 for peers (run.sh noshortcut).
build "$BUILD_DIR/efa_shim_conformance_noshortcut" -DEFA_DEVICE_SHIM_NO_P2P_SHORTCUT
