"""CUDA template: block / virtual-thread / thread / inner tiling, shared-memory staging, registers."""

from __future__ import annotations

import math

from .config import Config
from .knobs import ChoiceKnob, Knob, split_knob
from .gpu_template import GPUTemplate
from .space import Space
from .template import BlockRV, LoopRV, Schedule

SPATIAL_LEVELS = 4  # blockIdx, vthread, threadIdx, per-thread inner tile
REDUCE_LEVELS = 2  # staged through shared memory per outer step
UNROLL_STEPS = (0, 16, 64, 512, 1024)
VECTOR_LOADS = (1, 2, 4)
REGISTER_OVERHEAD = 16  # indices, addresses and loop counters beside the tiles


class CUDATemplate(GPUTemplate):
    """Loop nest S0 S1 S2 R0 R1 S3: S0 -> blockIdx.x, S1 -> vthread.x, S2 -> threadIdx.x.

    Every input is staged in shared memory at R0 by a cooperative fetch of all threads
    (vectorized where the global layout allows), and each thread accumulates its
    S1 x S3 outputs in registers, written back once (with the epilogue fused there).
    """

    def make_space(self) -> Space:
        s = self.structure
        knobs: list[Knob] = [split_knob(self.axis_knob(a), s.extents[a], SPATIAL_LEVELS) for a in s.spatial]
        knobs += [split_knob(self.axis_knob(a), s.extents[a], REDUCE_LEVELS) for a in s.reduce]
        knobs += [ChoiceKnob(self.vector_knob(r.buffer), VECTOR_LOADS) for r in s.reads]
        knobs.append(ChoiceKnob("unroll", UNROLL_STEPS))
        self.read_limits()
        return Space(tuple(knobs), (self.thread_rule, self.shared_memory_rule, self.register_rule,
                                    self.vector_load_rule, self.gpu_code_rule))

    def level(self, config: Config, level: int) -> list[int]:
        return [config[self.axis_knob(a)][level] for a in self.structure.spatial]

    def threads(self, config: Config) -> int:
        return math.prod(self.level(config, 2))

    def block_tile(self, config: Config) -> tuple[int, ...]:
        """Extent of every axis that one thread block covers per outer reduction step."""
        s = self.structure
        return tuple(math.prod(config[self.axis_knob(a)][1:]) if kind == 0 else config[self.axis_knob(a)][-1]
                     for a, kind in enumerate(s.kinds))

    def shared_bytes(self, config: Config) -> int:
        tile = self.block_tile(config)
        return sum(r.footprint(tile) for r in self.structure.reads) * self.structure.dtype_bytes

    def registers(self, config: Config) -> int:
        """Estimated registers per thread: accumulators, operand fragments and a fixed overhead."""
        s = self.structure
        accumulators = math.prod(self.level(config, 1)) * math.prod(self.level(config, 3))
        inner = tuple(config[self.axis_knob(a)][3] if kind == 0 else 1 for a, kind in enumerate(s.kinds))
        return accumulators + sum(r.footprint(inner) for r in s.reads) + REGISTER_OVERHEAD

    def thread_rule(self, config: Config) -> str | None:
        threads = self.threads(config)
        if threads > self.max_threads:
            return f"{threads} threads per block exceed the target's {self.max_threads}"
        if self.structure.spatial_size % self.warp == 0 and threads % self.warp:
            return f"{threads} threads per block is not a multiple of the warp ({self.warp})"
        return None

    def vector_load_rule(self, config: Config) -> str | None:
        """Vector loads need a contiguous, aligned innermost dimension in global memory."""
        tile = self.block_tile(config)
        for read in self.structure.reads:
            width = config[self.vector_knob(read.buffer)]
            if width == 1:
                continue
            last = read.coefficients[-1]
            axes = [a for a, c in enumerate(last) if c]
            contiguous = len(axes) == 1 and last[axes[0]] == 1
            if not contiguous or tile[axes[0]] % width or self.structure.extents[axes[0]] % width:
                return f"{read.buffer} cannot be loaded {width} elements at a time with this tiling"
        return None

    def schedule(self, sch: Schedule, config: Config) -> None:
        s = self.structure
        block = sch.get_sblock(s.main_block)
        sources = [region.source.name for region in sch.get(block).reads]  # padding inlined: data, not pad
        loops = sch.get_loops(block)
        split = {a: sch.split(loops[a], factors=list(config[self.axis_knob(a)])) for a in range(len(loops))}
        levels = [[split[a][0] for a in s.spatial], [split[a][1] for a in s.spatial],
                  [split[a][2] for a in s.spatial], [split[a][0] for a in s.reduce],
                  [split[a][1] for a in s.reduce], [split[a][3] for a in s.spatial]]
        sch.reorder(*[loop for level in levels for loop in level])
        writeback = sch.cache_write(block, 0, "local")
        if s.epilogue_block:
            sch.reverse_compute_inline(sch.get_sblock(s.epilogue_block))
        block_x, vthread, thread_x = (sch.fuse(*level) for level in levels[:3])
        sch.bind(block_x, "blockIdx.x")
        sch.bind(vthread, "vthread.x")
        sch.bind(thread_x, "threadIdx.x")
        sch.reverse_compute_at(writeback, thread_x)
        stage_depth = 3 + len(s.reduce)  # the three fused loops, then the outer reduction loops
        for read, source in zip(s.reads, sources):
            self.stage_in_shared(sch, block, source, levels[3][-1], stage_depth, self.threads(config),
                                 config[self.vector_knob(read.buffer)])
        if config["unroll"]:
            sch.annotate(block_x, "pragma_auto_unroll_max_step", config["unroll"])
            sch.annotate(block_x, "pragma_unroll_explicit", 1)
        sch.decompose_reduction(block, levels[3][0])

    @staticmethod
    def stage_in_shared(sch: Schedule, block: BlockRV, buffer: str, at: LoopRV, depth: int, threads: int,
                        width: int) -> None:
        """Cooperative fetch: all threads copy the tile, `width` contiguous elements each."""
        names = [region.source.name for region in sch.get(block).reads]
        shared = sch.cache_read(block, names.index(buffer), "shared")
        sch.compute_at(shared, at)
        own = sch.get_loops(shared)[depth:]
        if not own:  # a single element: every thread stores the same value
            return
        fused = sch.fuse(*own)
        _, thread, vector = sch.split(fused, factors=[None, threads, width])
        sch.bind(thread, "threadIdx.x")
        if width > 1:
            sch.vectorize(vector)
