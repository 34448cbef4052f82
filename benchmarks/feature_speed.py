"""How long features take: the CPU's features as the tuner reads them, and with PerStoreFeature.

    python -m benchmarks.feature_speed --candidates 1000
For matmul 512^3 and a ResNet-50 3x3 conv, times `FeatureExtractor` on random candidates of the
CPU space (all cores, as the tuner runs it): as shipped (draft terms and knob features, no
lowering) and with PerStoreFeature added (each candidate's schedule applied and lowered); then
splits a candidate's cost on one thread into applying its schedule, TVM's PerStoreFeature, the
draft terms and the knob features. Each figure is the median of `--repeats` timings: one timing on
a shared machine swings by a fifth.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

WORKLOADS = ("matmul(M=512,N=512,K=512,float32)",
             "conv2d(N=1,C=64,H=56,W=56,K=64,R=3,S=3,padding=1,epilogue=bias_relu,float32)")


def timed(function: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """(what `function(*args)` returns, seconds it took)"""
    started = time.perf_counter()
    value = function(*args)
    return value, time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    """Prints a Markdown table of the feature costs of each workload's random candidates."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)

    from cost_model import FeatureExtractor
    from cost_model.draft import draft_features
    from cost_model.knob_features import knob_features
    from search import template_for
    from workloads import from_key

    print(f"{len(os.sched_getaffinity(0))} cores; {args.candidates} random candidates per workload; "
          f"median of {args.repeats} timings\n")
    print("| workload | features as shipped, s | with PerStoreFeature, s | one thread: apply, ms "
          "| one thread: PerStoreFeature, ms | one thread: draft terms, ms | one thread: knob features, ms |")
    print("|---|---|---|---|---|---|---|")
    for key in WORKLOADS:
        template = template_for(from_key(key), "llvm")
        shipped, lowered = FeatureExtractor(template), FeatureExtractor(template, per_store=True)
        configs = template.space.sample(np.random.default_rng(args.seed), args.candidates)
        shipped(configs[:64]), lowered(configs[:64])  # first-call costs out of the way
        seconds = []
        for _ in range(args.repeats):
            _, total = timed(shipped, configs)
            _, with_per_store = timed(lowered, configs)
            _, apply_s = timed(lambda: [template.apply(c) for c in configs])
            _, per_store_s = timed(lowered.per_store, configs, 1)  # applies too
            _, draft_s = timed(lambda: [draft_features(template, c) for c in configs])
            _, knob_s = timed(lambda: [knob_features(template, c) for c in configs])
            seconds.append((total, with_per_store, *(1e3 * s / len(configs)
                                                     for s in (apply_s, per_store_s - apply_s, draft_s, knob_s))))
        print(f"| {key} | " + " | ".join(f"{s:.2f}" for s in np.median(seconds, axis=0)) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
