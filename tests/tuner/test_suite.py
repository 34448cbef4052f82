"""`tune_suite`: one trial budget and one cost model shared over a suite's layers."""

from __future__ import annotations

import json

import numpy as np
import pytest

import workloads
from cost_model import draft_score
from search import template_for
from tuner import MeasureResult, RecordStore, tune_suite
from workloads import Suite, SuiteEntry

HEAVY = workloads.matmul(16, 24, 8)
LIGHT = workloads.conv2d(1, 4, 6, 6, 8, 3, 3, padding=1)


def suite(heavy_weight: int, light_weight: int) -> Suite:
    return Suite("tiny", "made for the tests", (SuiteEntry(HEAVY, heavy_weight, "heavy"),
                                                SuiteEntry(LIGHT, light_weight, "light")))


class DraftMeasurer:
    """Stands in for hardware: latency falls with the draft score, so every batch can still gain."""

    def __init__(self):
        self.templates = {w.key: template_for(w, "llvm") for w in (HEAVY, LIGHT)}
        self.calls: list[tuple[str, int]] = []

    def measure(self, workload, target, configs, on_result=None):
        self.calls.append((workload.key, len(configs)))
        results = [MeasureResult([1e-3 / (1 + draft_score(self.templates[workload.key], c))]) for c in configs]
        for index, result in enumerate(results):
            if on_result is not None:
                on_result(index, result)
        return results

    def close(self) -> None:
        pass


def test_budget_goes_where_weighted_latency_drops_most(tmp_path):
    measurer = DraftMeasurer()
    result = tune_suite(suite(100, 1), trials=40, batch_size=4, records=str(tmp_path / "suite.jsonl"),
                        progress=False, pretrained=False, measurer=measurer)
    trials = {key: sum(n for k, n in measurer.calls if k == key) for key in (HEAVY.key, LIGHT.key)}
    assert sum(trials.values()) == 40 == len(RecordStore(tmp_path / "suite.jsonl"))
    assert trials[LIGHT.key] >= 4  # every workload gets at least one batch
    assert trials[HEAVY.key] > 2 * trials[LIGHT.key], trials
    expected = 100 * result.results[HEAVY.key].best_latency + result.results[LIGHT.key].best_latency
    assert result.weighted_latency == pytest.approx(expected)
    assert list(result.table()["trials"]) == [trials[HEAVY.key], trials[LIGHT.key]]


def test_suite_resumes_from_its_records_without_remeasuring(tmp_path):
    records = str(tmp_path / "suite.jsonl")
    tune_suite(suite(1, 1), trials=8, batch_size=4, records=records, progress=False, pretrained=False,
               measurer=DraftMeasurer())
    tune_suite(suite(1, 1), trials=8, batch_size=4, records=records, progress=False, pretrained=False,
               measurer=DraftMeasurer())
    keys = [(r["workload"], json.dumps(r["config"], sort_keys=True)) for r in RecordStore(records)]
    assert len(keys) == 16 == len(set(keys))


def test_tiny_suite_run_gives_correct_kernels(tmp_path):
    result = tune_suite(suite(2, 1), trials=6, batch_size=3, records=str(tmp_path / "suite.jsonl"),
                        progress=False, seed=0)
    assert np.isfinite(result.weighted_latency) and result.weighted_latency > 0
    for workload in (HEAVY, LIGHT):
        kernel = result.results[workload.key].compile()
        inputs = workload.random_inputs(3)
        np.testing.assert_allclose(kernel(*inputs), workload.reference(*inputs), *workload.tolerance)
