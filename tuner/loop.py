"""The one tuning loop: ask a session for a batch, measure it, tell the session; over one session
or a suite's, until the budget is spent, a stop condition holds or the spaces run out.

`tune`, `tune_suite`, replayed runs and the benchmarks all go through `run`.
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from search import Config
from search.records import MeasureResult

from .defaults import BATCH_SIZE
from .measure import Measurer
from .session import Session

ALPHA = 0.2  # weight of the observed gain against the optimistic one (Ansor: Zheng et al., OSDI 2020, sec. 6)
WINDOW = 3  # batches the observed gain is averaged over


class GradientScheduler:
    """Which session gets the next batch: after one batch each, the one whose weighted latency is
    expected to drop most (Ansor's task scheduler): weight x latency x a blend of its observed
    relative gain per batch over the last few batches and an optimistic guess that shrinks with
    the trials it has had (batch size / trials so far, resumed ones included). The guess keeps any
    one task from taking every batch: trials end up roughly in proportion to weighted latency."""

    def __init__(self, weights: Sequence[float], batch_size: int = BATCH_SIZE) -> None:
        self.weights = list(weights)
        self.batch_size = batch_size
        self.history: list[list[float]] = [[] for _ in self.weights]

    def next(self, sessions: Sequence[Session], skip: set[int]) -> int:
        untried = [i for i, h in enumerate(self.history) if not h and not sessions[i].measured and i not in skip]
        if untried:
            return untried[0]
        gains = []
        for i, (weight, session, h) in enumerate(zip(self.weights, sessions, self.history)):
            latency = session.best_latency
            if i in skip:
                gains.append(-math.inf)
            elif not np.isfinite(latency):
                gains.append(math.inf)  # nothing works yet: most to gain
            else:
                window = h[-WINDOW - 1:]
                observed = max(window[0] - latency, 0.0) / window[0] / (len(window) - 1) if len(window) > 1 else 0.0
                optimistic = self.batch_size / max(len(session.measured), 1)
                gains.append(weight * latency * (ALPHA * observed + (1 - ALPHA) * optimistic))
        return int(np.argmax(gains))

    def done(self, index: int, session: Session) -> None:
        self.history[index].append(session.best_latency)


@dataclass
class _Batch:
    index: int  # of the session in the run's list
    session: Session
    configs: list[Config]


class _Measuring:
    """A batch measured in a background thread; its results come back on a queue, so that the
    session is only ever touched by the loop's own thread."""

    def __init__(self, batch: _Batch, measurer: Measurer) -> None:
        self.batch = batch
        self.results: queue.Queue[tuple[int, MeasureResult] | None] = queue.Queue()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._measure, args=(measurer,), daemon=True)
        self.thread.start()

    def _measure(self, measurer: Measurer) -> None:
        try:
            measurer.measure(self.batch.session.workload, self.batch.session.target, self.batch.configs,
                             on_result=lambda i, result: self.results.put((i, result)))
        except BaseException as err:  # re-raised in the loop's thread
            self.error = err
        finally:
            self.results.put(None)

    def collect(self, block: bool = True) -> None:
        """Observe (and so save) the results as they arrive, until the batch is done (`block`) or
        until none is waiting; a measurer's error is raised here."""
        while True:
            try:
                item = self.results.get(block=block)
            except queue.Empty:
                return
            if item is None:
                break
            index, result = item
            self.batch.session.observe(self.batch.configs[index], result)
        self.thread.join()
        if self.error is not None:
            raise self.error


def _measure_here(batch: _Batch, measurer: Measurer) -> None:
    """Measure a batch in this thread, observing each result as it comes."""
    measurer.measure(batch.session.workload, batch.session.target, batch.configs,
                     on_result=lambda i, result: batch.session.observe(batch.configs[i], result))


def _propose(sessions: Sequence[Session], scheduler: GradientScheduler, exhausted: set[int], count: int,
             busy: int | None = None) -> _Batch | None:
    """The next batch: the scheduler's pick of the sessions with configs left. A session whose
    first batch is still being measured (`busy`) is not picked again while another can be."""
    while len(exhausted) < len(sessions):
        skip = exhausted | ({busy} if busy is not None and not sessions[busy].measured else set())
        index = scheduler.next(sessions, skip if len(skip) < len(sessions) else exhausted)
        configs = sessions[index].ask(count)
        if configs:
            return _Batch(index, sessions[index], configs)
        exhausted.add(index)
    return None


def run(sessions: Sequence[Session], measurer: Measurer, trials: int, *, batch_size: int = BATCH_SIZE,
        scheduler: GradientScheduler | None = None, stop: Callable[[], bool] | None = None,
        on_batch: Callable[[Session, int], None] | None = None) -> int:
    """Measure up to `trials` configs over `sessions`; returns how many were measured.

    Every result is observed (and so saved) as soon as the measurer has it, and the round is
    closed (the model retrains) after the batch. `stop()` is asked before each batch; Ctrl-C ends
    the loop with every finished measurement saved. `on_batch(session, count)` hears of each batch.
    With a measurer that times on other machines (`remote`), the next batch is proposed while the
    current one is measured, and the model retrains while the next one is.
    """
    if not sessions:
        raise ValueError("run needs at least one session")
    scheduler = scheduler or GradientScheduler([1.0] * len(sessions), batch_size)
    exhausted: set[int] = set()
    done = 0

    def close(batch: _Batch) -> None:
        nonlocal done
        batch.session.end_round(batch.configs)
        done += len(batch.configs)
        scheduler.done(batch.index, batch.session)
        if on_batch is not None:
            on_batch(batch.session, len(batch.configs))

    def proposed(in_flight: int, busy: int | None = None) -> _Batch | None:
        if done + in_flight >= trials or (stop is not None and stop()):
            return None
        return _propose(sessions, scheduler, exhausted, min(batch_size, trials - done - in_flight), busy)

    measuring: _Measuring | None = None
    try:
        if not getattr(measurer, "remote", False):  # measuring here: nothing may run beside it
            while (batch := proposed(0)) is not None:
                _measure_here(batch, measurer)
                close(batch)
            return done
        while True:
            batch = proposed(len(measuring.batch.configs), measuring.batch.index) if measuring else proposed(0)
            if measuring is not None:
                measuring.collect()
            previous, measuring = measuring, (_Measuring(batch, measurer) if batch is not None else None)
            if previous is not None:
                close(previous.batch)
            if measuring is None:
                return done
    except KeyboardInterrupt:
        if measuring is not None:
            measuring.collect(block=False)  # what finished is saved; the rest is dropped
        return done  # finished measurements are on disk already
