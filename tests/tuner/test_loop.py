"""The one loop (`tuner.run`) on replayed measurements: budgets, stops, exhausted spaces, records
saved once each, and the suite scheduler's choices; no hardware, no timing."""

from __future__ import annotations

import functools
import json
import threading
import time
from pathlib import Path

import pytest

from search.records import RecordStore
from tuner import ReplayMeasurer, run
from tuner.loop import PIPELINE_DEPTH, GradientScheduler
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
    """A replayed measurer that says it measures on other machines. Batch k's measurement ends
    only once batch k + 1 has been asked for (or after a timeout, counted as a wait in vain), so a
    loop that waited for each batch before proposing the next would show it."""

    remote = True

    def __init__(self, replay: ReplayMeasurer, batches: int) -> None:
        self.replay, self.batches = replay, batches
        self.asked: list[list] = []
        self.changed = threading.Condition()
        self.active = self.most_active = self.waits_in_vain = 0

    def ask(self, original, n):
        configs = original(n)
        with self.changed:
            self.asked.append(configs)
            self.changed.notify_all()
        return configs

    def measure(self, workload, target, configs, on_result=None):
        with self.changed:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
            k = self.asked.index(list(configs))
            if not self.changed.wait_for(lambda: len(self.asked) >= min(k + 2, self.batches), timeout=10):
                self.waits_in_vain += 1
        try:
            return self.replay.measure(workload, target, configs, on_result)
        finally:
            with self.changed:
                self.active -= 1


def test_with_a_remote_measurer_the_next_batch_is_proposed_while_this_one_is_measured(measurer, tmp_path):
    records = tmp_path / "runs.jsonl"
    sessions = [replay_session(measurer, key, records=RecordStore(records), shared_records=True, pretrained=False)
                for key in (MATMUL, CONV)]
    elsewhere = _Elsewhere(measurer, batches=8)  # 30 trials, 4 a batch
    for session in sessions:
        session.ask = functools.partial(elsewhere.ask, session.ask)  # type: ignore[method-assign]
    assert run(sessions, elsewhere, 30, batch_size=4) == 30
    assert len(elsewhere.asked) == 8 and elsewhere.waits_in_vain == 0
    assert elsewhere.most_active == PIPELINE_DEPTH  # a second batch is measured beside the first
    lines = [(r["workload"], json.dumps(r["config"], sort_keys=True)) for r in RecordStore(records)]
    assert len(lines) == len(set(lines)) == 30
    assert sum(len(s.trace) for s in sessions) == 30 and not any(s.pending for s in sessions)


class _FailingFirst:
    """A remote measurer whose first batch fails at once while the second is still being measured."""

    remote = True

    def __init__(self, replay: ReplayMeasurer) -> None:
        self.replay, self.calls = replay, 0

    def measure(self, workload, target, configs, on_result=None):
        self.calls += 1
        if self.calls == 1:
            time.sleep(0.2)  # the second batch has begun
            raise ConnectionError("every measuring node is gone")
        time.sleep(0.5)
        return self.replay.measure(workload, target, configs, on_result)


def test_when_a_remote_batch_fails_the_other_batch_in_flight_is_still_saved(measurer, tmp_path):
    records = tmp_path / "runs.jsonl"
    sessions = [replay_session(measurer, key, records=RecordStore(records), shared_records=True, pretrained=False)
                for key in (MATMUL, CONV)]
    with pytest.raises(ConnectionError, match="gone"):
        run(sessions, _FailingFirst(measurer), 30, batch_size=4)
    assert len(RecordStore(records)) == 4  # the second batch, measured after the first failed


def test_a_session_never_asks_again_for_a_config_still_being_measured(measurer):
    session = replay_session(measurer, MATMUL, pretrained=False, seed=2)
    first, second = session.ask(6), session.ask(6)
    assert not set(first) & set(second) and session.pending == set(first) | set(second)
    session.tell(first, measurer.measure(session.workload, session.target, first))
    assert session.pending == set(second)
