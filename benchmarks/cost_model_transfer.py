"""How the cost model ranks on a machine or a network it never saw, over training seeds.

    python -m benchmarks.cost_model_transfer [--seeds 5] [--per-store-seeds 3]
    python -m benchmarks.cost_model_transfer --per-store-seeds 0 --recipe '{"feature_fraction": 0.5}'

Leave-one-host-out: for each CPU in the random-config datasets (`cost_model/data/cpu_*`, each record
carrying the host that measured it), a model trained on the other CPUs' records ranks this CPU's
workloads; "strict" also keeps this CPU's workloads out of training (a new workload on a new CPU),
and the GEMM columns are the matmul and batch-matmul workloads alone. The same is run without the
host-aware terms (FMA pipes, cache sizes) and without the knob features, to show what they are worth,
and, over fewer seeds, with `PerStoreFeature` added (lowering every candidate: twenty times the cost).
Leave-one-network-out, as TenSet defines it: for each network of the model suites, a model trained
on everything except that network's tasks (random configs of every CPU, and the tuning records of
the other networks) ranks the held-out network's tuning records (`networks-znver4.jsonl.gz`); top-k
is the best latency over the best among the model's top k, averaged over the network's tasks
weighted by their occurrences. With `--new-host FILE...`, records of workloads that no training file
holds, measured on a host that none measured (a user's first run on their own CPU): the shipped recipe,
trained on every other host's records, ranks each of them. Every figure is the mean over training
seeds, with its spread. `--recipe` changes the shipped recipe for every fit (its constructor
arguments, or any other LightGBM setting), to try one on all of these before shipping it.
"""

from __future__ import annotations

import argparse
import inspect
import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.common import REPO, RESULTS, command, today, versions, write_report

if TYPE_CHECKING:
    from cost_model import Dataset

NETWORK_RECORDS = REPO / "cost_model" / "data" / "networks-znver4.jsonl.gz"
NETWORKS = ("resnet50", "mobilenet_v2", "bert_base", "llm_7b")
HOST_AWARE = ("fma_pipes", "l3_fit", "log_l1_bytes", "log_l2_bytes", "l1_read_ratio", "l2_read_ratio",
              "l3_read_ratio", "accumulator_l1_ratio", "accumulator_registers")
METRICS = ("pairwise_accuracy", "top1", "top5")
Recipe = dict[str, Any]  # changes to the shipped LightGBM recipe (none: as shipped)


def is_gemm(workload: str) -> bool:
    return workload.startswith(("matmul(", "batch_matmul("))


def fit(train: Dataset, seed: int, columns: np.ndarray, recipe: Recipe) -> Any:
    """The shipped recipe with `recipe`'s changes, trained on `train` with `seed`: a key that
    `LightGBMRanker` takes as an argument sets it, any other is a LightGBM setting."""
    from cost_model import LightGBMRanker
    from cost_model.pretrained import PRETRAINED_PARAMS

    arguments = inspect.signature(LightGBMRanker).parameters
    given = {k: v for k, v in recipe.items() if k in arguments}
    booster = {k: v for k, v in recipe.items() if k not in arguments}
    params = {**PRETRAINED_PARAMS, **given, "seed": seed}
    params["booster_params"] = {**params.get("booster_params", {}), **booster}
    return LightGBMRanker(**params).fit(train.features[:, columns], train.throughputs, train.groups)


def per_group(model: Any, test: Dataset, columns: np.ndarray) -> list[dict[str, float]]:
    """Each group's ranking metrics."""
    from cost_model.metrics import group_metrics

    scores = model.predict(test.features[:, columns])
    bounds = np.concatenate([[0], np.cumsum(test.groups)]).astype(int)
    return [group_metrics(scores[lo:hi], test.throughputs[lo:hi]) for lo, hi in zip(bounds[:-1], bounds[1:])]


def spread(values: Iterable[float]) -> dict[str, float]:
    """Mean, standard deviation, min and max over seeds."""
    array = np.asarray(list(values), dtype=float)
    return {"mean": float(array.mean()), "std": float(array.std()), "min": float(array.min()),
            "max": float(array.max())}


def leave_one_host_out(data: Dataset, seeds: list[int], columns: np.ndarray, strict: bool,
                       recipe: Recipe) -> dict[str, Any]:
    """Per host: its workloads' mean metrics (all, and GEMMs alone) for each seed, then the spread."""
    rows: dict[str, Any] = {}
    for host in sorted(set(data.hosts)):
        test = data.where(lambda _, h: h == host)
        held = set(test.workloads) if strict else set()
        train = data.where(lambda w, h: h != host and w not in held)
        runs = []
        for seed in seeds:
            metrics = per_group(fit(train, seed, columns, recipe), test, columns)
            gemms = [m for m, w in zip(metrics, test.workloads) if is_gemm(w)]
            runs.append({**{k: np.mean([m[k] for m in metrics]) for k in METRICS},
                         **{f"gemm_{k}": np.mean([m[k] for m in gemms]) for k in METRICS}})
        rows[host] = {"workloads": len(test.workloads), "train_workloads": len(set(train.workloads)),
                      "train_rows": int(train.groups.sum()),
                      **{k: spread(r[k] for r in runs) for k in runs[0]}}
    return rows


def leave_one_network_out(random: Dataset, networks: Dataset, seeds: list[int], columns: np.ndarray,
                          recipe: Recipe) -> dict[str, Any]:
    """Per network: task-weighted top-1 and top-5 (and mean pairwise accuracy) for each seed. A
    task's tuning records and its random configs are separate query groups."""
    import dataclasses

    from cost_model.dataset import join
    from workloads.suites import load_suite

    networks = dataclasses.replace(networks, hosts=[f"{h}, tuning" for h in networks.hosts])
    rows: dict[str, Any] = {}
    for network in NETWORKS:
        # the records timed each task with its weights given on every call (packed per call)
        weights = {e.workload.with_weights(constant=False).key: e.weight for e in load_suite(network)}
        test = networks.where(lambda w, _: w in weights)
        train = join(random.where(lambda w, _: w not in weights), networks.where(lambda w, _: w not in weights))
        w = np.array([weights[k] for k in test.workloads], dtype=float)
        runs = []
        for seed in seeds:
            metrics = per_group(fit(train, seed, columns, recipe), test, columns)
            runs.append({"top1": float(np.dot(w, [m["top1"] for m in metrics]) / w.sum()),
                         "top5": float(np.dot(w, [m["top5"] for m in metrics]) / w.sum()),
                         "pairwise_accuracy": float(np.mean([m["pairwise_accuracy"] for m in metrics]))})
        rows[network] = {"tasks": len(test.workloads), "records": int(test.groups.sum()),
                         **{k: spread(r[k] for r in runs) for k in METRICS}}
    return rows


def new_host(random: Dataset, test: Dataset, seeds: list[int], columns: np.ndarray,
             recipe: Recipe) -> dict[str, Any]:
    """Per workload of `test`: the shipped recipe, trained on the records of every host but
    `test`'s and of no workload in `test`, ranking its configs, for each seed."""
    hosts, held = set(test.hosts), set(test.workloads)
    train = random.where(lambda w, h: h not in hosts and w not in held)
    runs = [per_group(fit(train, seed, columns, recipe), test, columns) for seed in seeds]
    return {f"{workload} ({host})": {"configs": int(size), **{k: spread(run[i][k] for run in runs) for k in METRICS}}
            for i, (workload, host, size) in enumerate(zip(test.workloads, test.hosts, test.groups))}


def cell(stats: dict[str, float]) -> str:
    return f"{stats['mean']:.3f} ± {stats['std']:.3f}"


def host_table(rows: dict[str, Any]) -> list[str]:
    lines = ["| held-out host | workloads | pairwise | top-1 | top-5 | GEMM pairwise | GEMM top-5 |",
             "|---|---|---|---|---|---|---|"]
    for host, r in rows.items():
        lines.append(f"| {host} | {r['workloads']} | {cell(r['pairwise_accuracy'])} | {cell(r['top1'])} | "
                     f"{cell(r['top5'])} | {cell(r['gemm_pairwise_accuracy'])} | {cell(r['gemm_top5'])} |")
    return lines


def network_table(rows: dict[str, Any]) -> list[str]:
    lines = ["| held-out network | tasks | records | top-1 (task-weighted) | top-5 (task-weighted) | pairwise |",
             "|---|---|---|---|---|---|"]
    for network, r in rows.items():
        lines.append(f"| {network} | {r['tasks']} | {r['records']} | {cell(r['top1'])} | {cell(r['top5'])} | "
                     f"{cell(r['pairwise_accuracy'])} |")
    return lines


def new_host_table(rows: dict[str, Any]) -> list[str]:
    lines = ["| workload (host) | configs | pairwise | top-1 | top-5 |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {r['configs']} | {cell(r['pairwise_accuracy'])} | {cell(r['top1'])} | {cell(r['top5'])} |"
              for name, r in rows.items()]
    return lines


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Cost model on unseen hosts and networks ({report['date']})", "",
             f"Command: `{report['command']}`; the shipped recipe (LightGBM LambdaRank, `PRETRAINED_PARAMS`)"
             + (f" changed by {json.dumps(report['recipe'])}" if report["recipe"] else "") + ", "
             f"seeds {report['seeds']}: mean ± standard deviation over seeds. Data: "
             + ", ".join(f"{h} {n} (workload, host) groups" for h, n in report["groups_per_host"].items())
             + f"; features in {report['feature_s']:.0f} s, all fits in {report['fit_s']:.0f} s.", ""]
    sections = [("loho", "Leave-one-host-out (the host's workloads may be trained on, as measured on the other "
                         "hosts)"),
                ("loho_strict", "Leave-one-host-out, strict (the host's workloads trained on nowhere)"),
                ("loho_strict_without_host_terms", f"Strict, without the host-aware terms ({', '.join(HOST_AWARE)})"),
                ("loho_strict_without_knob_features", "Strict, without the knob features (draft terms alone)")]
    if "loho_strict_with_per_store" in report:
        sections.append(("loho_strict_with_per_store", f"Strict, with PerStoreFeature added (seeds "
                                                       f"{report['per_store_seeds']}; its features took "
                                                       f"{report['per_store_feature_s']:.0f} s)"))
    for name, title in sections:
        lines += [f"## {title}", ""] + host_table(report[name]) + [""]
    if "new_host" in report:
        lines += [f"## A new host's new workloads ({' '.join(report['new_host_files'])}), ranked by the shipped "
                  "recipe trained on every other host", ""] + new_host_table(report["new_host"]) + [""]
    lines += ["## Leave-one-network-out (TenSet's definition; the networks' tuning records, measured on znver4)", ""]
    lines += network_table(report["lono"]) + [""]
    if "lono_with_per_store" in report:
        lines += [f"With PerStoreFeature added (seeds {report['per_store_seeds']}):", ""]
        lines += network_table(report["lono_with_per_store"]) + [""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=5, help="training seeds 0..N-1")
    parser.add_argument("--per-store-seeds", type=int, default=3,
                        help="seeds of the runs with PerStoreFeature added (0: skip them, and their features)")
    parser.add_argument("--new-host", nargs="*", default=[],
                        help="record files of workloads trained on nowhere, measured on a host the training files lack")
    parser.add_argument("--recipe", type=json.loads, default={},
                        help="JSON object of changes to the shipped recipe for every fit; the report's name "
                             "then ends in -recipe")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    if not isinstance(args.recipe, dict):
        parser.error(f"--recipe must be a JSON object, got {args.recipe!r}")

    from cost_model import FEATURE_NAMES
    from cost_model.dataset import read_dataset
    from cost_model.features import BASE_COLUMNS
    from cost_model.knob_features import KNOB_NAMES
    from cost_model.pretrained import training_files

    started = time.monotonic()
    random, networks = read_dataset(training_files()), read_dataset([NETWORK_RECORDS])
    feature_s = time.monotonic() - started
    every = np.arange(len(FEATURE_NAMES))
    shipped = every[BASE_COLUMNS.stop:]  # the CPU features: no PerStoreFeature
    without_host = np.array([i for i in shipped if FEATURE_NAMES[i] not in HOST_AWARE])
    without_knobs = np.array([i for i in shipped if FEATURE_NAMES[i] not in KNOB_NAMES])
    seeds, recipe = list(range(args.seeds)), args.recipe
    started = time.monotonic()
    report: dict[str, Any] = {
        "date": today(), "command": command(), "versions": versions(), "seeds": seeds, "recipe": recipe,
        "groups_per_host": {h: random.hosts.count(h) for h in sorted(set(random.hosts))},
        "loho": leave_one_host_out(random, seeds, shipped, strict=False, recipe=recipe),
        "loho_strict": leave_one_host_out(random, seeds, shipped, strict=True, recipe=recipe),
        "loho_strict_without_host_terms": leave_one_host_out(random, seeds, without_host, strict=True, recipe=recipe),
        "loho_strict_without_knob_features": leave_one_host_out(random, seeds, without_knobs, strict=True,
                                                                recipe=recipe),
        "lono": leave_one_network_out(random, networks, seeds, shipped, recipe=recipe),
    }
    if args.new_host:
        report.update(new_host_files=args.new_host,
                      new_host=new_host(random, read_dataset(args.new_host), seeds, shipped, recipe=recipe))
    if args.per_store_seeds:
        started_features = time.monotonic()
        random, networks = (read_dataset(training_files(), per_store=True),
                            read_dataset([NETWORK_RECORDS], per_store=True))
        report["per_store_feature_s"] = time.monotonic() - started_features
        few = list(range(args.per_store_seeds))
        report["per_store_seeds"] = few
        report["loho_strict_with_per_store"] = leave_one_host_out(random, few, every, strict=True, recipe=recipe)
        report["lono_with_per_store"] = leave_one_network_out(random, networks, few, every, recipe=recipe)
    report.update(feature_s=feature_s, fit_s=time.monotonic() - started)
    text = markdown(report)
    print(text)
    write_report(args.out / f"cost_model_transfer-{report['date']}{'-recipe' if recipe else ''}", report, text)


if __name__ == "__main__":
    main()
