"""The Python API: `tune` one workload, `tune_suite` a model's layers, `apply_best` from records."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from cost_model import CostModel, TrainingData
from search import Config, TargetInfo, resolve_target
from search.records import RecordError, RecordStore
from workloads import Suite, Workload

from .defaults import BATCH_SIZE
from .loop import GradientScheduler, run
from .measure import Harness, Measurer
from .result import Kernel, TuneResult, trial_table
from .session import Session


def _check_budget(trials: int, time_budget_s: float | None, early_stopping: int | None,
                  batch_size: int | None) -> None:
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 1:
        raise ValueError(f"trials must be a positive integer, got {trials!r}")
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if time_budget_s is not None and time_budget_s <= 0:
        raise ValueError(f"time_budget_s must be positive, got {time_budget_s}")
    if early_stopping is not None and early_stopping < 1:
        raise ValueError(f"early_stopping must be >= 1 trial, got {early_stopping}")


@contextmanager
def _progress(total: int, label: str, enabled: bool,
              postfix: Callable[[], dict[str, Any]]) -> Iterator[Callable[[Session, int], None]]:
    """A tqdm bar (trials and `postfix()`) while the loop runs, as its `on_batch`; never
    hand-written carriage returns, and log lines go above the bar."""
    if not enabled:
        yield lambda session, count: None
        return
    from tqdm.auto import tqdm
    from tqdm.contrib.logging import logging_redirect_tqdm

    with tqdm(total=total, desc=label, unit="trial", leave=True) as bar, logging_redirect_tqdm():
        def update(session: Session, count: int) -> None:
            bar.update(count)
            bar.set_postfix(refresh=False, **postfix())

        yield update


def batch_size_for(asked: int | None, measurer: Measurer | None) -> int:
    """Configs per round: as asked, else BATCH_SIZE, or one per core of a measurer that has more
    (a cluster's `cores`): each machine then gets chunks large enough to build in parallel, and
    a round's search, which costs about the same whatever its size, is spread over more trials."""
    if asked is not None:
        return asked
    return max(BATCH_SIZE, int(getattr(measurer, "cores", 0)))


def resolve_for(target: Any, measurer: Measurer | None) -> TargetInfo:
    """The target to tune for: `target` resolved, or, for a measurer with a target of its own (a
    cluster's CPU), that one, which "llvm" then stands for; any other target must equal it."""
    fixed = getattr(measurer, "target", None)
    if not isinstance(fixed, TargetInfo):
        return resolve_target(target)
    if isinstance(target, str) and target == "llvm":
        return fixed
    asked = resolve_target(target)
    if asked.key != fixed.key:
        raise ValueError(f"target {asked.key} is not the {fixed.key} the measurer times on; "
                         "leave target as 'llvm' to tune for the measurer's CPU")
    return fixed


@contextmanager
def _measurer_for(measurer: Measurer | None, target: TargetInfo) -> Iterator[Measurer]:
    """The caller's measurer, or a local harness for `target`, closed after. Made before the
    sessions, so that its workers start up while the sessions load models and read records."""
    if measurer is not None:
        yield measurer
        return
    with Harness.local(target) as owned:
        yield owned


def _result(session: Session) -> TuneResult:
    return TuneResult(session.workload, session.target, session.best_config, session.best_latency,
                      trial_table(session.trace), session.errors())


def tune(workload: Workload, target: Any = "llvm", *, trials: int = 64, records: str | None = None, seed: int = 0,
         strategy: str = "evolutionary", model: str | CostModel = "lightgbm", pretrained: bool = True,
         progress: bool = True, time_budget_s: float | None = None, early_stopping: int | None = None,
         batch_size: int | None = None, measurer: Measurer | None = None) -> TuneResult:
    """Tune one workload; stops at `trials`, at `time_budget_s`, or after `early_stopping` trials
    without improvement. Ctrl-C stops it too, with every finished measurement saved."""
    _check_budget(trials, time_budget_s, early_stopping, batch_size)
    resolved = resolve_for(target, measurer)
    with _measurer_for(measurer, resolved) as used:
        session = Session(workload, resolved, strategy=strategy, model=model, pretrained=pretrained,
                          records=records, seed=seed)
        _tune_session(session, used, trials, batch_size_for(batch_size, used), time_budget_s, early_stopping,
                      progress)
    return _result(session)


def _tune_session(session: Session, measurer: Measurer, trials: int, batch_size: int,
                  time_budget_s: float | None, early_stopping: int | None, progress: bool) -> None:
    start = time.monotonic()
    done, best, improved_at = 0, math.inf, 0

    def stop() -> bool:
        nonlocal best, improved_at
        if session.best_latency < best:
            best, improved_at = session.best_latency, done
        late = time_budget_s is not None and time.monotonic() - start >= time_budget_s
        stale = early_stopping is not None and done - improved_at >= early_stopping
        return late or stale

    def postfix() -> dict[str, Any]:
        return {"best": f"{_result(session).gflops:.1f} GFLOPS", "errors": sum(session.errors().values())}

    with _progress(trials, session.workload.key, progress, postfix) as bar:
        def on_batch(batch_session: Session, count: int) -> None:
            nonlocal done
            done += count
            bar(batch_session, count)

        run([session], measurer, trials, batch_size=batch_size, stop=stop, on_batch=on_batch)


def apply_best(workload: Workload, target: Any = "llvm", records: str = "runs.jsonl") -> Kernel:
    """The best kernel recorded for `workload` on `target`, compiled, with no tuning."""
    resolved = resolve_target(target)
    record = RecordStore(records).best(workload.key, resolved.key)
    if record is None:
        raise RecordError(f"{records} has no successful record of {workload.key} on {resolved.key}")
    return Kernel(workload, resolved, Config.from_json(record["config"]))


@dataclass
class SuiteResult:
    suite: Suite
    results: dict[str, TuneResult]  # by workload key

    @property
    def weighted_latency(self) -> float:
        """Estimated end-to-end seconds of the suite's layers: sum of weight x best latency."""
        return sum(e.weight * self.results[e.workload.key].best_latency for e in self.suite)

    def table(self) -> Any:
        """A pandas DataFrame, one row per layer: weight, trials, best latency and GFLOPS."""
        import pandas as pd

        return pd.DataFrame([{"workload": e.workload.key, "layer": e.layer, "weight": e.weight,
                              "trials": len(self.results[e.workload.key].trace),
                              "best_latency_s": self.results[e.workload.key].best_latency,
                              "gflops": self.results[e.workload.key].gflops} for e in self.suite])


def tune_suite(suite: Suite, target: Any = "llvm", *, trials: int = 2000, records: str | None = None,
               seed: int = 0, strategy: str = "evolutionary", model: str | CostModel = "lightgbm",
               pretrained: bool = True, progress: bool = True, time_budget_s: float | None = None,
               batch_size: int | None = None, measurer: Measurer | None = None,
               baseline: Mapping[str, float] | None = None) -> SuiteResult:
    """Share `trials` over the suite's workloads and one cost model; the next batch goes to the
    workload whose weighted latency is expected to drop most (`loop.GradientScheduler`). Stops at
    `trials` or `time_budget_s`; Ctrl-C stops it too, with every finished measurement saved.
    `baseline`, seconds per workload key as it runs without tuning (e.g. torch's), lets the
    progress bar show the layers' expected gain so far (layers not measured yet count at it)."""
    _check_budget(trials, time_budget_s, None, batch_size)
    start = time.monotonic()
    resolved = resolve_for(target, measurer)
    with _measurer_for(measurer, resolved) as used:
        sessions = _suite_sessions(suite, resolved, model, records, strategy=strategy, pretrained=pretrained,
                                   seed=seed)

        layers = {s.workload.key: e.layer for e, s in zip(suite, sessions)}
        last = [sessions[0]]

        def postfix() -> dict[str, Any]:
            before = baseline or {}
            total = sum(e.weight * (s.best_latency if np.isfinite(s.best_latency) else
                                    before.get(s.workload.key, np.inf)) for e, s in zip(suite, sessions))
            known = all(e.workload.key in before for e in suite)
            gain = sum(e.weight * before[e.workload.key] for e in suite) / total if known else None
            shown = f"{total * 1e3:.3g} ms" + (f" ({gain:.2f}x torch)" if gain else "") if np.isfinite(total) else "-"
            return {"layers": shown,
                    "task": layers[last[0].workload.key][:40],
                    "errors": sum(sum(s.errors().values()) for s in sessions)}

        def stop() -> bool:
            return time_budget_s is not None and time.monotonic() - start >= time_budget_s

        with _progress(trials, suite.name, progress, postfix) as bar:
            def on_batch(session: Session, count: int) -> None:
                last[0] = session
                bar(session, count)

            size = batch_size_for(batch_size, used)
            run(sessions, used, trials, batch_size=size, stop=stop, on_batch=on_batch,
                scheduler=GradientScheduler([e.weight for e in suite], size))
    return SuiteResult(suite, {s.workload.key: _result(s) for s in sessions})


def _suite_sessions(suite: Suite, target: TargetInfo, model: str | CostModel, records: str | None,
                    **options: Any) -> list[Session]:
    """A session per layer, sharing one records file, one cost model and its training data."""
    store = RecordStore(records) if records else None
    training = TrainingData()
    shared: str | CostModel = model
    sessions = []
    for entry in suite:
        session = Session(entry.workload, target, model=shared, records=store, training=training,
                          shared_records=True, **options)
        shared = session.model
        sessions.append(session)
    return sessions

