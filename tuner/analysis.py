"""Search traces as data, then as pictures: the helpers behind `notebooks/explore_traces.ipynb`.

Every `*_frame` function returns a pandas DataFrame; every `plot_*` draws one on matplotlib axes,
so the same views are one call away in a script.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Mapping

import numpy as np

from search.records import RecordStore, is_ok, median_cost

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes

    from cost_model import LightGBMRanker


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
