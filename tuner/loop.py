"""The one tuning loop: ask a session for a batch, measure it, tell the session; over one session
or a suite's, until the budget is spent, a stop condition holds or the spaces run out.

`tune`, `tune_suite`, replayed runs and the benchmarks all go through `run`.
"""

from __future__ import annotations

import math
import queue
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from search import Config
from search.records import MeasureResult

from .defaults import BATCH_SIZE
from .measure import Measurer
from .session import Session

PIPELINE_DEPTH = 2  # batches measured at once by a remote measurer: nodes a batch's slowest configs
# leave idle start on the next one instead of waiting for the whole batch
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


class _Background:
    """Batches measured in background threads, up to PIPELINE_DEPTH at once; every result comes
    back on one queue, so that sessions are only ever touched by the loop's own thread."""

    def __init__(self, measurer: Measurer) -> None:
        self.measurer = measurer
        self.results: queue.Queue[tuple[_Batch, int | None, Any]] = queue.Queue()
        self.in_flight: list[_Batch] = []

    def start(self, batch: _Batch) -> None:
        self.in_flight.append(batch)
        threading.Thread(target=self._measure, args=(batch,), daemon=True).start()

    def _measure(self, batch: _Batch) -> None:
        error: BaseException | None = None
        try:
            self.measurer.measure(batch.session.workload, batch.session.target, batch.configs,
                                  on_result=lambda i, result: self.results.put((batch, i, result)))
        except BaseException as err:  # raised in the loop's thread
            error = err
        finally:
            self.results.put((batch, None, error))

    def next_finished(self, block: bool = True) -> _Batch | None:
        """Observe (and so save) results as they arrive until a batch is done, and return it;
        a measurer's error is raised here. Not `block`ing: None once no result is waiting."""
        while True:
            try:
                batch, index, value = self.results.get(block=block)
            except queue.Empty:
                return None
            if index is not None:
                batch.session.observe(batch.configs[index], value)
                continue
            self.in_flight.remove(batch)
            if value is not None:
                raise value
            return batch

    def settle(self) -> None:
        """Observe all that the batches still in flight deliver, before an error ends the loop:
        their finished measurements are saved too. Their own errors add nothing to the first."""
        while self.in_flight:
            try:
                self.next_finished()
            except Exception:
                continue


def _measure_here(batch: _Batch, measurer: Measurer) -> None:
    """Measure a batch in this thread, observing each result as it comes."""
    measurer.measure(batch.session.workload, batch.session.target, batch.configs,
                     on_result=lambda i, result: batch.session.observe(batch.configs[i], result))


def _propose(sessions: Sequence[Session], scheduler: GradientScheduler, exhausted: set[int], count: int,
             busy: Collection[int] = ()) -> _Batch | None:
    """The next batch: the scheduler's pick of the sessions with configs left. A session whose
    first batch is still being measured (in `busy`) is not picked again while another can be."""
    while len(exhausted) < len(sessions):
        skip = exhausted | {i for i in busy if not sessions[i].measured}
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
    current one is measured, up to PIPELINE_DEPTH batches are measured at once, and the model
    retrains on each batch as soon as it is done.
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

    def proposed(in_flight: int, busy: Collection[int] = ()) -> _Batch | None:
        if done + in_flight >= trials or (stop is not None and stop()):
            return None
        return _propose(sessions, scheduler, exhausted, min(batch_size, trials - done - in_flight), busy)

    background = _Background(measurer)
    try:
        if not getattr(measurer, "remote", False):  # measuring here: nothing may run beside it
            while (batch := proposed(0)) is not None:
                _measure_here(batch, measurer)
                close(batch)
            return done
        while True:
            if len(background.in_flight) < PIPELINE_DEPTH:
                in_flight = background.in_flight
                batch = proposed(sum(len(b.configs) for b in in_flight), {b.index for b in in_flight})
                if batch is not None:
                    background.start(batch)
                    continue
            if not background.in_flight:
                return done
            finished = background.next_finished()
            assert finished is not None  # it blocks until one is
            close(finished)
    except KeyboardInterrupt:
        while background.next_finished(block=False) is not None:  # what finished is saved; the rest dropped
            pass
        return done  # finished measurements are on disk already
    except Exception:
        background.settle()
        raise
