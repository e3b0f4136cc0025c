"""The package's shape (docs/PYTHON.md): options travel as objects, by name; the custom ops'
keywords are the options objects' fields; an options object is the plan cache's key."""

import ast
import dataclasses
import pathlib

import torch

from distil import _options
from distil.torch import _ops

PACKAGE = pathlib.Path(_options.__file__).parent
# Liger's public signatures (kept positional to be a drop-in), constructors, and the top-k
# descriptors' planner (_topk.py: its plan functions still take their fields one by one).
EXEMPT = {"fused_linear_jsd", "fused_linear_jsd_loss", "liger_fused_linear_jsd", "__init__"}
EXEMPT_FILES = {"_topk.py"}


def _functions():
    for path in PACKAGE.rglob("*.py"):
        if path.name in EXEMPT_FILES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path, node


def test_no_function_takes_more_than_eight_positional_arguments():
    long = []
    for path, fn in _functions():
        names = [
            a.arg for a in fn.args.posonlyargs + fn.args.args if a.arg not in ("self", "cls", "ctx")
        ]
        if len(names) > 8 and fn.name not in EXEMPT:
            long.append(f"{path.name}:{fn.lineno} {fn.name} ({len(names)})")
    assert not long, long


def _constant_index(index) -> bool:
    if isinstance(index, ast.Constant):
        return isinstance(index.value, int)
    return isinstance(index, ast.Slice) and any(
        isinstance(b, ast.Constant) for b in (index.lower, index.upper)
    )


def test_no_option_is_read_by_index():
    """No option read out of an argument tuple by a constant subscript (an index or a slice)."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name in EXEMPT_FILES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Subscript)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("args", "inputs", "options", "heads", "div")
                and _constant_index(node.slice)
            ):
                found.append(f"{path.name}:{node.lineno}")
    assert not found, found


def test_op_keywords_are_the_options_fields():
    def keywords(op):
        schema = op._opoverload._schema
        return {a.name for a in schema.arguments if a.kwarg_only}

    fused = {f.name for f in dataclasses.fields(_options.FusedOptions)}
    fused |= {"want_" + f.name for f in dataclasses.fields(_options.FusedOutputs)}
    assert keywords(_ops.fused_op) == fused
    jsd = {f.name for f in dataclasses.fields(_options.JsdOptions)} | {"want_grad"}
    assert keywords(_ops.jsd_op) == jsd


def test_options_are_frozen_and_hashable():
    a = _options.fused_options("f", temperature=2.0, divergence="tvd")
    assert a == _options.fused_options("f", temperature=2, divergence="tvd")
    assert hash(a) == hash(_options.fused_options("f", temperature=2.0, divergence="tvd"))
    try:
        a.temperature = 3.0
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("options must be frozen")
    assert torch.is_tensor(torch.zeros(1))  # torch imported for _ops' registration
