"""Reading arrays of any framework through DLPack (``__dlpack__``), with ctypes alone.

An array is consumed by asking it for a DLPack capsule, reading its DLTensor (address, device,
dtype, shape, strides) and handing the capsule back with its deleter called once we are done
(the protocol's "used_dltensor" rename keeps the capsule from calling it again).
"""

import ctypes

from . import _errors, _lib

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_ROCM = 1, 2, 3, 10
_KDL_INT, _KDL_FLOAT, _KDL_BFLOAT = 0, 2, 4
_FLOAT_CODES = {(_KDL_FLOAT, 32): _lib.F32, (_KDL_BFLOAT, 16): _lib.BF16,
                (_KDL_FLOAT, 16): _lib.F16}


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Tensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _Device), ("ndim", ctypes.c_int32),
                ("dtype", _DType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _Managed(ctypes.Structure):
    pass


_Managed._fields_ = [("dl_tensor", _Tensor), ("manager_ctx", ctypes.c_void_p),
                     ("deleter", ctypes.CFUNCTYPE(None, ctypes.POINTER(_Managed)))]

_api = ctypes.pythonapi
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]


class View:
    """One array's DLTensor, held until release(): addr, device (type, id), dtype code or
    'int64', shape, strides (elements), and its framework object."""

    def __init__(self, name, array, stream):
        if not hasattr(array, "__dlpack__"):
            raise _errors.make_error(_lib.ERR_INVALID_ARG,
                                     f"{name}: {type(array).__name__} has no __dlpack__")
        self.name, self.array = name, array
        dev_type = array.__dlpack_device__()[0]
        capsule = array.__dlpack__(stream=stream) if dev_type in (KDL_CUDA, KDL_ROCM) \
            else array.__dlpack__()
        if not _api.PyCapsule_IsValid(capsule, b"dltensor"):
            raise _errors.make_error(_lib.ERR_INVALID_ARG, f"{name}: not a DLPack capsule")
        self._managed = ctypes.cast(_api.PyCapsule_GetPointer(capsule, b"dltensor"),
                                    ctypes.POINTER(_Managed))
        _api.PyCapsule_SetName(capsule, b"used_dltensor")
        self._capsule = capsule
        t = self._managed.contents.dl_tensor
        self.addr = (t.data or 0) + t.byte_offset
        self.device = (t.device.device_type, t.device.device_id)
        self.shape = tuple(t.shape[i] for i in range(t.ndim))
        self.strides = _strides(t, self.shape)
        key = (t.dtype.code, t.dtype.bits)
        if t.dtype.lanes != 1:
            self.dtype = None
        elif key == (_KDL_INT, 64):
            self.dtype = "int64"
        else:
            self.dtype = _FLOAT_CODES.get(key)

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
