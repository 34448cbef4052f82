"""The tuning loop and the outside world: sessions, the one loop, measuring, the Python API, the CLI.

Names are imported on first use (PEP 562), so that `autotune --help` and its checks of what a
user typed answer at once instead of after loading TVM, LightGBM and torch.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from search.version import __version__

if TYPE_CHECKING:
    from search.records import ErrorKind, MeasureResult, RecordError, RecordStore

    from .api import SuiteResult, apply_best, tune, tune_suite
    from .loop import run
    from .model import ModelResult, tune_model
    from .torch_kernels import OptimizedModule, load_optimized, optimize, save_optimized
    from .measure import Harness, LocalBuilder, LocalRunner, Measurer, ReplayMeasurer, RPCRunner
    from .measure.cluster import RayMeasurer
    from .measure.machine import MachineFacts, machine_facts, with_machine
    from .result import Kernel, TuneResult
    from .session import Session

_EXPORTS = {
    "tune": ".api", "tune_suite": ".api", "apply_best": ".api", "SuiteResult": ".api", "run": ".loop",
    "tune_model": ".model", "ModelResult": ".model", "optimize": ".torch_kernels", "OptimizedModule": ".torch_kernels",
    "save_optimized": ".torch_kernels", "load_optimized": ".torch_kernels",
    "Session": ".session", "TuneResult": ".result", "Kernel": ".result", "Measurer": ".measure",
    "Harness": ".measure", "LocalBuilder": ".measure", "LocalRunner": ".measure", "RPCRunner": ".measure",
    "ReplayMeasurer": ".measure", "RayMeasurer": ".measure.cluster", "machine_facts": ".measure.machine", "with_machine": ".measure.machine",
    "MachineFacts": ".measure.machine", "RecordStore": "search.records", "RecordError": "search.records",
    "ErrorKind": "search.records", "MeasureResult": "search.records",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tuner' has no attribute {name!r}")
    value = getattr(import_module(_EXPORTS[name], __name__), name)
    globals()[name] = value
    return value
