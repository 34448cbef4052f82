"""The failure guarantees: faulty candidates, killed processes, wrong files and bad input."""

from __future__ import annotations

import json
import os
import pickle
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import workloads
from tests import faults
from tuner import Harness, LocalBuilder, LocalRunner, MeasureResult, RecordError, RecordStore, Session, tune

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = workloads.matmul(32, 32, 16)


def test_tuning_completes_its_budget_through_hangs_crashes_and_wrong_results(monkeypatch):
    monkeypatch.setenv("AUTOTUNE_TEST_FAULT_CYCLE", "build_hang,run_crash,wrong,none,none")
    measurer = Harness(LocalBuilder(workers=2, timeout_s=6, build_fn=faults.faulty_build),
                        LocalRunner(timeout_s=10, run_fn=faults.faulty_run))
    with measurer:
        result = tune(WORKLOAD, trials=15, batch_size=15, progress=False, measurer=measurer, pretrained=False)
    assert len(result.trace) == 15
    assert {"build_timeout", "run_error", "wrong_result"} <= set(result.errors), result.errors
    assert result.ok
    kernel = result.compile()
    inputs = WORKLOAD.random_inputs(3)
    np.testing.assert_allclose(kernel(*inputs), WORKLOAD.reference(*inputs), *WORKLOAD.tolerance)


def _cli(*args, **kwargs):
    return subprocess.run([sys.executable, "-m", "tuner.cli", *args], capture_output=True, text=True,
                          timeout=600, cwd=ROOT, **kwargs)


def test_sigkill_five_times_then_resume_loses_nothing_and_repeats_nothing(tmp_path):
    records = tmp_path / "runs.jsonl"
    command = [sys.executable, "-m", "tuner.cli", "tune", "matmul", "--shape", "32,32,16", "--trials", "16",
               "--batch-size", "2", "--records", str(records), "--quiet"]
    temp = tmp_path / "temp"
    temp.mkdir()
    env = dict(os.environ, TMPDIR=str(temp))
    rng = np.random.default_rng(0)
    seen: list[str] = []
    for _ in range(5):
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
        target_lines = len(seen) + int(rng.integers(1, 3))
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and process.poll() is None:
            if records.exists() and len(records.read_bytes().splitlines()) >= target_lines:
                break
            time.sleep(0.05)
        time.sleep(float(rng.uniform(0, 0.5)))
        process.send_signal(signal.SIGKILL)
        process.wait()
        now = [json.dumps(r["config"], sort_keys=True) for r in RecordStore(records)]
        assert now[: len(seen)] == seen  # every finished measurement survived
        seen = now
    assert _cli("tune", "matmul", "--shape", "32,32,16", "--trials", "16", "--batch-size", "2",
                "--records", str(records), "--quiet", env=env).returncode == 0
    final = [json.dumps(r["config"], sort_keys=True) for r in RecordStore(records)]
    assert final[: len(seen)] == seen
    assert len(final) == len(set(final)), "a config was measured twice"
    # Killed runs leave no worker logs (they have no names); only their build folders, which a
    # later run removes once they are an hour old (tests/test_measure.py).
    assert all(p.name.startswith("autotune-build-") for p in temp.iterdir()), list(temp.iterdir())


def test_resume_refuses_records_of_another_workload(tmp_path):
    records = tmp_path / "runs.jsonl"
    tune(workloads.matmul(8, 8, 8), trials=2, batch_size=2, records=str(records), progress=False)
    with pytest.raises(RecordError, match="another records file"):
        tune(WORKLOAD, trials=1, records=str(records), progress=False)


def test_a_run_where_everything_fails_says_so_and_exits_nonzero():
    # No GPU here: every CUDA candidate builds, then fails to run.
    done = _cli("tune", "matmul", "--shape", "8,8,8", "--target", "cuda", "--trials", "2", "--batch-size", "2",
                "--quiet")
    assert done.returncode == 1
    assert "every candidate" in done.stderr and "run_error" in done.stderr


@pytest.mark.parametrize("args, message", [
    (["tune", "matmul", "--shape", "0,4,4"], "M must be a positive integer"),
    (["tune", "matmul", "--shape", "4,4"], "takes 3 sizes"),
    (["tune", "matmul", "--shape", "a,b,c"], "comma-separated integers"),
    (["tune", "conv2d", "--shape", "1,3,4,4,8,7,7"], "larger than the padded input"),
    (["tune", "matmul", "--shape", "4,4,4", "--target", "tpu"], "--target"),
    (["tune", "matmul", "--shape", "4,4,4", "--target", '{"kind": "llvm", "num_cores": 2}'], "num_cores"),
    (["tune", "matmul", "--shape", "4,4,4", "--trials", "0"], "trials"),
    (["suite", "alexnet"], "unknown suite"),
    (["tune", "matmul", "--shape", "4,4,4", "--model", "missing.txt"], "does not exist"),
])
def test_bad_input_is_one_line_and_exit_code_2(args, message):
    done = _cli(*args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and "Traceback" not in done.stderr, done.stderr


def test_bad_files_are_one_line_errors(tmp_path):
    not_json = tmp_path / "notes.csv"
    not_json.write_text("a,b,c\n1,2,3\n")
    other_schema = tmp_path / "old.jsonl"
    other_schema.write_text(json.dumps({"schema": 99, "workload": "x"}) + "\n")
    pickled = tmp_path / "model.txt"
    pickled.write_bytes(pickle.dumps({"evil": True}))
    for args, message in [(["best", str(not_json)], "not a record file"), (["best", str(other_schema)], "schema"),
                          (["tune", "matmul", "--shape", "4,4,4", "--records", str(not_json)], "not a record file"),
                          (["tune", "matmul", "--shape", "4,4,4", "--model", str(pickled)], "not a LightGBM model")]:
        done = _cli(*args)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2 and len(lines) == 1 and message in lines[0], (args, done.stderr)


def test_nothing_is_unpickled_from_files():
    """Records are JSON, models are LightGBM text and torch weights_only; pickle only on worker pipes."""
    offenders = []
    for path in ROOT.glob("*/**/*.py"):
        if ".venv" in path.parts or "tests" in path.relative_to(ROOT).parts:
            continue
        text = path.read_text()
        if re.search(r"pickle\.loads?\(", text) and path.name != "worker.py":
            offenders.append(str(path))
        if re.search(r"torch\.load\((?![^)]*weights_only=True)", text):
            offenders.append(str(path))
    assert not offenders, offenders


def test_a_suite_whose_budget_ends_before_every_layer_had_a_trial_is_not_a_failure(capsys):
    from search import resolve_target
    from tuner.cli import _report
    from tuner.result import TuneResult, trial_table

    target = resolve_target("llvm")
    space = Session(WORKLOAD, target, pretrained=False).template.space
    tried = Session(WORKLOAD, target, pretrained=False)
    config = space.sample(np.random.default_rng(0), 1)[0]
    tried.observe(config, MeasureResult([1e-4]))
    measured = TuneResult(WORKLOAD, target, config, 1e-4, trial_table(tried.trace))
    untried = TuneResult(workloads.matmul(8, 8, 8), target, None, float("inf"), trial_table([]))
    assert _report([measured, untried], as_json=False) == 0
    assert "1 of 2 workloads got no trial" in capsys.readouterr().err
    assert _report([untried], as_json=False) == 1
