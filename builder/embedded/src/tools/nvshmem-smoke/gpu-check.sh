#!/usr/bin/env bash
# Builds the single-node recipe against the nvidia-nvshmem-cu13 wheel on a host with an
# NVIDIA GPU, installs it, and runs verify-install, then verify-install --smoke with one
# PE per GPU and with two PEs (on one GPU both share it: every step runs but the split,
# which is skipped with its reason). Prints what each step reported, compactly.
#
#   EPBUILD=path/to/epbuild [MIRROR=dir] [WORK=dir] bash gpu-check.sh
#
# RECIPE=NAME builds another DeepEP recipe the same way, with ARGS (extra arguments of
# epbuild recipe, split on blanks, e.g. ARGS="--set nvshmem.version=3.4.5") instead of
# single-node's --set nvshmem.package=nvidia-nvshmem-cu13.
set -uo pipefail
EPBUILD=${EPBUILD:-epbuild}
RECIPE=${RECIPE:-single-node}
WORK=${WORK:-$PWD/nvshmem-smoke-check}
if [ "$RECIPE" = single-node ]; then ARGS=${ARGS:---set nvshmem.package=nvidia-nvshmem-cu13}; else ARGS=${ARGS:-}; fi
mkdir -p "$WORK"
say() { printf '\n== %s\n' "$*"; }
rc() { printf -- '-- exit %s\n' "$1"; }

say "build $RECIPE $ARGS"
start=$(date +%s)
# shellcheck disable=SC2086
"$EPBUILD" recipe "$RECIPE" ${MIRROR:+--mirror "$MIRROR"} $ARGS -o "$WORK/out" --json >"$WORK/build.json" || { rc $?; exit 1; }
echo "build: $(( $(date +%s) - start )) s wall"
# each stage's time (and whether it was cached), the artifact and its sha256
python3 -c 'import json,sys
r = json.load(open(sys.argv[1]))
for s in r.get("stages", []):
    print("  %-8s %-14s %8.1f s%s" % (s["stage"], s.get("component", ""), s["seconds"], "  (cached)" if s.get("cached") else ""))
print("artifact", r.get("artifact"), "sha256", r.get("sha256"))' "$WORK/build.json" || cat "$WORK/build.json"
art=$(ls -t "$WORK"/out/"$RECIPE"-*.tar.zst | head -1)

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
