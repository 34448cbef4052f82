"""`Measurer`: build a batch, then run it, so that builds never disturb the timings."""

from __future__ import annotations

import os
from typing import Callable, Sequence

from search import Config

from .builder import LocalBuilder
from .measure_result import MeasureResult
from .runner import LocalRunner, Runner


class Measurer:
    def __init__(self, builder: LocalBuilder, runner: Runner):
        self.builder, self.runner = builder, runner

    @classmethod
    def local(cls, target_kind: str, **runner_options) -> "Measurer":
        return cls(LocalBuilder(), LocalRunner("cuda" if target_kind == "cuda" else "cpu", **runner_options))

    def measure(self, workload_key: str, target_json: str, configs: Sequence[Config],
                on_result: Callable[[int, MeasureResult], None] | None = None) -> list[MeasureResult]:
        """One result per config, in order; failures are results, never exceptions.

        `on_result(index, result)` hears of each result as soon as it is known, so that a caller
        can save it before the rest of the batch is done.
        """
        builds = self.builder.build(workload_key, target_json, configs)
        results = [MeasureResult(error=b.error, message=b.message, build_s=b.seconds) for b in builds]
        built = [i for i, b in enumerate(builds) if b.library]
        if on_result is not None:
            for index, result in enumerate(results):
                if index not in built:
                    on_result(index, result)
        relay = None if on_result is None else lambda j, result: on_result(built[j], result)
        runs = self.runner.run(workload_key, target_json, [builds[i].library for i in built],
                               [builds[i].seconds for i in built], on_result=relay)
        for index, result in zip(built, runs):
            results[index] = result
            os.unlink(builds[index].library)
        return results

    def close(self) -> None:
        self.builder.close()
        self.runner.close()

    def __enter__(self) -> "Measurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
