#!/usr/bin/env bash
# Installs work: builds libdistil shared and static (cpu + opencl, no CUDA/HIP to keep CI short),
# installs each into a temporary prefix and builds and runs tests/install/consumer.c against it
#   1. with CMake: find_package(distil) (tests/install/CMakeLists.txt),
#   2. with pkg-config --cflags --libs distil (shared only: a static libdistil needs --static),
#   3. with pkg-config --static --cflags --libs distil.
# Run by .ci/run. Knobs: DISTIL_INSTALL_KINDS ("shared static"), DISTIL_INSTALL_WORK (the
# folder for builds and prefixes; default a fresh mktemp -d, removed at the end).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
. scripts/env.sh
work="${DISTIL_INSTALL_WORK:-$(mktemp -d)}"
mkdir -p "$work"
[ -n "${DISTIL_INSTALL_WORK:-}" ] || trap 'rm -rf "$work"' EXIT
cc="${CC:-cc}"
failed=()

# $1 = label, rest = command: run it, report, remember a failure. (set -e does not act inside
# a function called from `if`, so the functions below chain their commands with ||.)
step() {
    local label=$1
    shift
    if "$@" >"$work/$label.log" 2>&1; then
        echo "install-check: $label ok"
    else
        echo "install-check: $label FAILED"
        tail -n 40 "$work/$label.log"
        failed+=("$label")
    fi
}

# The consumer program is run in a clean environment for the loader: nothing points into the
# build tree, so only the installed files can satisfy it.
consumer_run() {
    env -u LD_LIBRARY_PATH "$@"
}

build_install() { # kind shared
    local kind=$1 shared=$2
    cmake -S "$root" -B "$work/build-$kind" -DCMAKE_BUILD_TYPE=Release -DDISTIL_WERROR=ON \
        -DBUILD_SHARED_LIBS="$shared" -DDISTIL_CUDA=OFF -DDISTIL_HIP=OFF -DDISTIL_BUILD_TESTS=OFF \
        -DDISTIL_BUILD_BENCH=OFF -DDISTIL_BUILD_EXAMPLES=OFF -DCMAKE_INSTALL_PREFIX="$work/$kind" ||
        return 1
    cmake --build "$work/build-$kind" -j"$jobs" || return 1
    cmake --install "$work/build-$kind"
}

consumer_cmake() { # kind
    local kind=$1
    cmake -S "$root/tests/install" -B "$work/consumer-cmake-$kind" \
        -DCMAKE_PREFIX_PATH="$work/$kind" || return 1
    cmake --build "$work/consumer-cmake-$kind" || return 1
    consumer_run "$work/consumer-cmake-$kind/consumer"
}

consumer_pkgconfig() { # kind, extra pkg-config flag (--static or nothing)
    local kind=$1 flag=${2:-} libdir
    libdir=$(ls -d "$work/$kind"/lib*/pkgconfig) || return 1
    local flags
    flags=$(PKG_CONFIG_PATH="$libdir" pkg-config $flag --cflags --libs distil) || return 1
    echo "pkg-config $flag: $flags"
    local exe="$work/consumer-pc-$kind${flag:+-static}"
    # The rpath lets the shared library be found; a static one leaves nothing to find.
    "$cc" -o "$exe" "$root/tests/install/consumer.c" $flags -lm \
        -Wl,-rpath,"${libdir%/pkgconfig}" || return 1
    consumer_run "$exe"
}

for kind in ${DISTIL_INSTALL_KINDS:-shared static}; do
    shared=ON
    [ "$kind" = static ] && shared=OFF
    t0=$(date +%s)
    step "$kind-install" build_install "$kind" "$shared"
    step "$kind-find_package" consumer_cmake "$kind"
    [ "$kind" = shared ] && step "$kind-pkg-config" consumer_pkgconfig "$kind"
    step "$kind-pkg-config-static" consumer_pkgconfig "$kind" --static
    echo "install-check: $kind in $(( $(date +%s) - t0 )) s"
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "install-check FAILED: ${failed[*]}"
    exit 1
fi
