"""The machine's limits, measured once per host: the peak FP32 FLOP/s of its vector units (a
TVM-built kernel of independent FMA chains, on all cores and on one), its sustained memory
bandwidth (a STREAM triad over arrays four times the last-level cache) and its cache sizes (from
the OS). They are cached under the user's cache directory, keyed by CPU model, ISA and cores, so a
host is measured again only when its CPU differs.

    python -m tuner.measure.machine probe peak triad   # probes in a process of their own (TVM_NUM_THREADS)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

from search import TargetInfo, resolve_target
from search.targets import cpu_model

PROBE_TIMEOUT_S = 120.0
FMA_CHAINS = 12  # independent accumulators per thread: more than FMA latency x pipes, so none waits
FMA_STEPS = 200_000


@dataclasses.dataclass(frozen=True)
class MachineFacts:
    """What one host's CPU can do, measured, beside what its datasheet says."""

    cpu_model: str
    mcpu: str
    cores: int
    isa: tuple[str, ...]
    vector_bits: int
    caches: dict[str, int]
    peak_gflops: float  # FMA-bound kernel, all cores
    peak_gflops_1core: float
    bandwidth_gbs: float  # STREAM triad, all cores
    clock_mhz: float | None  # as the OS reports it (a VM's is often the base clock)
    flops_per_cycle: int  # per core
    measured_at: str

    @property
    def theoretical_gflops(self) -> float | None:
        """cores x clock x FLOPs per cycle, at the clock the OS reports."""
        return self.cores * self.clock_mhz * self.flops_per_cycle / 1e3 if self.clock_mhz else None

    @property
    def implied_clock_mhz(self) -> float:
        """The clock one core's measured peak implies (boost clocks lie above the reported one)."""
        return self.peak_gflops_1core * 1e3 / self.flops_per_cycle

    @property
    def balance(self) -> float:
        """FLOPs per byte at which a kernel turns from memory-bound to compute-bound."""
        return self.peak_gflops / self.bandwidth_gbs

    def roofline(self, flops: float, memory_bytes: float) -> tuple[float, Literal["compute", "memory"]]:
        """Attainable GFLOP/s of a kernel (min of the peak and intensity x bandwidth), and its bound."""
        memory = flops / memory_bytes * self.bandwidth_gbs
        return (self.peak_gflops, "compute") if self.peak_gflops <= memory else (memory, "memory")

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "isa": list(self.isa), "theoretical_gflops": self.theoretical_gflops,
                "implied_clock_mhz": self.implied_clock_mhz}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "MachineFacts":
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{**{k: v for k, v in data.items() if k in fields}, "isa": tuple(data["isa"])})


def _clock_mhz() -> float | None:
    """The highest clock the OS states: cpufreq's maximum, else /proc/cpuinfo's current."""
    try:
        return int(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq").read_text()) / 1e3
    except (OSError, ValueError):
        pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "cpu MHz":
                return float(value)
    except (OSError, ValueError):
        pass
    return None


def cache_path(target: TargetInfo) -> Path:
    """Where this host's facts are kept: one file per CPU model, ISA and core count."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "autotune" / "machine"
    identity = json.dumps([cpu_model(), target.mcpu, list(target.isa), target.cores])
    slug = "".join(c if c.isalnum() else "-" for c in f"{target.mcpu}-{target.cores}c")
    return root / f"{slug}-{hashlib.sha256(identity.encode()).hexdigest()[:12]}.json"


def _fma_kernel(threads: int, lanes: int) -> Any:
    """`threads` parallel chunks, each FMA_CHAINS vector accumulators stepped FMA_STEPS times."""
    from tvm.script import tirx as T

    chains, steps = FMA_CHAINS, FMA_STEPS

    @T.prim_func
    def fma(a: T.Buffer((threads, chains, lanes), "float32"),  # type: ignore[valid-type,no-untyped-def]
            b: T.Buffer((threads, chains, lanes), "float32")):  # type: ignore[valid-type]
        for p in T.parallel(threads):
            acc = T.decl_buffer((chains, lanes), "float32", scope="local")
            for c in T.unroll(chains):
                for lane in T.vectorized(lanes):
                    acc[c, lane] = a[p, c, lane]
            for _ in range(steps):
                for c in T.unroll(chains):
                    for lane in T.vectorized(lanes):
                        acc[c, lane] = acc[c, lane] * T.float32(0.9999) + T.float32(0.0001)
            for c in T.unroll(chains):
                for lane in T.vectorized(lanes):
                    b[p, c, lane] = acc[c, lane]

    return fma


def _triad_kernel(n: int, lanes: int) -> Any:
    """a = b + 3 c over n floats, in parallel blocks of 64 vectors."""
    from tvm.script import tirx as T

    block = 64 * lanes

    @T.prim_func
    def triad(a: T.Buffer((n,), "float32"), b: T.Buffer((n,), "float32"),  # type: ignore[valid-type,no-untyped-def]
              c: T.Buffer((n,), "float32")):  # type: ignore[valid-type]
        for i in T.parallel(n // block):
            for j in range(64):
                for lane in T.vectorized(lanes):
                    a[i * block + j * lanes + lane] = b[i * block + j * lanes + lane] + T.float32(3.0) * c[
                        i * block + j * lanes + lane]

    return triad


def probe(kind: Literal["peak", "triad"], target: TargetInfo) -> float:
    """One measurement in this process, on the threads TVM's pool has: GFLOP/s (best of 7 runs) or
    GB/s (median of 7)."""
    import numpy as np
    import tvm

    threads, lanes = tvm.runtime.num_threads(), target.vector_lanes("float32")
    shapes: list[tuple[int, ...]]
    if kind == "peak":
        func, shapes = _fma_kernel(threads, lanes), [(threads, FMA_CHAINS, lanes)] * 2
        work = 2.0 * threads * FMA_CHAINS * lanes * FMA_STEPS
    else:
        last_level = max(dict(target.caches).values(), default=32 << 20)
        n = max(4 * last_level // 4, 1 << 24) // (64 * lanes) * (64 * lanes)
        func, shapes, work = _triad_kernel(n, lanes), [(n,)] * 3, 3.0 * 4 * n  # STREAM's byte count
    library = tvm.compile(tvm.IRModule({"main": func}), target=target.tvm)
    rng = np.random.default_rng(0)
    args = [tvm.runtime.tensor(rng.random(shape, dtype=np.float32)) for shape in shapes]
    seconds = library.mod.time_evaluator("main", tvm.cpu(), number=1, repeat=7)(*args).results
    # the peak is what the units can do: the best run; bandwidth is what memory sustains: the median
    return work / (min(seconds) if kind == "peak" else statistics.median(seconds)) / 1e9


def _run_probes(threads: int, kinds: list[str]) -> list[float]:
    """Probes in a fresh process whose TVM pool has `threads` threads (the pool's size is fixed at
    its first use, so each thread count needs its own process)."""
    env = {**os.environ, "TVM_NUM_THREADS": str(threads)}
    done = subprocess.run([sys.executable, "-m", "tuner.measure.machine", "probe", *kinds], env=env,
                          capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"the machine probes failed: {done.stderr.strip().splitlines()[-1:] or done.returncode}")
    return [float(value) for value in done.stdout.split()]


def measure(target: TargetInfo) -> MachineFacts:
    """Measure this host's CPU now: peak on all cores (the largest of runs before and after the
    bandwidth runs: a busy moment only lowers it, and a virtual CPU's sibling was once busy for both
    runs of a pair, halving the figure) and on one, triad bandwidth on all cores (the median of three)."""
    kinds = ["peak", "peak", "triad", "triad", "triad", "peak"]
    values = list(zip(kinds, _run_probes(target.cores, kinds)))
    peaks, triad = ([v for kind, v in values if kind == wanted] for wanted in ("peak", "triad"))
    one_core = max(_run_probes(1, ["peak", "peak"]))
    return MachineFacts(cpu_model=cpu_model(), mcpu=target.mcpu, cores=target.cores, isa=target.isa,
                        vector_bits=target.vector_bits, caches=dict(target.caches), peak_gflops=max(peaks),
                        peak_gflops_1core=one_core, bandwidth_gbs=statistics.median(triad), clock_mhz=_clock_mhz(),
                        flops_per_cycle=target.flops_per_cycle,
                        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"))


def machine_facts(target: Any = "llvm", *, remeasure: bool = False) -> MachineFacts:
    """This host's facts for a CPU target: from the cache when this CPU was measured before, else
    measured now (a few seconds) and cached."""
    resolved = resolve_target(target)
    if resolved.is_cuda:
        raise ValueError("the machine's roofline is measured for CPU targets (llvm); cuda is not measured")
    path = cache_path(resolved)
    if not remeasure and path.is_file():
        try:
            return MachineFacts.from_json(json.loads(path.read_text()))
        except (ValueError, KeyError, TypeError):
            pass  # an unreadable cache is measured again
    facts = measure(resolved)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".tmp")
    partial.write_text(json.dumps(facts.to_json(), indent=1) + "\n")
    partial.replace(path)
    return facts


def with_machine(target: Any = "llvm") -> TargetInfo:
    """The target with this host's measured peak and bandwidth (`machine_facts`)."""
    resolved = resolve_target(target)
    facts = machine_facts(resolved)
    return resolved.with_peaks(facts.peak_gflops, facts.bandwidth_gbs)


if __name__ == "__main__":
    if sys.argv[1:2] != ["probe"] or not sys.argv[2:] or not set(sys.argv[2:]) <= {"peak", "triad"}:
        sys.exit("usage: python -m tuner.measure.machine probe peak|triad ...")
    host = resolve_target("llvm")
    print(*(probe(kind, host) for kind in sys.argv[2:]))  # type: ignore[arg-type]
