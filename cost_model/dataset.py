"""Records to training data: features, throughputs and one query group per workload and host."""

from __future__ import annotations

import itertools
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Iterable, Mapping

import numpy as np

from search import Config, InvalidConfig, template_for
from search.records import fastest_per_config, load_records, median_cost
from search.targets import TargetInfo
from workloads import from_key

from .features import FEATURE_NAMES, FeatureExtractor


@lru_cache(maxsize=128)
def extractor_for(workload_key: str, target: TargetInfo, per_store: bool | None = None) -> FeatureExtractor:
    return FeatureExtractor(template_for(from_key(workload_key), target), per_store=per_store)


def host_name(target: TargetInfo) -> str:
    """The host a group of records was measured on, as reports name it: its CPU and cores."""
    return f"{target.mcpu or target.arch or target.kind}/{target.cores}c"


@dataclass
class Dataset:
    features: np.ndarray
    throughputs: np.ndarray  # FLOP/s; 0 for a failed candidate
    groups: np.ndarray  # sizes of consecutive groups, one per workload and host
    workloads: list[str]  # one workload key per group
    hosts: list[str]  # one `host_name` per group

    def where(self, keep: Callable[[str, str], bool]) -> "Dataset":
        """The groups whose (workload, host) `keep` accepts."""
        bounds = np.concatenate([[0], np.cumsum(self.groups)]).astype(int)
        chosen = [i for i, (w, h) in enumerate(zip(self.workloads, self.hosts)) if keep(w, h)]
        rows = [np.arange(bounds[i], bounds[i + 1]) for i in chosen]
        index = np.concatenate(rows) if rows else np.zeros(0, dtype=int)
        return Dataset(self.features[index], self.throughputs[index], np.array([len(r) for r in rows], dtype=np.int64),
                       [self.workloads[i] for i in chosen], [self.hosts[i] for i in chosen])

    def subset(self, keep: Iterable[str]) -> "Dataset":
        """The groups of the `keep` workloads, on every host."""
        wanted = set(keep)
        return self.where(lambda workload, _: workload in wanted)


def join(*datasets: Dataset) -> Dataset:
    """One dataset of several with distinct (workload, host) groups, kept apart; of none, an empty one."""
    if not datasets:
        return Dataset(np.zeros((0, len(FEATURE_NAMES)), dtype=np.float32), np.zeros(0), np.zeros(0, dtype=np.int64),
                       [], [])
    names = [(w, h) for d in datasets for w, h in zip(d.workloads, d.hosts)]
    if len(set(names)) != len(names):
        raise ValueError("the datasets share a workload on a host; join keeps each group whole, so they must not")
    return Dataset(np.concatenate([d.features for d in datasets]), np.concatenate([d.throughputs for d in datasets]),
                   np.concatenate([d.groups for d in datasets]), [w for w, _ in names], [h for _, h in names])


def throughput(record: Mapping[str, Any]) -> float:
    """FLOP/s of a record's kernel; 0 for a failed candidate."""
    latency = median_cost(record)
    return from_key(record["workload"]).flops / latency if np.isfinite(latency) else 0.0


def record_target(record: Mapping[str, Any]) -> TargetInfo:
    """The target a record was measured for, with the facts of the host that measured it."""
    return _record_target(record["target"], json.dumps(record.get("host"), sort_keys=True))


@lru_cache(maxsize=64)
def _record_target(target_key: str, host: str) -> TargetInfo:
    return TargetInfo.from_record(target_key, json.loads(host))


def records_to_dataset(records: Iterable[Mapping[str, Any]], *, per_store: bool | None = None) -> Dataset:
    """Group records by workload and measuring host (its CPU and cores: records of one host taken on
    different days, with its facts measured anew, form one group, featurized with the first one's
    facts) and extract features of their configs, each for that host; a config timed more than once
    counts once, with its fastest timing. `per_store`: read `PerStoreFeature` too (default: where
    the target does, as tuning does)."""
    by_group: dict[tuple[str, str], tuple[TargetInfo, list[Mapping[str, Any]]]] = {}
    for record in fastest_per_config(records):
        target = record_target(record)
        by_group.setdefault((record["workload"], host_name(target)), (target, []))[1].append(record)
    features: list[np.ndarray] = []
    throughputs: list[np.ndarray] = []
    groups: list[int] = []
    names: list[str] = []
    hosts: list[str] = []
    for (workload, host), (target, group) in by_group.items():
        extractor = extractor_for(workload, target, per_store)
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
        hosts.append(host)
    if not features:
        raise InvalidConfig("no usable records: none of their configs fits the current search space")
    return Dataset(np.concatenate(features), np.concatenate(throughputs), np.array(groups), names, hosts)


def read_dataset(paths: Iterable[str | os.PathLike[str]], *, per_store: bool | None = None) -> Dataset:
    """The records of several files (.jsonl or .jsonl.gz) as one dataset, grouped across files."""
    return records_to_dataset(itertools.chain.from_iterable(load_records(path) for path in paths),
                              per_store=per_store)


def files_to_dataset(paths: Iterable[str]) -> Dataset:
    """The records of several files (.jsonl or .jsonl.gz), whose (workload, host) groups must
    differ, as one dataset; empty for none."""
    return join(*(records_to_dataset(load_records(path)) for path in paths))


def split_by_workload(dataset: Dataset, holdout: Iterable[str]) -> tuple[Dataset, Dataset]:
    """(train, test) with the `holdout` workloads (on every host) only in test."""
    held = set(holdout)
    return dataset.where(lambda w, _: w not in held), dataset.where(lambda w, _: w in held)
