"""Features read off a CPU config's knobs and the workload's shape, without lowering (TLP's idea).

The CPU template's loop nest is S0 S1 R0 S2 R1 S3 (`search.cpu_template`): S0 parallel, S3 the
register tile with its innermost axis vectorized. From the tile sizes alone follow the data each
loop level works on (the operands' footprints, against the host's caches), the FMAs per loaded
element at each level, how the vectorized axis walks each operand (contiguous, broadcast or
strided), and how the parallel tasks fill the cores. Together with the draft terms they describe a
candidate in about a hundredth of the time that lowering it and reading `PerStoreFeature` takes.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING

from search import Config, Template

if TYPE_CHECKING:
    from search.structure import Structure

LEVELS = ("register", "l1", "l2", "task")
KNOB_NAMES: tuple[str, ...] = (
    *(f"log_{level}_read_bytes" for level in LEVELS),
    *(f"{level}_intensity" for level in LEVELS),
    "l1_read_ratio", "l2_read_ratio", "l3_read_ratio",
    "log_accumulator_bytes", "accumulator_l1_ratio",
    "log_register_outputs", "log_reduce_inner", "log_reduce_outer",
    "vector_reads_contiguous", "vector_reads_broadcast", "vector_reads_strided", "vector_is_last_axis",
    "log_tasks", "tasks_per_core", "write_at", "log_flops", "log_outputs", "log_reduce_extent",
    "spatial_axes", "reduce_axes", "has_epilogue", "has_padding", "accumulator_registers",
    "log_unrolled_body", "reduce_reads_contiguous", "reduce_reads_strided",
    "pad_copied_per_task", "pad_copied_per_tile", "log_pad_copy_bytes", "vector_guarded",
    "pack_copied_per_call", "pack_copied_per_task", "log_pack_copy_bytes",
)


@lru_cache(maxsize=256)
def _strides(structure: Structure) -> tuple[tuple[int, ...], ...]:
    """[read][axis]: elements the read's address moves when the axis steps by one (row-major)."""
    out = []
    for access in structure.reads:
        sizes = [sum(abs(c) * (e - 1) for c, e in zip(dim, structure.extents)) + 1 for dim in access.coefficients]
        inner = [math.prod(sizes[d + 1:]) for d in range(len(sizes))]
        out.append(tuple(sum(dim[a] * inner[d] for d, dim in enumerate(access.coefficients))
                         for a in range(len(structure.extents))))
    return tuple(out)


def _log(value: float) -> float:
    return math.log2(max(value, 1e-9))


def knob_features(template: Template, config: Config) -> dict[str, float]:
    """Named features of one CPU config (all zero for a GPU template: its draft terms serve)."""
    features = dict.fromkeys(KNOB_NAMES, 0.0)
    if template.target.is_cuda:
        return features
    s, target = template.structure, template.target
    spatial, reduce = s.spatial, s.reduce
    parts = template.tile_parts(config)

    def tile(spatial_from: int, reduce_from: int | None) -> tuple[tuple[int, ...], int]:
        """Per-axis extents swept below a loop level, and the FMAs they do."""
        extents = []
        for a, kind in enumerate(s.kinds):
            if a in spatial:
                extents.append(math.prod(parts[a][spatial_from:]))
            else:
                extents.append(1 if reduce_from is None else math.prod(parts[a][reduce_from:]))
        return tuple(extents), math.prod(extents)

    # register: one step of R1 over S3; l1: an R0 iteration (S2 R1 S3); l2: an S1 iteration (R0 S2 R1 S3);
    # task: an S0 iteration, all of it
    shapes = {"register": tile(3, None), "l1": tile(2, 1), "l2": tile(2, 0), "task": tile(1, 0)}
    reads = {level: sum(r.footprint(extents) for r in s.reads) * s.dtype_bytes for level, (extents, _) in shapes.items()}
    for level, (_, fmas) in shapes.items():
        features[f"log_{level}_read_bytes"] = _log(reads[level])
        features[f"{level}_intensity"] = fmas * s.dtype_bytes / reads[level]
    l1, l2, l3 = (target.cache_or_datasheet(level) for level in ("L1", "L2", "L3"))
    features["l1_read_ratio"] = _log(reads["l1"] / l1)
    features["l2_read_ratio"] = _log(reads["l2"] / l2)
    features["l3_read_ratio"] = _log(reads["task"] * target.cores / l3)
    write_at = config["write_at"]
    width = template.vector_width(config)  # type: ignore[attr-defined]
    lanes_split = width if template.lane_reduction(config) else 1  # type: ignore[attr-defined]
    accumulator = math.prod(math.prod(parts[a][1 + write_at:]) for a in spatial) * lanes_split * s.dtype_bytes
    features["log_accumulator_bytes"] = _log(accumulator)
    features["accumulator_l1_ratio"] = accumulator / l1
    features["log_register_outputs"] = _log(math.prod(parts[a][-1] for a in spatial))
    features["log_reduce_inner"] = _log(math.prod(parts[a][-1] for a in reduce))
    features["log_reduce_outer"] = _log(math.prod(parts[a][0] for a in reduce))
    vec = s.axis_names.index(config["vector_axis"])
    packed = template.packed_operand(vec) if config.get("pack") else None  # type: ignore[attr-defined]
    by_phase = template.phase_stride(config) > 1  # type: ignore[attr-defined]
    for index, (access, strides) in enumerate(zip(s.reads, _strides(s))):
        stride = 1 if index == packed or (by_phase and not access.is_input) else abs(strides[vec])
        kind = "broadcast" if stride == 0 else "contiguous" if stride == 1 else "strided"
        features[f"vector_reads_{kind}"] += 1
    features["vector_is_last_axis"] = float(vec == spatial[-1])
    tasks = math.prod(parts[a][0] for a in spatial)
    features["log_tasks"] = _log(tasks)
    features["tasks_per_core"] = tasks / target.cores
    features["write_at"] = write_at
    outputs, reduction = math.prod(s.extents[a] for a in spatial), math.prod(s.extents[a] for a in reduce)
    features["log_flops"] = _log(2 * outputs * reduction)
    features["log_outputs"] = _log(outputs)
    features["log_reduce_extent"] = _log(reduction)
    features["spatial_axes"], features["reduce_axes"] = len(spatial), len(reduce)
    features["has_epilogue"], features["has_padding"] = float(bool(s.epilogue_block)), float(bool(s.pad_block))
    register_outputs = math.prod(parts[a][-1] for a in spatial)
    features["accumulator_registers"] = math.ceil(width / template.lanes) * register_outputs * lanes_split / width  # type: ignore[attr-defined]
    body = register_outputs * math.prod(parts[a][-1] for a in reduce)
    features["log_unrolled_body"] = _log(min(config["unroll"], body) if config["unroll"] else 1)
    pad_at = template.pad_at(config)  # type: ignore[attr-defined]
    if pad_at == "inline":
        features["vector_guarded"] = float(template.guarded_vector(config))  # type: ignore[attr-defined]
    else:  # the padded window copied per task (S0 iteration) or per cache tile (S1 iteration)
        features["pad_copied_per_task" if pad_at == "task" else "pad_copied_per_tile"] = 1.0
        extents = shapes["task" if pad_at == "task" else "l2"][0]
        copied = sum(access.footprint(extents) for access in s.reads if not access.is_input)
        features["log_pad_copy_bytes"] = _log(copied * s.dtype_bytes)
    if packed is not None and not template.prepacked_weights:  # the kernel packs the weight on every call
        pack_at = template.pack_at(config)  # type: ignore[attr-defined]
        features[f"pack_copied_per_{pack_at}"] = 1.0
        extents, copies = (shapes["task"][0], tasks) if pack_at == "task" else (s.extents, 1)
        features["log_pack_copy_bytes"] = _log(s.reads[packed].footprint(extents) * copies * s.dtype_bytes)
    inner_reduce = reduce[-1] if reduce else None
    for strides in _strides(s):
        if inner_reduce is not None and strides[inner_reduce]:
            features["reduce_reads_contiguous" if abs(strides[inner_reduce]) == 1 else "reduce_reads_strided"] += 1
    return features
