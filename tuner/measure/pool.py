"""Persistent worker processes with per-task time limits enforced by the parent.

A task that hangs (even inside C code, holding the GIL) is killed on time, because the clock
runs in the parent and the worker is a separate process; a worker that crashes (a segfault in
code generation or in a kernel) costs only its own task and is replaced. The time limit starts
when a worker receives the task, so time spent queueing is not counted against it.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Sequence, cast

from search.records.result import shorten
from .worker import read_message, write_message

PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
STARTUP_TIMEOUT_S = 300.0
PRELOAD = "tvm,search,workloads,tuner.measure.tasks"  # what every task needs, imported before the clock starts


@dataclass(frozen=True)
class TaskOutcome:
    """`value` when the task returned; otherwise `failure` is 'timeout', 'crash' or 'error'."""

    value: Any = None
    failure: str | None = None
    message: str = ""
    seconds: float = 0.0


def _exit_reason(code: int) -> str:
    """'killed by SIGSEGV' for a signal, else the exit code: what a user needs to see first."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class _Worker:
    """A `python -m tuner.measure.worker` child; a subprocess, not multiprocessing, so that no script
    is re-imported in the child and pools work from scripts, notebooks and tests alike."""

    def __init__(self, env: dict[str, str]) -> None:
        # Nameless (unlinked at once): the log goes away with the last process holding it, even
        # when this one is SIGKILLed, so no run leaves files behind in the temp folder.
        self.log = tempfile.TemporaryFile(prefix="autotune-worker-", suffix=".log")
        child_env = dict(os.environ, **env)
        # The worker imports what the parent imports: this package first, then the parent's path.
        child_env.setdefault("AUTOTUNE_WORKER_PRELOAD", PRELOAD)
        child_env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(filter(None, [PACKAGE_ROOT, *sys.path])))
        self.process = subprocess.Popen([sys.executable, "-m", "tuner.measure.worker"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=self.log, env=child_env)
        assert self.process.stdin is not None and self.process.stdout is not None  # both are pipes
        self.stdin: IO[bytes] = self.process.stdin  # tasks go in
        self.stdout: IO[bytes] = self.process.stdout  # replies come out
        self.task_index: int | None = None
        self.started = 0.0
        self.log_offset = 0
        self.ready = False

    def wait_ready(self) -> None:
        """Block until the worker has imported its modules; a worker that cannot start is an error."""
        if self.ready:
            return
        readable, _, _ = select.select([self.stdout], [], [], STARTUP_TIMEOUT_S)
        status, _ = self.receive() if readable else ("timeout", None)
        if status != "ready":
            raise RuntimeError(f"a worker process failed to start ({status}): {self.log_tail()[-2000:]}")
        self.ready = True

    def give(self, index: int, function: Callable[[Any], Any], payload: Any) -> None:
        self.log_offset = os.fstat(self.log.fileno()).st_size
        write_message(self.stdin, (function, payload))
        self.task_index, self.started = index, time.monotonic()

    def receive(self) -> tuple[str, Any]:
        try:
            return read_message(self.stdout)
        except (EOFError, OSError, pickle.UnpicklingError):
            return "crash", None

    def log_tail(self) -> str:
        size = os.fstat(self.log.fileno()).st_size
        return os.pread(self.log.fileno(), max(0, size - self.log_offset), self.log_offset).decode(errors="replace")

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=5)
        for stream in (self.stdin, self.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self.log.close()

    def ask_to_stop(self) -> None:
        """Tell an idle worker to exit; `kill` after waits for it (so many exit at once)."""
        try:
            write_message(self.stdin, None)
        except OSError:
            pass

    def wait_stopped(self) -> None:
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.kill()


class WorkerPool:
    """`workers` processes that run module-level functions on picklable payloads.

    `env` is set in each worker before any task, e.g. `TVM_NUM_THREADS` so that kernels run on
    the cores the user has. Use as a context manager, or call `close()`.
    """

    def __init__(self, workers: int, *, env: dict[str, str] | None = None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.env = dict(env or {})
        self.size = workers
        self._workers: list[_Worker] = []

    def start(self) -> None:
        """Start the workers now: their imports then overlap whatever the caller does before the
        first `map`, instead of delaying it."""
        self._ensure_workers()

    def _ensure_workers(self) -> None:
        for worker in [w for w in self._workers if w.process.poll() is not None]:
            worker.kill()  # died between maps: release its pipes and log
            self._workers.remove(worker)
        while len(self._workers) < self.size:
            self._workers.append(_Worker(self.env))

    def map(self, function: Callable[[Any], Any], payloads: Sequence[Any], timeout_s: float,
            on_done: Callable[[int, TaskOutcome], None] | None = None) -> list[TaskOutcome]:
        """Run `function(payload)` for every payload; outcomes come back in order, and each one
        also to `on_done(index, outcome)` as soon as it is known."""
        self._ensure_workers()
        outcomes: list[TaskOutcome | None] = [None] * len(payloads)
        pending = list(range(len(payloads)))[::-1]
        idle = list(self._workers)
        busy: list[_Worker] = []
        while pending or busy:
            while pending and idle:
                worker = idle.pop()
                index = pending.pop()
                worker.wait_ready()
                worker.give(index, function, payloads[index])
                busy.append(worker)
            deadline = min(w.started + timeout_s for w in busy)
            readable, _, _ = select.select([w.stdout for w in busy], [], [],
                                           max(0.0, deadline - time.monotonic()))
            now = time.monotonic()
            for worker in list(busy):
                elapsed = now - worker.started
                if worker.stdout in readable:
                    status, value = worker.receive()
                    if status == "ok":
                        outcome = TaskOutcome(value=value, seconds=elapsed)
                    elif status == "error":
                        outcome = TaskOutcome(failure="error", message=shorten(value), seconds=elapsed)
                    else:  # the pipe broke or carried garbage: the worker is gone or unusable
                        if worker.process.poll() is None:
                            worker.process.kill()
                        code = worker.process.wait(timeout=30)
                        outcome = TaskOutcome(failure="crash", seconds=elapsed, message=shorten(
                            f"worker died ({_exit_reason(code)})\n{worker.log_tail()}"))
                elif elapsed >= timeout_s:
                    outcome = TaskOutcome(failure="timeout", seconds=elapsed, message=shorten(
                        f"killed after {timeout_s:g} s\n{worker.log_tail()}"))
                else:
                    continue
                task = worker.task_index
                assert task is not None  # a busy worker holds a task
                outcomes[task] = outcome
                if on_done is not None:
                    on_done(task, outcome)
                busy.remove(worker)
                if outcome.failure in ("crash", "timeout"):
                    worker.kill()
                    self._workers.remove(worker)
                    worker = _Worker(self.env)
                    self._workers.append(worker)
                worker.task_index = None
                idle.append(worker)
        return cast("list[TaskOutcome]", outcomes)  # all filled: the loop ends when none is pending or busy

    def close(self) -> None:
        """Stop every worker, all at once (each takes a while to exit once TVM is loaded); one still
        busy (after Ctrl-C, say) or still starting is killed: workers hold no state."""
        idle = [w for w in self._workers if w.ready and w.task_index is None]
        for worker in idle:
            worker.ask_to_stop()
        for worker in self._workers:
            if worker in idle:
                worker.wait_stopped()
            else:
                worker.kill()
        self._workers = []

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
