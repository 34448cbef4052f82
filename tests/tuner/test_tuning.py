"""The tuning loop end to end on tiny shapes and budgets."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import torch
import tvm

import workloads
from cost_model import draft_score
from tuner import MeasureResult, RecordError, RecordStore, Session, apply_best, tune
from tuner.api import batch_size_for
from tuner.defaults import BATCH_SIZE

WORKLOAD = workloads.matmul(16, 24, 8)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    records = tmp_path_factory.mktemp("tune") / "runs.jsonl"
    result = tune(WORKLOAD, "llvm", trials=6, batch_size=3, records=str(records), progress=False, seed=0)
    return result, records


def test_tiny_run_ends_with_a_correct_kernel(first_run, tmp_path):
    result, _ = first_run
    assert result.ok and result.best_latency > 0 and result.gflops > 0
    kernel = result.compile()
    inputs = WORKLOAD.random_inputs(7)
    np.testing.assert_allclose(kernel(*inputs), WORKLOAD.reference(*inputs), *WORKLOAD.tolerance)
    out = kernel(*[torch.from_numpy(x) for x in inputs])
    assert isinstance(out, torch.Tensor)
    np.testing.assert_allclose(out.numpy(), WORKLOAD.reference(*inputs), *WORKLOAD.tolerance)
    library = tvm.runtime.load_module(kernel.export(str(tmp_path / "k.so")))
    args = [tvm.runtime.tensor(x) for x in inputs] + [tvm.runtime.empty(WORKLOAD.output_shapes[0], "float32")]
    library["main"](*args)
    np.testing.assert_allclose(args[-1].numpy(), WORKLOAD.reference(*inputs), *WORKLOAD.tolerance)


def test_trace_has_a_row_per_trial(first_run):
    result, records = first_run
    assert len(result.trace) == 6 == len(RecordStore(records))
    assert list(result.trace["round"]) == [0, 0, 0, 1, 1, 1]
    assert result.trace["best_latency_s"].is_monotonic_decreasing
    assert {"config", "predicted_score", "latency_s", "error", "best_gflops", "elapsed_s"} <= set(result.trace)


def test_resume_does_not_remeasure(first_run):
    _, records = first_run
    again = tune(WORKLOAD, "llvm", trials=4, batch_size=4, records=str(records), progress=False, seed=0)
    ids = [json.dumps(r["config"], sort_keys=True) for r in RecordStore(records)]
    assert len(ids) == 10 and len(set(ids)) == 10
    assert again.best_latency <= min(r["costs"][0] for r in RecordStore(records) if r["costs"]) * 10
    assert apply_best(WORKLOAD, "llvm", records=str(records)).config is not None


def _fake_results(session, configs):
    """Deterministic stand-in measurements: faster where the draft model says so."""
    return [MeasureResult([1e-3 / (1 + draft_score(session.template, c))]) for c in configs]


@pytest.mark.parametrize("strategy", ["evolutionary", "annealing"])
def test_seeded_runs_repeat(strategy):
    asked = []
    for _ in range(2):
        session = Session(WORKLOAD, "llvm", strategy=strategy, seed=11, pretrained=False)
        sequence = []
        for _ in range(3):
            configs = session.ask(4)
            session.tell(configs, _fake_results(session, configs))
            sequence.append([c.id for c in configs])
        asked.append(sequence)
    assert asked[0] == asked[1]
    assert len({c for batch in asked[0] for c in batch}) == 12  # never the same config twice


@pytest.mark.parametrize("agrees", [True, False])
def test_draft_prunes_hard_only_while_it_ranks_the_measurements_well(agrees):
    session = Session(WORKLOAD, "llvm", seed=3, pretrained=False, draft=True)
    configs = session.template.space.sample(np.random.default_rng(3), 16)
    results = _fake_results(session, configs)
    if not agrees:  # the slowest by the draft measured fastest
        results = [MeasureResult([1e-6 / r.latency]) for r in results]
    session.tell(configs, results)
    assert session.scorer.draft_trusted is agrees
    pool = session.template.space.sample(np.random.default_rng(4), 40)
    scored = np.isfinite(session.scorer(pool)).sum()
    assert scored == (12 if agrees else 24)  # 30% of the pool pass the draft, or 60% of it


def test_the_draft_prunes_by_default_only_where_features_lower_each_candidate():
    cpu = Session(WORKLOAD, "llvm", seed=3, pretrained=False)
    pool = cpu.template.space.sample(np.random.default_rng(4), 40)
    assert np.isfinite(cpu.scorer(pool)).all()  # CPU features are read off the config: the ranker scores all
    gpu = Session(WORKLOAD, {"kind": "cuda", "arch": "sm_80"}, seed=3, pretrained=False)
    pool = gpu.template.space.sample(np.random.default_rng(4), 40)
    assert np.isfinite(gpu.scorer(pool)).sum() == 12  # features lower each candidate: the draft keeps 30%


def test_bad_input_gets_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="trials"):
        tune(WORKLOAD, trials=0, progress=False)
    with pytest.raises(ValueError, match="unknown target"):
        tune(WORKLOAD, target="tpu", trials=1, progress=False)
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps({"schema": 1, "workload": WORKLOAD.key, "target": "cuda -arch=sm_90",
                                 "config": {}, "costs": [], "error": "build_error", "message": "",
                                 "timestamp": 0.0, "version": "0"}) + "\n")
    with pytest.raises(RecordError, match="target"):
        tune(WORKLOAD, trials=1, records=str(other), progress=False)


def test_ctrl_c_leaves_a_valid_record_file(tmp_path):
    records = tmp_path / "runs.jsonl"
    process = subprocess.Popen([sys.executable, "-m", "tuner.cli", "tune", "matmul", "--shape", "32,32,32",
                                "--trials", "400", "--batch-size", "2", "--records", str(records), "--quiet"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and (not records.exists() or len(records.read_text().splitlines()) < 3):
        time.sleep(0.5)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode in (0, 130), err
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no line may be cut or garbage
        loaded = RecordStore(records).records()
    assert 3 <= len(loaded) < 400
    assert len({json.dumps(r["config"], sort_keys=True) for r in loaded}) == len(loaded)


def test_a_round_is_one_config_per_core_of_a_measurer_with_more_cores_than_the_default():
    class Cluster:
        cores = 8 * 16

    assert batch_size_for(None, None) == BATCH_SIZE
    assert batch_size_for(None, Cluster()) == 128
    assert batch_size_for(12, Cluster()) == 12  # what the user asks for wins


def test_records_older_than_the_padding_knob_resume_as_inline_padding(tmp_path):
    """A records file written before `pad_at` existed (its configs lack the knob) still resumes:
    each old config counts as measured with inline padding and is not proposed again."""
    conv = workloads.conv2d(1, 4, 6, 6, 4, 3, 3, padding=1)
    records = tmp_path / "old.jsonl"
    session = Session(conv, "llvm", seed=5, pretrained=False, records=str(records))
    configs = [c.replace(pad_at="inline") for c in session.ask(6)]
    session.tell(configs, _fake_results(session, configs))
    lines = [json.loads(line) for line in records.read_text().splitlines()]
    for line in lines:
        del line["config"]["pad_at"]
    records.write_text("".join(json.dumps(line) + "\n" for line in lines))
    resumed = Session(conv, "llvm", seed=6, pretrained=False, records=str(records))
    assert set(resumed.measured) == set(configs)
    for _ in range(3):
        asked = resumed.ask(8)
        assert not set(asked) & set(configs)
        resumed.tell(asked, _fake_results(resumed, asked))


def test_constant_weights_are_timed_as_the_kernel_takes_them():
    """Packing configs of a layer with constant weights are checked and timed with the weight laid
    out beforehand (given as the workload lays it out, the kernel would fail), and the kernel made
    from one takes it so."""
    from search import template_for
    from tuner import Harness
    from tuner.result import Kernel

    conv = workloads.conv2d(1, 8, 6, 6, 16, 3, 3, padding=1, epilogue="bias", constant_weights=True)
    template = template_for(conv, "llvm")
    sampled = template.space.sample(np.random.default_rng(0), 40)
    configs = [c for c in sampled if template.packed_weight(c) is not None][:3]
    assert configs
    with Harness.local(template.target) as harness:
        results = harness.measure(conv, template.target, configs)
    assert all(r.ok for r in results), [r.message for r in results]
    kernel = Kernel(conv, "llvm", configs[0])
    inputs = conv.random_inputs(2)
    assert kernel.packed_weight is not None
    np.testing.assert_allclose(kernel(*kernel.packed_weight.packed_inputs(inputs)), conv.reference(*inputs),
                               *conv.tolerance)
    with pytest.raises(ValueError, match="packed"):
        kernel(*inputs)
