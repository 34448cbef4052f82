"""The record store: one JSON line per measured candidate, safe to share between processes.

JSON lines rather than pickle or a database: a crash can only cut the last line (which loading skips
with a warning), the file can be read by any tool, and appending under a file lock lets several tuners
share one file.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import stat
import threading
import warnings
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import filelock

from ..config import config_id
from .schema import (ERRORS, READABLE_SCHEMAS, REQUIRED, SCHEMA_VERSION, Record, RecordError, RecordWarning, is_ok,
                     median_cost, schema_ok, shape_problem, upgrade, validate_record)

# Every line starts like this (schema is written first), so a cut first line can be told from a foreign file.
_LINE_START = b'{"schema":'
_GUARD_BYTES = 64  # bytes before the parsed offset kept to notice a file rewritten under us
_WARN_LIMIT = 20  # bad lines warned about one by one per load; the rest are summed up in one warning


def _serialize(record: Mapping[str, Any]) -> bytes:
    """One ASCII line, schema first (see _LINE_START); NaN/inf refused as they are not JSON."""
    validate_record(record)
    try:
        text = json.dumps({"schema": record["schema"], **record}, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise ValueError(f"malformed record: not JSON-serializable ({err})") from None
    return text.encode("ascii") + b"\n"


def _write_all(fd: int, data: bytes) -> None:
    """One os.write in practice; the loop only matters for a short write (disk full, signal)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Parsing allocates many acyclic containers; the cyclic collector would only rescan them (half the time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _looks_cut(line: bytes) -> bool:
    """Whether a line could be the start of one of our lines cut short by a crash."""
    line = line.strip()
    return line[: len(_LINE_START)] == _LINE_START[: len(line)]






class RecordStore:
    """A JSON-lines record file; reads are cached and incremental, appends are locked and fsynced.

    The file is treated as append-only: when it grows, only the new bytes are parsed. Returned record
    dicts are shared with the cache, so callers must not mutate them.
    """

    def __init__(self, path: str | os.PathLike[str], *, lock_timeout: float = 60.0) -> None:
        self.path = Path(path)
        # flock is polled: a short interval keeps contended appends from idling (the default is 50 ms)
        self._lock = filelock.FileLock(f"{self.path}.lock", timeout=lock_timeout, poll_interval=0.002)
        self._mutex = threading.RLock()
        self._reset()

    def __repr__(self) -> str:
        return f"RecordStore({str(self.path)!r})"

    def _reset(self) -> None:
        self._key: tuple[int, int, int, int] | None = None  # (dev, ino, mtime_ns, size) the cache reflects
        self._records: list[Record] = []  # from complete (newline-terminated) lines
        self._all: list[Record] = self._records  # plus a record on an unterminated last line
        self._offset = 0  # bytes parsed: up to the end of the last complete line
        self._lineno = 0  # complete lines parsed
        self._guard = b""  # the bytes just before _offset
        self._warned_tail: int | None = None  # line number of a cut last line already warned about
        self._measured: dict[tuple[str, str], tuple[int, set[str]]] = {}  # pair -> (records seen, ids)

    # ---------------------------------------------------------------------------------------- loading

    def _stat(self) -> os.stat_result | None:
        """The file's stat, None when absent; anything but a regular file is refused up front."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        if stat.S_ISDIR(st.st_mode):
            raise RecordError(f"{self.path}: is a directory, not a record file")
        if not stat.S_ISREG(st.st_mode):
            raise RecordError(f"{self.path}: is not a regular file, not a record file")
        return st

    def _load(self) -> list[Record]:
        """The records of the file, reading only what changed since the last call."""
        with self._mutex:
            st = self._stat()
            if st is None:
                self._reset()
                return self._all
            if (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size) == self._key:
                return self._all
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if not self._continues(f, st):
                    self._reset()
                f.seek(self._offset)
                data = f.read(max(st.st_size - self._offset, 0))
            self._consume(data, (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))
            return self._all

    def _continues(self, f: Any, st: os.stat_result) -> bool:
        """Whether the file is the one cached, grown at most: then parsing can resume at _offset."""
        if self._key is None or (st.st_dev, st.st_ino) != self._key[:2] or st.st_size < self._offset:
            return False
        f.seek(self._offset - len(self._guard))
        return f.read(len(self._guard)) == self._guard

    def _consume(self, data: bytes, key: tuple[int, int, int, int]) -> None:
        """Parse new bytes; state is only updated once nothing can raise, so an error leaves no half-load."""
        consumed = data.rfind(b"\n") + 1  # complete lines; after them a cut line (or one being written)
        body, tail = data[:consumed], data[consumed:]
        try:
            lines: list[str] | list[bytes] = body.decode("utf-8").split("\n")  # str parses faster than bytes
        except UnicodeDecodeError:
            lines = body.split(b"\n")  # then the bad lines are found one by one
        lines.pop()  # the empty piece after the last newline
        fresh: list[Record] = []
        bad: list[tuple[int, str]] = []
        with _gc_paused():
            self._parse_lines(lines, self._lineno + 1, fresh, bad)
        tail_lineno = self._lineno + len(lines) + 1
        tail_records: list[Record] = []
        tail_bad: list[tuple[int, str]] = []
        self._parse_lines([tail], tail_lineno, tail_records, tail_bad)

        if not self._records and not fresh and not tail_records and (bad or tail_bad):
            cut_first_line = not bad and _looks_cut(tail)
            if not cut_first_line:
                lineno, problem = (bad + tail_bad)[0]
                raise RecordError(f"{self.path}: not a record file (no line is a record; line {lineno}: {problem})")

        to_warn = [(n, p) for n, p in bad if n != self._warned_tail]
        if tail_bad and tail_lineno != self._warned_tail:
            to_warn.append((tail_lineno, "truncated last line (cut by a crash, or being written)"))
        self._warn(to_warn)

        self._guard = (self._guard + body)[-_GUARD_BYTES:]
        self._offset += consumed
        self._lineno += len(lines)
        self._records.extend(fresh)
        self._all = self._records + tail_records if tail_records else self._records
        self._warned_tail = tail_lineno if tail_bad else self._warned_tail
        self._key = key

    def _parse_lines(self, lines: Sequence[str | bytes], first_lineno: int, good: list[Record],
                     bad: list[tuple[int, str]]) -> None:
        """json.loads per line, so damage stays within its line; the common case is checked inline (speed)."""
        loads, keep, required, errors = json.loads, good.append, REQUIRED, ERRORS
        for lineno, line in enumerate(lines, first_lineno):
            try:
                obj = loads(line)
            except (ValueError, RecursionError):  # bad JSON, bad UTF-8, absurd nesting; or a blank line
                if line.strip():
                    bad.append((lineno, "unparseable line (truncated or garbage)"))
                continue
            if (type(obj) is dict and required <= obj.keys() and type(obj["schema"]) is int
                    and obj["schema"] == SCHEMA_VERSION and type(obj["workload"]) is str
                    and type(obj["target"]) is str and type(obj["config"]) is dict and type(obj["costs"]) is list
                    and type(obj["error"]) is str and obj["error"] in errors):
                keep(obj)
                continue
            if not schema_ok(obj):
                raise RecordError(f"{self.path}: record file of schema {obj['schema']!r}, expected one of "
                                  f"{sorted(READABLE_SCHEMAS)} (line {lineno})")
            problem = shape_problem(upgrade(obj))
            if problem is None:
                keep(obj)
            else:
                bad.append((lineno, problem))

    def _warn(self, bad: list[tuple[int, str]]) -> None:
        for lineno, problem in bad[:_WARN_LIMIT]:
            warnings.warn(f"{self.path}:{lineno}: skipped {problem}", RecordWarning, stacklevel=5)
        if len(bad) > _WARN_LIMIT:
            rest = bad[_WARN_LIMIT:]
            warnings.warn(f"{self.path}:{rest[0][0]}: skipped {len(rest)} more bad lines"
                          f" (up to line {rest[-1][0]})", RecordWarning, stacklevel=5)

    # ---------------------------------------------------------------------------------------- writing

    def append(self, record: Mapping[str, Any]) -> None:
        """Append one record durably (fsynced before returning)."""
        self.extend([record])

    def extend(self, records: Iterable[Mapping[str, Any]]) -> int:
        """Append records with one locked O_APPEND write, so concurrent writers never interleave lines."""
        lines = [_serialize(r) for r in records]  # all validated before anything is written
        if not lines:
            return 0
        payload = b"".join(lines)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock:
            self._load()  # refuses a foreign file (CSV, other schema) before we write into it
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                size = os.fstat(fd).st_size
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    payload = b"\n" + payload  # end a line cut by a crash so ours is not glued to it
                _write_all(fd, payload)
                os.fsync(fd)
            finally:
                os.close(fd)
        return len(lines)

    # ---------------------------------------------------------------------------------------- queries

    def records(self) -> list[Record]:
        """All valid records in file order (a new list; the dicts are shared, do not mutate them)."""
        return list(self._load())

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records())

    def __len__(self) -> int:
        return len(self._load())

    def select(self, workload: str | None = None, target: str | None = None, ok_only: bool = False) -> list[Record]:
        """Records matching the given workload and/or target, optionally only the successful ones."""
        return [r for r in self._load()
                if (workload is None or r["workload"] == workload)
                and (target is None or r["target"] == target)
                and (not ok_only or is_ok(r))]

    def best(self, workload: str, target: str) -> Record | None:
        """The successful record with the lowest median cost (the earliest one on a tie)."""
        return min(self.select(workload, target, ok_only=True), key=median_cost, default=None)

    def measured(self, workload: str, target: str) -> set[str]:
        """config_ids already measured, failures included, so a resumed run never repeats one.

        Kept per pair and extended with new records only: a tuner asks this every round.
        """
        with self._mutex:
            everything = self._load()
            seen, ids = self._measured.get((workload, target), (0, set()))
            for r in self._records[seen:]:
                if r["workload"] == workload and r["target"] == target:
                    ids.add(config_id(r["config"]))
            self._measured[(workload, target)] = (len(self._records), ids)
            return ids.union(config_id(r["config"]) for r in everything[len(self._records):]
                             if r["workload"] == workload and r["target"] == target)

    def workloads(self) -> set[str]:
        return {r["workload"] for r in self._load()}

    def targets(self) -> set[str]:
        return {r["target"] for r in self._load()}

    def check_compatible(self, workload: str, target: str) -> set[str]:
        """Refuse to mix targets in one file; return the other workloads sharing it (suites may share).

        Costs measured on another target are not comparable, and resuming from them would skip configs.
        """
        targets = self.targets()
        if targets and target not in targets:
            raise RecordError(f"{self.path} holds records for target(s) {', '.join(sorted(targets))}, not {target};"
                              " use another records file")
        return self.workloads() - {workload}


def load_records(path: str | os.PathLike[str]) -> list[Record]:
    """Every valid record of a file: a record file (.jsonl), or a gzip-compressed one (.jsonl.gz,
    read-only: how the datasets are committed), checked line by line alike."""
    path = Path(path)
    if path.suffix != ".gz":
        return RecordStore(path).records()
    import gzip

    reader = RecordStore(path)  # its line parser, not its cache: a compressed file is read whole
    good: list[Record] = []
    bad: list[tuple[int, str]] = []
    with gzip.open(path, "rb") as f:
        reader._parse_lines(f.read().splitlines(), 1, good, bad)
    reader._warn(bad)
    return good
