"""Measure random candidates of suite layers on this CPU into a record file (resumable).

The records train and test the shipped cost model and serve the replay benchmarks:
    python -m benchmarks.collect --per-workload 250 --records cpu_random.jsonl                       # znver3
    python -m benchmarks.collect --set dense --per-workload 1000 --passes 2 --records cpu_dense.jsonl    # znver5
    python -m benchmarks.collect --set transfer --per-workload 300 --seed 1 --records cpu_transfer.jsonl # znver5
    python -m benchmarks.collect --set other-host --per-workload 300 --seed 2 --records cpu_other_host.jsonl  # znver3
    python -m benchmarks.collect --set dense --per-workload 300 --seed 3 --passes 2 --records cpu_znver4.jsonl
    python -m benchmarks.collect --set other-host --per-workload 150 --seed 4 --records cpu_znver4.jsonl
    python -m benchmarks.collect --set other-host --per-workload 100 --seed 6 --records cpu_rocketlake.jsonl
    python -m benchmarks.collect --set dense --per-workload 200 --seed 7 --passes 2 --records cpu_rocketlake.jsonl
    python -m benchmarks.collect --workloads <other-host's four stride-2 convs> --per-workload 150 --seed 8 \
        --records cpu_rocketlake.jsonl  # after dropping their configs whose program the phase split changed
    python -m benchmarks.collect --set gemv --per-workload 150 --seed 9 --records cpu_znver4.jsonl  # streamed rows
A new CPU's first set can also hold workloads that no set has (`--workloads`), kept apart from the
training files, to test the shipped model as a user on that CPU meets it (`benchmarks/data/heldout-*`):
    python -m benchmarks.collect --workloads "matmul(M=197,N=3072,K=768,transpose_b=True,float32)" \
        "matmul(M=197,N=768,K=3072,transpose_b=True,float32)" --per-workload 96 --seed 5 --records heldout-rocketlake.jsonl
Interrupt it at any time; run it again to continue where it stopped. Each record carries the facts of
the host that measured it (records before schema 2 name only its CPU). The committed sets are these
files gzipped (`gzip -9 -n`) under `cost_model/data/`: every `cpu_*` file there trains the shipped
model, so a new CPU's set joins it by being committed there.
"""

from __future__ import annotations

import argparse
from collections import Counter

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

# Training-only workloads: other layers of the suites and shapes around them. None is a workload
# of the dense set, so that every dense workload can be held out of training entirely, nor one of
# vs_metaschedule.py's, so that the shipped model has never seen a workload it is compared on.
TRANSFER_WORKLOADS = (
    "matmul(M=128,N=2304,K=768,transpose_b=True,epilogue=bias,float32)",
    "matmul(M=1,N=4096,K=4096,transpose_b=True,float32)",
    "matmul(M=64,N=1024,K=256,float32)",
    "matmul(M=384,N=128,K=1024,transpose_b=True,epilogue=relu,float32)",
    "batch_matmul(B=12,M=128,N=64,K=128,float32)",
    "batch_matmul(B=8,M=256,N=256,K=64,transpose_b=True,float32)",
    "batch_matmul(B=4,M=64,N=512,K=128,float32)",
    "conv2d(N=1,C=256,H=28,W=28,K=256,R=3,S=3,stride=2,padding=1,epilogue=bias_relu,float32)",
    "conv2d(N=1,C=512,H=7,W=7,K=512,R=3,S=3,padding=1,epilogue=bias_relu,float32)",
    "conv2d(N=1,C=64,H=56,W=56,K=256,R=1,S=1,epilogue=bias,float32)",
    "conv2d(N=1,C=64,H=56,W=56,K=64,R=3,S=3,padding=1,layout=NHWC,float32)",
    "conv2d(N=1,C=256,H=14,W=14,K=256,R=3,S=3,padding=1,layout=NHWC,epilogue=bias_relu,float32)",
    "conv2d(N=1,C=128,H=28,W=28,K=512,R=1,S=1,layout=NHWC,float32)",
    "depthwise_conv2d(N=1,C=32,H=112,W=112,R=3,S=3,padding=1,epilogue=bias_relu,float32)",
    "depthwise_conv2d(N=1,C=192,H=28,W=28,R=3,S=3,padding=1,epilogue=bias_relu,float32)",
    "depthwise_conv2d(N=1,C=96,H=112,W=112,R=3,S=3,stride=2,padding=1,epilogue=bias_relu,float32)",
    "depthwise_conv2d(N=1,C=576,H=14,W=14,R=3,S=3,padding=1,epilogue=bias_relu,float32)",
)

# Workloads the shipped model never trains on, in none of the sets above nor vs_metaschedule.py's, most of
# them 3x3 convs and depthwise layers. Measured on a second host (TVM's znver3, without AVX-512),
# they show how a model trained on one CPU's records ranks another CPU's candidates.
OTHER_HOST_WORKLOADS = (
    "conv2d(N=1,C=128,H=56,W=56,K=128,R=3,S=3,stride=2,padding=1,epilogue=bias_relu,float32)",
    "conv2d(N=1,C=256,H=14,W=14,K=256,R=3,S=3,padding=1,epilogue=bias_relu,float32)",
    "conv2d(N=1,C=512,H=14,W=14,K=512,R=3,S=3,stride=2,padding=1,epilogue=bias_relu,float32)",
    "conv2d(N=1,C=96,H=28,W=28,K=96,R=3,S=3,padding=1,float32)",
    "conv2d(N=1,C=128,H=56,W=56,K=128,R=3,S=3,stride=2,padding=1,layout=NHWC,epilogue=bias_relu,float32)",
    "conv2d(N=1,C=512,H=7,W=7,K=512,R=3,S=3,padding=1,layout=NHWC,epilogue=bias_relu,float32)",
    "conv2d(N=1,C=96,H=28,W=28,K=160,R=3,S=3,padding=1,layout=NHWC,float32)",
    "conv2d(N=1,C=512,H=28,W=28,K=128,R=1,S=1,epilogue=bias_relu,float32)",
    "depthwise_conv2d(N=1,C=144,H=56,W=56,R=3,S=3,stride=2,padding=1,epilogue=bias_relu,float32)",
    "depthwise_conv2d(N=1,C=192,H=28,W=28,R=3,S=3,stride=2,padding=1,epilogue=bias_relu,float32)",
    "depthwise_conv2d(N=1,C=384,H=14,W=14,R=3,S=3,padding=1,epilogue=bias_relu,float32)",
    "depthwise_conv2d(N=1,C=960,H=7,W=7,R=3,S=3,padding=1,epilogue=bias_relu,float32)",
    "depthwise_conv2d(N=1,C=64,H=56,W=56,R=3,S=3,padding=1,float32)",
    "matmul(M=128,N=3072,K=768,transpose_b=True,epilogue=bias,float32)",
    "matmul(M=256,N=512,K=128,float32)",
    "batch_matmul(B=16,M=128,N=128,K=128,transpose_b=True,float32)",
)

# Matrix-vector products (LLM decoding, classifier heads), whose register tile may be a streamed row
# wider than the registers: shapes of no suite, so that the suites' GEMVs stay unseen in training.
GEMV_WORKLOADS = (
    "matmul(M=1,N=2304,K=768,transpose_b=True,epilogue=bias,constant_weights=True,float32)",
    "matmul(M=1,N=3072,K=768,transpose_b=True,epilogue=bias,constant_weights=True,float32)",
    "matmul(M=1,N=1536,K=1536,transpose_b=True,constant_weights=True,float32)",
    "matmul(M=1,N=512,K=2048,transpose_b=True,epilogue=bias,constant_weights=True,float32)",
    "batch_matmul(B=16,M=1,N=256,K=64,transpose_b=True,float32)",
)

WORKLOAD_SETS = {"random": DATASET_WORKLOADS, "dense": DENSE_WORKLOADS, "transfer": TRANSFER_WORKLOADS,
                 "other-host": OTHER_HOST_WORKLOADS, "gemv": GEMV_WORKLOADS}


def parse_args() -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--records", default="cpu_records.jsonl", help="the record file to add to (plain .jsonl)")
    parser.add_argument("--per-workload", type=int, default=250)
    parser.add_argument("--workloads", nargs="*", help="workload keys (default: those of --set)")
    parser.add_argument("--set", choices=WORKLOAD_SETS, default="random",
                        help="random: the first cost-model set; dense: the replay set of six workloads; "
                             "transfer: training-only workloads; other-host: workloads only ever tested on; "
                             "gemv: matrix-vector products")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--passes", type=int, default=1,
                        help="timings per config, each pass over all configs in a new order (a noisy host "
                             "only slows kernels down: the dataset keeps each config's fastest)")
    return parser.parse_args()


def main() -> None:
    """Measures new random configs of each workload, then re-times them in further passes."""
    args = parse_args()
    keys = args.workloads or list(WORKLOAD_SETS[args.set])

    from tqdm.auto import tqdm

    from search import Config, resolve_target, template_for
    from search.records import RecordStore, make_record
    from tuner import Harness
    from tuner.measure.machine import with_machine
    from workloads import from_key

    store = RecordStore(args.records)
    target = with_machine(resolve_target("llvm"))  # the records carry the host's measured peaks
    templates = {key: template_for(from_key(key), target) for key in keys}
    counts = {key: Counter(Config.from_json(r["config"]) for r in store.select(key, target.key)) for key in keys}
    rngs = {key: np.random.default_rng([args.seed, index, len(counts[key])]) for index, key in enumerate(keys)}
    wanted = {key: max(0, args.per_workload - len(counts[key])) for key in keys}
    timings_left = sum(wanted.values()) * args.passes + sum(
        max(0, args.passes - n) for c in counts.values() for n in c.values())
    bar = tqdm(total=timings_left, unit="config")

    def measure(key: str, configs: list, measurer: Harness) -> None:
        template = templates[key]
        measurer.measure(template.workload, target, configs, on_result=lambda i, r: store.append(
            make_record(key, target.key, configs[i].to_json(), r, host=target.host_facts(), source="random")))
        counts[key].update(configs)
        bar.update(len(configs))

    with Harness.local(target, repeat=3, min_repeat_ms=10) as measurer:
        # a batch of each workload in turn, so that an interrupted run leaves them equally far along
        while any(wanted.values()):
            for key in [k for k in keys if wanted[k]]:
                configs = templates[key].space.sample(rngs[key], min(args.batch, wanted[key]), exclude=counts[key])
                wanted[key] = wanted[key] - len(configs) if configs else 0  # none left: the space is exhausted
                measure(key, configs, measurer)
        # further passes re-time every config in a new random order, minutes after its first timing
        for _ in range(args.passes - 1):
            pending = {key: [c for c, n in counts[key].items() if n < args.passes] for key in keys}
            for key in keys:
                rngs[key].shuffle(pending[key])
            while any(pending.values()):
                for key in [k for k in keys if pending[k]]:
                    configs, pending[key] = pending[key][:args.batch], pending[key][args.batch:]
                    measure(key, configs, measurer)
    bar.close()


if __name__ == "__main__":
    main()
