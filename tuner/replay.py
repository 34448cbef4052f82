"""`ReplayRunner`: answers measurement requests from a record file instead of hardware.

Paired with a session whose space is restricted to the recorded configs, a whole tuning run
(strategy, draft model, cost model, retraining) replays in seconds and exactly repeats; it
counts the measurement time it saved, so replayed wall-clock figures stay honest.
"""

from __future__ import annotations

import json
from typing import Callable, Sequence

from search import Config
from search.targets import target_from_key
from workloads import from_key

from .measure_result import ErrorKind, MeasureResult
from .records import RecordStore, config_id, fastest_per_config
from .session import Session

DEFAULT_MEASURE_S = 1.0  # assumed per candidate when a record does not say how long it took


class ReplayRunner:
    """Stands in for the whole `Measurer` (same `measure`); a config never recorded is a run_error."""

    def __init__(self, records: str | RecordStore):
        store = records if isinstance(records, RecordStore) else RecordStore(records)
        self._results: dict[tuple[str, str], MeasureResult] = {}
        self._seconds: dict[tuple[str, str], float] = {}
        self._targets: dict[str, str] = {}
        for record in fastest_per_config(store):
            key = (record["workload"], config_id(record["config"]))
            self._targets.setdefault(record["workload"], record["target"])
            self._results[key] = MeasureResult(record["costs"], record["error"], record["message"])
            self._seconds[key] = float(record.get("build_s", 0) + record.get("run_s", 0)) or DEFAULT_MEASURE_S
        self.saved_s = 0.0
        self.replayed = 0

    def configs(self, workload_key: str) -> list[Config]:
        return [Config.from_json(json.loads(cid)) for w, cid in self._results if w == workload_key]

    def target(self, workload_key: str):
        """The target the workload's records were measured on. A replayed session must use it, not
        the host's: the space depends on the CPU (vector lanes), and a config the host's space
        rejects could never be proposed."""
        if workload_key not in self._targets:
            raise ValueError(f"no records of {workload_key}")
        return target_from_key(self._targets[workload_key])

    def session(self, workload_key: str, **options) -> Session:
        """A session over the workload's recorded configs on their recorded target; `options` go to
        `Session` (`candidates` narrows the configs further)."""
        options.setdefault("candidates", self.configs(workload_key))
        return Session(from_key(workload_key), self.target(workload_key), **options)

    def measure(self, workload_key: str, target_json: str, configs: Sequence[Config],
                on_result: Callable[[int, MeasureResult], None] | None = None) -> list[MeasureResult]:
        results = []
        for index, config in enumerate(configs):
            key = (workload_key, config.id)
            result = self._results.get(key, MeasureResult(error=ErrorKind.RUN_ERROR,
                                                          message="config not in the replayed records"))
            self.saved_s += self._seconds.get(key, 0.0)
            self.replayed += 1
            results.append(result)
            if on_result is not None:
                on_result(index, result)
        return results

    def close(self) -> None:
        pass

    def __enter__(self) -> "ReplayRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def trials_to_reach(session, measurer: ReplayRunner, goal_latency: float, batch_size: int = 8,
                    max_trials: int | None = None) -> int:
    """Trials a session needs until its best latency is within `goal_latency` (max_trials if never)."""
    limit = max_trials or session.template.space.size
    done = 0
    while done < limit:
        configs = session.ask(min(batch_size, limit - done))
        if not configs:
            break
        session.tell(configs, measurer.measure(session.workload.key, str(session.target), configs))
        done += len(configs)
        if session.best_latency <= goal_latency:
            return done
    return limit
