"""Runners: check and time built libraries on the local CPU/GPU or on a device behind TVM's RPC tracker."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Callable

from search import PackedWeight, TargetInfo
from search.records import ErrorKind, MeasureResult
from workloads import Workload

from . import tasks
from .pool import TaskOutcome, WorkerPool


def outcome_to_result(outcome: TaskOutcome, build_s: float) -> MeasureResult:
    if outcome.failure == "timeout":
        return MeasureResult(error=ErrorKind.RUN_TIMEOUT, message=outcome.message, build_s=build_s, run_s=outcome.seconds)
    if outcome.failure is not None:
        return MeasureResult(error=ErrorKind.RUN_ERROR, message=outcome.message, build_s=build_s, run_s=outcome.seconds)
    if "wrong" in outcome.value:
        return MeasureResult(error=ErrorKind.WRONG_RESULT, message=outcome.value["wrong"], build_s=build_s,
                             run_s=outcome.seconds)
    return MeasureResult(outcome.value["costs"], build_s=build_s, run_s=outcome.seconds)


class Runner:
    """Runs each library in a worker process: a crashing kernel costs one candidate, not the run.

    Timing uses TVM's `time_evaluator`: `repeat` measurements, each averaging `number` calls
    (more when one repeat is shorter than `min_repeat_ms`), with the CPU cache flushed between
    repeats by default; the correctness run before it is the warm-up.
    """

    def __init__(self, device: tuple[Any, ...], *, threads: int | None = None, number: int = 1, repeat: int = 3,
                 min_repeat_ms: int = 20, flush_cache: bool = True, timeout_s: float = 20.0, workers: int = 1,
                 run_fn: Callable[[tasks.RunTask], dict[str, Any]] = tasks.run) -> None:
        for name, value in (("number", number), ("repeat", repeat), ("workers", workers)):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if timeout_s <= 0 or min_repeat_ms < 0:
            raise ValueError("timeout_s must be positive and min_repeat_ms non-negative")
        self.device = device
        self.number, self.repeat, self.min_repeat_ms = number, repeat, min_repeat_ms
        self.flush_cache, self.timeout_s, self.run_fn = flush_cache, timeout_s, run_fn
        threads = threads or len(os.sched_getaffinity(0))
        self._pool = WorkerPool(workers, env={"TVM_NUM_THREADS": str(threads)})
        self._pool.start()

    def run(self, workload: Workload, target: TargetInfo, libraries: list[str], build_s: list[float],
            on_result: Callable[[int, MeasureResult], None] | None = None,
            packed_weights: Sequence[PackedWeight | None] | None = None) -> list[MeasureResult]:
        """Check and time each library; `packed_weights[i]`, if given, is the layout library i
        takes its constant weight in."""
        layouts = packed_weights if packed_weights is not None else [None] * len(libraries)
        payloads = [tasks.RunTask(workload, target, lib, self.device, self.number, self.repeat,
                                  self.min_repeat_ms, self.flush_cache, packed_weight=layout)
                    for lib, layout in zip(libraries, layouts)]
        done = None if on_result is None else lambda i, o: on_result(i, outcome_to_result(o, build_s[i]))
        outcomes = self._pool.map(self.run_fn, payloads, self.timeout_s, on_done=done)
        return [outcome_to_result(o, b) for o, b in zip(outcomes, build_s)]

    def close(self) -> None:
        self._pool.close()


class LocalRunner(Runner):
    """Times on this machine's CPU (`llvm`) or its GPU (`cuda`), on all the user's cores."""

    def __init__(self, device_type: str = "cpu", **options: Any) -> None:
        if device_type not in ("cpu", "cuda"):
            raise ValueError(f"device_type must be 'cpu' or 'cuda', got {device_type!r}")
        super().__init__(("local", device_type), **options)


class RPCRunner(Runner):
    """Times on devices registered with a TVM RPC tracker under `key`; one worker per device."""

    def __init__(self, tracker_host: str, tracker_port: int, key: str, *, session_timeout_s: int = 60,
                 **options: Any) -> None:
        super().__init__(("rpc", tracker_host, int(tracker_port), key, session_timeout_s), **options)
