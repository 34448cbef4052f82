"""torch's version of a workload (oneDNN/MKL on the CPU, cuBLAS/cuDNN on CUDA): the library a
tuned kernel replaces, for timing it beside ours."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .workload import Workload, epilogue_parts

GEMMS = ("matmul", "batch_matmul")


def _epilogue(torch: Any, out: Any, bias: Any, epilogue: str | None, channel_axis: int) -> Any:
    has_bias, activation = epilogue_parts(epilogue)
    if has_bias:
        shape = [1] * out.dim()
        shape[channel_axis] = -1
        out = out + bias.reshape(shape)
    if activation == "relu":
        out = torch.relu(out)
    elif activation == "gelu":
        out = torch.nn.functional.gelu(out)
    return out


def torch_fn(workload: Workload, inputs: Sequence[np.ndarray], device_type: str = "cpu") -> Callable[[], Any]:
    """torch's version of `workload` over `inputs` copied to the device once, so that only the
    computation is timed; returns a tensor. It runs on the threads torch is set to."""
    import torch
    import torch.nn.functional as F

    x = [torch.from_numpy(np.ascontiguousarray(a)).to(device_type) for a in inputs]
    w: Any = workload
    epilogue = getattr(w, "epilogue", None)
    bias = x[2] if len(x) > 2 else None
    if w.op in GEMMS:
        b = x[1].transpose(-1, -2) if w.transpose_b else x[1]
        return lambda: _epilogue(torch, torch.matmul(x[0], b), bias, epilogue, -1)
    if w.op == "conv2d" and w.layout == "NHWC":  # torch's channels_last: the memory layout of NHWC / HWIO
        data = x[0].permute(0, 3, 1, 2)
        weight = x[1].permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
        return lambda: _epilogue(torch, F.conv2d(data, weight, stride=w.stride, padding=w.padding,
                                                 dilation=w.dilation), bias, epilogue, 1).permute(0, 2, 3, 1)
    if w.op in ("conv2d", "depthwise_conv2d"):
        groups = w.C if w.op == "depthwise_conv2d" else 1
        return lambda: _epilogue(torch, F.conv2d(x[0], x[1], stride=w.stride, padding=w.padding,
                                                 dilation=w.dilation, groups=groups), bias, epilogue, 1)
    raise ValueError(f"no torch version of {w.op}")
