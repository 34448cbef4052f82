"""Trials per hour on a Ray cluster of 1, 2, 4 and 8 measuring nodes, with the real driver.

    python -m benchmarks.cluster_scaling [--records benchmarks/data/resnet50-znver4-2cores.jsonl.gz]
        [--nodes 1,2,4,8] [--trials 384] [--real-trials 64]

Simulated nodes: each is a node of a loopback Ray cluster on this machine whose actor answers
from the records and sleeps each config's recorded build and run time (a paced replay), so a
node costs no core and the driver (proposing, featurizing, retraining the one cost model over
the suite's tasks, saving nothing) runs for real on this machine's cores. Its sessions propose
from the recorded configs (the space restricted to them), as replayed runs do; the real run
below proposes from the full space. Each size is run with the next batch proposed while the
current one is measured (the loop's default for a remote measurer); the largest also without.

Real run: the suite tuned for --real-trials on a two-node loopback cluster whose nodes build
and time for real; both nodes share this machine's cores, so it shows the path working, with the
driver's share under contention, not a speedup.

Writes `<out>/cluster_scaling-<date>.json`, `.md` and `.png`.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.common import CORES, REPO, RESULTS, command, machine, today, versions, write_report
from cost_model import TrainingData
from search import TargetInfo, resolve_target
from search.records import RecordStore, load_records
from tuner import ReplayMeasurer, Session, run
from tuner.defaults import BATCH_SIZE
from tuner.loop import GradientScheduler
from tuner.measure import Measurer
from tuner.measure.cluster import RayMeasurer, loopback_cluster
from workloads import load_suite

RESOURCE = "autotune_node"
RECORDS = REPO / "benchmarks" / "data" / "resnet50-znver4-2cores.jsonl.gz"


class DriverClock:
    """Seconds the driver spends in its sessions (ask: propose and featurize; observe; end_round:
    retrain), summed over the sessions it wraps."""

    def __init__(self, sessions: Sequence[Session]) -> None:
        self.seconds = 0.0
        for session in sessions:
            for name in ("ask", "observe", "end_round"):
                setattr(session, name, self._timed(getattr(session, name)))

    def _timed(self, method: Any) -> Any:
        def timed(*args: Any, **options: Any) -> Any:
            start = time.perf_counter()
            try:
                return method(*args, **options)
            finally:
                self.seconds += time.perf_counter() - start

        return timed


class InThisThread:
    """The cluster's measurer, without the `remote` mark: the loop waits for each batch before
    proposing the next (the comparison without pipelining)."""

    def __init__(self, measurer: Measurer) -> None:
        self.measurer = measurer

    def measure(self, *args: Any, **options: Any) -> Any:
        return self.measurer.measure(*args, **options)

    def close(self) -> None:
        pass


def suite_sessions(target: TargetInfo, replay: ReplayMeasurer | None) -> tuple[list[Session], list[float]]:
    """ResNet-50's tasks on `target`, one shared cost model (as `tune_suite` makes them); restricted
    to the recorded configs when `replay` is given."""
    suite = load_suite("resnet50")
    training, model, sessions = TrainingData(), None, []
    for entry in suite:
        candidates = replay.configs(entry.workload.key) if replay is not None else None
        session = Session(entry.workload, target, model=model or "lightgbm", training=training, seed=0,
                          candidates=candidates or None)
        model = session.model
        sessions.append(session)
    return sessions, [e.weight for e in suite]


def tune_once(measurer: Measurer, target: TargetInfo, replay: ReplayMeasurer | None, trials: int,
              batch_size: int) -> dict[str, Any]:
    """One tuning run over the suite: trials, wall time, the driver's time and the measuring nodes' work."""
    sessions, weights = suite_sessions(target, replay)
    clock = DriverClock(sessions)
    start = time.perf_counter()
    timeline: list[tuple[int, float, float]] = []  # after each batch: trials, wall s, driver s

    def on_batch(session: Session, count: int) -> None:
        done = count + (timeline[-1][0] if timeline else 0)
        timeline.append((done, round(time.perf_counter() - start, 2), round(clock.seconds, 2)))

    done = run(sessions, measurer, trials, batch_size=batch_size, on_batch=on_batch,
               scheduler=GradientScheduler(weights, batch_size))
    wall = time.perf_counter() - start
    work = sum(row["build_s"] + row["run_s"] for s in sessions for row in s.trace)
    return {"trials": done, "wall_s": round(wall, 2), "trials_per_hour": round(done / wall * 3600),
            "driver_s": round(clock.seconds, 2), "driver_share": round(clock.seconds / wall, 3),
            "driver_s_per_trial": round(clock.seconds / done, 4), "node_work_s": round(work, 2),
            "tasks_tuned": sum(bool(s.trace) for s in sessions), "timeline": timeline}


def simulate(folder: Path, records: Path, sizes: list[int], trials: int, batch_size: int) -> list[dict[str, Any]]:
    path = str(records)
    replay = ReplayMeasurer(path)
    rows = []
    with loopback_cluster(folder / "sim", nodes=1, cores=CORES, resource=RESOURCE) as cluster:
        present = 1
        for size in sizes:
            for _ in range(size - present):
                cluster.add_node(num_cpus=CORES, resources={RESOURCE: 1}, node_ip_address="127.0.0.1")
            present = max(present, size)
            with RayMeasurer(resource=RESOURCE, make=lambda target: ReplayMeasurer(path, paced=True)) as measurer:
                assert measurer.target is not None and len(measurer.nodes) == size
                for pipelined in (True, False) if size == sizes[-1] else (True,):
                    used: Measurer = measurer if pipelined else InThisThread(measurer)
                    row = {"nodes": size, "pipelined": pipelined,
                           **tune_once(used, measurer.target, replay, trials, batch_size)}
                    print(row, flush=True)
                    rows.append(row)
    return rows


def real_run(folder: Path, trials: int, batch_size: int) -> dict[str, Any]:
    with loopback_cluster(folder / "real", nodes=2, cores=CORES, resource=RESOURCE):
        with RayMeasurer(resource=RESOURCE) as measurer:
            assert measurer.target is not None
            row = {"nodes": 2, **tune_once(measurer, measurer.target, None, trials, batch_size),
                   "configs_per_node": sorted(measurer.measured_by.values())}
    print(row, flush=True)
    return row


def markdown(report: dict[str, Any]) -> str:
    one = next(r["trials_per_hour"] for r in report["simulated"] if r["nodes"] == 1)
    lines = [f"# Trials per hour on a Ray cluster ({report['date']})", "",
             f"Driver on {report['machine']['cpu']}, {CORES} cores ({report['machine']['target']}); "
             f"`{report['command']}`.", "",
             f"Simulated nodes replay `{report['records']}` (ResNet-50's {report['tasks']} tasks, "
             f"{report['record_seconds_per_config']:.3f} s of build and run per config on average), "
             f"{report['trials']} trials per run, {report['batch_size']} configs per batch.", "",
             "| nodes | pipelined | trials/hour | x 1 node | wall s | driver s | driver share | node work s |",
             "|---|---|---|---|---|---|---|---|"]
    for r in report["simulated"]:
        lines.append(f"| {r['nodes']} | {'yes' if r['pipelined'] else 'no'} | {r['trials_per_hour']} | "
                     f"{r['trials_per_hour'] / one:.2f} | {r['wall_s']} | {r['driver_s']} | "
                     f"{r['driver_share']:.0%} | {r['node_work_s']} |")
    real = report["real"]
    if real:
        lines += ["", f"Real run, two loopback nodes sharing this machine's {CORES} cores, full search space: "
                      f"{real['trials']} trials in {real['wall_s']} s ({real['trials_per_hour']} trials/hour), "
                      f"configs per node {real['configs_per_node']}, driver {real['driver_s']} s "
                      f"({real['driver_share']:.0%} of the wall time, {real['driver_s_per_trial']} s per trial)."]
    lines += ["", report["summary"], ""]
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]], real: dict[str, Any] | None) -> str:
    """The speedup at the largest size, and where the driver would stop the scaling: the nodes
    (each as fast as the one simulated) whose trials the driver can just keep up with."""
    piped = {r["nodes"]: r for r in rows if r["pipelined"]}
    largest = max(piped)
    one = piped[1]["trials_per_hour"]
    text = (f"{largest} nodes: {piped[largest]['trials_per_hour'] / one:.2f}x the trials per hour of one. "
            "With the next batch proposed while this one is measured, the driver is the limit only once "
            "the nodes measure trials faster than it proposes and learns from them: ")
    ceilings = [("replayed (restricted) space", piped[largest]["driver_s_per_trial"])]
    if real:
        ceilings.append(("full space, sharing the cores with two measuring nodes", real["driver_s_per_trial"]))
    return text + "; ".join(f"{label}, {per_trial} s of driver time per trial: {3600 / per_trial:.0f} trials/hour, "
                            f"about {3600 / per_trial / one:.0f} nodes" for label, per_trial in ceilings) + "."


def plot(report: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    for pipelined, style in ((True, "o-"), (False, "s--")):
        rows = [r for r in report["simulated"] if r["pipelined"] is pipelined]
        axes.plot([r["nodes"] for r in rows], [r["trials_per_hour"] for r in rows], style,
                  label="pipelined" if pipelined else "not pipelined")
    base = next(r for r in report["simulated"] if r["nodes"] == 1 and r["pipelined"])
    sizes = sorted({r["nodes"] for r in report["simulated"]})
    axes.plot(sizes, [base["trials_per_hour"] * n for n in sizes], ":", color="grey", label="linear")
    axes.set(xscale="log", yscale="log", xlabel="measuring nodes", ylabel="trials per hour",
             title="ResNet-50 suite, simulated nodes, real driver")
    axes.set_xticks(sizes, [str(n) for n in sizes])
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=RECORDS, help="records to replay (.jsonl or .jsonl.gz)")
    parser.add_argument("--nodes", default="1,2,4,8", help="cluster sizes to simulate")
    parser.add_argument("--trials", type=int, default=1536, help="trials per simulated run")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    parser.add_argument("--real-trials", type=int, default=64, help="trials of the real two-node run (0: none)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    sizes = sorted({int(n) for n in args.nodes.split(",")} | {1})
    folder = Path(tempfile.mkdtemp(prefix="autotune-cluster-"))
    try:
        records = folder / "records.jsonl"
        recorded = load_records(args.records)
        RecordStore(records).extend(recorded)
        tasks = len({r["workload"] for r in recorded})
        seconds = sum(r.get("build_s", 0) + r.get("run_s", 0) for r in recorded) / len(recorded)
        rows = simulate(folder, records, sizes, args.trials, args.batch_size)
        real = real_run(folder, args.real_trials, args.batch_size) if args.real_trials else None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    report = {"date": today(), "command": command(), "machine": machine(resolve_target("llvm")),
              "versions": versions(), "records": str(args.records.relative_to(REPO) if args.records.is_relative_to(REPO)
                                                      else args.records),
              "tasks": tasks, "record_seconds_per_config": seconds, "trials": args.trials,
              "batch_size": args.batch_size, "simulated": rows, "real": real, "summary": summary(rows, real)}
    stem = args.out / f"cluster_scaling-{report['date']}"
    write_report(stem, report, markdown(report))
    plot(report, stem.with_suffix(".png"))
    print(markdown(report))


if __name__ == "__main__":
    main()
