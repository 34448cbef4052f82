"""The `Workload` value: what to tune, its numpy reference, FLOP count and stable key."""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import numpy as np

DTYPES = ("float32", "float16")
EPILOGUES = (None, "bias", "relu", "bias_relu", "gelu", "bias_gelu")

Shape = tuple[int, ...]
WEIGHT_INPUT = 1  # the position of an operator's weight among its inputs (B of a matmul, a conv's filters)


def check_positive(name: str, value: Any) -> int:
    """Return `value` as an int, or raise a ValueError naming the argument."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def check_flag(name: str, value: Any) -> bool:
    """Return `value` if it is a bool, or raise a ValueError naming the argument."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_choice(name: str, value: Any, choices: tuple[Any, ...]) -> Any:
    if value not in choices:
        shown = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {shown}, got {value!r}")
    return value


@dataclasses.dataclass(frozen=True)
class Workload(ABC):
    """An operator instance. Subclasses are frozen dataclasses whose fields are its parameters.

    Fields listed in `SHAPE_FIELDS` always appear in the key; the other fields appear only when
    they differ from their default, so keys stay short and readable.
    """

    op: ClassVar[str]
    SHAPE_FIELDS: ClassVar[tuple[str, ...]]

    @property
    def dtype(self) -> str:  # overridden by the dataclass field of every subclass
        raise NotImplementedError

    @property
    def constant_weights(self) -> bool:
        """Whether the weight (input `WEIGHT_INPUT`) is the same on every call, as a model's layers'
        are: a kernel may then take it in a layout of its own, laid out once (not on every call),
        and tuning times it so. A field of the workloads that have weights; False for the others."""
        return False

    def with_weights(self, *, constant: bool) -> "Workload":
        """This workload with its weights constant or not; itself for an operator without weights."""
        if not any(field.name == "constant_weights" for field in dataclasses.fields(self)):
            return self
        return dataclasses.replace(self, constant_weights=constant)  # type: ignore[call-arg]  # checked above

    @property
    def key(self) -> str:
        """A stable, human-readable identity, the same in every process."""
        parts = []
        for field in dataclasses.fields(self):
            if field.name == "dtype":
                continue
            value = getattr(self, field.name)
            if field.name in self.SHAPE_FIELDS or value != field.default:
                parts.append(f"{field.name}={value}")
        parts.append(self.dtype)
        return f"{self.op}({','.join(parts)})"

    def __str__(self) -> str:
        return self.key

    @property
    @abstractmethod
    def flops(self) -> int:
        """Floating-point operations: 2 per multiply-accumulate, 1 per epilogue op per output."""

    @property
    def memory_bytes(self) -> int:
        """Bytes that must move between memory and the chip at least once: every input and output."""
        itemsize = np.dtype(self.dtype).itemsize
        return itemsize * sum(math.prod(shape) for shape in (*self.input_shapes, *self.output_shapes))

    @property
    def intensity(self) -> float:
        """Arithmetic intensity: FLOPs per byte of compulsory memory traffic (the roofline's x axis)."""
        return self.flops / self.memory_bytes

    @property
    @abstractmethod
    def input_shapes(self) -> tuple[Shape, ...]: ...

    @property
    @abstractmethod
    def output_shapes(self) -> tuple[Shape, ...]: ...

    @abstractmethod
    def tensors(self) -> list[Any]:
        """The `tvm.te` tensors of the operator: inputs first, then outputs."""

    @abstractmethod
    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        """The expected output, computed with numpy in float64."""

    @property
    def main_block(self) -> str:
        """Name of the reduction block that templates tile."""
        return self.op

    def prim_func(self) -> Any:
        """The operator as a TVM PrimFunc (inputs first, then outputs), named after its op."""
        from tvm import te

        return te.create_prim_func(self.tensors()).with_attr("global_symbol", "main")

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Inputs drawn uniformly from [-1, 1): never zeros, so timings and checks mean something."""
        rng = np.random.default_rng(seed)
        return [rng.uniform(-1.0, 1.0, size=shape).astype(self.dtype) for shape in self.input_shapes]

    @property
    def tolerance(self) -> tuple[float, float]:
        """(rtol, atol) for comparing a kernel's output with `reference`, by dtype and depth."""
        depth = max(self.reduction_size, 1)
        if self.dtype == "float16":
            return 2e-2, 2e-3 * np.sqrt(depth)
        return 1e-4, 1e-5 * np.sqrt(depth)

    @property
    @abstractmethod
    def reduction_size(self) -> int:
        """Number of terms summed into each output element."""


def finish(workload_output: np.ndarray, dtype: str) -> np.ndarray:
    """Cast a float64 reference result to the workload's dtype."""
    return np.ascontiguousarray(workload_output.astype(dtype))


def epilogue_parts(epilogue: str | None) -> tuple[bool, str | None]:
    """Whether an epilogue adds a bias, and the activation after it: None, "relu" or "gelu" (the
    exact one, with erf, as torch's default)."""
    if epilogue is None:
        return False, None
    return epilogue.startswith("bias"), epilogue.removeprefix("bias").lstrip("_") or None


_erf = np.frompyfunc(math.erf, 1, 1)


def apply_epilogue(acc: np.ndarray, epilogue: str | None, bias: np.ndarray | None,
                   channel_axis: int) -> np.ndarray:
    """Apply a fused epilogue to a float64 accumulator (bias broadcast along `channel_axis`)."""
    has_bias, activation = epilogue_parts(epilogue)
    if has_bias:
        assert bias is not None, f"the {epilogue} epilogue needs a bias"
        shape = [1] * acc.ndim
        shape[channel_axis] = -1
        acc = acc + bias.astype(np.float64).reshape(shape)
    if activation == "relu":
        acc = np.maximum(acc, 0.0)
    elif activation == "gelu":
        acc = 0.5 * acc * (1.0 + np.asarray(_erf(acc / math.sqrt(2.0)), dtype=np.float64))
    return acc


def epilogue_ops(epilogue: str | None) -> int:
    """Elementwise FLOPs per output element of an epilogue (GELU's erf counted as one)."""
    has_bias, activation = epilogue_parts(epilogue)
    return int(has_bias) + {None: 0, "relu": 1, "gelu": 4}[activation]
