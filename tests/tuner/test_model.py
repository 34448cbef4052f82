"""`tune_model` and `autotune model`: a user's own small models, captured and tuned end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from search import template_for
from search.records import MeasureResult, RecordStore
from cost_model import draft_score
from tuner import tune_model

ROOT = Path(__file__).resolve().parents[2]


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(19, 37)
        self.down = nn.Linear(37, 11)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def make_cnn() -> nn.Module:
    """A CNN with BatchNorm and odd shapes (the CLI test imports it by name)."""
    return nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.BatchNorm2d(6), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 5 * 5, 3))


class DraftMeasurer:
    """Stands in for hardware: latency falls with the draft score."""

    def measure(self, workload, target, configs, on_result=None):
        template = template_for(workload, target)
        results = [MeasureResult([1e-3 / (1 + draft_score(template, c))]) for c in configs]
        for index, result in enumerate(results):
            if on_result is not None:
                on_result(index, result)
        return results

    def close(self) -> None:
        pass


def test_a_cnn_with_batchnorm_is_tuned_layer_by_layer_and_resumes(tmp_path):
    records = str(tmp_path / "cnn.jsonl")
    options = dict(trials=12, batch_size=3, records=records, progress=False, pretrained=False)
    first = tune_model(make_cnn(), (torch.randn(1, 3, 5, 5),), measurer=DraftMeasurer(), **options)
    epilogues = sorted(e.workload.epilogue for e in first.suite)
    assert epilogues == ["bias", "bias_relu"] and first.suite.coverage == 1.0  # BatchNorm and ReLU folded
    assert len(RecordStore(records)) == 12 and np.isfinite(first.estimated_latency)
    assert set(first.table()["trials"]) >= {3}
    again = tune_model(make_cnn(), (torch.randn(1, 3, 5, 5),), measurer=DraftMeasurer(), **options)
    assert len(RecordStore(records)) == 24 and again.estimated_latency <= first.estimated_latency


def test_the_progress_bar_shows_the_gain_over_torch(tmp_path, capsys):
    result = tune_model(MLP(), (torch.randn(5, 19),), measurer=DraftMeasurer(), trials=4, batch_size=2,
                        records=str(tmp_path / "mlp.jsonl"), pretrained=False)
    bar = capsys.readouterr().err.strip().splitlines()[-1]
    assert "4/4" in bar and f"layers={result.estimated_latency * 1e3:.3g} ms (" in bar and "x torch)" in bar


def test_an_mlp_is_tuned_on_this_cpu_into_correct_kernels(tmp_path):
    result = tune_model(MLP(), (torch.randn(5, 19),), trials=4, batch_size=2, records=str(tmp_path / "mlp.jsonl"),
                        progress=False)
    assert len(result.suite) == 2
    for tuned in result.tuned.results.values():
        assert tuned.workload.constant_weights  # the Linears' weights: laid out once, where a config packs them
        kernel = tuned.compile()
        inputs = tuned.workload.random_inputs(1)
        given = inputs if kernel.packed_weight is None else kernel.packed_weight.packed_inputs(inputs)
        np.testing.assert_allclose(kernel(*given), tuned.workload.reference(*inputs), *tuned.workload.tolerance)


def test_a_model_with_nothing_to_tune_is_a_clear_error():
    with pytest.raises(ValueError, match="no layer of ReLU can be tuned"):
        tune_model(nn.ReLU(), (torch.randn(4),), progress=False)


def test_model_command_tunes_a_users_model_and_reports_coverage(tmp_path):
    records = tmp_path / "cnn.jsonl"
    done = subprocess.run([sys.executable, "-m", "tuner.cli", "model", "--module", "tests.tuner.test_model:make_cnn",
                           "--input-shape", "1,3,5,5", "--trials", "4", "--batch-size", "2", "--model", "lightgbm",
                           "--records", str(records), "--json", "--quiet"],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["coverage_of_gemm_conv_flops"] == 1.0 and len(RecordStore(str(records))) == 4


@pytest.mark.parametrize("args, message", [
    (["model"], "a zoo model name or --module"),
    (["model", "alexnet"], "unknown model 'alexnet'"),
    (["model", "--module", "tests.tuner.test_model"], "package.module:factory"),
    (["model", "--module", "tests.tuner.test_model:missing", "--input-shape", "1,3,5,5"], "missing"),
    (["model", "--module", "tests.tuner.test_model:make_cnn"], "--input-shape"),
    (["model", "--module", "tests.tuner.test_model:make_cnn", "--input-shape", "1,x"], "comma-separated"),
])
def test_model_command_mistakes_are_one_line(args, message):
    done = subprocess.run([sys.executable, "-m", "tuner.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=300)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and message in lines[0], done.stderr
