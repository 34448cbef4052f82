"""Our tuner against MetaSchedule at 64 and 256 trials on matmul 512^3, a BERT GEMM and a ResNet-50
3x3 conv (CPU): `benchmarks.compare` with these defaults, writing `vs_metaschedule-<date>-<target>.*`.

    python -m benchmarks.vs_metaschedule

The search overhead column is our tuning wall time minus the time the measurement harness spent
building and running candidates (its worker processes included), as a fraction of the wall time.
"""

import sys

from benchmarks.compare import main

WORKLOADS = (
    "matmul(M=512,N=512,K=512,float32)",
    "matmul(M=128,N=768,K=3072,transpose_b=True,epilogue=bias,float32)",  # BERT FFN2
    "conv2d(N=1,C=64,H=56,W=56,K=64,R=3,S=3,padding=1,epilogue=bias_relu,float32)",  # ResNet-50 conv2_x
)

if __name__ == "__main__":
    sys.exit(main(workloads_default=WORKLOADS, trials_default=(64, 256), name="vs_metaschedule-"))
