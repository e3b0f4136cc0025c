"""Liger-Kernel's import paths, as its own loss tests use them, mapped onto distil.torch's
Liger-named objects (a pytest plugin: `pytest -p liger_shim`, see scripts/liger-tests.sh).

Only the names the five loss test files import exist here; each is distil's object, or, for
Liger's autograd.Function classes, an `apply` taking the Function's arguments in its order.
"""

import sys
import types

import torch

import distil.torch as dt


def _module(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod
    parent, _, leaf = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], leaf, mod)
    return mod


def _infer_device():
    return "cuda" if torch.cuda.is_available() else "cpu"


class LigerJSDFunction:
    """liger_kernel.transformers.jsd.LigerJSDFunction.apply(input, target, shift_labels,
    beta, ignore_index, [impl, mode])."""

    @staticmethod
    def apply(input, target, shift_labels=None, beta=0.5, ignore_index=-100, *_):
        return dt.liger_jsd(input, target, shift_labels, beta, ignore_index)


class LigerFusedLinearJSDFunction:
    """liger_kernel.ops.LigerFusedLinearJSDFunction.apply(student_input, student_weight,
    teacher_input, teacher_weight, shift_labels, jsd_beta, ignore_index, temperature,
    accum_dtype, [impl, mode])."""

    @staticmethod
    def apply(student_input, student_weight, teacher_input, teacher_weight, shift_labels=None,
              jsd_beta=0.5, ignore_index=-100, temperature=1.0, accum_dtype=None, *_):
        return dt.liger_fused_linear_jsd(student_input, student_weight, teacher_input,
                                         teacher_weight, shift_labels, jsd_beta, ignore_index,
                                         temperature, accum_dtype)


class ChunkedJSDFunction:
    """liger_kernel.chunked_loss.jsd_loss.LigerFusedLinearJSDFunction.apply: the chunked
    loss's fifteen arguments in Liger's order."""

    @staticmethod
    def apply(*args):
        return dt.fused_linear_jsd_loss(*args)


class _HostProperties:
    """What test_tvd.py reads of `getattr(torch, infer_device()).get_device_properties(0)` at
    import: on the cpu, the host's memory."""

    def __init__(self):
        import os
        self.total_memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
        self.name = "cpu"


def install():
    if not hasattr(torch.cpu, "get_device_properties"):
        torch.cpu.get_device_properties = lambda index=0: _HostProperties()
    _module("liger_kernel")
    _module("liger_kernel.utils", infer_device=_infer_device, is_npu_available=lambda: False)
    _module("liger_kernel.ops", LigerFusedLinearJSDFunction=LigerFusedLinearJSDFunction)
    _module("liger_kernel.transformers", LigerJSD=dt.LigerJSD,
            LigerFusedLinearJSD=dt.LigerFusedLinearJSD, LigerKLDIVLoss=dt.LigerKLDIVLoss,
            LigerTVDLoss=dt.LigerTVDLoss)
    _module("liger_kernel.transformers.functional", liger_jsd=dt.liger_jsd,
            liger_fused_linear_jsd=dt.liger_fused_linear_jsd, liger_kl_div=dt.liger_kl_div,
            liger_tvd=dt.liger_tvd)
    _module("liger_kernel.transformers.jsd", LigerJSD=dt.LigerJSD,
            LigerJSDFunction=LigerJSDFunction)
    _module("liger_kernel.transformers.fused_linear_jsd",
            LigerFusedLinearJSD=dt.LigerFusedLinearJSD)
    _module("liger_kernel.transformers.kl_div", LigerKLDIVLoss=dt.LigerKLDIVLoss)
    _module("liger_kernel.transformers.tvd", LigerTVDLoss=dt.LigerTVDLoss)
    _module("liger_kernel.chunked_loss", LigerFusedLinearJSDLoss=dt.LigerFusedLinearJSDLoss)
    _module("liger_kernel.chunked_loss.functional",
            liger_fused_linear_jsd=dt.fused_linear_jsd_loss)
    _module("liger_kernel.chunked_loss.jsd_loss", LigerFusedLinearJSDFunction=ChunkedJSDFunction,
            LigerFusedLinearJSDLoss=dt.LigerFusedLinearJSDLoss)


install()
