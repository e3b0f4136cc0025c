"""Reading arrays of any framework through DLPack (``__dlpack__``), with ctypes alone.

An array is consumed by asking it for a DLPack capsule, reading its DLTensor (address, device,
dtype, shape, strides) and handing the capsule back with its deleter called once we are done
(the protocol's "used_dltensor" rename keeps the capsule from calling it again).
"""

import ctypes

from . import _check, _errors

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_ROCM = 1, 2, 3, 10


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _Device),
        ("ndim", ctypes.c_int32),
        ("dtype", _DType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _Managed(ctypes.Structure):
    pass


_Managed._fields_ = [
    ("dl_tensor", _Tensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed))),
]

_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]


# DLPack type codes -> the dtype names of _check (complex and bool are named to be refused).
_CODE_NAMES = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex", 6: "bool"}
_KINDS = {KDL_CPU: "cpu", KDL_CUDA: "cuda", KDL_CUDA_HOST: "cuda_host", KDL_ROCM: "rocm"}


def _dtype_name(code, bits, lanes):
    if lanes != 1:
        return f"vector of {lanes}"
    if code == 6:
        return "bool"
    return f"{_CODE_NAMES.get(code, f'type code {code} of ')}{bits}"


def _export(name, array, stream):
    """array's DLPack capsule; a framework's refusal (a read-only or big-endian array, one that
    requires grad) as distil.InvalidArgument naming the argument."""
    if not hasattr(array, "__dlpack__"):
        raise _errors.invalid(f"{name}: {type(array).__name__} has no __dlpack__")
    try:
        dev_type = array.__dlpack_device__()[0]
        if dev_type in (KDL_CUDA, KDL_ROCM):
            return array.__dlpack__(stream=stream)
        return array.__dlpack__()
    except (BufferError, TypeError, ValueError, RuntimeError) as e:
        raise _errors.invalid(f"{name}: cannot be read through DLPack: {e}") from None


class View:
    """One array's DLTensor, held until release(): addr, device (type, id), dtype (a name, as
    _check takes it), shape, strides (elements), and its framework object."""

    _managed = None  # an export that failed leaves nothing to release

    def __init__(self, name, array, stream):
        self.name, self.array = name, array
        capsule = _export(name, array, stream)
        if not _api.PyCapsule_IsValid(capsule, b"dltensor"):
            raise _errors.invalid(f"{name}: not a DLPack capsule")
        self._managed = ctypes.cast(
            _api.PyCapsule_GetPointer(capsule, b"dltensor"), ctypes.POINTER(_Managed)
        )
        _api.PyCapsule_SetName(capsule, b"used_dltensor")
        self._capsule = capsule
        t = self._managed.contents.dl_tensor
        self.addr = (t.data or 0) + t.byte_offset
        self.device = (t.device.device_type, t.device.device_id)
        self.shape = tuple(t.shape[i] for i in range(t.ndim))
        self.strides = _strides(t, self.shape)
        self.dtype = _dtype_name(t.dtype.code, t.dtype.bits, t.dtype.lanes)

    def operand(self) -> _check.Operand:
        kind = _KINDS.get(self.device[0], f"DLPack device type {self.device[0]}")
        return _check.Operand(self.name, self.shape, self.strides, self.dtype, self.device, kind)

    def release(self):
        m, self._managed = self._managed, None
        if m and m.contents.deleter:
            m.contents.deleter(m)

    def __del__(self):
        self.release()


def _strides(t, shape):
    if t.strides:
        return tuple(t.strides[i] for i in range(t.ndim))
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return tuple(reversed(out))
