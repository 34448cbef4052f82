"""Is the CPU quiet? Other processes' core use during a timing, and waiting until it is low.

On a 2-core machine one busy core can slow a 2-thread kernel several times over (TVM's thread
pool waits for its slowest thread), so timings record how disturbed they were.
"""

from __future__ import annotations

import os
import time


def _system_busy() -> float:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    busy_ticks = sum(fields[:8]) - idle
    return busy_ticks / os.sysconf("SC_CLK_TCK")


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class CpuWatch:
    """Context manager: `.other` is the average number of cores used by other processes."""

    def __enter__(self):
        self.b0, self.o0, self.t0 = _system_busy(), _own_cpu(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        wall = max(time.perf_counter() - self.t0, 1e-6)
        self.other = max(0.0, (_system_busy() - self.b0) - (_own_cpu() - self.o0)) / wall
        return False


def wait_quiet(threshold: float, max_wait: float) -> float:
    """Wait until other processes use < threshold cores (sampled over 0.5 s); return the last load."""
    deadline = time.time() + max_wait
    while True:
        with CpuWatch() as w:
            time.sleep(0.5)
        if w.other < threshold or time.time() >= deadline:
            return w.other
