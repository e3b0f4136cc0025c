"""Check a wheel's shared libraries against manylinux_2_28_x86_64 (scripts/build-wheel.sh).

Each library may need only the system libraries the manylinux_2_28 policy lists, the libraries
of the wheels it depends on (scipy-openblas32; torch's nvidia-* CUDA 12/13 runtime and cuBLAS),
symbol versions no newer than glibc 2.28 / GCC 8's libstdc++, and no absolute run path.
Prints each library's needs; exit status 1 on the first violation.
"""

import os
import re
import subprocess
import sys
import tempfile
import zipfile

SYSTEM = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1",
          "ld-linux-x86-64.so.2", "libgcc_s.so.1", "libstdc++.so.6"}
FROM_WHEELS = re.compile(r"^(libscipy_openblas\.so|libcudart\.so\.1[23]|libcublas(Lt)?\.so\.1[23])$")
LIMITS = {"GLIBC": (2, 28), "GLIBCXX": (3, 4, 25), "CXXABI": (1, 3, 11)}


def _needs(path):
    dyn = subprocess.run(["objdump", "-p", path], capture_output=True, text=True,
                         check=True).stdout
    needed = re.findall(r"NEEDED\s+(\S+)", dyn)
    rpath = re.findall(r"(?:RUNPATH|RPATH)\s+(\S+)", dyn)
    syms = subprocess.run(["objdump", "-T", path], capture_output=True, text=True,
                          check=True).stdout
    versions = set(re.findall(r"\b(GLIBC|GLIBCXX|CXXABI)_([0-9.]+)\b", syms))
    return needed, rpath, versions


def check(path):
    needed, rpath, versions = _needs(path)
    bad = [n for n in needed if n not in SYSTEM and not FROM_WHEELS.match(n)]
    newest = {}
    for name, v in versions:
        t = tuple(int(x) for x in v.split("."))
        newest[name] = max(newest.get(name, t), t)
        if t > LIMITS[name]:
            bad.append(f"{name}_{v}")
    bad += [p for p in ":".join(rpath).split(":") if p and not p.startswith("$ORIGIN")]
    shown = ", ".join(f"{k} {'.'.join(map(str, v))}" for k, v in sorted(newest.items()))
    print(f"  {os.path.basename(path)}: needs {' '.join(needed)}; newest {shown}")
    return bad


def main(wheel):
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp)
        for root, _, files in os.walk(tmp):
            for f in sorted(files):
                if ".so" in f:
                    failures += [f"{f}: {b}" for b in check(os.path.join(root, f))]
    for f in failures:
        print(f"wheel-check: not manylinux_2_28: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
