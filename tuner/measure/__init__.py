"""Measuring candidates: isolated worker processes build and time them, on this machine, over
TVM RPC or on the machines of a Ray cluster (`cluster`, imported on use: Ray is optional), or a
record file answers instead (replay). Everything here speaks `Workload`,
`TargetInfo` and `Config` objects and returns `MeasureResult`s; nothing here knows the loop."""

from .builder import LocalBuilder
from .measurer import Harness, Measurer, OnResult
from .replay import ReplayMeasurer
from .runner import LocalRunner, RPCRunner, Runner

__all__ = ["LocalBuilder", "Harness", "Measurer", "OnResult", "ReplayMeasurer", "LocalRunner", "RPCRunner", "Runner"]
