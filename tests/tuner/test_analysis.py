"""`tuner.analysis`: a records file reads whole, whatever machines measured it."""

from __future__ import annotations

from search.records import MeasureResult, RecordStore, make_record
from tuner import analysis

WORKLOAD = "matmul(M=8,N=8,K=8,float32)"


def test_trace_frame_shows_every_record_of_every_target(tmp_path):
    store = RecordStore(tmp_path / "runs.jsonl")
    for target, costs in (("llvm -mcpu=znver1 -num-cores=2", [2e-6, 1e-6]), ("llvm -mcpu=cascadelake -num-cores=8", [4e-6])):
        for index, cost in enumerate(costs):
            store.append(make_record(WORKLOAD, target, {"tile": index}, MeasureResult([cost]), round=index))
    frame = analysis.trace_frame(store)
    assert len(frame) == 3 and frame.target.nunique() == 2
    assert list(frame.trial) == [1, 2, 1]
    assert list(frame.best_gflops.round(3)) == [0.512, 1.024, 0.256]  # 1024 FLOP over 2, 1 and 4 us


def test_model_views_follow_batches_and_weights(tmp_path):
    """Two layers, A twice as frequent: A's batch, B's batch, then A's again, faster."""
    from workloads import Suite, SuiteEntry, matmul

    a, b = matmul(8, 8, 8), matmul(16, 8, 8)
    suite = Suite("toy", "test", (SuiteEntry(a, 2, "A"), SuiteEntry(b, 1, "B")))
    store = RecordStore(tmp_path / "model.jsonl")
    target = "llvm -mcpu=znver4 -num-cores=2"
    for key, round_, costs in ((a.key, 0, [4e-6, 3e-6]), (b.key, 0, [5e-6, 6e-6]), (a.key, 1, [2e-6, 9e-6])):
        for index, cost in enumerate(costs):
            store.append(make_record(key, target, {"tile": index}, MeasureResult([cost]), round=round_))
    trace = analysis.model_trace_frame(store, suite)
    assert list(trace.batch) == [1, 1, 2, 2, 3, 3] and list(trace.model_trial) == [1, 2, 3, 4, 5, 6]
    latency = analysis.model_latency_frame(trace, suite)
    assert latency.estimated_s.isna().tolist() == [True, False, False]  # B unmeasured, no fallback
    assert latency.estimated_s.iloc[1:].round(12).tolist() == [2 * 3e-6 + 5e-6, 2 * 2e-6 + 5e-6]
    with_torch = analysis.model_latency_frame(trace, suite, fallback={b.key: 1e-6})
    assert round(with_torch.estimated_s.iloc[0], 12) == 2 * 3e-6 + 1e-6
    layers = analysis.layer_frame(trace, suite, {a.key: 4e-6, b.key: 5e-6})
    assert layers.set_index("layer").trials.to_dict() == {"A": 4, "B": 2}
    assert layers.set_index("layer").speedup.round(6).to_dict() == {"A": 2.0, "B": 1.0}
    assert list(layers.layer) == ["B", "A"]  # the larger share first: B's 5 us of 9, A's 2 x 2 us
    assert layers.ours_share.round(6).tolist() == [round(5 / 9, 6), round(4 / 9, 6)]
