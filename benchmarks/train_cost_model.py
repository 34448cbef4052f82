"""Train and evaluate the rankers on measured records; ship the LightGBM model.

    python -m benchmarks.train_cost_model --records cost_model/data/cpu_dense.jsonl.gz
    python -m benchmarks.train_cost_model --ship
With --ship it only trains the shipped model on every CPU's records (`cost_model.pretrained.training_files`)
and writes it; `benchmarks.cost_model_transfer` says how that recipe ranks on a CPU or a network it never saw.
Evaluation is leave-one-workload-out: each workload of --records is ranked by a model that never
saw it, trained on the other workloads of --records and on every workload of --train-only.
It reports LightGBM as shipped (`PRETRAINED_PARAMS`) with all features, with PerStoreFeature's
alone and without the train-only workloads, LightGBM with the online ranker's defaults, and the
torch ranker; and references for reading them: LightGBM trained on 70% of the
held-out workload's own records (what the features allow without transfer), one timing repeat
ranking another (back-to-back noise) and, where configs were timed in two passes
(`benchmarks.collect --passes 2`), one pass ranking the other (the host's drift minutes apart).
A config timed twice counts once, with its fastest timing. Last, the shipped recipe ranks the
workloads of --other-host, records of another CPU that it never trained on, and, for comparison,
each of them once that CPU's other workloads join its training.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.common import RESULTS, today, write_report

if TYPE_CHECKING:
    from cost_model import Dataset, LightGBMRanker
    from search.records import Record


def evaluate(dataset: Dataset, make_model: Callable[[], Any], columns: np.ndarray, train_only: Dataset) -> dict:
    """Each workload ranked by a model trained on the others and on `train_only` only."""
    from cost_model import dataset_metrics, split_by_workload
    from cost_model.dataset import join
    from cost_model.metrics import mean_over_workloads

    per_workload = {}
    for held_out in dataset.workloads:
        train, test = split_by_workload(dataset, [held_out])
        train = join(train, train_only)
        train.features, test.features = train.features[:, columns], test.features[:, columns]
        model = make_model().fit(train.features, train.throughputs, train.groups)
        per_workload[held_out] = dataset_metrics(model, test)["per_workload"][held_out]
    return mean_over_workloads(per_workload)


def same_workload(dataset: Dataset, make_model: Callable[[], Any], train_fraction: float = 0.7, seed: int = 0) -> dict:
    """Each workload ranked on its other 30% by a model trained on 70% of its own records."""
    from cost_model.metrics import group_metrics, mean_over_workloads

    per_workload = {}
    bounds = np.concatenate([[0], np.cumsum(dataset.groups)])
    for workload, lo, hi in zip(dataset.workloads, bounds[:-1], bounds[1:]):
        rows = lo + np.random.default_rng(seed).permutation(hi - lo)
        cut = int(len(rows) * train_fraction)
        train, test = rows[:cut], rows[cut:]
        model = make_model().fit(dataset.features[train], dataset.throughputs[train], [len(train)])
        per_workload[workload] = group_metrics(model.predict(dataset.features[test]), dataset.throughputs[test])
    return mean_over_workloads(per_workload)


def parse_args() -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", default="cost_model/data/cpu_dense.jsonl.gz")
    parser.add_argument("--train-only", nargs="*", default=["cost_model/data/cpu_transfer.jsonl.gz"],
                        help="record files whose workloads only ever train (none: --train-only alone)")
    parser.add_argument("--other-host", nargs="*", default=["cost_model/data/cpu_other_host.jsonl.gz"],
                        help="record files of another CPU whose workloads only ever test (none: skip)")
    parser.add_argument("--ship", action="store_true",
                        help="only train the shipped model on every CPU's records (cost_model/data/cpu_*) and write it")
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args()


def shipped() -> Callable[[], LightGBMRanker]:
    """A maker of LightGBM rankers with the shipped model's parameters."""
    from cost_model import LightGBMRanker
    from cost_model.pretrained import PRETRAINED_PARAMS

    return functools.partial(LightGBMRanker, **PRETRAINED_PARAMS)


def model_table(store: list[Record], dataset: Dataset, train_only: Dataset) -> dict[str, dict]:
    """Each model variant's leave-one-workload-out metrics, then the references that read them."""
    from cost_model import FEATURE_NAMES, LightGBMRanker, TorchRanker
    from cost_model.dataset import join
    from cost_model.features import BASE_COLUMNS
    from cost_model.metrics import pass_agreement, repeat_agreement

    every = np.arange(len(FEATURE_NAMES))
    base = np.arange(len(FEATURE_NAMES))[BASE_COLUMNS]
    variants = {
        "lightgbm as shipped, all features": (shipped(), every),
        "lightgbm as shipped, PerStoreFeature only": (shipped(), base),
        "lightgbm with the online defaults, all features": (LightGBMRanker, every),
        "torch MLP, all features": (TorchRanker, every),
    }
    table = {name: evaluate(dataset, make, cols, train_only) for name, (make, cols) in variants.items()}
    if train_only.workloads:
        table["lightgbm as shipped, without the train-only workloads"] = evaluate(dataset, shipped(), every, join())
    table["reference: lightgbm trained on 70% of the same workload"] = same_workload(dataset, shipped())
    table["reference: one timing repeat ranking another"] = repeat_agreement(store)
    passes = pass_agreement(store)
    if passes["per_workload"]:
        table["reference: one timing pass ranking another, minutes later"] = passes
    return table


def other_host_table(other: Dataset, seen: Dataset, final: LightGBMRanker) -> dict[str, dict]:
    """The shipped recipe (`final`, trained on `seen`) ranking another host's workloads, and the
    same once that host's other workloads join its training."""
    from cost_model import FEATURE_NAMES, dataset_metrics

    return {"lightgbm, the shipped recipe on the records above": dataset_metrics(final, other),
            "lightgbm as shipped, the host's other workloads trained on too": evaluate(
                other, shipped(), np.arange(len(FEATURE_NAMES)), seen)}


def row(name: str, m: dict) -> str:
    """A Markdown table row of one model's metrics."""
    return f"| {name} | {m['pairwise_accuracy']:.3f} | {m['spearman']:.3f} | {m['top1']:.3f} | {m['top5']:.3f} |"


def report_text(table: dict[str, dict], other_table: dict[str, dict], other: Dataset, other_paths: list[str]) -> str:
    """The Markdown tables: every model, another host's workloads, and per held-out workload."""
    header = ["| model | pairwise accuracy | spearman | top-1 | top-5 |", "|---|---|---|---|---|"]
    lines = header + [row(name, m) for name, m in table.items()]
    if other_table:
        lines += ["", f"On another host's records ({' '.join(other_paths)}: {len(other.throughputs)} records over "
                  f"{len(other.workloads)} workloads), each workload ranked by a model that never saw it, trained "
                  f"on all the records above:", ""]
        lines += header + [row(name, m) for name, m in other_table.items()]
    lines += ["", "Per held-out workload (lightgbm as shipped, all features):", "",
              "| workload | pairwise | spearman | top-1 | top-5 |", "|---|---|---|---|---|"]
    lines += [row(w, m) for w, m in table["lightgbm as shipped, all features"]["per_workload"].items()]
    if other_table:
        alone, together = (m["per_workload"] for m in other_table.values())
        lines += ["", "Per workload of the other host (as shipped; with the host's other workloads trained on too):",
                  "",
                  "| workload | pairwise | top-5 | pairwise, host's others too | top-5, host's others too |",
                  "|---|---|---|---|---|"]
        for w in other.workloads:
            a, b = alone[w], together[w]
            lines.append(f"| {w} | {a['pairwise_accuracy']:.3f} | {a['top5']:.3f} | {b['pairwise_accuracy']:.3f} "
                         f"| {b['top5']:.3f} |")
    return "\n".join(lines)


def ship() -> None:
    """Trains the shipped model on every CPU's records and writes it."""
    from cost_model.dataset import read_dataset
    from cost_model.pretrained import fit_pretrained, pretrained_path, training_files

    every_host = read_dataset(training_files())
    path = pretrained_path("llvm")
    path.parent.mkdir(parents=True, exist_ok=True)
    fit_pretrained(every_host).save(path)
    print(f"wrote {path}: {len(every_host.throughputs)} records over {len(every_host.workloads)} (workload, host) "
          f"groups, hosts {', '.join(sorted(set(every_host.hosts)))}")


def main() -> None:
    """Evaluates every model and writes the report; with --ship, only trains and writes the shipped model."""
    args = parse_args()
    if args.ship:
        ship()
        return

    from cost_model import records_to_dataset
    from cost_model.dataset import files_to_dataset, join
    from cost_model.pretrained import fit_pretrained
    from search.records import load_records

    started = time.monotonic()
    store = load_records(args.records)
    dataset = records_to_dataset(store)
    train_only = files_to_dataset(args.train_only)
    extra = (f" (+ {len(train_only.throughputs)} over {len(train_only.workloads)} train-only)"
             if train_only.workloads else "")
    print(f"{len(dataset.throughputs)} records over {len(dataset.workloads)} workloads{extra}, "
          f"features in {time.monotonic() - started:.1f} s")
    table = model_table(store, dataset, train_only)
    seen = join(dataset, train_only)  # all that the shipped model trains on
    other = files_to_dataset(args.other_host)
    other_table = other_host_table(other, seen, fit_pretrained(seen)) if other.workloads else {}
    report = report_text(table, other_table, other, args.other_host)
    print(report)
    table.update({f"other host: {name}": m for name, m in other_table.items()})
    write_report(args.out / f"cost_model-{today()}", table,
                 f"# Cost model, leave-one-workload-out ({len(dataset.throughputs)} records, "
                 f"{len(dataset.workloads)} workloads{extra})\n\nCommand: `python -m benchmarks.train_cost_model "
                 f"--records {args.records} --train-only {' '.join(args.train_only)} "
                 f"--other-host {' '.join(args.other_host)}`\n\n{report}\n")


if __name__ == "__main__":
    main()
