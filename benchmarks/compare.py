"""This tuner against MetaSchedule and the vendor libraries, on the same workloads, in one run.

    python -m benchmarks.compare                      # the mixed dozen on this CPU, 256 trials
    python -m benchmarks.compare --resume             # after an interruption: only the missing rows
    python -m benchmarks.compare --resume results/suites/2026-12-06-llvm.json ...  # another day's report
    python -m benchmarks.compare --resume REPORT --redo --workloads KEY ...  # those rows run again, replaced
    python -m benchmarks.compare --target cuda --trials 64 --workloads "matmul(M=1024,N=1024,K=1024,float32)"

For each workload and trial budget the two tuners run one after the other, their order swapped
from one workload to the next (so that a drift of the machine hits both alike); then both best
kernels, torch (oneDNN/MKL on CPU, cuBLAS/cuDNN on CUDA) and, for GEMMs on the CPU, numpy
(OpenBLAS) are re-timed here in alternating rounds with the same protocol, every side on every
core (TVM_NUM_THREADS and torch's threads). On the CPU every row is placed under the machine's
roofline (`autotune machine`: measured peak and bandwidth): intensity, bound, and each side's
fraction of the attainable GFLOP/s. Writes `<out>/<date>-<target>.json` and `.md`, and plots:
best-so-far GFLOPS against trials and against tuning seconds, both tuners on one axes per
workload, and the roofline with every side's kernels on it.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.common import (BUILDER_TIMEOUT_S, RESULTS, Quiet, Timer, Timing, TimingProtocol, command, fmt,
                               host_facts, machine, machine_line, percent, plot_roofline, roofline_columns,
                               roofline_summary, timed_program, today, tune_metaschedule, vendor_sides, versions,
                               write_report)

if TYPE_CHECKING:
    from search import Config, PackedWeight, TargetInfo
    from search.records import MeasureResult
    from tuner import Measurer
    from tuner.measure import OnResult
    from tuner.measure.machine import MachineFacts
    from workloads import Workload

ROOFLINE_SIDES = {"ours": "ours", "metaschedule": "MetaSchedule", "torch": "torch"}  # row prefix: name in words
QUIET_CORES = 0.25  # other processes' core use above which a timing counts as disturbed
QUIET_WAIT_S = 60.0  # longest wait for a quiet CPU before each timing
TIMING = TimingProtocol(number=1, repeat=10, min_ms=20)

MIXED_DOZEN = (
    "matmul(M=512,N=512,K=512,float32)",
    "matmul(M=128,N=768,K=3072,transpose_b=True,epilogue=bias,float32)",  # BERT FFN2
    "matmul(M=128,N=2304,K=768,transpose_b=True,epilogue=bias,float32)",  # BERT QKV
    "batch_matmul(B=12,M=128,N=128,K=64,transpose_b=True,float32)",  # BERT attention scores
    "batch_matmul(B=12,M=128,N=64,K=128,float32)",  # BERT attention context
    "matmul(M=1,N=4096,K=4096,transpose_b=True,float32)",  # LLM-7B decode projection
    "conv2d(N=1,C=64,H=56,W=56,K=64,R=3,S=3,padding=1,epilogue=bias_relu,float32)",  # ResNet-50 conv2_x
    "conv2d(N=1,C=128,H=28,W=28,K=128,R=3,S=3,padding=1,epilogue=bias_relu,float32)",  # ResNet-50 conv3_x
    "conv2d(N=1,C=128,H=56,W=56,K=128,R=3,S=3,stride=2,padding=1,epilogue=bias_relu,float32)",  # conv3_x /2
    "conv2d(N=1,C=256,H=14,W=14,K=1024,R=1,S=1,epilogue=bias,float32)",  # ResNet-50 conv4_x 1x1 expand
    "conv2d(N=1,C=128,H=28,W=28,K=128,R=3,S=3,padding=1,layout=NHWC,float32)",
    "depthwise_conv2d(N=1,C=144,H=56,W=56,R=3,S=3,padding=1,epilogue=bias_relu,float32)",  # MobileNet-V2
)


@dataclass
class Run:
    """One tuner's run: its best program, wall time, and best-so-far curve. With constant weights,
    each tuner's program takes the weight as it laid it out once, ahead of the calls timed."""

    module: Any  # runtime module of the best kernel
    tune_s: float
    curve: list[tuple[float, float]] = field(default_factory=list)  # (seconds, best GFLOPS) per trial
    measure_s: float | None = None  # seconds spent building and running candidates (ours only)
    best_config: dict | None = None  # ours only
    packed_weight: PackedWeight | None = None  # ours: the weight its kernel takes packed
    timed: tuple[Any, list[tuple[int, ...]]] | None = None  # MetaSchedule's: see `MetaScheduleRun.timed`

    def inputs(self, workload_inputs: list[np.ndarray]) -> list[np.ndarray]:
        """The inputs `module` takes, from the workload's (its weight packed, if it takes it so)."""
        return workload_inputs if self.packed_weight is None else self.packed_weight.packed_inputs(workload_inputs)

    def timing(self, workload_inputs: list[np.ndarray]) -> tuple[Any, list[np.ndarray]]:
        """The module to time and its inputs: `module` on `inputs`, or MetaSchedule's `timed`
        program on inputs of its shapes (`timed_program`)."""
        return timed_program(self.module, self.timed, self.inputs(workload_inputs))


Tuner = Callable[["Workload", "TargetInfo", int, int], Run]  # (workload, target, trials, seed) -> Run


class TimedMeasurer:
    """A `tuner.Measurer` that adds up the seconds its batches take, building and running with the
    harness; the rest of a tuning run's wall time is search (proposing, features, training)."""

    def __init__(self, measurer: Measurer) -> None:
        self.measurer, self.seconds = measurer, 0.0

    def measure(self, workload: Workload, target: TargetInfo, configs: Sequence[Config],
                on_result: OnResult | None = None) -> list[MeasureResult]:
        """The wrapped measurer's results, its seconds counted."""
        started = time.monotonic()
        try:
            return self.measurer.measure(workload, target, configs, on_result)
        finally:
            self.seconds += time.monotonic() - started

    def close(self) -> None:
        """Closes the wrapped measurer."""
        self.measurer.close()


def run_ours(workload: Workload, target: TargetInfo, trials: int, seed: int) -> Run:
    """This tuner's run, with the share of it spent measuring."""
    import tuner

    measurer = TimedMeasurer(tuner.Harness.local(target))
    started = time.monotonic()
    try:
        result = tuner.tune(workload, target, trials=trials, seed=seed, progress=False, measurer=measurer)
    finally:
        measurer.close()
    wall = time.monotonic() - started
    curve = list(zip(result.trace["elapsed_s"].astype(float), result.trace["best_gflops"].astype(float)))
    kernel = result.compile()
    return Run(kernel.executable.mod, wall, curve, measurer.seconds, result.best_config.to_json(), kernel.packed_weight)


def run_metaschedule(workload: Workload, target: TargetInfo, trials: int, seed: int,
                     builder_timeout_s: float) -> Run:
    """MetaSchedule's run with its runner timing as ours does (1 call x 3 repeats, >= 20 ms each)."""
    run = tune_metaschedule(workload, target, trials, seed=seed, builder_timeout_s=builder_timeout_s)
    return Run(run.module, run.seconds, run.curve, timed=run.timed)


def reach(curve: list[tuple[float, float]], gflops: float) -> tuple[int | None, float | None]:
    """(trials, seconds) at which a best-so-far curve first reaches `gflops`; None if never."""
    for index, (seconds, best) in enumerate(curve):
        if best >= gflops:
            return index + 1, seconds
    return None, None


def retime(workload: Workload, target: TargetInfo, runs: dict[str, Run], rounds: int) -> dict[str, Timing]:
    """Every side's (seconds, other processes' load) re-timed here head to head, the tuned kernels
    checked against the reference first."""
    timer = Timer(workload, target.device_type, TIMING)
    for name, run in runs.items():
        if not timer.check(run.module, run.inputs(timer.inputs)):
            raise AssertionError(f"{workload.key}: the kernel {name} tuned gives a wrong result")
    sides = {name: (lambda timed=run.timing(timer.inputs): timer.tvm(timed[0], inputs=timed[1]))
             for name, run in runs.items()}
    sides.update(vendor_sides(timer))
    quiet = Quiet(cores=QUIET_CORES, wait_s=QUIET_WAIT_S)
    return {name: quiet.kept(timings) for name, timings in quiet.head_to_head(sides, rounds).items()}


def compare(workload: Workload, target: TargetInfo, trials: int, seed: int, tuners: list[tuple[str, Tuner]],
            rounds: int, facts: MachineFacts | None) -> dict:
    """A report row: the tuners run in the given order, then every side re-timed, each placed
    under the machine's roofline (`facts`, on the CPU)."""
    runs = {}
    for name, tune in tuners:
        print(f"  {name}: tuning {trials} trials", flush=True)
        runs[name] = tune(workload, target, trials, seed)
    timings = retime(workload, target, runs, rounds)
    latency = {name: seconds for name, (seconds, _) in timings.items()}
    ours, ms = runs["ours"], runs.get("metaschedule")
    trials_to, seconds_to = reach(ours.curve, max(g for _, g in ms.curve)) if ms and ms.curve else (None, None)
    return {
        "workload": workload.key, "trials": trials, "flops": workload.flops,
        "ours_latency_s": latency["ours"], "metaschedule_latency_s": latency.get("metaschedule"),
        "torch_latency_s": latency.get("torch"), "numpy_latency_s": latency.get("numpy"),
        "ours_tune_s": ours.tune_s, "metaschedule_tune_s": ms.tune_s if ms else None,
        "ours_measure_s": ours.measure_s, "ours_search_overhead": max(0.0, 1 - ours.measure_s / ours.tune_s),
        "ours_trials_to_metaschedule_best": trials_to, "ours_seconds_to_metaschedule_best": seconds_to,
        "ours_best_config": ours.best_config,
        "other_load": {name: round(load, 2) for name, (_, load) in timings.items()},  # cores others used meanwhile
        "ours_curve": ours.curve, "metaschedule_curve": ms.curve if ms else [],
        **roofline_columns(workload, facts, {side: latency.get(side) for side in ROOFLINE_SIDES}),
    }


def gflops(row: dict, side: str) -> float | None:
    """A side's GFLOPS in a report row; None if it was not timed."""
    latency = row.get(f"{side}_latency_s")
    return row["flops"] / latency / 1e9 if latency else None


def table_row(r: dict) -> str:
    """A report row as a line of the Markdown table."""
    g = {side: gflops(r, side) for side in ("ours", "metaschedule", "torch", "numpy")}
    roof = " | ".join(percent(r.get(f"{side}_roofline_fraction")) for side in ROOFLINE_SIDES)
    to = "-" if r["ours_trials_to_metaschedule_best"] is None else \
        f"{r['ours_trials_to_metaschedule_best']} / {r['ours_seconds_to_metaschedule_best']:.0f} s"
    return (f"| {r['workload']} | {r['trials']} | {fmt(g['ours'])} | {fmt(g['metaschedule'])} | "
            f"{fmt(g['torch'])} | {fmt(g['numpy'])} | "
            f"{fmt(g['ours'] / g['metaschedule'] if g['metaschedule'] else None, 2)}x | "
            f"{fmt(g['ours'] / g['torch'] if g['torch'] else None, 2)} | {r['ours_tune_s']:.0f} | "
            f"{fmt(r['metaschedule_tune_s'], 0)} | {to} | {r['ours_search_overhead']:.0%} | "
            f"{r.get('intensity', 0):.1f} | {r.get('bound', '-')} | {roof} |")


def markdown(report: dict) -> str:
    """The report as Markdown: how it was made, the table, a summary and the disturbed timings."""
    rows = report["rows"]
    title = f"This tuner against MetaSchedule and vendor libraries ({report['date']}, {report['machine']['target']})"
    lines = [f"# {title}",
             "", f"Command: `{report['command']}`", "",
             f"Machine: {json.dumps(report['machine'])}", "", f"Versions: {json.dumps(report['versions'])}", "",
             "GFLOPS after re-timing every side in the same process, alternating rounds, each after waiting "
             f"for a quiet CPU (other processes under {QUIET_CORES} cores); the fastest quiet round kept. "
             "*vs MS*: MetaSchedule's latency over ours (> 1: ours is faster); *of torch*: our speed as a "
             "fraction of torch's; *to MS best*: trials and tuning seconds our run needed to reach "
             "MetaSchedule's final best (by the tuners' own measurements; - if never); *FLOP/B*: arithmetic "
             "intensity (FLOPs per byte of inputs and outputs); *bound*: what limits it under this CPU's "
             "roofline (`autotune machine`: " + machine_line(report) + "); *% roof*: each side's share of the "
             "attainable GFLOP/s (min of peak and intensity x bandwidth).", "",
             "| workload | trials | ours | MetaSchedule | torch | numpy | vs MS | of torch | ours tune s | MS tune s "
             "| to MS best | search overhead | FLOP/B | bound | ours % roof | MS % roof | torch % roof |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    lines += [table_row(r) for r in rows]
    runs = Counter((r.get("date", "?"), r.get("commit", "?")) for r in rows)
    if len(runs) > 1:
        unnamed = " (`?`: rows written before reports named their run)" if ("?", "?") in runs else ""
        lines += ["", "Rows by run (date, commit): " + "; ".join(f"{d} {c}: {n}" for (d, c), n in sorted(runs.items()))
                  + unnamed + "."]
    disturbed = [f"{r['workload']} @{r['trials']}: {side} ({load} cores)" for r in rows
                 for side, load in r.get("other_load", {}).items() if load >= QUIET_CORES]
    lines += ["", summary(rows), "", roofline_summary(rows, ROOFLINE_SIDES), "",
              "Re-timings still disturbed by other processes: " + ("; ".join(disturbed) if disturbed else "none") + "."]
    return "\n".join(lines) + "\n"


def summary(rows: list[dict]) -> str:
    """Per trial budget: on how many workloads ours is no slower than MetaSchedule, and the geomean."""
    parts = []
    for trials in sorted({r["trials"] for r in rows}):
        subset = [r for r in rows if r["trials"] == trials and r["metaschedule_latency_s"]]
        if not subset:
            continue
        ratios = [r["metaschedule_latency_s"] / r["ours_latency_s"] for r in subset]
        wins = sum(ratio >= 1 for ratio in ratios)
        geomean = math.exp(sum(math.log(x) for x in ratios) / len(ratios))
        parts.append(f"At {trials} trials: ours no slower than MetaSchedule on {wins} of {len(subset)}; "
                     f"geomean speed {geomean:.2f}x MetaSchedule's.")
    return " ".join(parts)


def plot(report: dict, out: Path) -> list[Path]:
    """Best-so-far GFLOPS against trials and against tuning seconds: two PNGs, an axes per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in report["rows"] if r["trials"] == max(x["trials"] for x in report["rows"])]
    paths = []
    for axis, column, label in (("trials", None, "trials"), ("seconds", 0, "tuning seconds")):
        cols = min(4, len(rows))
        grid_rows = math.ceil(len(rows) / cols)
        fig, axes = plt.subplots(grid_rows, cols, figsize=(4.2 * cols, 3.2 * grid_rows), squeeze=False)
        for ax, row in zip(axes.flat, rows):
            for side, style in (("ours", "-"), ("metaschedule", "--")):
                curve = row[f"{side}_curve"]
                xs = [p[0] for p in curve] if column == 0 else list(range(1, len(curve) + 1))
                ax.plot(xs, [p[1] for p in curve], style, label=side)
            if row.get("torch_latency_s"):
                ax.axhline(gflops(row, "torch"), color="gray", lw=0.8, ls=":", label="torch")
            ax.set_title(row["workload"].split("(")[0] + "(" + row["workload"].split("(", 1)[1][:40], fontsize=7)
            ax.set_xlabel(label, fontsize=8)
            ax.set_ylabel("best GFLOPS", fontsize=8)
            ax.tick_params(labelsize=7)
        for ax in list(axes.flat)[len(rows):]:
            ax.axis("off")
        axes.flat[0].legend(fontsize=7)
        fig.tight_layout()
        path = out.with_name(f"{out.name}-by-{axis}.png")
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


def parse_args(argv: list[str] | None, workloads_default: Sequence[str],
               trials_default: Sequence[int]) -> argparse.Namespace:
    """The command line, with the defaults of the script that runs this one."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="llvm", help="llvm (this CPU) or cuda")
    parser.add_argument("--workloads", nargs="+", default=list(workloads_default), help="workload keys")
    parser.add_argument("--trials", type=int, nargs="+", default=list(trials_default), help="trial budgets")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3, help="alternating re-timing rounds")
    parser.add_argument("--no-metaschedule", action="store_true", help="this tuner and the vendor libraries only")
    parser.add_argument("--ms-builder-timeout", type=float, default=BUILDER_TIMEOUT_S,
                        help="seconds MetaSchedule's builder may take per candidate")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--resume", nargs="?", const=True, default=None, metavar="REPORT",
                        help="keep the rows a report already holds (today's, or the REPORT .json named) and run "
                             "only the missing ones, into that report")
    parser.add_argument("--redo", action="store_true",
                        help="with --resume: run the --workloads again even where the report holds their rows, "
                             "and replace those rows (after a change to the search space, say)")
    args = parser.parse_args(argv)
    if args.redo and not args.resume:
        parser.error("--redo replaces rows of a report: name it with --resume")
    return args


def tuners(args: argparse.Namespace) -> list[tuple[str, Tuner]]:
    """The tuners the command line asks for, ours first."""
    chosen: list[tuple[str, Tuner]] = [("ours", run_ours)]
    if not args.no_metaschedule:
        chosen.append(("metaschedule", functools.partial(run_metaschedule, builder_timeout_s=args.ms_builder_timeout)))
    return chosen


def start_report(out: Path, target: TargetInfo, resume: bool) -> dict:
    """A fresh report, holding the rows of the earlier run written to `out` if `resume`."""
    report = {"date": today(), "command": command(), "machine": machine(target), "versions": versions(), "rows": []}
    if resume and out.with_suffix(".json").exists():
        report["rows"] = json.loads(out.with_suffix(".json").read_text())["rows"]
    return report


def replace(rows: list[dict], row: dict) -> None:
    """`row` in the place of the rows of its workload and budget, or appended if there are none."""
    same = [i for i, r in enumerate(rows) if (r["workload"], r["trials"]) == (row["workload"], row["trials"])]
    if same:
        rows[same[0]] = row
        rows[:] = [r for i, r in enumerate(rows) if i not in same[1:]]
    else:
        rows.append(row)


def main(argv: list[str] | None = None, workloads_default: Sequence[str] = MIXED_DOZEN,
         trials_default: Sequence[int] = (256,), name: str = "") -> int:
    """Runs the comparison and writes `<out>/<name><date>-<target>` .json, .md and plots."""
    args = parse_args(argv, workloads_default, trials_default)

    import search
    from workloads import from_key

    workloads = [from_key(key) for key in args.workloads]  # a typo fails here, before any tuning
    target = search.resolve_target(args.target)
    out = args.out / f"{name}{today()}-{target.kind}"
    if isinstance(args.resume, str):  # a named report: its rows kept, the new ones written into it
        out = Path(args.resume).with_suffix("")
    report = start_report(out, target, bool(args.resume))
    facts = host_facts(target)
    report["machine"]["measured"] = facts.to_json() if facts else None
    done = set() if args.redo else {(r["workload"], r["trials"]) for r in report["rows"]}
    jobs = [(trials, workload) for trials in args.trials for workload in workloads]
    order = tuners(args)
    for index, (trials, workload) in enumerate(jobs):
        print(f"[{index + 1}/{len(jobs)}] {workload.key} @{trials}", flush=True)
        if (workload.key, trials) in done:
            print("  kept from", out.with_suffix(".json"), flush=True)
            continue
        row = compare(workload, target, trials, args.seed, order if index % 2 == 0 else order[::-1], args.rounds,
                      facts)
        row.update(date=today(), commit=report["versions"]["commit"])  # a resumed report mixes runs
        replace(report["rows"], row)
        print(f"  ours {gflops(row, 'ours'):.1f} GFLOPS, MetaSchedule {gflops(row, 'metaschedule') or 0:.1f}, "
              f"torch {gflops(row, 'torch') or 0:.1f}", flush=True)
        write_report(out, report, markdown(report))  # kept after each workload
    plots = plot(report, out)
    if facts is not None:
        plots.append(out.with_name(f"{out.name}-roofline.png"))
        plot_roofline({side: [(from_key(r["workload"]).intensity, g) for r in report["rows"]
                              if (g := gflops(r, side))] for side in ROOFLINE_SIDES},
                      facts, plots[-1], f"{report['machine']['target']}, {report['date']}")
    print(markdown(report))
    print("wrote", out.with_suffix(".json"), out.with_suffix(".md"), *plots)
    return 0


if __name__ == "__main__":
    sys.exit(main())
