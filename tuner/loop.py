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

GAIN_FLOOR = 0.02  # relative gain per trial assumed of a task that stopped improving: none is starved


class GradientScheduler:
    """Which session gets the next batch: after one batch each, the one whose weighted latency is
    expected to drop most, weight x latency x its recent relative gain per batch (Ansor's gradient
    idea), with a floor so that no session is starved."""

    def __init__(self, weights: Sequence[float]) -> None:
        self.weights = list(weights)
        self.history: list[list[float]] = [[] for _ in self.weights]

    def next(self, sessions: Sequence[Session], skip: set[int]) -> int:
        untried = [i for i, h in enumerate(self.history) if not h and i not in skip]
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
                previous = h[-3] if len(h) >= 3 else h[0]
                relative = (previous - latency) / previous if np.isfinite(previous) else 1.0
                gains.append(weight * latency * max(relative / max(len(h[-3:]), 1), GAIN_FLOOR))
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
    scheduler = scheduler or GradientScheduler([1.0] * len(sessions))
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
