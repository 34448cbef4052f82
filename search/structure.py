"""What a template needs to know about an operator's PrimFunc: its axes and how it reads its inputs."""

from __future__ import annotations

import math
from collections.abc import Collection
from dataclasses import dataclass

from workloads import Workload

SPATIAL, REDUCE = 0, 2  # tvm IterVar types


@dataclass(frozen=True)
class Access:
    """How the main block reads one buffer: per dimension, the coefficient of each axis."""

    buffer: str
    coefficients: tuple[tuple[int, ...], ...]  # [dim][axis]
    is_input: bool  # a function parameter (not the padding stage)
    shape: tuple[int, ...]  # the buffer's

    def footprint(self, tile: tuple[int, ...]) -> int:
        """Elements touched when every axis `a` sweeps `tile[a]` consecutive values."""
        return math.prod(sum(abs(c) * (t - 1) for c, t in zip(dim, tile)) + 1 for dim in self.coefficients)

    def stride(self, axis: int) -> int:
        """Elements the read's address moves when `axis` steps by one (the buffer row-major)."""
        return sum(dim[axis] * math.prod(self.shape[d + 1:]) for d, dim in enumerate(self.coefficients))

    def dim_indexed_by(self, axis: int, ignored: Collection[int] = ()) -> int | None:
        """The dimension whose index is exactly axis `axis` (a candidate for packing), if any;
        axes in `ignored` (e.g. those of extent 1) may appear in it too."""
        for d, dim in enumerate(self.coefficients):
            if dim[axis] == 1 and all(c == 0 or a == axis or a in ignored for a, c in enumerate(dim)):
                return d
        return None


@dataclass(frozen=True)
class Structure:
    main_block: str
    axis_names: tuple[str, ...]
    extents: tuple[int, ...]
    kinds: tuple[int, ...]
    reads: tuple[Access, ...]
    pad_block: str | None
    epilogue_block: str | None
    dtype_bytes: int

    @property
    def spatial(self) -> list[int]:
        return [a for a, k in enumerate(self.kinds) if k == SPATIAL]

    @property
    def reduce(self) -> list[int]:
        return [a for a, k in enumerate(self.kinds) if k == REDUCE]

    @property
    def spatial_size(self) -> int:
        return math.prod(self.extents[a] for a in self.spatial)


def analyze(workload: Workload) -> Structure:
    """Read axes, access patterns and the stages around the main block off the PrimFunc."""
    import tvm
    from tvm import s_tir
    from tvm.sym import detect_linear_equation

    func = workload.prim_func()
    sch = s_tir.Schedule(func, error_render_level="none")
    block_rv = sch.get_sblock(workload.main_block)
    block = sch.get(block_rv)
    axis_vars = [iv.var for iv in block.iter_vars]
    params = {str(p.name) for p in func.params}
    reads = []
    for region in block.reads:
        coefficients = []
        for rng in region.region:
            coeffs = detect_linear_equation(rng.min, axis_vars)
            if len(coeffs) != len(axis_vars) + 1:
                raise ValueError(f"{workload.key}: non-affine access to {region.source.name}")
            coefficients.append(tuple(int(c) for c in list(coeffs)[:-1]))
        reads.append(Access(region.source.name, tuple(coefficients), region.source.name in params,
                            tuple(int(n) for n in region.source.shape)))
    producers = [sch.get(b).name_hint for b in sch.get_producers(block_rv)]
    consumers = [sch.get(b).name_hint for b in sch.get_consumers(block_rv)]
    return Structure(
        main_block=workload.main_block,
        axis_names=tuple(str(iv.var.name).removeprefix("v_") for iv in block.iter_vars),
        extents=tuple(int(iv.dom.extent) for iv in block.iter_vars),
        kinds=tuple(int(iv.iter_type) for iv in block.iter_vars),
        reads=tuple(reads),
        pad_block=producers[0] if producers else None,
        epilogue_block=consumers[0] if consumers else None,
        dtype_bytes=tvm.runtime.DataType(workload.dtype).bits // 8,
    )
