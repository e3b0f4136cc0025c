"""distil contexts for Python callers: one per (backend, device, thread), created on first use.

A distil context serves one thread at a time (distil.h), so each thread gets its own. Each
context remembers the stream it is bound to, so a call rebinds only when the caller's stream
changed, and caches the descriptors and workspace sizes of the shapes it has seen.
"""

import atexit
import ctypes
import threading
import weakref

from . import _errors, _lib

_local = threading.local()
_all = weakref.WeakSet()


class Context:
    """A distil_ctx on one device of one backend."""

    def __init__(self, backend, device):
        handle = ctypes.c_void_p()
        _errors.check(_lib.lib.distil_ctx_create(ctypes.byref(handle), backend.encode(), device))
        self.handle = handle
        self.backend = backend
        self.device = device
        self._stream = _lib.STREAM_OWN.value  # a new context starts on its own stream
        self.plans = {}  # descriptor key -> (descriptor, workspace bytes)
        self.lent = None  # (address, bytes) of the workspace lent now (_calls._lend)
        # (stream, block): a small workspace a caller keeps between calls on that stream
        # (distil.torch: _ops._kept_workspace); dropped with the context.
        self.kept = None
        _all.add(self)

    def check(self, status):
        _errors.check(status, self.handle)

    def bind_stream(self, stream):
        """Bind a native stream handle (int; 0 is the default stream) or None for our own."""
        value = _lib.STREAM_OWN.value if stream is None else stream
        if value != self._stream:
            self.check(_lib.lib.distil_ctx_set_stream(self.handle, ctypes.c_void_p(value)))
            self._stream = value

    @property
    def stream(self):
        """The native stream handle bound now (_lib.STREAM_OWN's value: the context's own)."""
        return self._stream

    def synchronize(self):
        """Wait for this context's work; raise a deferred error (an invalid label, a head made
        once for another shape on cuda / hip) once."""
        self.check(_lib.lib.distil_ctx_synchronize(self.handle))

    def close(self):
        if self.handle is not None and self.handle.value:
            _lib.lib.distil_ctx_destroy(self.handle)
        self.handle = None
        self.kept = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    @property
    def device_name(self):
        return _lib.lib.distil_ctx_device_name(self.handle).decode()


def get(backend, device):
    """The calling thread's context for (backend, device)."""
    table = getattr(_local, "contexts", None)
    if table is None:
        table = _local.contexts = {}
    ctx = table.get((backend, device))
    if ctx is None:
        ctx = table[(backend, device)] = Context(backend, device)
    return ctx


def lookup(backend, device):
    """The calling thread's context for (backend, device), or None when it has none yet."""
    table = getattr(_local, "contexts", None)
    return table.get((backend, device)) if table is not None else None


def existing():
    """The calling thread's contexts."""
    return list(getattr(_local, "contexts", {}).values())


@atexit.register
def _close_all():
    # Before the vendor runtimes are torn down at exit.
    for ctx in list(_all):
        ctx.close()
