"""The measurement harness under faults: every failure is a result of the right kind, the rest go on."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest
import tvm

import search
import workloads
from tests import faults
from tuner import ErrorKind, Harness, LocalBuilder, LocalRunner
from tuner.measure.builder import remove_stale_build_dirs

WORKLOAD = workloads.matmul(64, 64, 64)


@pytest.fixture(scope="module")
def template():
    return search.template_for(WORKLOAD, "llvm")


def test_each_fault_is_reported_by_kind_and_the_rest_are_measured(template, tmp_path, monkeypatch):
    configs = template.space.sample(np.random.default_rng(3), 7)
    kinds = [None, "build_hang", "build_segfault", "wrong", "run_crash", "run_hang", None]
    table = tmp_path / "faults.json"
    faults.write_faults(table, {c: k for c, k in zip(configs, kinds) if k})
    monkeypatch.setenv("AUTOTUNE_TEST_FAULTS", str(table))
    builder = LocalBuilder(workers=2, timeout_s=8, build_fn=faults.faulty_build)
    runner = LocalRunner(timeout_s=8, run_fn=faults.faulty_run)
    with Harness(builder, runner) as measurer:
        results = measurer.measure(WORKLOAD, template.target, configs)
    assert [r.error for r in results] == [ErrorKind.NONE, ErrorKind.BUILD_TIMEOUT, ErrorKind.BUILD_ERROR,
                                          ErrorKind.WRONG_RESULT, ErrorKind.RUN_ERROR, ErrorKind.RUN_TIMEOUT,
                                          ErrorKind.NONE]
    assert results[0].ok and results[-1].ok and results[0].latency > 0
    assert "about to crash in code generation" in results[2].message  # the worker's own output is kept
    assert "killed by SIGSEGV" in results[2].message
    assert "max abs error" in results[3].message
    # Hung workers are killed on time, measured from when they took the task.
    assert 8 <= results[1].build_s < 12 and 8 <= results[5].run_s < 12


def test_time_limits_start_when_a_worker_takes_the_task(template, monkeypatch):
    """Three 1.5 s builds on one worker with a 2.5 s limit: queueing is not held against them."""
    configs = template.space.sample(np.random.default_rng(4), 3)
    builder = LocalBuilder(workers=1, timeout_s=2.5, build_fn=faults.slow_build)
    try:
        builder.build(WORKLOAD, template.target, configs[:1])  # start the worker (imports TVM)
        results = builder.build(WORKLOAD, template.target, configs)
    finally:
        builder.close()
    assert [r.error for r in results] == [ErrorKind.NONE] * 3


def test_measured_latency_is_of_a_correct_kernel(template):
    configs = template.space.sample(np.random.default_rng(5), 2)
    with Harness.local(template.target, repeat=2) as measurer:
        results = measurer.measure(WORKLOAD, template.target, configs)
    assert all(r.ok and len(r.costs) == 2 for r in results)


def test_build_folders_of_killed_runs_are_removed_and_no_others(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    killed = tmp_path / f"autotune-build-{gone.pid}-a"
    live = tmp_path / f"autotune-build-{os.getpid()}-b"
    killed_just_now = tmp_path / f"autotune-build-{gone.pid}-c"
    for folder in (killed, live, killed_just_now):
        folder.mkdir()
    (killed / "candidate.so").write_bytes(b"")
    two_hours_ago = time.time() - 7200
    for folder in (killed, live):
        os.utime(folder, (two_hours_ago, two_hours_ago))
    remove_stale_build_dirs()
    assert not killed.exists() and live.exists() and killed_just_now.exists()


def test_cuda_candidates_build_and_export_without_a_gpu():
    template = search.template_for(WORKLOAD, {"kind": "cuda", "arch": "sm_80"})
    configs = template.space.sample(np.random.default_rng(0), 2)
    builder = LocalBuilder(workers=1)
    try:
        builds = builder.build(WORKLOAD, template.target, configs)
    finally:
        builder.close()
    assert all(b.error is ErrorKind.NONE for b in builds), [b.message for b in builds]


@pytest.mark.skipif(not (tvm.runtime.enabled("cuda") and tvm.cuda(0).exist), reason="no CUDA GPU on this machine")
def test_cuda_runner_times_a_correct_kernel():
    template = search.template_for(WORKLOAD, "cuda")
    configs = template.space.sample(np.random.default_rng(0), 4)
    with Harness.local(template.target) as measurer:
        results = measurer.measure(WORKLOAD, template.target, configs)
    assert all(r.ok for r in results), [r.message for r in results]
