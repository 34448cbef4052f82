"""`LocalBuilder`: compiles candidates into loadable libraries in parallel, isolated workers."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from search import Config, TargetInfo
from search.records import ErrorKind
from workloads import Workload

from . import tasks
from .pool import TaskOutcome, WorkerPool


BUILD_DIR_PREFIX = "autotune-build-"
STALE_AFTER_S = 3600.0


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        pass
    return True


def remove_stale_build_dirs() -> None:
    """Remove the build folders of killed runs: a SIGKILLed tuner cannot clean up after itself.

    A folder is stale when the process named in it is gone and it has not changed for an hour
    (the second test guards against a live process in another PID namespace sharing the folder).
    """
    now = time.time()
    for path in Path(tempfile.gettempdir()).glob(f"{BUILD_DIR_PREFIX}*-*"):
        pid = path.name[len(BUILD_DIR_PREFIX):].split("-")[0]
        try:
            stale = pid.isdigit() and not _process_exists(int(pid)) and now - path.stat().st_mtime > STALE_AFTER_S
        except OSError:  # removed meanwhile by another run
            continue
        if stale:
            shutil.rmtree(path, ignore_errors=True)


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
                 build_fn: Callable[[tasks.BuildTask], str] = tasks.build) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.workers = workers or len(os.sched_getaffinity(0))
        self.timeout_s = timeout_s
        self.build_fn = build_fn
        remove_stale_build_dirs()
        self.out_dir = tempfile.mkdtemp(prefix=f"{BUILD_DIR_PREFIX}{os.getpid()}-")
        self._pool = WorkerPool(self.workers, env={"TVM_NUM_THREADS": "1"})
        self._pool.start()

    def build(self, workload: Workload, target: TargetInfo, configs: Sequence[Config]) -> list[BuildResult]:
        payloads = [tasks.BuildTask(workload, target, c.to_json(), self.out_dir) for c in configs]
        return [outcome_to_build(o) for o in self._pool.map(self.build_fn, payloads, self.timeout_s)]

    def close(self) -> None:
        self._pool.close()
        shutil.rmtree(self.out_dir, ignore_errors=True)
