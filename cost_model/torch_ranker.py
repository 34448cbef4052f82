"""`TorchRanker`: a small MLP over the same features, trained with a pairwise (RankNet) loss."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import numpy as np

from .base import check_data
from .training import TrainingData

if TYPE_CHECKING:
    import torch


def _network(width: int, hidden: int) -> torch.nn.Sequential:
    import torch

    return torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.ReLU(),
                               torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1))


class TorchRanker:
    def __init__(self, *, hidden: int = 128, epochs: int = 150, learning_rate: float = 3e-3,
                 pairs_per_group: int = 4096, seed: int = 0) -> None:
        self.hidden, self.epochs, self.learning_rate = hidden, epochs, learning_rate
        self.pairs_per_group, self.seed = pairs_per_group, seed
        self.net_: torch.nn.Sequential | None = None
        self.mean_: np.ndarray | None = None
        self.scale_: np.ndarray | None = None
        self._data = TrainingData()

    def fit(self, features: np.ndarray, throughputs: np.ndarray, groups: np.ndarray) -> "TorchRanker":
        self._data = TrainingData()
        self.net_ = None
        return self.update(features, throughputs, groups)

    def update(self, features: np.ndarray, throughputs: np.ndarray, groups: np.ndarray) -> "TorchRanker":
        import torch

        self._data.add_groups(*check_data(features, throughputs, groups))
        merged = self._data.merged()
        if merged is None:
            return self
        x, y, g = merged
        torch.manual_seed(self.seed)
        rng = np.random.default_rng(self.seed)
        self.mean_ = x.mean(axis=0)
        self.scale_ = x.std(axis=0) + 1e-6
        xs = torch.from_numpy((x - self.mean_) / self.scale_).float()
        # Log throughput normalized per group: the target order, comparable across workloads.
        logy = np.log(np.maximum(y, 1e-12))
        bounds = np.concatenate([[0], np.cumsum(g)])
        first, second = [], []
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            a = rng.integers(lo, hi, self.pairs_per_group)
            b = rng.integers(lo, hi, self.pairs_per_group)
            keep = logy[a] != logy[b]
            first.append(a[keep])
            second.append(b[keep])
        a, b = np.concatenate(first), np.concatenate(second)
        target = torch.from_numpy((logy[a] > logy[b]).astype(np.float32))
        self.net_ = _network(x.shape[1], self.hidden)
        optimizer = torch.optim.Adam(self.net_.parameters(), lr=self.learning_rate, weight_decay=1e-4)
        ia, ib = torch.from_numpy(a), torch.from_numpy(b)
        for _ in range(self.epochs):
            optimizer.zero_grad()
            scores = self.net_(xs).squeeze(1)
            loss = torch.nn.functional.binary_cross_entropy_with_logits(scores[ia] - scores[ib], target)
            loss.backward()
            optimizer.step()
        return self

    def predict(self, features: np.ndarray) -> np.ndarray:
        import torch

        features = np.asarray(features, dtype=np.float32)
        if self.net_ is None:
            return np.zeros(len(features))
        with torch.no_grad():
            return self.net_(torch.from_numpy((features - self.mean_) / self.scale_).float()).squeeze(1).numpy()

    def save(self, path: str | os.PathLike[str]) -> None:
        import torch

        if self.net_ is None:
            raise ValueError("nothing to save: the ranker has not been fitted")
        torch.save({"net": self.net_.state_dict(), "mean": torch.from_numpy(self.mean_),
                    "scale": torch.from_numpy(self.scale_), "hidden": self.hidden}, path)

    @classmethod
    def load(cls, path: str | os.PathLike[str], **params: Any) -> "TorchRanker":
        """Load a saved ranker; `weights_only=True`, so no arbitrary object is unpickled."""
        import torch

        try:
            state = torch.load(path, weights_only=True)
            ranker = cls(hidden=int(state["hidden"]), **params)
            ranker.mean_, ranker.scale_ = state["mean"].numpy(), state["scale"].numpy()
            ranker.net_ = _network(len(ranker.mean_), ranker.hidden)
            ranker.net_.load_state_dict(state["net"])
        except Exception as err:  # torch raises many kinds for a file that is not a model
            raise ValueError(f"{path} is not a TorchRanker model file: {str(err).splitlines()[0]}") from None
        return ranker
