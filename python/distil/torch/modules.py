"""nn.Module forms of distil's losses, with Liger-Kernel's constructors and forward signatures.

  JSD                 = liger_kernel.transformers.LigerJSD
  FusedLinearJSD      = liger_kernel.transformers.LigerFusedLinearJSD
  FusedLinearJSDLoss  = liger_kernel.chunked_loss.LigerFusedLinearJSDLoss
Switching is an import change: the Liger names (LigerJSD, LigerFusedLinearJSD,
LigerFusedLinearJSDLoss) take Liger 0.8.5's constructors and return what Liger returns (the JSD
losses in the input dtype); distil's own names return the fp32 loss. See
distil.torch.functional for where distil deliberately differs (fp32 logits, fp32 weight-gradient
accumulation),
and for the keyword-only options beyond Liger (docs/SPEC.md §6): divergence, alpha, normaliser
(constructor; a forward `normaliser=` overrides it per call) and temperature_squared.
KLDivLoss and TVDLoss (Liger's LigerKLDIVLoss, LigerTVDLoss) are in distil.torch.divergences.
"""

import weakref

import torch
from torch import Tensor

from .. import _options
from . import functional as F


class _Option:
    """A public attribute of a loss module (Liger's names: beta, temperature, ...): setting it
    makes the module's options object again, so that a bad value is refused at once and every
    call uses options made once."""

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, module, owner=None):
        return self if module is None else module._public[self.name]

    def __set__(self, module, value):
        public = dict(module._public, **{self.name: value})
        module._make_options(public)


class _OptionsModule(torch.nn.Module):
    """A loss module whose options are one object (self.options), made from its public
    attributes by `_build(fn, **public)` whenever one of them is set."""

    _fn = ""

    def _make_options(self, public: dict):
        options = self._build(public)
        self.__dict__["_public"] = public
        self.__dict__["options"] = options

    def _build(self, public: dict):
        raise NotImplementedError


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
        return (
            self.head is not None
            and key == self.key
            and self.storage is not None
            and self.storage() is wt.untyped_storage()
        )

    def get(self, wt: Tensor) -> Tensor | None:
        if torch.compiler.is_compiling():
            return None
        if wt.is_inference():
            return F.e4m3_head(wt)
        key = (wt.storage_offset(), tuple(wt.shape), wt.stride(), wt.dtype, wt.device, wt._version)
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


def _teacher_head(module, fn: str, tensors: tuple, given: Tensor | None) -> Tensor | None:
    """The head made once for this call: the caller's, the module's cache, or None. tensors =
    (student_input, student_weight, teacher_input, teacher_weight, student_bias, teacher_bias):
    the loss's own checks (named after fn) run before the cache rounds teacher_weight."""
    if given is not None or not module.cache_teacher_head:
        return given
    if module.teacher_head_precision in (None, "default"):
        return None
    dtype = F._compute_dtype(tensors) or tensors[0].dtype
    if (
        dtype not in F._ops._DTYPES
        or tensors[3].dim() != 2
        or any(t is not None and t.dtype not in (dtype, torch.float32) for t in tensors)
    ):
        return None  # the call refuses it (and names the loss): round nothing for it
    return module._head_cache.get(F._cast(fn, "teacher_weight", tensors[3], dtype))


def _init_head_cache(module, cache_teacher_head: bool):
    module.cache_teacher_head = bool(cache_teacher_head)
    module._head_cache = _HeadCache()


def _normaliser_of(module, given):
    """The call's N: given per call, else the module's (a number is in its options already)."""
    n = module._normaliser if given is None else given
    return n if isinstance(n, Tensor) else None


class JSD(_OptionsModule):
    """Generalised JSD over log-probabilities (student `log_q` first, teacher `log_p` second).

    JSD(beta) = beta KL(p || m) + (1 - beta) KL(q || m), m = beta p + (1 - beta) q; beta = 0
    is KL(p || q), beta = 1 is KL(q || p). batchmean over the rows whose shift_label is not
    ignore_index (all rows without labels). Inputs [BT, V] or [B, T, V]; fp32 loss.
    """

    beta = _Option()
    ignore_index = _Option()
    divergence = _Option()
    alpha = _Option()
    normaliser = _Option()

    def __init__(
        self,
        beta: float = 0.5,
        ignore_index: int = -100,
        *,
        divergence: str = "jsd",
        alpha: float = 0.1,
        normaliser=None,
        process_group=None,
    ):
        super().__init__()
        self._make_options(
            dict(
                beta=beta,
                ignore_index=ignore_index,
                divergence=divergence,
                alpha=alpha,
                normaliser=normaliser,
            )
        )
        # docs/SPEC.md §8: the inputs are this rank's vocabulary columns (distil.torch.parallel)
        self.process_group = process_group

    def _build(self, public):
        n = public["normaliser"]
        self.__dict__["_normaliser"] = n
        return _options.jsd_options(
            "jsd",
            divergence=public["divergence"],
            beta=public["beta"],
            alpha=public["alpha"],
            ignore_index=public["ignore_index"],
            normaliser=None if isinstance(n, Tensor) else n,
        )

    def forward(
        self,
        log_q: Tensor,
        log_p: Tensor,
        shift_labels: torch.LongTensor | None = None,
        *,
        normaliser=None,
    ) -> Tensor:
        if self.process_group is not None:
            from .parallel import vocab_parallel_jsd

            return vocab_parallel_jsd(
                log_q,
                log_p,
                shift_labels,
                self.beta,
                self.ignore_index,
                self.process_group,
                divergence=self.divergence,
                alpha=self.alpha,
                normaliser=self.normaliser if normaliser is None else normaliser,
            )
        opts = self.options
        if normaliser is not None and not isinstance(normaliser, Tensor):
            opts = _options.jsd_options(
                "jsd",
                divergence=self.divergence,
                beta=self.beta,
                alpha=self.alpha,
                ignore_index=self.ignore_index,
                normaliser=normaliser,
            )
        return F.jsd_with(
            opts, log_q, log_p, shift_labels, F._device_normaliser(_normaliser_of(self, normaliser))
        )


class LigerJSD(JSD):
    """Liger's LigerJSD(beta=0.5, ignore_index=-100): JSD with the loss in the input's dtype."""

    def forward(
        self, log_q: Tensor, log_p: Tensor, shift_labels: torch.LongTensor | None = None
    ) -> Tensor:
        return super().forward(log_q, log_p, shift_labels).to(log_q.dtype)


# docs/SPEC.md §6 head options of the fused modules: keyword-only constructor arguments (the
# defaults leave Liger's signatures and results as they are).
_HEAD_OPTIONS = (
    "student_logit_scale",
    "student_softcap",
    "teacher_logit_scale",
    "teacher_softcap",
    "teacher_temperature",
    "teacher_head_precision",
)


class _FusedModule(_OptionsModule):
    """What both fused modules share: the options from their public attributes, the head
    options, the normaliser, the teacher head made once."""

    temperature = _Option()
    ignore_index = _Option()
    divergence = _Option()
    alpha = _Option()
    normaliser = _Option()
    temperature_squared = _Option()
    student_logit_scale = _Option()
    student_softcap = _Option()
    teacher_logit_scale = _Option()
    teacher_softcap = _Option()
    teacher_temperature = _Option()
    teacher_head_precision = _Option()
    chunk_rows = _Option()

    def _build(self, public):
        n = public["normaliser"]
        self.__dict__["_normaliser"] = n
        return _options.fused_options(
            self._fn,
            weight_hard=self._weights(public)[0],
            weight_soft=self._weights(public)[1],
            beta=public[self._beta_name],
            temperature=public["temperature"],
            ignore_index=public["ignore_index"],
            chunk_rows=public["chunk_rows"],
            divergence=public["divergence"],
            alpha=public["alpha"],
            normaliser=None if isinstance(n, Tensor) else n,
            temperature_squared=public["temperature_squared"],
            **{k: public[k] for k in _HEAD_OPTIONS},
        )

    def _inputs(self, tensors: tuple, normaliser, head) -> F.FusedInputs:
        inputs = F.FusedInputs(*tensors)
        inputs.normaliser = _normaliser_of(self, normaliser)
        inputs.head = _teacher_head(
            self, self._fn, (inputs.xs, inputs.ws, inputs.xt, inputs.wt, inputs.bs, inputs.bt), head
        )
        return inputs

    def _options_for(self, normaliser):
        """The module's options, or a copy with a per-call host normaliser."""
        if normaliser is None or isinstance(normaliser, Tensor):
            return self.options
        return self._build(dict(self._public, normaliser=normaliser))


class FusedLinearJSD(_FusedModule):
    """The JSD of log_softmax(student_input Ws^T / T) and log_softmax(teacher_input Wt^T / T),
    computed chunk by chunk without holding the [BT, V] logits; gradients for student_input and
    student_weight. No hard loss, no biases (as Liger's LigerFusedLinearJSD). Keyword
    teacher_head_precision="fp8": the fp8 teacher head (docs/SPEC.md §6), with
    cache_teacher_head=True the teacher's head rounded once and kept (_HeadCache says when it is
    made again), or a forward teacher_weight_e4m3= (distil.torch.functional.e4m3_head)."""

    _fn = "fused_linear_jsd"
    _beta_name = "jsd_beta"
    jsd_beta = _Option()

    def __init__(
        self,
        jsd_beta: float = 0.5,
        ignore_index: int = -100,
        temperature: float = 1.0,
        *,
        divergence: str = "jsd",
        alpha: float = 0.1,
        normaliser=None,
        temperature_squared: bool = False,
        student_logit_scale: float = 1.0,
        student_softcap: float = 0.0,
        teacher_logit_scale: float = 1.0,
        teacher_softcap: float = 0.0,
        teacher_temperature: float | None = None,
        return_lse: bool = False,
        teacher_head_precision: str | None = None,
        cache_teacher_head: bool = False,
        return_entropy: bool = False,
    ):
        super().__init__()
        self._make_options(
            dict(
                jsd_beta=jsd_beta,
                ignore_index=ignore_index,
                temperature=temperature,
                divergence=divergence,
                alpha=alpha,
                normaliser=normaliser,
                temperature_squared=temperature_squared,
                chunk_rows=0,
                student_logit_scale=student_logit_scale,
                student_softcap=student_softcap,
                teacher_logit_scale=teacher_logit_scale,
                teacher_softcap=teacher_softcap,
                teacher_temperature=teacher_temperature,
                teacher_head_precision=teacher_head_precision,
            )
        )
        self.return_lse = return_lse
        self.return_entropy = return_entropy
        _init_head_cache(self, cache_teacher_head)

    @staticmethod
    def _weights(public):
        return 0.0, 1.0

    def forward(
        self,
        student_input: Tensor,
        student_weight: Tensor,
        teacher_input: Tensor,
        teacher_weight: Tensor,
        shift_labels: torch.LongTensor | None = None,
        *,
        normaliser=None,
        teacher_weight_e4m3: Tensor | None = None,
    ):
        inputs = self._inputs(
            (
                student_input,
                student_weight,
                teacher_input,
                teacher_weight,
                shift_labels,
                None,
                None,
            ),
            normaliser,
            teacher_weight_e4m3,
        )
        return F.fused_result(
            self._fn,
            self._options_for(normaliser),
            inputs,
            F.Returns(lse=bool(self.return_lse), entropy=bool(self.return_entropy)),
        )


class LigerFusedLinearJSD(FusedLinearJSD):
    """Liger's LigerFusedLinearJSD(jsd_beta=0.5, ignore_index=-100, temperature=1.0,
    accum_dtype=None): the loss in the student's dtype (the autocast dtype under autocast).
    accum_dtype is accepted and kept: distil accumulates the weight gradient in fp32 always."""

    def __init__(
        self,
        jsd_beta: float = 0.5,
        ignore_index: int = -100,
        temperature: float = 1.0,
        accum_dtype: torch.dtype | None = None,
        **kw,
    ):
        super().__init__(jsd_beta, ignore_index, temperature, **kw)
        self.accum_dtype = accum_dtype

    def forward(
        self,
        student_input: Tensor,
        student_weight: Tensor,
        teacher_input: Tensor,
        teacher_weight: Tensor,
        shift_labels: torch.LongTensor | None = None,
    ):
        loss = super().forward(
            student_input, student_weight, teacher_input, teacher_weight, shift_labels
        )
        return loss.to(F._loss_dtype(student_input))


class FusedLinearJSDLoss(_FusedModule):
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
    """

    _fn = "fused_linear_jsd_loss"
    _beta_name = "beta"
    beta = _Option()
    weight_hard_loss = _Option()
    weight_soft_loss = _Option()

    def __init__(
        self,
        weight_hard_loss: float = 0.5,
        weight_soft_loss: float = 0.5,
        beta: float = 0.5,
        ignore_index: int = -100,
        temperature: float = 1.0,
        compiled: bool = True,
        chunk_size: int = 1024,
        return_soft_hard_loss: bool = False,
        *,
        chunk_rows: int = 0,
        divergence: str = "jsd",
        alpha: float = 0.1,
        normaliser=None,
        temperature_squared: bool = False,
        student_logit_scale: float = 1.0,
        student_softcap: float = 0.0,
        teacher_logit_scale: float = 1.0,
        teacher_softcap: float = 0.0,
        teacher_temperature: float | None = None,
        return_lse: bool = False,
        process_group=None,
        vocab_offset: int | None = None,
        teacher_head_precision: str | None = None,
        cache_teacher_head: bool = False,
        return_entropy: bool = False,
    ):
        super().__init__()
        self._make_options(
            dict(
                weight_hard_loss=weight_hard_loss,
                weight_soft_loss=weight_soft_loss,
                beta=beta,
                ignore_index=ignore_index,
                temperature=temperature,
                divergence=divergence,
                alpha=alpha,
                normaliser=normaliser,
                temperature_squared=temperature_squared,
                chunk_rows=chunk_rows,
                student_logit_scale=student_logit_scale,
                student_softcap=student_softcap,
                teacher_logit_scale=teacher_logit_scale,
                teacher_softcap=teacher_softcap,
                teacher_temperature=teacher_temperature,
                teacher_head_precision=teacher_head_precision,
            )
        )
        self.compiled, self.chunk_size = compiled, chunk_size  # Liger's; distil plans chunks
        self.return_soft_hard_loss = return_soft_hard_loss
        self.return_lse = return_lse
        self.return_entropy = return_entropy
        _init_head_cache(self, cache_teacher_head)
        # docs/SPEC.md §8: the heads are this rank's vocabulary rows (distil.torch.parallel)
        self.parallel = None
        if process_group is not None:
            from .parallel import VocabParallel

            self.parallel = VocabParallel(process_group, vocab_offset)

    @staticmethod
    def _weights(public):
        return public["weight_hard_loss"], public["weight_soft_loss"]

    def forward(
        self,
        student_input: Tensor,
        student_weight: Tensor,
        teacher_input: Tensor,
        teacher_weight: Tensor,
        true_labels: torch.LongTensor | None,
        student_bias: Tensor | None = None,
        teacher_bias: Tensor | None = None,
        *,
        normaliser=None,
        teacher_weight_e4m3: Tensor | None = None,
    ):
        tensors = (
            student_input,
            student_weight,
            teacher_input,
            teacher_weight,
            true_labels,
            student_bias,
            teacher_bias,
        )
        if self.parallel is not None:
            return self._parallel(tensors, normaliser)
        inputs = self._inputs(tensors, normaliser, teacher_weight_e4m3)
        return F.fused_result(
            self._fn,
            self._options_for(normaliser),
            inputs,
            F.Returns(
                bool(self.return_soft_hard_loss), bool(self.return_lse), bool(self.return_entropy)
            ),
        )

    def _parallel(self, tensors, normaliser):
        defaults = _options.fused_options(
            self._fn,
            weight_hard=self.weight_hard_loss,
            weight_soft=self.weight_soft_loss,
            beta=self.beta,
            temperature=self.temperature,
            ignore_index=self.ignore_index,
            chunk_rows=self.chunk_rows,
        )
        if (
            self.options != defaults
            or normaliser is not None
            or self.return_lse
            or self.return_entropy
            or isinstance(self._normaliser, Tensor)
        ):
            raise NotImplementedError(
                "distil: FusedLinearJSDLoss(process_group=) takes the "
                "default divergence, normaliser, temperature and head "
                "options only"
            )
        loss, hard, soft = self.parallel.fused_linear_jsd_loss(tensors, self.options)
        return (loss, soft, hard) if self.return_soft_hard_loss else loss


class LigerFusedLinearJSDLoss(FusedLinearJSDLoss):
    """Liger's chunked LigerFusedLinearJSDLoss (its constructor and forward); the loss fp32,
    as Liger's chunked loss returns it."""
