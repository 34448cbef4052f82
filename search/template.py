"""`Template`: a workload's space of schedules on one target, and how a config becomes a program."""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod

import numpy as np

from workloads import Workload

from .config import Config
from .space import InvalidConfig, Space
from .structure import Structure, analyze


class Template(ABC):
    """Subclasses define `make_space` and `schedule`; apply() is deterministic in the config."""

    def __init__(self, workload: Workload, target):
        self.workload = workload
        self.target = target
        self.structure: Structure = analyze(workload)
        self.prim_func = self._inline_padding(workload.prim_func())  # built once: PrimFuncs are immutable
        self.space: Space = self.make_space()

    def _inline_padding(self, func):
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

    @abstractmethod
    def schedule(self, sch, config: Config) -> None:
        """Apply `config` to a fresh schedule of the workload's PrimFunc, in place."""

    def axis_knob(self, axis: int) -> str:
        return f"tile_{self.structure.axis_names[axis]}"

    def apply(self, config: Config):
        """The scheduled program for `config`: a `tvm.s_tir.Schedule`, or `InvalidConfig`."""
        config = config if isinstance(config, Config) else Config(config)
        return self.unchecked_apply(self.space.check(config))

    @functools.cached_property
    def _blank_schedule(self):
        """The unscheduled program; copying it costs about a hundredth of building a schedule."""
        from tvm import s_tir

        return s_tir.Schedule(self.prim_func, error_render_level="none")

    def unchecked_apply(self, config: Config):
        """`apply` without the space's rules (which may themselves need the program)."""
        from tvm import s_tir

        sch = self._blank_schedule.copy()
        try:
            self.schedule(UncheckedSchedule(sch), config)
        except s_tir.ScheduleError:
            raise InvalidConfig(f"{self.workload.key}: {config} cannot be applied: {self.explain(config)}") from None
        return sch

    def explain(self, config: Config) -> str:
        """Re-apply a failing config with TVM's full diagnostics and keep its reason line."""
        from tvm import s_tir

        try:
            self.schedule(s_tir.Schedule(self.prim_func, error_render_level="detail"), config)
        except s_tir.ScheduleError as err:
            lines = [line for line in str(err).splitlines() if line.startswith(("Error message", "ScheduleError"))]
            return " ".join(lines) or str(err).splitlines()[-1]
        return "unknown schedule error"

    def lower(self, config: Config):
        """The lowered module (buffers flattened, loops vectorized): what the cost model reads."""
        return lower_schedule(self.apply(config), self.target)

    def sample(self, rng: np.random.Generator, n: int) -> list[Config]:
        return self.space.sample(rng, n)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.workload.key}, {self.target.kind.name})"



class UncheckedSchedule:
    """A view of a `tvm.s_tir.Schedule` whose primitives skip TVM's Python-side argument checks.

    Those checks took about 45% of applying a config; templates pass well-typed arguments, and
    the C++ side still validates every primitive.
    """

    __slots__ = ("_sch",)

    def __init__(self, sch):
        self._sch = sch

    def __getattr__(self, name: str):
        method = getattr(type(self._sch), name)
        return functools.partial(getattr(method, "__wrapped__", method), self._sch)


def lower_schedule(sch, target):
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
