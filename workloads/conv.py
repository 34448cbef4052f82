"""Convolutions: `conv2d` (NCHW with OIHW weights, NHWC with HWIO weights) and `depthwise_conv2d`."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Callable

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .epilogue import cast, with_epilogue
from .workload import (DTYPES, EPILOGUES, Shape, Workload, apply_epilogue, check_choice, check_flag, check_positive,
                       epilogue_ops, epilogue_parts, finish)

LAYOUTS = ("NCHW", "NHWC")
PAD_BLOCK = "pad"


def output_size(name: str, size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    span = dilation * (kernel - 1) + 1
    if size + 2 * padding < span:
        raise ValueError(f"kernel {name}={kernel} (dilation {dilation}, span {span}) is larger than the "
                         f"padded input ({size} + 2*{padding} = {size + 2 * padding})")
    return (size + 2 * padding - span) // stride + 1


def check_padding(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"padding must be a non-negative integer, got {value!r}")
    return int(value)


def padded(data: Any, padding: int, spatial_axes: tuple[int, int]) -> Any:
    """Zero-pad `data` along its two spatial axes (an inlinable stage), or return it as is."""
    from tvm import te, tirx

    if padding == 0:
        return data
    shape = list(data.shape)
    for axis in spatial_axes:
        shape[axis] = shape[axis] + 2 * padding

    def body(*idx: Any) -> Any:
        inside = [idx[a] >= padding for a in spatial_axes] + [idx[a] < data.shape[a] + padding for a in spatial_axes]
        source = [i - padding if a in spatial_axes else i for a, i in enumerate(idx)]
        return te.if_then_else(te.all(*inside), data(*source), tirx.const(0.0, data.dtype))

    return te.compute(shape, body, name=PAD_BLOCK)


def windows(x: np.ndarray, R: int, S: int, stride: int, padding: int, dilation: int) -> np.ndarray:
    """[N, C, H, W] -> [N, C, OH, OW, R, S] views of the padded input under each output pixel."""
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    span_r, span_s = dilation * (R - 1) + 1, dilation * (S - 1) + 1
    view = sliding_window_view(xp, (span_r, span_s), axis=(2, 3))
    return view[:, :, ::stride, ::stride, ::dilation, ::dilation]


class SlidingWindow:
    """Output size and FLOPs shared by the convolutions (N, H, W, R, S, stride, padding, dilation)."""

    if TYPE_CHECKING:  # what the mixin reads of the dataclasses it is mixed into
        N: int
        H: int
        W: int
        R: int
        S: int
        stride: int
        padding: int
        dilation: int
        epilogue: str | None

        @property
        def out_channels(self) -> int: ...

        @property
        def reduction_size(self) -> int: ...

    @property
    def out_hw(self) -> tuple[int, int]:
        return (output_size("R", self.H, self.R, self.stride, self.padding, self.dilation),
                output_size("S", self.W, self.S, self.stride, self.padding, self.dilation))

    @property
    def flops(self) -> int:
        outputs = self.N * self.out_channels * self.out_hw[0] * self.out_hw[1]
        return outputs * (2 * self.reduction_size + epilogue_ops(self.epilogue))


@dataclasses.dataclass(frozen=True)
class Conv2d(SlidingWindow, Workload):
    """2-D convolution of N images of C channels with K filters of R x S, with a fused epilogue."""

    N: int
    C: int
    H: int
    W: int
    K: int
    R: int
    S: int
    stride: int = 1
    padding: int = 0
    dilation: int = 1
    layout: str = "NCHW"
    epilogue: str | None = None
    constant_weights: bool = False
    dtype: str = "float32"

    op = "conv2d"
    SHAPE_FIELDS = ("N", "C", "H", "W", "K", "R", "S")

    @property
    def out_channels(self) -> int:
        return self.K

    @property
    def reduction_size(self) -> int:
        return self.C * self.R * self.S

    @property
    def input_shapes(self) -> tuple[Shape, ...]:
        bias = ((self.K,),) if epilogue_parts(self.epilogue)[0] else ()
        if self.layout == "NCHW":
            return ((self.N, self.C, self.H, self.W), (self.K, self.C, self.R, self.S)) + bias
        return ((self.N, self.H, self.W, self.C), (self.R, self.S, self.C, self.K)) + bias

    @property
    def output_shapes(self) -> tuple[Shape, ...]:
        OH, OW = self.out_hw
        return ((self.N, self.K, OH, OW),) if self.layout == "NCHW" else ((self.N, OH, OW, self.K),)

    def tensors(self) -> list[Any]:
        from tvm import te

        shapes = self.input_shapes
        data = te.placeholder(shapes[0], self.dtype, name="data")
        weight = te.placeholder(shapes[1], self.dtype, name="weight")
        bias = te.placeholder(shapes[2], self.dtype, name="bias") if len(shapes) > 2 else None
        rc = te.reduce_axis((0, self.C), name="rc")
        rh = te.reduce_axis((0, self.R), name="rh")
        rw = te.reduce_axis((0, self.S), name="rw")
        st, dl = self.stride, self.dilation
        body: Callable[..., Any]
        channel: Callable[..., Any]
        if self.layout == "NCHW":
            pad = padded(data, self.padding, (2, 3))
            body = lambda n, k, h, w: te.sum(
                cast(pad[n, rc, h * st + rh * dl, w * st + rw * dl]) * cast(weight[k, rc, rh, rw]),
                axis=[rc, rh, rw])
            channel = lambda n, k, h, w: k
        else:
            pad = padded(data, self.padding, (1, 2))
            body = lambda n, h, w, k: te.sum(
                cast(pad[n, h * st + rh * dl, w * st + rw * dl, rc]) * cast(weight[rh, rw, rc, k]),
                axis=[rh, rw, rc])
            channel = lambda n, h, w, k: k
        acc = te.compute(self.output_shapes[0], body, name=self.op)
        out = with_epilogue(acc, self.epilogue, bias, channel, self.dtype)
        return [data, weight] + ([bias] if bias is not None else []) + [out]

    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        data, weight = (x.astype(np.float64) for x in inputs[:2])
        if self.layout == "NHWC":
            data, weight = data.transpose(0, 3, 1, 2), weight.transpose(3, 2, 0, 1)
        patches = windows(data, self.R, self.S, self.stride, self.padding, self.dilation)
        acc = np.einsum("ncpqrs,kcrs->nkpq", patches, weight, optimize=True)
        if self.layout == "NHWC":
            acc = acc.transpose(0, 2, 3, 1)
        bias = inputs[2] if len(inputs) > 2 else None
        return finish(apply_epilogue(acc, self.epilogue, bias, 1 if self.layout == "NCHW" else 3), self.dtype)


@dataclasses.dataclass(frozen=True)
class DepthwiseConv2d(SlidingWindow, Workload):
    """One R x S filter per channel (NCHW data, [C, 1, R, S] weights), as in MobileNet."""

    N: int
    C: int
    H: int
    W: int
    R: int
    S: int
    stride: int = 1
    padding: int = 0
    dilation: int = 1
    epilogue: str | None = None
    constant_weights: bool = False
    dtype: str = "float32"

    op = "depthwise_conv2d"
    SHAPE_FIELDS = ("N", "C", "H", "W", "R", "S")

    @property
    def out_channels(self) -> int:
        return self.C

    @property
    def reduction_size(self) -> int:
        return self.R * self.S

    @property
    def input_shapes(self) -> tuple[Shape, ...]:
        bias = ((self.C,),) if epilogue_parts(self.epilogue)[0] else ()
        return ((self.N, self.C, self.H, self.W), (self.C, 1, self.R, self.S)) + bias

    @property
    def output_shapes(self) -> tuple[Shape, ...]:
        return ((self.N, self.C) + self.out_hw,)

    def tensors(self) -> list[Any]:
        from tvm import te

        shapes = self.input_shapes
        data = te.placeholder(shapes[0], self.dtype, name="data")
        weight = te.placeholder(shapes[1], self.dtype, name="weight")
        bias = te.placeholder(shapes[2], self.dtype, name="bias") if len(shapes) > 2 else None
        rh = te.reduce_axis((0, self.R), name="rh")
        rw = te.reduce_axis((0, self.S), name="rw")
        st, dl = self.stride, self.dilation
        pad = padded(data, self.padding, (2, 3))
        acc = te.compute(self.output_shapes[0], lambda n, c, h, w: te.sum(
            cast(pad[n, c, h * st + rh * dl, w * st + rw * dl]) * cast(weight[c, 0, rh, rw]),
            axis=[rh, rw]), name=self.op)
        out = with_epilogue(acc, self.epilogue, bias, lambda n, c, h, w: c, self.dtype)
        return [data, weight] + ([bias] if bias is not None else []) + [out]

    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        data, weight = (x.astype(np.float64) for x in inputs[:2])
        patches = windows(data, self.R, self.S, self.stride, self.padding, self.dilation)
        acc = np.einsum("ncpqrs,crs->ncpq", patches, weight[:, 0], optimize=True)
        bias = inputs[2] if len(inputs) > 2 else None
        return finish(apply_epilogue(acc, self.epilogue, bias, 1), self.dtype)


def conv2d(N: int, C: int, H: int, W: int, K: int, R: int, S: int, *, stride: int = 1,
           padding: int = 0, dilation: int = 1, layout: str = "NCHW", epilogue: str | None = None,
           constant_weights: bool = False, dtype: str = "float32") -> Conv2d:
    """A convolution layer: N x C x H x W images, K filters of R x S (OIHW for NCHW, HWIO for NHWC)."""
    N, C, H, W, K, R, S = (check_positive(n, v) for n, v in zip("NCHWKRS", (N, C, H, W, K, R, S)))
    conv = Conv2d(N, C, H, W, K, R, S,
                  stride=check_positive("stride", stride), padding=check_padding(padding),
                  dilation=check_positive("dilation", dilation), layout=check_choice("layout", layout, LAYOUTS),
                  epilogue=check_choice("epilogue", epilogue, EPILOGUES),
                  constant_weights=check_flag("constant_weights", constant_weights),
                  dtype=check_choice("dtype", dtype, DTYPES))
    conv.out_hw  # raises for a kernel larger than the padded input
    return conv


def depthwise_conv2d(N: int, C: int, H: int, W: int, R: int, S: int, *, stride: int = 1,
                     padding: int = 0, dilation: int = 1, epilogue: str | None = None,
                     constant_weights: bool = False, dtype: str = "float32") -> DepthwiseConv2d:
    """A depthwise convolution: one R x S filter per channel of N x C x H x W images."""
    N, C, H, W, R, S = (check_positive(n, v) for n, v in zip("NCHWRS", (N, C, H, W, R, S)))
    conv = DepthwiseConv2d(N, C, H, W, R, S,
                           stride=check_positive("stride", stride), padding=check_padding(padding),
                           dilation=check_positive("dilation", dilation),
                           epilogue=check_choice("epilogue", epilogue, EPILOGUES),
                           constant_weights=check_flag("constant_weights", constant_weights),
                           dtype=check_choice("dtype", dtype, DTYPES))
    conv.out_hw
    return conv
