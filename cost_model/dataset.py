"""Records to training data: features, throughputs and one query group per workload."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable, Mapping

import numpy as np

from search import Config, InvalidConfig, template_for
from search.records import RecordStore, fastest_per_config, median_cost
from search.targets import TargetInfo
from workloads import from_key

from .features import FEATURE_NAMES, FeatureExtractor


@lru_cache(maxsize=64)
def extractor_for(workload_key: str, target_key: str) -> FeatureExtractor:
    return FeatureExtractor(template_for(from_key(workload_key), TargetInfo.from_key(target_key)))


@dataclass
class Dataset:
    features: np.ndarray
    throughputs: np.ndarray  # FLOP/s; 0 for a failed candidate
    groups: np.ndarray  # sizes of consecutive per-workload groups
    workloads: list[str]  # one key per group

    def subset(self, keep: Iterable[str]) -> "Dataset":
        keep = set(keep)
        bounds = np.concatenate([[0], np.cumsum(self.groups)])
        rows = [np.arange(lo, hi) for w, lo, hi in zip(self.workloads, bounds[:-1], bounds[1:]) if w in keep]
        index = np.concatenate(rows) if rows else np.zeros(0, dtype=int)
        return Dataset(self.features[index], self.throughputs[index],
                       np.array([len(r) for r in rows], dtype=np.int64),
                       [w for w in self.workloads if w in keep])


def join(*datasets: Dataset) -> Dataset:
    """One dataset of several with distinct workloads, their groups kept apart; of none, an empty one."""
    if not datasets:
        return Dataset(np.zeros((0, len(FEATURE_NAMES)), dtype=np.float32), np.zeros(0), np.zeros(0, dtype=np.int64), [])
    names = [w for d in datasets for w in d.workloads]
    if len(set(names)) != len(names):
        raise ValueError("the datasets share workloads; join keeps each workload's group whole, so they must not")
    return Dataset(np.concatenate([d.features for d in datasets]), np.concatenate([d.throughputs for d in datasets]),
                   np.concatenate([d.groups for d in datasets]), names)


def throughput(record: Mapping[str, Any]) -> float:
    """FLOP/s of a record's kernel; 0 for a failed candidate."""
    latency = median_cost(record)
    return from_key(record["workload"]).flops / latency if np.isfinite(latency) else 0.0


def records_to_dataset(records: Iterable[Mapping[str, Any]]) -> Dataset:
    """Group records by (workload, target) and extract features of their configs; a config timed
    more than once counts once, with its fastest timing."""
    by_group: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for record in fastest_per_config(records):
        by_group.setdefault((record["workload"], record["target"]), []).append(record)
    features: list[np.ndarray] = []
    throughputs: list[np.ndarray] = []
    groups: list[int] = []
    names: list[str] = []
    for (workload, target), group in by_group.items():
        extractor = extractor_for(workload, target)
        valid: list[tuple[Config, float]] = []
        for record in group:
            config = Config.from_json(record["config"])
            if extractor.template.space.is_valid(config):
                valid.append((config, throughput(record)))
        if not valid:
            continue
        features.append(extractor([c for c, _ in valid]))
        throughputs.append(np.array([t for _, t in valid]))
        groups.append(len(valid))
        names.append(workload)
    if not features:
        raise InvalidConfig("no usable records: none of their configs fits the current search space")
    return Dataset(np.concatenate(features), np.concatenate(throughputs), np.array(groups), names)


def files_to_dataset(paths: Iterable[str]) -> Dataset:
    """The records of several files, whose workloads must differ, as one dataset; empty for none."""
    return join(*(records_to_dataset(RecordStore(path)) for path in paths))


def split_by_workload(dataset: Dataset, holdout: Iterable[str]) -> tuple[Dataset, Dataset]:
    """(train, test) with the `holdout` workloads only in test."""
    holdout = set(holdout)
    return (dataset.subset([w for w in dataset.workloads if w not in holdout]),
            dataset.subset([w for w in dataset.workloads if w in holdout]))
