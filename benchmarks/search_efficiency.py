"""Which design choices earn their place? Replayed tuning runs over a dense dataset, many seeds.

    python -m benchmarks.search_efficiency --records cost_model/data/cpu_dense.jsonl.gz --seeds 20

For each workload of the record file, every variant (random search; annealing and evolutionary
with the LightGBM ranker; the evolutionary default with the draft pre-filter (on CPUs, where it is off
by default), without a pretrained model, and with the pretrained model never retrained) tunes over the recorded configs only, answered from the records. Reported per
workload and variant over the seeds: trials needed to reach 95% of the dataset's best throughput
(median and interquartile range) and the best found at 32, 64 and 128 trials (median fraction of
the dataset's best). "Pretrained" means the shipped model's recipe trained on the *other* workloads
of the file and on the --train-only files, so that no run has seen its own workload's measurements
before it starts.
Writes `<out>/search_efficiency-<date>.json`, `.md` and `.png`.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from benchmarks.common import CORES, REPO, RESULTS, command, today, write_report
from tuner.defaults import BATCH_SIZE

if TYPE_CHECKING:
    from cost_model import Dataset, LightGBMRanker
    from cost_model.features import FeatureExtractor
    from search import Config
    from tuner.measure import ReplayMeasurer

CHECKPOINTS = (32, 64, 128)
GOAL = 0.95


@dataclass(frozen=True)
class Variant:
    """A design choice to replay: the search strategy, with or without the draft pre-filter and the pretrained model."""

    name: str
    strategy: str
    draft: bool | None = None  # whether the draft model prunes (None: the target's default)
    pretrained: bool = True
    online: bool = True  # retrained after every batch (else the pretrained model ranks alone)


VARIANTS = (
    Variant("random", "random", draft=False, pretrained=False),
    Variant("annealing + lightgbm", "annealing"),
    Variant("evolutionary + lightgbm (default)", "evolutionary"),
    Variant("evolutionary, draft pre-filter", "evolutionary", draft=True),
    Variant("evolutionary, no pretrained model", "evolutionary", pretrained=False),
    Variant("evolutionary, pretrained model never retrained", "evolutionary", online=False),
)
DEFAULT = VARIANTS[2].name


class Frozen:
    """A fitted ranker that ignores new data: what the pretrained model does without online retraining."""

    def __init__(self, model: LightGBMRanker) -> None:
        self.model = model

    def fit(self, features: np.ndarray, throughputs: np.ndarray, groups: np.ndarray) -> "Frozen":
        return self

    update = fit

    def predict(self, features: np.ndarray) -> np.ndarray:
        return self.model.predict(features)

    def save(self, path: str) -> None:
        self.model.save(path)


class CachedFeatures:
    """Feature rows of a workload's recorded configs, extracted once and shared by every run."""

    def __init__(self, configs: list[Config], extractor: FeatureExtractor) -> None:
        self.rows = dict(zip(configs, extractor(configs)))

    def __call__(self, configs: list[Config]) -> np.ndarray:
        return np.stack([self.rows[c] for c in configs]) if configs else np.zeros((0, 0), np.float32)


def replay(key: str, variant: Variant, seed: int, measurer: ReplayMeasurer, features: CachedFeatures,
           base_model: LightGBMRanker, goal_latency: float, max_trials: int, batch_size: int) -> dict:
    """One replayed run through the tuning loop, which stops once the goal is reached and every
    checkpoint passed: the best latency after each trial, and the trial that reached the goal."""
    from cost_model import LightGBMRanker
    from tuner import run
    from tuner.replay import replay_session

    model = (LightGBMRanker(seed=seed, init_model=base_model if variant.pretrained else None) if variant.online
             else Frozen(base_model))
    session = replay_session(measurer, key, strategy=variant.strategy, model=model, seed=seed, draft=variant.draft,
                             candidates=list(features.rows), extractor=features)
    run([session], measurer, max_trials, batch_size=batch_size,
        stop=lambda: len(session.trace) >= max(CHECKPOINTS) and session.best_latency <= goal_latency)
    curve = [math.inf if row["best_latency_s"] is None else row["best_latency_s"] for row in session.trace]
    reached = next((i + 1 for i, latency in enumerate(curve) if latency <= goal_latency), None)
    return {"trials_to_goal": reached, "curve": curve}


def summarize(runs: list[dict], best_latency: float, space: int) -> dict:
    """Median and quartiles of trials to the goal (a run that never got there counts as `space`)."""
    trials = np.array([r["trials_to_goal"] or space for r in runs], dtype=float)
    at = {}
    for k in CHECKPOINTS:
        values = [best_latency / r["curve"][min(k, len(r["curve"])) - 1] for r in runs]
        at[str(k)] = float(np.median(values))
    return {"median": float(np.median(trials)), "q25": float(np.percentile(trials, 25)),
            "q75": float(np.percentile(trials, 75)), "never": int(sum(r["trials_to_goal"] is None for r in runs)),
            "best_fraction_at": at}


def random_median(configs: int, goal_configs: int) -> int:
    """Exact median trials of uniform random search without repeats to draw one of `goal_configs`
    among `configs`: the sampled medians of 20 seeds swing by hundreds when one config is the goal."""
    missed = 1.0
    for trial in range(1, configs - goal_configs + 2):
        missed *= (configs - goal_configs - trial + 1) / (configs - trial + 1)
        if missed <= 0.5:
            return trial
    return configs


def evaluate_workload(key: str, records_path: str, train_only: Dataset, seeds: int, max_trials: int,
                      batch_size: int, unseen_host: bool = False, variants: tuple[Variant, ...] = VARIANTS) -> dict:
    """Every variant over `seeds` replayed runs of one workload (a process of its own);
    `train_only`: a Dataset the pretrained model also learns from (with `unseen_host`, the only one:
    the file's host is then new to it)."""
    from cost_model import records_to_dataset
    from cost_model.dataset import extractor_for, join, record_target
    from cost_model.pretrained import fit_pretrained
    from search import Config
    from search.records import fastest_per_config, is_ok, load_records, median_cost
    from tuner import ReplayMeasurer
    from workloads import from_key

    recorded = load_records(records_path)
    measurer = ReplayMeasurer(records_path)
    others = join() if unseen_host else records_to_dataset(r for r in recorded if r["workload"] != key)
    base_model = fit_pretrained(join(others, train_only))  # never saw `key` on this host
    records = [r for r in recorded if r["workload"] == key]
    best = min(median_cost(r) for r in records if is_ok(r))
    extractor = extractor_for(key, record_target(records[0]))
    latency = {Config.from_json(r["config"]): median_cost(r) for r in fastest_per_config(records)}  # as in replay
    configs = [c for c in latency if extractor.template.space.is_valid(c)]
    features = CachedFeatures(configs, extractor)
    goal_configs = sum(latency[c] <= best / GOAL for c in configs)
    entry = {"configs": len(configs), "best_gflops": from_key(key).flops / best / 1e9, "goal_configs": goal_configs,
             "random_exact_median": random_median(len(configs), goal_configs), "variants": {}, "runs": {}}
    for variant in variants:
        runs = [replay(key, variant, seed, measurer, features, base_model, best / GOAL,
                       min(max_trials, len(configs)), batch_size) for seed in range(seeds)]
        entry["variants"][variant.name] = summarize(runs, best, len(configs))
        entry["runs"][variant.name] = [r["trials_to_goal"] for r in runs]
        print(f"{key[:50]:50s} {variant.name:38s} median {entry['variants'][variant.name]['median']:.0f}", flush=True)
    return entry


def variant_names(report: dict) -> list[str]:
    """The variants the report replayed (all of them, or those of --variants)."""
    return list(next(iter(report["workloads"].values()))["variants"])


def markdown(report: dict) -> str:
    """The report as Markdown: per workload a table of the variants, then the summary against random search."""
    lines = [f"# Search efficiency on replayed records ({report['date']})", "",
             f"Command: `{report['command']}`", "",
             f"Records: {report['records']} (each config at its fastest timing); pretrained model "
             + ("trained on other CPUs' records alone: " if report.get("unseen_host") else "also trained on: ")
             + f"{', '.join(report.get('train_only', [])) or 'nothing else'}; {report['seeds']} seeds; "
             f"batch {report['batch_size']}; goal: "
             f"{GOAL:.0%} of the dataset's best throughput. *trials*: median [q25, q75] trials to the goal "
             "(a run that never reached it counts as the dataset's size); *@k*: median fraction of the best "
             "throughput found after k trials.", ""]
    for key, entry in report["workloads"].items():
        lines += [f"## {key}", "", f"{entry['configs']} recorded configs, best {entry['best_gflops']:.1f} GFLOPS.", "",
                  "| variant | trials to 95% | never | " + " | ".join(f"@{k}" for k in CHECKPOINTS) + " |",
                  "|---|---|---|" + "---|" * len(CHECKPOINTS)]
        for name, s in entry["variants"].items():
            lines.append(f"| {name} | {s['median']:.0f} [{s['q25']:.0f}, {s['q75']:.0f}] | {s['never']} | "
                         + " | ".join(f"{s['best_fraction_at'][str(k)]:.2f}" for k in CHECKPOINTS) + " |")
        lines.append("")
    if not {"random", DEFAULT} <= set(variant_names(report)):
        return "\n".join(lines) + "\n"
    lines += ["## Summary", "", "*random, exact*: the median trials of uniform random search without repeats, "
              "computed from how many recorded configs reach the goal; it is what the sampled random median "
              "estimates, without the luck of 20 seeds.", "",
              "| workload | configs at the goal | random, sampled | random, exact | default | default / exact random |",
              "|---|---|---|---|---|---|"]
    for key, entry in report["workloads"].items():
        r, d = entry["variants"]["random"]["median"], entry["variants"][DEFAULT]["median"]
        exact = entry["random_exact_median"]
        lines.append(f"| {key} | {entry['goal_configs']} | {r:.0f} | {exact} | {d:.0f} | {d / exact:.2f} |")
    return "\n".join(lines) + "\n"


def plot(report: dict, path: Path) -> None:
    """Median trials to 95% of the best, per workload and variant (log scale)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(report["workloads"])
    names = variant_names(report)
    fig, ax = plt.subplots(figsize=(11, 4.5))
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        medians = [report["workloads"][k]["variants"][name]["median"] for k in keys]
        lows = [m - report["workloads"][k]["variants"][name]["q25"] for m, k in zip(medians, keys)]
        highs = [report["workloads"][k]["variants"][name]["q75"] - m for m, k in zip(medians, keys)]
        ax.bar(np.arange(len(keys)) + i * width, medians, width, yerr=[lows, highs], label=name, capsize=2)
    ax.set_xticks(np.arange(len(keys)) + width * (len(names) - 1) / 2)
    ax.set_xticklabels([k.split(",float32")[0].replace("(", "\n(") for k in keys], fontsize=6)
    ax.set_yscale("log")
    ax.set_ylabel(f"trials to {GOAL:.0%} of the best (median, IQR)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Replays every variant on each workload, a process per workload; writes the report."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", default=str(REPO / "cost_model" / "data" / "cpu_dense.jsonl.gz"))
    parser.add_argument("--train-only", nargs="*", default=[str(REPO / "cost_model" / "data" / "cpu_transfer.jsonl.gz")],
                        help="record files whose workloads only train the pretrained model (none: --train-only alone)")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--max-trials", type=int, default=512, help="a run stops here if it never reaches the goal")
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE, help="configs per round (the tuner's default)")
    parser.add_argument("--workloads", nargs="*", help="workload keys (default: every workload of the file)")
    parser.add_argument("--unseen-host", action="store_true",
                        help="the pretrained model learns from --train-only alone: records of other CPUs than "
                             "the one --records was measured on, which it then meets for the first time")
    parser.add_argument("--variants", nargs="*", choices=[v.name for v in VARIANTS], metavar="NAME",
                        help="replay these variants only (default: all)")
    parser.add_argument("--jobs", type=int, default=CORES, help="workloads in parallel")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    from cost_model.dataset import files_to_dataset
    from search.records import load_records

    variants = tuple(v for v in VARIANTS if not args.variants or v.name in args.variants)
    keys = args.workloads or sorted({r["workload"] for r in load_records(args.records)})
    train_only = files_to_dataset(args.train_only)
    report = {"date": today(), "command": command(),
              "records": os.path.relpath(args.records, REPO),
              "train_only": [os.path.relpath(path, REPO) for path in args.train_only], "seeds": args.seeds,
              "unseen_host": args.unseen_host,
              "batch_size": args.batch_size, "workloads": {}}
    with concurrent.futures.ProcessPoolExecutor(args.jobs) as pool:
        futures = {key: pool.submit(evaluate_workload, key, args.records, train_only, args.seeds, args.max_trials,
                                    args.batch_size, args.unseen_host, variants) for key in keys}
        report["workloads"] = {key: future.result() for key, future in futures.items()}
    out = args.out / f"search_efficiency-{report['date']}{'-unseen-host' if args.unseen_host else ''}"
    write_report(out, report, markdown(report))
    plot(report, out.with_suffix(".png"))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
