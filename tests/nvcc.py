"""Compile generated CUDA sources with nvcc, in parallel, and collect what failed (compile-only)."""

from __future__ import annotations

import shutil
import subprocess

NVCC = shutil.which("nvcc")


def nvcc_cubin(source_path: str, arch: str) -> subprocess.CompletedProcess:
    return subprocess.run([NVCC, "-cubin", f"-arch={arch}", "-o", source_path[:-3] + ".cubin", source_path],
                          capture_output=True, text=True)


def cubin_failures(jobs, arch: str) -> list[str]:
    """`jobs`: (config, source path, future of `nvcc_cubin`); a line per kernel nvcc did not build."""
    failures = []
    for config, path, job in jobs:
        result = job.result()
        if result.returncode != 0:
            failures.append(f"{config.id}: nvcc -arch={arch} failed ({path}):\n{result.stderr[-1500:]}")
        elif not path.with_suffix(".cubin").stat().st_size:
            failures.append(f"{config.id}: nvcc wrote an empty cubin")
    return failures
