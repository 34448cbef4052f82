"""The record format: one JSON object per measured candidate, versioned, validated before it is written.

Records are plain dicts so that keys added by callers (round, predicted, ...) survive a round trip.
Schema 2 added `host`: the facts of the machine that measured the record (`TargetInfo.host_facts`,
null for a GPU). Schema 1 files are still read; their records get `host` null on loading.
"""

from __future__ import annotations

import json
import operator
import time
from collections.abc import Iterable, Mapping
from typing import Any, Union

from ..config import config_id
from ..version import __version__
from .result import ErrorKind, MeasureResult, median_latency

SCHEMA_VERSION = 2
READABLE_SCHEMAS = frozenset({1, 2})

Record = dict[str, Any]
KnobValue = Union[int, str, bool, list[int]]

REQUIRED_KEYS: tuple[str, ...] = (
    "schema", "workload", "target", "config", "costs", "error", "message", "timestamp", "version", "host",
)
REQUIRED = frozenset(REQUIRED_KEYS)
ERRORS = frozenset(kind.value for kind in ErrorKind)


class RecordError(ValueError):
    """The file is not a record file of this schema (or holds records for another target)."""


class RecordWarning(UserWarning):
    """A line of a record file was skipped; a category of its own so that callers can filter it."""




def _as_int(value: Any) -> int:
    """An exact integer (numpy ints pass); bools and floats are refused so knob types stay stable."""
    if isinstance(value, bool):
        raise TypeError
    return operator.index(value)  # TypeError for anything without __index__


def normalize_config(config: Mapping[str, Any]) -> dict[str, KnobValue]:
    """Plain JSON types for a config (tuples to lists, numpy ints to int) so it round-trips unchanged."""
    out: dict[str, KnobValue] = {}
    for knob, value in config.items():
        if not isinstance(knob, str):
            raise ValueError(f"config knob name {knob!r} is not a string")
        try:
            if isinstance(value, (bool, str)):
                out[knob] = value
            elif isinstance(value, (list, tuple)):
                out[knob] = [_as_int(v) for v in value]
            else:
                out[knob] = _as_int(value)
        except TypeError:
            raise ValueError(f"config knob {knob!r}: {value!r} is not an int, str, bool or list of ints") from None
    return out


def make_record(workload_key: str, target_key: str, config: Mapping[str, Any], result: MeasureResult, *,
                host: Mapping[str, Any] | None = None, **extra: Any) -> Record:
    """A record of one measurement on the machine `host` describes (`TargetInfo.host_facts`); `extra`
    keys (round, predicted, ...) are stored alongside."""
    clash = REQUIRED & extra.keys()
    if clash:
        raise ValueError(f"extra keys {sorted(clash)} would overwrite required record keys")
    record: Record = {
        "schema": SCHEMA_VERSION,
        "workload": workload_key,
        "target": target_key,
        "config": normalize_config(config),
        "costs": [float(c) for c in result.costs],
        "error": ErrorKind(result.error).value,
        "message": result.message,
        "timestamp": time.time(),
        "version": __version__,
        "host": dict(host) if host is not None else None,
        **extra,
    }
    validate_record(record)
    return record


def is_ok(record: Mapping[str, Any]) -> bool:
    """A successful measurement: no error and at least one cost."""
    return record["error"] == ErrorKind.NONE.value and bool(record["costs"])


def median_cost(record: Mapping[str, Any]) -> float:
    """A record's latency in seconds, the same statistic as `MeasureResult.latency`; infinity when failed."""
    return median_latency(record["costs"]) if is_ok(record) else float("inf")


def fastest_per_config(records: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """One record per (workload, target, config), in first-seen order: the fastest successful one,
    or the last if none succeeded. A busy host only ever slows a kernel down, so of timings taken
    at different moments the fastest is the closest to the kernel's own speed."""
    chosen: dict[tuple[str, str, str], Mapping[str, Any]] = {}
    for record in records:
        key = (record["workload"], record["target"], config_id(record["config"]))
        held = chosen.get(key)
        if held is None or median_cost(record) < median_cost(held) or not (is_ok(held) or is_ok(record)):
            chosen[key] = record
    return list(chosen.values())


def upgrade(obj: Any) -> Any:
    """A record of an older schema as this schema reads it (in place): schema 1 had no `host`."""
    if type(obj) is dict and obj.get("schema") == 1:
        obj.setdefault("host", None)
    return obj


def shape_problem(obj: Any) -> str | None:
    """Why a parsed line is not a record, checking only what loading relies on (kept cheap: 100k lines)."""
    if type(obj) is not dict:
        return "line is not a JSON object"
    if not REQUIRED <= obj.keys():
        return f"record lacks key(s) {', '.join(k for k in REQUIRED_KEYS if k not in obj)}"
    if type(obj["workload"]) is not str or type(obj["target"]) is not str:
        return "record workload/target is not a string"
    if type(obj["config"]) is not dict or type(obj["costs"]) is not list:
        return "record config is not an object or costs not a list"
    if type(obj["error"]) is not str or obj["error"] not in ERRORS:
        return f"record has unknown error kind {obj['error']!r}"
    if obj["host"] is not None and type(obj["host"]) is not dict:
        return "record host is not an object or null"
    return None


def schema_ok(obj: Any) -> bool:
    """A schema this code reads (a line without one is judged by its shape instead)."""
    schema = obj.get("schema", SCHEMA_VERSION) if type(obj) is dict else SCHEMA_VERSION
    return type(schema) is int and schema in READABLE_SCHEMAS


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def validate_record(record: Mapping[str, Any]) -> None:
    """Raise ValueError for a record that must not be written (the checks loading skips, too)."""
    if not isinstance(record, Mapping):
        raise ValueError(f"a record is a mapping, not {type(record).__name__}")
    record = dict(record)
    problem = shape_problem(record)
    if problem is None and not schema_ok(record):
        problem = f"record schema {record['schema']!r}, expected one of {sorted(READABLE_SCHEMAS)}"
    if problem is None:
        if not record["workload"] or not record["target"]:
            problem = "record workload/target is empty"
        elif not all(_is_number(c) for c in record["costs"]):
            problem = "record costs are not all numbers"
        elif not isinstance(record["message"], str) or not isinstance(record["version"], str):
            problem = "record message/version is not a string"
        elif not _is_number(record["timestamp"]):
            problem = "record timestamp is not a number"
        else:
            normalize_config(record["config"])  # raises for a bad knob value
    if problem is not None:
        raise ValueError(f"malformed record: {problem}")
