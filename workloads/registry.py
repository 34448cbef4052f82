"""Operator constructors by name, and a Workload back from its key (for records and suites)."""

from __future__ import annotations

import re
from typing import Any, Callable

from .conv import conv2d, depthwise_conv2d
from .gemm import batch_matmul, matmul
from .workload import Workload

OPERATORS: dict[str, Callable[..., Workload]] = {
    "matmul": matmul,
    "batch_matmul": batch_matmul,
    "conv2d": conv2d,
    "depthwise_conv2d": depthwise_conv2d,
}

_KEY = re.compile(r"^(\w+)\((.*)\)$")


def make(op: str, **params: Any) -> Workload:
    """Build a workload from an operator name and its keyword parameters."""
    if op not in OPERATORS:
        raise ValueError(f"unknown operator {op!r}; known: {', '.join(OPERATORS)}")
    try:
        return OPERATORS[op](**params)
    except TypeError as err:
        raise ValueError(f"bad parameters for {op}: {err}") from None


def _value(text: str) -> Any:
    if text in ("True", "False"):
        return text == "True"
    if text == "None":
        return None
    return int(text) if text.lstrip("-").isdigit() else text


def from_key(key: str) -> Workload:
    """Inverse of `Workload.key`: `from_key(w.key) == w` for every workload."""
    match = _KEY.match(key.strip())
    if not match:
        raise ValueError(f"not a workload key: {key!r} (expected e.g. 'matmul(M=512,N=512,K=512,float32)')")
    op, body = match.groups()
    *pairs, dtype = body.split(",")
    params: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"not a workload key: {key!r} (bad parameter {pair!r})")
        params[name] = _value(value)
    return make(op, dtype=dtype, **params)
