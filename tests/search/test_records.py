"""Tests of `search.records`: round trips, crash-cut and garbage lines, concurrent writers, queries, errors, speed."""

from __future__ import annotations

import json
import multiprocessing
import os
import time
import warnings
from pathlib import Path

import pytest

from search.config import config_id
from search.records import ErrorKind, MeasureResult
from search.records import (SCHEMA_VERSION, RecordError, RecordStore, RecordWarning,
                           fastest_per_config, load_records, make_record, median_cost)
from search.version import __version__ as TOOL_VERSION

W1, W2 = "matmul(M=64,N=64,K=64)", "conv2d(N=1,C=8,H=8,W=8,K=8)"
T1, T2 = "llvm -num-cores=2", "cuda -arch=sm_90"


def rec(i: int = 0, workload: str = W1, target: str = T1, costs: tuple[float, ...] = (1e-3,),
        error: ErrorKind = ErrorKind.NONE, **extra: object) -> dict:
    config = {"tile_x": i, "tile_y": [i, 2, 4], "vectorize": i % 2 == 0, "order": "ijk"}
    return make_record(workload, target, config, MeasureResult(costs=costs, error=error), **extra)


def load_warned(store: RecordStore) -> tuple[list[dict], list[str]]:
    """Records and the warning messages emitted while loading them."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        records = store.records()
    return records, [str(w.message) for w in seen]


# -------------------------------------------------------------------------------------------- round trip


def test_round_trip_preserves_every_key_and_extras(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "dir" / "records.jsonl"  # parent dirs created on first append
    first = rec(1, round=3, predicted=0.25, elapsed_s=1.5)
    failed = rec(2, costs=(), error=ErrorKind.RUN_TIMEOUT, round=3)
    store = RecordStore(str(path))
    assert store.records() == [] and len(store) == 0  # no file yet
    store.append(first)
    assert store.extend([failed]) == 1
    loaded = RecordStore(path).records()
    assert loaded == [first, failed]
    assert list(RecordStore(path)) == loaded and len(RecordStore(path)) == 2
    assert loaded[0]["schema"] == SCHEMA_VERSION and loaded[0]["version"] == TOOL_VERSION == "0.1.0"
    assert loaded[0]["config"] == {"tile_x": 1, "tile_y": [1, 2, 4], "vectorize": False, "order": "ijk"}
    assert loaded[1]["error"] == "run_timeout" and loaded[1]["costs"] == []
    assert abs(loaded[0]["timestamp"] - time.time()) < 60
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 3 and all(line.startswith(b'{"schema":2,') for line in lines[:2])


def test_schema_1_files_are_read_with_an_unknown_host_and_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "old.jsonl"
    old = {k: v for k, v in rec(1).items() if k != "host"} | {"schema": 1}
    path.write_text(json.dumps(old, separators=(",", ":")) + "\n")
    store = RecordStore(path)
    assert store.records() == [{**old, "host": None}]
    host = {"cpu": "AMD EPYC", "mcpu": "znver4", "cores": 2, "caches": {"L1": 32768}}
    store.append(rec(2, host=host))
    assert [r["schema"] for r in RecordStore(path)] == [1, 2]
    assert RecordStore(path).records()[1]["host"] == host


def test_load_records_reads_compressed_files_like_plain_ones(tmp_path: Path) -> None:
    import gzip

    plain = RecordStore(tmp_path / "r.jsonl")
    plain.extend([rec(1), rec(2, host={"mcpu": "znver3"})])
    with gzip.open(tmp_path / "r.jsonl.gz", "wb") as f:
        f.write(plain.path.read_bytes() + b"not a record\n")
    with pytest.warns(RecordWarning, match=r"r.jsonl.gz:3: skipped"):
        assert load_records(tmp_path / "r.jsonl.gz") == load_records(plain.path) == plain.records()


def test_config_id_is_canonical_and_make_record_normalizes() -> None:
    assert config_id({"b": [1, 2], "a": True}) == config_id({"a": True, "b": (1, 2)}) == '{"a":true,"b":[1,2]}'
    record = make_record(W1, T1, {"t": (4, 8)}, MeasureResult(costs=(1,)))
    assert record["config"] == {"t": [4, 8]} and record["costs"] == [1.0]


@pytest.mark.parametrize("config", [{"t": 1.5}, {"t": [1, "x"]}, {"t": None}, {3: 1}, {"t": [True]}])
def test_make_record_rejects_bad_knob_values(config: dict) -> None:
    with pytest.raises(ValueError, match="config knob"):
        make_record(W1, T1, config, MeasureResult())


def test_make_record_rejects_extras_that_clash_with_required_keys() -> None:
    with pytest.raises(ValueError, match="overwrite"):
        make_record(W1, T1, {}, MeasureResult(), timestamp=0.0)


@pytest.mark.parametrize("change", [
    lambda r: r.pop("costs"),
    lambda r: r.update(error="exploded"),
    lambda r: r.update(schema=3),
    lambda r: r.update(host="znver4"),
    lambda r: r.pop("host"),
    lambda r: r.update(workload=""),
    lambda r: r.update(costs=["fast"]),
    lambda r: r.update(predicted=float("nan")),
    lambda r: r.update(blob=object()),
])
def test_append_refuses_malformed_records_and_writes_nothing(tmp_path: Path, change) -> None:
    store = RecordStore(tmp_path / "r.jsonl")
    good, bad = rec(1), rec(2)
    change(bad)
    with pytest.raises(ValueError, match="malformed record"):
        store.extend([good, bad])
    assert not store.path.exists()


# ------------------------------------------------------------------------------------ damaged lines


def test_garbage_and_keyless_lines_are_skipped_with_their_line_numbers(tmp_path: Path) -> None:
    store = RecordStore(tmp_path / "r.jsonl")
    store.extend([rec(1), rec(2)])
    with open(store.path, "ab") as f:
        f.write(b"\x00\xffnot json at all\n")
        f.write(b'{"schema": 1, "workload": "w"}\n')
        f.write(b"\n")  # blank lines are not damage
    with pytest.warns(RecordWarning):  # the writer reads the file first (to refuse a foreign one)
        store.append(rec(3))
    with pytest.warns(RecordWarning) as seen:
        records = RecordStore(store.path).records()
    assert [r["config"]["tile_x"] for r in records] == [1, 2, 3]
    messages = [str(w.message) for w in seen]
    assert len(messages) == 2
    assert messages[0].startswith(f"{store.path}:3: skipped")
    assert messages[1].startswith(f"{store.path}:4: skipped") and "lacks key(s)" in messages[1]


def test_last_line_cut_at_every_byte_offset(tmp_path: Path) -> None:
    """A crash mid-write loses at most that record, is warned about by line, and appending repairs the file."""
    path = tmp_path / "r.jsonl"
    writer = RecordStore(tmp_path / "full.jsonl")
    writer.extend([rec(1), rec(2), rec(3)])
    full = writer.path.read_bytes()
    head_len = full.index(b"\n", full.index(b"\n") + 1) + 1  # two complete lines
    last_line = full[head_len:]
    extra = rec(99)
    for cut in range(len(last_line)):  # 0 (nothing of line 3) ... len-1 (all of it but its newline)
        path.write_bytes(full[:head_len] + last_line[:cut])
        store = RecordStore(path)
        records, messages = load_warned(store)
        complete = cut == len(last_line) - 1  # the JSON is whole, only the newline is missing
        assert records == writer.records()[: 3 if complete else 2], cut
        if cut == 0 or complete:
            assert messages == [], cut
        else:
            assert len(messages) == 1 and messages[0].startswith(f"{path}:3: skipped"), (cut, messages)

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RecordWarning)
            store.append(extra)
        expect = writer.records()[: 3 if complete else 2] + [extra]
        for reader in (store, RecordStore(path)):  # incremental reload and a fresh full load agree
            records, messages = load_warned(reader)
            assert records == expect, cut
            assert all(m.startswith(f"{path}:3: skipped") for m in messages) and len(messages) <= 1, cut
        data = path.read_bytes()
        assert data.endswith(b"\n") and data.split(b"\n")[-2] == data.split(b"\n")[-2].strip()
        assert json.loads(data.split(b"\n")[-2]) == extra, cut


def test_a_cut_first_and_only_line_is_not_mistaken_for_a_foreign_file(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    line = RecordStore(tmp_path / "x.jsonl")
    line.append(rec(1))
    path.write_bytes(line.path.read_bytes()[:40])
    store = RecordStore(path)
    records, messages = load_warned(store)
    assert records == [] and len(messages) == 1 and ":1: skipped" in messages[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecordWarning)
        store.append(rec(2))
    with pytest.warns(RecordWarning, match=":1: skipped"):  # the cut line, now ended by the repair newline
        assert [r["config"]["tile_x"] for r in RecordStore(path)] == [2]


# ------------------------------------------------------------------------------------- concurrency


def _append_many(path: str, worker: int, count: int, barrier) -> None:
    store = RecordStore(path)
    barrier.wait()  # all writers start together, so the lock is really contended
    for i in range(count):
        store.append(rec(i, worker=worker, seq=i))


def test_ten_processes_appending_concurrently(tmp_path: Path) -> None:
    path = tmp_path / "shared" / "r.jsonl"
    # fork where there is one: spawn would re-import `tuner` (tvm, torch) in every child, for seconds each
    ctx = multiprocessing.get_context("fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn")
    barrier = ctx.Barrier(10)
    procs = [ctx.Process(target=_append_many, args=(str(path), w, 200, barrier)) for w in range(10)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 10
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and len(lines) == 2001
    parsed = [json.loads(line) for line in lines[:-1]]  # every line parses on its own
    assert sorted((r["worker"], r["seq"]) for r in parsed) == [(w, i) for w in range(10) for i in range(200)]
    records, messages = load_warned(RecordStore(path))
    assert len(records) == 2000 and messages == []


# ------------------------------------------------------------------------------------------ queries


def test_best_measured_select_workloads_targets(tmp_path: Path) -> None:
    store = RecordStore(tmp_path / "r.jsonl")
    store.extend([
        rec(1, costs=(1e-6, 9e-3, 9e-3)),  # lowest minimum, but median 9 ms
        rec(2, costs=(3e-3, 2e-3, 4e-3)),  # median 3 ms: the best
        rec(3, costs=(), error=ErrorKind.BUILD_ERROR),
        rec(4, costs=(1e-9,), error=ErrorKind.WRONG_RESULT),  # fast but wrong
        rec(2, workload=W2, costs=(1e-4,)),
        rec(5, target=T2, costs=(1e-5,)),
    ])
    best = store.best(W1, T1)
    assert best is not None and best["config"]["tile_x"] == 2 and median_cost(best) == 3e-3
    assert store.best(W2, T2) is None
    assert store.measured(W1, T1) == {config_id(rec(i)["config"]) for i in (1, 2, 3, 4)}  # failures count
    assert store.measured(W2, T1) == {config_id(rec(2)["config"])}
    assert len(store.select()) == 6
    assert [r["config"]["tile_x"] for r in store.select(W1)] == [1, 2, 3, 4, 5]
    assert [r["config"]["tile_x"] for r in store.select(target=T1)] == [1, 2, 3, 4, 2]
    assert [r["config"]["tile_x"] for r in store.select(W1, T1, ok_only=True)] == [1, 2]
    assert store.workloads() == {W1, W2} and store.targets() == {T1, T2}


def test_fastest_per_config_keeps_one_record_per_config_and_target() -> None:
    records = [
        rec(1, costs=(5e-3,)), rec(2, costs=(), error=ErrorKind.BUILD_ERROR),
        rec(1, costs=(2e-3,)),  # a second timing of config 1, faster: kept, in config 1's place
        rec(1, costs=(9e-3,)),  # slower again: ignored
        rec(2, costs=(4e-3,)),  # config 2 succeeded once: the success wins over the failure
        rec(3, costs=(), error=ErrorKind.RUN_TIMEOUT), rec(3, costs=(), error=ErrorKind.RUN_ERROR),  # the last failure
        rec(1, target=T2, costs=(7e-3,)), rec(1, workload=W2, costs=(8e-3,)),  # other target, other workload
    ]
    kept = fastest_per_config(records)
    assert [(r["workload"], r["target"], r["config"]["tile_x"]) for r in kept] == [
        (W1, T1, 1), (W1, T1, 2), (W1, T1, 3), (W1, T2, 1), (W2, T1, 1)]
    assert [median_cost(r) for r in kept[:2]] == [2e-3, 4e-3] and kept[2]["error"] == "run_error"


def test_cache_follows_other_writers_and_replaced_files(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    reader, writer = RecordStore(path), RecordStore(path)
    writer.append(rec(1))
    assert len(reader) == 1
    first = reader.records()
    assert reader.records() == first and reader.records() is not first  # cached, but a fresh list
    writer.append(rec(2))
    assert [r["config"]["tile_x"] for r in reader] == [1, 2]
    other = RecordStore(tmp_path / "other.jsonl")
    other.extend([rec(7), rec(8), rec(9)])
    os.replace(other.path, path)  # a different file now: reload from the start
    assert [r["config"]["tile_x"] for r in reader] == [7, 8, 9]
    path.unlink()
    assert reader.records() == []


# ------------------------------------------------------------------------------------------- errors


def test_wrong_schema_raises_and_is_never_appended_to(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    future = {**rec(1), "schema": 3}
    path.write_text(json.dumps(future) + "\n")
    with pytest.raises(RecordError, match=r"record file of schema 3, expected one of \[1, 2\]"):
        RecordStore(path).records()
    before = path.read_bytes()
    with pytest.raises(RecordError):
        RecordStore(path).append(rec(2))
    assert path.read_bytes() == before


@pytest.mark.parametrize("content", [
    b"workload,target,cost\nmatmul,llvm,0.1\nconv,llvm,0.2\n",
    bytes(range(256)) * 8,
    b'{"name": "not a record", "value": 1}\n',
    b"{\n  \"pretty\": true\n}\n",
])
def test_a_file_that_is_not_a_record_file_raises(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "data.csv"
    path.write_bytes(content)
    with pytest.raises(RecordError, match="not a record file") as err:
        RecordStore(path).records()
    assert str(path) in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(RecordError):
        RecordStore(path).append(rec(1))
    assert path.read_bytes() == content


def test_a_directory_raises(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="is a directory"):
        RecordStore(tmp_path).records()
    with pytest.raises(RecordError, match="is a directory"):
        RecordStore(tmp_path).append(rec(1))


def test_check_compatible_refuses_another_target_but_allows_other_workloads(tmp_path: Path) -> None:
    store = RecordStore(tmp_path / "r.jsonl")
    assert store.check_compatible(W1, T2) == set()  # no file yet
    store.extend([rec(1), rec(2, workload=W2)])
    assert store.check_compatible(W1, T1) == {W2}  # suites share a file: exposed, not refused
    assert store.check_compatible("gemm(new)", T1) == {W1, W2}
    with pytest.raises(RecordError) as err:
        store.check_compatible(W1, T2)
    assert str(err.value) == (f"{store.path} holds records for target(s) {T1}, not {T2}; "
                              "use another records file")


# -------------------------------------------------------------------------------------------- speed


def test_loading_100k_records_is_fast(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    template = rec(0, round=1, predicted=0.5)
    lines = []
    for i in range(100_000):
        template["config"]["tile_x"] = i
        template["costs"] = [1e-3 + i * 1e-9, 2e-3, 3e-3]
        lines.append(json.dumps(template, separators=(",", ":")))
    path.write_text("\n".join(lines) + "\n")

    best_wall = float("inf")
    for _ in range(3):  # best of up to three fresh loads: other jobs on a shared machine only add wall time
        store = RecordStore(path)
        start, start_cpu = time.perf_counter(), time.process_time()
        records = store.records()
        wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        print(f"\nloaded {len(records)} records ({path.stat().st_size / 1e6:.1f} MB) in {wall:.3f} s"
              f" ({cpu:.3f} s CPU)")
        assert len(records) == 100_000 and records[-1]["config"]["tile_x"] == 99_999
        best_wall = min(best_wall, wall)
        if best_wall < 2.0:
            break
    assert best_wall < 2.0

    start = time.perf_counter()
    assert len(store.measured(W1, T1)) == 100_000
    print(f"first measured() in {time.perf_counter() - start:.3f} s")
    store.append(rec(100_000))  # incremental: the next calls handle one new line, not 100,001
    start = time.perf_counter()
    assert len(store) == 100_001 and len(store.records()) == 100_001
    assert len(store.measured(W1, T1)) == 100_001
    again = time.perf_counter() - start
    print(f"after one append: len() + records() + measured() in {again:.3f} s")
    assert again < 0.5
