"""The fused elementwise stage after a reduction: bias, ReLU or GELU, and the cast to a narrow dtype."""

from __future__ import annotations

from typing import Any, Callable

from .workload import epilogue_parts

EPILOGUE_BLOCK = "epilogue"


ACCUMULATE_DTYPE = "float32"  # reductions accumulate in float32 even for float16 operands


def with_epilogue(acc: Any, epilogue: str | None, bias: Any, channel: Callable[..., Any] | None,
                  dtype: str) -> Any:
    """Return the output tensor: `acc` itself, or an elementwise stage reading it.

    `channel(*indices)` picks the output index that the bias is broadcast along (None without a bias).
    """
    from tvm import te, tirx

    if epilogue is None and acc.dtype == dtype:
        return acc

    has_bias, activation = epilogue_parts(epilogue)

    def body(*idx: Any) -> Any:
        value = acc(*idx)
        if has_bias:
            assert channel is not None, f"the {epilogue} epilogue needs a channel"
            value = value + bias[channel(*idx)].astype(acc.dtype)
        if activation == "relu":
            value = te.max(value, tirx.const(0.0, acc.dtype))
        elif activation == "gelu":
            value = value * 0.5 * (1.0 + fast_erf(value * 0.7071067811865476))
        return value.astype(dtype)

    return te.compute(acc.shape, body, name=EPILOGUE_BLOCK)


# Eigen's rational approximation of erf on [-4, 4] (TVM's topi.fast_erf, float32-accurate): unlike
# tirx.erf, which LLVM lowers to one scalar libm call per element, it vectorizes.
ERF_NUMERATOR = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
                 -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
ERF_DENOMINATOR = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
                   -1.42647390514189e-02)


def fast_erf(expr: Any) -> Any:
    """erf(expr) as a polynomial ratio in x^2 (expr clamped to [-4, 4], where erf is +-1 in float32)."""
    from tvm import te

    x = te.max(te.min(expr, 4.0), -4.0)
    x2 = x * x
    p = ERF_NUMERATOR[0]
    for alpha in ERF_NUMERATOR[1:]:
        p = x2 * p + alpha
    q = ERF_DENOMINATOR[0]
    for beta in ERF_DENOMINATOR[1:]:
        q = x2 * q + beta
    return x * p / q


def cast(expr: Any) -> Any:
    """Widen an operand to the accumulation dtype (a no-op for float32)."""
    return expr if expr.dtype == ACCUMULATE_DTYPE else expr.astype(ACCUMULATE_DTYPE)
