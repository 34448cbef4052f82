"""Replayed tuning runs: exactly repeatable, no hardware, and the learned strategy earns its place."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tuner import RecordStore
from search.records import is_ok, load_records, median_cost
from tuner import ReplayMeasurer, run
from tuner.replay import replay_session, trials_to_reach

SLICE = Path(__file__).resolve().parents[1] / "data" / "replay_slice.jsonl"
STORE = RecordStore(SLICE)


def _run(key: str, strategy: str, seed: int) -> int:
    measurer = ReplayMeasurer(STORE)
    best = min(median_cost(r) for r in STORE.select(key) if is_ok(r))
    session = replay_session(measurer, key, strategy=strategy, seed=seed, pretrained=False)
    return trials_to_reach(session, measurer, best)


@pytest.mark.parametrize("key", sorted(STORE.workloads()))
def test_learned_search_reaches_the_best_in_fewer_trials_than_random(key):
    learned = [_run(key, "evolutionary", seed) for seed in range(3)]
    random = [_run(key, "random", seed) for seed in range(5)]
    assert np.median(learned) < np.median(random), (learned, random)


def test_replay_repeats_exactly_and_counts_saved_time():
    key = sorted(STORE.workloads())[0]
    runs = []
    for _ in range(2):
        measurer = ReplayMeasurer(STORE)
        session = replay_session(measurer, key, seed=3, pretrained=False)
        assert run([session], measurer, 12, batch_size=6) == 12
        runs.append([row["config"] for row in session.trace])
        assert measurer.replayed == 12 and measurer.saved_s > 0
    assert runs[0] == runs[1]


def test_a_replayed_session_takes_the_recorded_target_and_keeps_every_recorded_config():
    # Measured on an AVX-512 CPU: a host without it has a space (vector lanes) that rejects some of them.
    path = Path(__file__).resolve().parents[2] / "cost_model" / "data" / "cpu_dense.jsonl.gz"
    records = load_records(path)
    measurer = ReplayMeasurer(path)
    key = next(k for k in sorted({r["workload"] for r in records}) if k.startswith("conv2d"))
    session = replay_session(measurer, key, strategy="random", pretrained=False)
    assert session.target.key == next(r["target"] for r in records if r["workload"] == key)
    assert session.template.space.size == len(measurer.configs(key)) == 1000
    with pytest.raises(ValueError, match="no records"):
        measurer.target("matmul(M=1,N=1,K=1,float32)")
