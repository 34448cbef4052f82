"""`LocalBuilder`: compiles candidates into loadable libraries in parallel, isolated workers."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from typing import Callable, Sequence

from search import Config

from . import tasks
from .measure_result import ErrorKind
from .pool import TaskOutcome, WorkerPool


@dataclass(frozen=True)
class BuildResult:
    library: str | None
    error: ErrorKind = ErrorKind.NONE
    message: str = ""
    seconds: float = 0.0


def outcome_to_build(outcome: TaskOutcome) -> BuildResult:
    if outcome.failure is None:
        return BuildResult(outcome.value, seconds=outcome.seconds)
    kind = ErrorKind.BUILD_TIMEOUT if outcome.failure == "timeout" else ErrorKind.BUILD_ERROR
    return BuildResult(None, kind, outcome.message, outcome.seconds)


class LocalBuilder:
    """One worker per core by default, each build limited to `timeout_s` (default 30 s).

    `build_fn` is a module-level function taking a `tasks.BuildTask` and returning a library
    path; the default applies the config, compiles with TVM and calls `export_library`.
    """

    def __init__(self, *, workers: int | None = None, timeout_s: float = 30.0,
                 build_fn: Callable[[tasks.BuildTask], str] = tasks.build):
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.workers = workers or len(os.sched_getaffinity(0))
        self.timeout_s = timeout_s
        self.build_fn = build_fn
        self.out_dir = tempfile.mkdtemp(prefix="autotune-build-")
        self._pool = WorkerPool(self.workers, env={"TVM_NUM_THREADS": "1"})

    def build(self, workload_key: str, target_json: str, configs: Sequence[Config]) -> list[BuildResult]:
        payloads = [tasks.BuildTask(workload_key, target_json, c.to_json(), self.out_dir) for c in configs]
        return [outcome_to_build(o) for o in self._pool.map(self.build_fn, payloads, self.timeout_s)]

    def close(self) -> None:
        self._pool.close()
        shutil.rmtree(self.out_dir, ignore_errors=True)
