"""Replayed tuning runs: sessions over a record file's configs, measured by `ReplayMeasurer`, so
that strategies and cost models are compared in seconds, with no hardware and no noise."""

from __future__ import annotations

from typing import Any

from workloads import from_key

from .loop import run
from .measure import ReplayMeasurer
from .session import Session


def replay_session(measurer: ReplayMeasurer, workload_key: str, **options: Any) -> Session:
    """A session over the workload's recorded configs on their recorded target; `options` go to
    `Session` (`candidates` narrows the configs further)."""
    options.setdefault("candidates", measurer.configs(workload_key))
    return Session(from_key(workload_key), measurer.target(workload_key), **options)


def trials_to_reach(session: Session, measurer: ReplayMeasurer, goal_latency: float, batch_size: int = 8,
                    max_trials: int | None = None) -> int:
    """Trials a session needs until its best latency is within `goal_latency` (max_trials if never)."""
    limit = max_trials or session.template.space.size
    done = run([session], measurer, limit, batch_size=batch_size, stop=lambda: session.best_latency <= goal_latency)
    return done if session.best_latency <= goal_latency else limit
