"""What the cost model learns from: features and throughputs of measured configs, per workload."""

from __future__ import annotations

import numpy as np


class TrainingData:
    """Shared by the sessions of a suite, so one model learns from every workload."""

    def __init__(self):
        self._features: dict[str, list[np.ndarray]] = {}
        self._throughputs: dict[str, list[float]] = {}

    def add(self, workload: str, features: np.ndarray, throughputs) -> None:
        self._features.setdefault(workload, []).extend(np.asarray(features, dtype=np.float32))
        self._throughputs.setdefault(workload, []).extend(float(t) for t in throughputs)

    def __len__(self) -> int:
        return sum(len(v) for v in self._throughputs.values())

    def merged(self):
        """(features, throughputs, groups) over workloads with at least two measured configs."""
        names = [w for w, ts in self._throughputs.items() if len(ts) >= 2 and max(ts) > 0]
        if not names:
            return None
        return (np.stack([f for w in names for f in self._features[w]]),
                np.array([t for w in names for t in self._throughputs[w]]),
                np.array([len(self._throughputs[w]) for w in names]))

    def fit(self, model) -> bool:
        """Retrain `model` on everything; False when there is nothing to learn from yet."""
        merged = self.merged()
        if merged is None:
            return False
        model.fit(*merged)
        return True
