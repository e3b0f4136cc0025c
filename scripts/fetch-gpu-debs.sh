#!/usr/bin/env bash
# Download (not install) the Debian 12 packages that scripts/gpu-check.sh unpacks on a GPU machine
# without network: cmocka for the tests, CLBlast and the OpenCL ICD loader and headers for the
# opencl backend, clinfo to see which OpenCL platforms load there. They land in .devcarry/debs,
# which git ignores and the device tool carries (`carry: [".devcarry"]`).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qs '^/.devcarry/' .git/info/exclude || echo /.devcarry/ >> .git/info/exclude
mkdir -p .devcarry/debs
cd .devcarry/debs
apt-get download libcmocka0 libcmocka-dev libclblast1 libclblast-dev ocl-icd-libopencl1 \
    ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers clinfo
ls -1
