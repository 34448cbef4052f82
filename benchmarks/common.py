"""What the benchmarks share: this machine's facts, timings on a shared CPU, one timing protocol,
the vendor libraries' versions of a workload, and one MetaSchedule driver.

Importing it sets TVM_NUM_THREADS to the cores this process may run on (unless it is set already),
so every benchmark imports it before anything that imports TVM.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import json
import logging
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from search import TargetInfo
    from tuner.measure.machine import MachineFacts
    from workloads import Workload

CORES = len(os.sched_getaffinity(0))
os.environ.setdefault("TVM_NUM_THREADS", str(CORES))  # read once, at the first `import tvm`

from workloads.torch_ops import GEMMS, torch_fn  # noqa: E402  (after the threads are set)

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
PACKAGES = ("apache-tvm", "apache-tvm-ffi", "torch", "numpy", "lightgbm", "xgboost")
COMPUTE_BOUND_MIN_FLOPS = 1e8  # the roofline bar's compute-bound tasks: 100 MFLOP or more
BUILDER_TIMEOUT_S = 120.0  # MetaSchedule's own default, 30 s, fails builds on a loaded 2-core host

Timing = tuple[float, float]  # (seconds, cores that other processes used meanwhile)


# --- this run and this machine ---------------------------------------------------------------------

def today() -> str:
    """The date that names a report's files."""
    return datetime.date.today().isoformat()


def command() -> str:
    """The command line as it was typed, so that a report says how to make it again."""
    return shlex.join(["python", *sys.orig_argv[1:]])


def fmt(value: float | None, digits: int = 1) -> str:
    """A number for a report's table; '-' where there is none."""
    return "-" if value is None else f"{value:.{digits}f}"


def write_report(stem: Path, report: Any, markdown: str) -> None:
    """`<stem>.json` and `<stem>.md`, the folder made if need be: the two files of every report."""
    stem.parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".json").write_text(json.dumps(report, indent=1, default=str))
    stem.with_suffix(".md").write_text(markdown)


def versions() -> dict[str, str]:
    """Python's, the libraries' and this repository's commit: what every figure depends on."""
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return found
    if commit.returncode == 0:
        found["commit"] = commit.stdout.strip()
    return found


def _lscpu() -> dict[str, str]:
    try:
        text = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {name.strip(): value.strip() for name, value in pairs}


def torch_on_all_cores() -> Any:
    """torch, running on every core this process may use, as TVM does: both sides get the same cores."""
    import torch

    torch.set_num_threads(CORES)
    return torch


def machine(target: TargetInfo) -> dict[str, Any]:
    """The CPU (and GPU), its caches and the threads each side runs on: what a timing means."""
    torch = torch_on_all_cores()
    cpu = _lscpu()
    flags = cpu.get("Flags", "").split()
    info = {"cpu": cpu.get("Model name") or platform.processor() or platform.machine(), "cores": CORES,
            "cpus": cpu.get("CPU(s)"), "threads_per_core": cpu.get("Thread(s) per core"),
            "l1d": cpu.get("L1d cache"), "l2": cpu.get("L2 cache"), "l3": cpu.get("L3 cache"),
            "avx2": "avx2" in flags, "avx512f": "avx512f" in flags, "hypervisor": cpu.get("Hypervisor vendor"),
            "target": target.key, "tvm_threads": int(os.environ["TVM_NUM_THREADS"]),
            "torch_threads": torch.get_num_threads()}
    if target.is_cuda:
        info["gpu"] = torch.cuda.get_device_name(0)
    return info


# --- timings on a shared CPU -------------------------------------------------------------------------
# On a 2-core machine one busy core can slow a 2-thread kernel several times over (TVM's thread
# pool waits for its slowest thread), so every timing records how disturbed it was.

def _system_busy() -> float:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class CpuWatch:
    """Context manager: `.other` is the mean number of cores that other processes used meanwhile."""

    def __enter__(self) -> CpuWatch:
        self.busy, self.own, self.started = _system_busy(), _own_cpu(), time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        wall = max(time.perf_counter() - self.started, 1e-6)
        self.other = max(0.0, (_system_busy() - self.busy) - (_own_cpu() - self.own)) / wall


def wait_quiet(threshold: float, max_wait_s: float) -> float:
    """Wait until other processes use under `threshold` cores (sampled over 0.5 s), at most
    `max_wait_s`; returns the last load seen."""
    deadline = time.monotonic() + max_wait_s
    while True:
        with CpuWatch() as watch:
            time.sleep(0.5)
        if watch.other < threshold or time.monotonic() >= deadline:
            return watch.other


@dataclass
class Quiet:
    """Timings on a shared CPU: before each, a wait (at most `wait_s`, and `budget_s` over the run)
    until other processes use under `cores` cores; a timing during which they used more counts as
    disturbed. `measurements` and `disturbed` count the timings kept."""

    cores: float = 0.25
    wait_s: float = 60.0
    budget_s: float = math.inf
    waited_s: float = 0.0
    measurements: int = 0
    disturbed: int = 0

    def is_quiet(self, timing: Timing) -> bool:
        """Whether other processes left the CPU alone during `timing`."""
        return timing[1] < self.cores

    def wait(self, wait_s: float | None = None) -> None:
        """Wait for a quiet CPU, at most `wait_s` (default: `self.wait_s`) and what the budget has left."""
        allowed = min(self.wait_s if wait_s is None else wait_s, max(0.0, self.budget_s - self.waited_s))
        started = time.monotonic()
        wait_quiet(self.cores, allowed)
        self.waited_s += time.monotonic() - started

    def timed(self, fn: Callable[[], float], wait_s: float | None = None) -> Timing:
        """`fn()` (which returns seconds) after a quiet wait, with the other processes' load meanwhile."""
        self.wait(wait_s)
        with CpuWatch() as watch:
            seconds = fn()
        return seconds, watch.other

    def measure(self, fn: Callable[[], float], retries: int = 0, wait_s: float | None = None) -> Timing:
        """The least disturbed of up to `retries + 1` timings, which stop at the first quiet one or
        once the budget is spent: a disturbed timing is taken again rather than kept."""
        best = self.timed(fn, wait_s)
        for _ in range(retries):
            if self.is_quiet(best) or self.waited_s >= self.budget_s:
                break
            best = min(best, self.timed(fn, wait_s), key=lambda t: t[1])
        return self._counted(best)

    def head_to_head(self, sides: dict[str, Callable[[], float]], rounds: int,
                     wait_s: float | None = None) -> dict[str, list[Timing]]:
        """Each side timed once per round, the order rotating from round to round, so that a quiet
        window serves every side and a slow drift of the machine hits them alike."""
        names = list(sides)
        timings: dict[str, list[Timing]] = {name: [] for name in names}
        for round_ in range(rounds):
            turn = round_ % len(names)
            for name in names[turn:] + names[:turn]:
                timings[name].append(self.timed(sides[name], wait_s))
        return timings

    def kept(self, timings: Sequence[Timing]) -> Timing:
        """The fastest quiet timing of a side, else its least disturbed one."""
        quiet = [t for t in timings if self.is_quiet(t)]
        return self._counted(min(quiet) if quiet else min(timings, key=lambda t: t[1]))

    def _counted(self, timing: Timing) -> Timing:
        self.measurements += 1
        self.disturbed += not self.is_quiet(timing)
        return timing


# --- one timing protocol for every side -------------------------------------------------------------

@dataclass(frozen=True)
class TimingProtocol:
    """How a program is timed: `repeat` means, each over at least `number` calls and `min_ms`
    milliseconds; the median mean is kept."""

    number: int = 1
    repeat: int = 10
    min_ms: int = 20


def loop_means(fn: Callable[[], Any], protocol: TimingProtocol, sync: Callable[[], Any] = lambda: None
               ) -> list[float]:
    """Seconds per call of `fn`, one mean per repeat, each over enough calls to last `min_ms`
    (after three warm-up calls): `time_evaluator`'s loops, for Python callables."""
    for _ in range(3):
        fn()
    sync()
    started = time.perf_counter()
    fn()
    sync()
    number = max(protocol.number, math.ceil(protocol.min_ms / 1e3 / max(time.perf_counter() - started, 1e-7)))
    means = []
    for _ in range(protocol.repeat):
        started = time.perf_counter()
        for _ in range(number):
            fn()
        sync()
        means.append((time.perf_counter() - started) / number)
    return means


class Timer:
    """One workload's inputs on one device and the protocol every side is timed with: TVM kernels by
    `time_evaluator` (on the CPU, its cache flushed between repeats), Python callables (the vendor
    libraries) in loops of the same shape, warm: their best case."""

    def __init__(self, workload: Workload, device_type: str = "cpu",
                 protocol: TimingProtocol = TimingProtocol()) -> None:
        import tvm

        self.workload, self.protocol = workload, protocol
        self.cuda = device_type == "cuda"
        self.sync = torch_on_all_cores().cuda.synchronize if self.cuda else (lambda: None)
        self.device = tvm.device(device_type, 0)
        self.inputs = workload.random_inputs(0)
        self.reference = workload.reference(*self.inputs)
        self.args = [tvm.runtime.tensor(x, self.device) for x in self.inputs]
        self.args += [tvm.runtime.empty(shape, workload.dtype, self.device) for shape in workload.output_shapes]

    def gflops(self, seconds: float | None) -> float | None:
        """The workload's throughput at `seconds` per run; None without a timing."""
        return self.workload.flops / seconds / 1e9 if seconds else None

    def matches(self, output: Any) -> bool:
        """Whether an output (numpy array or torch tensor) is the reference within the workload's tolerance."""
        values = output.cpu().numpy() if hasattr(output, "cpu") else np.asarray(output)
        rtol, atol = self.workload.tolerance
        return bool(np.allclose(values, self.reference, rtol=rtol, atol=atol))

    def _args(self, inputs: Sequence[np.ndarray] | None) -> list[Any]:
        """The workload's inputs (or `inputs`, as a kernel with a weight laid out its own way takes
        them) on the device, and the output."""
        import tvm

        if inputs is None:
            return self.args
        return [tvm.runtime.tensor(x, self.device) for x in inputs] + self.args[len(self.inputs):]

    def check(self, module: Any, inputs: Sequence[np.ndarray] | None = None) -> bool:
        """Whether a TVM kernel computes the reference; its output is poisoned first, so that a
        kernel which writes nothing fails."""
        out = self.args[-1]
        out.copyfrom(np.full(out.shape, np.nan, dtype=self.workload.dtype))
        module["main"](*self._args(inputs))
        return self.matches(out.numpy())

    def tvm(self, module: Any, protocol: TimingProtocol | None = None,
            inputs: Sequence[np.ndarray] | None = None) -> float:
        """Median seconds of a TVM kernel (`protocol` overrides the timer's) on the workload's
        inputs, or on `inputs`."""
        p = protocol or self.protocol
        evaluator = module.time_evaluator("main", self.device, number=p.number, repeat=p.repeat, min_repeat_ms=p.min_ms,
                                          f_preproc="" if self.cuda else "cache_flush_cpu_non_first_arg")
        return float(evaluator(*self._args(inputs)).median)

    def python(self, fn: Callable[[], Any], protocol: TimingProtocol | None = None) -> float:
        """Median seconds of a callable, in the loops `time_evaluator` would time it in."""
        return statistics.median(loop_means(fn, protocol or self.protocol, self.sync))


# --- the roofline ----------------------------------------------------------------------------------

def host_facts(target: TargetInfo) -> MachineFacts | None:
    """This CPU's measured peak and bandwidth (measured now if not cached); None on CUDA."""
    from tuner.measure.machine import machine_facts

    return None if target.is_cuda else machine_facts(target)


def roofline_columns(workload: Workload, facts: MachineFacts | None, latencies: dict[str, float | None]
                     ) -> dict[str, Any]:
    """A workload's place under the roofline: its intensity, the attainable GFLOP/s, what bounds it,
    and each side's GFLOP/s as a fraction of that (`<side>_roofline_fraction`)."""
    columns: dict[str, Any] = {"flops": workload.flops, "intensity": workload.intensity}
    if facts is None:
        return columns
    attainable, bound = facts.roofline(workload.flops, workload.memory_bytes)
    columns.update(roofline_gflops=attainable, bound=bound)
    for side, seconds in latencies.items():
        columns[f"{side}_roofline_fraction"] = workload.flops / seconds / 1e9 / attainable if seconds else None
    return columns


def roofline_summary(rows: Sequence[dict[str, Any]], sides: dict[str, str]) -> str:
    """How near the roof each side runs, as the roofline bar reads it: the median and the lowest share
    of the peak over compute-bound tasks of at least 100 MFLOP, and of the bandwidth over memory-bound
    ones. `sides` maps a row's side prefix to its name in words."""
    compute = f"compute-bound tasks of >= {COMPUTE_BOUND_MIN_FLOPS / 1e6:.0f} MFLOP"
    groups = {compute: ("compute", COMPUTE_BOUND_MIN_FLOPS, "peak"), "memory-bound tasks": ("memory", 0, "bandwidth")}
    parts = []
    for label, (bound, min_flops, roof) in groups.items():
        subset = [r for r in rows if r.get("bound") == bound and r.get("flops", 0) >= min_flops]
        shares = []
        for side, name in sides.items():
            fractions = sorted((r[f"{side}_roofline_fraction"], r["workload"]) for r in subset
                               if r.get(f"{side}_roofline_fraction"))
            if fractions:
                median = float(np.median([f for f, _ in fractions]))
                shares.append(f"{name} median {median:.0%} of {roof}, lowest {fractions[0][0]:.0%} "
                              f"({fractions[0][1]})")
        if shares:
            parts.append(f"{label} ({len(subset)}): " + "; ".join(shares))
    return "Under the roofline, " + ". ".join(parts) + "." if parts else ""


def percent(value: float | None) -> str:
    """A fraction as a whole percentage in a report table; - where there is none."""
    return "-" if value is None else f"{value:.0%}"


def machine_line(report: dict[str, Any]) -> str:
    """The measured peaks a report's roofline columns are relative to, in words."""
    measured = report["machine"].get("measured")
    if not measured:
        return "not measured"
    return (f"peak {measured['peak_gflops']:.0f} GFLOP/s, {measured['peak_gflops_1core']:.0f} on one core, "
            f"bandwidth {measured['bandwidth_gbs']:.0f} GB/s")


def plot_roofline(points: dict[str, list[tuple[float, float]]], facts: MachineFacts, path: Path, title: str) -> None:
    """Log-log roofline of the machine with one marker per (intensity, GFLOP/s) point, by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4.2))
    intensities = [x for side in points.values() for x, _ in side] or [facts.balance]
    xs = np.logspace(np.log10(min(min(intensities), facts.balance) / 2), np.log10(max(intensities) * 2), 200)
    ax.plot(xs, np.minimum(facts.peak_gflops, xs * facts.bandwidth_gbs), color="black", lw=1.2,
            label=f"roofline ({facts.peak_gflops:.0f} GFLOP/s, {facts.bandwidth_gbs:.0f} GB/s)")
    for (side, side_points), marker in zip(points.items(), "os^dv"):
        ax.scatter([x for x, _ in side_points], [y for _, y in side_points], marker=marker, s=22, label=side,
                   alpha=0.8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("GFLOP/s")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


# --- the vendor libraries ---------------------------------------------------------------------------

def numpy_fn(workload: Workload, inputs: Sequence[np.ndarray]) -> Callable[[], np.ndarray]:
    """numpy's (OpenBLAS) version of a GEMM workload over `inputs`."""
    a = inputs[0]
    b = np.swapaxes(inputs[1], -1, -2) if workload.transpose_b else inputs[1]  # a view, as BLAS takes it
    bias = inputs[2] if len(inputs) > 2 else None
    relu = getattr(workload, "epilogue", None) in ("relu", "bias_relu")

    def run() -> np.ndarray:
        out = np.matmul(a, b)
        if bias is not None:
            out += bias
        if relu:
            np.maximum(out, 0, out=out)
        return out

    return run


def vendor_versions(timer: Timer) -> dict[str, Callable[[], Any]]:
    """The vendor libraries' versions of the timer's workload over its inputs: torch always,
    numpy for GEMMs on the CPU (not with GELU, which numpy lacks)."""
    device_type = "cuda" if timer.cuda else "cpu"
    versions = {"torch": torch_fn(timer.workload, timer.inputs, device_type)}
    if not timer.cuda and timer.workload.op in GEMMS and "gelu" not in str(getattr(timer.workload, "epilogue", "")):
        versions["numpy"] = numpy_fn(timer.workload, timer.inputs)
    return versions


def vendor_sides(timer: Timer) -> dict[str, Callable[[], float]]:
    """The vendor versions that compute the reference, each as a timing with the timer's protocol."""
    return {name: (lambda fn=fn: timer.python(fn)) for name, fn in vendor_versions(timer).items()
            if timer.matches(fn())}


# --- MetaSchedule -----------------------------------------------------------------------------------

def fast_build(mod: Any, target: Any, _params: Any) -> Any:
    """MetaSchedule's default build without its `import tvm.s_tir.tensor_intrin`, which costs each
    fresh build worker about 12 s."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm.build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def metaschedule_builder(*, fast: bool = True, timeout_s: float = BUILDER_TIMEOUT_S,
                         max_workers: int | None = None) -> Any:
    """MetaSchedule's LocalBuilder, with `fast_build` unless `fast` is false. Its workers unpickle
    `fast_build` by module name, so they are given this repository on their path."""
    from tvm.s_tir import meta_schedule as ms

    paths = [str(REPO), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(filter(None, paths)))
    return ms.builder.LocalBuilder(max_workers=max_workers, timeout_sec=timeout_s,
                                   f_build=fast_build if fast else None)


@dataclass
class MetaScheduleRun:
    """MetaSchedule's tuning of one workload: its best program and how it got there."""

    module: Any  # runtime module of the best program
    trace: str  # the best program's schedule
    seconds: float  # from the start of tuning to the compiled best program
    curve: list[tuple[float, float]]  # (seconds, best GFLOPS so far) after each measured candidate
    latencies: list[float]  # seconds, by MetaSchedule's own runner, of each candidate that ran
    # with constant weights: the best program without its weight layout rewrite, as MetaSchedule
    # timed it (the rewrite done once, ahead), and the input shapes it takes
    timed: tuple[Any, list[tuple[int, ...]]] | None = None

    @property
    def best_latency(self) -> float | None:
        """The best candidate's latency by MetaSchedule's own runner; None if none ran."""
        return min(self.latencies, default=None)

    def timing(self, workload_inputs: Sequence[np.ndarray]) -> tuple[Any, list[np.ndarray]]:
        """The module to time and its inputs: `timed_program`'s for the best program."""
        return timed_program(self.module, self.timed, workload_inputs)


def timed_program(module: Any, timed: tuple[Any, list[tuple[int, ...]]] | None,
                  workload_inputs: Sequence[np.ndarray]) -> tuple[Any, list[np.ndarray]]:
    """MetaSchedule's program to time and its inputs: `module` on the workload's inputs, or the
    `timed` program (`MetaScheduleRun.timed`) with a weight of its own layout's shape (values
    random: the layout's values are made by the rewrite it leaves out, which `module` checked)."""
    if timed is None:
        return module, list(workload_inputs)
    program, shapes = timed
    rng = np.random.default_rng(0)
    return program, [x if x.shape == shape else rng.uniform(-1.0, 1.0, shape).astype(x.dtype)
                     for x, shape in zip(workload_inputs, shapes)]


def _recorder(flops: float, started: float, curve: list[tuple[float, float]], latencies: list[float]) -> Any:
    """A measure callback that records each candidate's latency and the best GFLOPS so far."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    @derived_object
    class Recorder(ms.measure_callback.PyMeasureCallback):
        def apply(self, task_scheduler: Any, task_id: int, measure_candidates: Any, builder_results: Any,
                  runner_results: Any) -> None:
            now = time.monotonic() - started
            for result in runner_results:
                if result.error_msg is None and result.run_secs:
                    latencies.append(float(np.median([float(s) for s in result.run_secs])))
                curve.append((now, flops / min(latencies) / 1e9 if latencies else 0.0))

    return Recorder()


def tune_metaschedule(workload: Workload, target: TargetInfo, trials: int, *, seed: int = 0, per_iter: int = 64,
                      evaluator: TimingProtocol = TimingProtocol(number=1, repeat=3, min_ms=20),
                      builder_timeout_s: float = BUILDER_TIMEOUT_S) -> MetaScheduleRun:
    """MetaSchedule's `tune_tir` (XGBoost cost model, evolutionary search) on every core: the
    reference this tuner is measured against. `evaluator` is its runner's timing protocol."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    func = workload.prim_func()
    if workload.constant_weights:  # its RewriteLayout may lay the weight out once, as in Relax's flow
        from workloads.workload import WEIGHT_INPUT

        func = func.with_attr("layout_free_buffers", [WEIGHT_INPUT])
    mod = tvm.IRModule({"main": func})
    runner = ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(
        number=evaluator.number, repeat=evaluator.repeat, min_repeat_ms=evaluator.min_ms,
        enable_cpu_cache_flush=not target.is_cuda))
    curve: list[tuple[float, float]] = []
    latencies: list[float] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="metaschedule-") as work_dir:
        database = ms.tune_tir(mod, target.tvm, work_dir, max_trials_global=trials,
                               num_trials_per_iter=min(per_iter, trials),
                               builder=metaschedule_builder(fast=not target.is_cuda, timeout_s=builder_timeout_s),
                               runner=runner, seed=seed, num_tuning_cores=CORES,
                               measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"),
                                                  _recorder(workload.flops, started, curve, latencies)])
        schedule = ms.tir_integration.compile_tir(database, mod, target.tvm)
    if schedule is None:
        raise RuntimeError(f"MetaSchedule found no working program of {workload.key}")
    module = tvm.compile(schedule.mod, target=target.tvm).mod
    timed = None
    if workload.constant_weights:
        from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

        ahead = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(schedule.mod)
        func = ahead["main"]
        shapes = [tuple(int(d) for d in param.shape) for param in func.params]  # 0.27: params are buffers
        timed = (tvm.compile(ahead, target=target.tvm).mod, shapes[:len(workload.input_shapes)])
    return MetaScheduleRun(module, str(schedule.trace), time.monotonic() - started, curve, latencies, timed)
