"""`TuneResult` and `Kernel`: what a tuning run hands back, and the compiled best program."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from search import Config, TargetInfo, template_for
from workloads import Workload

TRIAL_COLUMNS = ["round", "config", "predicted_score", "latency_s", "error", "best_latency_s", "best_gflops",
                 "elapsed_s", "build_s", "run_s"]


def trial_table(rows: Sequence[Mapping[str, Any]]) -> Any:
    """A session's trace as a pandas DataFrame, one row per trial in the order results came in."""
    import pandas as pd

    return pd.DataFrame(list(rows), columns=TRIAL_COLUMNS)


ALIGNMENT = 64  # bytes; TVM's buffers (and so its kernels) assume it


def aligned(tensor: Any) -> Any:
    """The tensor itself, or a copy in torch's own (64-byte aligned) memory: from_numpy's is not."""
    return tensor if tensor.data_ptr() % ALIGNMENT == 0 else tensor.clone()


def run_on_target_cores(target: TargetInfo) -> None:
    """Make this process's TVM thread pool as wide as a CPU target's cores. TVM sizes it once, at its
    first use, from TVM_NUM_THREADS, else from half the logical CPUs (one thread on a 2-vCPU host:
    BERT-base's tuned kernels ran 370 ms a pass on it, 200 ms on both cores). A TVM_NUM_THREADS the
    user set is left as it is."""
    if target.is_cuda or "TVM_NUM_THREADS" in os.environ:
        return
    import tvm

    os.environ["TVM_NUM_THREADS"] = str(target.cores)
    threads = tvm.runtime.num_threads()  # starts the pool, if nothing has yet
    if threads < target.cores:
        warnings.warn(f"TVM's thread pool was started before with {threads} thread(s), not the target's "
                      f"{target.cores} cores: set TVM_NUM_THREADS={target.cores} before running TVM code",
                      stacklevel=3)


class Kernel:
    """A compiled program: `kernel(*inputs)` returns the output (numpy in, numpy out; torch in,
    torch out, shared through DLPack without copies).

    For a workload with constant weights, a config that packs its weight takes it packed already
    (`packed_weight.pack(x)`, done once), not as the workload lays it out.
    """

    def __init__(self, workload: Workload, target: Any, config: Config) -> None:
        import tvm

        self.workload, self.config = workload, config
        self.template = template_for(workload, target)
        self.packed_weight = self.template.packed_weight(config) if workload.constant_weights else None
        self.target: TargetInfo = self.template.target
        run_on_target_cores(self.target)
        self.executable = tvm.compile(self.template.apply(config).mod, target=self.target.tvm)

    @property
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        """The shapes the kernel takes: the workload's, a prepacked weight's in its packed layout."""
        shapes = self.workload.input_shapes
        if self.packed_weight is None:
            return tuple(tuple(shape) for shape in shapes)
        return self.packed_weight.packed_shapes(shapes)

    def _device(self) -> Any:
        import tvm

        return tvm.device(self.target.device_type, 0)

    def __call__(self, *inputs: Any) -> Any:
        import tvm

        expected = self.input_shapes
        if len(inputs) != len(expected):
            raise ValueError(f"{self.workload.key} takes {len(expected)} inputs, got {len(inputs)}")
        for i, (x, shape) in enumerate(zip(inputs, expected)):
            if tuple(x.shape) != tuple(shape):
                packed = self.packed_weight is not None and i == self.packed_weight.input
                hint = " (packed: kernel.packed_weight.pack(x))" if packed else ""
                raise ValueError(f"input {i} has shape {tuple(x.shape)}, expected {tuple(shape)}{hint}")
        is_torch = type(inputs[0]).__module__.startswith("torch")
        device = self._device()
        if is_torch:
            import torch

            args = [tvm.runtime.from_dlpack(aligned(x.contiguous())) for x in inputs]
            out = torch.empty(self.workload.output_shapes[0], dtype=getattr(torch, self.workload.dtype),
                              device=inputs[0].device)
            self.executable(*args, tvm.runtime.from_dlpack(out))
            return out
        args = [tvm.runtime.tensor(np.ascontiguousarray(x, dtype=self.workload.dtype), device) for x in inputs]
        out = tvm.runtime.empty(self.workload.output_shapes[0], self.workload.dtype, device)
        self.executable(*args, out)
        return out.numpy()

    def export(self, path: str) -> str:
        """A shared library loadable with `tvm.runtime.load_module` (function `main`)."""
        self.executable.export_library(str(path))
        return str(path)


@dataclass
class TuneResult:
    workload: Workload
    target: TargetInfo
    best_config: Config | None
    best_latency: float  # seconds; inf when nothing succeeded
    trace: Any  # pandas.DataFrame, one row per trial
    errors: dict[str, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.best_config is not None

    @property
    def gflops(self) -> float:
        return self.workload.flops / self.best_latency / 1e9 if self.ok else 0.0

    def compile(self) -> Kernel:
        if self.best_config is None:  # not self.ok
            raise RuntimeError(f"no successful measurement of {self.workload.key}: nothing to compile")
        return Kernel(self.workload, self.target, self.best_config)

    def __repr__(self) -> str:
        return (f"TuneResult({self.workload.key}, best {self.best_latency * 1e3:.4g} ms, {self.gflops:.1f} GFLOPS, "
                f"{len(self.trace)} trials)")
