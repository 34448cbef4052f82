"""Our tuner against MetaSchedule on the same workloads, target and trial budgets, in one run.

    python benchmarks/vs_metaschedule.py --trials 64 256
The two tuners alternate per workload; both best kernels are then re-timed here with the same
evaluator (so machine drift hits both alike). Search overhead is our tuning wall time minus the
time spent building and running candidates.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TVM_NUM_THREADS", str(len(os.sched_getaffinity(0))))

WORKLOADS = (
    "matmul(M=512,N=512,K=512,float32)",
    "matmul(M=128,N=768,K=3072,transpose_b=True,epilogue=bias,float32)",
    "conv2d(N=1,C=64,H=56,W=56,K=64,R=3,S=3,padding=1,epilogue=bias_relu,float32)",
)


def fast_build(mod, target, _params):
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm.build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def time_module(module, workload, number_ms: int = 200) -> float:
    import tvm

    inputs = workload.random_inputs(0)
    args = [tvm.runtime.tensor(x) for x in inputs] + [tvm.runtime.empty(workload.output_shapes[0], workload.dtype)]
    evaluator = module.time_evaluator("main", tvm.cpu(0), number=1, repeat=10, min_repeat_ms=number_ms // 10,
                                      f_preproc="cache_flush_cpu_non_first_arg")
    return float(evaluator(*args).median)


def run_ours(workload, trials: int, seed: int):
    import tuner

    started = time.monotonic()
    result = tuner.tune(workload, "llvm", trials=trials, seed=seed, progress=False)
    wall = time.monotonic() - started
    measured = float(result.trace["build_s"].sum() / 2 + result.trace["run_s"].sum())  # two build workers
    return result.compile().executable.mod, wall, measured


def run_metaschedule(workload, target, trials: int, seed: int):
    import tvm
    from tvm.s_tir import meta_schedule as ms

    mod = tvm.IRModule({"main": workload.prim_func()})
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as work_dir:
        database = ms.tune_tir(mod, target, work_dir, max_trials_global=trials, num_trials_per_iter=min(64, trials),
                               builder=ms.builder.LocalBuilder(f_build=fast_build),
                               runner=ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(
                                   number=1, repeat=3, min_repeat_ms=20, enable_cpu_cache_flush=True)),
                               seed=seed, num_tuning_cores=len(os.sched_getaffinity(0)))
        sch = ms.tir_integration.compile_tir(database, mod, target)
    wall = time.monotonic() - started
    return tvm.compile(sch.mod, target=target).mod, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--workloads", nargs="*", default=list(WORKLOADS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="benchmarks/results")
    args = parser.parse_args()

    import search
    from workloads import from_key

    rows = []
    for trials in args.trials:
        for key in args.workloads:
            workload = from_key(key)
            target = search.template_for(workload, "llvm").target
            ours, ours_wall, ours_measured = run_ours(workload, trials, args.seed)
            theirs, ms_wall = run_metaschedule(workload, target, trials, args.seed)
            ours_s, ms_s = time_module(ours, workload), time_module(theirs, workload)
            rows.append({"workload": key, "trials": trials, "ours_latency_s": ours_s, "metaschedule_latency_s": ms_s,
                         "speedup_vs_metaschedule": ms_s / ours_s, "ours_tune_s": ours_wall,
                         "metaschedule_tune_s": ms_wall,
                         "ours_search_overhead": max(0.0, 1 - ours_measured / ours_wall)})
            print(json.dumps(rows[-1]))
    today = datetime.date.today().isoformat()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"vs_metaschedule-{today}.json").write_text(json.dumps(rows, indent=1))
    lines = ["| workload | trials | ours ms | MetaSchedule ms | speedup | ours tune s | MS tune s | overhead |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['workload']} | {r['trials']} | {r['ours_latency_s'] * 1e3:.3f} | "
              f"{r['metaschedule_latency_s'] * 1e3:.3f} | {r['speedup_vs_metaschedule']:.2f}x | {r['ours_tune_s']:.0f} | "
              f"{r['metaschedule_tune_s']:.0f} | {r['ours_search_overhead']:.0%} |" for r in rows]
    (out / f"vs_metaschedule-{today}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
