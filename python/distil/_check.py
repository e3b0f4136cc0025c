"""The checks every array passes before its address reaches the library, for every framework.

The library checks values and the sizes it is told (docs/SPEC.md §5), but it cannot see a host
buffer's size: a bias shorter than the head, a teacher with fewer rows than the student or a row
stride of 0 would be read or written past its end. So each operand of a call is described here
as an `Operand` (name, shape, strides in elements, dtype name, device, device kind) - by
distil.torch's call body from tensors, by the DLPack layer from DLTensors - and checked against
the call's other operands by one function per loss. Each failure is distil.InvalidArgument
naming the argument. These functions make no library call, so a traced caller may run them.
"""

from typing import NamedTuple

from . import _errors, _lib

FLOATS = {"float32": _lib.F32, "bfloat16": _lib.BF16, "float16": _lib.F16}
INTEGERS = ("int64",)


class Operand(NamedTuple):
    name: str
    shape: tuple
    strides: tuple  # elements, one per dimension
    dtype: str  # "float32", "bfloat16", "int64", "complex64", ...
    device: object  # compared with ==, shown in messages
    kind: str  # "cpu", "cuda", "meta", ...


class JsdShape(NamedTuple):
    """What distil_jsd_desc takes of the operands."""

    rows: int
    vocab: int
    student_stride: int
    teacher_stride: int
    dtype: int


class FusedShape(NamedTuple):
    """What distil_fused_linear_jsd_desc takes of the operands (head_bytes: the teacher head
    made once, 0 for none; grad_weight_fp32: the student head's gradients are fp32 beside
    16-bit operands)."""

    rows: int
    vocab: int
    student_hidden: int
    teacher_hidden: int
    dtype: int
    teacher_vocab: int
    head_bytes: int = 0
    grad_weight_fp32: bool = False


def _fail(message):
    raise _errors.invalid(message)


def float_dtype(fn, op: Operand, dtype: str | None = None):
    """op's dtype is one distil computes in (and `dtype` when given); complex and integer
    arrays are refused by name, never converted."""
    if op.dtype not in FLOATS:
        _fail(f"{fn}: {op.name}: dtype {op.dtype} is not float32, bfloat16 or float16")
    if dtype is not None and op.dtype != dtype:
        _fail(
            f"{fn}: {op.name} is {op.dtype} but the inputs are {dtype} (one dtype for every "
            "float input)"
        )


def same_device(fn, first: Operand, ops):
    """Every present op on first's device, which is a device distil runs on."""
    if first.kind not in ("cpu", "cuda", "hip", "rocm"):
        _fail(f"{fn}: {first.name} is on {first.kind}: distil runs on cpu or cuda arrays")
    for op in ops:
        if op is not None and op.device != first.device:
            _fail(f"{fn}: {op.name} is on {op.device} but {first.name} on {first.device}")


def matrix(fn, op: Operand) -> int:
    """The row stride distil takes for a 2-D op with dense rows: columns of stride 1 (or one
    column), rows apart by at least a row (a single row is dense whatever its stride, as a
    (1, V) view of a transposed array); strides of 0 (expanded or broadcast arrays), negative
    or overlapping strides are refused."""
    if len(op.shape) != 2:
        _fail(f"{fn}: {op.name} must be 2-D, has shape {tuple(op.shape)}")
    rows, cols = op.shape
    srow, scol = op.strides
    if cols > 1 and scol != 1:
        _fail(
            f"{fn}: {op.name}: its last dimension must be contiguous (stride {scol}); "
            "make it contiguous"
        )
    if rows <= 1:
        return cols
    if srow < cols:
        why = (
            "0 (an expanded or broadcast array)"
            if srow == 0
            else (f"{srow} < {cols} (overlapping rows)" if srow > 0 else f"{srow} (negative)")
        )
        _fail(f"{fn}: {op.name}: row stride {why}; make it contiguous")
    return srow


def dense(fn, op: Operand):
    """op is C-contiguous (dimensions of size 1 have any stride)."""
    want = 1
    for n, s in zip(reversed(op.shape), reversed(op.strides), strict=False):
        if n != 1 and s != want:
            _fail(
                f"{fn}: {op.name} must be dense (C-contiguous), has strides {tuple(op.strides)}"
                f" for shape {tuple(op.shape)}"
            )
        want *= n


def vector(fn, op: Operand | None, n: int, what: str):
    """A 1-D dense op of n values (`what` says what n counts), or None."""
    if op is None:
        return
    if tuple(op.shape) != (n,):
        _fail(f"{fn}: {op.name} has shape {tuple(op.shape)}, {what} {n} ({n},) is needed")
    if n > 1 and op.strides[0] != 1:
        _fail(f"{fn}: {op.name} must be dense, has stride {op.strides[0]}")


def labels(fn, op: Operand | None, rows: int):
    """labels: int64 [rows] (dense) or None."""
    if op is None:
        return
    if op.dtype not in INTEGERS:
        _fail(f"{fn}: {op.name} must be int64, got {op.dtype}")
    vector(fn, op, rows, "one label a row:")


def _vocab(fn, op: Operand) -> int:
    """The last dimension, refused when 0 (before any reshape can trip over it)."""
    if len(op.shape) < 1:
        _fail(f"{fn}: {op.name} must have at least 1 dimension, got a scalar")
    if op.shape[-1] < 1:
        _fail(f"{fn}: {op.name}: vocab {op.shape[-1]} < 1")
    return op.shape[-1]


def jsd(fn, x: Operand, y: Operand, lab: Operand | None) -> JsdShape:
    """The checked shape of a distil_jsd call on student log-probs x [T, V], teacher y [T, V]."""
    float_dtype(fn, x)
    float_dtype(fn, y, x.dtype)
    same_device(fn, x, (y, lab))
    _vocab(fn, x)
    if tuple(y.shape) != tuple(x.shape):
        _fail(f"{fn}: {x.name} {tuple(x.shape)} and {y.name} {tuple(y.shape)} differ")
    sx, sy = matrix(fn, x), matrix(fn, y)
    labels(fn, lab, x.shape[0])
    return JsdShape(x.shape[0], x.shape[1], sx, sy, FLOATS[x.dtype])


def fused(
    fn,
    xs: Operand,
    ws: Operand,
    bs: Operand | None,
    xt: Operand,
    wt: Operand,
    bt: Operand | None,
    lab: Operand | None,
) -> FusedShape:
    """The checked shape of a fused call: xs [T, Hs], Ws [V, Hs], bs [V], xt [T, Ht],
    Wt [Vt, Ht], bt [Vt], labels [T]; every float operand dense and of one dtype (the heads'
    rounding to the activations' dtype is the caller's)."""
    for op in (xs, ws, bs, xt, wt, bt):
        if op is not None:
            float_dtype(fn, op, xs.dtype)
    same_device(fn, xs, (ws, bs, xt, wt, bt, lab))
    for op in (xs, ws, xt, wt):
        if len(op.shape) != 2:
            _fail(f"{fn}: {op.name} must be 2-D, has shape {tuple(op.shape)}")
        dense(fn, op)
    rows, hs = xs.shape
    vocab, t_vocab, ht = ws.shape[0], wt.shape[0], xt.shape[1]
    if vocab < 1 or t_vocab < 1:
        _fail(f"{fn}: {ws.name if vocab < 1 else wt.name}: vocab 0 < 1 (a head of no rows)")
    if xt.shape[0] != rows:
        _fail(f"{fn}: {xs.name} has {rows} rows, {xt.name} {xt.shape[0]}")
    if ws.shape[1] != hs:
        _fail(f"{fn}: {ws.name} {tuple(ws.shape)} does not match {xs.name}'s hidden size {hs}")
    if wt.shape[1] != ht:
        _fail(f"{fn}: {wt.name} {tuple(wt.shape)} does not match {xt.name}'s hidden size {ht}")
    vector(fn, bs, vocab, "its head's vocab")
    vector(fn, bt, t_vocab, "its head's vocab")
    labels(fn, lab, rows)
    return FusedShape(rows, vocab, hs, ht, FLOATS[xs.dtype], t_vocab)


def e4m3_head(fn, head: Operand, first: Operand) -> int:
    """A teacher head made once: 1-D uint8, dense, on first's device; its bytes (the library
    checks its size and header against the head's shape)."""
    if (
        head.dtype != "uint8"
        or len(head.shape) != 1
        or (head.shape[0] > 1 and head.strides[0] != 1)
    ):
        _fail(
            f"{fn}: {head.name} must be the 1-D uint8 tensor of e4m3_head, not {head.dtype} "
            f"{tuple(head.shape)}"
        )
    if head.device != first.device:
        _fail(f"{fn}: {head.name} is on {head.device} but {first.name} on {first.device}")
    return head.shape[0]
