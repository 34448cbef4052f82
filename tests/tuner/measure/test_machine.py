"""`autotune machine`: the CPU's peak FLOP/s, bandwidth and caches, measured once per CPU and cached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tuner.measure.machine as machine
from search import resolve_target

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def cache_home(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def measured(cache_home, monkeypatch):
    """This host's facts, measured once for the module into a cache of its own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache_home))
    return machine.machine_facts()


def test_the_figures_are_positive_and_physically_possible(measured):
    host = resolve_target("llvm")
    assert (measured.cores, measured.mcpu, measured.isa) == (host.cores, host.mcpu, host.isa)
    assert 0 < measured.peak_gflops_1core <= measured.peak_gflops * 1.1
    assert measured.implied_clock_mhz < 6000, "more FLOPs per cycle than the vector units have: a miscount"
    assert 0.5 < measured.bandwidth_gbs < 2000 and measured.caches == dict(host.caches)


def test_a_measured_cpu_is_read_from_the_cache(measured, monkeypatch):
    def no_probes(*args):
        raise AssertionError("measured again")

    monkeypatch.setattr(machine, "_run_probes", no_probes)
    assert machine.machine_facts() == measured


def test_another_cpu_is_measured_again(measured, monkeypatch):
    with monkeypatch.context() as other_cpu:
        other_cpu.setattr(machine, "cpu_model", lambda: "Another CPU")
        other_cpu.setattr(machine, "_run_probes", lambda threads, kinds: [7.0 * threads] * len(kinds))
        other = machine.machine_facts()
        assert machine.cache_path(resolve_target("llvm")).is_file()
    assert (other.cpu_model, other.peak_gflops_1core, other.bandwidth_gbs) == ("Another CPU", 7.0, 7.0 * other.cores)
    assert machine.machine_facts() == measured  # the first CPU's facts are kept beside


def test_the_roofline_is_the_lower_of_peak_and_bandwidth(measured):
    facts = machine.MachineFacts.from_json({**measured.to_json(), "peak_gflops": 100.0, "bandwidth_gbs": 10.0})
    assert facts.roofline(flops=500, memory_bytes=100) == (50.0, "memory")
    assert facts.roofline(flops=2000, memory_bytes=100) == (100.0, "compute")
    assert facts.balance == 10.0


def test_machine_command_prints_the_json_fields(measured, cache_home):
    done = subprocess.run([sys.executable, "-m", "tuner.cli", "machine", "--json"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120, env={**os.environ, "XDG_CACHE_HOME": str(cache_home)})
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["peak_gflops"] == measured.peak_gflops and report["cores"] == measured.cores
    assert {"peak_gflops_1core", "bandwidth_gbs", "cpu_model", "theoretical_gflops"} <= set(report)


def test_cuda_is_not_measured():
    with pytest.raises(ValueError, match="CPU targets"):
        machine.machine_facts("cuda")
