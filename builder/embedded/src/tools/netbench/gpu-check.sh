#!/usr/bin/env bash
# Builds the gcp-a3-tcpx recipe on a host with one NVIDIA GPU and CUDA, installs it, and
# runs netbench between two ranks on that GPU through the loopback plugin, in every way
# data can move: host buffers, device buffers the plugin reads and writes, device
# buffers staged through host memory, and the UNPACK path (bounce buffer, unpack kernel,
# irecvConsumed after its CUDA event). A window one past the request limit must fail.
# Then what cannot run without GCP A3 NICs and the RxDM daemon: the TCPX plugin itself.
#
#   EPBUILD=path/to/epbuild DEBS=dir/with/the/.debs [MIRROR=dir] [WORK=dir] bash gpu-check.sh
# (bash: env.sh finds its directory through BASH_SOURCE)
set -euo pipefail
EPBUILD=${EPBUILD:-epbuild}
DEBS=${DEBS:?DEBS: the directory holding the protobuf and Abseil .deb files}
WORK=${WORK:-$PWD/gcp-a3-tcpx-check}
mkdir -p "$WORK"
say() { printf '\n== %s\n' "$*"; }

say "protobuf and Abseil from Debian packages, unpacked beside the build"
rm -rf "$WORK/deps" && mkdir -p "$WORK/deps"
for d in "$DEBS"/*.deb; do dpkg-deb -x "$d" "$WORK/deps"; done
"$WORK/deps/usr/bin/protoc" --version

say "build (preflight, fetch, patch, build, check, package)"
"$EPBUILD" recipe gcp-a3-tcpx ${MIRROR:+--mirror "$MIRROR"} \
  --set tcpx.options.CMAKE_PREFIX_PATH="$WORK/deps/usr" -o "$WORK/out"

say "install and verify"
rm -rf "$WORK/prefix"
"$EPBUILD" install "$WORK"/out/gcp-a3-tcpx-*.tar.zst --prefix "$WORK/prefix"
. "$WORK/prefix/env.sh"
nm -D --defined-only "$WORK/prefix/tcpx/lib/libnccl-net.so" | grep ncclNet
readelf -d "$WORK/prefix/tcpx/lib/libnccl-net.so" | grep -E 'NEEDED|RUNPATH'
if ldd "$WORK/prefix/tcpx/lib/libnccl-net.so" | grep 'not found'; then echo "FAIL: unresolved libraries"; exit 1; fi

bench() { say "bench $*"; "$EPBUILD" bench --loopback --size 256M --iters 3 "$@"; }
bench --mem host
bench --mem device
LOOPBACK_HOST_ONLY=1 bench --mem device
LOOPBACK_UNPACK=1 bench --mem device
LOOPBACK_UNPACK=1 LOOPBACK_HOST_ONLY=1 bench --mem host

say "a window of 17 must fail (request limit exceeded)"
if LOOPBACK_UNPACK=1 "$EPBUILD" bench --loopback --mem device --size 16M --iters 1 --window 17 --request-limit 17; then
  echo "FAIL: a 17th request went through"; exit 1
fi

say "NCCL's own socket transport as a net plugin: does any libnccl export an ncclNet symbol?"
for lib in /usr/lib/x86_64-linux-gnu/libnccl.so.2 \
  "$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null || true)"; do
  [ -f "$lib" ] || continue
  echo "$lib: $(nm -D --defined-only "$lib" | grep -c 'ncclNet') ncclNet* dynamic symbols"
done

say "the TCPX plugin itself (needs A3 GPU NICs and the RxDM daemon: expected to fail here)"
"$EPBUILD" bench --mem device --size 16M --iters 1 --timeout 20 || echo "(as expected without A3 hosts)"
