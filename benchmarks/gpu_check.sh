#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and no network (../shared/GPU.md), inside 12 minutes:
# installs TVM and the few packages that machine lacks from wheels in .whl/, runs the CUDA tests,
# tunes matmul 1024^3, a BERT GEMM and a ResNet-50 conv on `cuda` against torch's cuBLAS/cuDNN in the
# same run, then BERT-base and ResNet-50 end to end ($MODEL_TRIALS trials per layer kind, default 8)
# against torch eager (cuBLAS/cuDNN), and prints the model table last. Results go to $OUT (default
# benchmarks/results).
#
# Bring the Python 3.12 x86-64 wheels into .whl/ first (git ignores it): apache-tvm (split by
# `split -b 48M` into *.whl.part-aa, *.whl.part-ab to fit the carry limit), apache-tvm-ffi
# 0.1.14.post0, ml_dtypes, lightgbm and filelock.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-benchmarks/results}
DEPS=${DEPS:-/tmp/autotune-deps}

for first in .whl/*.part-aa; do
    if [ -e "$first" ]; then cat "${first%.part-aa}".part-* > "${first%.part-aa}"; fi
done
python3 -m pip install --quiet --no-index --no-deps --target "$DEPS" .whl/*.whl
export PYTHONPATH="$DEPS:$PWD" PYTHONUNBUFFERED=1
python3 -c "import tvm; assert tvm.cuda(0).exist, 'no CUDA device'; print('tvm', tvm.__version__, tvm.cuda(0).device_name)"

timeout 180 python3 -m pytest -q -p no:cacheprovider tests/tuner/measure/test_measure.py tests/search/test_tensorcore.py \
    -k "cuda or tensor" || echo "CUDA tests failed (exit $?)"

timeout 300 python3 -m benchmarks.compare --target cuda --no-metaschedule --trials 48 --rounds 3 --out "$OUT" \
    --workloads "matmul(M=1024,N=1024,K=1024,float32)" \
    "matmul(M=128,N=768,K=3072,transpose_b=True,epilogue=bias,float32)" \
    "conv2d(N=1,C=64,H=56,W=56,K=64,R=3,S=3,padding=1,epilogue=bias_relu,float32)"

MODEL_TRIALS=${MODEL_TRIALS:-8}
timeout 300 python3 -m benchmarks.models --target cuda --models bert_base resnet50 --variants torch_eager ours \
    --trials-per-task "$MODEL_TRIALS" --records-dir /tmp/autotune-model-runs --out "$OUT" \
    || echo "end-to-end models failed (exit $?)"
