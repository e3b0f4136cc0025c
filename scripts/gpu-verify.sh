#!/bin/bash
# gpu-verify.sh - every GPU check of the Python package, the wheel and the student entropy in one
# device call, each step capped so that the whole fits DEADLINE seconds (default 430):
#   the binary wheel built here (scripts/build-wheel.sh --cuda 13 --archs 90a-real --out .whl, plus
#   scipy_openblas32's wheel in .whl) installed into a fresh venv with no nvcc on PATH; the CUDA
#   Python tests on it; TRL 1.16's kernel against distil (soft-only JSD and forward KL); beside
#   it the C build with cuda (sm_90a, CUTLASS from deps/) for ctest -L cuda and the entropy parity
#   cases on the resident row kernel; Liger-Kernel's own tests on cuda; the host overhead; the
#   other baselines at T 8192; distil-bench beside distil.torch on the full fused loss (hard CE +
#   JSD) at T 1024 and 8192, each one run after the other twice.
# Carry: deps (CUTLASS), .devcarry (debs: scripts/fetch-gpu-debs.sh; wheels: pip download
# --no-deps trl==1.16.0 liger-kernel==0.8.5 -d .devcarry/wheels), .whl, build-liger (the
# liger-kernel sdist of scripts/liger-tests.sh).
#   usage: OUT=/some/dir bash scripts/gpu-verify.sh      (repository root, a CUDA GPU)
set -u
cd "$(dirname "$0")/.." || exit 1
mkdir -p "$OUT"
repo=$PWD
S=$(date +%s); DEADLINE=${DEADLINE:-540}
log() { echo "[A +$(($(date +%s)-S))s] $*"; }
left() { echo $((DEADLINE - ($(date +%s)-S))); }
step() { local n=$1 c=$2; shift 2; local t=$(( $(left) - 5 )); [ $t -gt $c ] && t=$c
  [ $t -lt 15 ] && { log "SKIP $n"; return; }
  log "START $n (cap $t)"; timeout --signal=INT --kill-after=5 $t "$@" > $OUT/$n.log 2>&1
  log "END $n: exit $? | $(grep -vE '^\s*$' $OUT/$n.log | tail -1 | cut -c1-160)"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c 'import torch,triton;print("torch",torch.__version__,"cuda",torch.version.cuda,"triton",triton.__version__)'
# the C build in the background (14 cores)
deps=/tmp/deps; for f in .devcarry/debs/*.deb; do dpkg -x "$f" $deps; done
B=build-gpu
( export PATH=/usr/local/cuda/bin:$PATH CMAKE_PREFIX_PATH=$deps/usr LD_LIBRARY_PATH=$deps/usr/lib/x86_64-linux-gnu
  cmake -S . -B $B -DCMAKE_BUILD_TYPE=Release -DDISTIL_CUDA=ON -DDISTIL_OPENCL=OFF -DDISTIL_CPU=OFF \
   -DDISTIL_BUILD_TESTS=ON -DDISTIL_BUILD_BENCH=ON -DDISTIL_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a > $OUT/configure.log 2>&1
  timeout 300 cmake --build $B -j12 > $OUT/build.log 2>&1; echo "build exit $?" >> $OUT/build.log ) &
BPID=$!
# the wheel, no compiler in sight
clean=""; IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do [ -n "$d" ] && [ ! -x "$d/nvcc" ] && clean="${clean:+$clean:}$d"; done
tmp=$(mktemp -d); python3 -m venv $tmp/venv; vpy=$tmp/venv/bin/python
python3 -c 'import site; print("\n".join(site.getsitepackages()))' > "$($vpy -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/machine-site.pth"
t0=$(date +%s%N)
PATH=$clean $vpy -m pip install -q --no-index --find-links .whl distil > $OUT/install.log 2>&1; echo "install exit $? in $(( ($(date +%s%N)-t0)/1000000 )) ms (PATH without nvcc: $(PATH=$clean command -v nvcc || echo none))" | tee -a $OUT/install.log
(cd $tmp && PATH=$clean $vpy -m distil) > $OUT/distil.txt 2>&1; head -30 $OUT/distil.txt
pip install -q --no-deps --no-index --target /tmp/pylib .devcarry/wheels/*.whl > /dev/null 2>&1
export PYTHONPATH=/tmp/pylib
cd $tmp
step pytest-cuda 100 env PATH=$clean $vpy -m pytest -q -rfE -p no:cacheprovider $repo/python/tests -k "cuda and not older"
grep -E "passed|failed" $OUT/pytest-cuda.log | tail -2
cd $repo
T=(--warmup 2 --reps 5 --min-time 0.2 --max-reps 10 --soft-only 1 --workload fused --mode all --device cuda --quiet)
bl() { local n=$1 c=$2 b=$3 i=$4 ts=$5; step $n $c $vpy bench/python/baselines.py "${T[@]}" --beta $b --impl $i --T $ts --json $OUT/$n.json; }
bl b-jsd 90 0.5 distil,trl,distil-entropy 4096,8192,16384
wait $BPID; tail -1 $OUT/build.log
step ctest-cuda 75 ctest --test-dir $B -L '^cuda$' -j8 --timeout 80 --output-on-failure
grep -E "tests passed|Failed|\(Failed\)" $OUT/ctest-cuda.log | head -8
step ent-resident 30 env DISTIL_TEST_HOOKS=fused_rows=resident DISTIL_TEST_BACKEND=cuda DISTIL_TEST_FILTER='*entropy*' $B/tests/test_parity
bl b-fkl 50 0.0 distil,trl,distil-entropy 4096,16384
F=(--workload fused --mode all --fused-T 1024,8192 --warmup 2 --reps 10 --max-reps 20 --min-time 0.5)
for r in 1 2; do
  step c-fused-$r 40 $B/bench/distil-bench --backend cuda "${F[@]}" --json $OUT/c-fused-$r.json
  step b-torch-$r 40 $vpy bench/python/baselines.py --device cuda --impl distil "${F[@]}" --json $OUT/b-torch-$r.json
done
step host-overhead 40 taskset -c 4,5 $vpy bench/python/host_overhead.py --device cuda --calls 300 --rounds 2
step liger-tests 50 env DISTIL_PYTHON=$vpy OUT=$OUT bash scripts/liger-tests.sh
grep -E "passed|failed" $OUT/liger-tests.log | tail -1
bl b-others 50 0.5 liger,compile,eager 8192
$vpy - $OUT <<'PY'
import json,glob,sys
for f in sorted(glob.glob(sys.argv[1]+"/[bc]-*.json")):
    try: rows=json.load(open(f))["results"]
    except Exception as e: print(f, e); continue
    for r in rows:
        print(f.split("/")[-1][:-5], r.get("backend"), r.get("mode"), r.get("T"), r.get("status"), r.get("ms_median"), r.get("working_bytes"), r.get("mem_bytes"))
PY
grep -E "overhead|forward|fwd" $OUT/host-overhead.log | head -20
log done
