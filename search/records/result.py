"""What one measurement says: costs in seconds, or why there are none."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

MESSAGE_LIMIT = 2000  # characters of worker stderr kept in a record


class ErrorKind(str, enum.Enum):
    """The closed set of outcomes of measuring a candidate (a failure is data, not an exception)."""

    NONE = "none"
    BUILD_ERROR = "build_error"
    BUILD_TIMEOUT = "build_timeout"
    RUN_ERROR = "run_error"
    RUN_TIMEOUT = "run_timeout"
    WRONG_RESULT = "wrong_result"

    def __str__(self) -> str:
        return self.value


def shorten(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """Keep the head and the tail of a long message: the tail usually holds the real error."""
    message = message.strip()
    if len(message) <= limit:
        return message
    half = limit // 2
    return f"{message[:half]}\n...[{len(message) - limit} characters cut]...\n{message[-half:]}"


def median_latency(costs: Sequence[float]) -> float:
    """The one statistic of a candidate's timing repeats: their median (the mean of the middle two
    for an even count). Medians resist the slow outliers a busy host adds."""
    ordered = sorted(costs)
    middle = len(ordered) // 2
    return float(ordered[middle]) if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


@dataclass(frozen=True)
class MeasureResult:
    costs: tuple[float, ...] = ()
    error: ErrorKind = ErrorKind.NONE
    message: str = ""
    build_s: float = 0.0
    run_s: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "error", ErrorKind(self.error))
        object.__setattr__(self, "costs", tuple(float(c) for c in self.costs))
        object.__setattr__(self, "message", shorten(self.message))

    @property
    def ok(self) -> bool:
        return self.error is ErrorKind.NONE and bool(self.costs)

    @property
    def latency(self) -> float:
        """Median cost in seconds; infinity for a failed candidate."""
        return median_latency(self.costs) if self.ok else float("inf")
