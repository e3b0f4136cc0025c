"""distil statuses as Python exceptions, each carrying the library's message."""

from . import _lib


class Error(RuntimeError):
    """A distil call failed; ``status`` is the distil_status code, the text distil's message."""

    def __init__(self, message, status=_lib.ERR_BACKEND):
        super().__init__(message)
        self.status = status


class InvalidArgument(Error, ValueError):
    """An argument broke a rule of docs/SPEC.md §5; the message names it."""


class InvalidLabel(InvalidArgument):
    """A label outside [0, V) that is not ignore_index (found on the device, reported late)."""


class OutOfMemory(Error, MemoryError):
    """A host or device allocation failed; the context stays usable."""


class NotAvailable(Error):
    """The backend is not compiled in, or has no such device."""


_classes = {
    _lib.ERR_INVALID_ARG: InvalidArgument,
    _lib.ERR_INVALID_LABEL: InvalidLabel,
    _lib.ERR_OUT_OF_MEMORY: OutOfMemory,
    _lib.ERR_WORKSPACE: OutOfMemory,
    _lib.ERR_NOT_AVAILABLE: NotAvailable,
}


# distil_status_string's texts, kept here so that raising an error makes no ctypes call (a
# check that fails while torch.compile traces must raise the same error, and Dynamo cannot
# trace into ctypes); test_errors.py compares them with the library's.
STATUS_NAMES = {
    _lib.OK: "ok",
    _lib.ERR_INVALID_ARG: "invalid argument",
    _lib.ERR_UNSUPPORTED: "unsupported",
    _lib.ERR_OUT_OF_MEMORY: "out of memory",
    _lib.ERR_BACKEND: "backend error",
    _lib.ERR_NOT_AVAILABLE: "not available",
    _lib.ERR_INVALID_LABEL: "invalid label",
    _lib.ERR_WORKSPACE: "workspace too small",
    _lib.ERR_VERSION: "version mismatch",
    _lib.ERR_BUSY: "context busy",
}


def status_name(status):
    return STATUS_NAMES.get(status, "unknown status")


def invalid(message):
    """distil.InvalidArgument with `message` (which names the argument)."""
    return make_error(_lib.ERR_INVALID_ARG, message)


def make_error(status, message):
    """The exception of a status, with `message` (distil's text, or ours)."""
    cls = _classes.get(status, Error)
    return cls(f"distil: {status_name(status)}: {message}", status)


def check(status, ctx_handle=None):
    """Raise the exception of a non-OK status with the context's (or the thread's) message."""
    if status != _lib.OK:
        # A refused second thread finds its message on its own thread, not on the context.
        msg = _lib.lib.distil_ctx_last_error(None if status == _lib.ERR_BUSY else ctx_handle)
        raise make_error(status, msg.decode(errors="replace") if msg else "")
