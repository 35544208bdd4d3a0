#!/usr/bin/env bash
# Wall time of a cold `epbuild recipe single-node` (CUDA 13 wheels) against a hand build of
# the same DeepEP: 29d31c0 + PR #466 against the NVSHMEM wheel, doing the work epbuild's
# python-extension step does (setup.py egg_info + build, into directories of their own).
# The two alternate, ROUNDS times each (a fresh cache and a fresh clone every time); the
# script prints every run, the medians and their ratio (target: at most 1.05), and where
# epbuild's time went in its last run. See docs/validation.md.
#
#   MIRROR=dir [EPBUILD=path/to/epbuild] [ROUNDS=2] [FIRST=epbuild|hand] [WORK=dir] bash docs/gpu-wall.sh
#
# ARGS replaces the extra arguments of epbuild recipe (default: the CUDA 13 wheels).
# One round takes about twice the DeepEP build (about 100 s each on an H100).
set -euo pipefail
: "${MIRROR:?set MIRROR to the mirror directory (epbuild mirror single-node DIR)}"
EPBUILD=${EPBUILD:-epbuild}
ROUNDS=${ROUNDS:-2}
FIRST=${FIRST:-epbuild} # which side runs first in the first round (they alternate)
WORK=${WORK:-$PWD/gpu-wall}
ARGS=${ARGS:---set nvshmem.package=nvidia-nvshmem-cu13 --set nccl.package=nvidia-nccl-cu13}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
REPO=$MIRROR/github.com/deepseek-ai/DeepEP.git
BASE=29d31c095796f3c8ece47ee9cdcc167051bbeed9
PR=8a07e7e7ed57cfc63005f670d64d410cb30b061b # refs/pull/466/head
mkdir -p "$WORK"
now() { date +%s.%N; }
secs() { python3 -c 'import sys; print("%.1f" % (float(sys.argv[2]) - float(sys.argv[1])))' "$1" "$2"; }

# By hand: fetch the pinned commit (an epbuild mirror holds it under refs/epbuild/, not a
# branch), check out, apply the PR, then what epbuild's step runs (the CCCL path of
# R12, the recipe's arch, every core).
hand() {
	local d=$WORK/hand t0 t1
	rm -rf "$d" && mkdir -p "$d/egg"
	t0=$(now)
	git init -q "$d/DeepEP"
	git -C "$d/DeepEP" fetch -q --depth 1 "$REPO" "$BASE"
	git -C "$d/DeepEP" checkout -q FETCH_HEAD
	git -C "$REPO" diff "$BASE" "$PR" | git -C "$d/DeepEP" apply
	(cd "$d/DeepEP" && CPATH="$CUDA_HOME/include/cccl${CPATH:+:$CPATH}" TORCH_CUDA_ARCH_LIST=9.0 MAX_JOBS=$(nproc) \
		python3 setup.py egg_info --egg-base ../egg build --build-lib ../lib --build-temp ../tmp >"$d/build.log" 2>&1) ||
		{ tail -30 "$d/build.log" >&2; exit 1; }
	t1=$(now)
	ls "$d"/lib/deep_ep_cpp*.so >/dev/null
	secs "$t0" "$t1"
}

# epbuild, cold: a cache of its own, the whole recipe (probe, fetch, patch, the builds of
# DeepEP and the NVSHMEM smoke test, checks, package).
ours() {
	local d=$WORK/epbuild t0 t1
	rm -rf "$d" && mkdir -p "$d"
	t0=$(now)
	# shellcheck disable=SC2086
	EPBUILD_CACHE=$d/cache "$EPBUILD" recipe single-node $ARGS --mirror "$MIRROR" -o "$d/out" --json >"$d/result.json" 2>"$d/stderr" ||
		{ tail -30 "$d/stderr" >&2; exit 1; }
	t1=$(now)
	cp "$d/result.json" "$WORK/last-result.json"
	secs "$t0" "$t1"
}

declare -a E H
off=0
[ "$FIRST" = hand ] && off=1
for ((i = 0; i < ROUNDS; i++)); do
	if (((i + off) % 2 == 0)); then
		e=$(ours); h=$(hand)
	else
		h=$(hand); e=$(ours)
	fi
	E+=("$e"); H+=("$h")
	echo "round $((i + 1)): epbuild ${e} s, hand ${h} s"
done
python3 - "$WORK/last-result.json" "${E[*]}" "${H[*]}" <<'EOF'
import json, statistics, sys
r = json.load(open(sys.argv[1]))
e = [float(x) for x in sys.argv[2].split()]
h = [float(x) for x in sys.argv[3].split()]
me, mh = statistics.median(e), statistics.median(h)
print("epbuild median %.1f s (min %.1f), hand median %.1f s (min %.1f)" % (me, min(e), mh, min(h)))
print("WALL ratio=%.3f min_ratio=%.3f (target <= 1.05)" % (me / mh, min(e) / min(h)))
print("epbuild's last run, stage by stage (the builds ran at the same time, the checks beside the package):")
for s in r.get("stages", []):
    print("  %-8s %-14s %7.1f s%s" % (s["stage"], s.get("component", ""), s["seconds"], "  (cached)" if s.get("cached") else ""))
longest = max((s["seconds"] for s in r.get("stages", []) if s["stage"] == "build"), default=0)
print("outside its longest build: %.1f s of %.1f s (probe, fetch, patch, checks, package, publication)" % (e[-1] - longest, e[-1]))
print("artifact", r.get("artifact"), "sha256", r.get("sha256"))
EOF
