"""`TargetInfo`: resolved once from what the user typed, named by its key, pickled to workers."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from search import TargetInfo, resolve_target


def test_the_host_cpu_is_resolved_with_its_facts():
    target = resolve_target("llvm")
    assert target.kind == "llvm" and not target.is_cuda and target.device_type == "cpu"
    assert target.cores == len(os.sched_getaffinity(0)) and target.mcpu
    assert target.vector_bits == (512 if "avx512f" in target.isa else 256 if "avx2" in target.isa else 128)
    assert target.vector_lanes("float32") == target.vector_bits // 32
    assert target.key == f"llvm -mcpu={target.mcpu} -num-cores={target.cores}"
    if Path("/sys/devices/system/cpu/cpu0/cache").is_dir():
        assert target.cache_bytes("L1") and target.cache_bytes("L2") > target.cache_bytes("L1")


@pytest.mark.parametrize("typed", ["llvm", "cuda", {"kind": "cuda", "arch": "sm_80"},
                                   {"kind": "llvm", "mcpu": "znver1", "num-cores": 4}])
def test_key_and_pickle_round_trip(typed):
    target = resolve_target(typed)
    assert TargetInfo.from_key(target.key).key == target.key
    assert resolve_target(target) is target
    copy = pickle.loads(pickle.dumps(target))
    assert copy == target and str(copy.tvm) == str(target.tvm)
    if target.is_cuda:
        assert target.tvm.host is not None and target.cuda_limit("max_threads_per_block") == 1024


def test_a_cpu_named_by_key_has_the_isa_of_that_cpu_not_the_hosts():
    zen1 = TargetInfo.from_key("llvm -mcpu=znver1 -num-cores=2")
    assert "avx2" in zen1.isa and "avx512f" not in zen1.isa and zen1.vector_bits == 256
    assert zen1.cores == 2 and zen1.caches == ()  # not this machine: no cache sizes to read


@pytest.mark.parametrize("typed, message", [("tpu", "unknown target"), ({"kind": "c"}, "not supported"),
                                            ({"kind": "llvm", "num_cores": 2}, "num_cores")])
def test_bad_targets_are_value_errors_that_say_what_is_wrong(typed, message):
    with pytest.raises(ValueError, match=message):
        resolve_target(typed)


def test_measured_peaks_have_room_beside_the_facts():
    target = resolve_target("llvm").with_peaks(peak_gflops=100.0, bandwidth_gbs=20.0)
    assert (target.peak_gflops, target.bandwidth_gbs) == (100.0, 20.0)
    assert target.key == resolve_target("llvm").key


def test_a_record_names_the_host_that_measured_it_and_reads_back_with_its_facts():
    host = resolve_target("llvm").with_peaks(peak_gflops=100.0, bandwidth_gbs=20.0)
    facts = host.host_facts()
    assert facts["cpu"] and facts["mcpu"] == host.mcpu and facts["caches"] == dict(host.caches)
    assert (facts["peak_gflops"], facts["bandwidth_gbs"]) == (100.0, 20.0)
    again = TargetInfo.from_record(host.key, facts)
    assert again.key == host.key and again.caches == host.caches and again.cpu == host.cpu
    assert again.peak_gflops == 100.0 and again.flops_per_cycle == host.flops_per_cycle
    # a record without host facts (schema 1) reads back with its CPU's datasheet caches
    zen1 = TargetInfo.from_record("llvm -mcpu=znver1 -num-cores=2", None)
    assert (zen1.cache_bytes("L2"), zen1.cache_bytes("L3"), zen1.flops_per_cycle) == (512 << 10, 8 << 20, 16)
    unknown = TargetInfo.from_key("llvm -mcpu=generic -num-cores=2")
    assert unknown.cache_or_datasheet("L2") == 512 << 10  # generic sizes, never a failure
    assert resolve_target("cuda").host_facts() is None
