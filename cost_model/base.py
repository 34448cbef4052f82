"""The `CostModel` contract every ranker keeps."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class CostModel(Protocol):
    """Scores candidates so that higher means faster; only the order of scores matters.

    `fit` trains on (features, throughputs, groups), `groups` giving the sizes of consecutive
    query groups (one per workload) whose throughputs are comparable; `update` adds data and
    retrains on everything seen; `predict` works before any fit (it then scores 0).
    Models hold all their state in attributes: no globals.
    """

    def fit(self, features: np.ndarray, throughputs: np.ndarray, groups: np.ndarray) -> "CostModel": ...

    def update(self, features: np.ndarray, throughputs: np.ndarray, groups: np.ndarray) -> "CostModel": ...

    def predict(self, features: np.ndarray) -> np.ndarray: ...

    def save(self, path: str) -> None: ...


def relevance(throughputs: np.ndarray, groups: np.ndarray, levels: int = 31) -> np.ndarray:
    """Integer relevance grades per group: the throughput's rank quantile, in `levels` steps
    (ties share their mean rank; a failed candidate grades 0).

    Grading by rank rather than by the fraction of the group's best spreads the grades over the
    whole group: with grades from (throughput / best)^2, most random candidates shared the lowest
    few grades, and the ranker learned little about their order (held-out pairwise accuracy 0.62
    against 0.70 with rank grades, on the committed records).
    """
    grades = np.zeros(len(throughputs), dtype=np.int32)
    start = 0
    for size in groups:
        part = throughputs[start:start + size]
        ordered = np.sort(part)
        mean_rank = (np.searchsorted(ordered, part, "left") + np.searchsorted(ordered, part, "right") - 1) / 2
        quantile = mean_rank / max(size - 1, 1)
        grades[start:start + size] = np.where(part > 0, np.round(levels * quantile), 0).astype(np.int32)
        start += size
    return grades


def check_data(features: np.ndarray, throughputs: np.ndarray,
               groups: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    features = np.asarray(features, dtype=np.float32)
    throughputs = np.asarray(throughputs, dtype=np.float64)
    groups = np.asarray(groups, dtype=np.int64)
    if features.ndim != 2 or len(features) != len(throughputs) or groups.sum() != len(features):
        raise ValueError(f"features {features.shape}, throughputs {throughputs.shape} and groups summing to "
                         f"{groups.sum()} do not agree")
    return features, throughputs, groups
