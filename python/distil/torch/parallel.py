"""Vocabulary-parallel (tensor-parallel) losses over torch.distributed (docs/SPEC.md §8).

Each rank of `process_group` holds a contiguous shard [v0, v0 + V_local) of the vocabulary: the
columns of the log-prob rows (JSD) or the rows of both heads (fused loss); every rank gets the
same loss, gradients local to the shard, the student hidden states' gradient summed over the
ranks. v0 is given (`vocab_offset`) or derived once from the group rank and the shard sizes,
all-gathered on the first call.

How the collectives run, and why:
  - JSD: its element terms need nothing outside the shard, so distil's plain jsd on the shard
    gives the rank's share of the loss and its exact local gradient; one torch.distributed
    all_reduce (sum) of that share, on the current stream, gives the loss. This is the
    split-phase form (docs/SPEC.md §8), and it works for every backend distil.torch runs on
    (gloo on CPU, NCCL on CUDA).
  - Fused loss: libdistil's distil_fused_linear_jsd_tp with a callback communicator whose
    all-reduce is torch.distributed.all_reduce on the group, over the buffer libdistil hands it,
    wrapped without a copy: a host buffer (CPU tensors, gloo) through torch.frombuffer, a device
    buffer (CUDA tensors, NCCL) through __cuda_array_interface__. The row statistics'
    all-reduces happen inside the call, per chunk, ordered on the current stream as any torch
    collective is (ProcessGroupNCCL makes its stream wait for the current one and the current
    one for it). Torch 2.15 also exposes the group's ncclComm_t (ProcessGroupNCCL.comm_ptr(),
    _comm_ptr() before), which distil_comm_create_nccl could borrow directly; the callback is
    used instead because it keeps torch's own stream ordering and watchdog for every collective
    on the group and needs no private or version-dependent API.
"""

import ctypes
from ctypes import POINTER, c_int, c_int64, c_size_t, c_void_p

import torch
import torch.distributed as dist
from torch import Tensor

from .. import _calls, _errors, _lib
from . import _ops
from . import functional as F


class VocabShard(ctypes.Structure):
    """distil_vocab_shard, field for field."""

    _fields_ = [
        ("struct_size", c_size_t),
        ("vocab_offset", c_int64),
        ("vocab_total", c_int64),
        ("comm", c_void_p),
    ]


_ALLREDUCE = ctypes.CFUNCTYPE(c_int, c_void_p, c_void_p, c_int64, c_int, c_int, c_void_p)
_lib_fns = {
    "distil_vocab_shard_init": (None, [POINTER(VocabShard)]),
    "distil_comm_create_callback": (c_int, [POINTER(c_void_p), c_int, c_int, _ALLREDUCE, c_void_p]),
    "distil_comm_destroy": (None, [c_void_p]),
    "distil_fused_linear_jsd_tp": (
        c_int,
        [c_void_p, POINTER(_lib.FusedDesc), POINTER(VocabShard)] + [c_void_p] * 11,
    ),
    "distil_fused_linear_jsd_tp_workspace_size": (
        c_int,
        [c_void_p, POINTER(_lib.FusedDesc), c_int, POINTER(c_size_t)],
    ),
}
for _name, (_res, _args) in _lib_fns.items():
    _fn = getattr(_lib.lib, _name)
    _fn.restype, _fn.argtypes = _res, _args

_CTYPES = {0: (ctypes.c_float, torch.float32), 1: (ctypes.c_double, torch.float64)}


def shard_offset(process_group, local_vocab: int, vocab_offset: int | None = None, device="cpu"):
    """(v0, V): the rank's first vocabulary entry and the whole vocabulary of the group (one
    all_gather of the shard sizes, on `device`: the group's backend must take it)."""
    world = dist.get_world_size(process_group)
    sizes = [torch.zeros(1, dtype=torch.int64, device=device) for _ in range(world)]
    dist.all_gather(
        sizes, torch.tensor([local_vocab], dtype=torch.int64, device=device), group=process_group
    )
    sizes = [int(s) for s in sizes]
    rank = dist.get_rank(process_group)
    derived = sum(sizes[:rank])
    return (derived if vocab_offset is None else int(vocab_offset)), sum(sizes)


class _DeviceBuffer:
    """count elements at a device address, as torch.as_tensor takes them (no copy)."""

    def __init__(self, addr, count, typestr):
        self.__cuda_array_interface__ = {
            "shape": (count,),
            "typestr": typestr,
            "data": (addr, False),
            "version": 3,
            "stream": None,
        }


class _Comm:
    """A distil_comm whose all-reduce is torch.distributed.all_reduce on a group, over host
    (CPU) or device (CUDA) buffers."""

    def __init__(self, process_group, device):
        self.group = process_group
        self.device = torch.device(device)
        self.error = None
        self._fn = _ALLREDUCE(self._allreduce)  # kept alive as long as the comm
        self.handle = c_void_p()
        status = _lib.lib.distil_comm_create_callback(
            ctypes.byref(self.handle),
            dist.get_rank(process_group),
            dist.get_world_size(process_group),
            self._fn,
            None,
        )
        if status != _lib.OK:
            raise _errors.make_error(status, _lib.lib.distil_ctx_last_error(None).decode())

    def _allreduce(self, user, buf, count, dtype, op, stream):
        try:
            ctype, tdtype = _CTYPES[dtype]
            if self.device.type == "cuda":
                t = torch.as_tensor(
                    _DeviceBuffer(buf, count, "<f8" if dtype == 1 else "<f4"), device=self.device
                )
            else:
                t = torch.frombuffer((ctype * count).from_address(buf), dtype=tdtype)
            dist.all_reduce(
                t, op=dist.ReduceOp.MAX if op == 1 else dist.ReduceOp.SUM, group=self.group
            )
            return 0
        except BaseException as e:  # noqa: BLE001 - reported after the call returns
            self.error = e
            return 1

    def __del__(self):
        if getattr(self, "handle", None):
            _lib.lib.distil_comm_destroy(self.handle)


def vocab_parallel_jsd(
    log_q: Tensor,
    log_p: Tensor,
    shift_labels: Tensor | None = None,
    beta: float = 0.5,
    ignore_index: int = -100,
    process_group=None,
    reduction: str = "batchmean",
    **options,
) -> Tensor:
    """distil.torch.jsd on the rank's columns (options: its divergence, alpha, normaliser),
    summed over process_group (forward value); the gradient is the rank's own columns'."""
    local = F.jsd(log_q, log_p, shift_labels, beta, ignore_index, reduction=reduction, **options)
    total = local.detach().clone()
    dist.all_reduce(total, group=process_group)
    return local + (total - local.detach())


class _FusedTP(torch.autograd.Function):
    """The vocabulary-parallel fused loss: apply(xs, Ws, bs, call), call = (FusedTensors,
    FusedOptions, the rank's shard, its communicator); returns the parts [3]."""

    @staticmethod
    def forward(ctx, xs, ws, bs, call):
        t, opts, shard, comm = call
        t = t._replace(
            xs=xs.contiguous(),
            ws=ws.contiguous(),
            bs=bs,
            xt=t.xt.contiguous(),
            wt=t.wt.contiguous(),
        )
        shape = _ops.fused_shape("fused_linear_jsd_loss", t)  # before any address reaches C
        xs, ws = t.xs, t.ws
        dctx = _ops.context_for(xs)
        d = _lib.FusedDesc()
        _lib.lib.distil_fused_linear_jsd_desc_init(ctypes.byref(d))
        d.rows, d.vocab = shape.rows, shape.vocab
        d.student_hidden, d.teacher_hidden = shape.student_hidden, shape.teacher_hidden
        d.dtype = shape.dtype
        d.weight_hard, d.weight_soft = opts.weight_hard, opts.weight_soft
        d.beta, d.temperature, d.ignore_index = opts.beta, opts.temperature, opts.ignore_index
        d.chunk_rows, d.return_parts = opts.chunk_rows, 1
        d.teacher_vocab = shape.teacher_vocab
        parts = torch.empty(3, dtype=torch.float32, device=xs.device)
        gx, gw = torch.empty_like(xs), torch.empty_like(ws)
        gb = torch.empty_like(bs) if bs is not None else None
        a = _ops._addr
        # The workspace from torch's allocator, lent for this call (replacing any lend that the
        # unsharded ops left in place, see _calls._lend).
        _calls._lend(dctx, 0, 0)  # the size query plans for no lend
        n = ctypes.c_size_t()
        dctx.check(
            _lib.lib.distil_fused_linear_jsd_tp_workspace_size(
                dctx.handle, ctypes.byref(d), 1, ctypes.byref(n)
            )
        )
        work = _ops._workspace(xs, n.value)
        _calls._lend(dctx, a(work), n.value)
        status = _lib.lib.distil_fused_linear_jsd_tp(
            dctx.handle,
            ctypes.byref(d),
            ctypes.byref(shard),
            *[a(x) or None for x in (xs, ws, bs, t.xt, t.wt, t.bt, t.labels, parts, gx, gw, gb)],
        )
        if comm.error is not None:
            err, comm.error = comm.error, None
            raise err
        dctx.check(status)
        _ops._after_call(dctx, xs)
        ctx.save_for_backward(gx, gw, gb if gb is not None else torch.empty(0))
        ctx.has_bias = bs is not None
        return parts

    @staticmethod
    def backward(ctx, grad_parts):
        gx, gw, gb = ctx.saved_tensors
        s = grad_parts[0]
        return (
            gx * s.to(gx.dtype),
            gw * s.to(gw.dtype),
            gb * s.to(gb.dtype) if ctx.has_bias else None,
            None,
        )


class VocabParallel:
    """The group, the rank's offset and its communicator, resolved on the first call."""

    def __init__(self, process_group, vocab_offset=None):
        self.group = process_group
        self.offset = vocab_offset
        self.comm = None
        self.key = None

    def shard(self, local_vocab, device):
        if self.key != (local_vocab, device):
            self.v0, self.total = shard_offset(self.group, local_vocab, self.offset, device)
            self.key = (local_vocab, device)
            self.comm = _Comm(self.group, device)
        s = VocabShard()
        _lib.lib.distil_vocab_shard_init(ctypes.byref(s))
        s.vocab_offset, s.vocab_total, s.comm = self.v0, self.total, self.comm.handle
        return s

    def fused_linear_jsd_loss(self, tensors: tuple, opts):
        """(loss, hard, soft) of the vocabulary-parallel fused loss; only loss has a gradient.
        tensors: FusedLinearJSDLoss's (student_input, student_weight, teacher_input,
        teacher_weight, labels, student_bias, teacher_bias)."""
        xs, ws, xt, wt, labels, bs, bt = tensors
        x2, t2 = xs.reshape(-1, xs.shape[-1]), xt.reshape(-1, xt.shape[-1])
        lab = labels.reshape(-1).contiguous() if labels is not None else None
        t = _ops.FusedTensors(x2, ws, bs, t2, wt, bt, lab)
        parts = _FusedTP.apply(
            x2, ws, bs, _ops._Opaque((t, opts, self.shard(ws.shape[0], xs.device), self.comm))
        )
        return parts[0], parts[1].detach(), parts[2].detach()
