#!/usr/bin/env bash
# Runs the EFA device shim conformance test: two PEs on this host, one process
# per GPU, NVSHMEM's unique-id bootstrap with the id passed through a file.
#
#   run.sh [p2p|noshortcut|remote]
#     p2p     (default) NVLink peers: get_p2p_ptr must return the peer's address;
#             the shim's NVSHMEM calls are carried over NVLink by NVSHMEM.
#     noshortcut  the binary built with the shim's test switch
#             (-DEFA_DEVICE_SHIM_NO_P2P_SHORTCUT): get_p2p_ptr must return 0 for
#             the peer; NVSHMEM still carries the shim's calls over NVLink.
#     remote  NVSHMEM_DISABLE_P2P=1: get_p2p_ptr must return 0 and every shim call
#             goes through NVSHMEM's proxy and remote transport. Needs a NIC with a
#             working transport; on EFA also set NVSHMEM_REMOTE_TRANSPORT=libfabric
#             NVSHMEM_LIBFABRIC_PROVIDER=efa FI_EFA_USE_DEVICE_RDMA=1
#             FI_EFA_ENABLE_SHM_TRANSFER=0 (gdrdrv loaded). Without one NVSHMEM stops
#             at init ("Unable to initialize any transports", status 7).
#
#   NVSHMEM_HOME, BUILD_DIR as for build.sh; GPUS="0 1" picks the devices.
set -uo pipefail

mode="${1:-p2p}"
if [ -z "${NVSHMEM_HOME:-}" ]; then
    NVSHMEM_HOME="$(python3 -c 'import importlib.util as u; print(u.find_spec("nvidia.nvshmem").submodule_search_locations[0])')"
fi
BUILD_DIR="${BUILD_DIR:-${TMPDIR:-/tmp}/efa-shim-conformance}"
bin="$BUILD_DIR/efa_shim_conformance"
[ -x "$bin" ] || { echo "run.sh: $bin not built (run build.sh)" >&2; exit 2; }
read -r -a gpus <<< "${GPUS:-0 1}"
[ "${#gpus[@]}" -eq 2 ] || { echo "run.sh: GPUS must name two devices" >&2; exit 2; }

case "$mode" in
p2p)        export NVSHMEM_DISABLE_P2P=0; expect=yes ;;
noshortcut) export NVSHMEM_DISABLE_P2P=0; expect=yes; bin="${bin}_noshortcut" ;;
remote)     export NVSHMEM_DISABLE_P2P=1; expect=no ;;
*)          echo "usage: run.sh [p2p|noshortcut|remote]" >&2; exit 2 ;;
esac
[ -x "$bin" ] || { echo "run.sh: $bin not built (run build.sh)" >&2; exit 2; }

export LD_LIBRARY_PATH="$NVSHMEM_HOME/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NVSHMEM_DISABLE_NVLS="${NVSHMEM_DISABLE_NVLS:-1}"

work="$(mktemp -d "${TMPDIR:-/tmp}/efa-shim-run.XXXXXX")"
trap 'rm -rf "$work"' EXIT
uid_file="$work/uid"

pids=()
for r in 0 1; do
    timeout 600 "$bin" --rank "$r" --nranks 2 --device "${gpus[$r]}" --uid-file "$uid_file" --expect-p2p "$expect" \
        > "$work/pe$r.log" 2>&1 &
    pids+=($!)
done
rc=0
for r in 0 1; do
    wait "${pids[$r]}"
    s=$?
    [ "$s" -eq 0 ] || { echo "pe $r exited with status $s"; rc=1; }
done
for r in 0 1; do
    echo "=== pe $r ($mode) ==="
    cat "$work/pe$r.log"
done
fails=$(cat "$work"/pe*.log | grep -c '^FAIL ' || true)
passes=$(cat "$work"/pe*.log | grep -c '^PASS ' || true)
echo "RESULT mode=$mode pass=$passes fail=$fails exit=$rc"
[ "$rc" -eq 0 ] && [ "$fails" -eq 0 ] && [ "$passes" -gt 0 ]
