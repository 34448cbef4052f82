"""The tuning loop and the outside world: measuring, records, the Python API, the command line."""

from .api import SuiteResult, apply_best, tune, tune_suite
from .builder import LocalBuilder
from .measure_result import ErrorKind, MeasureResult
from .measurer import Measurer
from .records import RecordError, RecordStore
from .result import Kernel, TuneResult
from .runner import LocalRunner, RPCRunner
from .session import Session
from .version import __version__

__all__ = ["tune", "tune_suite", "apply_best", "SuiteResult", "Session", "TuneResult", "Kernel", "Measurer",
           "LocalBuilder", "LocalRunner", "RPCRunner", "RecordStore", "RecordError", "ErrorKind",
           "MeasureResult", "__version__"]
