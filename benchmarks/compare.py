"""This tuner against MetaSchedule and the vendor libraries, on the same workloads, in one run.

    python benchmarks/compare.py                      # the mixed dozen on this CPU, 256 trials
    python benchmarks/compare.py --resume             # after an interruption: only the missing rows
    python benchmarks/compare.py --target cuda --trials 64 --workloads "matmul(M=1024,N=1024,K=1024,float32)"

For each workload and trial budget the two tuners run one after the other, their order swapped
from one workload to the next (so that a drift of the machine hits both alike); then both best
kernels, torch (oneDNN/MKL on CPU, cuBLAS/cuDNN on CUDA) and, for GEMMs on the CPU, numpy
(OpenBLAS) are re-timed here in alternating rounds with the same protocol, every side on every
core (TVM_NUM_THREADS and torch's threads). Writes `<out>/<date>-<target>.json` and `.md`, and two
plots: best-so-far GFLOPS against trials and against tuning seconds, both tuners on one axes per
workload.
"""

from __future__ import annotations

import os

CORES = len(os.sched_getaffinity(0))
os.environ.setdefault("TVM_NUM_THREADS", str(CORES))  # before the first `import tvm`

import argparse
import datetime
import json
import math
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]
# MetaSchedule's build workers unpickle `fast_build` by module name: let them import this file
os.environ["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "benchmarks"), os.environ.get("PYTHONPATH", "")])

import vendor  # noqa: E402  (benchmarks/vendor.py)
from quiet import CpuWatch, wait_quiet  # noqa: E402  (benchmarks/quiet.py)

QUIET_CORES = 0.25  # other processes' core use above which a timing counts as disturbed
QUIET_WAIT_S = 60.0  # longest wait for a quiet CPU before each timing

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
    """One tuner's run: its best program, wall time, and best-so-far curve."""

    module: object  # runtime module of the best kernel
    tune_s: float
    curve: list[tuple[float, float]] = field(default_factory=list)  # (seconds, best GFLOPS) per trial
    measure_s: float | None = None  # seconds spent building and running candidates (ours only)
    best_config: dict | None = None  # ours only


def fast_build(mod, target, _params):
    """MetaSchedule's default build minus its slow `import tvm.s_tir.tensor_intrin`."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm.build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


class TimedMeasurer:
    """A `Measurer` that adds up the seconds its batches take: building and running, harness
    included; the rest of a tuning run's wall time is search (proposing, features, training)."""

    def __init__(self, measurer):
        self.measurer, self.seconds = measurer, 0.0

    def measure(self, *args, **kwargs):
        started = time.monotonic()
        try:
            return self.measurer.measure(*args, **kwargs)
        finally:
            self.seconds += time.monotonic() - started

    def close(self) -> None:
        self.measurer.close()


def run_ours(workload, target, trials: int, seed: int) -> Run:
    import tuner

    measurer = TimedMeasurer(tuner.Measurer.local(target.kind.name))
    started = time.monotonic()
    try:
        result = tuner.tune(workload, target, trials=trials, seed=seed, progress=False, measurer=measurer)
    finally:
        measurer.close()
    wall = time.monotonic() - started
    trace = result.trace
    curve = list(zip(trace["elapsed_s"].astype(float), trace["best_gflops"].astype(float)))
    return Run(result.compile().executable.mod, wall, curve, measurer.seconds, result.best_config.to_json())


def run_metaschedule(workload, target, trials: int, seed: int) -> Run:
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.ir.utils import derived_object

    started = time.monotonic()
    curve: list[tuple[float, float]] = []
    best = [math.inf]

    @derived_object
    class Curve(ms.measure_callback.PyMeasureCallback):
        """Best-so-far GFLOPS after each measured candidate, stamped with the tuning seconds."""

        def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
            now = time.monotonic() - started
            for result in runner_results:
                if result.error_msg is None and result.run_secs:
                    best[0] = min(best[0], float(np.median([float(s) for s in result.run_secs])))
                curve.append((now, workload.flops / best[0] / 1e9 if math.isfinite(best[0]) else 0.0))

    mod = tvm.IRModule({"main": workload.prim_func()})
    cuda = target.kind.name == "cuda"
    evaluator = ms.runner.EvaluatorConfig(number=1, repeat=3, min_repeat_ms=20, enable_cpu_cache_flush=not cuda)
    with tempfile.TemporaryDirectory() as work_dir:
        database = ms.tune_tir(mod, target, work_dir, max_trials_global=trials, num_trials_per_iter=min(64, trials),
                               builder=ms.builder.LocalBuilder(f_build=None if cuda else fast_build),
                               runner=ms.runner.LocalRunner(evaluator_config=evaluator),
                               measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), Curve()],
                               seed=seed, num_tuning_cores=CORES)
        sch = ms.tir_integration.compile_tir(database, mod, target)
    wall = time.monotonic() - started
    return Run(tvm.compile(sch.mod, target=target).mod, wall, curve)


class Timer:
    """Times every side with one protocol: `repeat` means of >= `min_ms` each, the median kept."""

    def __init__(self, workload, device: str, repeat: int = 10, min_ms: int = 20):
        import tvm

        self.workload, self.repeat, self.min_ms = workload, repeat, min_ms
        self.cuda = device == "cuda"
        self.device = tvm.cuda(0) if self.cuda else tvm.cpu(0)
        self.inputs = workload.random_inputs(0)
        self.args = [tvm.runtime.tensor(x, self.device) for x in self.inputs]
        self.args += [tvm.runtime.empty(s, workload.dtype, self.device) for s in workload.output_shapes]

    def tvm(self, module) -> float:
        """Checked against the reference, then timed (CPU cache flushed between repeats)."""
        module["main"](*self.args)
        rtol, atol = self.workload.tolerance
        if not np.allclose(self.args[-1].numpy(), self.workload.reference(*self.inputs), rtol=rtol, atol=atol):
            raise AssertionError(f"{self.workload.key}: a tuned kernel gives a wrong result")
        evaluator = module.time_evaluator("main", self.device, number=1, repeat=self.repeat, min_repeat_ms=self.min_ms,
                                          f_preproc="" if self.cuda else "cache_flush_cpu_non_first_arg")
        return float(evaluator(*self.args).median)

    def python(self, fn, sync=lambda: None) -> float:
        """A callable timed in a loop (warm caches: the libraries' best case)."""
        for _ in range(3):
            fn()
        sync()
        started = time.perf_counter()
        fn()
        sync()
        single = max(time.perf_counter() - started, 1e-7)
        number = max(1, math.ceil(self.min_ms / 1e3 / single))
        means = []
        for _ in range(self.repeat):
            started = time.perf_counter()
            for _ in range(number):
                fn()
            sync()
            means.append((time.perf_counter() - started) / number)
        return statistics.median(means)


def vendor_sides(workload, timer: Timer) -> dict:
    """{'torch': fn, 'numpy': fn}: the vendor versions that match the reference, ready to time."""
    import torch

    torch.set_num_threads(CORES)
    device = "cuda" if timer.cuda else "cpu"
    sync = torch.cuda.synchronize if timer.cuda else (lambda: None)
    sides = {}
    with torch.no_grad():
        fn = vendor.torch_fn(workload, timer.inputs, device)
        if vendor.checked(workload, timer.inputs, fn, to_numpy=lambda t: t.cpu().numpy()):
            sides["torch"] = lambda: timer.python(fn, sync)
    numpy_fn = None if timer.cuda else vendor.numpy_fn(workload, timer.inputs)
    if numpy_fn is not None and vendor.checked(workload, timer.inputs, numpy_fn):
        sides["numpy"] = lambda: timer.python(numpy_fn)
    return sides


def head_to_head(sides: dict, rounds: int) -> tuple[dict[str, float], dict[str, float]]:
    """Each side timed once per round, in turn, after waiting for a quiet CPU; per side, the
    fastest of its least disturbed rounds, and the other processes' core use during it."""
    import torch

    times: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    with torch.no_grad():
        for _ in range(rounds):
            for name, timed in sides.items():
                wait_quiet(QUIET_CORES, QUIET_WAIT_S)
                with CpuWatch() as watch:
                    seconds = timed()
                times[name].append((round(watch.other, 2), seconds))
    kept = {name: min(values, key=lambda v: (v[0] >= QUIET_CORES, v[1])) for name, values in times.items()}
    return {name: v[1] for name, v in kept.items()}, {name: v[0] for name, v in kept.items()}


def reach(curve: list[tuple[float, float]], gflops: float) -> tuple[int | None, float | None]:
    """(trials, seconds) at which a best-so-far curve first reaches `gflops`; None if never."""
    for index, (seconds, best) in enumerate(curve):
        if best >= gflops:
            return index + 1, seconds
    return None, None


def compare(workload, target, trials: int, seed: int, ours_first: bool, rounds: int,
            metaschedule: bool = True) -> dict:
    order = [("ours", run_ours), ("metaschedule", run_metaschedule)][: 2 if metaschedule else 1]
    runs = {}
    for name, run in order if ours_first else order[::-1]:
        print(f"  {name}: tuning {trials} trials", flush=True)
        runs[name] = run(workload, target, trials, seed)
    timer = Timer(workload, target.kind.name)
    sides = {name: (lambda module=run.module: timer.tvm(module)) for name, run in runs.items()}
    sides.update(vendor_sides(workload, timer))
    latency, disturbance = head_to_head(sides, rounds)
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
        "other_load": disturbance,  # cores other processes used while each side was timed
        "ours_curve": ours.curve, "metaschedule_curve": ms.curve if ms else [],
    }


def versions() -> dict:
    import importlib.metadata as md

    names = ("apache-tvm", "apache-tvm-ffi", "torch", "numpy", "lightgbm", "xgboost")
    return {"python": platform.python_version(), **{n: md.version(n) for n in names}}


def machine(target) -> dict:
    import torch

    info = {"cpu": platform.processor() or platform.machine(), "cores": CORES, "target": str(target),
            "tvm_threads": int(os.environ["TVM_NUM_THREADS"]), "torch_threads": torch.get_num_threads()}
    if Path("/proc/cpuinfo").exists():
        names = [l.split(":", 1)[1].strip() for l in Path("/proc/cpuinfo").read_text().splitlines()
                 if l.startswith("model name")]
        info["cpu"] = names[0] if names else info["cpu"]
    if target.kind.name == "cuda":
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


def gflops(row: dict, side: str) -> float | None:
    latency = row.get(f"{side}_latency_s")
    return row["flops"] / latency / 1e9 if latency else None


def markdown(report: dict) -> str:
    rows = report["rows"]
    lines = [f"# This tuner against MetaSchedule and vendor libraries ({report['date']}, {report['machine']['target']})",
             "", f"Command: `{report['command']}`", "",
             f"Machine: {json.dumps(report['machine'])}", "", f"Versions: {json.dumps(report['versions'])}", "",
             "GFLOPS after re-timing every side in the same process, alternating rounds, each after waiting "
             f"for a quiet CPU (other processes under {QUIET_CORES} cores); the fastest quiet round kept. "
             "*vs MS*: MetaSchedule's latency over ours (> 1: ours is faster); *of torch*: our speed as a "
             "fraction of torch's; *to MS best*: trials and tuning seconds our run needed to reach "
             "MetaSchedule's final best (by the tuners' own measurements; - if never).", "",
             "| workload | trials | ours | MetaSchedule | torch | numpy | vs MS | of torch | ours tune s | MS tune s "
             "| to MS best | search overhead |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        g = {side: gflops(r, side) for side in ("ours", "metaschedule", "torch", "numpy")}
        fmt = lambda x, d=1: "-" if x is None else f"{x:.{d}f}"  # noqa: E731
        to = "-" if r["ours_trials_to_metaschedule_best"] is None else \
            f"{r['ours_trials_to_metaschedule_best']} / {r['ours_seconds_to_metaschedule_best']:.0f} s"
        lines.append(f"| {r['workload']} | {r['trials']} | {fmt(g['ours'])} | {fmt(g['metaschedule'])} | "
                     f"{fmt(g['torch'])} | {fmt(g['numpy'])} | "
                     f"{fmt(g['ours'] / g['metaschedule'] if g['metaschedule'] else None, 2)}x | "
                     f"{fmt(g['ours'] / g['torch'] if g['torch'] else None, 2)} | {r['ours_tune_s']:.0f} | "
                     f"{fmt(r['metaschedule_tune_s'], 0)} | {to} | {r['ours_search_overhead']:.0%} |")
    disturbed = [f"{r['workload']} @{r['trials']}: {side} ({load} cores)" for r in rows
                 for side, load in r.get("other_load", {}).items() if load >= QUIET_CORES]
    lines += ["", summary(rows), "", "Re-timings still disturbed by other processes: "
              + ("; ".join(disturbed) if disturbed else "none") + "."]
    return "\n".join(lines) + "\n"


def summary(rows: list[dict]) -> str:
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
        fig, axes = plt.subplots(math.ceil(len(rows) / cols), cols, figsize=(4.2 * cols, 3.2 * math.ceil(len(rows) / cols)),
                                 squeeze=False)
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


def main(argv: list[str] | None = None, workloads_default=MIXED_DOZEN, trials_default=(256,), name: str = "") -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--target", default="llvm", help="llvm (this CPU) or cuda")
    parser.add_argument("--workloads", nargs="+", default=list(workloads_default), help="workload keys")
    parser.add_argument("--trials", type=int, nargs="+", default=list(trials_default), help="trial budgets")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3, help="alternating re-timing rounds")
    parser.add_argument("--no-metaschedule", action="store_true", help="this tuner and the vendor libraries only")
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    parser.add_argument("--resume", action="store_true",
                        help="keep the rows today's JSON already holds and run only the missing ones")
    args = parser.parse_args(argv)

    import search
    from workloads import from_key

    workloads = [from_key(key) for key in args.workloads]  # a typo fails here, before any tuning
    target = search.resolve_target(args.target)
    today = datetime.date.today().isoformat()
    report = {"date": today, "command": " ".join(["python", *sys.argv]), "machine": machine(target),
              "versions": versions(), "rows": []}
    out = args.out / f"{name}{today}-{target.kind.name}"
    out.parent.mkdir(parents=True, exist_ok=True)
    if args.resume and out.with_suffix(".json").exists():
        report["rows"] = json.loads(out.with_suffix(".json").read_text())["rows"]
    done = {(r["workload"], r["trials"]) for r in report["rows"]}
    jobs = [(trials, workload) for trials in args.trials for workload in workloads]
    for index, (trials, workload) in enumerate(jobs):
        print(f"[{index + 1}/{len(jobs)}] {workload.key} @{trials}", flush=True)
        if (workload.key, trials) in done:
            print("  kept from", out.with_suffix(".json"), flush=True)
            continue
        row = compare(workload, target, trials, args.seed, index % 2 == 0, args.rounds,
                      metaschedule=not args.no_metaschedule)
        report["rows"].append(row)
        print(f"  ours {gflops(row, 'ours'):.1f} GFLOPS, MetaSchedule {gflops(row, 'metaschedule') or 0:.1f}, "
              f"torch {gflops(row, 'torch') or 0:.1f}", flush=True)
        out.with_suffix(".json").write_text(json.dumps(report, indent=1))  # kept after each workload
    out.with_suffix(".md").write_text(markdown(report))
    plots = plot(report, out)
    print(markdown(report))
    print("wrote", out.with_suffix(".json"), out.with_suffix(".md"), *plots)
    return 0


if __name__ == "__main__":
    sys.exit(main())
