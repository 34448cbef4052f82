"""`TargetInfo`: what the user typed as a target, resolved once into the facts every layer reads.

One value travels everywhere (templates, cost model, measurer, records): the TVM target it
builds, its kind, the CPU's ISA and vector width, the cores, the cache sizes, and room for the
machine's measured peaks. It is a frozen dataclass, so it pickles to the worker processes as it
is; records name it by its `key`, and `TargetInfo.from_key` reads that name back.
"""

from __future__ import annotations

import dataclasses
import json
import os
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Mapping

if TYPE_CHECKING:
    from tvm.target import Target  # TVM ships no type information: Any to mypy

Kind = Literal["llvm", "cuda"]

CUDA_DEFAULT_TAG = "nvidia/nvidia-h100"  # sm_90, the lent GPUs' architecture, when no GPU is visible
CUDA_LIMITS = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
               "thread_warp_size": 32, "registers_per_block": 65536}
ISA_FEATURES = ("sse4.2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vnni", "neon", "sve")
CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")
# FP32 FLOPs per cycle per core of the vector units (2 per FMA lane, times the FMA pipes), by LLVM CPU
# name, from the vendors' optimization manuals; CPUs not listed are assumed to have two FMA pipes.
FLOPS_PER_CYCLE = {"znver1": 16, "znver2": 32, "znver3": 32, "znver4": 32, "znver5": 64, "haswell": 32,
                   "broadwell": 32, "skylake": 32, "alderlake": 32, "skylake-avx512": 64, "cascadelake": 64,
                   "cooperlake": 64, "icelake-server": 64, "sapphirerapids": 64, "emeraldrapids": 64}
# Per-core data cache sizes (L1d, L2) and the L3 one core can reach, from the datasheets, by LLVM CPU
# name: the facts of a host that its records do not carry (records written before they did).
DATASHEET_CACHES = {"znver1": {"L1": 32 << 10, "L2": 512 << 10, "L3": 8 << 20},
                    "znver2": {"L1": 32 << 10, "L2": 512 << 10, "L3": 16 << 20},
                    "znver3": {"L1": 32 << 10, "L2": 512 << 10, "L3": 32 << 20},
                    "znver4": {"L1": 32 << 10, "L2": 1 << 20, "L3": 32 << 20},
                    "znver5": {"L1": 48 << 10, "L2": 1 << 20, "L3": 32 << 20}}
GENERIC_CACHES = {"L1": 32 << 10, "L2": 512 << 10, "L3": 16 << 20}


def _cache_sizes() -> dict[str, int]:
    """This machine's data and unified cache sizes in bytes by level (L1, L2, L3), from the OS."""
    sizes: dict[str, int] = {}
    for index in sorted(CACHE_DIR.glob("index*")):
        try:
            kind = (index / "type").read_text().strip()
            level = (index / "level").read_text().strip()
            text = (index / "size").read_text().strip().upper()
        except OSError:
            continue
        if kind == "Instruction" or not text:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1], 1)
        sizes[f"L{level}"] = int(text.rstrip("KMG")) * scale
    return sizes


def cpu_model() -> str:
    """The CPU's marketing name, as the OS reports it."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            name, _, value = line.partition(":")
            if name.strip() == "model name":
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclasses.dataclass(frozen=True)
class TargetInfo:
    """A resolved target. `spec` is the exact TVM target as JSON; the rest are facts read off it
    (and, for this machine's CPU, off the OS), so no layer has to ask TVM again."""

    kind: Kind
    spec: str
    cores: int = 1
    mcpu: str = ""  # CPU model as LLVM names it (llvm only)
    arch: str = ""  # compute capability, e.g. "sm_90a" (cuda only)
    isa: tuple[str, ...] = ()  # CPU vector features the target enables (llvm only)
    vector_bits: int = 128
    caches: tuple[tuple[str, int], ...] = ()  # (("L1", bytes), ("L2", bytes), ...) when known
    peak_gflops: float | None = None  # measured peaks, where the machine was measured
    bandwidth_gbs: float | None = None
    cpu: str = ""  # the CPU's marketing name, where the target is a machine's own (llvm only)

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    @property
    def device_type(self) -> Literal["cpu", "cuda"]:
        """The runtime device kernels of this target run on."""
        return "cuda" if self.is_cuda else "cpu"

    @cached_property
    def tvm(self) -> Target:
        """The TVM target, built on first use in each process."""
        import tvm

        return tvm.target.Target(json.loads(self.spec))

    @property
    def key(self) -> str:
        """The identity records are filed under: kind and the facts that change timings."""
        if self.is_cuda:
            return f"cuda -arch={self.arch or 'sm_50'}"
        return f"llvm -mcpu={self.mcpu or 'generic'} -num-cores={self.cores}"

    def vector_lanes(self, dtype: str) -> int:
        """SIMD lanes of `dtype` in one vector register (CPU targets)."""
        import tvm

        return self.vector_bits // tvm.runtime.DataType(dtype).bits

    def cuda_limit(self, name: str) -> int:
        """A per-block limit of a CUDA target (`max_threads_per_block`, ...), TVM's or the default."""
        value = self.tvm.attrs.get(name)
        return int(value) if value is not None else CUDA_LIMITS[name]

    def cache_bytes(self, level: str) -> int | None:
        return dict(self.caches).get(level)

    def cache_or_datasheet(self, level: str) -> int:
        """A cache's size: the measured one, else the datasheet's for this CPU, else a generic one."""
        return self.cache_bytes(level) or DATASHEET_CACHES.get(self.mcpu, GENERIC_CACHES)[level]

    @property
    def flops_per_cycle(self) -> int:
        """FP32 FLOPs per cycle per core of the vector units (datasheet; two FMA pipes if unlisted)."""
        return FLOPS_PER_CYCLE.get(self.mcpu, 4 * self.vector_bits // 32)

    def host_facts(self) -> dict[str, Any] | None:
        """What a record says of the machine that measured it (CPU targets): the facts that shape its
        timings and that a cost model serving many CPUs reads; None for a GPU target."""
        if self.is_cuda:
            return None
        return {"cpu": self.cpu, "mcpu": self.mcpu, "cores": self.cores, "isa": list(self.isa),
                "vector_bits": self.vector_bits, "caches": dict(self.caches), "peak_gflops": self.peak_gflops,
                "bandwidth_gbs": self.bandwidth_gbs}

    @classmethod
    def from_record(cls, target_key: str, host: Mapping[str, Any] | None) -> "TargetInfo":
        """The target of a record: its key, with the facts of the host that measured it (where the
        record carries them; else the datasheet's caches for its CPU)."""
        info = cls.from_key(target_key)
        if info.is_cuda:
            return info
        host = host or {}
        caches = host.get("caches") or DATASHEET_CACHES.get(info.mcpu, {})
        return dataclasses.replace(info, caches=tuple(sorted((str(k), int(v)) for k, v in caches.items())),
                                   peak_gflops=host.get("peak_gflops"), bandwidth_gbs=host.get("bandwidth_gbs"),
                                   cpu=str(host.get("cpu", "")))

    def with_peaks(self, peak_gflops: float, bandwidth_gbs: float) -> "TargetInfo":
        """The same target with the machine's measured peak FLOP/s and memory bandwidth."""
        return dataclasses.replace(self, peak_gflops=peak_gflops, bandwidth_gbs=bandwidth_gbs)

    def __getstate__(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # not the cached TVM target

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __str__(self) -> str:
        return self.key

    @classmethod
    def from_tvm(cls, target: Target, caches: Mapping[str, int] | None = None) -> "TargetInfo":
        import tvm

        if target.kind.name not in ("llvm", "cuda"):
            raise ValueError(f"target kind {target.kind.name!r} is not supported; use llvm or cuda")
        if target.kind.name == "cuda":
            if target.host is None:
                target = tvm.target.Target(target, host=host_cpu_target())
            return cls("cuda", str(target), cores=1, arch=str(target.attrs.get("arch", "")))
        from tvm.target.codegen import target_has_features

        with target:
            isa = tuple(f for f in ISA_FEATURES if target_has_features(f))
        bits = 512 if "avx512f" in isa else 256 if "avx2" in isa else 128
        return cls("llvm", str(target), cores=int(target.attrs.get("num-cores", 1)),
                   mcpu=str(target.attrs.get("mcpu", "")), isa=isa, vector_bits=bits,
                   caches=tuple(sorted((caches or {}).items())))

    @classmethod
    def from_key(cls, key: str) -> "TargetInfo":
        """The target a record names (inverse of `key`), for reading records back."""
        import tvm

        kind, *options = key.split()
        try:
            attrs = dict(option.lstrip("-").split("=", 1) for option in options)
        except ValueError:
            raise ValueError(f"not a target key: {key!r}") from None
        if kind == "cuda":
            return resolve_target({"kind": "cuda", "arch": attrs.get("arch", "sm_90"), **CUDA_LIMITS})
        if kind == "llvm":
            return cls.from_tvm(tvm.target.Target({"kind": "llvm", "mcpu": attrs.get("mcpu", "generic"),
                                                   "num-cores": int(attrs.get("num-cores", 1))}))
        raise ValueError(f"not a target key: {key!r}")


def host_cpu_target(num_cores: int | None = None) -> Target:
    """This machine's CPU with its detected `mcpu` and the cores the user has."""
    import tvm

    detected = tvm.target.Target.from_device(tvm.cpu())
    cores = num_cores or len(os.sched_getaffinity(0))
    return tvm.target.Target({"kind": "llvm", "mcpu": detected.attrs["mcpu"], "num-cores": cores})


def host_target(cores: int | None = None) -> TargetInfo:
    """This machine's CPU as a resolved target (its caches included), on `cores` cores (all the
    user's by default): what `"llvm"` means, and what a cluster node that owns `cores` offers."""
    return dataclasses.replace(TargetInfo.from_tvm(host_cpu_target(cores), caches=_cache_sizes()), cpu=cpu_model())


def resolve_target(target: Any) -> TargetInfo:
    """`"llvm"` (the host CPU, with its caches), `"cuda"` (the visible GPU, else an H100-class sm_90),
    a TVM target dict, a `tvm.target.Target`, or a `TargetInfo` (returned as it is)."""
    import tvm

    if isinstance(target, TargetInfo):
        return target
    if isinstance(target, tvm.target.Target):
        return TargetInfo.from_tvm(target)
    if target == "llvm":
        return host_target()
    if target == "cuda":
        if tvm.runtime.enabled("cuda") and tvm.cuda(0).exist:
            return TargetInfo.from_tvm(tvm.target.Target.from_device(tvm.cuda(0)))
        return TargetInfo.from_tvm(tvm.target.Target(CUDA_DEFAULT_TAG))
    if isinstance(target, dict):
        try:
            resolved = tvm.target.Target(target)
        except Exception as err:  # TVM raises several kinds for a bad dict
            raise ValueError(f"invalid target {target!r}: {str(err).splitlines()[0]}") from None
        return TargetInfo.from_tvm(resolved)
    raise ValueError(f"unknown target {target!r}: use 'llvm', 'cuda', a TVM target dict or a tvm.target.Target")
