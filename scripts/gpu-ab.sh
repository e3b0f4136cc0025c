#!/bin/bash
# gpu-ab.sh - this tree against another (BASE, a source tree such as `git archive` of main) on a
# CUDA GPU, in one device call: both built for sm_90a (CUTLASS from deps/) side by side; then
# this tree's `ctest -L cuda` and its CUDA Python tests (python/ against this build's library);
# then distil-bench at the seed shapes - the fused loss (loss, loss + grads) at T 1024 and 8192
# and the JSD at T 8192 - BASE and this tree one after the other, ROUNDS times, and a table of
# each row's medians (this tree / BASE; the spread is the rounds' own).
#   usage: BASE=/path/to/tree OUT=/some/dir bash scripts/gpu-ab.sh    (repository root)
#   DEADLINE (s, default 560) caps the whole; ROUNDS (default 2).
set -u
cd "$(dirname "$0")/.." || exit 1
: "${BASE:?BASE: the source tree to compare with}" "${OUT:?OUT: a folder for the logs}"
mkdir -p "$OUT"
S=$(date +%s); DEADLINE=${DEADLINE:-560}; ROUNDS=${ROUNDS:-2}
log() { echo "[ab +$(($(date +%s) - S))s] $*"; }
left() { echo $((DEADLINE - ($(date +%s) - S))); }
step() { # step NAME CAP CMD...: CMD under min(CAP, time left), its log in $OUT/NAME.log
    local n=$1 c=$2; shift 2; local t=$(($(left) - 5)); [ $t -gt $c ] && t=$c
    [ $t -lt 15 ] && { log "SKIP $n"; return; }
    timeout --signal=INT --kill-after=5 $t "$@" > "$OUT/$n.log" 2>&1
    log "$n: exit $? | $(grep -vE '^\s*$' "$OUT/$n.log" | tail -1 | cut -c1-150)"
}
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
deps=/tmp/ab-deps; for f in .devcarry/debs/*.deb; do [ -f "$f" ] && dpkg -x "$f" $deps; done
cutlass=$PWD/deps/cutlass
build() { # build SRC DIR TARGETS...
    local src=$1 dir=$2; shift 2
    PATH=/usr/local/cuda/bin:$PATH CMAKE_PREFIX_PATH=$deps/usr cmake -S "$src" -B "$dir" \
        -DCMAKE_BUILD_TYPE=Release -DDISTIL_CUDA=ON -DDISTIL_OPENCL=OFF -DDISTIL_CPU=OFF \
        -DDISTIL_BUILD_TESTS=ON -DDISTIL_BUILD_BENCH=ON -DCMAKE_CUDA_ARCHITECTURES=90a \
        -DDISTIL_CUTLASS_DIR="$cutlass" > /dev/null &&
        PATH=/usr/local/cuda/bin:$PATH cmake --build "$dir" -j8 ${1:+--target "$@"}
}
export -f build; export deps cutlass
step build-base 300 bash -c 'build "$@"' build "$BASE" build-ab-base distil-bench &
step build-this 300 bash -c 'build "$@"' build . build-ab-this &
wait
step ctest-cuda 120 ctest --test-dir build-ab-this -L '^cuda$' -j4 --timeout 100 --output-on-failure
grep -E "tests passed|\(Failed\)|Not Run" "$OUT/ctest-cuda.log" | head -8
lib=$(find build-ab-this -name 'libdistil*.so' | head -1)
step pytest-cuda 120 env PYTHONPATH=python DISTIL_LIBRARY=$PWD/$lib python3 -m pytest -q -p no:cacheprovider \
    -rfE python/tests -k "cuda and not older"
grep -E "^(FAILED|ERROR)|passed|failed" "$OUT/pytest-cuda.log" | tail -6
A=(--backend cuda --workload all --mode all --jsd-T 8192 --fused-T 1024,8192 --warmup 2 --reps 10
   --max-reps 20 --min-time 0.5)
for r in $(seq 1 "$ROUNDS"); do
    step bench-base-$r 70 build-ab-base/bench/distil-bench "${A[@]}" --json "$OUT/bench-base-$r.json"
    step bench-this-$r 70 build-ab-this/bench/distil-bench "${A[@]}" --json "$OUT/bench-this-$r.json"
done
python3 - "$OUT" <<'PY'
import glob, json, sys
rows = {}
for f in sorted(glob.glob(sys.argv[1] + "/bench-*.json")):
    tree = "this" if "-this-" in f else "base"
    try:
        results = json.load(open(f))["results"]
    except Exception as e:
        print(f, "unreadable:", e); continue
    for r in results:
        key = (r.get("workload"), r.get("mode"), r.get("T"))
        rows.setdefault(key, {"base": [], "this": []})[tree].append(r.get("ms_median"))
print("| workload | mode | T | base ms | this ms | this / base |\n|---|---|---|---|---|---|")
for (w, m, t), v in sorted(rows.items(), key=str):
    b, n = [x for x in v["base"] if x], [x for x in v["this"] if x]
    ratio = f"{min(n) / min(b):.3f}" if b and n else "-"
    show = lambda xs: " / ".join(f"{x:.3f}" for x in xs) or "-"
    print(f"| {w} | {m} | {t} | {show(b)} | {show(n)} | {ratio} |")
PY
log done
