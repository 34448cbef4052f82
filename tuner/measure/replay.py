"""`ReplayMeasurer`: answers measurement requests from a record file instead of hardware.

Paired with a session whose space is restricted to the recorded configs, a whole tuning run
(strategy, draft model, cost model, retraining) replays in seconds and exactly repeats; it
counts the measurement time it saved, so replayed wall-clock figures stay honest. Paced, it
takes each config's recorded time instead (sleeping), which simulates a measuring machine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from search import Config, TargetInfo
from search.config import config_id
from search.records import ErrorKind, MeasureResult, RecordStore, fastest_per_config, load_records
from workloads import Workload

DEFAULT_MEASURE_S = 1.0  # assumed per candidate when a record does not say how long it took


class ReplayMeasurer:
    """A `Measurer` over recorded results; a config never recorded is a run_error. `paced`: sleep
    each config's recorded build and run time before answering, as the machine that measured it did."""

    def __init__(self, records: str | os.PathLike[str] | RecordStore, *, paced: bool = False) -> None:
        """`records`: a record file (.jsonl or .jsonl.gz) or store."""
        store = records if isinstance(records, RecordStore) else load_records(records)
        self._results: dict[tuple[str, str], MeasureResult] = {}
        self._configs: dict[str, list[Config]] = {}
        self._targets: dict[str, tuple[str, Any]] = {}  # workload -> (target key, host facts)
        for record in fastest_per_config(store):
            key = (record["workload"], config_id(record["config"]))
            self._targets.setdefault(record["workload"], (record["target"], record.get("host")))
            self._configs.setdefault(record["workload"], []).append(Config.from_json(record["config"]))
            self._results[key] = MeasureResult(record["costs"], record["error"], record["message"],
                                               build_s=record.get("build_s", 0.0), run_s=record.get("run_s", 0.0))
        self.paced = paced
        self.saved_s = 0.0
        self.replayed = 0

    def configs(self, workload_key: str) -> list[Config]:
        return list(self._configs.get(workload_key, []))

    def target(self, workload_key: str) -> TargetInfo:
        """The target the workload's records were measured on. A replayed session must use it, not
        the host's: the space depends on the CPU (vector lanes), and a config the host's space
        rejects could never be proposed; features read its caches."""
        if workload_key not in self._targets:
            raise ValueError(f"no records of {workload_key}")
        return TargetInfo.from_record(*self._targets[workload_key])

    def measure(self, workload: Workload, target: TargetInfo, configs: Sequence[Config],
                on_result: Callable[[int, MeasureResult], None] | None = None) -> list[MeasureResult]:
        results = []
        for index, config in enumerate(configs):
            key = (workload.key, config.id)
            recorded = self._results.get(key)
            result = recorded or MeasureResult(error=ErrorKind.RUN_ERROR, message="config not in the replayed records")
            seconds = (recorded.build_s + recorded.run_s or DEFAULT_MEASURE_S) if recorded else 0.0
            if self.paced:
                time.sleep(seconds)
            else:
                self.saved_s += seconds
            self.replayed += 1
            results.append(result)
            if on_result is not None:
                on_result(index, result)
        return results

    def close(self) -> None:
        pass

    def __enter__(self) -> "ReplayMeasurer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
