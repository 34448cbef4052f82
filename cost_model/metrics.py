"""Ranking metrics of a cost model on measured records (TenSet's top-k among them)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import numpy as np

from search.config import config_id
from search.records import is_ok, median_cost

from .base import CostModel
from .dataset import Dataset, records_to_dataset


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(len(values))
    return ranks


def group_metrics(scores: np.ndarray, throughputs: np.ndarray) -> dict[str, float]:
    """Pairwise accuracy, Spearman correlation, and top-k: best throughput among the model's top k
    over the best throughput of all (1.0 means the model's top k holds the best)."""
    ok = throughputs > 0
    diff_t = np.sign(throughputs[:, None] - throughputs[None, :])
    diff_s = np.sign(scores[:, None] - scores[None, :])
    pairs = diff_t != 0
    pairwise = float((diff_t[pairs] == diff_s[pairs]).mean()) if pairs.any() else float("nan")
    spearman = float(np.corrcoef(_ranks(scores), _ranks(throughputs))[0, 1]) if len(scores) > 2 else float("nan")
    order = np.argsort(-scores, kind="stable")
    best = throughputs.max() if ok.any() else 1.0
    return {"pairwise_accuracy": pairwise, "spearman": spearman,
            "top1": float(throughputs[order[:1]].max() / best), "top5": float(throughputs[order[:5]].max() / best)}


def mean_over_workloads(per_workload: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """Each metric's mean over the workloads (every workload weighs the same), and `per_workload`."""
    def mean(values: list[float]) -> float:
        return float(np.nanmean(values)) if np.isfinite(values).any() else float("nan")

    overall = {k: mean([m[k] for m in per_workload.values()]) for k in ("pairwise_accuracy", "spearman", "top1", "top5")}
    return {**overall, "per_workload": dict(per_workload)}


def dataset_metrics(model: CostModel, dataset: Dataset) -> dict[str, Any]:
    """Metrics per workload and their mean."""
    scores = model.predict(dataset.features)
    bounds = np.concatenate([[0], np.cumsum(dataset.groups)])
    return mean_over_workloads({w: group_metrics(scores[lo:hi], dataset.throughputs[lo:hi])
                                for w, lo, hi in zip(dataset.workloads, bounds[:-1], bounds[1:])})


def repeat_agreement(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """How well each successful record's first timing repeat ranks the records by their second,
    per workload and their mean: what back-to-back measurement noise alone allows."""
    repeats: dict[str, list[list[float]]] = {}
    for record in records:
        if record.get("error") == "none" and len(record.get("costs") or []) >= 2:
            repeats.setdefault(record["workload"], []).append(record["costs"][:2])
    per_workload: dict[str, dict[str, float]] = {}
    for workload, costs in repeats.items():
        first, second = 1 / np.array(costs).T
        per_workload[workload] = group_metrics(first, second)
    return mean_over_workloads(per_workload)


def pass_agreement(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """How well each config's first timing pass ranks the configs by their second pass, taken
    minutes later, per workload and their mean: what the host's drift alone allows. Only configs
    that succeeded in two records count."""
    passes: dict[str, dict[tuple[str, str], list[float]]] = {}  # workload -> (target, config id) -> latencies
    for record in records:
        if is_ok(record):
            timings = passes.setdefault(record["workload"], {}).setdefault((record["target"], config_id(record["config"])), [])
            timings.append(median_cost(record))
    per_workload: dict[str, dict[str, float]] = {}
    for workload, by_config in passes.items():
        twice = np.array([t[:2] for t in by_config.values() if len(t) >= 2])
        if len(twice) > 2:
            first, second = 1 / twice.T
            per_workload[workload] = group_metrics(first, second)
    return mean_over_workloads(per_workload)


def ranking_metrics(model: CostModel, records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """`records`: a RecordStore or any iterable of record dicts."""
    return dataset_metrics(model, records_to_dataset(records))
