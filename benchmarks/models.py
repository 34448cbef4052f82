"""Whole models end to end, every side in one run on the same threads: torch eager, `torch.compile`
(default, max-autotune, max-autotune with freezing), ours at N trials per task (alone, and inside
`torch.compile`), and TVM Relax + MetaSchedule at the same trials per task.

    python -m benchmarks.models                                  # the zoo, 64 and 256 trials per task
    python -m benchmarks.models --models bert_base --trials-per-task 64 --variants torch_eager ours
    python -m benchmarks.models --resume                         # keep today's rows, run the missing ones
    python -m benchmarks.models --target cuda --models bert_base resnet50 --variants torch_eager ours

On `cuda` the model and its inputs move to the GPU, torch eager is cuBLAS/cuDNN, and every timed
loop ends with a device synchronize.

Our tuning is resumable: each (model, budget) has its records file under --records-dir, and a run
measures only what its budget still lacks; a larger budget starts from a copy of the largest smaller
budget's records, as a user tuning on would (its *tune s* counts only the trials it added).
Writes `<out>/models-<date>-<target>.json` (a `rows` list: model, variant, trials_per_task,
latency_s (median), q25_s, q75_s, tune_s, matches, host), `.md` and a plot of the speedups over
torch eager; with our variant, also a `layers` list: every distinct layer at our largest budget
against torch's version, with its share of the time and its place under the machine's roofline
(plotted too).
"""

from __future__ import annotations

import os

# Our kernels and torch's ops take turns on the same cores: torch's OpenMP threads must not spin
# between ops (read when torch loads). Every side runs with it; torch eager alone loses ~7% to it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import contextlib
import shutil
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tuner.defaults import BATCH_SIZE

from benchmarks.common import (RESULTS, TimingProtocol, command, fmt, host_facts, loop_means, machine, machine_line,
                               percent, plot_roofline, roofline_columns, roofline_summary, today,
                               torch_on_all_cores, versions, write_report)

TORCH_VARIANTS = ("torch_eager", "torch_compile", "torch_compile_max_autotune", "torch_compile_freezing")
TUNED_VARIANTS = ("ours", "ours_compiled", "relax_metaschedule")
VARIANTS = TORCH_VARIANTS + TUNED_VARIANTS
PROTOCOL = TimingProtocol(number=1, repeat=15, min_ms=200)
MODELS = ("resnet50", "mobilenet_v2", "bert_base", "llama_7b_prefill", "llama_7b_decode")


@contextlib.contextmanager
def _freezing(on: bool) -> Iterator[None]:
    """Inductor fuses oneDNN convolutions and autotunes its GEMM template on the CPU only with
    `freezing` on: the strongest torch baseline there."""
    import torch._inductor.config as inductor

    with inductor.patch(freezing=on):
        yield


def torch_side(variant: str, model: Any, inputs: tuple[Any, ...]) -> tuple[Callable[[], Any], float]:
    """A torch variant of the model, ready to call, and the seconds its first call (compiling) took."""
    torch = torch_on_all_cores()
    mode = {"torch_compile": "default", "torch_compile_max_autotune": "max-autotune",
            "torch_compile_freezing": "max-autotune"}.get(variant)
    torch._dynamo.reset()  # each variant compiles afresh, not from the previous variant's cache
    fn = model if mode is None else torch.compile(model, mode=mode)
    started = time.monotonic()
    with torch.no_grad(), _freezing(variant == "torch_compile_freezing"):
        fn(*inputs)
    return (lambda: fn(*inputs)), time.monotonic() - started


def ours(model: Any, inputs: tuple[Any, ...], target: Any, trials_per_task: int, records: Path
         ) -> tuple[Any, float, dict[str, Any]]:
    """Our optimized module after `trials_per_task` trials per task (resumed from `records`), the
    tuning seconds this run spent, and the capture's coverage."""
    import tuner
    from search.records import RecordStore
    from workloads import from_torch

    suite = from_torch(model, inputs)
    budget = trials_per_task * len(suite)
    if not records.exists() and (smaller := _smaller_budget_records(records)) is not None:
        shutil.copyfile(smaller, records)  # a larger budget goes on from where a smaller one stopped
    keys = {entry.workload.key for entry in suite}
    done = sum(record["workload"] in keys for record in RecordStore(records)) if records.exists() else 0
    started = time.monotonic()
    if done < budget:
        tuner.tune_model(model, inputs, target, trials=budget - done, records=str(records),
                         batch_size=min(BATCH_SIZE, trials_per_task))  # every task gets its share
    tune_s = time.monotonic() - started
    coverage = {"coverage": suite.coverage, "coverage_of_all": suite.coverage_of_all, "tasks": len(suite)}
    return tuner.optimize(model, inputs, str(records), target), tune_s, coverage


def _smaller_budget_records(records: Path) -> Path | None:
    """The records of this model's largest smaller budget (`<model>-<trials>.jsonl` beside `records`)."""
    model, _, budget = records.stem.rpartition("-")
    smaller = [(int(p.stem.rpartition("-")[2]), p) for p in records.parent.glob(f"{model}-*.jsonl")
               if p.stem.rpartition("-")[2].isdigit() and int(p.stem.rpartition("-")[2]) < int(budget)]
    return max(smaller)[1] if smaller else None


def timed(fn: Callable[[], Any], target: Any) -> dict[str, float]:
    """Median and quartiles of seconds per call."""
    torch = torch_on_all_cores()
    sync = torch.cuda.synchronize if target.is_cuda else (lambda: None)
    with torch.no_grad():
        means = sorted(loop_means(fn, PROTOCOL, sync))
    q = statistics.quantiles(means, n=4)
    return {"latency_s": statistics.median(means), "q25_s": q[0], "q75_s": q[2]}


def matches(fn: Callable[[], Any], reference: Any) -> bool:
    """Whether a side's outputs equal torch eager's (float32 summed in another order)."""
    torch = torch_on_all_cores()
    with torch.no_grad():
        try:
            torch.testing.assert_close(fn(), reference, rtol=1e-3, atol=1e-3)
        except AssertionError:
            return False
    return True


def model_rows(name: str, variants: list[str], budgets: list[int], target: Any, records_dir: Path,
               host: dict[str, Any], done: set[tuple[str, str, int | None]],
               failures: list[str]) -> Iterator[dict[str, Any]]:
    """Every requested variant of one zoo model not in `done`, as report rows; a baseline that
    cannot run the model is said in `failures` instead."""
    from workloads.models import zoo_model

    model, inputs = zoo_model(name)
    torch = torch_on_all_cores()
    if target.is_cuda:
        model, inputs = model.cuda(), tuple(x.cuda() for x in inputs)
    with torch.no_grad():
        reference = model(*inputs)
    for variant in variants:
        for budget in (budgets if variant in TUNED_VARIANTS else [None]):
            if (name, variant, budget) in done:
                continue
            print(f"{name}: {variant}" + (f" at {budget} trials per task" if budget else ""), flush=True)
            extra: dict[str, Any] = {}
            if variant in TORCH_VARIANTS:
                fn, tune_s = torch_side(variant, model, inputs)
            elif variant == "relax_metaschedule":
                from benchmarks.relax_baseline import relax_metaschedule

                try:
                    run = relax_metaschedule(model, inputs, target, budget, str(records_dir / f"relax-{name}-{budget}"))
                except Exception as err:  # TVM's importer or passes refuse the model: a finding, not the run's end
                    failures.append(f"{name}: {variant} at {budget} trials per task failed: "
                                    f"{type(err).__name__}: {str(err).strip().splitlines()[-1]}")
                    print(failures[-1], flush=True)
                    continue
                fn, tune_s, extra = run.run, run.tune_s, {"tasks": run.tasks, "trials": run.trials}
            else:
                module, tune_s, extra = ours(model, inputs, target, budget, records_dir / f"{name}-{budget}.jsonl")
                if variant == "ours_compiled":
                    fn, compile_s = torch_side("torch_compile", module, inputs)
                    tune_s += compile_s
                else:
                    fn = lambda module=module: module(*inputs)  # noqa: E731
            yield {"model": name, "variant": variant, "trials_per_task": budget, **timed(fn, target),
                   "tune_s": tune_s, "matches": matches(fn, reference), "host": host, **extra}


def layer_rows(name: str, budget: int, records: Path, target: Any, facts: Any) -> list[dict[str, Any]]:
    """Each distinct layer of a model at our largest budget: its weight, our best kernel (as the
    optimized model runs it) and torch's version timed here, each side's share of the layers'
    time, and both under the roofline."""
    import tuner
    from tuner.analysis import kernel_layer_latency, torch_layer_latency
    from workloads import from_torch
    from workloads.models import zoo_model

    model, inputs = zoo_model(name)
    suite = from_torch(model, inputs)
    torch_latency = torch_layer_latency(suite)
    ours_latency = kernel_layer_latency(tuner.optimize(model, inputs, str(records), target))
    rows = []
    for entry in suite:
        ours = ours_latency.get(entry.workload.key)
        torch = torch_latency[entry.workload.key]
        rows.append({"model": name, "trials_per_task": budget, "layer": entry.layer, "workload": entry.workload.key,
                     "weight": entry.weight, "ours_latency_s": ours, "torch_latency_s": torch,
                     **roofline_columns(entry.workload, facts, {"ours": ours, "torch": torch})})
    for side in ("ours", "torch"):
        total = sum(r["weight"] * (r[f"{side}_latency_s"] or 0.0) for r in rows)
        for r in rows:
            r[f"{side}_share"] = r["weight"] * (r[f"{side}_latency_s"] or 0.0) / total if total else None
    return sorted(rows, key=lambda r: -(r["ours_share"] or 0.0))


def markdown(report: dict[str, Any]) -> str:
    lines = [f"# Whole models end to end ({report['date']}, {report['machine']['target']})", "",
             f"Command: `{report['command']}`", "", f"Machine: {report['machine']}", "",
             f"Versions: {report['versions']}", "",
             f"Median seconds per forward pass (batch 1) over {PROTOCOL.repeat} means of at least "
             f"{PROTOCOL.min_ms} ms each, quartiles beside it; *speedup*: torch eager's median over the side's; "
             "*tune s*: tuning and compiling seconds this run spent; *matches*: outputs equal torch eager's.", "",
             "| model | variant | trials/task | ms | q25-q75 ms | speedup | tune s | matches |",
             "|---|---|---|---|---|---|---|---|"]
    eager = {r["model"]: r["latency_s"] for r in report["rows"] if r["variant"] == "torch_eager"}
    for r in report["rows"]:
        speedup = eager[r["model"]] / r["latency_s"] if r["model"] in eager else None
        lines.append(f"| {r['model']} | {r['variant']} | {r['trials_per_task'] or '-'} | {r['latency_s'] * 1e3:.2f} | "
                     f"{r['q25_s'] * 1e3:.2f}-{r['q75_s'] * 1e3:.2f} | {fmt(speedup, 2)} | {r['tune_s']:.0f} | "
                     f"{'yes' if r['matches'] else 'NO'} |")
    if report.get("failures"):
        lines += ["", "Not run:", "", *(f"- {failure}" for failure in report["failures"])]
    if report.get("layers"):
        lines += ["", "## Layer by layer, under the roofline", "",
                  "Each distinct layer at our largest budget: *weight*, occurrences per pass; ours (the best "
                  "record's kernel as the optimized model runs it, constant weights packed once) and torch's "
                  "version timed here, in ms; *share*: of the captured layers' time on each side; "
                  "*% roof*: GFLOP/s as a share of the attainable (min of the measured peak and intensity x "
                  "bandwidth, `autotune machine`: " + machine_line(report) + ").", "",
                  "| model | layer | weight | ours ms | torch ms | speedup | ours share | torch share | FLOP/B "
                  "| bound | ours % roof | torch % roof |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in report["layers"]:
            ours, torch = r["ours_latency_s"], r["torch_latency_s"]
            lines.append(f"| {r['model']} | {r['layer']} | {r['weight']} | {fmt(ours and ours * 1e3, 3)} | "
                         f"{torch * 1e3:.3f} | {fmt(ours and torch / ours, 2)} | {percent(r['ours_share'])} | "
                         f"{percent(r['torch_share'])} | {r['intensity']:.1f} | {r.get('bound', '-')} | "
                         f"{percent(r.get('ours_roofline_fraction'))} | "
                         f"{percent(r.get('torch_roofline_fraction'))} |")
        lines += ["", roofline_summary(report["layers"], {"ours": "ours", "torch": "torch"})]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: Path) -> None:
    """Speedup over torch eager, one group of bars per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    eager = {r["model"]: r["latency_s"] for r in report["rows"] if r["variant"] == "torch_eager"}
    rows = [r for r in report["rows"] if r["model"] in eager]
    labels = sorted({(r["variant"], r["trials_per_task"] or 0) for r in rows}, key=lambda v: (VARIANTS.index(v[0]), v[1]))
    models = list(dict.fromkeys(r["model"] for r in rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(models) * len(labels) / 4), 4))
    width = 0.8 / max(len(labels), 1)
    for index, (variant, budget) in enumerate(labels):
        values = [next((eager[m] / r["latency_s"] for r in rows if r["model"] == m and r["variant"] == variant
                        and (r["trials_per_task"] or 0) == budget), 0.0) for m in models]
        ax.bar([i + index * width for i in range(len(models))], values, width,
               label=variant + (f" @{budget}" if budget else ""))
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(models))], models, fontsize=8)
    ax.set_ylabel("speedup over torch eager")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    parser.add_argument("--trials-per-task", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--records-dir", type=Path, default=Path("model-runs"),
                        help="where our tuning records (and MetaSchedule's work folders) go, to resume")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--resume", action="store_true", help="keep the rows today's JSON holds")
    args = parser.parse_args(argv)

    import json

    from search import resolve_target
    from workloads import from_key

    target = resolve_target(args.target)
    if target.is_cuda and not torch_on_all_cores().cuda.is_available():
        parser.error("--target cuda needs a CUDA GPU here and a CUDA build of torch")
    stem = args.out / f"models-{today()}-{target.kind}"
    report: dict[str, Any] = {"date": today(), "command": command(), "machine": machine(target),
                              "versions": versions(), "rows": []}
    if args.resume and stem.with_suffix(".json").exists():
        kept = json.loads(stem.with_suffix(".json").read_text())
        report["rows"], report["failures"] = kept["rows"], kept.get("failures", [])
        if "layers" in kept:
            report["layers"] = kept["layers"]
        report["command"] = f"{kept['command']}; then {report['command']}"  # the rows kept came from there
    done = {(r["model"], r["variant"], r["trials_per_task"]) for r in report["rows"]}
    args.records_dir.mkdir(parents=True, exist_ok=True)
    report["machine"]["omp_wait_policy"] = os.environ["OMP_WAIT_POLICY"]
    facts = host_facts(target)
    report["machine"]["measured"] = facts.to_json() if facts else None
    host = {k: report["machine"][k] for k in ("cpu", "cores", "tvm_threads", "torch_threads", "omp_wait_policy")}
    for name in args.models:
        for row in model_rows(name, args.variants, args.trials_per_task, target, args.records_dir, host, done,
                              report.setdefault("failures", [])):
            report["rows"].append(row)
            write_report(stem, report, markdown(report))  # kept after every row
        budgets = [r["trials_per_task"] for r in report["rows"] if r["model"] == name and r["variant"] == "ours"]
        if budgets and (records := args.records_dir / f"{name}-{max(budgets)}.jsonl").exists():
            report["layers"] = [r for r in report.get("layers", []) if r["model"] != name] + layer_rows(
                name, max(budgets), records, target, facts)
            write_report(stem, report, markdown(report))
    plot(report, stem.with_name(stem.name + ".png"))
    if facts is not None and report.get("layers"):
        points = {side: [(r["intensity"], from_key(r["workload"]).flops / r[f"{side}_latency_s"] / 1e9)
                         for r in report["layers"] if r[f"{side}_latency_s"]] for side in ("ours", "torch")}
        plot_roofline(points, facts, stem.with_name(stem.name + "-roofline.png"),
                      f"model layers, {report['machine']['target']}")
    print(markdown(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
