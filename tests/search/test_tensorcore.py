"""Tests of the tensor-core (WMMA) template for float16 matrix products on CUDA.

Which workloads get it (float16 matmul / batch_matmul with M, N, K multiples of 16 on sm_70+),
and that its configs are complete kernels: compiled by TVM, with tensor-core instructions, the
epilogue fused, accepted by nvcc for sm_80 and sm_90 and by TVM's GPU verifier (compile-only,
no GPU needed). Also: apply is deterministic, rule breakers raise `InvalidConfig` with a reason,
and the space of a large matmul is not a toy. Run with `-s` to see timings and space sizes.
"""

from __future__ import annotations

import concurrent.futures
import functools
import time

import numpy as np
import pytest
import tvm

import search
from search import Config, InvalidConfig
from search.cpu_template import CPUTemplate
from search.cuda_template import CUDATemplate
from search.tensorcore_template import TensorCoreTemplate
from workloads import batch_matmul, conv2d, matmul
from tests.nvcc import NVCC, cubin_failures, nvcc_cubin

SEED = 20251203
CONFIGS = 10  # per workload and architecture: nvcc takes about a second a kernel
SIZE_DRAWS = 1000
KERNEL_MUST_CONTAIN = (
    ("wmma::mma_sync", "no tensor-core mma"),
    ("wmma::load_matrix_sync", "no fragment load"),
    ("wmma::store_matrix_sync", "no fragment store"),
    ("epilogue_ptr[", "the kernel does not write the output (the epilogue is not fused)"),
)
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: CUDA kernels cannot be compiled")

CUDA_TARGETS = {
    "sm_80": {"kind": "cuda", "arch": "sm_80"},
    "sm_90": {"kind": "cuda", "arch": "sm_90"},
}

# A square matmul, odd fragment counts (3 x 5 x 2) with a bias + ReLU epilogue, and a batched,
# transposed product (attention's QK^T).
WORKLOADS = {
    "matmul_256_fp16": matmul(256, 256, 256, dtype="float16"),
    "matmul_48x80x32_fp16_bias_relu": matmul(48, 80, 32, dtype="float16", epilogue="bias_relu"),
    "batch_matmul_2x64x64x64_fp16_transpose_b": batch_matmul(2, 64, 64, 64, dtype="float16", transpose_b=True),
}


@functools.lru_cache(maxsize=None)
def template(name: str, arch: str) -> TensorCoreTemplate:
    tpl = search.template_for(WORKLOADS[name], CUDA_TARGETS[arch])
    assert isinstance(tpl, TensorCoreTemplate), f"{name} on {arch}: got {tpl}"
    return tpl


def sample(tpl, count: int, seed: int = SEED) -> list[Config]:
    configs = tpl.sample(np.random.default_rng(seed), count)
    assert len(configs) == count and len(set(configs)) == count, f"{tpl}: {len(configs)} configs sampled"
    return configs


# ----------------------------------------------------------------------------------- dispatch


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_template_for_picks_tensor_cores_for_float16_products(name):
    for arch in ("sm_70", "sm_80", "sm_90a"):
        tpl = search.template_for(WORKLOADS[name], {"kind": "cuda", "arch": arch})
        assert isinstance(tpl, TensorCoreTemplate), f"{name} on {arch}: got {tpl}"


@pytest.mark.parametrize("workload,target,expected", [
    (matmul(256, 256, 256), "sm_80", CUDATemplate),  # float32
    (batch_matmul(2, 64, 64, 64, transpose_b=True), "sm_80", CUDATemplate),  # float32
    (matmul(7, 13, 17, dtype="float16"), "sm_80", CUDATemplate),  # not whole fragments
    (matmul(256, 256, 40, dtype="float16"), "sm_90", CUDATemplate),  # K not a multiple of 16
    (conv2d(1, 16, 8, 8, 16, 3, 3, padding=1, dtype="float16"), "sm_80", CUDATemplate),
    (batch_matmul(70000, 16, 16, 16, dtype="float16"), "sm_80", CUDATemplate),  # batch > gridDim.y
    (matmul(256, 256, 256, dtype="float16"), "sm_61", CUDATemplate),  # no tensor cores before Volta
    (matmul(256, 256, 256, dtype="float16"), "llvm", CPUTemplate),
], ids=["fp32_matmul", "fp32_batch_matmul", "fp16_7x13x17", "fp16_k40", "fp16_conv2d", "fp16_batch_70000",
        "sm_61", "llvm"])
def test_template_for_keeps_other_templates_elsewhere(workload, target, expected):
    tpl = search.template_for(workload, "llvm" if target == "llvm" else {"kind": "cuda", "arch": target})
    assert type(tpl) is expected, f"{workload.key} on {target}: got {tpl}"


# --------------------------------------------------------------------------------- compiling


@needs_nvcc
@pytest.mark.parametrize("arch", list(CUDA_TARGETS))
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_configs_use_tensor_cores_compile_with_nvcc_and_verify(name, arch, tmp_path):
    from tvm.s_tir.analysis import verify_gpu_code

    tpl = template(name, arch)
    limits = {"max_shared_memory_per_block": tpl.max_shared, "max_threads_per_block": tpl.max_threads,
              "max_thread_x": tpl.max_threads, "max_local_memory_per_block": 1 << 31}
    start = time.perf_counter()
    configs = sample(tpl, CONFIGS)
    failures, jobs = [], []
    # nvcc (about a second a kernel: mma.h) runs on both cores while this thread schedules
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for index, config in enumerate(configs):
            if not verify_gpu_code(tpl.lower(config)["main"], limits):
                failures.append(f"{config.id}: fails verify_gpu_code with {limits}")
            ex = tvm.compile(tpl.apply(config).mod, target=tpl.target.tvm)
            imports = list(ex.mod.imports)
            if len(imports) != 1:
                failures.append(f"{config.id}: {len(imports)} device modules, expected one kernel")
                continue
            source = imports[0].inspect_source()
            failures += [f"{config.id}: {why}" for needed, why in KERNEL_MUST_CONTAIN if needed not in source]
            path = tmp_path / f"kernel{index}.cu"
            path.write_text(source)
            jobs.append((config, path, pool.submit(nvcc_cubin, str(path), arch)))
        failures += cubin_failures(jobs, arch)
    print(f"\n[tensorcore {arch}] {tpl.workload.key}: space size {tpl.space.size}, {len(configs)} configs, "
          f"{len(jobs)} kernels built in {time.perf_counter() - start:.1f} s")
    assert not failures, f"{tpl.workload.key} on {arch}: {len(failures)} problems:\n" + "\n".join(failures)


def test_bias_relu_epilogue_is_in_the_write_back():
    tpl = template("matmul_48x80x32_fp16_bias_relu", "sm_80")
    config = sample(tpl, 1, seed=SEED + 1)[0]
    script = tpl.apply(config).mod.script()
    assert 'T.sblock("epilogue")' not in script, "the epilogue is a separate stage"
    assert "T.max(" in script and "bias[" in script and 'T.Cast("float16"' in script


# ------------------------------------------------------------------------------- determinism


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_same_config_gives_same_program(name):
    tpl = template(name, "sm_90")
    fresh = search.template_for(WORKLOADS[name], CUDA_TARGETS["sm_90"])
    for config in sample(tpl, 3, seed=SEED + 2):
        first = tpl.apply(config).mod.script()
        assert tpl.apply(config).mod.script() == first, f"{config.id}: apply twice gives different programs"
        assert fresh.apply(Config.from_json(config.to_json())).mod.script() == first, \
            f"{config.id}: a fresh template gives another program"


# --------------------------------------------------------------------------- invalid configs


def test_rule_breakers_raise_invalid_config_with_a_reason():
    tpl = template("matmul_256_fp16", "sm_80")  # 16 fragments along M and N, 16 along K
    config = sample(tpl, 1, seed=SEED + 3)[0]
    cases = {  # each breaks one rule only
        "warps": config.replace(tile_i=(1, 16, 1), tile_j=(1, 16, 1)),  # 256 warps, 8192 threads
        "shared memory": config.replace(tile_i=(1, 4, 4), tile_j=(2, 2, 4)),  # a 256 x 128 float32 stage
        "registers": config.replace(tile_i=(2, 1, 8), tile_j=(4, 1, 4), tile_k=(16, 1)),  # 32 accumulators
        "not one of the knob's options": config.replace(tile_k=(4, 3)),  # 12 != 16 fragments
    }
    for reason, broken in cases.items():
        assert reason in (tpl.space.violation(broken) or ""), f"{broken.id}: {tpl.space.violation(broken)}"
        with pytest.raises(InvalidConfig, match=reason):
            tpl.apply(broken)
    assert tpl.space.is_valid(config)


# ------------------------------------------------------------------------------------- size


def test_space_of_large_fp16_matmul_is_not_a_toy():
    w = matmul(1024, 1024, 1024, dtype="float16")
    tpl = search.template_for(w, CUDA_TARGETS["sm_90"])
    assert isinstance(tpl, TensorCoreTemplate)
    start = time.perf_counter()
    valid = tpl.space.estimate_valid(np.random.default_rng(SEED), SIZE_DRAWS)
    print(f"\n[size sm_90] {w.key}: {len(tpl.space.knobs)} knobs, size {tpl.space.size:.3e}, "
          f"estimated valid {valid:.3e} ({SIZE_DRAWS} draws, {time.perf_counter() - start:.1f} s)")
    assert valid >= 1000, f"{w.key}: only about {valid:.3g} valid configs (want >= 1000)"


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_cost_model_reads_tensor_core_configs(name):
    from cost_model import FEATURE_NAMES, FeatureExtractor, draft_score

    tpl = template(name, "sm_90")
    configs = tpl.sample(np.random.default_rng(SEED), 4)
    features = FeatureExtractor(tpl)(configs)
    assert features.shape == (4, len(FEATURE_NAMES)) and np.isfinite(features).all()
    assert all(np.isfinite(draft_score(tpl, c)) and draft_score(tpl, c) > 0 for c in configs)
