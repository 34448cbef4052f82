"""`template_for`: the template of a workload on a target."""

from __future__ import annotations

from typing import Any

from workloads import Workload

from .cpu_template import CPUTemplate
from .targets import resolve_target
from .template import Template


def template_for(workload: Workload, target: Any) -> Template:
    """The schedule template for `workload` on `target` (a `TargetInfo`, or anything
    `resolve_target` takes: 'llvm', 'cuda', a dict or a tvm Target).

    On CUDA, float16 matrix products that tensor cores can take get the tensor-core template.
    """
    if not isinstance(workload, Workload):
        raise TypeError(f"workload must be a workloads.Workload, got {type(workload).__name__}")
    resolved = resolve_target(target)
    if resolved.is_cuda:
        from .tensorcore_template import TensorCoreTemplate, supports

        if supports(workload, resolved):
            return TensorCoreTemplate(workload, resolved)
        from .cuda_template import CUDATemplate

        return CUDATemplate(workload, resolved)
    return CPUTemplate(workload, resolved)
