"""How good are the programs in our CPU search space? Random, hand-picked, torch and MetaSchedule.

For matmul 512^3, ResNet-50 3x3 convolutions, MobileNet-V2 1x1 convolutions, a GEMV (its weight
constant: each side lays it out once, ahead of the calls timed), a batched GEMV and BERT's FFN2
with its weight an argument (packed on every call), in one process:

* ``random``   : N random configs of our space (built, checked against the numpy reference, timed);
                 best and median GFLOPS.
* ``hand``     : a few configs designed for this CPU (AVX2, 8 fp32 lanes, 16 ymm registers); best kept.
* ``explore``  : optional wider search of our space (systematic variants of the hand-picked family,
                 quick random draws, then local search around the leaders), re-timed with the full
                 settings; the best config found in the space.
* ``torch``    : torch.matmul / torch.nn.functional.conv2d on the same float32 inputs.
* ``ms``       : MetaSchedule ``tune_tir`` with N trials, its best re-timed with our evaluator.

All TVM programs are timed with the same ``time_evaluator`` settings (median of ``repeat``;
``f_preproc="cache_flush_cpu_non_first_arg"``). TVM_NUM_THREADS is set to the cores this process may
run on before tvm is imported, and torch gets the same number of threads.

Another process may share the CPU. Before each timing the script waits (up to --quiet-wait s) until
other processes use less than --quiet-cores cores, records the other processes' CPU use during the
timing, and re-times a measurement that was disturbed (keeping the least disturbed one).

Example (about 10-15 minutes on 2 cores):
    python -m benchmarks.space_quality --random 64 --ms-trials 64 --explore 192
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.common import (BUILDER_TIMEOUT_S, RESULTS, CpuWatch, Quiet, Timer, Timing, TimingProtocol, command,
                               fmt, machine, today, torch_on_all_cores, tune_metaschedule, vendor_versions,
                               versions, write_report)

if TYPE_CHECKING:
    from search import Config, Template

WORKLOADS = {
    "matmul512": "matmul(M=512,N=512,K=512,float32)",
    "conv56": "conv2d(N=1,C=64,H=56,W=56,K=64,R=3,S=3,padding=1,float32)",
    "conv28": "conv2d(N=1,C=128,H=28,W=28,K=128,R=3,S=3,padding=1,float32)",
    # 1x1 convolutions over many pixels (MobileNet-V2's expansions), where the pixels may be fused
    "conv1x1_56": "conv2d(N=1,C=24,H=56,W=56,K=144,R=1,S=1,float32)",
    "conv1x1_28": "conv2d(N=1,C=32,H=28,W=28,K=192,R=1,S=1,float32)",
    # a matrix-vector product (ResNet-50's classifier), whose register tile may be a streamed row
    "gemv": "matmul(M=1,N=1000,K=2048,transpose_b=True,epilogue=bias,constant_weights=True,float32)",
    # batched GEMVs (LLM decoding's scores against 129 cached keys), whose reduction may be split into lanes
    "bgemv": "batch_matmul(B=32,M=1,N=129,K=128,transpose_b=True,float32)",
    # BERT's FFN2 with its weight an argument, not a constant: packed on every call, whole or per task
    "ffn2": "matmul(M=128,N=768,K=3072,transpose_b=True,float32)",
}
MS_EVALUATOR = TimingProtocol(number=3, repeat=1, min_ms=50)  # MetaSchedule's runner while it tunes
HEADER = ["workload", "random best", "random median", "hand", "space best", "torch", "torch 1thr", "MS@N",
          "hand/torch", "hand/MS", "space/torch", "space/MS"]


# --------------------------------------------------------------------------------------------------
# Hand-picked configs. Rationale (AMD EPYC znver3: AVX2 FMA x2, 8 fp32 lanes, 16 ymm registers):
# the innermost register tile S3 holds the accumulators (4x16 fp32 = 8 ymm leaves room for the two
# B vectors and the A broadcast; 8 independent FMA chains cover the 4-cycle FMA latency on 2 pipes),
# B is packed so the vector loads are contiguous, S0 gives 2-8 parallel chunks for 2 cores, and the
# accumulator lives at S1 (write_at=1) so that it is small and written back once per tile.
# --------------------------------------------------------------------------------------------------

def hand_configs(name: str) -> list[dict]:
    """The configs designed by hand for one of `WORKLOADS`."""
    if name == "matmul512":
        base = dict(vector_axis="j", pack=1, unroll=64, write_at=1)
        return [dict(base, tile_i=ti, tile_j=tj, tile_k=tk, **extra) for ti, tj, tk, extra in [
            ((4, 16, 2, 4), (2, 16, 1, 16), (8, 64), {}),
            ((4, 32, 1, 4), (2, 16, 1, 16), (16, 32), {}),
            ((4, 32, 1, 4), (2, 16, 1, 16), (64, 8), {}),
            ((2, 64, 1, 4), (1, 32, 1, 16), (64, 8), {}),
            ((4, 16, 2, 4), (2, 16, 1, 16), (8, 64), dict(unroll=512)),
            ((2, 8, 8, 4), (2, 4, 4, 16), (4, 128), {}),
            ((4, 16, 1, 8), (2, 32, 1, 8), (16, 32), {}),
            ((4, 64, 1, 2), (2, 8, 1, 32), (16, 32), {}),
        ]]
    if name == "conv56":  # K=64 C=64 56x56, 3x3
        # Vectorizing k (weights packed [k/16, c, r, s, 16]); the template lays the accumulator out
        # with k innermost, so a register tile of w3 = 4 outputs x k3 = 16 channels (8 ymm, 8 FMA
        # chains) reuses each broadcast input 2x and each weight vector 4x.
        k = dict(vector_axis="k", pack=1, unroll=64, write_at=1, tile_n=(1, 1, 1, 1), tile_rw=(1, 3), tile_rh=(3, 1))
        return [dict(k, tile_k=tk, tile_h=th, tile_w=tw, tile_rc=rc, **extra) for tk, th, tw, rc, extra in [
            ((2, 2, 1, 16), (1, 56, 1, 1), (1, 14, 1, 4), (16, 4), {}),
            ((1, 4, 1, 16), (4, 14, 1, 1), (1, 14, 1, 4), (16, 4), {}),
            ((1, 4, 1, 16), (2, 28, 1, 1), (1, 14, 1, 4), (8, 8), {}),
            ((2, 2, 1, 16), (1, 56, 1, 1), (1, 14, 1, 4), (8, 8), {}),
            ((1, 4, 1, 16), (2, 14, 1, 2), (1, 28, 1, 2), (16, 4), {}),
            ((2, 2, 1, 16), (1, 56, 1, 1), (1, 14, 1, 4), (16, 4), dict(unroll=512)),
            # a 1 x 64 register tile (no input reuse) and the w-vectorized variant, for contrast
            ((1, 1, 1, 64), (4, 14, 1, 1), (1, 56, 1, 1), (8, 8), {}),
            ((2, 4, 1, 8), (1, 56, 1, 1), (1, 7, 1, 8), (64, 1), dict(vector_axis="w", pack=0, tile_rh=(1, 3))),
        ]]
    if name == "conv28":  # K=128 C=128 28x28, 3x3
        k = dict(vector_axis="k", pack=1, unroll=64, write_at=1, tile_n=(1, 1, 1, 1), tile_rw=(1, 3), tile_rh=(3, 1))
        return [dict(k, tile_k=tk, tile_h=th, tile_w=tw, tile_rc=rc) for tk, th, tw, rc in [
            ((2, 4, 1, 16), (1, 28, 1, 1), (1, 7, 1, 4), (32, 4)),
            ((2, 4, 1, 16), (1, 28, 1, 1), (1, 7, 1, 4), (16, 8)),
            ((4, 2, 1, 16), (1, 28, 1, 1), (1, 7, 1, 4), (32, 4)),
            ((2, 1, 1, 64), (1, 28, 1, 1), (1, 28, 1, 1), (32, 4)),
        ]]
    if name in ("conv1x1_56", "conv1x1_28"):
        # The pixels fused and tiled as a GEMM's N: a register tile of k3 = 6 channels x 16 or 32
        # consecutive pixels (2 rows x 8, or 4 x 8, across rows), each weight broadcast once per
        # vector; and, for contrast, a k-vectorized unfused one.
        side = 56 if name == "conv1x1_56" else 28
        K, C = (144, 24) if side == 56 else (192, 32)
        p = dict(vector_axis="w", pack=0, unroll=16, write_at=1, fuse_pixels=1, tile_n=(1, 1, 1, 1),
                 tile_rh=(1, 1), tile_rw=(1, 1), tile_rc=(1, C))
        fused = [dict(p, tile_k=tk, tile_h=th, tile_w=tw) for tk, th, tw in [
            ((2, K // 12, 1, 6), (side // 2, 1, 1, 2), (1, side // 4, 1, 4)),
            ((2, K // 12, 1, 6), (side // 4, 1, 1, 4), (1, side // 4, 1, 4)),
            ((K // 12, 2, 1, 6), (side // 2, 1, 1, 2), (1, side // 4, 1, 4)),
            ((2, K // 8, 1, 4), (side // 4, 1, 1, 4), (1, side // 4, 1, 4)),
        ]]
        k = dict(vector_axis="k", pack=1, unroll=64, write_at=1, fuse_pixels=0, tile_n=(1, 1, 1, 1),
                 tile_rh=(1, 1), tile_rw=(1, 1), tile_rc=(1, C))
        unfused = [dict(k, tile_k=(K // 48, 1, 1, 48), tile_h=(2, side // 2, 1, 1), tile_w=(1, side // 4, 1, 4))]
        return fused + unfused
    if name == "gemv":
        # Streamed rows: 2 or 4 parallel chunks of the 1000 outputs, each one row of 250 or 500
        # accumulators in L1 that the packed weight streams past; and, for contrast, register tiles
        # of 50 and 10 lanes (the latter the tuner's best before streamed rows).
        g = dict(vector_axis="j", pack=1, unroll=16, write_at=0, tile_i=(1, 1, 1, 1))
        return [dict(g, tile_j=tj, tile_k=tk) for tj, tk in [
            ((4, 1, 1, 250), (2048, 1)), ((4, 1, 1, 250), (256, 8)), ((2, 1, 1, 500), (256, 8)),
            ((2, 1, 2, 250), (8, 256)), ((4, 5, 1, 50), (16, 128)), ((4, 5, 5, 10), (512, 4)),
        ]]
    if name == "bgemv":
        # The keys are read along k: lanes along k (the reduction split into lanes) over 3 keys at
        # a time; and, for contrast, the tuner's best before lanes along k (4 batches in a vector,
        # each lane a stride of 129 x 128 apart).
        lanes = dict(vector_axis="k", pack=0, unroll=16, write_at=0, tile_i=(1, 1, 1, 1))
        return [dict(lanes, tile_n=tn, tile_j=tj, tile_k=tk) for tn, tj, tk in [
            ((16, 2, 1, 1), (1, 1, 43, 3), (4, 32)), ((32, 1, 1, 1), (1, 1, 43, 3), (2, 64)),
            ((4, 8, 1, 1), (1, 1, 129, 1), (8, 16)), ((16, 2, 1, 1), (1, 1, 43, 3), (1, 128)),
        ]] + [dict(tile_i=(1, 1, 1, 1), tile_j=(1, 1, 43, 3), tile_k=(8, 16), tile_n=(4, 1, 2, 4), unroll=64,
                   vector_axis="n", pack=0, write_at=0)]
    if name == "ffn2":
        # The weight packed [768/16 or 768/64, 3072, 16 or 64] on every call: whole, or per parallel
        # task (each task's slice of 32 or 16 rows of it packed as it starts, then read from cache).
        base = dict(vector_axis="j", pack=1, unroll=64, write_at=1)
        return [dict(base, tile_i=ti, tile_j=tj, tile_k=tk, pack_at=at) for ti, tj, tk in [
            ((1, 16, 1, 8), (24, 2, 1, 16), (12, 256)), ((1, 16, 1, 8), (48, 1, 1, 16), (6, 512)),
            ((2, 16, 1, 4), (6, 2, 1, 64), (16, 192)),  # the tuner's best with the weight constant
        ] for at in ("call", "task")]
    raise KeyError(name)


def matmul_family(extents: dict[str, int]) -> Iterable[dict]:
    """Variants of the hand-picked matmul family: register tiles that fit 16 ymm, around them, the
    weight packed per call or per task."""
    M, N, K = extents["i"], extents["j"], extents["k"]
    for s3i, s3j in [(4, 16), (8, 8), (2, 32), (4, 32), (8, 16)]:
        for i0, j0 in [(2, 1), (4, 2), (1, 2), (8, 1), (2, 2), (1, 24), (1, 48)]:
            for s2i, s2j in [(1, 1), (2, 1), (4, 4), (1, 2)]:
                if M % (i0 * s2i * s3i) or N % (j0 * s2j * s3j):
                    continue
                i1, j1 = M // (i0 * s2i * s3i), N // (j0 * s2j * s3j)
                for k1 in [8, 32, 64, 128, 256]:
                    for unroll, at in itertools.product((64, 512), ("call", "task")):
                        yield dict(tile_i=(i0, i1, s2i, s3i), tile_j=(j0, j1, s2j, s3j), tile_k=(K // k1, k1),
                                   vector_axis="j", pack=1, unroll=unroll, write_at=1, pack_at=at)


def conv_family(extents: dict[str, int]) -> Iterable[dict]:
    """Variants of the hand-picked k-vectorized convolution family, for output channels `k`, rows
    `h`, columns `w` and input channels `rc`."""
    K, H, W, C = extents["k"], extents["h"], extents["w"], extents["rc"]
    for k3, h3, w3 in [(16, 1, 4), (16, 2, 2), (16, 1, 2), (8, 1, 7), (32, 1, 2), (64, 1, 1)]:
        for k0, h0, w0 in [(1, 2, 1), (1, 1, 2), (2, 1, 1), (1, 4, 1), (2, 2, 1), (1, 2, 2)]:
            if K % (k0 * k3) or H % (h0 * h3) or W % (w0 * w3):
                continue
            for rc1 in (1, 2, 4, 8):
                for rh in ((1, 3), (3, 1)):
                    for rw in ((1, 3), (3, 1)):
                        for unroll in (16, 64, 512):
                            yield dict(tile_n=(1, 1, 1, 1), tile_k=(k0, K // (k0 * k3), 1, k3),
                                       tile_h=(h0, H // (h0 * h3), 1, h3), tile_w=(w0, W // (w0 * w3), 1, w3),
                                       tile_rc=(C // rc1, rc1), tile_rh=rh, tile_rw=rw,
                                       vector_axis="k", pack=1, unroll=unroll, write_at=1)


def pixel_family(extents: dict[str, int]) -> Iterable[dict]:
    """Variants of the hand-picked 1x1 convolution family: the pixels fused, register tiles of k3
    channels x 8 to 32 consecutive pixels."""
    K, H, W, C = extents["k"], extents["h"], extents["w"], extents["rc"]
    for k3, h3, w3 in itertools.product((2, 3, 4, 6, 8), (1, 2, 4), (4, 8, 16)):
        for k0, h0 in [(1, 2), (2, 1), (1, 4), (2, 2), (4, 1)]:
            if K % (k0 * k3) or H % (h0 * h3) or W % w3 or not 8 <= h3 * w3 <= 32:
                continue
            for rc1 in (C, C // 2, 8):
                for unroll in (16, 64):
                    yield dict(tile_n=(1, 1, 1, 1), tile_k=(k0, K // (k0 * k3), 1, k3),
                               tile_h=(h0, H // (h0 * h3), 1, h3), tile_w=(1, W // w3, 1, w3),
                               tile_rc=(C // rc1, rc1), tile_rh=(1, 1), tile_rw=(1, 1),
                               vector_axis="w", pack=0, unroll=unroll, write_at=1, fuse_pixels=1)


def row_family(extents: dict[str, int]) -> Iterable[dict]:
    """Variants of the hand-picked GEMV family: streamed rows and register tiles over 1 to 8
    parallel chunks of the `j` outputs and a few splits of the reduction `k`."""
    N, K = extents["j"], extents["k"]
    for width in (20, 25, 40, 50, 100, 125, 200, 250, 500):
        for chunks in (1, 2, 4, 5, 8):
            if N % (chunks * width):
                continue
            for s2 in (1, N // (chunks * width)):
                for k1 in (1, 8, 64, 256):
                    for unroll in (0, 16, 64):
                        yield dict(tile_i=(1, 1, 1, 1), tile_j=(chunks, N // (chunks * width * s2), s2, width),
                                   tile_k=(K // k1, k1), vector_axis="j", pack=1, unroll=unroll, write_at=0)


def lane_family(extents: dict[str, int]) -> Iterable[dict]:
    """Variants of the hand-picked batched GEMV family: the reduction split into lanes, 1 to 3 keys
    at a time in registers, the batches in 2 to 32 parallel chunks."""
    B, N, K = extents["n"], extents["j"], extents["k"]
    for chunks in (2, 4, 8, 16, 32):
        for keys in (d for d in (1, 3, 43) if N % d == 0):
            for k1 in (16, 32, 64, 128):
                for unroll in (0, 16, 64):
                    if B % chunks or K % k1:
                        continue
                    yield dict(tile_n=(chunks, B // chunks, 1, 1), tile_i=(1, 1, 1, 1), tile_j=(1, 1, N // keys, keys),
                               tile_k=(K // k1, k1), vector_axis="k", pack=0, unroll=unroll, write_at=0)


def family_configs(name: str, template: Template) -> list[Config]:
    """The valid systematic variants around the hand-picked family of one of `WORKLOADS`."""
    from search import Config

    structure = template.structure
    extents = dict(zip(structure.axis_names, structure.extents))
    family = (matmul_family(extents) if name in ("matmul512", "ffn2")
              else pixel_family(extents) if name.startswith("conv1x1")
              else row_family(extents) if name == "gemv" else lane_family(extents) if name == "bgemv"
              else conv_family(extents))
    return [c for c in map(Config, family) if template.space.is_valid(c)]


# --------------------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Mode:
    """How one measurement is taken: its timing protocol, re-timings of a disturbed one, the quiet wait before each."""

    protocol: TimingProtocol
    retries: int
    wait_s: float


def modes(args: argparse.Namespace) -> dict[str, Mode]:
    """full: the table's timings; hasty: full timings with short waits (random configs); quick: exploring."""
    full = TimingProtocol(args.number, args.repeat, args.min_repeat_ms)
    return {"full": Mode(full, args.retries, args.quiet_wait),
            "hasty": Mode(full, min(1, args.retries), args.quick_quiet_wait),
            "quick": Mode(TimingProtocol(args.quick_number, args.quick_repeat, args.quick_min_repeat_ms), 0,
                          args.quick_quiet_wait)}


@dataclass
class Bench:
    """One workload of the run: its template, its inputs and timer, and how measurements are taken."""

    name: str
    template: Template
    timer: Timer
    quiet: Quiet
    modes: dict[str, Mode]

    def measure(self, fn: Callable[[], float], mode: str = "full") -> Timing:
        """`fn()`'s seconds taken in `mode`, on a CPU as quiet as the mode waits for."""
        m = self.modes[mode]
        return self.quiet.measure(fn, m.retries, m.wait_s)

    def inputs(self, config: Config) -> list[np.ndarray] | None:
        """The inputs a config's kernel takes: its constant weight packed, where it takes it so;
        else None (the workload's own)."""
        packed = self.template.packed_weight(config) if self.template.prepacked_weights else None
        return packed.packed_inputs(self.timer.inputs) if packed else None

    def time_kernel(self, module: Any, mode: str = "full", inputs: list[np.ndarray] | None = None) -> Timing:
        """A TVM kernel's seconds on the workload's inputs (or `inputs`), taken in `mode`."""
        return self.measure(lambda: self.timer.tvm(module, self.modes[mode].protocol, inputs), mode)


def make_bench(name: str, args: argparse.Namespace, quiet: Quiet) -> Bench:
    """The bench of one of `WORKLOADS`, on this CPU, timed by default as the table is."""
    import search
    from workloads import from_key

    template = search.template_for(from_key(WORKLOADS[name]), "llvm")
    bench_modes = modes(args)
    return Bench(name, template, Timer(template.workload, "cpu", bench_modes["full"].protocol), quiet, bench_modes)


def build(template: Template, config: Config | dict) -> Any:
    """The runtime module of one config of the template."""
    import tvm

    return tvm.compile(template.apply(config).mod, target=template.target.tvm).mod


def run_config(bench: Bench, config: dict | Config, mode: str = "full") -> dict:
    """Build, check and time one config of our space: a result (gflops None when it fails)."""
    from search import Config, InvalidConfig

    config = Config(config)
    result: dict[str, Any] = {"config": config.to_json(), "gflops": None, "ok": False}
    try:
        started = time.perf_counter()
        module = build(bench.template, config)
        result["build_s"] = round(time.perf_counter() - started, 3)
        inputs = bench.inputs(config)
        result["ok"] = bench.timer.check(module, inputs)
        if not result["ok"]:
            result["error"] = "wrong result"
            return result
        seconds, other = bench.time_kernel(module, mode, inputs)
        result.update(seconds=seconds, gflops=bench.timer.gflops(seconds), other_load=round(other, 3))
    except InvalidConfig as err:
        result["error"] = f"invalid: {str(err)[:200]}"
    except Exception as err:  # a build or runtime failure of this config
        result["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    return result


def ranked(results: Iterable[dict]) -> list[dict]:
    """The results that ran, fastest first."""
    return sorted((r for r in results if r.get("gflops")), key=lambda r: -r["gflops"])


def summarize(results: list[dict]) -> dict:
    """How many configs worked, the best and median GFLOPS, and the best config."""
    ran = ranked(results)
    return {"count": len(results), "valid": len(ran), "best_gflops": ran[0]["gflops"] if ran else None,
            "median_gflops": statistics.median(r["gflops"] for r in ran) if ran else None,
            "best_config": ran[0]["config"] if ran else None}


# --------------------------------------------------------------------------------------------------
# The phases of one workload
# --------------------------------------------------------------------------------------------------

def random_phase(bench: Bench, count: int, rng: np.random.Generator, verbose: bool) -> tuple[list[Config], dict]:
    """`count` random configs of the space, each timed fully with short quiet waits."""
    started = time.perf_counter()
    configs = bench.template.space.sample(rng, count)
    results = []
    for index, config in enumerate(configs):
        results.append(run_config(bench, config, "hasty"))
        if verbose:
            r = results[-1]
            print(f"  random {index + 1:3d} {fmt(r.get('gflops')):>7} GFLOPS other={r.get('other_load')} "
                  f"{r.get('error', '')}", flush=True)
    entry = dict(summarize(results), results=results)
    print(f"  random x{len(results)}: best {fmt(entry['best_gflops'])} median {fmt(entry['median_gflops'])} GFLOPS "
          f"({time.perf_counter() - started:.0f} s)", flush=True)
    return configs, entry


def hand_phase(bench: Bench) -> dict:
    """The hand-picked configs, each timed fully."""
    results = []
    for config in hand_configs(bench.name):
        results.append(run_config(bench, config))
        r = results[-1]
        print(f"  hand {fmt(r.get('gflops')):>7} GFLOPS {r.get('error', '')} {json.dumps(r['config'])}", flush=True)
    entry = dict(summarize(results), results=results)
    print(f"  hand best {fmt(entry['best_gflops'])} GFLOPS: {json.dumps(entry['best_config'])}", flush=True)
    return entry


def seed_pool(bench: Bench, budget: int, rng: np.random.Generator, seen: set[Config]) -> dict[str, dict]:
    """Quick timings of half the budget of family variants and a quarter of new random configs."""
    family = family_configs(bench.name, bench.template)
    picked = [family[int(i)] for i in rng.permutation(len(family))[:budget // 2]]
    pool: dict[str, dict] = {}
    for config in [*picked, *bench.template.space.sample(rng, budget // 4, exclude=seen)]:
        if config.id not in pool:
            pool[config.id] = run_config(bench, config, "quick")
    return pool


def local_search(bench: Bench, pool: dict[str, dict], budget: int, rng: np.random.Generator) -> int:
    """Quick timings of neighbours of the four leaders, round after round, until the budget is
    spent (or 20 rounds found nothing new); returns the rounds."""
    from search import Config

    space = bench.template.space
    rounds = 0
    while budget > 0:
        before = len(pool)
        for leader in ranked(pool.values())[:4]:
            for config in space.neighbors(Config(leader["config"]), rng, n=max(2, min(8, budget // 4))):
                if config.id not in pool and space.is_valid(config):
                    pool[config.id] = run_config(bench, config, "quick")
        rounds += 1
        added = len(pool) - before
        budget -= max(added, 1)
        if added == 0 and rounds > 20:
            break
    return rounds


def explore_phase(bench: Bench, args: argparse.Namespace, rng: np.random.Generator, seen: set[Config]) -> dict:
    """A wider, quick-timed search of the space, its leaders re-timed fully."""
    started = time.perf_counter()
    pool = seed_pool(bench, args.explore, rng, seen)
    print(f"  explore: {len(pool)} family/random configs in {time.perf_counter() - started:.0f} s", flush=True)
    rounds = local_search(bench, pool, args.explore - len(pool), rng)
    print(f"  explore: {len(pool)} configs after {rounds} local rounds ({time.perf_counter() - started:.0f} s)",
          flush=True)
    retimed = [run_config(bench, r["config"]) for r in ranked(pool.values())[:args.explore_retime]]
    best = summarize(retimed)
    print(f"  explore best (re-timed) {fmt(best['best_gflops'])} GFLOPS: {json.dumps(best['best_config'])}", flush=True)
    return {"count": len(pool), "best_gflops": best["best_gflops"], "best_config": best["best_config"],
            "retimed": retimed, "quick_top": ranked(pool.values())[:20]}


def space_best(entry: dict) -> tuple[float | None, dict | None]:
    """The fastest config of our space that any phase found (hand-picked first on a tie)."""
    phases = [entry[phase] for phase in ("hand", "random", "explore") if phase in entry]
    best = max(phases, key=lambda p: p["best_gflops"] or 0)
    return best["best_gflops"] or None, best["best_config"]


def on_one_thread(fn: Callable[[], float]) -> float:
    """`fn()` with torch on one thread: a sanity figure, as one thread is least hurt by a busy core."""
    torch = torch_on_all_cores()
    torch.set_num_threads(1)
    try:
        return fn()
    finally:
        torch_on_all_cores()


def torch_phase(bench: Bench) -> tuple[dict, dict[str, Callable[[], float]]]:
    """torch on every core and on one thread, timed like our kernels; the result and its timings."""
    fn = vendor_versions(bench.timer)["torch"]
    ok = bench.timer.matches(fn())

    def all_cores() -> float:
        return bench.timer.python(fn)

    sides = {"torch": all_cores, "torch_1thread": lambda: on_one_thread(all_cores)}
    seconds, other = bench.measure(sides["torch"])
    seconds_1, other_1 = bench.measure(sides["torch_1thread"])
    result = {"seconds": seconds, "gflops": bench.timer.gflops(seconds), "ok": ok,
              "other_load": round(other, 3), "threads": torch_on_all_cores().get_num_threads(),
              "gflops_1thread": bench.timer.gflops(seconds_1), "other_load_1thread": round(other_1, 3)}
    print(f"  torch {fmt(result['gflops'])} GFLOPS, 1 thread {fmt(result['gflops_1thread'])} "
          f"(ok={result['ok']}, other load {result['other_load']})", flush=True)
    return result, sides


def metaschedule_phase(bench: Bench, args: argparse.Namespace) -> tuple[dict, dict[str, Callable[[], float]]]:
    """MetaSchedule over `--ms-trials` candidates, its best re-timed as ours are; the result and,
    if it produced a program, its timing."""
    result: dict[str, Any] = {"trials": args.ms_trials, "trials_per_iter": args.ms_per_iter}
    sides = {}
    bench.quiet.wait(args.quiet_wait)
    try:
        with CpuWatch() as watch:
            run = tune_metaschedule(bench.timer.workload, bench.template.target, args.ms_trials, seed=args.seed,
                                    per_iter=args.ms_per_iter, evaluator=MS_EVALUATOR,
                                    builder_timeout_s=args.ms_builder_timeout)
        result.update(tune_s=round(run.seconds, 1), other_load_during_tuning_excl_own_workers=round(watch.other, 3),
                      measured=len(run.latencies), ms_own_best_gflops=bench.timer.gflops(run.best_latency),
                      ok=bench.timer.check(run.module))
        module, inputs = run.timing(bench.timer.inputs)
        seconds, other = bench.time_kernel(module, inputs=inputs)
        result.update(seconds=seconds, gflops=bench.timer.gflops(seconds), other_load=round(other, 3), trace=run.trace)
        sides["metaschedule"] = lambda: bench.timer.tvm(module, inputs=inputs)
    except Exception as err:  # MetaSchedule failing is a finding of the run, not its end
        result["error"] = f"{type(err).__name__}: {err}"[:500]
    print(f"  MetaSchedule@{args.ms_trials} {fmt(result.get('gflops'))} GFLOPS "
          f"(own runner best {fmt(result.get('ms_own_best_gflops'))}, ok={result.get('ok')}, "
          f"{result.get('tune_s', 0):.0f} s)", flush=True)
    return result, sides


def contenders(bench: Bench, entry: dict, others: dict[str, Callable[[], float]]) -> dict[str, Callable[[], float]]:
    """The table's programs as timings: the best hand-picked config, the space's best where it is
    another, then `others` (MetaSchedule's best, torch)."""
    from search import Config

    configs = {"hand": entry["hand"]["best_config"], "space": entry["space_best_config"]}
    if configs["space"] == configs["hand"]:
        del configs["space"]
    sides = {}
    for label, config in configs.items():
        if config is not None:
            module, inputs = build(bench.template, config), bench.inputs(Config(config))
            sides[label] = lambda m=module, i=inputs: bench.timer.tvm(m, inputs=i)
    return {**sides, **others}


def head_to_head(bench: Bench, sides: dict[str, Callable[[], float]], args: argparse.Namespace) -> dict:
    """The contenders timed in alternating rounds, so that a quiet window serves them all; per
    contender its fastest quiet round (else its least disturbed one) and every round."""
    timings = bench.quiet.head_to_head(sides, args.final_rounds, args.final_quiet_wait)
    out = {}
    for name, rounds in timings.items():
        seconds, other = bench.quiet.kept(rounds)
        out[name] = {"seconds": seconds, "gflops": bench.timer.gflops(seconds), "other_load": round(other, 3),
                     "quiet": any(bench.quiet.is_quiet(t) for t in rounds),
                     "rounds": [{"seconds": s, "gflops": bench.timer.gflops(s), "other_load": round(o, 3)}
                                for s, o in rounds]}
    if "space" not in out and "hand" in out:
        out["space"] = out["hand"]
    print("  head-to-head: " + ", ".join(f"{k} {fmt(v['gflops'])}{'' if v['quiet'] else ' (disturbed)'}"
                                        for k, v in out.items()), flush=True)
    return out


def run_workload(name: str, args: argparse.Namespace, quiet: Quiet) -> dict:
    """Every phase on one of `WORKLOADS`: its entry of the report."""
    from search import Config

    bench = make_bench(name, args, quiet)
    workload = bench.timer.workload
    print(f"\n== {name}: {workload.key}, {workload.flops / 1e9:.3f} GFLOP, target {bench.template.target}", flush=True)
    entry: dict[str, Any] = {"key": workload.key, "flops": workload.flops, "target": str(bench.template.target)}
    rng = np.random.default_rng(args.seed)
    configs, entry["random"] = random_phase(bench, args.random, rng, args.verbose)
    entry["hand"] = hand_phase(bench)
    if args.explore:
        entry["explore"] = explore_phase(bench, args, rng, {Config(c) for c in [*configs, *hand_configs(name)]})
    entry["space_best_gflops"], entry["space_best_config"] = space_best(entry)
    entry["torch"], torch_sides = torch_phase(bench)
    entry["metaschedule"], ms_sides = metaschedule_phase(bench, args) if args.ms_trials else ({}, {})
    if args.final_rounds:
        entry["final"] = head_to_head(bench, contenders(bench, entry, {**ms_sides, **torch_sides}), args)
    return entry


# --------------------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------------------

def ratio(a: float | None, b: float | None) -> float | None:
    """a / b, or None without both."""
    return None if not a or not b else a / b


def table_numbers(r: dict) -> dict:
    """The table's numbers: head-to-head timings when present, else each phase's own."""
    f = r.get("final") or {}
    g = lambda k, default: (f[k]["gflops"] if k in f else default)  # noqa: E731
    return {"random_best": r["random"]["best_gflops"], "random_median": r["random"]["median_gflops"],
            "hand": g("hand", r["hand"]["best_gflops"]),
            "space": max(x for x in (g("space", r.get("space_best_gflops")), g("hand", r["hand"]["best_gflops"]),
                                     r["random"]["best_gflops"], 0) if x is not None) or None,
            "torch": g("torch", r["torch"].get("gflops")),
            "torch_1thread": g("torch_1thread", r["torch"].get("gflops_1thread")),
            "ms": g("metaschedule", r["metaschedule"].get("gflops"))}


def table_rows(report: dict) -> list[list[str]]:
    """One row of formatted cells per workload, in `HEADER`'s order."""
    rows = []
    for name, r in report["workloads"].items():
        t = table_numbers(r)
        rows.append([name, fmt(t["random_best"]), fmt(t["random_median"]), fmt(t["hand"]), fmt(t["space"]),
                     fmt(t["torch"]), fmt(t["torch_1thread"]), fmt(t["ms"]),
                     fmt(ratio(t["hand"], t["torch"]), 2), fmt(ratio(t["hand"], t["ms"]), 2),
                     fmt(ratio(t["space"], t["torch"]), 2), fmt(ratio(t["space"], t["ms"]), 2)])
    return rows


def print_summary(report: dict) -> None:
    """The table, the disturbed measurements and each workload's best config, on the console."""
    rows = [HEADER] + table_rows(report)
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    print()
    for i, r in enumerate(rows):
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print(f"\n(disturbed measurements: {report['disturbed']} of {report['measurements']}; waited "
          f"{report['quiet_waited_s']:.0f} s for a quiet CPU; total {report['total_s']} s)")
    for name, e in report["workloads"].items():
        print(f"{name} space best config ({fmt(e['space_best_gflops'])} GFLOPS): {json.dumps(e['space_best_config'])}")


def markdown_head(report: dict) -> list[str]:
    """The report's first lines: how it was made, on what, with which settings, and the table."""
    m, v, a = report["machine"], report["versions"], report["settings"]
    lines = [f"# Search-space quality, {report['date']}", "",
             f"Command: `{report['command']}`", "",
             f"Machine: {m['cpu']} ({m['cpus']} CPUs, {m['threads_per_core']} thread/core, "
             f"L1d {m['l1d']}, L2 {m['l2']}, L3 {m['l3']}, AVX2 {m['avx2']}, "
             f"AVX-512 {m['avx512f']}, hypervisor {m['hypervisor']}); "
             f"TVM_NUM_THREADS={m['tvm_threads']}, torch threads={m['torch_threads']}.", "",
             "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()), "",
             f"TVM timing: time_evaluator number={a['number']} repeat={a['repeat']} "
             f"min_repeat_ms={a['min_repeat_ms']} f_preproc=cache_flush_cpu_non_first_arg, median. "
             f"torch: same protocol with perf_counter loops, warm (no cache flush). "
             f"MetaSchedule: tune_tir max_trials_global={a['ms_trials']} num_trials_per_iter={a['ms_per_iter']}, "
             f"xgb, evolutionary, seed={a['seed']}, fast_build, EvaluatorConfig(number={MS_EVALUATOR.number}, "
             f"repeat={MS_EVALUATOR.repeat}, min_repeat_ms={MS_EVALUATOR.min_ms}, cache flush); its best re-timed "
             f"with our settings. Random: {a['random']} configs, seed {a['seed']}. "
             f"Explore: {a['explore']} quick-timed configs.", "",
             "GFLOPS (higher is better):", "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in table_rows(report)]
    return lines + ["", f"Measurements still disturbed after re-timing: {report['disturbed']} of "
                    f"{report['measurements']} (other processes using >= {a['quiet_cores']} cores during the timing; "
                    f"{report['quiet_waited_s']} s spent waiting for a quiet CPU).", ""]


def markdown_workload(name: str, r: dict) -> list[str]:
    """A workload's section: its random, hand-picked, explored, torch and MetaSchedule results."""
    lines = [f"## {name}: `{r['key']}` ({r['flops'] / 1e9:.3f} GFLOP)", "",
             f"- random: {r['random']['valid']}/{r['random']['count']} valid, best config "
             f"`{json.dumps(r['random']['best_config'])}`",
             f"- hand-picked best ({fmt(r['hand']['best_gflops'])} GFLOPS): `{json.dumps(r['hand']['best_config'])}`"]
    lines += [f"  - {fmt(h.get('gflops'))} GFLOPS `{json.dumps(h['config'])}`"
              + (f" ({h['error']})" if h.get("error") else "") for h in r["hand"]["results"]]
    if r.get("explore"):
        e = r["explore"]
        lines.append(f"- explored {e['count']} configs (quick timing); best re-timed "
                     f"{fmt(e['best_gflops'])} GFLOPS: `{json.dumps(e['best_config'])}`")
    ms = r["metaschedule"]
    lines.append(f"- torch {fmt(r['torch'].get('gflops'))} GFLOPS with {r['torch'].get('threads')} threads "
                 f"({fmt(r['torch'].get('gflops_1thread'))} with 1 thread; correct: {r['torch'].get('ok')}); "
                 f"MetaSchedule {fmt(ms.get('gflops'))} GFLOPS re-timed, "
                 f"{fmt(ms.get('ms_own_best_gflops'))} by its own runner, {ms.get('measured')} measured, "
                 f"tuning {ms.get('tune_s')} s, correct: {ms.get('ok')}")
    return lines + [""]


def markdown(report: dict) -> str:
    """The whole report as Markdown."""
    lines = markdown_head(report)
    for name, r in report["workloads"].items():
        lines += markdown_workload(name, r)
    if report.get("notes"):
        lines += ["## Notes", "", report["notes"], ""]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workloads", nargs="+", default=["matmul512", "conv56"], choices=sorted(WORKLOADS))
    p.add_argument("--random", type=int, default=64, help="random configs of our space per workload")
    p.add_argument("--explore", type=int, default=0, help="extra quick-timed configs searched per workload")
    p.add_argument("--explore-retime", type=int, default=5, help="explored leaders re-timed with full settings")
    p.add_argument("--ms-trials", type=int, default=64, help="MetaSchedule max_trials_global (0: skip)")
    p.add_argument("--ms-per-iter", type=int, default=64)
    p.add_argument("--ms-builder-timeout", type=float, default=BUILDER_TIMEOUT_S,
                   help="seconds MetaSchedule's builder may take per candidate")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--number", type=int, default=3)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--min-repeat-ms", type=int, default=50)
    p.add_argument("--quick-number", type=int, default=1)
    p.add_argument("--quick-repeat", type=int, default=3)
    p.add_argument("--quick-min-repeat-ms", type=int, default=10)
    p.add_argument("--quiet-cores", type=float, default=0.25, help="other-process load counted as disturbed")
    p.add_argument("--quiet-wait", type=float, default=10.0, help="max seconds to wait for a quiet CPU")
    p.add_argument("--quiet-budget", type=float, default=900.0, help="total seconds spent waiting for quiet")
    p.add_argument("--quick-quiet-wait", type=float, default=3.0, help="the same for quick (explore) timings")
    p.add_argument("--retries", type=int, default=2, help="re-timings of a disturbed full measurement")
    p.add_argument("--final-rounds", type=int, default=3,
                   help="rounds of alternate timing of hand/space/MetaSchedule/torch for the table (0: off)")
    p.add_argument("--final-quiet-wait", type=float, default=30.0, help="quiet wait before each head-to-head timing")
    p.add_argument("--verbose", action="store_true", help="a line per random config")
    p.add_argument("--out-dir", type=Path, default=RESULTS)
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--notes", default="", help="free text appended to the markdown report")
    return p.parse_args(argv)


def start_report(args: argparse.Namespace) -> dict:
    """The report's facts before any measurement: when, how, on what, with which settings."""
    import search

    settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    return {"date": today(), "command": command(), "machine": machine(search.resolve_target("llvm")),
            "versions": versions(), "settings": settings, "workloads": {}, "notes": args.notes}


def main(argv: list[str] | None = None) -> int:
    """Runs every phase on each workload asked for; prints the table and writes the report."""
    args = parse_args(argv)
    quiet = Quiet(cores=args.quiet_cores, wait_s=args.quiet_wait, budget_s=args.quiet_budget)
    report = start_report(args)
    m = report["machine"]
    print(f"cores={m['cores']} TVM_NUM_THREADS={m['tvm_threads']} torch threads={m['torch_threads']} "
          f"model={m['cpu']}", flush=True)
    started = time.perf_counter()
    report["workloads"] = {name: run_workload(name, args, quiet) for name in args.workloads}
    report.update(disturbed=quiet.disturbed, measurements=quiet.measurements,
                  quiet_waited_s=round(quiet.waited_s, 1), total_s=round(time.perf_counter() - started, 1))
    print_summary(report)
    if not args.no_write:
        stem = args.out_dir / f"space_quality-{report['date']}"
        write_report(stem, report, markdown(report))
        print(f"wrote {stem}.md and .json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
