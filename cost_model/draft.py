"""The draft model: an analytic estimate of a config's speed from its tile sizes alone.

It is cheap (no lowering), so the tuner uses it to prune thousands of candidates before the
learned model scores the survivors (Pruner's draft-then-verify); its terms are also features.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, cast

from search import Config, Template
from search.gpu_template import GPUTemplate
from search.tensorcore_template import TensorCoreTemplate

if TYPE_CHECKING:
    from search.cpu_template import CPUTemplate
    from search.cuda_template import CUDATemplate

CPU_GHZ = 3.0
CUDA_SMS, CUDA_GHZ, CUDA_FMA_PER_SM = 132, 1.8, 128
CUDA_THREADS_PER_SM, CUDA_REGISTERS_PER_SM, CUDA_SHARED_PER_SM = 2048, 65536, 228 << 10
TENSOR_FMA_PER_SM = 2048  # dense float16 with float32 accumulation, per clock (Hopper)
FRAGMENT_FMAS = 16 * 16 * 16

DRAFT_NAMES = (
    "draft_log_gflops", "cores", "vector_lanes", "log_parallel_extent", "parallel_efficiency",
    "vector_width", "vector_efficiency", "log_register_tile", "loads_per_fma", "log_l1_tile_bytes",
    "l1_fit", "l2_fit", "packed", "log_unroll", "log_threads", "log_vthreads", "log_blocks",
    "wave_efficiency", "log_shared_bytes", "registers_per_thread", "occupancy",
    "fma_pipes", "l3_fit", "log_l1_bytes", "log_l2_bytes",
)


def _tiles(template: Template, config: Config, level_from: int) -> tuple[int, ...]:
    """Per-axis extent covered from split level `level_from` inward (reduce axes: their inner part)."""
    s = template.structure
    parts = template.tile_parts(config)
    return tuple(math.prod(parts[a][level_from:]) if kind == 0 else parts[a][-1] for a, kind in enumerate(s.kinds))


def _level(template: Template, config: Config, level: int) -> list[int]:
    parts = template.tile_parts(config)
    return [parts[a][level] for a in template.structure.spatial]


def _efficiency(work: int, units: int) -> float:
    """Fraction of `units` kept busy when `work` equal pieces are spread over them."""
    return work / (math.ceil(work / units) * units) if work else 0.0


def draft_features(template: Template, config: Config) -> dict[str, float]:
    """Named analytic features; `draft_log_gflops` is the draft model's estimate."""
    features = dict.fromkeys(DRAFT_NAMES, 0.0)
    features["log_unroll"] = math.log2(1 + config["unroll"])
    if isinstance(template, TensorCoreTemplate):
        features.update(_tensorcore_draft(template, config))
        return features
    s = template.structure
    parts = template.tile_parts(config)
    inner = tuple(parts[a][-1] if k == 0 else 1 for a, k in enumerate(s.kinds))
    outputs_inner = math.prod(inner)
    loads = sum(r.footprint(inner) for r in s.reads)
    features["loads_per_fma"] = loads / outputs_inner
    features["log_register_tile"] = math.log2(outputs_inner)
    if template.target.is_cuda:  # a CUDA target's templates other than the tensor-core one are CUDATemplates
        features.update(_cuda_draft(cast("CUDATemplate", template), config))
    else:
        features.update(_cpu_draft(cast("CPUTemplate", template), config, outputs_inner, loads))
    return features


def _cpu_draft(template: CPUTemplate, config: Config, fmas: int, loads: int) -> dict[str, float]:
    """The CPU's own facts shape the estimate (FMA pipes, cache sizes), so that one model, trained on
    records of several CPUs, reads each candidate against the machine that runs it."""
    s, target = template.structure, template.target
    cores, lanes = target.cores, template.lanes
    l1, l2, l3 = (target.cache_or_datasheet(level) for level in ("L1", "L2", "L3"))
    pipes = max(1, target.flops_per_cycle // (2 * lanes))  # full-width FMAs issued per cycle
    parallel = math.prod(_level(template, config, 0))
    width = template.vector_width(config)
    scalar = width == 1 or template.guarded_vector(config)  # a read through the border test stays scalar
    vector_eff = 1 / lanes if scalar else width / (math.ceil(width / lanes) * lanes)
    vector_fmas = fmas if scalar else fmas / lanes
    cycles = max(vector_fmas / pipes, loads / 2, 4.0)  # FMA pipes, two load ports, FMA latency 4
    kernel_eff = (vector_fmas / pipes) / cycles
    l1_tile = sum(r.footprint(_tiles(template, config, 2)) for r in s.reads) * s.dtype_bytes
    l2_tile = sum(r.footprint(_tiles(template, config, 1)) for r in s.reads) * s.dtype_bytes
    memory_eff = (1.0 if l1_tile <= l1 else 0.6) * (1.0 if l2_tile <= l2 else 0.7)
    peak = cores * target.flops_per_cycle * CPU_GHZ
    gflops = peak * _efficiency(parallel, cores) * vector_eff * kernel_eff * memory_eff
    return {"draft_log_gflops": math.log2(1 + gflops), "cores": cores, "vector_lanes": lanes,
            "log_parallel_extent": math.log2(parallel), "parallel_efficiency": _efficiency(parallel, cores),
            "vector_width": width, "vector_efficiency": vector_eff, "log_l1_tile_bytes": math.log2(l1_tile),
            "l1_fit": l1_tile / l1, "l2_fit": l2_tile / l2, "l3_fit": l2_tile * cores / l3,
            "packed": float(config.get("pack", 0)), "fma_pipes": pipes, "log_l1_bytes": math.log2(l1),
            "log_l2_bytes": math.log2(l2)}


def _gpu_draft(template: GPUTemplate, config: Config, blocks: int, intensity: float,
               fma_per_sm: int) -> dict[str, float]:
    """Occupancy and waves from threads, registers and shared memory; peak scaled by `intensity`."""
    threads = template.threads(config)
    shared = template.shared_bytes(config)
    registers = template.registers(config)
    per_sm = min(CUDA_THREADS_PER_SM // threads, CUDA_REGISTERS_PER_SM // max(registers * threads, 1),
                 CUDA_SHARED_PER_SM // max(shared, 1), 32)
    occupancy = per_sm * threads / CUDA_THREADS_PER_SM
    waves = _efficiency(blocks, CUDA_SMS * max(per_sm, 1))
    gflops = CUDA_SMS * fma_per_sm * 2 * CUDA_GHZ * min(1.0, 2 * occupancy) * waves * intensity
    return {"draft_log_gflops": math.log2(1 + gflops), "log_threads": math.log2(threads),
            "log_blocks": math.log2(blocks), "wave_efficiency": waves, "log_shared_bytes": math.log2(1 + shared),
            "registers_per_thread": registers, "occupancy": occupancy}


def _cuda_draft(template: CUDATemplate, config: Config) -> dict[str, float]:
    vthreads = math.prod(_level(template, config, 1))
    per_thread = vthreads * math.prod(_level(template, config, 3))
    features = _gpu_draft(template, config, math.prod(_level(template, config, 0)), min(1.0, per_thread / 16),
                          CUDA_FMA_PER_SM)
    return {**features, "log_vthreads": math.log2(vthreads)}


def _tensorcore_draft(template: TensorCoreTemplate, config: Config) -> dict[str, float]:
    """Per warp, I2 x J2 fragment products for I2 + J2 fragment loads: more reuse, closer to peak."""
    rows, cols = template.fragments(config, 2)
    batch = math.prod(template.structure.extents[a] for a in template.structure.spatial[:-2])
    blocks = math.prod(template.fragments(config, 0)) * batch
    features = _gpu_draft(template, config, blocks, min(1.0, rows * cols / (2 * (rows + cols))), TENSOR_FMA_PER_SM)
    return {**features, "loads_per_fma": (rows + cols) / (rows * cols * FRAGMENT_FMAS),
            "log_register_tile": math.log2(rows * cols * 256)}


def draft_score(template: Template, config: Config) -> float:
    """Higher is faster: the draft model's log-GFLOPS estimate."""
    return draft_features(template, config)["draft_log_gflops"]
