"""`LightGBMRanker`: LambdaRank over program features, retrained after every measured batch."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union, cast

import numpy as np

from .base import check_data, relevance
from .training import TrainingData

if TYPE_CHECKING:
    import lightgbm

InitModel = Union[str, "os.PathLike[str]", "LightGBMRanker", None]  # a model file, or a fitted ranker


class LightGBMRanker:
    """Ranks candidates within a workload; `init_model` (a path or a fitted ranker) is transfer:
    training continues from its trees instead of starting from nothing. `query_rows` caps a
    LightGBM query: a workload's records are cut into queries of that many rows or fewer.
    `booster_params` adds or overrides LightGBM settings (e.g. `feature_fraction`), for trying a
    recipe without a new argument for each."""

    def __init__(self, *, num_boost_round: int = 80, learning_rate: float = 0.1, num_leaves: int = 31,
                 min_data_in_leaf: int = 5, query_rows: int = 128, seed: int = 0,
                 init_model: InitModel = None, booster_params: Mapping[str, Any] | None = None) -> None:
        self.num_boost_round = num_boost_round
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.min_data_in_leaf = min_data_in_leaf
        self.query_rows = query_rows
        self.seed = seed
        self.init_model = init_model
        self.booster_params = dict(booster_params or {})
        self.booster_: lightgbm.Booster | None = None
        self.base_booster_ = self._load_base(init_model)
        self._data = TrainingData()

    @staticmethod
    def _load_base(init_model: InitModel) -> lightgbm.Booster | None:
        import lightgbm

        if init_model is None:
            return None
        if isinstance(init_model, LightGBMRanker):
            return init_model.booster_
        path = Path(init_model)
        try:
            return lightgbm.Booster(model_str=path.read_text())
        except (OSError, UnicodeDecodeError, lightgbm.basic.LightGBMError) as err:
            raise ValueError(f"{path} is not a LightGBM model file: {str(err).splitlines()[0]}") from None

    @property
    def params(self) -> dict[str, Any]:
        return {"objective": "lambdarank", "learning_rate": self.learning_rate, "num_leaves": self.num_leaves,
                "min_data_in_leaf": self.min_data_in_leaf, "seed": self.seed, "deterministic": True,
                "num_threads": 1, "verbose": -1, "label_gain": list(range(32)), "feature_pre_filter": False,
                "lambdarank_truncation_level": self.query_rows, **self.booster_params}

    def _queries(self, groups: np.ndarray) -> tuple[np.ndarray, list[int]]:
        """Rows in random order within each group, cut into LightGBM queries of `query_rows` or fewer.

        LambdaRank's cost grows with the square of a query's rows it looks at: with the online
        defaults, 3,000 rows took 5.2 s to fit as one query and 1.8 s as random queries of 128 rows,
        every pair of each counted, which ranked held-out workloads about as well. Retraining after
        every batch needs the small queries; the shipped model, trained once, keeps workloads whole
        (see `PRETRAINED_PARAMS`).
        """
        rng = np.random.default_rng(self.seed)
        order: list[np.ndarray] = []
        queries: list[int] = []
        start = 0
        for size in groups:
            rows = start + rng.permutation(size)
            for first in range(0, size, self.query_rows):
                order.append(rows[first:first + self.query_rows])
                queries.append(len(order[-1]))
            start += size
        return np.concatenate(order), queries

    def fit(self, features: np.ndarray, throughputs: np.ndarray, groups: np.ndarray) -> "LightGBMRanker":
        """Train on this data only (plus the transferred trees)."""
        self._data = TrainingData()
        return self.update(features, throughputs, groups)

    def update(self, features: np.ndarray, throughputs: np.ndarray, groups: np.ndarray) -> "LightGBMRanker":
        """Add data and retrain on everything seen so far."""
        import lightgbm

        self._data.add_groups(*check_data(features, throughputs, groups))
        merged = self._data.merged()
        if merged is None:
            return self
        x, y, g = merged
        order, queries = self._queries(g)
        dataset = lightgbm.Dataset(x[order], relevance(y, g)[order], group=queries, free_raw_data=True)
        self.booster_ = lightgbm.train(self.params, dataset, num_boost_round=self.num_boost_round,
                                       init_model=self.base_booster_, keep_training_booster=False)
        return self

    def predict(self, features: np.ndarray) -> np.ndarray:
        booster = self.booster_ or self.base_booster_
        features = np.asarray(features, dtype=np.float32)
        if booster is None:
            return np.zeros(len(features))
        # sparse results are for sparse inputs or contribution output: a dense matrix gets a vector
        return cast(np.ndarray, booster.predict(features))

    def feature_importance(self) -> np.ndarray:
        booster = self.booster_ or self.base_booster_
        return booster.feature_importance("gain") if booster else np.zeros(0)

    def save(self, path: str | os.PathLike[str]) -> None:
        booster = self.booster_ or self.base_booster_
        if booster is None:
            raise ValueError("nothing to save: the ranker has not been fitted")
        Path(path).write_text(booster.model_to_string())

    @classmethod
    def load(cls, path: str | os.PathLike[str], **params: Any) -> "LightGBMRanker":
        """A ranker that predicts with the saved trees and keeps learning on top of them."""
        return cls(init_model=path, **params)
