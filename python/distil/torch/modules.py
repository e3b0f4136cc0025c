"""nn.Module forms of distil's losses, with Liger-Kernel's constructors and forward signatures.

  JSD                 = liger_kernel.transformers.LigerJSD
  FusedLinearJSD      = liger_kernel.transformers.LigerFusedLinearJSD
  FusedLinearJSDLoss  = liger_kernel.chunked_loss.LigerFusedLinearJSDLoss
Switching is an import change (the Liger names are exported too). See distil.torch.functional
for where distil deliberately differs (fp32 loss and logits, fp32 weight-gradient accumulation),
and for the keyword-only options beyond Liger (docs/SPEC.md §6): divergence, alpha, normaliser
(constructor; a forward `normaliser=` overrides it per call) and temperature_squared.
KLDivLoss and TVDLoss (Liger's LigerKLDIVLoss, LigerTVDLoss) are in distil.torch.divergences.
"""

import math
import weakref
from typing import Optional

import torch
from torch import Tensor

from . import _site
from . import functional as F


def _check_temperature(temperature):
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"distil: invalid argument: temperature {temperature} must be finite "
                         "and > 0")


# docs/SPEC.md §6 head options of the fused modules: keyword-only constructor arguments (the
# defaults leave Liger's signatures and results as they are), kept as attributes of these names.
_HEAD_OPTIONS = ("student_logit_scale", "student_softcap", "teacher_logit_scale",
                 "teacher_softcap", "teacher_temperature", "return_lse", "teacher_head_precision",
                 "return_entropy")


def _set_head_options(module, *values):
    for name, value in zip(_HEAD_OPTIONS, values):
        setattr(module, name, value)


def _head_options(module) -> dict:
    return {name: getattr(module, name) for name in _HEAD_OPTIONS}


class _HeadCache:
    """The teacher's head made once (F.e4m3_head) for cache_teacher_head=True (docs/SPEC.md §6),
    made again unless the weight is the same view of the same storage at the same version: the
    storage object itself (held weakly, so a new tensor at a reused address is not mistaken for
    it), offset, shape, strides, dtype, device and version counter (which counts in-place changes
    through the tensor, load_state_dict's copy included; a change through `.data`, which torch
    does not count, is not seen: call clear()). An inference tensor has no version counter: its
    head is made on every call. Under torch.compile the cache is off (the weight is not a real
    tensor there: make the head once with e4m3_head and pass teacher_weight_e4m3=); while a CUDA
    graph is captured it hands out only a head it already has, else None (the call rounds Wt
    itself), and keeps every head it handed out then, which the graph goes on reading."""

    def __init__(self):
        self.key, self.storage, self.head = None, None, None
        self.pinned = []  # heads read by captured graphs

    def clear(self):
        self.key, self.storage, self.head = None, None, None

    def _same(self, wt: Tensor, key) -> bool:
        return (self.head is not None and key == self.key
                and self.storage is not None and self.storage() is wt.untyped_storage())

    def get(self, wt: Tensor) -> Optional[Tensor]:
        if torch.compiler.is_compiling():
            return None
        if wt.is_inference():
            return F.e4m3_head(wt)
        key = (wt.storage_offset(), tuple(wt.shape), wt.stride(), wt.dtype, wt.device,
               wt._version)
        capturing = wt.is_cuda and torch.cuda.is_current_stream_capturing()
        if self._same(wt, key):
            if capturing and not any(h is self.head for h in self.pinned):
                self.pinned.append(self.head)
            return self.head
        if capturing:
            return None
        self.clear()  # the old head is freed before the new one is made (unless pinned)
        self.head = F.e4m3_head(wt)
        self.key, self.storage = key, weakref.ref(wt.untyped_storage())
        return self.head


def _teacher_head(module, fn: str, tensors: tuple, given: Optional[Tensor]) -> Optional[Tensor]:
    """The head made once for this call: the caller's, the module's cache, or None. tensors =
    (student_input, student_weight, teacher_input, teacher_weight, student_bias, teacher_bias):
    the loss's own checks (named after fn) run before the cache rounds teacher_weight."""
    if given is not None or not module.cache_teacher_head:
        return given
    if module.teacher_head_precision in (None, "default"):
        return None
    F._check_tensors(fn, *tensors)
    return module._head_cache.get(tensors[3])


def _init_head_cache(module, cache_teacher_head: bool):
    module.cache_teacher_head = bool(cache_teacher_head)
    object.__setattr__(module, "_head_cache", _HeadCache())  # not an option: sites stay


class _SiteModule(torch.nn.Module):
    """A loss module with call sites (_site.py): the checks and plan of each kind of call it has
    seen, reused while the inputs look the same; setting any attribute drops them all (every
    option is part of each site)."""

    def __init__(self):
        super().__init__()
        object.__setattr__(self, "_sites", _site.Sites())

    def __setattr__(self, name, value):
        super().__setattr__(name, value)
        self._sites.clear()


class JSD(_SiteModule):
    """Generalised JSD over log-probabilities (student `log_q` first, teacher `log_p` second).

    JSD(beta) = beta KL(p || m) + (1 - beta) KL(q || m), m = beta p + (1 - beta) q; beta = 0
    is KL(p || q), beta = 1 is KL(q || p). batchmean over the rows whose shift_label is not
    ignore_index (all rows without labels). Inputs [BT, V] or [B, T, V]; fp32 loss.
    """

    def __init__(self, beta: float = 0.5, ignore_index: int = -100, *, divergence: str = "jsd",
                 alpha: float = 0.1, normaliser=None, process_group=None):
        super().__init__()
        self.beta = beta
        self.ignore_index = ignore_index
        self.divergence, self.alpha, self.normaliser = divergence, alpha, normaliser
        # docs/SPEC.md §8: the inputs are this rank's vocabulary columns (distil.torch.parallel)
        self.process_group = process_group

    def forward(self, log_q: Tensor, log_p: Tensor,
                shift_labels: Optional[torch.LongTensor] = None, *, normaliser=None) -> Tensor:
        key = None
        if normaliser is None:
            normaliser = self.normaliser
            if self.process_group is None:
                key = _site.jsd_key(log_q, log_p, shift_labels)
                site = self._sites.get(key)
                if site is not None:
                    return _site.jsd_loss(site, log_q, log_p, shift_labels)
        if self.process_group is not None:
            from .parallel import vocab_parallel_jsd
            return vocab_parallel_jsd(log_q, log_p, shift_labels, self.beta, self.ignore_index,
                                      self.process_group, divergence=self.divergence,
                                      alpha=self.alpha, normaliser=normaliser)
        record = []
        loss = F.jsd(log_q, log_p, shift_labels, self.beta, self.ignore_index,
                     divergence=self.divergence, alpha=self.alpha, normaliser=normaliser,
                     _record=record)
        self._sites.put(key, _site.jsd_site(key, log_q, log_p, shift_labels, record[0]))
        return loss


class FusedLinearJSD(_SiteModule):
    """The JSD of log_softmax(student_input Ws^T / T) and log_softmax(teacher_input Wt^T / T),
    computed chunk by chunk without holding the [BT, V] logits; gradients for student_input and
    student_weight. No hard loss, no biases (as Liger's LigerFusedLinearJSD). Keyword
    teacher_head_precision="fp8": the fp8 teacher head (docs/SPEC.md §6), with
    cache_teacher_head=True the teacher's head rounded once and kept (_HeadCache says when it is
    made again), or a forward teacher_weight_e4m3= (distil.torch.functional.e4m3_head).
    return_entropy=True appends the student's entropy per row (docs/SPEC.md §6)."""

    def __init__(self, jsd_beta: float = 0.5, ignore_index: int = -100,
                 temperature: float = 1.0, *, divergence: str = "jsd", alpha: float = 0.1,
                 normaliser=None, temperature_squared: bool = False,
                 student_logit_scale: float = 1.0, student_softcap: float = 0.0,
                 teacher_logit_scale: float = 1.0, teacher_softcap: float = 0.0,
                 teacher_temperature: Optional[float] = None, return_lse: bool = False,
                 teacher_head_precision: Optional[str] = None,
                 cache_teacher_head: bool = False, return_entropy: bool = False):
        super().__init__()
        _check_temperature(temperature)
        _init_head_cache(self, cache_teacher_head)
        self.jsd_beta = jsd_beta
        self.temperature = temperature
        self.ignore_index = ignore_index
        self.divergence, self.alpha, self.normaliser = divergence, alpha, normaliser
        self.temperature_squared = temperature_squared
        _set_head_options(self, student_logit_scale, student_softcap, teacher_logit_scale,
                          teacher_softcap, teacher_temperature, return_lse,
                          teacher_head_precision, return_entropy)

    def forward(self, student_input: Tensor, student_weight: Tensor, teacher_input: Tensor,
                teacher_weight: Tensor, shift_labels: Optional[torch.LongTensor] = None, *,
                normaliser=None, teacher_weight_e4m3: Optional[Tensor] = None):
        head = _teacher_head(self, "fused_linear_jsd", (student_input, student_weight,
                                                        teacher_input, teacher_weight, None,
                                                        None), teacher_weight_e4m3)
        key = None if normaliser is not None or head is not None else _site.fused_key(
            student_input, student_weight, None, teacher_input, teacher_weight, None,
            shift_labels)
        site = self._sites.get(key)
        if site is not None:
            return _site.fused_loss(site, student_input, student_weight, None, teacher_input,
                                    teacher_weight, None, shift_labels)[0]
        record = []
        out = F.fused_linear_jsd(student_input, student_weight, teacher_input, teacher_weight,
                                 shift_labels, self.jsd_beta, self.ignore_index,
                                 self.temperature, divergence=self.divergence,
                                 alpha=self.alpha,
                                 normaliser=normaliser if normaliser is not None
                                 else self.normaliser,
                                 temperature_squared=self.temperature_squared,
                                 teacher_weight_e4m3=head, **_head_options(self),
                                 _record=record)
        self._sites.put(key, _site.fused_site(key, student_input, student_weight, None,
                                              teacher_input, teacher_weight, shift_labels,
                                              record[0], False))
        return out


class FusedLinearJSDLoss(_SiteModule):
    """Hard cross-entropy on the labels plus soft JSD between the two heads, fused and chunked.

    loss = weight_hard_loss * sum CE / N + weight_soft_loss * sum JSD / N, N = rows whose label
    is not ignore_index; the soft part on logits divided by temperature (no tau^2 factor, as in
    Liger and TRL). Gradients for student_input, student_weight and student_bias. With
    return_soft_hard_loss, forward returns (loss, soft_loss, hard_loss), the parts detached.
    `compiled` and `chunk_size` are accepted for compatibility and ignored: distil plans its
    own chunks (keyword `chunk_rows` to force one). Keyword teacher_head_precision="fp8": the
    fp8 teacher head (docs/SPEC.md §6), as in distil.torch.functional.fused_linear_jsd_loss;
    with cache_teacher_head=True its head rounded once and kept (_HeadCache says when it is made
    again), or a forward teacher_weight_e4m3= (distil.torch.functional.e4m3_head).
    return_entropy=True appends the student's entropy per row, last (docs/SPEC.md §6).
    """

    def __init__(self, weight_hard_loss: float = 0.5, weight_soft_loss: float = 0.5,
                 beta: float = 0.5, ignore_index: int = -100, temperature: float = 1.0,
                 compiled: bool = True, chunk_size: int = 1024,
                 return_soft_hard_loss: bool = False, *, chunk_rows: int = 0,
                 divergence: str = "jsd", alpha: float = 0.1, normaliser=None,
                 temperature_squared: bool = False,
                 student_logit_scale: float = 1.0, student_softcap: float = 0.0,
                 teacher_logit_scale: float = 1.0, teacher_softcap: float = 0.0,
                 teacher_temperature: Optional[float] = None, return_lse: bool = False,
                 process_group=None, vocab_offset: Optional[int] = None,
                 teacher_head_precision: Optional[str] = None,
                 cache_teacher_head: bool = False, return_entropy: bool = False):
        super().__init__()
        _init_head_cache(self, cache_teacher_head)
        self.divergence, self.alpha, self.normaliser = divergence, alpha, normaliser
        self.temperature_squared = temperature_squared
        # docs/SPEC.md §8: the heads are this rank's vocabulary rows (distil.torch.parallel)
        self.parallel = None
        if process_group is not None:
            from .parallel import VocabParallel
            self.parallel = VocabParallel(process_group, vocab_offset)
        _check_temperature(temperature)
        self.weight_hard_loss = weight_hard_loss
        self.weight_soft_loss = weight_soft_loss
        self.ignore_index = ignore_index
        self.temperature = temperature
        self.compiled = compiled
        self.beta = beta
        self.chunk_size = chunk_size
        self.return_soft_hard_loss = return_soft_hard_loss
        self.chunk_rows = chunk_rows
        _set_head_options(self, student_logit_scale, student_softcap, teacher_logit_scale,
                          teacher_softcap, teacher_temperature, return_lse,
                          teacher_head_precision, return_entropy)

    def forward(self, student_input: Tensor, student_weight: Tensor, teacher_input: Tensor,
                teacher_weight: Tensor, true_labels: Optional[torch.LongTensor],
                student_bias: Optional[Tensor] = None, teacher_bias: Optional[Tensor] = None, *,
                normaliser=None, teacher_weight_e4m3: Optional[Tensor] = None):
        if self.parallel is not None:
            heads = (self.student_logit_scale, self.student_softcap, self.teacher_logit_scale,
                     self.teacher_softcap, self.teacher_temperature, self.return_lse,
                     self.teacher_head_precision in (None, "default"), self.return_entropy)
            if (self.divergence != "jsd" or self.temperature_squared or normaliser is not None
                    or self.normaliser is not None
                    or heads != (1.0, 0.0, 1.0, 0.0, None, False, True, False)):
                raise NotImplementedError("distil: FusedLinearJSDLoss(process_group=) takes the "
                                          "default divergence, normaliser, temperature and head "
                                          "options only")
            loss, hard, soft = self.parallel.fused_linear_jsd_loss(
                student_input, student_weight, teacher_input, teacher_weight, true_labels,
                student_bias, teacher_bias, self.weight_hard_loss, self.weight_soft_loss,
                self.beta, self.ignore_index, self.temperature, self.chunk_rows)
            return (loss, soft, hard) if self.return_soft_hard_loss else loss
        head = _teacher_head(self, "fused_linear_jsd_loss",
                             (student_input, student_weight, teacher_input, teacher_weight,
                              student_bias, teacher_bias), teacher_weight_e4m3)
        key = None if normaliser is not None or head is not None else _site.fused_key(
            student_input, student_weight, student_bias, teacher_input, teacher_weight,
            teacher_bias, true_labels)
        site = self._sites.get(key)
        if site is not None:
            loss, parts = _site.fused_loss(site, student_input, student_weight, student_bias,
                                           teacher_input, teacher_weight, teacher_bias,
                                           true_labels)
            return (loss, parts[2], parts[1]) if site.parts else loss
        record = []
        # F.fused_linear_jsd_loss's body on positional arguments (its keywords cost more)
        out = F._fused_loss(student_input, student_weight, teacher_input, teacher_weight,
                            true_labels, student_bias, teacher_bias, self.weight_hard_loss,
                            self.weight_soft_loss, self.beta, self.ignore_index,
                            self.temperature, self.return_soft_hard_loss, self.chunk_rows,
                            (self.divergence, self.alpha,
                             self.normaliser if normaliser is None else normaliser,
                             self.temperature_squared),
                            (self.student_logit_scale, self.student_softcap,
                             self.teacher_logit_scale, self.teacher_softcap,
                             self.teacher_temperature, self.return_lse,
                             self.teacher_head_precision, head, self.return_entropy), record)
        self._sites.put(key, _site.fused_site(key, student_input, student_weight, student_bias,
                                              teacher_input, teacher_weight, true_labels,
                                              record[0], bool(self.return_soft_hard_loss)))
        return out


# Liger's names, so that switching is an import change.
LigerJSD = JSD
LigerFusedLinearJSD = FusedLinearJSD
LigerFusedLinearJSDLoss = FusedLinearJSDLoss
