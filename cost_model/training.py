"""What a ranker learns from: features and throughputs of measured configs, one group per workload."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .base import CostModel

Merged = tuple[np.ndarray, np.ndarray, np.ndarray]  # features, throughputs, group sizes


class TrainingData:
    """Rows added per group (a workload key, or a running number for unnamed groups); shared by
    the sessions of a suite so that one model learns from every workload, and kept by each ranker
    so that `update` can refit on everything it has seen."""

    def __init__(self) -> None:
        self._features: dict[object, list[np.ndarray]] = {}
        self._throughputs: dict[object, list[float]] = {}

    def add(self, group: object, features: np.ndarray, throughputs: Iterable[float]) -> None:
        self._features.setdefault(group, []).extend(np.asarray(features, dtype=np.float32))
        self._throughputs.setdefault(group, []).extend(float(t) for t in throughputs)

    def add_groups(self, features: np.ndarray, throughputs: np.ndarray, groups: np.ndarray) -> None:
        """Consecutive unnamed groups of the given sizes, each kept apart from all others."""
        start = 0
        for size in groups:
            self.add(len(self._throughputs), features[start:start + size], throughputs[start:start + size])
            start += int(size)

    def __len__(self) -> int:
        return sum(len(v) for v in self._throughputs.values())

    def merged(self) -> Merged | None:
        """(features, throughputs, groups) over the groups with two or more rows and a success:
        a lone row or an all-failed group teaches no order."""
        names = [g for g, ts in self._throughputs.items() if len(ts) >= 2 and max(ts) > 0]
        if not names:
            return None
        return (np.stack([f for g in names for f in self._features[g]]),
                np.array([t for g in names for t in self._throughputs[g]]),
                np.array([len(self._throughputs[g]) for g in names]))

    def fit(self, model: CostModel) -> bool:
        """Retrain `model` on everything; False when there is nothing to learn from yet."""
        merged = self.merged()
        if merged is None:
            return False
        model.fit(*merged)
        return True
