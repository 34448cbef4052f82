"""The cost model: features, rankers that learn, model files, transfer."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import numpy as np
import pytest

import search
import workloads
from cost_model import (FEATURE_NAMES, FeatureExtractor, LightGBMRanker, TorchRanker, dataset_metrics,
                        load_pretrained, ranking_metrics, records_to_dataset, split_by_workload)
from cost_model.base import relevance
from cost_model.dataset import join
from cost_model.metrics import pass_agreement
from search.records import MeasureResult, fastest_per_config, is_ok, load_records, make_record

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = REPO / "cost_model" / "data"
DATA = DATA_DIR / "cpu_random.jsonl.gz"  # 8 workloads x 250: small enough to featurize in every test run


@pytest.fixture(scope="module")
def dataset():
    return records_to_dataset(load_records(DATA))


def test_features_are_deterministic_and_of_one_length_for_every_operator():
    rng = np.random.default_rng(0)
    for workload in [workloads.matmul(64, 64, 64), workloads.conv2d(1, 8, 9, 9, 16, 3, 3, padding=1),
                     workloads.depthwise_conv2d(1, 8, 9, 9, 3, 3), workloads.batch_matmul(2, 8, 8, 8)]:
        for target in ("llvm", {"kind": "cuda", "arch": "sm_80"}):
            template = search.template_for(workload, target)
            configs = template.space.sample(rng, 4)
            first, second = FeatureExtractor(template)(configs), FeatureExtractor(template)(configs)
            assert first.shape == (4, len(FEATURE_NAMES)) and np.isfinite(first).all()
            np.testing.assert_array_equal(first, second)


THREADED_CASES = [(workloads.conv2d(1, 8, 9, 9, 16, 3, 3, padding=1), "llvm"),
                  (workloads.matmul(64, 64, 64), {"kind": "cuda", "arch": "sm_80"})]


@pytest.mark.parametrize("workload,target", THREADED_CASES, ids=["llvm-conv2d", "cuda-matmul"])
def test_features_on_threads_equal_those_on_one_and_bad_configs_are_refused(workload, target):
    """Threads take chunks of configs, each with a template replica of its own: the rows must be
    those one thread computes, in the configs' order."""
    template = search.template_for(workload, target)
    configs = template.space.sample(np.random.default_rng(5), 3 * FeatureExtractor.CHUNK + 5)
    extractor = FeatureExtractor(template, threads=4)
    threaded, alone = extractor.per_store(configs), extractor.per_store(configs, threads=1)
    assert len(threaded) == len(configs)
    for a, b in zip(threaded, alone):
        np.testing.assert_array_equal(a, b)
    bad = dict(configs[0], unroll=3)
    with pytest.raises(search.InvalidConfig, match="unroll"):  # every template has an unroll knob
        extractor(configs[:4] + [bad])
    with pytest.raises(ValueError, match="threads"):
        FeatureExtractor(template, threads=0)


def test_committed_data_has_enough_measurements(dataset):
    assert len(dataset.workloads) >= 8
    records = fastest_per_config(r for path in sorted(DATA_DIR.glob("cpu_*.jsonl.gz")) for r in load_records(path))
    successful = [r for r in records if is_ok(r)]  # distinct configs: a config timed twice counts once
    assert len(successful) >= 2000 and len({r["workload"] for r in successful}) >= 8


def test_no_workload_held_out_or_compared_on_is_trained_on():
    """The report holds each dense workload out of training and tests on another host's workloads;
    vs_metaschedule.py compares on workloads that the shipped model (dense and train-only records)
    never saw, and no training file holds the held-out workloads measured on a new host."""
    def workloads_in(name: str) -> set[str]:
        return {r["workload"] for r in load_records(DATA_DIR / name)}

    script = ast.parse((REPO / "benchmarks" / "vs_metaschedule.py").read_text())
    compared = next(set(ast.literal_eval(node.value)) for node in script.body
                    if isinstance(node, ast.Assign) and node.targets[0].id == "WORKLOADS")
    dense, other_host, train_only = map(workloads_in,
                                         ("cpu_dense.jsonl.gz", "cpu_other_host.jsonl.gz", "cpu_transfer.jsonl.gz"))
    assert (len(dense), len(other_host), len(train_only), len(compared)) == (6, 16, 17, 3)
    assert not dense & other_host and not train_only & (dense | other_host)
    assert not compared & (dense | train_only)
    trained = {r["workload"] for path in DATA_DIR.glob("cpu_*.jsonl.gz") for r in load_records(path)}
    held_out = {r["workload"] for path in (REPO / "benchmarks" / "data").glob("heldout-*.jsonl.gz")
                for r in load_records(path)}
    assert held_out and not held_out & trained  # a new host's own workloads, for `cost_model_transfer --new-host`


@pytest.mark.parametrize("make, floor", [(LightGBMRanker, 0.60), (TorchRanker, 0.56)], ids=["lightgbm", "torch"])
def test_rankers_beat_random_on_held_out_workloads(dataset, make, floor):
    scores = []
    for held_out in dataset.workloads:
        train, test = split_by_workload(dataset, [held_out])
        model = make().fit(train.features, train.throughputs, train.groups)
        scores.append(dataset_metrics(model, test)["pairwise_accuracy"])
    # A random ranker scores 0.5; each workload is ranked by a model that never saw it.
    assert np.mean(scores) >= floor, scores


def test_lightgbm_queries_cut_each_workload_apart_into_at_most_query_rows():
    order, queries = LightGBMRanker(query_rows=4)._queries(np.array([10, 3]))
    assert queries == [4, 4, 2, 3]  # no query spans two workloads
    assert sorted(order[:10]) == list(range(10)) and sorted(order[10:]) == [10, 11, 12]


def test_lightgbm_booster_params_reach_lightgbm(dataset):
    stumps = LightGBMRanker(num_boost_round=5, booster_params={"num_leaves": 2})
    stumps.fit(dataset.features, dataset.throughputs, dataset.groups)
    trees = stumps.booster_.dump_model()["tree_info"]
    assert len(trees) == 5 and all(t["num_leaves"] <= 2 for t in trees)  # overrides the argument's 31


def test_relevance_grades_are_rank_quantiles_within_each_group():
    throughputs = np.array([0.0, 5.0, 3.0, 3.0, 10.0, 1.0, 2.0, 1.0, 4.0])
    grades = relevance(throughputs, np.array([6, 3]), levels=10)
    # group one: failed -> 0; the tied 3.0s share their mean rank (2.5 of 5); the best -> 10
    np.testing.assert_array_equal(grades[:6], [0, 8, 5, 5, 10, 2])
    np.testing.assert_array_equal(grades[6:], [5, 0, 10])  # each group graded on its own


def test_join_keeps_groups_apart_and_refuses_a_shared_workload(dataset):
    first, second = dataset.subset(dataset.workloads[:2]), dataset.subset(dataset.workloads[2:3])
    joined = join(first, second)
    assert joined.workloads == dataset.workloads[:3] and list(joined.groups) == list(dataset.groups[:3])
    np.testing.assert_array_equal(joined.features, dataset.subset(dataset.workloads[:3]).features)
    with pytest.raises(ValueError, match="share a workload on a host"):
        join(first, dataset.subset(dataset.workloads[1:2]))
    nothing = join()  # no train-only files: joining it changes nothing
    np.testing.assert_array_equal(join(first, nothing).features, first.features)
    assert join(first, nothing).workloads == first.workloads and nothing.features.shape == (0, len(FEATURE_NAMES))


def test_pass_agreement_ranks_one_timing_pass_by_another():
    def timed(workload, index, cost):
        return make_record(workload, "llvm", {"tile": index}, MeasureResult(costs=(cost,)))

    first = [timed("w", i, c) for i, c in enumerate([1.0, 2.0, 3.0, 4.0])]
    same = [timed("w", i, c) for i, c in enumerate([1.1, 2.1, 3.1, 4.1])]
    reversed_ = [timed("v", i, c) for i, c in enumerate([4.0, 3.0, 2.0, 1.0])]
    again = [timed("v", i, c) for i, c in enumerate([1.0, 2.0, 3.0, 4.0])]
    result = pass_agreement(first + same + reversed_ + again)
    assert result["per_workload"]["w"]["pairwise_accuracy"] == 1.0
    assert result["per_workload"]["v"]["pairwise_accuracy"] == 0.0 and result["pairwise_accuracy"] == 0.5
    assert pass_agreement(first)["per_workload"] == {}  # one pass: nothing to compare


def test_ranking_metrics_reads_records_and_reports_per_workload(dataset):
    model = LightGBMRanker().fit(dataset.features, dataset.throughputs, dataset.groups)
    metrics = ranking_metrics(model, load_records(DATA)[:300])
    assert set(metrics) >= {"pairwise_accuracy", "spearman", "top1", "top5", "per_workload"}
    assert metrics["pairwise_accuracy"] > 0.6  # seen data: a sanity check of the plumbing


def test_model_files_round_trip_and_transfer(dataset, tmp_path):
    lgb = LightGBMRanker().fit(dataset.features, dataset.throughputs, dataset.groups)
    lgb.save(tmp_path / "m.txt")
    loaded = LightGBMRanker.load(tmp_path / "m.txt")
    np.testing.assert_allclose(loaded.predict(dataset.features[:50]), lgb.predict(dataset.features[:50]))
    loaded.update(dataset.features[:40], dataset.throughputs[:40], [40])  # keeps learning on top
    assert loaded.booster_.num_trees() > lgb.booster_.num_trees()
    mlp = TorchRanker(epochs=20).fit(dataset.features, dataset.throughputs, dataset.groups)
    mlp.save(tmp_path / "m.pt")
    np.testing.assert_allclose(TorchRanker.load(tmp_path / "m.pt").predict(dataset.features[:20]),
                               mlp.predict(dataset.features[:20]), rtol=1e-5)
    (tmp_path / "bad.pt").write_bytes(b"not a model")
    with pytest.raises(ValueError, match="not a TorchRanker model file"):
        TorchRanker.load(tmp_path / "bad.pt")
    with pytest.raises(ValueError, match="not a LightGBM model file"):
        LightGBMRanker.load(tmp_path / "bad.pt")


def test_the_shipped_model_loads_and_ranks():
    model = load_pretrained("llvm")
    template = search.template_for(workloads.matmul(64, 64, 64), "llvm")
    scores = model.predict(FeatureExtractor(template)(template.space.sample(np.random.default_rng(1), 8)))
    assert scores.shape == (8,) and np.ptp(scores) > 0
    with pytest.raises(ValueError, match="no pretrained model"):
        load_pretrained("rocm")


def test_records_of_two_hosts_are_two_groups_each_read_against_its_own_machine():
    """One workload measured on two CPUs: two groups, each featurized for the CPU that measured
    it (its lanes, FMA pipes and caches), and joined datasets keep (workload, host) groups apart."""
    key = workloads.matmul(64, 64, 64).key
    zen3, zen5 = "llvm -mcpu=znver3 -num-cores=2", "llvm -mcpu=znver5 -num-cores=2"
    configs = search.template_for(workloads.matmul(64, 64, 64), search.TargetInfo.from_key(zen3)).space.sample(
        np.random.default_rng(0), 6)
    records = [make_record(key, target, c.to_json(), MeasureResult(costs=(1e-3 * (i + 1),)), host=host)
               for target, host in ((zen3, None), (zen5, {"cpu": "x", "caches": {"L1": 48 << 10, "L2": 2 << 20}}))
               for i, c in enumerate(configs)]
    data = records_to_dataset(records)
    assert data.workloads == [key, key] and data.hosts == ["znver3/2c", "znver5/2c"] and list(data.groups) == [6, 6]
    column = {name: data.features[:, i] for i, name in enumerate(FEATURE_NAMES)}
    assert set(column["log_l1_bytes"][:6]) == {15.0} and set(column["log_l1_bytes"][6:]) == {np.float32(np.log2(48 << 10))}
    assert set(column["log_l2_bytes"][6:]) == {21.0} and set(column["vector_lanes"][:6]) == {8.0}
    zen3_only, zen5_only = data.where(lambda _, h: h == "znver3/2c"), data.where(lambda _, h: h == "znver5/2c")
    np.testing.assert_array_equal(join(zen3_only, zen5_only).features, data.features)
    with pytest.raises(ValueError, match="share a workload on a host"):
        join(data, zen5_only)


def test_records_of_one_host_measured_on_two_days_are_one_group():
    """A host's facts measured anew (its peak read again) do not split its records of a workload:
    a ranking group is a workload on a CPU, and joining with another dataset stays possible."""
    key = workloads.matmul(64, 64, 64).key
    target = "llvm -mcpu=znver3 -num-cores=2"
    configs = search.template_for(workloads.matmul(64, 64, 64), search.TargetInfo.from_key(target)).space.sample(
        np.random.default_rng(0), 6)
    records = [make_record(key, target, c.to_json(), MeasureResult(costs=(1e-3 * (i + 1),)),
                           host={"cpu": "x", "peak_gflops": 100.0 if i < 3 else 200.0})
               for i, c in enumerate(configs)]
    data = records_to_dataset(records)
    assert data.workloads == [key] and data.hosts == ["znver3/2c"] and list(data.groups) == [6]


def test_knob_features_follow_the_loop_nest_without_lowering():
    """matmul 64^3 on an AVX2 CPU, tiles i 2x2x4x4, j 1x2x2x16, k 8x8, j vectorized: the values
    worked out by hand from the loop nest S0 S1 R0 S2 R1 S3."""
    from cost_model.knob_features import knob_features

    zen3 = search.TargetInfo.from_record("llvm -mcpu=znver3 -num-cores=2", None)
    template = search.template_for(workloads.matmul(64, 64, 64), zen3)
    config = template.check(search.Config({"tile_i": [2, 2, 4, 4], "tile_j": [1, 2, 2, 16], "tile_k": [8, 8],
                                           "vector_axis": "j", "pack": 0, "unroll": 0, "write_at": 0}))
    f = knob_features(template, config)
    # register tile: one k step over 4x16 outputs reads 4 of A and 16 of B (80 bytes) for 64 FMAs
    assert f["log_register_read_bytes"] == np.log2(80) and f["register_intensity"] == 64 * 4 / 80
    # an R0 iteration: A 16x8 and B 8x32 (1,536 bytes) for 16 x 32 x 8 FMAs
    assert f["log_l1_read_bytes"] == np.log2(1536) and f["l1_read_ratio"] == np.log2(1536 / (32 << 10))
    assert (f["vector_reads_contiguous"], f["vector_reads_broadcast"], f["vector_reads_strided"]) == (1, 1, 0)
    assert (f["reduce_reads_contiguous"], f["reduce_reads_strided"]) == (1, 1)  # A walks k, B strides over it
    assert f["tasks_per_core"] == 1 and f["accumulator_registers"] == 8 and f["vector_is_last_axis"] == 1


def test_knob_features_read_a_window_split_by_phase_as_contiguous():
    """A stride-2 depthwise conv vectorized along its output width: its window's vector loads step
    by 2 when the padding is read in place, by 1 when the copied window is laid out by phase
    (`CPUTemplate.split_rows_by_phase`); its weight is broadcast either way."""
    from cost_model.knob_features import knob_features

    template = search.template_for(workloads.depthwise_conv2d(1, 8, 12, 12, 3, 3, stride=2, padding=1), "llvm")
    sampled = template.space.sample(np.random.default_rng(0), 1)[0]
    config = template.check(sampled.replace(vector_axis="w", pack=0, pack_at="call"))

    def vector_reads(pad_at: str) -> tuple[float, float, float]:
        f = knob_features(template, config.replace(pad_at=pad_at))
        return f["vector_reads_contiguous"], f["vector_reads_broadcast"], f["vector_reads_strided"]

    assert vector_reads("inline") == (0, 1, 1)
    assert vector_reads("task") == vector_reads("tile") == (1, 1, 0)
    assert template.phase_stride(config.replace(pad_at="task")) == 2


def test_features_read_fused_pixels_as_one_run_of_their_product():
    """A 1x1 conv on an AVX2 CPU (8 lanes), tiled 2 rows x 4 columns in registers: unfused, its
    vectors are 4 columns wide, half empty; fused, the same tile is 8 consecutive pixels, one full
    vector, and the features read it so, without lowering."""
    from cost_model.draft import draft_features
    from cost_model.knob_features import knob_features

    zen3 = search.TargetInfo.from_record("llvm -mcpu=znver3 -num-cores=2", None)
    template = search.template_for(workloads.conv2d(1, 6, 6, 4, 10, 1, 1), zen3)
    config = template.check(search.Config(
        tile_n=(1, 1, 1, 1), tile_k=(2, 5, 1, 1), tile_h=(3, 1, 1, 2), tile_w=(1, 1, 1, 4), tile_rc=(2, 3),
        tile_rh=(1, 1), tile_rw=(1, 1), vector_axis="w", pack=0, unroll=0, write_at=0, fuse_pixels=0))
    unfused, fused = config, config.replace(fuse_pixels=1)
    assert draft_features(template, unfused)["vector_efficiency"] == 0.5
    assert draft_features(template, fused)["vector_efficiency"] == 1.0
    assert knob_features(template, unfused)["accumulator_registers"] == 2  # a half-empty vector per row
    assert knob_features(template, fused)["accumulator_registers"] == 1
    assert knob_features(template, fused)["vector_reads_contiguous"] == 1  # the input; the weight is broadcast


def test_cpu_features_skip_per_store_unless_asked_and_agree_on_the_rest():
    from cost_model.features import BASE_COLUMNS, reads_per_store

    template = search.template_for(workloads.conv2d(1, 8, 9, 9, 16, 3, 3, padding=1), "llvm")
    configs = template.space.sample(np.random.default_rng(2), 12)
    fast, full = FeatureExtractor(template)(configs), FeatureExtractor(template, per_store=True)(configs)
    assert not reads_per_store(template.target) and reads_per_store(search.resolve_target("cuda"))
    assert not fast[:, BASE_COLUMNS].any() and full[:, BASE_COLUMNS].any()
    rest = np.arange(len(FEATURE_NAMES))[BASE_COLUMNS.stop:]
    np.testing.assert_array_equal(fast[:, rest], full[:, rest])


def test_features_read_a_reduction_split_into_lanes():
    """A GEMV on an AVX2 CPU (8 lanes) vectorized along k, 24 deep per step in registers: lanes
    of 8 (the widest divisor of 24 in one vector) over 4 outputs are 4 vector accumulators, both
    operands are read contiguously along the lanes and none is broadcast, and the accumulator
    tile holds a row of lanes per output."""
    from cost_model.draft import draft_features
    from cost_model.knob_features import knob_features

    zen3 = search.TargetInfo.from_record("llvm -mcpu=znver3 -num-cores=2", None)
    template = search.template_for(workloads.matmul(1, 24, 48, transpose_b=True), zen3)
    config = template.check(search.Config(tile_i=(1, 1, 1, 1), tile_j=(2, 1, 3, 4), tile_k=(2, 24), vector_axis="k",
                                          pack=0, unroll=0, write_at=0))
    f = knob_features(template, config)
    assert f["accumulator_registers"] == 4 and f["log_register_outputs"] == 2
    assert (f["vector_reads_contiguous"], f["vector_reads_broadcast"], f["vector_reads_strided"]) == (2, 0, 0)
    assert f["log_accumulator_bytes"] == np.log2(12 * 8 * 4)  # 3 x 4 outputs below the task, 8 lanes each
    assert draft_features(template, config)["vector_width"] == 8


def test_features_count_the_bytes_a_kernel_packs_on_every_call():
    """matmul 64x32x48 with B^T an argument, j packed 16 wide: per call the whole weight (32 x 48
    floats) is copied; per task each of the 2 j-chunks copies its half, and with the rows split
    in 2 too, each half is copied twice. A constant weight is packed once, ahead of the calls."""
    from cost_model.knob_features import knob_features

    workload = workloads.matmul(64, 32, 48, transpose_b=True)
    template = search.template_for(workload, "llvm")
    config = template.check(search.Config(tile_i=(1, 4, 1, 16), tile_j=(2, 1, 1, 16), tile_k=(6, 8), vector_axis="j",
                                          pack=1, pack_at="call", unroll=0, write_at=1))
    weight = 32 * 48 * 4
    per_call, per_task = knob_features(template, config), knob_features(template, config.replace(pack_at="task"))
    assert (per_call["pack_copied_per_call"], per_call["pack_copied_per_task"]) == (1, 0)
    assert (per_task["pack_copied_per_call"], per_task["pack_copied_per_task"]) == (0, 1)
    assert per_call["log_pack_copy_bytes"] == per_task["log_pack_copy_bytes"] == np.log2(weight)
    rows_split = config.replace(pack_at="task", tile_i=(2, 2, 1, 16))
    assert knob_features(template, rows_split)["log_pack_copy_bytes"] == np.log2(2 * weight)
    constant = search.template_for(dataclasses.replace(workload, constant_weights=True), "llvm")
    f = knob_features(constant, constant.check(search.Config({k: v for k, v in config.items() if k != "pack_at"})))
    assert f["pack_copied_per_call"] == f["pack_copied_per_task"] == f["log_pack_copy_bytes"] == 0
