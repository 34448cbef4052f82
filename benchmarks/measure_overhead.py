"""Per-candidate wall time of build + run: our harness against MetaSchedule's, same programs, same run.

    python benchmarks/measure_overhead.py --candidates 64
Both sides build the same 64 scheduled programs of matmul 512^3 with two build workers and time
them with the same evaluator settings (1 call x 3 repeats, >= 20 ms each, CPU cache flushed).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TVM_NUM_THREADS", str(len(os.sched_getaffinity(0))))

import numpy as np


def fast_build(mod, target, _params):
    """MetaSchedule's default_build minus its tensor-intrinsic import (12 s per fresh worker)."""
    import tvm
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    return tvm.build(RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod), target=target)


def ours(workload, template, configs) -> tuple[float, float]:
    from tuner import Measurer

    started = time.monotonic()
    with Measurer.local("llvm", repeat=3, min_repeat_ms=20) as measurer:
        results = measurer.measure(workload.key, str(template.target), configs)
        done = time.monotonic()
    return done - started, sum(not r.ok for r in results)


def metaschedule(template, configs, f_build) -> tuple[float, float]:
    from tvm.s_tir import meta_schedule as ms

    started = time.monotonic()
    builder = ms.builder.LocalBuilder(max_workers=2, f_build=f_build) if f_build else ms.builder.LocalBuilder(max_workers=2)
    runner = ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(
        number=1, repeat=3, min_repeat_ms=20, enable_cpu_cache_flush=True))
    args = ms.arg_info.ArgInfo.from_prim_func(template.prim_func)
    mods = [template.apply(c).mod for c in configs]
    built = builder.build([ms.builder.BuilderInput(m, template.target) for m in mods])
    futures = runner.run([ms.runner.RunnerInput(b.artifact_path, "cpu", args) for b in built if b.artifact_path])
    failed = sum(f.result().error_msg is not None for f in futures) + sum(not b.artifact_path for b in built)
    done = time.monotonic()
    return done - started, failed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import search
    import workloads

    workload = workloads.matmul(512, 512, 512)
    template = search.template_for(workload, "llvm")
    configs = template.space.sample(np.random.default_rng(args.seed), args.candidates)
    rows = [("ours", *ours(workload, template, configs)),
            ("MetaSchedule (fast_build)", *metaschedule(template, configs, fast_build)),
            ("MetaSchedule (default build)", *metaschedule(template, configs, None))]
    n = args.candidates
    print(f"{n} candidates of {workload.key}, {os.environ['TVM_NUM_THREADS']} threads")
    print(f"{'harness (start-up included)':30s} {'total s':>9s} {'per candidate s':>16s} {'failed':>7s}")
    for name, total, failed in rows:
        print(f"{name:30s} {total:9.1f} {total / n:16.3f} {failed:7d}")


if __name__ == "__main__":
    main()
