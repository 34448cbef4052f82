"""The one tuning loop: ask a session for a batch, measure it, tell the session; over one session
or a suite's, until the budget is spent, a stop condition holds or the spaces run out.

`tune`, `tune_suite`, replayed runs and the benchmarks all go through `run`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

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


def run(sessions: Sequence[Session], measurer: Measurer, trials: int, *, batch_size: int = BATCH_SIZE,
        scheduler: GradientScheduler | None = None, stop: Callable[[], bool] | None = None,
        on_batch: Callable[[Session, int], None] | None = None) -> int:
    """Measure up to `trials` configs over `sessions`; returns how many were measured.

    Every result is observed (and so saved) as soon as the measurer has it, and the round is
    closed (the model retrains) after the batch. `stop()` is asked before each batch; Ctrl-C ends
    the loop with every finished measurement saved. `on_batch(session, count)` hears of each batch.
    """
    if not sessions:
        raise ValueError("run needs at least one session")
    scheduler = scheduler or GradientScheduler([1.0] * len(sessions), batch_size)
    exhausted: set[int] = set()
    done = 0
    try:
        while done < trials and len(exhausted) < len(sessions):
            if stop is not None and stop():
                break
            index = scheduler.next(sessions, exhausted)
            session = sessions[index]
            configs = session.ask(min(batch_size, trials - done))
            if not configs:
                exhausted.add(index)
                continue
            results = measurer.measure(session.workload, session.target, configs,
                                       on_result=lambda i, result: session.observe(configs[i], result))
            session.end_round(configs)
            done += len(results)
            scheduler.done(index, session)
            if on_batch is not None:
                on_batch(session, len(configs))
    except KeyboardInterrupt:
        pass  # finished measurements are on disk already
    return done
