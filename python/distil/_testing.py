"""The library's test hooks (core/testing/distil_testing.h), through ctypes: a private interface
for the Python tests and the benchmarks, not the package's API (libdistil.h declares none of it).

hooks_from_env() passes DISTIL_TEST_HOOKS (e.g. "fp8=emulate") on to the library, for the
contexts created after; the library itself reads no test variable.
"""

import os
from ctypes import c_char_p, c_int, c_long

from . import _lib


def _fn(name, restype, argtypes):
    fn = getattr(_lib.lib, name)
    fn.restype = restype
    fn.argtypes = argtypes
    return fn


_fail_allocations = _fn("distil_testing_fail_allocations", None, [c_long])
_hooks_set = _fn("distil_testing_hooks_set", c_int, [c_char_p])


def fail_allocations(after):
    """On this thread, let `after` more device or scratch allocations succeed, then fail every
    later one until called with -1."""
    _fail_allocations(after)


def hooks_set(spec):
    """The test hooks of the contexts created after this call (a spec of distil_testing_hooks_set,
    None for none); ValueError with the library's message for a bad spec."""
    if _hooks_set(spec.encode() if spec else None) != 0:
        raise ValueError(_lib.lib.distil_ctx_last_error(None).decode())


def hooks_from_env():
    """DISTIL_TEST_HOOKS, when set, as the test hooks."""
    hooks_set(os.environ.get("DISTIL_TEST_HOOKS"))


def hook(item):
    """Whether DISTIL_TEST_HOOKS names item (e.g. "fp8=emulate")."""
    return item in os.environ.get("DISTIL_TEST_HOOKS", "").split(",")
