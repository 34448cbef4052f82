"""Matrix products: `matmul` (dense layers, GEMM/GEMV) and `batch_matmul` (attention)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np

from .epilogue import cast, with_epilogue
from .workload import (DTYPES, EPILOGUES, Shape, Workload, apply_epilogue, check_choice, check_flag,
                       check_positive,
                       epilogue_ops, epilogue_parts, finish)


@dataclasses.dataclass(frozen=True)
class Matmul(Workload):
    """C[M, N] = A[M, K] @ B[K, N] (or B[N, K] transposed), with an optional fused epilogue."""

    M: int
    N: int
    K: int
    transpose_b: bool = False
    epilogue: str | None = None
    constant_weights: bool = False
    dtype: str = "float32"

    op = "matmul"
    SHAPE_FIELDS = ("M", "N", "K")

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K + epilogue_ops(self.epilogue) * self.M * self.N

    @property
    def reduction_size(self) -> int:
        return self.K

    @property
    def input_shapes(self) -> tuple[Shape, ...]:
        b = (self.N, self.K) if self.transpose_b else (self.K, self.N)
        bias = ((self.N,),) if epilogue_parts(self.epilogue)[0] else ()
        return ((self.M, self.K), b) + bias

    @property
    def output_shapes(self) -> tuple[Shape, ...]:
        return ((self.M, self.N),)

    def tensors(self) -> list[Any]:
        from tvm import te

        shapes = self.input_shapes
        a = te.placeholder(shapes[0], self.dtype, name="A")
        b = te.placeholder(shapes[1], self.dtype, name="B")
        bias = te.placeholder(shapes[2], self.dtype, name="bias") if len(shapes) > 2 else None
        k = te.reduce_axis((0, self.K), name="k")
        body: Callable[..., Any]
        if self.transpose_b:
            body = lambda i, j: te.sum(cast(a[i, k]) * cast(b[j, k]), axis=k)
        else:
            body = lambda i, j: te.sum(cast(a[i, k]) * cast(b[k, j]), axis=k)
        acc = te.compute((self.M, self.N), body, name=self.op)
        out = with_epilogue(acc, self.epilogue, bias, lambda i, j: j, self.dtype)
        return [a, b] + ([bias] if bias is not None else []) + [out]

    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        a, b = (x.astype(np.float64) for x in inputs[:2])
        acc = a @ (b.T if self.transpose_b else b)
        bias = inputs[2] if len(inputs) > 2 else None
        return finish(apply_epilogue(acc, self.epilogue, bias, channel_axis=1), self.dtype)


@dataclasses.dataclass(frozen=True)
class BatchMatmul(Workload):
    """C[B, M, N] = A[B, M, K] @ B[B, K, N] (or B[B, N, K] transposed): attention's products."""

    B: int
    M: int
    N: int
    K: int
    transpose_b: bool = False
    dtype: str = "float32"

    op = "batch_matmul"
    SHAPE_FIELDS = ("B", "M", "N", "K")

    @property
    def flops(self) -> int:
        return 2 * self.B * self.M * self.N * self.K

    @property
    def reduction_size(self) -> int:
        return self.K

    @property
    def input_shapes(self) -> tuple[Shape, ...]:
        b = (self.B, self.N, self.K) if self.transpose_b else (self.B, self.K, self.N)
        return ((self.B, self.M, self.K), b)

    @property
    def output_shapes(self) -> tuple[Shape, ...]:
        return ((self.B, self.M, self.N),)

    def tensors(self) -> list[Any]:
        from tvm import te

        a = te.placeholder(self.input_shapes[0], self.dtype, name="A")
        b = te.placeholder(self.input_shapes[1], self.dtype, name="B")
        k = te.reduce_axis((0, self.K), name="k")
        body: Callable[..., Any]
        if self.transpose_b:
            body = lambda n, i, j: te.sum(cast(a[n, i, k]) * cast(b[n, j, k]), axis=k)
        else:
            body = lambda n, i, j: te.sum(cast(a[n, i, k]) * cast(b[n, k, j]), axis=k)
        acc = te.compute((self.B, self.M, self.N), body, name=self.op)
        return [a, b, with_epilogue(acc, None, None, None, self.dtype)]

    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        a, b = (x.astype(np.float64) for x in inputs)
        return finish(a @ (b.transpose(0, 2, 1) if self.transpose_b else b), self.dtype)


def matmul(M: int, N: int, K: int, *, transpose_b: bool = False, epilogue: str | None = None,
           constant_weights: bool = False, dtype: str = "float32") -> Matmul:
    """A dense layer's product: A[M, K] @ B[K, N], B given as [N, K] when `transpose_b`; B the
    same on every call with `constant_weights` (see `Workload.constant_weights`)."""
    return Matmul(check_positive("M", M), check_positive("N", N), check_positive("K", K),
                  bool(transpose_b), check_choice("epilogue", epilogue, EPILOGUES),
                  check_flag("constant_weights", constant_weights), check_choice("dtype", dtype, DTYPES))


def batch_matmul(B: int, M: int, N: int, K: int, *, transpose_b: bool = False,
                 dtype: str = "float32") -> BatchMatmul:
    """B independent products A[b] @ B[b], the shape of attention's QK^T and PV."""
    return BatchMatmul(check_positive("B", B), check_positive("M", M), check_positive("N", N),
                       check_positive("K", K), bool(transpose_b), check_choice("dtype", dtype, DTYPES))
