"""``python -m distil``: what this install holds and what it can use here.

Prints the library loaded and why, its backends with their device counts, the CUDA versions in
the process, and for each backend without a device the likely reason. Exit status 0 when the
library loads, 1 when it does not (the reason is printed).
"""

import os
import sys


def _backend_reasons(backends):
    """{backend: why it has no device} for the usual backends."""
    from . import _loader

    reasons = {}
    names = os.path.basename(_loader_library())
    cuda_libs = _loader.cuda_libraries()
    if "cuda" not in backends:
        if cuda_libs:
            reasons["cuda"] = (
                "not loaded: " + "; ".join(t for k, t in _loader.notes if k in ("cuda", "library"))
                or "see above"
            )
        else:
            reasons["cuda"] = (
                f"not compiled into {names} (a build without nvcc or with "
                "DISTIL_CUDA=OFF; docs/INSTALL.md)"
            )
    elif backends["cuda"] == 0:
        reasons["cuda"] = "no CUDA device visible (driver, CUDA_VISIBLE_DEVICES?)"
    if "opencl" not in backends:
        reasons["opencl"] = f"not compiled into {names}"
    elif backends["opencl"] == 0:
        loader = _loader.opencl_loader()
        reasons["opencl"] = (
            f"{loader} loads but lists no device (no ICD: e.g. Debian's "
            "pocl-opencl-icd or a GPU vendor's)"
            if loader
            else "no OpenCL ICD loader (libOpenCL.so.1: e.g. Debian's ocl-icd-libopencl1)"
        )
    return reasons


def _loader_library():
    import distil

    return distil.library_path()


def _torch_lines():
    try:
        import torch
    except ImportError:
        return ["torch: not installed"]
    lines = [f"torch {torch.__version__}, CUDA {torch.version.cuda or 'none (CPU build)'}"]
    if torch.version.cuda and torch.cuda.is_available():
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            lines.append(f"  cuda:{i} {p.name} (sm_{p.major}{p.minor})")
    elif torch.version.cuda:
        lines.append("  torch sees no CUDA device")
    return lines


def main():
    try:
        import distil
    except ImportError as e:
        print(f"distil: the library does not load: {e}")
        return 1
    from . import _loader

    print(f"distil {distil.version()} (Python {sys.version.split()[0]})")
    print(f"library: {distil.library_path()}")
    for topic, text in _loader.notes:
        print(f"  {topic}: {text}")
    for line in _torch_lines():
        print(line)
    for line in _loader.cuda_versions():
        print(line)
    backends = distil.backends()
    print("backends (devices):")
    for name, n in backends.items():
        print(f"  {name}: {n}")
    reasons = _backend_reasons(backends)
    if reasons:
        print("missing:")
        for name, why in reasons.items():
            print(f"  {name}: {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
