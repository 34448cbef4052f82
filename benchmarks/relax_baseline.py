"""TVM's own end-to-end flow, the baseline a whole model is compared against: torch.export, the Relax
importer, Relax's fusion, MetaSchedule tuning every fused kernel, and the Relax VM.

    from benchmarks.relax_baseline import relax_metaschedule
    run = relax_metaschedule(model, inputs, resolve_target("llvm"), trials_per_task=64, work_dir="relax-resnet50")
    outputs = run.run()
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks.common import BUILDER_TIMEOUT_S, CORES, metaschedule_builder

if TYPE_CHECKING:
    import torch
    import tvm

    from search import TargetInfo


@dataclass
class RelaxRun:
    """A model compiled by Relax after MetaSchedule's tuning, and what the tuning cost."""

    run: Callable[[], Any]  # the model on its example inputs (already on the device); torch tensors out
    tune_s: float  # seconds from the import to the compiled model: tuning and compiling
    tasks: int  # kernels MetaSchedule extracted
    trials: int  # candidates MetaSchedule measured, over all tasks


def import_model(model: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...]) -> tvm.IRModule:
    """The model as Relax with its weights as constants, so folding and MetaSchedule see the real kernels."""
    import torch
    import tvm
    from tvm import relax
    from tvm.relax.frontend.torch import from_exported_program

    with torch.no_grad():
        exported = torch.export.export(model.eval(), example_inputs)
    mod = from_exported_program(exported, keep_params_as_input=False, unwrap_unit_return_tuple=True)
    return tvm.transform.Sequential([relax.transform.DecomposeOpsForInference(),
                                     relax.transform.CanonicalizeBindings()])(mod)


def fuse(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """`mod` fused by `compile_relax`'s own passes, so the tasks tuned are the kernels it later looks up."""
    import tvm
    from tvm import relax

    passes = [*relax.pipeline.library_dispatch_passes(target), relax.transform.LegalizeOps(),
              relax.transform.AnnotateTIROpPattern(), relax.transform.FoldConstant(), relax.transform.FuseOps(),
              relax.transform.FuseTIR()]
    with target, tvm.transform.PassContext(opt_level=3):
        return tvm.transform.Sequential(passes)(mod)


def _trial_counter(counts: list[int]) -> Any:
    """A measure callback adding each measured batch to `counts[0]`, so a run reports the trials it spent."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms

    @derived_object
    class TrialCounter(ms.measure_callback.PyMeasureCallback):
        def apply(self, task_scheduler: Any, task_id: int, measure_candidates: Any, builder_results: Any,
                  runner_results: Any) -> None:
            counts[0] += len(runner_results)

    return TrialCounter()


def _to_torch(value: Any) -> Any:
    """A VM result as torch tensors without a copy, so the timed call does only the model's work."""
    import torch

    if hasattr(value, "__dlpack__"):
        return torch.from_dlpack(value)
    return tuple(_to_torch(v) for v in value)


def relax_metaschedule(model: torch.nn.Module, example_inputs: tuple[torch.Tensor, ...], target: TargetInfo,
                       trials_per_task: int, work_dir: str, *, builder_timeout_s: float = BUILDER_TIMEOUT_S,
                       seed: int = 0) -> RelaxRun:
    """TVM's own flow, `trials_per_task` MetaSchedule trials per task (0: none): what a model tuner must beat."""
    # `work_dir` holds MetaSchedule's logs and JSON database; records already there seed its search,
    # so a run that must spend exactly its budget gets a fresh one.
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    logging.getLogger("tvm.s_tir.meta_schedule").setLevel(logging.WARNING)
    started = time.monotonic()
    mod = import_model(model, example_inputs)
    extracted = ms.relax_integration.extract_tasks(fuse(mod, target.tvm), target.tvm)
    counts = [0]
    if trials_per_task > 0 and extracted:
        print(f"relax: tuning {len(extracted)} tasks, {trials_per_task} trials each", flush=True)
        Path(work_dir).mkdir(parents=True, exist_ok=True)
        contexts, weights = ms.relax_integration.extracted_tasks_to_tune_contexts(
            extracted, work_dir, num_threads=CORES, seed=seed)
        runner = ms.runner.LocalRunner(evaluator_config=ms.runner.EvaluatorConfig(
            number=1, repeat=3, min_repeat_ms=20, enable_cpu_cache_flush=not target.is_cuda))
        database = ms.tune_tasks(
            tasks=contexts, task_weights=weights, work_dir=work_dir,
            max_trials_global=trials_per_task * len(contexts), max_trials_per_task=trials_per_task,
            num_trials_per_iter=min(64, trials_per_task),
            builder=metaschedule_builder(fast=not target.is_cuda, timeout_s=builder_timeout_s), runner=runner,
            measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), _trial_counter(counts)])
    else:
        database = ms.database.MemoryDatabase()
    executable = ms.relax_integration.compile_relax(database, mod, target.tvm, params=None)
    device = tvm.device(target.device_type, 0)
    vm = relax.VirtualMachine(executable, device)
    args = [tvm.runtime.tensor(x.detach().cpu().numpy(), device) for x in example_inputs]
    main = vm["main"]
    tune_s = time.monotonic() - started
    print(f"relax: {len(extracted)} tasks, {counts[0]} trials, {tune_s:.0f} s to tune and compile", flush=True)
    return RelaxRun(run=lambda: _to_torch(main(*args)), tune_s=tune_s, tasks=len(extracted), trials=counts[0])
