"""Per-candidate wall time of build + run: our harness against MetaSchedule's, same programs, same run.

    python -m benchmarks.measure_overhead --candidates 64
Both sides build the same 64 scheduled programs of matmul 512^3 with two build workers and time
them with the same evaluator settings (1 call x 3 repeats, >= 20 ms each, CPU cache flushed).
"""

from __future__ import annotations

import argparse
import os
import time
from typing import TYPE_CHECKING

import numpy as np

from benchmarks.common import metaschedule_builder

if TYPE_CHECKING:
    from search import Config, Template


def ours(template: Template, configs: list[Config]) -> tuple[float, int]:
    """Seconds our harness takes to build and time `configs`, start-up included, and how many failed."""
    from tuner import Harness

    started = time.monotonic()
    with Harness.local(template.target, repeat=3, min_repeat_ms=20) as measurer:
        results = measurer.measure(template.workload, template.target, configs)
        done = time.monotonic()
    return done - started, sum(not r.ok for r in results)


def metaschedule(template: Template, configs: list[Config], fast: bool) -> tuple[float, int]:
    """The same for MetaSchedule's LocalBuilder (with `fast_build`, or its default build) and LocalRunner."""
    from tvm.s_tir import meta_schedule as ms

    started = time.monotonic()
    builder = metaschedule_builder(fast=fast, max_workers=2)
    runner = ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(
        number=1, repeat=3, min_repeat_ms=20, enable_cpu_cache_flush=True))
    args = ms.arg_info.ArgInfo.from_prim_func(template.prim_func)
    built = builder.build([ms.builder.BuilderInput(template.apply(c).mod, template.target.tvm) for c in configs])
    futures = runner.run([ms.runner.RunnerInput(b.artifact_path, "cpu", args) for b in built if b.artifact_path])
    failed = sum(f.result().error_msg is not None for f in futures) + sum(not b.artifact_path for b in built)
    return time.monotonic() - started, failed


def main() -> None:
    """Times both harnesses on the same random candidates and prints a table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", type=int, default=64)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import search
    import workloads

    template = search.template_for(workloads.matmul(512, 512, 512), "llvm")
    configs = template.space.sample(np.random.default_rng(args.seed), args.candidates)
    rows = [("ours", *ours(template, configs)),
            ("MetaSchedule (fast_build)", *metaschedule(template, configs, fast=True)),
            ("MetaSchedule (default build)", *metaschedule(template, configs, fast=False))]
    n = args.candidates
    print(f"{n} candidates of {template.workload.key}, {os.environ['TVM_NUM_THREADS']} threads")
    print(f"{'harness (start-up included)':30s} {'total s':>9s} {'per candidate s':>16s} {'failed':>7s}")
    for name, total, failed in rows:
        print(f"{name:30s} {total:9.1f} {total / n:16.3f} {failed:7d}")


if __name__ == "__main__":
    main()
