#!/usr/bin/env bash
# Builds the single-node recipe against the nvidia-nvshmem-cu13 wheel on a host with an
# NVIDIA GPU, installs it, and runs verify-install, then verify-install --smoke with one
# PE per GPU and with two PEs (on one GPU both share it: every step runs but the split,
# which is skipped with its reason). Prints what each step reported, compactly.
#
#   EPBUILD=path/to/epbuild [MIRROR=dir] [WORK=dir] bash gpu-check.sh
set -uo pipefail
EPBUILD=${EPBUILD:-epbuild}
WORK=${WORK:-$PWD/nvshmem-smoke-check}
mkdir -p "$WORK"
say() { printf '\n== %s\n' "$*"; }
rc() { printf -- '-- exit %s\n' "$1"; }

say "build single-node (nvidia-nvshmem-cu13)"
start=$(date +%s)
"$EPBUILD" recipe single-node ${MIRROR:+--mirror "$MIRROR"} \
  --set nvshmem.package=nvidia-nvshmem-cu13 -o "$WORK/out" || { rc $?; exit 1; }
echo "build: $(( $(date +%s) - start )) s"
art=$(ls -t "$WORK"/out/single-node-*.tar.zst | head -1)
cat "$art.sha256"

say "install"
rm -rf "$WORK/prefix"
"$EPBUILD" install "$art" --prefix "$WORK/prefix" || { rc $?; exit 1; }
smoke="$WORK/prefix/nvshmem-smoke/bin/epbuild-nvshmem-smoke"
readelf -d "$smoke" | grep -E 'NEEDED|RUNPATH|RPATH'

say "verify-install"
"$EPBUILD" verify-install --prefix "$WORK/prefix"; rc $?

# only the smoke rows, the details of what failed or warned, and the verdict
smokerows() { grep -E '^(smoke\.|FAIL |WARN |  (read|expected|found|why|fix):|OK:|FAILED:)' || true; }

say "verify-install --smoke (one PE per GPU)"
"$EPBUILD" verify-install --prefix "$WORK/prefix" --smoke | smokerows; rc "${PIPESTATUS[0]}"

say "verify-install --smoke --smoke-pes 2"
"$EPBUILD" verify-install --prefix "$WORK/prefix" --smoke --smoke-pes 2 | smokerows; rc "${PIPESTATUS[0]}"

say "verify-install --smoke --json (one PE per GPU): id status found"
"$EPBUILD" verify-install --prefix "$WORK/prefix" --smoke --json |
  python3 -c 'import json,sys; [print(c["id"], c["status"], c["found"], sep="  ") for c in json.load(sys.stdin)["checks"] if c["id"].startswith("smoke.")]'

say "the program by hand, one PE, with the install's env (the raw lines epbuild parses)"
(
  . "$WORK/prefix/env.sh"
  d=$(mktemp -d)
  "$smoke" --devices
  "$smoke" --rank 0 --npes 1 --uid-file "$d/uid" --timeout 60; rc $?
  rm -rf "$d"
)
