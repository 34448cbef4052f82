"""CPU (llvm) template: Ansor-style SSRSRS multi-level tiling, parallel, vectorize, unroll, packing."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from .config import Config
from .knobs import ChoiceKnob, Knob, OrderKnob, PlacementKnob, split_knob
from .space import Space
from .structure import Access
from .template import BlockRV, LoopRV, PackedWeight, Schedule, Template

SPATIAL_LEVELS = 4  # parallel outer, cache tile, register tile outer, register tile inner
REDUCE_LEVELS = 2
UNROLL_STEPS = (0, 16, 64, 512)
VECTOR_REGISTERS = 16  # ymm/zmm registers that hold the accumulator tile
VECTOR_ROW_REGISTERS = 4  # widest vectorized loop, in registers: LLVM's compile time explodes past it
STREAMED_ROW_BYTES = 16 * 1024  # a matrix-vector product's accumulator row: half the smallest L1 (32 KiB)
PAD_PLACEMENTS = ("inline", "task", "tile")  # padding read in place, or copied per parallel task / cache tile
PACK_PLACEMENTS = ("call", "task")  # a weight that is no constant packed whole per call, or per parallel task


class CPUTemplate(Template):
    """Loop nest S0 S1 R0 S2 R1 S3: S0 fused and parallel, S3's innermost axis vectorized.

    The accumulator tile lives in a local buffer written back once at the chosen level (where
    the epilogue is fused too); one weight-like operand may be packed so that the vectorized
    axis is contiguous and innermost in memory: ahead of the calls where the weight is constant,
    else by the kernel, whole before the loop nest or each parallel task's slice as the task
    starts (`pack_at`). A padded input is either read in place (every
    read guarded by the border test, which keeps LLVM from vectorizing loops along the padded
    axes) or copied, padded, per parallel task or cache tile (`pad_at`). Where every operand lays
    two adjacent spatial axes out as one contiguous run (a 1x1, stride-1 convolution's output
    rows and columns), a config may fuse them (`fuse_pixels`): the pixels are then tiled as one
    axis, a GEMM's N, so that a vector may span the end of one row and the start of the next (a
    row of 56 pixels takes no 16-lane vector otherwise).

    A matrix-vector product (`matrix_vector`: a GEMV, LLM decoding) reuses no weight across its
    outputs, so its register tile may be a row wider than the registers: TVM then leaves that loop
    to LLVM's loop vectorizer, and the accumulators stay in L1 while the weight streams past them,
    as in MetaSchedule's best GEMVs. Where a matrix-vector product's inputs all hold its innermost
    reduction axis contiguous and are no constant weights to pack ahead of the calls (attention's
    scores against the cached keys while decoding), a config may vectorize that axis instead
    (`lane_reduction`): the reduction is split into vector lanes (TVM's rfactor), each lane summing
    its own share, and the lanes are added up as the outputs are written back. Picked by hand on
    the batched GEMV 32x1x129x128, lanes along k ran at 1.8x the tuner's best before them (lanes
    along the batch: 39.5 against 22.0 GFLOP/s on znver4); on a GEMV with a constant weight, at
    0.73x a streamed row over the packed weight (63.7 against 87.5).
    """

    def vector_candidates(self) -> list[int]:
        s = self.structure
        last = s.spatial[-1]
        packable = [a for a in s.spatial if a != last and s.extents[a] > 1 and self.packed_operand(a) is not None]
        lanes_pay = self.reduction_reads_contiguously() and not self.prepacked_weights
        lane_reduction = [s.reduce[-1]] if lanes_pay else []
        return [last] + packable + lane_reduction

    def reduction_reads_contiguously(self) -> bool:
        """Whether a matrix-vector product's innermost reduction axis is contiguous in every input
        that it indexes: vector lanes along it then load whole vectors, where lanes along an output
        axis that walks an input with a stride would gather."""
        s = self.structure
        if not (self.matrix_vector and s.reduce and s.extents[s.reduce[-1]] > 1):
            return False
        inner = s.reduce[-1]
        reading = [access for access in s.reads if any(dim[inner] for dim in access.coefficients)]
        return all(access.is_input and access.stride(inner) == 1 for access in reading)

    def lane_reduction(self, config: Config) -> bool:
        """Whether `config` vectorizes a reduction axis (see the class's docstring)."""
        return self.vector_axis(config) in self.structure.reduce

    def packed_operand(self, axis: int) -> int | None:
        """Read index of the operand that packing would re-lay out for vectorized axis `axis`
        (none for a reduction axis: lanes along it read their inputs contiguously already)."""
        if axis in self.structure.reduce:
            return None
        for index, access in enumerate(self.structure.reads):
            if index > 0 and access.is_input and access.dim_indexed_by(axis) is not None:
                return index
        return None

    def make_space(self) -> Space:
        s = self.structure
        self.lanes = self.target.vector_lanes(self.workload.dtype)
        self.matrix_vector = self.reads_each_weight_once()
        knobs: list[Knob] = [split_knob(self.axis_knob(a), s.extents[a], SPATIAL_LEVELS) for a in s.spatial]
        knobs += [split_knob(self.axis_knob(a), s.extents[a], REDUCE_LEVELS) for a in s.reduce]
        names = [s.axis_names[a] for a in self.vector_candidates()]
        knobs.append(OrderKnob("vector_axis", tuple(names)))
        if any(self.packed_operand(a) is not None for a in self.vector_candidates()):
            knobs.append(ChoiceKnob("pack", (0, 1)))
            if not self.prepacked_weights:
                knobs.append(ChoiceKnob("pack_at", PACK_PLACEMENTS, default="call"))
        knobs.append(ChoiceKnob("unroll", UNROLL_STEPS))
        knobs.append(PlacementKnob("write_at", (0, 1)))
        if s.pad_block:
            knobs.append(ChoiceKnob("pad_at", PAD_PLACEMENTS, default="inline"))
        self.pixels = self.fusable_pixels()
        if self.pixels:
            knobs.append(ChoiceKnob("fuse_pixels", (0, 1), default=0))
        return Space(tuple(knobs), (self.register_rule, self.vector_rule, self.pack_rule))

    def vector_axis(self, config: Config) -> int:
        return self.structure.axis_names.index(config["vector_axis"])

    def fusable_pixels(self) -> tuple[int, int] | None:
        """Adjacent spatial axes (outer, inner) that every buffer the main block reads, and its
        output, index as one contiguous run: as consecutive dimensions, each by its axis alone,
        the inner one as long as the inner axis. Or None. The outer one is never vectorized."""
        s = self.structure
        if s.pad_block:
            return None
        output = Access(s.main_block, tuple(tuple(int(a == b) for b in range(len(s.extents))) for a in s.spatial),
                        False, tuple(s.extents[a] for a in s.spatial))
        unit = [a for a, extent in enumerate(s.extents) if extent == 1]  # a 1x1 filter's axes, say

        def run(access: Access, outer: int, inner: int) -> bool | None:
            """Whether `access` reads the two axes as one run; None if it reads neither."""
            if not any(dim[outer] or dim[inner] for dim in access.coefficients):
                return None
            d, e = access.dim_indexed_by(outer, unit), access.dim_indexed_by(inner, unit)
            return d is not None and e == d + 1 and access.shape[e] == s.extents[inner]

        vectorizable = self.vector_candidates()
        for outer, inner in reversed(list(zip(s.spatial, s.spatial[1:]))):  # the innermost pair first
            runs = [run(access, outer, inner) for access in s.reads]
            if (inner == outer + 1 and outer not in vectorizable and run(output, outer, inner)
                    and True in runs and False not in runs):
                return outer, inner
        return None

    def reads_each_weight_once(self) -> bool:
        """Whether some input has each of its elements read by one iteration only (a GEMV's
        weight, a batched GEMV's right-hand side): there is then no reuse of it for a register
        tile to exploit."""
        s = self.structure
        return any(access.is_input and access.footprint(s.extents) == math.prod(s.extents) for access in s.reads)

    def fused(self, config: Config) -> bool:
        return bool(config.get("fuse_pixels"))

    def tile_parts(self, config: Config) -> dict[int, tuple[int, ...]]:
        """Each axis's split factors, outermost first, as the schedule applies them: with the
        pixels fused, the inner pixel axis's are the products of both axes' factors level by
        level (the fused loop's split) and the outer one's all 1."""
        parts = super().tile_parts(config)
        if self.fused(config):
            outer, inner = self.pixels  # type: ignore[misc]  # the knob exists only where pixels fuse
            parts[inner] = tuple(o * i for o, i in zip(parts[outer], parts[inner]))
            parts[outer] = (1,) * len(parts[outer])
        return parts

    def register_tile(self, config: Config) -> int:
        """Accumulators of the register tile: the innermost spatial factors' product, times the
        vector lanes where the reduction is split into lanes."""
        parts = self.tile_parts(config)
        tile = math.prod(parts[a][-1] for a in self.structure.spatial)
        return tile * self.vector_width(config) if self.lane_reduction(config) else tile

    def register_rule(self, config: Config) -> str | None:
        tile = self.register_tile(config)
        if self.matrix_vector:
            limit = STREAMED_ROW_BYTES // self.structure.dtype_bytes
            if tile > limit:
                return f"accumulator row of {tile} elements exceeds {STREAMED_ROW_BYTES // 1024} KiB ({limit})"
            return None
        limit = VECTOR_REGISTERS * self.lanes
        if tile > limit:
            return f"register tile of {tile} elements exceeds {VECTOR_REGISTERS} vector registers ({limit})"
        return None

    def vector_rule(self, config: Config) -> str | None:
        """A 131-lane vector in a fully unrolled reduction took LLVM 86 s to compile (AVX-512).
        A matrix-vector product's wider rows are left to LLVM's loop vectorizer (`vectorizes`)."""
        width = self.vector_width(config)
        if width > self.vector_row_limit and not self.matrix_vector:
            return (f"vectorized loop of {width} elements exceeds {VECTOR_ROW_REGISTERS} vector registers "
                    f"({self.vector_row_limit})")
        return None

    @property
    def vector_row_limit(self) -> int:
        """The widest loop that TVM vectorizes: one vector of that many lanes, held in registers."""
        return VECTOR_ROW_REGISTERS * self.lanes

    def vector_width(self, config: Config) -> int:
        """The register tile's extent along the vectorized axis: its innermost loop's; along a
        reduction axis, the widest divisor of that loop's extent that fits one vector (the lanes
        loop that `schedule` splits off it)."""
        width = self.tile_parts(config)[self.vector_axis(config)][-1]
        if self.lane_reduction(config):
            return max(d for d in range(1, min(width, self.lanes) + 1) if width % d == 0)
        return width

    def vectorizes(self, config: Config) -> bool:
        """Whether TVM vectorizes the register tile's innermost loop; else it is a streamed row of
        a matrix-vector product, a loop left to LLVM's loop vectorizer with its accumulators in L1."""
        return self.vector_width(config) <= self.vector_row_limit

    def pack_rule(self, config: Config) -> str | None:
        if config.get("pack") and self.packed_operand(self.vector_axis(config)) is None:
            return f"nothing to pack when vectorizing axis {config['vector_axis']}"
        if self.pack_at(config) != "call" and not config.get("pack"):
            return "pack_at places a packed copy, but the config packs nothing"
        return None

    @staticmethod
    def pack_at(config: Config) -> str:
        return str(config.get("pack_at", "call"))

    def inner_order(self, vec: int) -> list[int]:
        """The spatial axes in register-tile order: the vectorized one innermost (a reduction
        axis's lanes come after them all)."""
        spatial = self.structure.spatial
        return [a for a in spatial if a != vec] + [vec] if vec in spatial else list(spatial)

    @staticmethod
    def pad_at(config: Config) -> str:
        return str(config.get("pad_at", "inline"))

    def guarded_vector(self, config: Config) -> bool:
        """Whether the vectorized loop reads the padded input through its border test (padding
        inlined): TVM then leaves that loop scalar."""
        vec = self.vector_axis(config)
        return self.pad_at(config) == "inline" and any(
            dim[vec] for access in self.structure.reads if not access.is_input for dim in access.coefficients)

    def source(self, config: Config) -> Any:
        return self.prim_func if self.pad_at(config) == "inline" else self.padded_func

    def prefix_key(self, config: Config) -> tuple[int, int, bool, bool]:
        """(vectorized axis, packing width or 0, whether the padding stage is kept, whether the pixels are fused)."""
        vec = self.vector_axis(config)
        return (vec, config[self.axis_knob(vec)][-1] if config.get("pack") else 0, self.pad_at(config) != "inline",
                self.fused(config))

    def schedule_prefix(self, sch: Schedule, config: Config) -> None:
        """The accumulator (its layout), the fused epilogue and the packed operand."""
        s = self.structure
        block = sch.get_sblock(s.main_block)
        vec, pack_width, _, fused = self.prefix_key(config)
        sch.cache_write(block, 0, "global")
        order = self.inner_order(vec) if vec != s.spatial[-1] else s.spatial
        if order != s.spatial or fused:
            self.lay_out_accumulator(sch, block, order, self.pixels if fused else None)
        if s.epilogue_block:
            sch.reverse_compute_inline(sch.get_sblock(s.epilogue_block))
        if pack_width:
            self.pack(sch, block, vec, pack_width)
        if fused:
            self.fuse_pixel_iters(sch, block)

    def schedule(self, sch: Schedule, config: Config) -> None:
        s = self.structure
        block = sch.get_sblock(s.main_block)
        (writeback,) = sch.get_consumers(block)
        vec = self.vector_axis(config)
        dropped = self.pixels[0] if self.fused(config) else None  # type: ignore[index]  # folded into its partner
        spatial = [a for a in s.spatial if a != dropped]
        parts = self.tile_parts(config)
        axis_loops = dict(zip([a for a in range(len(s.extents)) if a != dropped], sch.get_loops(block)))
        split = {a: sch.split(loop, factors=list(parts[a])) for a, loop in axis_loops.items()}
        lanes = []  # a lane-split reduction's lanes loop, split off its innermost factor's
        if self.lane_reduction(config):
            reduced, lane = sch.split(split[vec][1], factors=[None, self.vector_width(config)])
            split[vec], lanes = [split[vec][0], reduced], [lane]
        levels = [[split[a][0] for a in spatial], [split[a][1] for a in spatial],
                  [split[a][0] for a in s.reduce], [split[a][2] for a in spatial],
                  [split[a][1] for a in s.reduce], [split[a][3] for a in self.inner_order(vec) if a != dropped] + lanes]
        sch.reorder(*[loop for level in levels for loop in level])
        main = block
        if lanes:  # the lanes become a dimension of a new accumulator; `block` then adds them up
            main = sch.rfactor(lanes[0], factor_axis=len(spatial))
            loops = iter(sch.get_loops(main))
            levels = [[next(loops) for _ in level] for level in levels]
        outer = sch.fuse(*levels[0])
        sch.parallel(outer)
        attach = outer if config["write_at"] == 0 else levels[1][-1]
        if lanes:
            sch.reverse_compute_at(block, attach)
        sch.reverse_compute_at(writeback, attach)
        placement = self.pad_at(config)
        if placement != "inline":
            self.place_padding(sch, outer if placement == "task" else levels[1][-1])
        if self.pack_at(config) == "task":
            self.pack_per_task(sch, outer, vec, self.prefix_key(config)[1])
        if config["unroll"]:
            sch.annotate(outer, "pragma_auto_unroll_max_step", config["unroll"])
            sch.annotate(outer, "pragma_unroll_explicit", 1)
        vectorized = self.vectorizes(config)
        if vectorized:
            self.vectorize_innermost(sch, levels[5][-1])
        sch.decompose_reduction(main, levels[2][0])
        writeback_loops = sch.get_loops(writeback)
        attach_depth = 1 if config["write_at"] == 0 else 1 + len(spatial)
        # the write-back has loops of its own below the attach point: vectorize its innermost one,
        # unless the accumulator was transposed (then it is a gather, and LLVM compiles wide gathers
        # in unrolled nests for minutes) or is a streamed row (a TVM vector as wide as the row made
        # a GEMV run at 6 GFLOP/s instead of 82: LLVM's loop vectorizer takes that loop too)
        if len(writeback_loops) > attach_depth and vec == s.spatial[-1] and vectorized:
            self.vectorize_innermost(sch, writeback_loops[-1])
        if self.phase_stride(config) > 1:
            self.split_rows_by_phase(sch, self.phase_stride(config))

    def fuse_pixel_iters(self, sch: Schedule, block: BlockRV) -> None:
        """Make the pixel axes one iterator of the main block and of its write-back, p = outer *
        extent + inner: the buffers keep their shapes, and lowering folds p // extent * extent +
        p % extent back into p, so the fused axis addresses memory contiguously."""
        from tvm.tirx.function import IndexMap

        s = self.structure
        outer, inner = self.pixels  # type: ignore[misc]
        (writeback,) = sch.get_consumers(block)
        # the main block iterates over every axis, the write-back over the spatial ones, in order
        for stage, axes in ((block, list(range(len(s.extents)))), (writeback, s.spatial)):
            fuse = fusing_pair(axes.index(outer), s.extents[inner])
            dtype = str(sch.get(stage).iter_vars[0].var.ty)
            sch.transform_block_layout(stage, IndexMap.from_func(fuse, ndim=len(axes), index_dtype=dtype))

    def place_padding(self, sch: Schedule, loop: LoopRV) -> None:
        """Copy the padded window that the iterations of `loop` read, at its start: the
        convolution's own loops then read it unguarded."""
        pad = sch.get_sblock(self.structure.pad_block)
        sch.compute_at(pad, loop)
        innermost = sch.get_loops(pad)[-1]
        if int(sch.get(innermost).extent) <= self.vector_row_limit:
            self.vectorize_innermost(sch, innermost)

    def pack_per_task(self, sch: Schedule, task: LoopRV, vec: int, width: int) -> None:
        """Pack, at the start of each parallel task, the part of the weight that the task reads,
        walking the packed layout in its own order so that the stores are contiguous (the
        innermost `width` elements one vector, where they fit one; wider, that vector would
        gather from as many rows, and ran at 0.4-0.8x the scalar copy).

        Packed whole per call, a weight that is no constant (BERT's FFN2 768x3072 taken as an
        argument) streams through memory twice before the GEMM reads it; per task, the packed
        slice is still in cache when the task reads it: 1.4-1.5x per call on two register tiles
        of that GEMM (space_quality-2026-12-07-pack-per-task, znver4). A task whose rows of the
        output are split across tasks packs its slice again."""
        from tvm.tirx.function import IndexMap

        buffer, dim = self.packed_dim(vec)
        packed = sch.get_sblock(f"{buffer}_global")
        # iterate as the copy is laid out; compute_at then makes one loop per iterator, in order
        # (none for an iterator that spans one element in a task), the innermost the vector's
        iters = sch.get(packed).iter_vars
        layout = IndexMap.from_func(packed_layout(dim, width), ndim=len(iters), index_dtype=str(iters[0].var.ty))
        sch.transform_block_layout(packed, layout)
        sch.compute_at(packed, task)
        if 1 < width <= self.lanes:  # (of width 1, the innermost loop is another dimension's)
            sch.vectorize(sch.get_loops(packed)[-1])

    def phase_stride(self, config: Config) -> int:
        """The stride by whose phases the copied window's rows are laid out (`split_rows_by_phase`),
        or 1: where the vectorized axis walks those rows with a stride (a strided convolution
        vectorized along its output width) and the padded width divides by it."""
        if self.pad_at(config) == "inline":
            return 1
        (window,) = [access for access in self.structure.reads if not access.is_input]
        stride = abs(window.coefficients[-1][self.vector_axis(config)])  # how far that axis steps along a row
        return stride if stride > 1 and window.shape[-1] % stride == 0 else 1

    def split_rows_by_phase(self, sch: Schedule, stride: int) -> None:
        """Lay each row of the copied window out by phase, w -> (w % stride, w // stride), so that
        vector loads stepping `stride` along a row read consecutive elements instead of every
        stride-th one. The copy costs the same either way."""
        pad = sch.get_sblock(self.structure.pad_block)
        sch.transform_layout(pad, ("write", 0), lambda *idx: (*idx[:-1], idx[-1] % stride, idx[-1] // stride))

    @staticmethod
    def vectorize_innermost(sch: Schedule, loop: LoopRV) -> None:
        if int(sch.get(loop).extent) > 1:
            sch.vectorize(loop)

    def lay_out_accumulator(self, sch: Schedule, block: BlockRV, order: list[int],
                            pixels: tuple[int, int] | None) -> None:
        """Lay the accumulator out with its axes in `order` (the register tile's, the vectorized
        axis innermost), the `pixels` pair, if given, as one dimension.

        Otherwise, when the vectorized axis is not the output's last one (NCHW conv over k), every
        vector of accumulators is a strided gather and scatter: about half the speed. Fused pixels
        need their accumulator one-dimensional too, or the write-back would cover whole rows.
        """
        s = self.structure
        extent = s.extents[pixels[1]] if pixels else 0

        def layout(*idx: Any) -> tuple[Any, ...]:
            by_axis = dict(zip(s.spatial, idx))
            if pixels:
                outer, inner = pixels
                by_axis[outer] = by_axis[outer] * extent + by_axis.pop(inner)
            return tuple(by_axis[a] for a in order if a in by_axis)

        sch.transform_layout(block, ("write", 0), layout)

    def packed_weight(self, config: Config) -> PackedWeight | None:
        vec, width, _, _ = self.prefix_key(config)
        if not width:
            return None
        buffer, dim = self.packed_dim(vec)
        params = [p.name for p in self.prim_func.params]  # named as their buffers
        return PackedWeight(params.index(buffer), dim, width)

    def packed_dim(self, vec: int) -> tuple[str, int]:
        """The buffer that packing for vectorized axis `vec` re-lays out, and its dimension indexed by `vec`."""
        operand = self.packed_operand(vec)
        assert operand is not None, f"axis {vec} has no operand to pack"  # pack_rule admits no other config
        access = self.structure.reads[operand]
        dim = access.dim_indexed_by(vec)
        assert dim is not None  # packed_operand chose this operand for having that dimension
        return access.buffer, dim

    def pack(self, sch: Schedule, block: BlockRV, vec: int, width: int) -> None:
        """Read the operand in a [d // width, ..., width] layout: copied so once per call, in
        parallel; or, with prepacked weights, taken so from the caller (the parameter's layout)."""
        buffer, dim = self.packed_dim(vec)
        names = [region.source.name for region in sch.get(block).reads]
        layout = packed_layout(dim, width)
        if self.prepacked_weights:
            sch.transform_layout(block, ("read", names.index(buffer)), layout)
            return
        packed = sch.cache_read(block, names.index(buffer), "global")
        sch.transform_layout(packed, ("write", 0), layout)
        loops = sch.get_loops(packed)
        sch.parallel(loops[0])


def packed_layout(dim: int, width: int) -> Callable[..., tuple[Any, ...]]:
    """The index map of packing dimension `dim` by `width`: [d // width, the others..., d % width]
    (`PackedWeight`'s layout)."""

    def layout(*idx: Any) -> tuple[Any, ...]:
        rest = [i for d, i in enumerate(idx) if d != dim]
        return (idx[dim] // width, *rest, idx[dim] % width)

    return layout


def fusing_pair(at: int, extent: int) -> Callable[..., tuple[Any, ...]]:
    """The index map that makes the pair of indices at `at` and `at + 1` (the inner of `extent`) one.
    A closure over positional indices only: TVM's `IndexMap.from_func` reads keyword parameters as indices."""

    def fuse(*iters: Any) -> tuple[Any, ...]:
        return (*iters[:at], iters[at] * extent + iters[at + 1], *iters[at + 2:])

    return fuse
