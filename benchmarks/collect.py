"""Measure random candidates of suite layers on this CPU into a record file (resumable).

The records train the shipped cost model and serve the replay benchmarks:
    python benchmarks/collect.py --per-workload 250 --records cost_model/data/cpu_random.jsonl
    python benchmarks/collect.py --dense --per-workload 1000 --records cost_model/data/cpu_dense.jsonl
Interrupt it at any time; run it again to continue where it stopped.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

DATASET_WORKLOADS = (
    "matmul(M=256,N=256,K=256,float32)",
    "matmul(M=128,N=768,K=768,transpose_b=True,float32)",
    "matmul(M=1,N=1000,K=2048,transpose_b=True,epilogue=bias,float32)",
    "batch_matmul(B=12,M=128,N=128,K=64,transpose_b=True,float32)",
    "conv2d(N=1,C=128,H=28,W=28,K=128,R=3,S=3,padding=1,epilogue=bias_relu,float32)",
    "conv2d(N=1,C=128,H=28,W=28,K=128,R=3,S=3,padding=1,layout=NHWC,float32)",
    "conv2d(N=1,C=256,H=14,W=14,K=1024,R=1,S=1,epilogue=bias,float32)",
    "depthwise_conv2d(N=1,C=144,H=56,W=56,R=3,S=3,padding=1,epilogue=bias_relu,float32)",
)

# The replay dataset: matmul, a BERT GEMM, a ResNet-50 conv, an NHWC conv, depthwise, batch matmul.
DENSE_WORKLOADS = (
    "matmul(M=256,N=256,K=256,float32)",
    "matmul(M=128,N=768,K=768,transpose_b=True,float32)",
    "conv2d(N=1,C=128,H=28,W=28,K=128,R=3,S=3,padding=1,epilogue=bias_relu,float32)",
    "conv2d(N=1,C=128,H=28,W=28,K=128,R=3,S=3,padding=1,layout=NHWC,float32)",
    "depthwise_conv2d(N=1,C=144,H=56,W=56,R=3,S=3,padding=1,epilogue=bias_relu,float32)",
    "batch_matmul(B=12,M=128,N=128,K=64,transpose_b=True,float32)",
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", default="cost_model/data/cpu_random.jsonl")
    parser.add_argument("--per-workload", type=int, default=250)
    parser.add_argument("--workloads", nargs="*", help="workload keys (default: the cost-model set)")
    parser.add_argument("--dense", action="store_true", help="the replay set of six workloads")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    keys = args.workloads or list(DENSE_WORKLOADS if args.dense else DATASET_WORKLOADS)

    from tqdm.auto import tqdm

    from search import Config, template_for, target_key
    from tuner import Measurer, RecordStore
    from tuner.records import make_record
    from workloads import from_key

    store = RecordStore(args.records)
    templates = {key: template_for(from_key(key), "llvm") for key in keys}
    done = {key: {Config.from_json(r["config"]) for r in store.select(key, target_key(t.target))}
            for key, t in templates.items()}
    rngs = {key: np.random.default_rng([args.seed, index, len(done[key])]) for index, key in enumerate(keys)}
    total = args.per_workload * len(keys)
    bar = tqdm(total=total, initial=sum(min(len(d), args.per_workload) for d in done.values()), unit="config")
    wanted = {key: max(0, args.per_workload - len(done[key])) for key in keys}
    with Measurer.local("llvm", repeat=3, min_repeat_ms=10) as measurer:
        # a batch of each workload in turn, so that an interrupted run leaves them equally far along
        while any(wanted.values()):
            for key in [k for k in keys if wanted[k]]:
                template, tkey = templates[key], target_key(templates[key].target)
                configs = template.space.sample(rngs[key], min(args.batch, wanted[key]), exclude=done[key])
                wanted[key] = wanted[key] - len(configs) if configs else 0  # none left: the space is exhausted
                measurer.measure(key, str(template.target), configs, on_result=lambda i, r: store.append(
                    make_record(key, tkey, configs[i].to_json(), r, source="random")))
                done[key].update(configs)
                bar.update(len(configs))
    bar.close()


if __name__ == "__main__":
    os.environ.setdefault("TVM_NUM_THREADS", str(len(os.sched_getaffinity(0))))
    main()
