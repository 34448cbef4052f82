"""The tuning loop and the outside world: measuring, records, the Python API, the command line.

Names are imported on first use (PEP 562), so that `autotune --help` and its checks of what a
user typed answer at once instead of after loading TVM, LightGBM and torch.
"""

from importlib import import_module

from .version import __version__

_EXPORTS = {
    "tune": "api", "tune_suite": "api", "apply_best": "api", "SuiteResult": "api",
    "Session": "session", "TuneResult": "result", "Kernel": "result", "Measurer": "measurer",
    "LocalBuilder": "builder", "LocalRunner": "runner", "RPCRunner": "runner",
    "RecordStore": "records", "RecordError": "records", "ErrorKind": "measure_result",
    "MeasureResult": "measure_result", "ReplayRunner": "replay",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'tuner' has no attribute {name!r}")
    value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value
