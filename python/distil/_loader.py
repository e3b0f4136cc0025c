"""Which libdistil this process loads, and why.

A source build (``pip install .``) puts one ``libdistil.so`` in the package, holding the
backends its machine could build. The binary wheel holds three builds of the same library:

- ``libdistil.so``: cpu, opencl and the float64 reference;
- ``libdistil_cuda12.so`` and ``libdistil_cuda13.so``: the same plus the cuda backend, built
  with CUDA 12 / 13, linked to that major's ``libcudart`` and ``libcublas`` by soname.

The CUDA library is picked from ``torch.version.cuda``, so that it shares the CUDA runtime and
cuBLAS that torch loaded (the nvidia-* wheels pip installs with torch) instead of bringing a
second one into the process. Without torch, the newest major whose libraries load is taken.

Environment:
  DISTIL_LIBRARY   a libdistil to load instead (another build's)
  DISTIL_VARIANT   ``cpu``, ``cuda12`` or ``cuda13``: this one of the package's libraries
"""

import ctypes
import importlib.util
import os
import re
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_names = {"linux": "libdistil.so", "darwin": "libdistil.dylib", "win32": "distil.dll"}
_CUDA_RE = re.compile(r"^libdistil_cuda(\d+)\.so$")

# What the choice saw, for ``python -m distil``: (topic, text) pairs.
notes = []


def _host_library():
    return os.path.join(_here, _names.get(sys.platform, "libdistil.so"))


def cuda_libraries():
    """{CUDA major: path} of the package's per-major libraries (empty for a source build)."""
    found = {}
    for name in sorted(os.listdir(_here)):
        m = _CUDA_RE.match(name)
        if m:
            found[int(m.group(1))] = os.path.join(_here, name)
    return found


def torch_cuda():
    """torch.version.cuda ("13.0"), "" for a CPU-only torch, None without torch."""
    if "torch" not in sys.modules and importlib.util.find_spec("torch") is None:
        return None
    try:
        import torch
    except Exception as e:  # noqa: BLE001 (a broken torch install: choose as without one)
        notes.append(("torch", f"installed but `import torch` failed: {e}"))
        return None
    return torch.version.cuda or ""


def _cuda_choice(libs, version):
    """The package's CUDA libraries to try, best first, with notes saying why (version:
    torch_cuda())."""
    have = ", ".join(f"CUDA {m}" for m in sorted(libs))
    if version is None:
        notes.append(("cuda", f"no torch: trying the libraries for {have}, newest first"))
        return [libs[m] for m in sorted(libs, reverse=True)]
    if version == "":
        notes.append(("cuda", "torch is a CPU-only build: the cuda backend is not loaded"))
        return []
    major = int(version.split(".")[0])
    if major not in libs:
        why = (
            f"torch is built for CUDA {version}; this package has libraries for {have} "
            "only: the cuda backend is not loaded"
        )
        notes.append(("cuda", why))
        return []
    notes.append(("cuda", f"torch is built for CUDA {version}: libdistil_cuda{major}.so"))
    return [libs[major]]


def candidates():
    """The libraries to try, in order; the first that loads is used.

    torch, where installed, is imported first: a library with the cuda backend (a source build's
    or DISTIL_LIBRARY's as well as the wheel's) names libcudart and libcublas by soname, and
    once torch has loaded its own, those serve it. Loaded before torch, a source build's would
    bring the toolkit's copies, and torch would then run on a cuBLAS and runtime it was not
    built with (a crash at `import torch` on the H100 machine).
    """
    version = torch_cuda()
    env = os.environ.get("DISTIL_LIBRARY")
    if env:
        notes.append(("library", "DISTIL_LIBRARY is set"))
        return [env]
    host = _host_library()
    libs = cuda_libraries()
    variant = os.environ.get("DISTIL_VARIANT", "")
    if variant:
        m = re.fullmatch(r"cuda(\d+)", variant)
        if variant == "cpu":
            return [host]
        if m and int(m.group(1)) in libs:
            notes.append(("library", f"DISTIL_VARIANT={variant}"))
            return [libs[int(m.group(1))]]
        have = "".join(f", cuda{k}" for k in sorted(libs))
        notes.append(("library", f"DISTIL_VARIANT={variant} names none of cpu{have}: ignored"))
    if not libs:
        return [host]
    return _cuda_choice(libs, version) + [host]


def failed(path, error):
    """Record a library that did not load (the next candidate is tried)."""
    notes.append(("library", f"{os.path.basename(path)} did not load: {error}"))


def _loaded_path(fragment):
    """The path of a loaded shared object whose name contains fragment, or None."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1]
                if fragment in os.path.basename(path):
                    return path
    except OSError:
        pass
    return None


def _version_of(libname, fn):
    """An int from a CUDA library's getVersion-style function, or None."""
    path = _loaded_path(libname)
    if path is None:
        return None, None
    try:
        v = ctypes.c_int(0)
        getattr(ctypes.CDLL(path), fn)(ctypes.byref(v))
        return path, v.value
    except (OSError, AttributeError):
        return path, None


def _cuda_text(v):
    return f"{v // 1000}.{(v % 1000) // 10}" if v else "unknown"


def cuda_versions():
    """Lines on the CUDA libraries in this process (runtime, cuBLAS, driver)."""
    out = []
    for lib, fn, what in (
        ("libcudart.so", "cudaRuntimeGetVersion", "CUDA runtime"),
        ("libcuda.so", "cuDriverGetVersion", "CUDA driver"),
    ):
        path, v = _version_of(lib, fn)
        if path:
            out.append(f"{what} {_cuda_text(v)} ({path})")
    path = _loaded_path("libcublas.so")
    if path:
        out.append(f"cuBLAS {path}")
    return out


def opencl_loader():
    """The OpenCL ICD loader's name if one loads, else None."""
    for name in ("libOpenCL.so.1", "libOpenCL.so"):
        try:
            ctypes.CDLL(name)
            return name
        except OSError:
            continue
    return None
