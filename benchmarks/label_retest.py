"""How reproducible are a record file's labels? Re-measure some of its configs now and compare.

    python -m benchmarks.label_retest --records cost_model/data/cpu_dense.jsonl.gz --per-workload 150
For each workload, re-times a random subset of its successful configs (each at its fastest
recorded timing) with the collection
script's settings and reports how well the recorded throughputs rank the fresh ones (pairwise
accuracy, Spearman), beside how well the first recorded timing repeat ranks the second. Repeats
are taken back to back, so they miss whatever changes between sessions; the re-measurement does
not. A cost model scored against these labels can hardly agree with them better than they agree
with themselves measured again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from benchmarks.common import REPO, RESULTS, today, write_report

if TYPE_CHECKING:
    from search.records import Record
    from tuner import Measurer


def retest(store: list[Record], key: str, count: int, seed: int, measurer: Measurer) -> dict:
    """Recorded against fresh throughputs of `count` random successful configs of `key`."""
    from cost_model.metrics import group_metrics, repeat_agreement
    from search import Config, TargetInfo
    from search.records import fastest_per_config, is_ok, median_cost
    from workloads import from_key

    records = [r for r in fastest_per_config(r for r in store if r["workload"] == key) if is_ok(r) and len(r["costs"]) >= 2]
    if not records:
        raise SystemExit(f"{key}: no successful records with two timing repeats in the file")
    records = [r for r in records if r["target"] == records[0]["target"]]  # one target's timings compare
    picked = [records[i] for i in np.random.default_rng(seed).permutation(len(records))[:count]]
    started = time.monotonic()
    results = measurer.measure(from_key(key), TargetInfo.from_key(picked[0]["target"]),
                               [Config.from_json(r["config"]) for r in picked])
    fresh = np.array([1 / r.latency if r.ok else 0.0 for r in results])
    recorded = np.array([1 / median_cost(r) for r in picked])
    ok = fresh > 0
    again = group_metrics(recorded[ok], fresh[ok])
    repeats = repeat_agreement(picked)["per_workload"][key]
    return {"configs": int(ok.sum()), "seconds": time.monotonic() - started,
            "recorded_vs_fresh": {k: again[k] for k in ("pairwise_accuracy", "spearman")},
            "repeat_vs_repeat": {k: repeats[k] for k in ("pairwise_accuracy", "spearman")}}


def table(report: dict) -> str:
    """The Markdown table of every workload's agreements, and their means."""
    lines = ["| workload | configs | recorded vs re-measured: pairwise | spearman | "
             "repeat vs repeat (recorded): pairwise | spearman |", "|---|---|---|---|---|---|"]
    for key, r in report.items():
        a, b = r["recorded_vs_fresh"], r["repeat_vs_repeat"]
        lines.append(f"| {key} | {r['configs']} | {a['pairwise_accuracy']:.3f} | {a['spearman']:.3f} | "
                     f"{b['pairwise_accuracy']:.3f} | {b['spearman']:.3f} |")
    mean = {k: np.mean([r[k]["pairwise_accuracy"] for r in report.values()])
            for k in ("recorded_vs_fresh", "repeat_vs_repeat")}
    lines += ["", f"Mean pairwise: recorded vs re-measured {mean['recorded_vs_fresh']:.3f}; "
              f"repeat vs repeat {mean['repeat_vs_repeat']:.3f}."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Re-measures each workload's sample now; prints and writes the agreement table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", default=str(REPO / "cost_model" / "data" / "cpu_dense.jsonl.gz"))
    parser.add_argument("--per-workload", type=int, default=150)
    parser.add_argument("--workloads", nargs="*", help="workload keys (default: every workload of the file)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    from search import resolve_target
    from search.records import load_records
    from tuner import Harness

    store = load_records(args.records)
    keys = args.workloads or list(dict.fromkeys(r["workload"] for r in store))
    report = {}
    # the collection script's timing settings, so that only the session differs
    with Harness.local(resolve_target("llvm"), repeat=3, min_repeat_ms=10) as measurer:
        for key in keys:
            report[key] = retest(store, key, args.per_workload, args.seed, measurer)
            print(key, json.dumps(report[key]), flush=True)
    text = table(report)
    print(text)
    date = today()
    records = os.path.relpath(args.records, REPO)
    write_report(args.out / f"label_retest-{date}", report,
                 f"# Label reproducibility of {records} ({date})\n\n"
                 f"Command: `python -m benchmarks.label_retest --records {records} "
                 f"--per-workload {args.per_workload}`\n\n"
                 "Throughputs recorded when the file was collected, against the same configs re-measured now "
                 "(same runner settings, all cores), and the recorded first timing repeat against the second.\n\n"
                 f"{text}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
