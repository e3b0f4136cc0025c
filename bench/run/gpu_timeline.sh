#!/bin/bash
# gpu_timeline.sh - the fused loss's kernels in the pipeline (CUPTI, bench/harness/gpu_timeline.c) and its
# distil-bench time, for each T and each variant (environment assignments, "default" for none; the
# test hooks as DISTIL_TEST_HOOKS, core/testing/distil_testing.h): the A/B tool of row-kernel and
# chunk-loop changes. Run after a build with the bench on.
#   usage: BUILD=build-gpu OUT=/dir T="1024 8192" VARIANTS="default DISTIL_TEST_HOOKS=fused_rows=stream" \
#          bash bench/run/gpu_timeline.sh
set -u
cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build-gpu}
# Raw output goes to $OUT, never into the source tree (default: a fresh folder under /tmp).
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/distil-gpu-timeline.XXXXXX")}
echo "gpu_timeline.sh: output in $OUT"
mkdir -p "$OUT"
for v in ${VARIANTS:-default}; do
    env=() # "A=1,B=2" is two assignments
    [ "$v" != default ] && IFS=, read -ra env <<<"$v"
    for t in ${T:-1024 8192}; do
        echo "=== $v T=$t"
        timeout 120 env ${env[@]+"${env[@]}"} "$BUILD/bench/distil-gpu-timeline" "$t" 7 \
            > "$OUT/timeline-$v-T$t.txt" 2>&1
        cat "$OUT/timeline-$v-T$t.txt"
        timeout 120 env ${env[@]+"${env[@]}"} "$BUILD/bench/distil-bench" --backend cuda \
            --workload fused --mode full --fused-T "$t" --quiet 2>&1 | tail -4
    done
done
