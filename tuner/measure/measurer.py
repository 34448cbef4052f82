"""`Measurer`, the protocol the tuning loop measures through, and `Harness`, the one that builds
and times on real hardware: build a batch, then run it, so that builds never disturb the timings."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from search import Config, TargetInfo
from search.records import MeasureResult
from workloads import Workload

from . import tasks
from .builder import LocalBuilder
from .runner import LocalRunner, Runner

OnResult = Callable[[int, MeasureResult], None]


@runtime_checkable
class Measurer(Protocol):
    """Measures configs of one workload on one target.

    `measure` returns one result per config, in order; a failing candidate is a result, never an
    exception. `on_result(index, result)` is called exactly once per config, as soon as its result
    is known, so that a caller can save it before the rest of the batch is done. `close` releases
    whatever the measurer holds (worker processes, connections). A measurer that times on other
    machines says so with `remote = True`: the loop then searches while it measures, which on
    this machine would disturb the timings. One that measures on a fixed target of its own (a
    cluster's CPU) names it as `target`.
    """

    def measure(self, workload: Workload, target: TargetInfo, configs: Sequence[Config],
                on_result: OnResult | None = None) -> list[MeasureResult]: ...

    def close(self) -> None: ...


class Harness:
    """Builds candidates in parallel, isolated workers, then checks and times them with a runner
    (local CPU/GPU or TVM RPC)."""

    def __init__(self, builder: LocalBuilder, runner: Runner) -> None:
        self.builder, self.runner = builder, runner

    @classmethod
    def local(cls, target: TargetInfo, **runner_options: Any) -> "Harness":
        """Builds here and times on this machine's device for `target`, on all the user's cores."""
        return cls(LocalBuilder(), LocalRunner(target.device_type, **runner_options))

    def measure(self, workload: Workload, target: TargetInfo, configs: Sequence[Config],
                on_result: OnResult | None = None) -> list[MeasureResult]:
        builds = self.builder.build(workload, target, configs)
        results = [MeasureResult(error=b.error, message=b.message, build_s=b.seconds) for b in builds]
        built = {i: b.library for i, b in enumerate(builds) if b.library is not None}
        if on_result is not None:
            for index, result in enumerate(results):
                if index not in built:
                    on_result(index, result)
        order = list(built)
        relay = None if on_result is None else lambda j, result: on_result(order[j], result)
        layouts = None
        if workload.constant_weights:  # each kernel takes the weight laid out as its config packs it
            template = tasks.template(workload, target)
            layouts = [template.packed_weight(configs[i]) for i in order]
        runs = self.runner.run(workload, target, list(built.values()), [builds[i].seconds for i in order],
                               on_result=relay, packed_weights=layouts)
        for index, result in zip(order, runs):
            results[index] = result
            os.unlink(built[index])
        return results

    def close(self) -> None:
        self.builder.close()
        self.runner.close()

    def __enter__(self) -> "Harness":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
