"""The Python API: `tune` one workload, `tune_suite` a model's layers, `apply_best` from records."""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from search import Config, resolve_target, target_key
from workloads import Suite, Workload

from .defaults import BATCH_SIZE
from .measurer import Measurer
from .records import RecordError, RecordStore
from .result import Kernel, TuneResult
from .session import Session
from .training import TrainingData


def _check_budget(trials: int, time_budget_s, early_stopping, batch_size: int) -> None:
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials must be a positive integer, got {trials!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if time_budget_s is not None and time_budget_s <= 0:
        raise ValueError(f"time_budget_s must be positive, got {time_budget_s}")
    if early_stopping is not None and early_stopping < 1:
        raise ValueError(f"early_stopping must be >= 1 trial, got {early_stopping}")


def _trace_frame(rows: list[dict]):
    import pandas as pd

    columns = ["round", "config", "predicted_score", "latency_s", "error", "best_latency_s", "best_gflops",
               "elapsed_s", "build_s", "run_s"]
    return pd.DataFrame(rows, columns=columns)


class _Progress:
    """A tqdm bar (trials, best GFLOPS, errors) or nothing; never hand-written carriage returns."""

    def __init__(self, total: int, label: str, enabled: bool):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=label, unit="trial", leave=True)

    def update(self, done: int, best_gflops: float, errors: int) -> None:
        if self.bar is not None:
            self.bar.update(done)
            self.bar.set_postfix(best=f"{best_gflops:.1f} GFLOPS", errors=errors, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _measure_batch(session: Session, measurer: Measurer, size: int):
    configs = session.ask(size)
    if not configs:
        return 0
    results = measurer.measure(session.workload.key, str(session.target), configs,
                               on_result=lambda i, r: session.record(configs[i], r))
    session.tell(configs, results)
    return len(configs)


def _result(session: Session) -> TuneResult:
    return TuneResult(session.workload, session.target, session.best_config, session.best_latency,
                      _trace_frame(session.trace), session.errors())


def tune(workload: Workload, target: Any = "llvm", *, trials: int = 64, records: str | None = None, seed: int = 0,
         strategy: str = "evolutionary", model: str = "lightgbm", pretrained: bool = True, progress: bool = True,
         time_budget_s: float | None = None, early_stopping: int | None = None, batch_size: int = BATCH_SIZE,
         measurer: Measurer | None = None) -> TuneResult:
    """Tune one workload; stops at `trials`, at `time_budget_s`, or after `early_stopping` trials
    without improvement. Ctrl-C stops it too, with every finished measurement saved."""
    _check_budget(trials, time_budget_s, early_stopping, batch_size)
    session = Session(workload, target, strategy=strategy, model=model, pretrained=pretrained,
                      records=records, seed=seed)
    owned = measurer is None
    measurer = measurer or Measurer.local(session.target.kind.name)
    bar = _Progress(trials, workload.key, progress)
    start, last_gain, best, done = time.monotonic(), 0, math.inf, 0
    try:
        from tqdm.contrib.logging import logging_redirect_tqdm

        with logging_redirect_tqdm() if progress else nullcontext():
            while done < trials:
                if time_budget_s is not None and time.monotonic() - start >= time_budget_s:
                    break
                count = _measure_batch(session, measurer, min(batch_size, trials - done))
                if count == 0:
                    break  # the space is exhausted
                done += count
                if session.best_latency < best:
                    best, last_gain = session.best_latency, done
                bar.update(count, _result(session).gflops, sum(session.errors().values()))
                if early_stopping is not None and done - last_gain >= early_stopping:
                    break
    except KeyboardInterrupt:
        pass  # finished measurements are already on disk; return what was found
    finally:
        bar.close()
        if owned:
            measurer.close()
    return _result(session)


def apply_best(workload: Workload, target: Any = "llvm", records: str = "runs.jsonl") -> Kernel:
    """The best kernel recorded for `workload` on `target`, compiled, with no tuning."""
    resolved = resolve_target(target)
    record = RecordStore(records).best(workload.key, target_key(resolved))
    if record is None:
        raise RecordError(f"{records} has no successful record of {workload.key} on {target_key(resolved)}")
    return Kernel(workload, resolved, Config.from_json(record["config"]))


@dataclass
class SuiteResult:
    suite: Suite
    results: dict[str, TuneResult]  # by workload key

    @property
    def weighted_latency(self) -> float:
        """Estimated end-to-end seconds of the suite's layers: sum of weight x best latency."""
        return sum(e.weight * self.results[e.workload.key].best_latency for e in self.suite)

    def table(self):
        import pandas as pd

        return pd.DataFrame([{"workload": e.workload.key, "layer": e.layer, "weight": e.weight,
                              "trials": len(self.results[e.workload.key].trace),
                              "best_latency_s": self.results[e.workload.key].best_latency,
                              "gflops": self.results[e.workload.key].gflops} for e in self.suite])


def tune_suite(suite: Suite, target: Any = "llvm", *, trials: int = 2000, records: str | None = None,
               seed: int = 0, strategy: str = "evolutionary", model: str = "lightgbm", pretrained: bool = True,
               progress: bool = True, batch_size: int = BATCH_SIZE, measurer: Measurer | None = None) -> SuiteResult:
    """Share `trials` over the suite's workloads and one cost model.

    After one batch each, the next batch goes to the workload whose weighted latency is expected
    to drop most: weight x latency x its recent relative gain per trial (Ansor's gradient idea),
    with a floor so that no workload is starved.
    """
    _check_budget(trials, None, None, batch_size)
    store = RecordStore(records) if records else None
    training = TrainingData()
    shared = None
    sessions = []
    for entry in suite:
        session = Session(entry.workload, target, strategy=strategy, model=shared or model, pretrained=pretrained,
                          records=store, seed=seed, training=training, shared_records=True)
        shared = session.model
        sessions.append(session)
    owned = measurer is None
    measurer = measurer or Measurer.local(sessions[0].target.kind.name)
    bar = _Progress(trials, suite.name, progress)
    history: list[list[float]] = [[] for _ in sessions]
    done = 0
    try:
        while done < trials:
            index = _next_task(suite, sessions, history)
            count = _measure_batch(sessions[index], measurer, min(batch_size, trials - done))
            history[index].append(sessions[index].best_latency)
            done += count
            total = sum(e.weight * s.best_latency for e, s in zip(suite, sessions))
            bar.update(count, 0.0 if not np.isfinite(total) else sum(e.workload.flops * e.weight for e in suite)
                       / total / 1e9, sum(sum(s.errors().values()) for s in sessions))
            if count == 0 and all(not s.template.space.sample(s.rng, 1, exclude=s.measured) for s in sessions):
                break
    except KeyboardInterrupt:
        pass
    finally:
        bar.close()
        if owned:
            measurer.close()
    return SuiteResult(suite, {s.workload.key: _result(s) for s in sessions})


def _next_task(suite: Suite, sessions: list[Session], history: list[list[float]]) -> int:
    untried = [i for i, h in enumerate(history) if not h]
    if untried:
        return untried[0]
    gains = []
    for entry, session, h in zip(suite, sessions, history):
        latency = session.best_latency
        if not np.isfinite(latency):
            gains.append(math.inf)  # nothing works yet: most to gain
            continue
        previous = h[-3] if len(h) >= 3 else h[0]
        relative = (previous - latency) / previous if np.isfinite(previous) else 1.0
        gains.append(entry.weight * latency * max(relative / max(len(h[-3:]), 1), 0.02))
    return int(np.argmax(gains))
