"""What was measured: the result of one measurement, the record format, and the record store.

The bottom of the house after the workloads: the cost model learns from records and the tuner
writes them, so both import this and it imports neither.
"""

from .result import ErrorKind, MeasureResult, median_latency
from .schema import (SCHEMA_VERSION, Record, RecordError, RecordWarning, fastest_per_config, is_ok, make_record,
                     median_cost, normalize_config, validate_record)
from .store import RecordStore, load_records

__all__ = ["ErrorKind", "MeasureResult", "median_latency", "SCHEMA_VERSION", "Record", "RecordError",
           "RecordWarning", "fastest_per_config", "is_ok", "make_record", "median_cost", "normalize_config",
           "validate_record", "RecordStore", "load_records"]
