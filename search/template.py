"""`Template`: a workload's space of schedules on one target, and how a config becomes a program."""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Hashable

import numpy as np

from workloads import Workload

from .config import Config
from .space import InvalidConfig, Space
from .structure import Structure, analyze
from .targets import TargetInfo

# TVM's Python classes carry no type information: its schedules and their handles are Any here.
Schedule = Any  # a tvm.s_tir.Schedule, or an UncheckedSchedule view of one
BlockRV = Any  # a handle of a schedule's block
LoopRV = Any  # a handle of a schedule's loop


@dataclass(frozen=True)
class PackedWeight:
    """An input that a config reads in a blocked layout: dimension `dim` of extent d becomes an
    outer dimension d // width (first) and an inner one of `width` (last), so that the vectorized
    axis is contiguous."""

    input: int  # position among the workload's inputs
    dim: int
    width: int

    def packed_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        rest = tuple(d for i, d in enumerate(shape) if i != self.dim)
        return (shape[self.dim] // self.width, *rest, self.width)

    def pack(self, x: Any) -> Any:
        """`x` (a torch tensor or a numpy array in the workload's layout) in the packed layout, contiguous."""
        shape = tuple(x.shape)
        split = x.reshape(*shape[:self.dim], shape[self.dim] // self.width, self.width, *shape[self.dim + 1:])
        rest = [d for d in range(len(shape) + 1) if d not in (self.dim, self.dim + 1)]
        order = (self.dim, *rest, self.dim + 1)
        if isinstance(x, np.ndarray):
            return np.ascontiguousarray(split.transpose(order))
        return split.permute(*order).contiguous()

    def packed_shapes(self, shapes: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
        """A workload's input shapes as the kernel takes them: this one's packed."""
        return tuple(self.packed_shape(tuple(s)) if i == self.input else tuple(s) for i, s in enumerate(shapes))

    def packed_inputs(self, inputs: Sequence[Any]) -> list[Any]:
        """A workload's inputs as the kernel takes them: this one packed, the others as they are."""
        return [self.pack(x) if i == self.input else x for i, x in enumerate(inputs)]


class Template(ABC):
    """Subclasses define `make_space` and `schedule`, and may split off a shared `schedule_prefix`;
    apply() is deterministic in the config.

    For a workload with constant weights (a model's layers), a config that packs its weight
    (`packed_weight`) takes that input already packed, instead of packing it on every call.
    """

    def __init__(self, workload: Workload, target: TargetInfo) -> None:
        self.workload = workload
        self.target = target
        self.structure: Structure = analyze(workload)
        self.padded_func = workload.prim_func()  # built once: PrimFuncs are immutable
        self.prim_func = self._inline_padding(self.padded_func)
        self._prefixes: dict[Hashable, Schedule] = {}
        self.space: Space = self.make_space()

    def _inline_padding(self, func: Any) -> Any:
        """The workload with its padding block (if any) inlined into its consumer: every schedule
        starts with that step, and it took a fifth of applying a conv's config."""
        from tvm import s_tir

        if not self.structure.pad_block:
            return func
        sch = s_tir.Schedule(func)
        sch.compute_inline(sch.get_sblock(self.structure.pad_block))
        return sch.mod["main"]

    @abstractmethod
    def make_space(self) -> Space: ...

    def source(self, config: Config) -> Any:
        """The program `config`'s schedule starts from: the workload with its padding inlined,
        unless a template places the padding stage itself (`padded_func`)."""
        return self.prim_func

    @abstractmethod
    def schedule(self, sch: Schedule, config: Config) -> None:
        """Apply `config` to `schedule_prefix`'s result for it, in place."""

    def prefix_key(self, config: Config) -> Hashable:
        """What `schedule_prefix` reads of a config: configs with equal keys share one prefix."""
        return None

    def schedule_prefix(self, sch: Schedule, config: Config) -> None:
        """The first steps of a config's schedule, those that depend on `prefix_key(config)` alone.

        They are applied once per key and copied after: caching, layout rewrites and inlining do
        not depend on tile sizes, and took half of applying a conv's config. None by default.
        """

    def axis_knob(self, axis: int) -> str:
        return f"tile_{self.structure.axis_names[axis]}"

    def tile_parts(self, config: Config) -> dict[int, tuple[int, ...]]:
        """Each axis's split factors, outermost first, as the schedule applies them: its knob's by default."""
        return {a: tuple(config[self.axis_knob(a)]) for a in range(len(self.structure.extents))}

    def check(self, config: Config | dict[str, Any]) -> Config:
        """`config` as a `Config` that this template's space allows, else `InvalidConfig`."""
        return self.space.check(config if isinstance(config, Config) else Config(config))

    def apply(self, config: Config | dict[str, Any]) -> Schedule:
        """The scheduled program for `config`: a `tvm.s_tir.Schedule`, or `InvalidConfig`."""
        return self.unchecked_apply(self.check(config))

    def replica(self) -> "Template":
        """A template that schedules configs as this one does but shares no TVM object with it
        (its space is the full one), for applying checked configs on another thread: threads
        that share one program's nodes contend on their reference counts (applying on two cores
        ran 1.3-1.5x as fast as on one, and 1.65x with a replica each)."""
        return type(self)(self.workload, self.target)

    @property
    def prepacked_weights(self) -> bool:
        """Whether packing configs take the packed weight as it is (see `packed_weight`)."""
        return self.workload.constant_weights

    def packed_weight(self, config: Config) -> PackedWeight | None:
        """The input `config` reads in a packed layout, if any (packed by the caller where the
        workload's weights are constant, else by the kernel on every call). None by default."""
        return None

    def _prefix(self, config: Config) -> Schedule:
        """The shared prefix of `config`'s schedule, built on first use; copying one costs about a
        hundredth of building it. Threads may build a key twice: both results are equal."""
        from tvm import s_tir

        key = self.prefix_key(config)
        prefix = self._prefixes.get(key)
        if prefix is None:
            prefix = s_tir.Schedule(self.source(config), error_render_level="none")
            self.schedule_prefix(UncheckedSchedule(prefix), config)
            self._prefixes[key] = prefix
        return prefix

    def unchecked_apply(self, config: Config) -> Schedule:
        """`apply` without the space's rules (which may themselves need the program)."""
        from tvm import s_tir

        try:
            sch = self._prefix(config).copy()
            self.schedule(UncheckedSchedule(sch), config)
        except s_tir.ScheduleError:
            raise InvalidConfig(f"{self.workload.key}: {config} cannot be applied: {self.explain(config)}") from None
        return sch

    def explain(self, config: Config) -> str:
        """Re-apply a failing config with TVM's full diagnostics and keep its reason line."""
        from tvm import s_tir

        try:
            sch = s_tir.Schedule(self.source(config), error_render_level="detail")
            self.schedule_prefix(sch, config)
            self.schedule(sch, config)
        except s_tir.ScheduleError as err:
            lines = [line for line in str(err).splitlines() if line.startswith(("Error message", "ScheduleError"))]
            return " ".join(lines) or str(err).splitlines()[-1]
        return "unknown schedule error"

    def lower(self, config: Config) -> Any:
        """The lowered module (buffers flattened, loops vectorized): what the cost model reads."""
        return lower_schedule(self.apply(config), self.target.tvm)

    def sample(self, rng: np.random.Generator, n: int) -> list[Config]:
        return self.space.sample(rng, n)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.workload.key}, {self.target.kind})"



class UncheckedSchedule:
    """A view of a `tvm.s_tir.Schedule` whose primitives skip TVM's Python-side argument checks.

    Those checks took about 45% of applying a config; templates pass well-typed arguments, and
    the C++ side still validates every primitive.
    """

    __slots__ = ("_sch",)

    def __init__(self, sch: Schedule) -> None:
        self._sch = sch

    def __getattr__(self, name: str) -> Any:
        method = getattr(type(self._sch), name)
        return functools.partial(getattr(method, "__wrapped__", method), self._sch)


def lower_schedule(sch: Schedule, target: Any) -> Any:
    """The s_tir lowering passes only: a readable flat program, before host/device splitting.

    LowerMatchBuffer lowers the views that tensorized blocks (tensor-core fragments) take of
    their buffers; flattening fails without it.
    """
    import tvm
    from tvm import s_tir, tirx

    mod = tvm.tirx.transform.BindTarget(target)(sch.mod)
    passes = [s_tir.transform.LowerInitBlock(), s_tir.transform.PlanAndUpdateBufferAllocationLocation(),
              s_tir.transform.ConvertBlocksToOpaque(), s_tir.transform.CompactBufferAllocation(),
              s_tir.transform.LowerMatchBuffer(), s_tir.transform.LowerOpaqueBlock(), tirx.transform.FlattenBuffer(),
              tirx.transform.VectorizeLoop(), tirx.transform.StmtSimplify()]
    return tvm.ir.transform.Sequential(passes)(mod)
