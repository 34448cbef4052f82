"""Resolving what the user typed as a target into a `tvm.target.Target`, and the facts templates need."""

from __future__ import annotations

import os
from typing import Any

import tvm

CUDA_DEFAULT_TAG = "nvidia/nvidia-h100"  # sm_90, the lent GPUs' architecture, when no GPU is visible
CUDA_LIMITS = {"max_threads_per_block": 1024, "max_shared_memory_per_block": 49152,
               "thread_warp_size": 32, "registers_per_block": 65536}


def host_cpu_target(num_cores: int | None = None) -> tvm.target.Target:
    """This machine's CPU with its detected `mcpu` and the cores the user has."""
    detected = tvm.target.Target.from_device(tvm.cpu())
    cores = num_cores or len(os.sched_getaffinity(0))
    return tvm.target.Target({"kind": "llvm", "mcpu": detected.attrs["mcpu"], "num-cores": cores})


def resolve_target(target: Any) -> tvm.target.Target:
    """`"llvm"` (the host CPU), `"cuda"` (the visible GPU, else an H100-class sm_90), a dict, or a Target."""
    if isinstance(target, tvm.target.Target):
        resolved = target
    elif target == "llvm":
        resolved = host_cpu_target()
    elif target == "cuda":
        if tvm.runtime.enabled("cuda") and tvm.cuda(0).exist:
            resolved = tvm.target.Target.from_device(tvm.cuda(0))
        else:
            resolved = tvm.target.Target(CUDA_DEFAULT_TAG)
    elif isinstance(target, dict):
        try:
            resolved = tvm.target.Target(target)
        except Exception as err:  # TVM raises several kinds for a bad dict
            raise ValueError(f"invalid target {target!r}: {str(err).splitlines()[0]}") from None
    else:
        raise ValueError(f"unknown target {target!r}: use 'llvm', 'cuda', a TVM target dict or a tvm.target.Target")
    if resolved.kind.name not in ("llvm", "cuda"):
        raise ValueError(f"target kind {resolved.kind.name!r} is not supported; use llvm or cuda")
    if resolved.kind.name == "cuda" and resolved.host is None:
        resolved = tvm.target.Target(resolved, host=host_cpu_target())
    return resolved


def target_key(target: tvm.target.Target) -> str:
    """The identity records are filed under: kind and the facts that change timings."""
    if target.kind.name == "cuda":
        return f"cuda -arch={target.attrs.get('arch', 'sm_50')}"
    mcpu = target.attrs.get("mcpu", "generic")
    return f"llvm -mcpu={mcpu} -num-cores={int(target.attrs.get('num-cores', 1))}"


def num_cores(target: tvm.target.Target) -> int:
    return int(target.attrs.get("num-cores", 1))


def vector_lanes(target: tvm.target.Target, dtype: str) -> int:
    """SIMD lanes of `dtype` in one vector register of the CPU target."""
    from tvm.target.codegen import target_has_features

    with target:
        bits = 512 if target_has_features("avx512f") else 256 if target_has_features("avx2") else 128
    return bits // tvm.runtime.DataType(dtype).bits


def cuda_limit(target: tvm.target.Target, name: str) -> int:
    value = target.attrs.get(name)
    return int(value) if value is not None else CUDA_LIMITS[name]


def target_from_key(key: str) -> tvm.target.Target:
    """Inverse of `target_key`, for reading records back (features, replay, best kernels)."""
    kind, *options = key.split()
    attrs = dict(option.lstrip("-").split("=", 1) for option in options)
    if kind == "cuda":
        return resolve_target({"kind": "cuda", "arch": attrs.get("arch", "sm_90"), **CUDA_LIMITS})
    if kind == "llvm":
        return tvm.target.Target({"kind": "llvm", "mcpu": attrs.get("mcpu", "generic"),
                                  "num-cores": int(attrs.get("num-cores", 1))})
    raise ValueError(f"not a target key: {key!r}")
