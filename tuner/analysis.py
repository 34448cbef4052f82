"""Search traces as data, then as pictures: the helpers behind `notebooks/explore_traces.ipynb`.

Every `*_frame` function returns a pandas DataFrame; every `plot_*` draws one on matplotlib axes,
so the same views are one call away in a script. The `model_*` and `layer_*` views read a model's
records (`tune_model`, `tune_suite`) against its suite of layers.
"""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Callable, Mapping

import numpy as np

from search.records import RecordStore, is_ok, median_cost

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

    from cost_model import LightGBMRanker
    from workloads import Suite

    from .torch_kernels import OptimizedModule


def trace_frame(records: str | RecordStore, workload: str | None = None) -> pd.DataFrame:
    """One row per measured candidate in file order: trial, round, elapsed, latency, GFLOPS, best so far.

    Every record of the file counts, whatever machine measured it (the `target` column says which);
    trials and best-so-far are counted per workload and target."""
    import pandas as pd

    from workloads import from_key

    store = records if isinstance(records, RecordStore) else RecordStore(records)
    rows = store.select(workload)
    if not rows:
        raise ValueError(f"{store.path} has no records" + (f" of {workload}" if workload else ""))
    flops = {key: from_key(key).flops for key in {r["workload"] for r in rows}}
    frame = pd.DataFrame({
        "workload": [r["workload"] for r in rows],
        "target": [r["target"] for r in rows],
        "round": [r.get("round", 0) for r in rows],
        "elapsed_s": [r.get("elapsed_s", np.nan) for r in rows],
        "predicted": [r.get("predicted", np.nan) for r in rows],
        "error": [r["error"] for r in rows],
        "latency_s": [median_cost(r) if is_ok(r) else np.nan for r in rows],
        "config": [r["config"] for r in rows],
    })
    frame["gflops"] = [flops[w] / l / 1e9 if np.isfinite(l) else 0.0 for w, l in zip(frame.workload, frame.latency_s)]
    frame["trial"] = frame.groupby(["workload", "target"]).cumcount() + 1
    frame["best_gflops"] = frame.groupby(["workload", "target"])["gflops"].cummax()
    return frame


def model_trace_frame(records: str | RecordStore, suite: Suite, target: str | None = None) -> pd.DataFrame:
    """`trace_frame` of the suite's layers on one target (needed when the records hold several), in
    measurement order, with each layer's name and weight, the batch each trial came in (a run of
    one layer's trials in one round), the model's trial count and the layer's best latency so far."""
    trace = trace_frame(records)
    entries = {e.workload.key: e for e in suite}
    trace = trace[trace.workload.isin(list(entries))]
    targets = sorted(set(trace.target))
    if target is None and len(targets) > 1:
        raise ValueError(f"the records hold {len(targets)} targets; pick one: {', '.join(targets)}")
    trace = trace[trace.target == (target or (targets[0] if targets else None))].reset_index(drop=True)
    if trace.empty:
        raise ValueError(f"no records of {suite.name}'s layers" + (f" on {target}" if target else ""))
    trace["layer"] = trace.workload.map(lambda key: entries[key].layer)
    trace["weight"] = trace.workload.map(lambda key: entries[key].weight)
    batch_key = trace.workload + "@" + trace["round"].astype(str)
    trace["batch"] = (batch_key != batch_key.shift()).cumsum()
    trace["model_trial"] = np.arange(1, len(trace) + 1)
    trace["best_latency_s"] = trace.groupby("workload").latency_s.cummin()
    return trace


def model_latency_frame(trace: pd.DataFrame, suite: Suite, fallback: Mapping[str, float] | None = None
                        ) -> pd.DataFrame:
    """After each batch of `model_trace_frame`: the model's trials so far and the estimated seconds
    its captured layers take (weight x best latency). A layer not measured yet counts at
    `fallback[workload key]` (e.g. torch's latency, `torch_layer_latency`), else the estimate is NaN."""
    import pandas as pd

    weights = {e.workload.key: e.weight for e in suite}
    measured: dict[str, float] = {}
    rows = []
    for batch, part in trace.groupby("batch", sort=True):
        for key, latency in part.groupby("workload").latency_s.min().items():
            if np.isfinite(latency):
                measured[key] = min(latency, measured.get(key, np.inf))
        estimate = sum(w * measured.get(k, (fallback or {}).get(k, np.nan)) for k, w in weights.items())
        rows.append({"batch": batch, "trials": int(part.model_trial.iloc[-1]), "layer": part.layer.iloc[0],
                     "estimated_s": estimate})
    return pd.DataFrame(rows, columns=["batch", "trials", "layer", "estimated_s"])


def _median_seconds(run: Callable[[], object], min_s: float, repeat: int) -> float:
    """Median seconds per call of `run` over `repeat` loops of at least `min_s` each, warm."""
    run(), run()
    started = time.perf_counter()
    run()
    number = max(1, int(min_s / max(time.perf_counter() - started, 1e-7)))
    means = []
    for _ in range(repeat):
        started = time.perf_counter()
        for _ in range(number):
            run()
        means.append((time.perf_counter() - started) / number)
    return statistics.median(means)


def torch_layer_latency(suite: Suite, min_s: float = 0.05, repeat: int = 5) -> dict[str, float]:
    """torch's median seconds per call of each layer of the suite, timed here on the threads torch
    is set to (`workloads.torch_ops`): what a layer costs when it stays in torch."""
    import torch

    from workloads.torch_ops import torch_fn

    with torch.no_grad():
        return {entry.workload.key: _median_seconds(torch_fn(entry.workload, entry.workload.random_inputs(0)),
                                                    min_s, repeat) for entry in suite}


def kernel_layer_latency(module: OptimizedModule, min_s: float = 0.05, repeat: int = 5) -> dict[str, float]:
    """Our median seconds per call of each layer kind of an optimized module, timed as
    `torch_layer_latency` times torch's: each kernel as the module runs it, its weight packed
    once where the module packs it (then faster than its record, which timed the packing too)."""
    import torch

    from .torch_kernels import KERNELS, run_kernel

    latencies: dict[str, float] = {}
    ids = {id(kernel): kernel_id for kernel_id, kernel in KERNELS.items()}  # this module's kernels' ids
    for (key, _), kernel in sorted(module.kernels.items(), key=lambda item: not item[0][1]):
        if key in latencies:  # a layer kind run both ways: the prepacked kernel, as weights are constant
            continue
        shapes = kernel.workload.input_shapes
        if kernel.packed_weight is not None:
            shapes = kernel.packed_weight.packed_shapes(shapes)
        inputs = [torch.randn(shape, dtype=kernel.dtype) for shape in shapes]
        kernel_id = ids[id(kernel)]
        latencies[key] = _median_seconds(lambda: run_kernel(kernel_id, inputs), min_s, repeat)
    return latencies


def layer_frame(trace: pd.DataFrame, suite: Suite, torch_latency: Mapping[str, float] | None = None
                ) -> pd.DataFrame:
    """One row per distinct layer of the suite: weight, trials, our best latency, torch's (if given),
    the speedup, and each side's share of the captured layers' time (weight x latency)."""
    import pandas as pd

    trials = trace.groupby("workload").size()
    best = trace.groupby("workload").latency_s.min()
    rows = [{"layer": e.layer, "workload": e.workload.key, "weight": e.weight,
             "trials": int(trials.get(e.workload.key, 0)), "ours_ms": best.get(e.workload.key, np.nan) * 1e3,
             "torch_ms": (torch_latency or {}).get(e.workload.key, np.nan) * 1e3} for e in suite]
    frame = pd.DataFrame(rows)
    frame["speedup"] = frame.torch_ms / frame.ours_ms
    for side in ("ours", "torch"):
        weighted = frame.weight * frame[f"{side}_ms"]
        frame[f"{side}_share"] = weighted / weighted.sum()
    return frame.sort_values("ours_share", ascending=False, ignore_index=True)


def plot_model_trials(trace: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Trials each layer has received, against the model's trials: where the scheduler spent them."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6, 4))[1]
    for layer, part in trace.groupby("layer", sort=False):
        ax.step(part.model_trial, np.arange(1, len(part) + 1), where="post", label=layer)
    ax.set_xlabel("trials of the model")
    ax.set_ylabel("trials of the layer")
    ax.legend(fontsize=7)
    return ax


def plot_model_latency(latency: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """The captured layers' estimated seconds after each batch."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6, 4))[1]
    ax.step(latency.trials, latency.estimated_s * 1e3, where="post")
    ax.set_xlabel("trials of the model")
    ax.set_ylabel("estimated ms of the tuned layers")
    return ax


def round_correlation_frame(trace: pd.DataFrame) -> pd.DataFrame:
    """Per round: Spearman correlation of predicted score and measured GFLOPS (how the model sharpens)."""
    import pandas as pd

    rows = []
    for round_, part in trace.dropna(subset=["predicted"]).groupby("round"):
        ok = part[part.gflops > 0]
        if len(ok) >= 3:
            rows.append({"round": round_, "candidates": len(ok),
                         "spearman": ok.predicted.rank().corr(ok.gflops.rank())})
    return pd.DataFrame(rows, columns=["round", "candidates", "spearman"])


def knob_frame(trace: pd.DataFrame, top: int = 10) -> pd.DataFrame:
    """How often each knob value occurs among the `top` fastest candidates."""
    import pandas as pd

    best = trace.nlargest(top, "gflops")
    rows = []
    for knob in best.config.iloc[0]:
        values = best.config.map(lambda c: str(c[knob])).value_counts()
        rows += [{"knob": knob, "value": v, "count": n, "share": n / len(best)} for v, n in values.items()]
    return pd.DataFrame(rows).sort_values(["knob", "count"], ascending=[True, False], ignore_index=True)


def importance_frame(model: LightGBMRanker, top: int = 20) -> pd.DataFrame:
    """The LightGBM ranker's features by total gain."""
    import pandas as pd

    from cost_model import FEATURE_NAMES

    gains = model.feature_importance()
    order = np.argsort(-gains)[:top]
    return pd.DataFrame({"feature": [FEATURE_NAMES[i] for i in order], "gain": gains[order]})


def plot_convergence(runs: Mapping[str, pd.DataFrame], by: str = "trial", ax: Axes | None = None) -> Axes:
    """Best-so-far GFLOPS of several traces, against trials or elapsed seconds."""
    import matplotlib.pyplot as plt

    if by not in ("trial", "elapsed_s"):
        raise ValueError(f"by must be 'trial' or 'elapsed_s', got {by!r}")
    ax = ax or plt.subplots(figsize=(6, 4))[1]
    for name, trace in runs.items():
        ax.step(trace[by], trace.best_gflops, where="post", label=name)
    ax.set_xlabel("trials" if by == "trial" else "seconds")
    ax.set_ylabel("best GFLOPS so far")
    ax.legend()
    return ax


def plot_predicted_vs_measured(trace: pd.DataFrame, ax: Axes | None = None) -> Axes:
    """Predicted score against measured GFLOPS, one colour per round."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6, 4))[1]
    scored = trace.dropna(subset=["predicted"])
    points = ax.scatter(scored.predicted, scored.gflops, c=scored["round"], cmap="viridis", s=14)
    ax.figure.colorbar(points, ax=ax, label="round")
    ax.set_xlabel("predicted score")
    ax.set_ylabel("measured GFLOPS")
    return ax
