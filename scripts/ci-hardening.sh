#!/usr/bin/env bash
# Hardening checks (docs/RELIABILITY.md), run by .ci/run after the normal and ASan+UBSan suites:
#   1. a short libFuzzer run over the public API (clang, ASan+UBSan), from fuzz/corpus
#   2. the thread test under ThreadSanitizer (ref, cpu with one OpenMP thread, opencl)
#   3. valgrind memcheck over a subset of the suite (host backends)
# Each builds in its own folder (build-fuzz, build-tsan; valgrind reuses build-test from
# scripts/test.sh, or builds build-valgrind). Budget: about 3 minutes on 2 cores (CI's 25).
# Knobs: DISTIL_FUZZ_SECONDS (default 60), DISTIL_HARDENING_STEPS ("fuzz tsan valgrind").
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bash scripts/install-deps.sh --test
. scripts/env.sh

# libFuzzer's runtime (libclang_rt.fuzzer) is in Debian 12's libclang-rt-14-dev.
if ! dpkg-query -W -f='${Status}' libclang-rt-14-dev 2>/dev/null | grep -q "install ok installed"; then
    sudo=""
    [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends \
        libclang-rt-14-dev
fi

steps="${DISTIL_HARDENING_STEPS:-fuzz tsan valgrind}"
start=$(date +%s)
failed=()
common=(-DDISTIL_CUDA=OFF -DDISTIL_HIP=OFF -DDISTIL_BUILD_BENCH=OFF -DDISTIL_BUILD_EXAMPLES=OFF
        -DCMAKE_BUILD_TYPE=RelWithDebInfo)

# ---------------------------------------------------------------- 1. libFuzzer
# OpenCL stays out of this build: PoCL's LLVM installs its own SIGABRT handler, which hides a
# failure from libFuzzer (the corpus replays on opencl as ctest hardening_fuzz_corpus_opencl).
run_fuzz() {
    local build=build-fuzz seconds="${DISTIL_FUZZ_SECONDS:-60}"
    cmake -S . -B "$build" "${common[@]}" -DCMAKE_C_COMPILER=clang -DDISTIL_OPENCL=OFF \
        -DDISTIL_BUILD_TESTS=OFF -DDISTIL_BUILD_FUZZ=ON -DDISTIL_SANITIZE="address;undefined" \
        -DBUILD_SHARED_LIBS=OFF >/dev/null || return 1
    cmake --build "$build" -j"$jobs" --target distil_fuzz || return 1
    local work="$build/fuzz-run" rc=0
    rm -rf "$work" && mkdir -p "$work/new"
    # New inputs go to $work/new; the committed corpus is only read. Failures are saved in $work.
    (cd "$work" && DISTIL_NUM_THREADS=1 \
        ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        "$root/$build/fuzz/distil_fuzz" new "$root/fuzz/corpus" -max_total_time="$seconds" \
        -max_len=2048 -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 >fuzz.log 2>&1) || rc=$?
    grep -E "^(INFO: seed|#[0-9]+[[:space:]]+(INITED|DONE)|stat::number_of_executed_units|distil fuzz|==[0-9]+==ERROR|SUMMARY)" \
        "$work/fuzz.log" || true
    if ls "$work"/crash-* "$work"/leak-* "$work"/fuzz-failure-* >/dev/null 2>&1; then
        rc=1
    fi
    [ "$rc" -eq 0 ] || tail -n 60 "$work/fuzz.log"
    return "$rc"
}

# ---------------------------------------------------------------- 2. ThreadSanitizer
# libgomp is not built with TSan, so its barriers are invisible and every OpenMP reduction
# would be reported: the cpu backend runs with DISTIL_NUM_THREADS=1 here (each context then
# computes on its own host thread, which is what this test is about).
run_tsan() {
    local build=build-tsan
    cmake -S . -B "$build" "${common[@]}" -DDISTIL_BUILD_TESTS=ON -DDISTIL_SANITIZE=thread \
        >/dev/null || return 1
    cmake --build "$build" -j"$jobs" --target hardening_threads || return 1
    DISTIL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
        ctest --test-dir "$build" -R '^hardening_threads_' --output-on-failure
}

# ---------------------------------------------------------------- 3. valgrind memcheck
# Host backends only: PoCL's JIT under valgrind takes many minutes (opencl runs under ASan in
# .ci/run instead). The big V = 262144 edge cases are left to ASan for the same reason.
valgrind_build() {
    local build="${DISTIL_TEST_BUILD_DIR:-build-test}"
    if [ ! -x "$build/tests/hardening/hardening_faults" ] || grep -q "DISTIL_SANITIZE:STRING=.\+" \
        "$build/CMakeCache.txt" 2>/dev/null; then
        build=build-valgrind
        cmake -S . -B "$build" "${common[@]}" -DDISTIL_BUILD_TESTS=ON >&2 || return 1
        cmake --build "$build" -j"$jobs" >&2 || return 1
    fi
    echo "$build"
}

run_valgrind() {
    local build
    build=$(valgrind_build) || return 1
    local vg=(valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite,indirect
              --show-leak-kinds=definite,indirect --suppressions="$root/tests/hardening/valgrind.supp")
    # "executable backend [args]"; backend "-" runs without DISTIL_TEST_BACKEND, i.e. every
    # compiled backend with a device (ref and cpu here: no OpenCL platform) in one process, so
    # that valgrind's start is paid once per executable.
    local runs=("tests/test_api -" "tests/test_bad_input -" "tests/hardening/hardening_faults -"
                "tests/hardening/hardening_threads -"
                "tests/hardening/hardening_fuzz_replay - $root/fuzz/corpus"
                "tests/test_topk_bad -")
    local bad=0
    # No OpenCL platform (an empty ICD vendor folder): test_api would otherwise create PoCL
    # contexts under valgrind, minutes of JIT (opencl runs under ASan instead, above).
    local no_icd
    no_icd=$(mktemp -d)
    for r in "${runs[@]}"; do
        read -r exe backend args <<<"$r"
        local env=(DISTIL_NUM_THREADS=2 OCL_ICD_VENDORS="$no_icd")
        [ "$backend" != "-" ] && env+=(DISTIL_TEST_BACKEND="$backend")
        local t0 rc=0
        t0=$(date +%s)
        env "${env[@]}" "${vg[@]}" "$build/$exe" $args >"$build/valgrind-$(basename "$exe")-$backend.log" 2>&1 || rc=$?
        if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
            bad=1
            echo "valgrind: $exe ($backend) FAILED, rc $rc; see $build/valgrind-$(basename "$exe")-$backend.log"
            grep -E "^==[0-9]+== [A-Z]|FAILED" "$build/valgrind-$(basename "$exe")-$backend.log" | head -20
        else
            echo "valgrind: $exe ($backend) clean in $(( $(date +%s) - t0 )) s"
        fi
    done
    return "$bad"
}

for step in $steps; do
    t0=$(date +%s)
    echo "== hardening: $step"
    if "run_$step"; then
        echo "== hardening: $step passed in $(( $(date +%s) - t0 )) s"
    else
        echo "== hardening: $step FAILED after $(( $(date +%s) - t0 )) s"
        failed+=("$step")
    fi
done

echo "== hardening done in $(( $(date +%s) - start )) s"
if [ ${#failed[@]} -gt 0 ]; then
    echo "== hardening FAILED: ${failed[*]}"
    exit 1
fi
