"""The one loop (`tuner.run`) on replayed measurements: budgets, stops, exhausted spaces, records
saved once each, and the suite scheduler's choices; no hardware, no timing."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from search.records import RecordStore
from tuner import ReplayMeasurer, run
from tuner.loop import GradientScheduler
from tuner.replay import replay_session

SLICE = RecordStore(Path(__file__).resolve().parents[1] / "data" / "replay_slice.jsonl")
MATMUL = next(k for k in SLICE.workloads() if k.startswith("matmul"))
CONV = next(k for k in SLICE.workloads() if k.startswith("conv2d"))


@pytest.fixture(scope="module")
def measurer():
    return ReplayMeasurer(SLICE)


def test_each_result_is_saved_once_as_it_arrives_and_the_budget_holds(measurer, tmp_path):
    records = tmp_path / "runs.jsonl"
    session = replay_session(measurer, MATMUL, records=str(records), pretrained=False, seed=1)
    saved_during_batch = []
    original = session.observe

    def observe(config, result):
        original(config, result)
        saved_during_batch.append(len(RecordStore(records)))

    session.observe = observe  # type: ignore[method-assign]
    assert run([session], measurer, 10, batch_size=4) == 10
    assert saved_during_batch == list(range(1, 11))  # on disk before the batch ended
    lines = [json.dumps(r["config"], sort_keys=True) for r in RecordStore(records)]
    assert len(lines) == len(set(lines)) == len(session.trace) == 10
    assert [row["round"] for row in session.trace] == [0] * 4 + [1] * 4 + [2] * 2


def test_the_loop_ends_when_the_space_runs_out_or_stop_says_so(measurer):
    small = replay_session(measurer, MATMUL, candidates=measurer.configs(MATMUL)[:6], pretrained=False)
    assert run([small], measurer, 50, batch_size=4) == small.template.space.size >= 4
    session = replay_session(measurer, MATMUL, pretrained=False)
    assert run([session], measurer, 100, batch_size=3, stop=lambda: len(session.trace) >= 7) == 9


def test_observing_a_config_twice_is_refused(measurer):
    session = replay_session(measurer, MATMUL, pretrained=False)
    config = session.ask(1)
    session.tell(config, measurer.measure(session.workload, session.target, config))
    with pytest.raises(ValueError, match="measured already"):
        session.observe(config[0], measurer.measure(session.workload, session.target, config)[0])


def test_the_scheduler_tries_every_session_then_skips_exhausted_ones(measurer):
    sessions = [replay_session(measurer, key, pretrained=False, strategy="random") for key in (MATMUL, CONV)]
    scheduler = GradientScheduler([1.0, 1.0])
    assert scheduler.next(sessions, set()) == 0
    scheduler.done(0, sessions[0])
    assert scheduler.next(sessions, set()) == 1
    scheduler.done(1, sessions[1])
    assert scheduler.next(sessions, {0}) == 1 and scheduler.next(sessions, {1}) == 0


class StuckSession:
    """A session whose best latency no longer improves, with `trials` measured so far."""

    def __init__(self, latency: float, trials: int) -> None:
        self.best_latency, self.measured = latency, dict.fromkeys(range(trials))


def test_the_scheduler_shares_trials_by_weighted_latency_and_starves_none():
    """Two tasks that stopped improving, 5 x 1.2 ms and 3 x 1.0 ms: the heavier one must not take
    every batch (it did: the gain had a fixed floor, so the largest weighted latency always won)."""
    sessions = [StuckSession(1.2e-3, 64), StuckSession(1.0e-3, 64)]  # resumed: 64 trials each
    scheduler = GradientScheduler([5.0, 3.0], batch_size=64)
    picks = []
    for _ in range(40):
        index = scheduler.next(sessions, set())
        trials = len(sessions[index].measured)
        sessions[index].measured.update(dict.fromkeys(range(trials, trials + 64)))
        scheduler.done(index, sessions[index])
        picks.append(index)
    share = picks.count(0) / len(picks)
    assert 0.55 < share < 0.75  # trials in proportion to weighted latency: 6 / (6 + 3) = 0.67


class _Elsewhere:
    """A replayed measurer that says it measures on other machines, and takes its time doing so."""

    remote = True

    def __init__(self, replay: ReplayMeasurer) -> None:
        self.replay, self.busy = replay, threading.Event()

    def measure(self, workload, target, configs, on_result=None):
        self.busy.set()
        time.sleep(0.3)
        try:
            return self.replay.measure(workload, target, configs, on_result)
        finally:
            self.busy.clear()


def test_with_a_remote_measurer_the_next_batch_is_proposed_while_this_one_is_measured(measurer, tmp_path):
    records = tmp_path / "runs.jsonl"
    sessions = [replay_session(measurer, key, records=RecordStore(records), shared_records=True, pretrained=False)
                for key in (MATMUL, CONV)]
    elsewhere = _Elsewhere(measurer)
    asked_while_measuring = []
    for session in sessions:
        original = session.ask

        def ask(n, original=original):
            asked_while_measuring.append(elsewhere.busy.is_set())
            return original(n)

        session.ask = ask  # type: ignore[method-assign]
    assert run(sessions, elsewhere, 30, batch_size=4) == 30
    assert asked_while_measuring[0] is False and all(asked_while_measuring[1:])  # 8 batches, 7 overlapped
    assert len(asked_while_measuring) == 8
    lines = [(r["workload"], json.dumps(r["config"], sort_keys=True)) for r in RecordStore(records)]
    assert len(lines) == len(set(lines)) == 30
    assert sum(len(s.trace) for s in sessions) == 30 and not any(s.pending for s in sessions)


def test_a_session_never_asks_again_for_a_config_still_being_measured(measurer):
    session = replay_session(measurer, MATMUL, pretrained=False, seed=2)
    first, second = session.ask(6), session.ask(6)
    assert not set(first) & set(second) and session.pending == set(first) | set(second)
    session.tell(first, measurer.measure(session.workload, session.target, first))
    assert session.pending == set(second)
