"""What worker processes do: build one candidate into a library, run and time one library.

These are module-level functions on plain payloads, so a spawned worker can import them, and
tests can swap in their own (a build that hangs, a kernel that crashes) through the same pool.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from search import Config, PackedWeight, Template, TargetInfo, template_for
from workloads import Workload


@dataclass(frozen=True)
class BuildTask:
    workload: Workload
    target: TargetInfo
    config: dict[str, Any]
    out_dir: str


@dataclass(frozen=True)
class RunTask:
    workload: Workload
    target: TargetInfo
    library: str  # path of the exported library
    device: tuple[Any, ...]  # ("local", "cpu"|"cuda") or ("rpc", host, port, key, session_timeout)
    number: int
    repeat: int
    min_repeat_ms: int
    flush_cache: bool
    seed: int = 0
    packed_weight: PackedWeight | None = None  # the constant weight the kernel takes laid out so, once


@lru_cache(maxsize=16)
def template(workload: Workload, target: TargetInfo) -> Template:
    return template_for(workload, target)


def build(task: BuildTask) -> str:
    """Apply the config, compile, export a loadable library; returns its path."""
    import tvm

    tpl = template(task.workload, task.target)
    sch = tpl.apply(Config.from_json(task.config))
    executable = tvm.compile(sch.mod, target=tpl.target.tvm)
    if tpl.target.is_cuda and not executable.mod.imports:
        raise RuntimeError("no CUDA kernel was generated (unbound loops)")
    os.makedirs(task.out_dir, exist_ok=True)
    path = os.path.join(task.out_dir, f"candidate-{os.getpid()}-{time.monotonic_ns()}.so")
    executable.export_library(path)
    return path


@lru_cache(maxsize=4)
def checked_inputs(workload: Workload, seed: int) -> tuple[list[np.ndarray], np.ndarray]:
    """Random inputs and the reference output, computed once per workload in each worker."""
    inputs = workload.random_inputs(seed)
    return inputs, workload.reference(*inputs)


def open_device(spec: tuple[Any, ...], device_type: str) -> tuple[Any, Callable[[str], Any]]:
    """The device to run on and a function that loads a library onto it (local or over RPC)."""
    import tvm

    if spec[0] == "local":
        device = tvm.device(device_type, 0)
        if not device.exist:
            raise RuntimeError(f"no {device_type} device on this machine")
        return device, tvm.runtime.load_module
    from tvm import rpc

    _, host, port, key, session_timeout = spec
    session = rpc.connect_tracker(host, port).request(key, priority=1, session_timeout=session_timeout)

    def load(path: str) -> Any:
        session.upload(path)
        return session.load_module(os.path.basename(path))

    return session.device(device_type, 0), load


def run(task: RunTask) -> dict[str, Any]:
    """Check the library's output against the reference, then time it: {'costs'} or {'wrong'}."""
    import tvm

    workload = task.workload
    device, load = open_device(task.device, task.target.device_type)
    module = load(task.library)
    inputs, expected = checked_inputs(task.workload, task.seed)
    if task.packed_weight is not None:  # packed here, outside the timed calls, as a model's layer packs it
        inputs = task.packed_weight.packed_inputs(inputs)
    args = [tvm.runtime.tensor(x, device) for x in inputs]
    args += [tvm.runtime.empty(shape, workload.dtype, device) for shape in workload.output_shapes]
    module["main"](*args)
    device.sync()
    got = args[-1].numpy()
    rtol, atol = workload.tolerance
    if not np.allclose(got, expected, rtol=rtol, atol=atol):
        error = np.abs(got.astype(np.float64) - expected.astype(np.float64))
        return {"wrong": f"max abs error {float(error.max()):.3g} (rtol {rtol:g}, atol {atol:.3g}), "
                         f"{int((error > atol + rtol * np.abs(expected)).sum())} of {error.size} elements off"}
    flush = "cache_flush_cpu_non_first_arg" if task.flush_cache and not task.target.is_cuda else ""
    evaluator = module.time_evaluator("main", device, number=task.number, repeat=task.repeat,
                                      min_repeat_ms=task.min_repeat_ms, f_preproc=flush)
    return {"costs": list(evaluator(*args).results)}
