"""The fused elementwise stage after a reduction: bias, ReLU and the cast to a narrow dtype."""

from __future__ import annotations

from typing import Any, Callable

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

    def body(*idx: Any) -> Any:
        value = acc(*idx)
        if epilogue in ("bias", "bias_relu"):
            assert channel is not None, f"the {epilogue} epilogue needs a channel"
            value = value + bias[channel(*idx)].astype(acc.dtype)
        if epilogue in ("relu", "bias_relu"):
            value = te.max(value, tirx.const(0.0, acc.dtype))
        return value.astype(dtype)

    return te.compute(acc.shape, body, name=EPILOGUE_BLOCK)


def cast(expr: Any) -> Any:
    """Widen an operand to the accumulation dtype (a no-op for float32)."""
    return expr if expr.dtype == ACCUMULATE_DTYPE else expr.astype(ACCUMULATE_DTYPE)
