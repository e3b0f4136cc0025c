"""The package's library choice (python/distil/_loader.py) and its diagnostic (python -m distil).

The choice is checked on a stand-in package folder holding empty files named like the binary
wheel's libraries; nothing is loaded from it.
"""

import os
import shutil
import subprocess
import sys

import pytest

import distil
from distil import _loader


@pytest.fixture
def wheel_dir(tmp_path, monkeypatch):
    for name in ("libdistil.so", "libdistil_cuda12.so", "libdistil_cuda13.so"):
        (tmp_path / name).write_bytes(b"")
    monkeypatch.setattr(_loader, "_here", str(tmp_path))
    monkeypatch.setattr(_loader, "notes", [])
    for var in ("DISTIL_LIBRARY", "DISTIL_VARIANT"):
        monkeypatch.delenv(var, raising=False)
    return tmp_path


def _names(paths):
    return [os.path.basename(p) for p in paths]


@pytest.mark.parametrize(
    "version, expected",
    [
        ("12.4", ["libdistil_cuda12.so", "libdistil.so"]),
        ("13.0", ["libdistil_cuda13.so", "libdistil.so"]),
        ("11.8", ["libdistil.so"]),  # a major the wheel lacks: the host library, with a note
        ("", ["libdistil.so"]),  # a CPU-only torch
        (None, ["libdistil_cuda13.so", "libdistil_cuda12.so", "libdistil.so"]),  # no torch
    ],
)
def test_choice_follows_torch_cuda(wheel_dir, monkeypatch, version, expected):
    monkeypatch.setattr(_loader, "torch_cuda", lambda: version)
    assert _names(_loader.candidates()) == expected
    assert _loader.notes, "the choice leaves a note for python -m distil"


def test_variant_and_library_override(wheel_dir, monkeypatch):
    monkeypatch.setattr(_loader, "torch_cuda", lambda: "13.0")
    monkeypatch.setenv("DISTIL_VARIANT", "cuda12")
    assert _names(_loader.candidates()) == ["libdistil_cuda12.so"]
    monkeypatch.setenv("DISTIL_VARIANT", "cpu")
    assert _names(_loader.candidates()) == ["libdistil.so"]
    monkeypatch.setenv("DISTIL_VARIANT", "cuda11")  # not in the package: ignored, with a note
    assert _names(_loader.candidates()) == ["libdistil_cuda13.so", "libdistil.so"]
    assert any("cuda11" in text for _, text in _loader.notes)
    monkeypatch.setenv("DISTIL_LIBRARY", "/elsewhere/libdistil.so")
    assert _loader.candidates() == ["/elsewhere/libdistil.so"]


@pytest.mark.parametrize("given", [None, "DISTIL_LIBRARY"])
def test_torch_before_a_source_build(tmp_path, monkeypatch, given):
    """A source build's one library (or DISTIL_LIBRARY's) may hold the cuda backend, linked to
    the toolkit's CUDA libraries: torch is imported before it is chosen and loaded, so that
    the process holds torch's copies only."""
    (tmp_path / "libdistil.so").write_bytes(b"")
    monkeypatch.setattr(_loader, "_here", str(tmp_path))
    asked = []
    monkeypatch.setattr(_loader, "torch_cuda", lambda: asked.append(1) or "13.0")
    monkeypatch.delenv("DISTIL_VARIANT", raising=False)
    if given:
        monkeypatch.setenv("DISTIL_LIBRARY", str(tmp_path / "libdistil.so"))
    else:
        monkeypatch.delenv("DISTIL_LIBRARY", raising=False)
    assert _names(_loader.candidates()) == ["libdistil.so"]
    assert asked == [1]


def test_diagnostic_runs():
    out = subprocess.run(
        [sys.executable, "-m", "distil"], capture_output=True, text=True, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr
    assert f"library: {distil.library_path()}" in out.stdout
    for name in distil.backends():
        assert f"  {name}: " in out.stdout


@pytest.mark.skipif(shutil.which("objdump") is None, reason="objdump is not installed")
def test_library_does_not_link_opencl():
    """The opencl backend opens the ICD loader at run time: importing must not need one."""
    if "opencl" not in distil.backends():
        pytest.skip("this libdistil has no opencl backend")
    dyn = subprocess.run(
        ["objdump", "-p", distil.library_path()], capture_output=True, text=True, check=True
    ).stdout
    needed = [line.split()[1] for line in dyn.splitlines() if line.strip().startswith("NEEDED")]
    assert needed, "objdump listed no NEEDED entries"
    assert not [n for n in needed if "OpenCL" in n], needed
