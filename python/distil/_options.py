"""The losses' options as frozen, hashable objects mirroring the C descriptors (docs/SPEC.md §6).

A module or a functional call builds its options once (`jsd_options`, `fused_options` check
every value and name the bad one); the object is the plan cache's key (with the tensors' shapes,
_calls.py), is passed whole to the layer that fills the descriptor, and its fields travel by name
into the custom ops (`op_kwargs`). What a call wants back (gradients, the loss parts, the LSEs)
is a second object, `FusedOutputs`: a new per-row output is one more field there, one more
output of the op and one more address in _calls.FusedAddrs.
"""

import dataclasses
import functools
import math

from . import _errors, _lib

# teacher_head_precision names (docs/SPEC.md §6) -> distil_head_precision
HEAD_PRECISIONS = {"default": 0, "fp8": 1, "fp8_e4m3": 1}


def _fail(message):
    raise _errors.invalid(message)


def divergence_code(fn, name):
    """The distil_divergence of a name of _lib.DIVERGENCES."""
    code = _lib.DIVERGENCES.get(name) if isinstance(name, str) else None
    if code is None:
        _fail(f"{fn}: divergence {name!r} is not one of {', '.join(_lib.DIVERGENCES)}")
    return code


def head_precision_code(fn, name):
    """The distil_head_precision of a name of HEAD_PRECISIONS (None: default)."""
    key = "default" if name is None else name
    code = HEAD_PRECISIONS.get(key) if isinstance(key, str) else None
    if code is None:
        _fail(f"{fn}: teacher_head_precision {name!r} is not one of {', '.join(HEAD_PRECISIONS)}")
    return code


def _number(fn, name, value):
    try:
        return float(value)
    except (TypeError, ValueError):
        _fail(f"{fn}: {name} {value!r} is not a number")


def _integer(fn, name, value):
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            if int(value) != value:
                raise ValueError
            value = int(value)
        except (TypeError, ValueError, OverflowError):
            _fail(f"{fn}: {name} {value!r} is not an integer")
    if not -(1 << 63) <= value < (1 << 63):
        _fail(f"{fn}: {name} {value} does not fit in int64")
    return int(value)


def check_temperature(fn, value, name="temperature"):
    t = _number(fn, name, value)
    if not (math.isfinite(t) and t > 0):
        _fail(f"{fn}: {name} {t} must be finite and > 0")
    return t


def host_normaliser(fn, value):
    """N given on the host (> 0); 0.0 means 'counted' to the library, so it is refused here."""
    n = _number(fn, "normaliser", value)
    if not n > 0:
        _fail(f"{fn}: normaliser {n} must be > 0")
    return n


def _hash_once(self) -> int:
    """An options object's hash, computed once: it keys the plan caches (and the fused calls
    kept by signature) on every call, where a dataclass's own __hash__ hashes every field again
    (a fifth of a microsecond for FusedOptions)."""
    h = self.__dict__.get("_hash")
    if h is None:
        h = hash(dataclasses.astuple(self))
        object.__setattr__(self, "_hash", h)
    return h


def _fields_state(self) -> dict:
    """What pickles and copies of an options object carry: its fields, not the cached hash
    (a str field hashes differently in another process)."""
    return {k: v for k, v in self.__dict__.items() if k != "_hash"}


@dataclasses.dataclass(frozen=True)
class JsdOptions:
    """distil_jsd_desc's options; normaliser 0.0: counted (or given per call on the device)."""

    divergence: int = 0
    beta: float = 0.5
    alpha: float = 0.1
    ignore_index: int = -100
    reduction: str = "batchmean"
    normaliser: float = 0.0

    __hash__ = _hash_once
    __getstate__ = _fields_state

    def op_kwargs(self) -> dict:
        return dataclasses.asdict(self)


def jsd_options(
    fn,
    *,
    divergence="jsd",
    beta=0.5,
    alpha=0.1,
    ignore_index=-100,
    reduction="batchmean",
    normaliser=None,
) -> JsdOptions:
    """JsdOptions from the public arguments, each checked; normaliser None, a number > 0 (a
    tensor given per call is not an option: it travels with the tensors)."""
    if reduction not in _lib.REDUCTIONS:
        _fail(f"{fn}: reduction {reduction!r} is not one of {', '.join(_lib.REDUCTIONS)}")
    return JsdOptions(
        divergence_code(fn, divergence),
        _number(fn, "beta", beta),
        _number(fn, "alpha", alpha),
        _integer(fn, "ignore_index", ignore_index),
        reduction,
        0.0 if normaliser is None else host_normaliser(fn, normaliser),
    )


@dataclasses.dataclass(frozen=True)
class FusedOptions:
    """distil_fused_linear_jsd_desc's options (docs/SPEC.md §2, §6): the loss, the divergence,
    the head options and the teacher head's precision (a distil_head_precision code)."""

    weight_hard: float = 0.5
    weight_soft: float = 0.5
    beta: float = 0.5
    temperature: float = 1.0
    ignore_index: int = -100
    chunk_rows: int = 0
    divergence: int = 0
    alpha: float = 0.1
    normaliser: float = 0.0
    temperature_squared: bool = False
    student_logit_scale: float = 1.0
    student_softcap: float = 0.0
    teacher_logit_scale: float = 1.0
    teacher_softcap: float = 0.0
    teacher_temperature: float = 0.0
    teacher_head_precision: int = 0

    __hash__ = _hash_once
    __getstate__ = _fields_state

    def op_kwargs(self) -> dict:
        return dataclasses.asdict(self)


def fused_options(
    fn,
    *,
    weight_hard=0.5,
    weight_soft=0.5,
    beta=0.5,
    temperature=1.0,
    ignore_index=-100,
    chunk_rows=0,
    divergence="jsd",
    alpha=0.1,
    normaliser=None,
    temperature_squared=False,
    student_logit_scale=1.0,
    student_softcap=0.0,
    teacher_logit_scale=1.0,
    teacher_softcap=0.0,
    teacher_temperature=None,
    teacher_head_precision=None,
) -> FusedOptions:
    """FusedOptions from the public arguments; the library checks the head options' ranges
    (and names the bad one), this checks what it cannot see or would truncate."""
    n = _number
    return FusedOptions(
        n(fn, "weight_hard_loss", weight_hard),
        n(fn, "weight_soft_loss", weight_soft),
        n(fn, "beta", beta),
        check_temperature(fn, temperature),
        _integer(fn, "ignore_index", ignore_index),
        _integer(fn, "chunk_rows", chunk_rows),
        divergence_code(fn, divergence),
        n(fn, "alpha", alpha),
        0.0 if normaliser is None else host_normaliser(fn, normaliser),
        bool(temperature_squared),
        n(fn, "student_logit_scale", student_logit_scale),
        n(fn, "student_softcap", student_softcap),
        n(fn, "teacher_logit_scale", teacher_logit_scale),
        n(fn, "teacher_softcap", teacher_softcap),
        0.0 if teacher_temperature is None else n(fn, "teacher_temperature", teacher_temperature),
        head_precision_code(fn, teacher_head_precision),
    )


@dataclasses.dataclass(frozen=True)
class FusedOutputs:
    """What a fused call writes besides the loss: the student's gradients, the loss parts
    (loss, hard, soft) [3] instead of the loss alone [], each row's LSEs [T] fp32 and the
    student's entropy [T] fp32 (docs/SPEC.md §6)."""

    grad_hidden: bool = False
    grad_weight: bool = False
    grad_bias: bool = False
    parts: bool = True
    lse: bool = False
    entropy: bool = False

    @property
    def grads(self) -> bool:
        return self.grad_hidden or self.grad_weight or self.grad_bias

    def op_kwargs(self) -> dict:
        return {"want_" + k: v for k, v in dataclasses.asdict(self).items()}


@functools.cache
def fused_outputs(
    grad_hidden: bool, grad_weight: bool, grad_bias: bool, parts: bool, lse: bool, entropy: bool
) -> FusedOutputs:
    """FusedOutputs made once per combination (64 at most): a frozen dataclass takes about a
    microsecond to build, a lookup a third of it (bench/python/host_overhead.py)."""
    return FusedOutputs(grad_hidden, grad_weight, grad_bias, parts, lse, entropy)


def outputs_of(kwargs: dict) -> FusedOutputs:
    """FusedOutputs of an op's keywords (op_kwargs's inverse)."""
    return FusedOutputs(
        **{f.name: kwargs["want_" + f.name] for f in dataclasses.fields(FusedOutputs)}
    )


def fields_of(cls, kwargs: dict):
    """An options object of cls from the op's keywords that name its fields."""
    return cls(**{f.name: kwargs[f.name] for f in dataclasses.fields(cls)})
