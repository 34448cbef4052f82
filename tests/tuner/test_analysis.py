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
