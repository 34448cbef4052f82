"""Tensor-core template: float16 (batch) matmuls on WMMA 16x16x16 fragments, float32 accumulation."""

from __future__ import annotations

import functools
import math

from workloads import BatchMatmul, Matmul, Workload

from .config import Config
from .knobs import ChoiceKnob, Knob, split_knob
from .gpu_template import GPUTemplate
from .space import Space
from .targets import TargetInfo
from .template import BlockRV, LoopRV, Schedule

FRAGMENT = 16  # WMMA's m = n = k
MIN_SM = 70  # Volta: the first architecture with tensor cores
MAX_GRID_Y = 65535  # the batch is bound to blockIdx.y
OPERATORS = ("matmul", "batch_matmul")
SPATIAL_LEVELS = 3  # blockIdx, warp (threadIdx.y), fragments per warp
REDUCE_LEVELS = 2  # outer loop, fragments staged in shared memory per outer step
# halves per thread per cooperative-fetch step (8 = 16 bytes); every width is aligned, since
# extents and tiles are multiples of 16 halves and shared rows are padded by 8
VECTOR_LOADS = (1, 2, 4, 8)
UNROLL_STEPS = (0, 16, 64, 512, 1024)
OPERAND_PAD = 8  # halves added to every shared row: spreads banks, keeps rows 16-byte aligned
OUTPUT_PAD = 4  # floats added to every row of the shared output stage
FRAGMENT_REGISTERS = 8  # a 16x16 fragment over a warp's 32 lanes: 8 floats, or 16 halves in 8 registers
REGISTER_OVERHEAD = 32  # addresses, indices and loop counters beside the fragments


def sm_version(target: TargetInfo) -> int:
    """The compute capability of a CUDA target's `arch` ("sm_90a" -> 90; 0 when absent)."""
    arch = target.arch
    digits = "".join(c for c in arch.removeprefix("sm_") if c.isdigit())
    return int(digits) if arch.startswith("sm_") and digits else 0


def supports(workload: Workload, target: TargetInfo) -> bool:
    """Tensor cores take float16 operands in whole 16x16x16 fragments, on sm_70 and newer."""
    return (target.is_cuda and sm_version(target) >= MIN_SM and workload.op in OPERATORS
            and workload.dtype == "float16" and getattr(workload, "B", 1) <= MAX_GRID_Y
            and all(getattr(workload, dim) % FRAGMENT == 0 for dim in ("M", "N", "K")))


@functools.lru_cache(maxsize=None)
def wmma_intrinsics(transpose_b: bool) -> dict[str, str]:
    """Names of the WMMA intrinsics: operands from "shared", the float32 accumulator stored to "shared.dyn".

    The accumulator's stage is dynamic shared memory because TVM's StorageRewrite would otherwise
    reuse a float16 operand buffer for it, and lowering then fails ("tvm_access_ptr element type
    must match the source buffer"). The import registers every CUDA tensor intrinsic and takes
    tens of seconds, so it happens once, and only when a tensor-core schedule is built.
    """
    from tvm.s_tir.tensor_intrin.cuda import get_wmma_intrin_group

    return get_wmma_intrin_group(load_scope="shared", store_scope="shared.dyn", in_dtype="float16",
                                 out_dtype="float32", trans_b=transpose_b)


class TensorCoreTemplate(GPUTemplate):
    """Loop nest [batch] I0 J0 | I1 J1 | K0 K1 | I2 J2, each step one 16x16x16 WMMA fragment.

    I0 J0 -> blockIdx.x (the batch -> blockIdx.y), I1 J1 -> one warp each (threadIdx.y); a warp
    owns I2 x J2 accumulator fragments. At every K0 step all threads stage the A and B tiles of
    K1 fragments in shared memory (vectorized); at every K1 step each warp loads its A and B
    fragments and issues I2 x J2 mma_syncs. The accumulators go through shared memory to global,
    with the epilogue (bias, ReLU, cast to float16) fused into that copy.
    """

    workload: Matmul | BatchMatmul  # the operators `supports` admits

    def make_space(self) -> Space:
        s = self.structure
        *_, i, j = s.spatial
        knobs: list[Knob] = [split_knob(self.axis_knob(a), s.extents[a] // FRAGMENT, SPATIAL_LEVELS) for a in (i, j)]
        knobs += [split_knob(self.axis_knob(a), s.extents[a] // FRAGMENT, REDUCE_LEVELS) for a in s.reduce]
        knobs += [ChoiceKnob(self.vector_knob(r.buffer), VECTOR_LOADS) for r in s.reads]
        knobs.append(ChoiceKnob("unroll", UNROLL_STEPS))
        self.read_limits()
        return Space(tuple(knobs), (self.thread_rule, self.shared_memory_rule, self.register_rule,
                                    self.gpu_code_rule))

    def fragments(self, config: Config, level: int) -> tuple[int, int]:
        """Fragments along I and J at one level of the split (0 block, 1 warp, 2 per warp)."""
        *_, i, j = self.structure.spatial
        return config[self.axis_knob(i)][level], config[self.axis_knob(j)][level]

    def warps(self, config: Config) -> int:
        return math.prod(self.fragments(config, 1))

    def threads(self, config: Config) -> int:
        return self.warps(config) * self.warp

    def shared_bytes(self, config: Config) -> int:
        """Padded A and B tiles (float16) plus the block's float32 output stage (all live at once)."""
        (wi, wj), (fi, fj) = self.fragments(config, 1), self.fragments(config, 2)
        rows, cols = wi * fi * FRAGMENT, wj * fj * FRAGMENT
        depth = config[self.axis_knob(self.structure.reduce[0])][1] * FRAGMENT
        b_tile = cols * (depth + OPERAND_PAD) if self.workload.transpose_b else depth * (cols + OPERAND_PAD)
        return 2 * (rows * (depth + OPERAND_PAD) + b_tile) + 4 * rows * (cols + OUTPUT_PAD)

    def registers(self, config: Config) -> int:
        """Estimated registers per thread: accumulator and operand fragments, and an overhead."""
        fi, fj = self.fragments(config, 2)
        return FRAGMENT_REGISTERS * (fi * fj + fi + fj) + REGISTER_OVERHEAD

    def thread_rule(self, config: Config) -> str | None:
        threads = self.threads(config)
        if threads > self.max_threads:
            return f"{self.warps(config)} warps ({threads} threads) per block exceed the target's {self.max_threads}"
        return None

    def schedule(self, sch: Schedule, config: Config) -> None:
        s = self.structure
        intrinsics = wmma_intrinsics(self.workload.transpose_b)
        block = sch.get_sblock(s.main_block)
        *batch, i, j, k = sch.get_loops(block)
        (i, ii), (j, jj), (k, kk) = (sch.split(loop, factors=[None, FRAGMENT]) for loop in (i, j, k))
        sch.reorder(i, j, k, ii, jj, kk)
        outer = sch.blockize(ii)  # one 16x16x16 fragment product per iteration of the outer loops
        *_, ai, aj = s.spatial
        i0, i1, i2 = sch.split(i, factors=list(config[self.axis_knob(ai)]))
        j0, j1, j2 = sch.split(j, factors=list(config[self.axis_knob(aj)]))
        k0, k1 = sch.split(k, factors=list(config[self.axis_knob(s.reduce[0])]))
        sch.reorder(i0, j0, i1, j1, k0, k1, i2, j2)
        block_x, warp = sch.fuse(i0, j0), sch.fuse(i1, j1)
        sch.bind(block_x, "blockIdx.x")
        for loop in batch:
            sch.bind(loop, "blockIdx.y")
        sch.bind(warp, "threadIdx.y")
        depth = len(batch) + 2  # loops above a warp's own: the batch, blockIdx.x and the warp
        for index, read in enumerate(s.reads):
            self.stage_in_shared(sch, outer, index, k0, depth + 1, config[self.vector_knob(read.buffer)],
                                 self.warps(config))
        for index, scope, intrinsic in ((0, "wmma.matrix_a", "load_a"), (1, "wmma.matrix_b", "load_b")):
            fragment = sch.cache_read(outer, index, scope)
            sch.compute_at(fragment, k1)
            self.tensorize_fragments(sch, fragment, intrinsics[intrinsic])
        output = sch.cache_write(outer, 0, "shared.dyn")  # see wmma_intrinsics: not "shared"
        accumulator = sch.cache_write(outer, 0, "wmma.accumulator")
        sch.reverse_compute_at(accumulator, warp)
        sch.reverse_compute_at(output, warp)
        store = self.tensorize_fragments(sch, accumulator, intrinsics["store"])
        # aligned on the tensorized block: an annotation on the block it replaced would be lost
        sch.storage_align(store, 0, axis=-2, factor=FRAGMENT, offset=OUTPUT_PAD)
        if s.epilogue_block:
            sch.reverse_compute_inline(sch.get_sblock(s.epilogue_block))
        _, lane = sch.split(sch.fuse(*sch.get_loops(output)[depth:]), factors=[None, self.warp])
        sch.bind(lane, "threadIdx.x")
        init = sch.decompose_reduction(outer, k0)
        sch.tensorize(sch.get_loops(sch.get_child_blocks(init)[0])[-2], intrinsics["init"])
        sch.tensorize(sch.get_loops(block)[-3], intrinsics["compute"])
        for loop in (*sch.get_loops(init)[-2:], i2, j2):  # fragment arrays indexed by constants only
            sch.unroll(loop)
        if config["unroll"]:
            sch.annotate(block_x, "pragma_auto_unroll_max_step", config["unroll"])
            sch.annotate(block_x, "pragma_unroll_explicit", 1)

    def stage_in_shared(self, sch: Schedule, block: BlockRV, index: int, at: LoopRV, depth: int, width: int,
                        warps: int) -> None:
        """Cooperative fetch of one operand's tile by all warps, `width` halves per thread.

        `depth` counts the loops down to `at`. The copy's own loops follow; they are fewer than
        the buffer's dimensions for a batch (its extent-1 dimension gets no loop).
        """
        shared = sch.cache_read(block, index, "shared")
        sch.compute_at(shared, at)
        sch.storage_align(shared, 0, axis=-2, factor=FRAGMENT, offset=OPERAND_PAD)
        own = sch.get_loops(shared)[depth:]
        _, warp, lane, vector = sch.split(sch.fuse(*own), factors=[None, warps, self.warp, width])
        sch.bind(warp, "threadIdx.y")
        sch.bind(lane, "threadIdx.x")
        sch.vectorize(vector)

    @staticmethod
    def tensorize_fragments(sch: Schedule, block: BlockRV, intrinsic: str) -> BlockRV:
        """Tile a copy between fragments and memory into 16x16 pieces, one intrinsic each.

        Returns the tensorized block. The loops over pieces are unrolled: a fragment array
        indexed by a variable would spill to local memory.
        """
        rows, cols = sch.get_loops(block)[-2:]
        r0, r1 = sch.split(rows, factors=[None, FRAGMENT])
        c0, c1 = sch.split(cols, factors=[None, FRAGMENT])
        sch.reorder(r0, c0, r1, c1)
        piece = sch.blockize(r1)
        sch.tensorize(piece, intrinsic)
        sch.unroll(r0)
        sch.unroll(c0)
        return piece
