"""Vendor-library versions of a workload, for comparisons: torch (oneDNN/MKL on CPU, cuBLAS/cuDNN
on CUDA) and numpy (OpenBLAS; GEMMs only).

Each is a zero-argument callable over fixed inputs, so a timer can call it in a loop; its output
is checked against the workload's numpy reference before it is timed.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from workloads import Workload


def _epilogue(torch, out, bias, epilogue: str | None, channel_axis: int):
    if epilogue in ("bias", "bias_relu"):
        shape = [1] * out.dim()
        shape[channel_axis] = -1
        out = out + bias.reshape(shape)
    if epilogue in ("relu", "bias_relu"):
        out = torch.relu(out)
    return out


def torch_fn(workload: Workload, inputs: list[np.ndarray], device: str = "cpu") -> Callable[[], "object"]:
    """torch's version of `workload` on `inputs` (already on `device`); returns the output tensor."""
    import torch
    import torch.nn.functional as F

    x = [torch.from_numpy(np.ascontiguousarray(a)).to(device) for a in inputs]
    w = workload
    epilogue = getattr(w, "epilogue", None)
    bias = x[2] if len(x) > 2 else None
    if w.op in ("matmul", "batch_matmul"):
        b = x[1].transpose(-1, -2) if w.transpose_b else x[1]
        return lambda: _epilogue(torch, torch.matmul(x[0], b), bias, epilogue, -1)
    if w.op == "conv2d":
        if w.layout == "NHWC":  # torch's channels_last: the same memory layout as NHWC / HWIO
            data = x[0].permute(0, 3, 1, 2)
            weight = x[1].permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
            return lambda: _epilogue(torch, F.conv2d(data, weight, stride=w.stride, padding=w.padding,
                                                     dilation=w.dilation), bias, epilogue, 1).permute(0, 2, 3, 1)
        return lambda: _epilogue(torch, F.conv2d(x[0], x[1], stride=w.stride, padding=w.padding,
                                                 dilation=w.dilation), bias, epilogue, 1)
    if w.op == "depthwise_conv2d":
        return lambda: _epilogue(torch, F.conv2d(x[0], x[1], stride=w.stride, padding=w.padding,
                                                 dilation=w.dilation, groups=w.C), bias, epilogue, 1)
    raise ValueError(f"no torch version of {w.op}")


def numpy_fn(workload: Workload, inputs: list[np.ndarray]) -> Callable[[], np.ndarray] | None:
    """numpy's (OpenBLAS) version of a GEMM workload; None for convolutions."""
    w = workload
    if w.op not in ("matmul", "batch_matmul"):
        return None
    a = inputs[0]
    b = np.swapaxes(inputs[1], -1, -2) if w.transpose_b else inputs[1]  # a view, as BLAS takes it
    bias = inputs[2] if len(inputs) > 2 else None

    def run():
        out = np.matmul(a, b)
        if bias is not None:
            out += bias
        if getattr(w, "epilogue", None) in ("relu", "bias_relu"):
            np.maximum(out, 0, out=out)
        return out

    return run


def checked(workload: Workload, inputs: list[np.ndarray], fn: Callable, to_numpy=np.asarray) -> bool:
    """Whether `fn()` matches the workload's reference within its tolerance."""
    rtol, atol = workload.tolerance
    return bool(np.allclose(to_numpy(fn()), workload.reference(*inputs), rtol=rtol, atol=atol))
