"""`tune_model`: a PyTorch model's matrix products and convolutions, captured as a suite
(`workloads.from_torch`) and tuned with one budget and one cost model (`tune_suite`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from workloads import ModelSuite, from_torch

from .api import SuiteResult, resolve_for, tune_suite


@dataclass
class ModelResult:
    """What tuning a model found: the captured suite (coverage, ops left to torch) and, per layer,
    the best kernel measured."""

    suite: ModelSuite
    tuned: SuiteResult
    model: Any  # the torch.nn.Module tuned
    example_inputs: tuple[Any, ...]

    @property
    def estimated_latency(self) -> float:
        """Seconds the captured layers take with their best kernels (weight x best latency)."""
        return self.tuned.weighted_latency

    def module(self) -> Any:
        """The model with its tuned layers running their best kernels (`tuner.optimize`)."""
        from .torch_kernels import optimize

        best = {key: result.best_config for key, result in self.tuned.results.items() if result.best_config}
        target = next(iter(self.tuned.results.values())).target
        return optimize(self.model, self.example_inputs, best, target)

    def table(self) -> Any:
        """A pandas DataFrame, one row per distinct layer: weight, trials, best latency, GFLOPS."""
        return self.tuned.table()


def tune_model(model: Any, example_inputs: Sequence[Any], /, target: Any = "llvm", *, trials: int = 2000,
               records: str | None = None, seed: int = 0, time_budget_s: float | None = None,
               progress: bool = True, name: str | None = None, **options: Any) -> ModelResult:
    """Capture `model` (a `torch.nn.Module`, run in eval mode) on `example_inputs` (one input set,
    or a list of them: see `workloads.input_sets`) and tune its layers, resumable from `records`.
    `options` go to `tune_suite` (strategy, batch_size, measurer, and `model`, the cost model, as
    `tune_suite` names it: the torch model comes first, by position). With the progress bar on this
    machine's CPU, torch's version of each layer is timed first, so the bar shows the gain so far
    (not with a measurer of its own target, e.g. a cluster: torch here says nothing about there)."""
    suite = from_torch(model, example_inputs, name=name)
    if not suite.entries:
        raise ValueError(f"no layer of {type(model).__name__} can be tuned; all stays in torch: "
                         + ", ".join(suite.left_to_torch))
    resolved = resolve_for(target, options.get("measurer"))
    timed_here = getattr(options.get("measurer"), "target", None) is None
    if progress and timed_here and not resolved.is_cuda and "baseline" not in options:
        from .analysis import torch_layer_latency

        options["baseline"] = torch_layer_latency(suite)  # the progress bar's gain over torch
    tuned = tune_suite(suite, resolved, trials=trials, records=records, seed=seed, time_budget_s=time_budget_s,
                       progress=progress, **options)
    return ModelResult(suite, tuned, model, tuple(example_inputs))
