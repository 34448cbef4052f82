"""Tests of `search`: every sampled config of the CPU and CUDA templates is a correct program.

CPU: random configs of small and odd-shaped workloads are applied, compiled for llvm and run
against the numpy reference. CUDA (compile-only, no GPU needed): random configs are compiled by
TVM, their kernels by nvcc for sm_80 and sm_90, and pass TVM's GPU verifier. Also pinned: apply is
deterministic, configs round-trip through JSON, spaces are large, neighbors / crossover stay valid,
and invalid configs raise `search.InvalidConfig` with a reason. Run with `-s` to see space sizes.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import itertools
import json
import os
import re
import time

import numpy as np
import pytest
import tvm

import search
from search import Config, InvalidConfig
from workloads import batch_matmul, conv2d, depthwise_conv2d, matmul
from tests.nvcc import NVCC, cubin_failures, nvcc_cubin

SEED = 20240611
CONFIGS = 30
needs_nvcc = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH: CUDA kernels cannot be compiled")

CUDA_TARGETS = {
    "sm_80": {"kind": "cuda", "arch": "sm_80"},
    "sm_90": {"kind": "cuda", "arch": "sm_90"},
}

# Small and odd shapes: 1x1x1, primes (257, 131, 509), shapes that no power-of-two tile divides,
# transposed operands, float16, batches, strided / padded convolutions and fused epilogues (GELU too).
WORKLOADS = {
    "matmul_1x1x1": matmul(1, 1, 1),
    "matmul_7x13x17_bias_relu": matmul(7, 13, 17, epilogue="bias_relu"),
    "matmul_257x131x509": matmul(257, 131, 509),
    "matmul_33x20x17_transpose_b_bias_gelu": matmul(33, 20, 17, transpose_b=True, epilogue="bias_gelu"),
    "matmul_16x24x40_fp16_bias_gelu": matmul(16, 24, 40, dtype="float16", epilogue="bias_gelu"),
    "batch_matmul_3x7x13x17": batch_matmul(3, 7, 13, 17),
    "conv2d_nchw_s2_p3": conv2d(2, 3, 11, 13, 5, 3, 3, stride=2, padding=3),
    "conv2d_nhwc_bias_relu": conv2d(1, 4, 9, 7, 6, 3, 3, padding=1, layout="NHWC", epilogue="bias_relu"),
    "depthwise_s2_p3": depthwise_conv2d(1, 5, 11, 13, 3, 3, stride=2, padding=3),
    "conv2d_1x1_bias_relu": conv2d(1, 6, 5, 7, 10, 1, 1, epilogue="bias_relu"),  # its pixels may be fused
    "conv2d_nhwc_1x1": conv2d(2, 4, 3, 5, 6, 1, 1, layout="NHWC"),
}
CPU_COUNTS = {name: CONFIGS for name in WORKLOADS}  # 257x131x509 takes ~0.3 s a config: all 30 fit
# nvcc costs about 0.5-1 CPU-second a kernel (cicc parsing the headers; more for unrolled code), so
# by default CUDA checks a subset covering every operator, odd shapes, float16 and epilogues; set
# SEARCH_SPACE_FULL_CUDA=1 to check all workloads (about three more minutes on two cores).
CUDA_DEFAULT = ("matmul_1x1x1", "matmul_7x13x17_bias_relu", "matmul_16x24x40_fp16_bias_gelu",
                "batch_matmul_3x7x13x17", "conv2d_nchw_s2_p3", "depthwise_s2_p3")
FULL_CUDA = os.environ.get("SEARCH_SPACE_FULL_CUDA", "") not in ("", "0")
CUDA_CASES = [pytest.param(name, marks=() if FULL_CUDA or name in CUDA_DEFAULT else pytest.mark.skip(
    reason="not in the default CUDA subset: set SEARCH_SPACE_FULL_CUDA=1")) for name in WORKLOADS]


@functools.lru_cache(maxsize=None)
def template(name: str, target: str):
    """Cached template of WORKLOADS[name] on "llvm" or a key of CUDA_TARGETS."""
    return search.template_for(WORKLOADS[name], "llvm" if target == "llvm" else CUDA_TARGETS[target])


def all_valid(space) -> int:
    """Exact number of valid configs of a small space (enumerated)."""
    names = space.names
    return sum(space.is_valid(Config(dict(zip(names, values))))
               for values in itertools.product(*(k.options for k in space.knobs)))


def sample(tpl, count: int, seed: int = SEED) -> list[Config]:
    """`count` distinct valid configs, or every valid config of a smaller space."""
    configs = tpl.sample(np.random.default_rng(seed), count)
    assert configs, f"{tpl}: no config sampled"
    assert len(set(configs)) == len(configs), f"{tpl}: sample returned duplicates"
    if len(configs) < count:
        assert tpl.space.size <= 100000, f"{tpl}: only {len(configs)} of {count} configs from a large space"
        assert len(configs) == all_valid(tpl.space), f"{tpl}: sample stopped before the space ran out"
    return configs


def differing(a: Config, b: Config) -> list[str]:
    return [name for name in a if a[name] != b[name]]


# ---------------------------------------------------------------------------------------- CPU


def computed(program, target, workload, inputs):
    """The output of `program` (a schedule) built for `target` on `inputs`, its buffer first filled with NaN."""
    ex = tvm.compile(program.mod, target=target)
    out = tvm.runtime.tensor(np.full(workload.output_shapes[0], np.nan, workload.dtype), tvm.cpu())
    ex(*[tvm.runtime.tensor(x, tvm.cpu()) for x in inputs], out)
    return out.numpy()


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_cpu_configs_compile_and_match_reference(name):
    workload = WORKLOADS[name]
    tpl = template(name, "llvm")
    assert tpl.target.kind == "llvm"
    start = time.perf_counter()
    configs = sample(tpl, CPU_COUNTS[name])
    inputs = workload.random_inputs(1)
    expected = workload.reference(*inputs)
    rtol, atol = workload.tolerance
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(x, dev) for x in inputs]
    failures = []
    for config in configs:
        ex = tvm.compile(tpl.apply(config).mod, target=tpl.target.tvm)
        # NaN-filled outputs: an element the kernel never writes fails the comparison
        outs = [tvm.runtime.tensor(np.full(shape, np.nan, workload.dtype), dev) for shape in workload.output_shapes]
        ex(*args, *outs)
        got = outs[-1].numpy()
        if not np.allclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol):
            err = np.nanmax(np.abs(got.astype(np.float64) - expected)) if not np.isnan(got).all() else np.nan
            failures.append(f"{config.id} (max abs err {err}, NaNs {int(np.isnan(got).sum())})")
    print(f"\n[cpu] {workload.key}: space size {tpl.space.size}, {len(configs)} configs checked "
          f"in {time.perf_counter() - start:.1f} s")
    assert not failures, f"{workload.key}: {len(failures)}/{len(configs)} configs give wrong results:\n" + "\n".join(failures)


@pytest.mark.parametrize("name", ["matmul_33x20x17_transpose_b_bias_gelu", "conv2d_nchw_s2_p3",
                                  "conv2d_nhwc_bias_relu", "conv2d_1x1_bias_relu"])
def test_constant_weights_prepacked_give_the_same_output_as_packing_on_every_call(name):
    """With constant weights, a packing config takes the weight in `packed_weight`'s layout (made
    once outside) and computes what the per-call packing kernel computes."""
    import torch

    workload = WORKLOADS[name]
    tpl = template(name, "llvm")
    configs = [c for c in sample(tpl, 40) if c.get("pack")][:4]
    assert configs, f"{workload.key}: no packing config sampled"
    prepacked = search.template_for(dataclasses.replace(workload, constant_weights=True), "llvm")
    assert prepacked.prepacked_weights and not tpl.prepacked_weights
    inputs = workload.random_inputs(1)
    expected = workload.reference(*inputs)
    for config in map(prepacked.space.adopt, configs):  # where to pack per call is no knob of theirs
        packing = prepacked.packed_weight(config)
        assert packing is not None and packing == tpl.packed_weight(config)
        given = list(inputs)
        given[packing.input] = packing.pack(torch.from_numpy(inputs[packing.input])).numpy()
        assert given[packing.input].shape == packing.packed_shape(inputs[packing.input].shape)
        np.testing.assert_allclose(computed(prepacked.apply(config), tpl.target.tvm, workload, given), expected,
                                   *workload.tolerance)
        copy = f"{tpl.prim_func.params[packing.input].name}_global"  # the per-call packed copy
        assert copy not in prepacked.apply(config).mod.script() and copy in tpl.apply(config).mod.script()


@pytest.mark.parametrize("name", ["depthwise_s2_p3", "conv2d_nhwc_bias_relu", "conv2d_nchw_s2_p3"])
def test_every_padding_placement_gives_the_reference_output(name):
    """The padded window copied per parallel task or per cache tile computes what reading the
    input through the border test computes; the copy is a stage of its own, the guard gone."""
    workload = WORKLOADS[name]
    tpl = template(name, "llvm")
    inputs = workload.random_inputs(1)
    expected = workload.reference(*inputs)
    pad = tpl.structure.pad_block
    for config in sample(tpl, 6, seed=SEED + 11):
        for placement in ("inline", "task", "tile"):
            placed = config.replace(pad_at=placement)
            program = tpl.apply(placed)
            assert (f'T.sblock("{pad}")' in program.mod.script()) == (placement != "inline"), placement
            np.testing.assert_allclose(computed(program, tpl.target.tvm, workload, inputs), expected,
                                       *workload.tolerance, err_msg=f"{placed.id} {placement}")


@pytest.mark.parametrize("name", ["matmul_33x20x17_transpose_b_bias_gelu", "batch_matmul_3x7x13x17",
                                  "conv2d_nchw_s2_p3", "conv2d_nhwc_bias_relu"])
def test_a_weight_packed_per_task_gives_the_output_of_one_packed_per_call(name):
    """A weight that is no constant, packed per parallel task: its copy is made inside the task's
    loop (no parallel loop of its own), vectorized along the packed width where that is one
    vector, and the kernel computes the reference, as packing the whole weight per call does."""
    workload = WORKLOADS[name]
    tpl = template(name, "llvm")
    configs = [c for c in sample(tpl, 60, seed=SEED + 5) if c.get("pack")][:4]
    assert configs and "pack_at" in tpl.space.names
    inputs = workload.random_inputs(2)
    expected = workload.reference(*inputs)
    for config in configs:
        copy = f'T.sblock("{tpl.prim_func.params[tpl.packed_weight(config).input].name}_global")'
        for placement, parallel_loops in (("call", 2), ("task", 1)):
            scheduled = tpl.apply(config.replace(pack_at=placement))
            program = scheduled.mod.script()
            assert program.count("T.parallel(") == parallel_loops and copy in program, placement
            if placement == "task":
                copy_loops = program.split(copy)[0].rsplit("T.sblock(", 1)[-1]  # after a padding copy's block
                vector = 1 < tpl.packed_weight(config).width <= tpl.lanes
                assert ("T.vectorized(" in copy_loops) == vector, config
            np.testing.assert_allclose(computed(scheduled, tpl.target.tvm, workload, inputs), expected,
                                       *workload.tolerance, err_msg=f"{config.id} {placement}")


def test_configs_recorded_before_packing_placement_mean_packing_per_call():
    """Records written before the `pack_at` knob existed stay valid and name the same program; a
    placement without packing is refused, and constant weights (packed ahead of the calls) have
    no placement to choose."""
    tpl = template("matmul_33x20x17_transpose_b_bias_gelu", "llvm")
    config = next(c for c in sample(tpl, 40) if c.get("pack")).replace(pack_at="call")
    older = Config({k: v for k, v in config.items() if k != "pack_at"})
    assert tpl.space.is_valid(older) and tpl.check(older) == config
    assert tpl.apply(older).mod.script() == tpl.apply(config).mod.script()
    with pytest.raises(InvalidConfig, match="packs nothing"):
        tpl.check(config.replace(pack=0, pack_at="task"))
    constant = search.template_for(dataclasses.replace(WORKLOADS["matmul_33x20x17_transpose_b_bias_gelu"],
                                                       constant_weights=True), "llvm")
    assert "pack" in constant.space.names and "pack_at" not in constant.space.names
    per_task = config.replace(pack_at="task")
    assert not constant.space.is_valid(per_task) and constant.space.adopt(per_task) == older


@pytest.mark.parametrize("workload", [depthwise_conv2d(1, 5, 10, 12, 3, 3, stride=2, padding=1, epilogue="bias"),
                                      conv2d(1, 3, 10, 12, 4, 3, 3, stride=2, padding=1)], ids=str)
def test_strided_rows_copied_by_phase_give_the_reference_output(workload):
    """A stride-2 convolution vectorized along its output width, its padded window copied: the copy
    lays each row out by phase (w -> (w % 2, w // 2): the vector loads read consecutive elements),
    and the kernel computes the reference."""
    tpl = search.template_for(workload, "llvm")
    inputs = workload.random_inputs(3)
    expected = workload.reference(*inputs)
    n, c, h, w = workload.input_shapes[0]
    by_phase = f"T.sblock_alloc_buffer(({n}, {c}, {h + 2}, 2, {(w + 2) // 2}))"
    configs = [c.replace(vector_axis="w", pack=0, pack_at="call") for c in sample(tpl, 4, seed=SEED + 3)]
    for config in configs:
        for placement in ("task", "tile"):
            program = tpl.apply(config.replace(pad_at=placement))
            assert by_phase in program.mod.script(), placement
            np.testing.assert_allclose(computed(program, tpl.target.tvm, workload, inputs), expected,
                                       *workload.tolerance, err_msg=f"{config.id} {placement}")
    channels = tpl.structure.axis_names[1]  # vectorized along channels, the rows are read one element at a time
    assert by_phase not in tpl.apply(configs[0].replace(vector_axis=channels, pad_at="task")).mod.script()


def test_configs_recorded_before_padding_placement_mean_inline_padding():
    """Records written before the `pad_at` knob existed stay valid and name the same program."""
    tpl = template("depthwise_s2_p3", "llvm")
    config = a_config("depthwise_s2_p3", "llvm").replace(pad_at="inline")
    older = Config({k: v for k, v in config.items() if k != "pad_at"})
    assert tpl.space.is_valid(older) and tpl.check(older) == config
    assert tpl.apply(older).mod.script() == tpl.apply(config).mod.script()
    assert all(tpl.space.is_valid(n) for n in tpl.space.neighbors(older, np.random.default_rng(0)))
    gemm = template("matmul_7x13x17_bias_relu", "llvm")
    assert "pad_at" not in gemm.space.names  # nothing to place without padding


def test_vector_loop_through_the_border_test_counts_as_scalar():
    """Vectorizing a padded axis with the padding inlined leaves the loop scalar (TVM cannot
    vectorize the guarded read); copying the padded window first lets it vectorize."""
    from cost_model.draft import draft_features

    tpl = template("depthwise_s2_p3", "llvm")
    along_w = next(c for c in sample(tpl, 200, seed=SEED + 3)
                   if c["vector_axis"] == "w" and c[tpl.axis_knob(tpl.vector_axis(c))][-1] > 1)
    inline, copied = along_w.replace(pad_at="inline"), along_w.replace(pad_at="task")
    assert tpl.guarded_vector(inline) and not tpl.guarded_vector(copied)
    # TVM renames a loop it could not vectorize `<name>_s`
    assert "w_3_s" in str(tpl.lower(inline))
    copied_code = str(tpl.lower(copied))
    assert "w_3_s" not in copied_code and f"{tpl.structure.pad_block}[T.Ramp(" in copied_code
    assert draft_features(tpl, inline)["vector_efficiency"] == 1 / tpl.lanes  # as if not vectorized
    assert draft_features(tpl, copied)["vector_efficiency"] > 1 / tpl.lanes


@pytest.mark.parametrize("workload, pixels", [
    (conv2d(1, 6, 5, 7, 10, 1, 1), ("h", "w")),
    (conv2d(2, 4, 3, 5, 6, 1, 1, layout="NHWC", epilogue="bias"), ("h", "w")),
    (conv2d(1, 6, 5, 7, 10, 1, 1, stride=2), None),  # a row's pixels are not consecutive in the input
    (conv2d(1, 6, 5, 7, 10, 1, 1, padding=1), None),
    (conv2d(1, 6, 5, 7, 10, 3, 3), None),
    (matmul(8, 8, 8), None),
    (batch_matmul(2, 8, 8, 8), None),  # the batch and the rows: B reads the batch but not the rows
], ids=str)
def test_pixels_fuse_only_where_every_operand_lays_them_out_as_one_run(workload, pixels):
    tpl = search.template_for(workload, "llvm")
    names = tpl.structure.axis_names
    assert (tuple(names[a] for a in tpl.pixels) if tpl.pixels else None) == pixels
    assert ("fuse_pixels" in tpl.space.names) == (pixels is not None)


def test_fused_pixels_vectorize_across_rows_and_give_the_reference_output():
    """A 1x1 convolution 4 pixels wide, its pixels fused and tiled 2 rows x 4 as one 8-lane vector:
    the input is read with contiguous vector loads that span two rows, and the output is right.
    Configs recorded before the knob existed mean the pixels unfused."""
    workload = conv2d(1, 6, 6, 4, 10, 1, 1, epilogue="bias_relu", constant_weights=True)
    tpl = search.template_for(workload, "llvm")
    config = Config(tile_n=(1, 1, 1, 1), tile_k=(2, 5, 1, 1), tile_h=(3, 1, 1, 2), tile_w=(1, 1, 1, 4),
                    tile_rc=(2, 3), tile_rh=(1, 1), tile_rw=(1, 1), vector_axis="w", pack=0, unroll=16, write_at=1,
                    fuse_pixels=1)
    assert tpl.tile_parts(config)[tpl.pixels[1]] == (3, 1, 1, 8)
    lowered = str(tpl.lower(config))
    assert re.search(r"data_1\[T.Ramp\([^]]*, 1, 8\)\]", lowered)  # 8 consecutive floats per load
    inputs = workload.random_inputs(5)
    expected = workload.reference(*inputs)
    for fused in (0, 1):
        for vector_axis in ("w", "k"):
            chosen = config.replace(fuse_pixels=fused, vector_axis=vector_axis)
            np.testing.assert_allclose(computed(tpl.apply(chosen), tpl.target.tvm, workload, inputs), expected,
                                       *workload.tolerance, err_msg=chosen.id)
    older = Config({k: v for k, v in config.items() if k != "fuse_pixels"})
    assert tpl.check(older) == config.replace(fuse_pixels=0)


@pytest.mark.parametrize("workload, expected", [
    (matmul(1, 30, 17, transpose_b=True), True),  # a GEMV: each weight element read once
    (batch_matmul(3, 1, 13, 17), True),  # a batched GEMV (LLM decoding's attention)
    (matmul(1, 1, 1), True),
    (matmul(8, 8, 8), False),  # every weight element read by 8 rows
    (depthwise_conv2d(1, 5, 11, 13, 3, 3, padding=1), False),  # each input pixel read by 9 windows
    (conv2d(1, 6, 5, 7, 10, 1, 1), False),
], ids=str)
def test_matrix_vector_products_are_those_reading_an_input_once(workload, expected):
    assert search.template_for(workload, "llvm").matrix_vector is expected


def test_matrix_vector_rows_wider_than_the_registers_stream_and_give_the_reference_output():
    """A GEMV's register tile may be a row of 150 accumulators, wider than TVM vectorizes: the
    loop is left to LLVM (no 150-lane vector in the program) and the output is right. The same
    row is refused where rows of the weight are reused (M = 2)."""
    workload = matmul(1, 300, 17, transpose_b=True, epilogue="bias")
    tpl = search.template_for(workload, "llvm")
    config = Config(tile_i=(1, 1, 1, 1), tile_j=(2, 1, 1, 150), tile_k=(17, 1), vector_axis="j", pack=1, unroll=0,
                    write_at=0)
    assert 150 > tpl.vector_row_limit and tpl.space.is_valid(config) and not tpl.vectorizes(config)
    lowered = str(tpl.lower(config))
    assert re.search(r"(\w+)\[j_3\] = \1\[j_3\] \+", lowered)  # one accumulator a step
    assert "T.Ramp" not in lowered  # nor a vector of the row's width in the write-back
    inputs = workload.random_inputs(3)
    np.testing.assert_allclose(computed(tpl.apply(config), tpl.target.tvm, workload, inputs),
                               workload.reference(*inputs), *workload.tolerance)
    reused = search.template_for(matmul(2, 300, 17, transpose_b=True, epilogue="bias"), "llvm")
    with pytest.raises(InvalidConfig, match="vectorized loop"):
        reused.apply(config.replace(tile_i=(2, 1, 1, 1)))
    too_long = search.template_for(matmul(1, 8192, 17, transpose_b=True), "llvm")  # 32 KiB of accumulators
    with pytest.raises(InvalidConfig, match="accumulator row"):
        too_long.apply(config.replace(tile_j=(1, 1, 1, 8192)))


@pytest.mark.parametrize("workload, contiguous, offered", [
    (batch_matmul(4, 1, 9, 40, transpose_b=True), True, True),  # decoding's scores: keys read along k
    (matmul(1, 24, 48, transpose_b=True), True, True),
    # a constant weight is packed once instead, and streams past a row of outputs
    (matmul(1, 24, 48, transpose_b=True, constant_weights=True), True, False),
    (batch_matmul(4, 1, 9, 40), False, False),  # the right-hand side walks k with a stride
    (matmul(3, 24, 48, transpose_b=True), False, False),  # not a matrix-vector product
], ids=str)
def test_the_reduction_may_be_vectorized_where_a_matrix_vector_product_reads_it_contiguously(workload, contiguous,
                                                                                               offered):
    tpl = search.template_for(workload, "llvm")
    assert tpl.reduction_reads_contiguously() is contiguous
    assert ("k" in tpl.space.knob("vector_axis").options) is offered


def test_a_reduction_split_into_lanes_is_vectorized_and_gives_the_reference_output():
    """Lanes along k: the accumulator gains a lanes dimension (rfactor), the lanes loop is a TVM
    vector as wide as the largest divisor of the innermost k factor that fits one vector, packing
    is refused, and every config's output, the fused bias included, is right."""
    workload = matmul(1, 24, 48, transpose_b=True, epilogue="bias")
    tpl = search.template_for(workload, "llvm")
    config = Config(tile_i=(1, 1, 1, 1), tile_j=(2, 1, 3, 4), tile_k=(2, 24), vector_axis="k", pack=0, unroll=16,
                    write_at=0)
    width = max(d for d in range(1, tpl.lanes + 1) if 24 % d == 0)
    assert tpl.vector_width(config) == width and tpl.register_tile(config) == 4 * width
    assert "T.Ramp(" in str(tpl.lower(config)) and "_rf" in tpl.apply(config).mod.script()
    with pytest.raises(InvalidConfig, match="nothing to pack"):
        tpl.check(config.replace(pack=1))
    inputs = workload.random_inputs(3)
    expected = workload.reference(*inputs)
    configs = [config] + [c for c in tpl.sample(np.random.default_rng(SEED), 60) if c["vector_axis"] == "k"][:3]
    for chosen in configs:
        np.testing.assert_allclose(computed(tpl.apply(chosen), tpl.target.tvm, workload, inputs), expected,
                                   *workload.tolerance, err_msg=chosen.id)


# --------------------------------------------------------------------------------------- CUDA


@needs_nvcc
@pytest.mark.parametrize("arch", list(CUDA_TARGETS))
@pytest.mark.parametrize("name", CUDA_CASES)
def test_cuda_configs_compile_with_nvcc_and_verify(name, arch, tmp_path):
    from tvm.s_tir.analysis import verify_gpu_code

    workload = WORKLOADS[name]
    tpl = template(name, arch)
    assert tpl.target.kind == "cuda" and tpl.target.arch == arch
    assert tpl.max_threads <= 1024
    limits = {"max_shared_memory_per_block": tpl.max_shared, "max_threads_per_block": tpl.max_threads,
              "max_thread_x": tpl.max_threads, "max_local_memory_per_block": 1 << 31}
    start = time.perf_counter()
    configs = sample(tpl, CONFIGS)
    failures, jobs = [], []
    # nvcc (about 0.6 s a kernel) runs on both cores while this thread schedules and lowers
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        for index, config in enumerate(configs):
            threads = tpl.threads(config)
            if threads > 1024 or threads > tpl.max_threads:
                failures.append(f"{config.id}: {threads} threads per block")
            if not verify_gpu_code(tpl.lower(config)["main"], limits):
                failures.append(f"{config.id}: fails verify_gpu_code with {limits}")
            ex = tvm.compile(tpl.apply(config).mod, target=tpl.target.tvm)
            imports = list(ex.mod.imports)
            if not imports:
                failures.append(f"{config.id}: no device module (no kernel)")
                continue
            source = imports[0].inspect_source()
            if "__global__" not in source:
                failures.append(f"{config.id}: device source has no __global__ kernel")
                continue
            path = tmp_path / f"kernel{index}.cu"
            path.write_text(source)
            jobs.append((config, path, pool.submit(nvcc_cubin, str(path), arch)))
        failures += cubin_failures(jobs, arch)
    print(f"\n[cuda {arch}] {workload.key}: space size {tpl.space.size}, {len(configs)} configs, "
          f"{len(jobs)} kernels built in {time.perf_counter() - start:.1f} s")
    assert not failures, f"{workload.key} on {arch}: {len(failures)} problems:\n" + "\n".join(failures)


# ------------------------------------------------------------------------------ determinism

DETERMINISM_CASES = [(n, t) for n in ("matmul_7x13x17_bias_relu", "matmul_16x24x40_fp16_bias_gelu",
                                      "conv2d_nchw_s2_p3", "depthwise_s2_p3") for t in ("llvm", "sm_90")]


@pytest.mark.parametrize("name,target", DETERMINISM_CASES, ids=[f"{n}-{t}" for n, t in DETERMINISM_CASES])
def test_same_config_gives_same_program(name, target):
    tpl = template(name, target)
    fresh = search.template_for(WORKLOADS[name], "llvm" if target == "llvm" else CUDA_TARGETS[target])
    for config in sample(tpl, 5, seed=SEED + 1):
        first = tpl.apply(config).mod.script()
        assert tpl.apply(config).mod.script() == first, f"{config.id}: apply twice gives different programs"
        assert tpl.apply(dict(config)).mod.script() == first, f"{config.id}: a plain dict gives another program"
        assert fresh.apply(Config.from_json(config.to_json())).mod.script() == first, \
            f"{config.id}: a fresh template gives another program"


@pytest.mark.parametrize("name", ["matmul_7x13x17_bias_relu", "batch_matmul_3x7x13x17", "conv2d_nchw_s2_p3",
                                  "conv2d_nhwc_bias_relu", "depthwise_s2_p3"])
def test_shared_prefixes_give_the_program_built_step_by_step(name):
    """Configs applied on threads from cached prefixes (`Template.schedule_prefix`) equal programs
    built from the bare workload: nothing of one config leaks into another through a prefix."""
    from tvm import s_tir

    tpl = search.template_for(WORKLOADS[name], "llvm")
    configs = sample(tpl, 24, seed=SEED + 3)
    assert len({tpl.prefix_key(c) for c in configs}) < len(configs)  # some prefixes are shared
    with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
        applied = list(pool.map(tpl.apply, configs))
    for config, sch in zip(configs, applied):
        scratch = s_tir.Schedule(tpl.source(config))
        tpl.schedule_prefix(scratch, config)
        tpl.schedule(scratch, config)
        assert sch.mod.script() == scratch.mod.script(), config.id


# ----------------------------------------------------------------------------------- JSON

JSON_CASES = [(n, t) for n in ("matmul_257x131x509", "matmul_33x20x17_transpose_b_bias_gelu", "batch_matmul_3x7x13x17",
                               "conv2d_nhwc_bias_relu", "depthwise_s2_p3") for t in ("llvm", "sm_80")]


@pytest.mark.parametrize("name,target", JSON_CASES, ids=[f"{n}-{t}" for n, t in JSON_CASES])
def test_config_json_round_trip(name, target):
    tpl = template(name, target)
    for config in sample(tpl, 10, seed=SEED + 2):
        text = json.dumps(config.to_json())
        back = Config.from_json(json.loads(text))
        assert back == config and hash(back) == hash(config) and back.id == config.id
        assert {back: 1}[config] == 1  # usable interchangeably as a dict key
        reordered = Config(dict(reversed(list(json.loads(text).items()))))
        assert reordered == config and reordered.id == config.id and hash(reordered) == hash(config)
        assert json.loads(config.id) == config.to_json()
        assert tpl.space.is_valid(back)


# ---------------------------------------------------------------------------------- sizes

SIZE_CASES = [("llvm", 2000, 1e5), ("sm_90", 300, 1e4)]


@pytest.mark.parametrize("target,draws,minimum", SIZE_CASES, ids=["llvm", "cuda_sm_90"])
def test_space_of_large_matmul_is_not_a_toy(target, draws, minimum):
    w = matmul(1024, 1024, 1024)
    tpl = search.template_for(w, "llvm" if target == "llvm" else CUDA_TARGETS[target])
    start = time.perf_counter()
    valid = tpl.space.estimate_valid(np.random.default_rng(SEED), draws)
    print(f"\n[size {target}] {w.key}: {len(tpl.space.knobs)} knobs, size {tpl.space.size:.3e}, "
          f"estimated valid {valid:.3e} ({draws} draws, {time.perf_counter() - start:.1f} s)")
    for knob in tpl.space.knobs:
        print(f"    {knob.name}: {len(knob)} options")
    assert valid >= minimum, f"{w.key} on {target}: only about {valid:.3g} valid configs (want >= {minimum:.0e})"


def test_print_space_sizes():
    rows = [(name, target, template(name, target).space.size) for name in WORKLOADS for target in ("llvm", "sm_90")]
    print("\n[sizes] space size (knob combinations before rules) per workload and target:")
    for name, target, size in rows:
        print(f"    {name:32s} {target:5s} {size:>14,d}")
    assert all(size >= 1 for _, _, size in rows)


# ----------------------------------------------------------------- neighbors and crossover

WALK_CASES = [(n, t) for n in ("matmul_7x13x17_bias_relu", "matmul_16x24x40_fp16_bias_gelu", "batch_matmul_3x7x13x17",
                               "conv2d_nchw_s2_p3", "depthwise_s2_p3") for t in ("llvm", "sm_80")]


@pytest.mark.parametrize("name,target", WALK_CASES, ids=[f"{n}-{t}" for n, t in WALK_CASES])
def test_neighbors_change_one_or_two_knobs_and_are_valid(name, target):
    tpl = template(name, target)
    rng = np.random.default_rng(SEED + 3)
    for config in sample(tpl, 4, seed=SEED + 3):
        neighbors = tpl.space.neighbors(config, rng, 8)
        assert neighbors, f"{config.id}: no neighbors"
        assert len(set(neighbors)) == len(neighbors) and config not in neighbors
        for neighbor in neighbors:
            assert 1 <= len(differing(config, neighbor)) <= 2, f"{config.id} -> {neighbor.id}"
            assert set(neighbor) == set(config)
            assert tpl.space.violation(neighbor) is None, f"{neighbor.id}: {tpl.space.violation(neighbor)}"


@pytest.mark.parametrize("name,target", WALK_CASES, ids=[f"{n}-{t}" for n, t in WALK_CASES])
def test_crossover_child_is_valid_and_inherits_every_knob(name, target):
    tpl = template(name, target)
    rng = np.random.default_rng(SEED + 4)
    parents = sample(tpl, 8, seed=SEED + 4)
    for a, b in zip(parents[::2], parents[1::2]):
        for _ in range(3):
            child = tpl.space.crossover(a, b, rng)
            assert tpl.space.violation(child) is None, f"{child.id}: {tpl.space.violation(child)}"
            for knob in tpl.space.names:
                assert child[knob] in (a[knob], b[knob]), f"{knob}={child[knob]} comes from neither parent"


# --------------------------------------------------------------------------- invalid configs

INVALID_TARGETS = ["llvm", "sm_80"]


def a_config(name: str, target: str) -> Config:
    return sample(template(name, target), 1, seed=SEED + 5)[0]


@pytest.mark.parametrize("target", INVALID_TARGETS)
def test_split_with_wrong_product_raises(target):
    tpl = template("matmul_7x13x17_bias_relu", target)
    config = a_config("matmul_7x13x17_bias_relu", target)
    knob = tpl.axis_knob(0)  # the extent-7 axis
    for bad in [(1, 1, 1, 1), (7, 7, 1, 1), (2, 2, 2, 1)] if len(config[knob]) == 4 else [(1, 1), (7, 7)]:
        broken = config.replace(**{knob: bad})
        assert not tpl.space.is_valid(broken)
        with pytest.raises(InvalidConfig, match=knob):
            tpl.apply(broken)
    # past the space's rules, TVM's own refusal (factors that do not cover the loop) is an
    # InvalidConfig too, carrying TVM's reason
    short = config.replace(**{knob: (1,) * len(config[knob])})
    with pytest.raises(InvalidConfig, match="product of factors"):
        tpl.unchecked_apply(short)


@pytest.mark.parametrize("target", INVALID_TARGETS)
def test_unknown_option_and_missing_or_extra_knob_raise(target):
    tpl = template("conv2d_nchw_s2_p3", target)
    config = a_config("conv2d_nchw_s2_p3", target)
    missing = Config({k: v for k, v in config.items() if k != "unroll"})
    with pytest.raises(InvalidConfig, match="unroll"):
        tpl.apply(missing)
    with pytest.raises(InvalidConfig, match="bogus"):
        tpl.apply(config.replace(bogus=1))
    with pytest.raises(InvalidConfig, match="unroll"):
        tpl.apply(config.replace(unroll=3))
    with pytest.raises(InvalidConfig):
        tpl.apply({})


def test_cpu_register_tile_too_large_raises():
    tpl = template("matmul_257x131x509", "llvm")
    config = a_config("matmul_257x131x509", "llvm")
    # 257 and 131 are prime: innermost factors 257 x 131 far exceed 16 vector registers
    broken = config.replace(tile_i=(1, 1, 1, 257), tile_j=(1, 1, 1, 131))
    with pytest.raises(InvalidConfig, match="register tile"):
        tpl.apply(broken)
    assert "register tile" in tpl.space.violation(broken)


def test_cpu_vector_wider_than_four_registers_raises():
    lanes = template("matmul_1x1x1", "llvm").lanes
    tpl = search.template_for(matmul(2, 5 * lanes, 3), "llvm")  # a 1 x 5-register tile: few registers
    config = Config(dict(tile_i=(2, 1, 1, 1), tile_j=(1, 1, 1, 5 * lanes), tile_k=(3, 1), vector_axis="j",
                         pack=0, unroll=0, write_at=1))
    with pytest.raises(InvalidConfig, match="vectorized loop"):
        tpl.apply(config)
    assert tpl.space.is_valid(config.replace(tile_j=(5, 1, 1, lanes)))


def test_transposed_accumulator_compiles_in_seconds_and_is_correct():
    # vectorized over k (not the output's last axis), accumulator at the outer level, unroll 512:
    # a vectorized write-back gather made LLVM take minutes on this config
    workload = conv2d(1, 64, 56, 56, 64, 3, 3, padding=1)
    tpl = search.template_for(workload, "llvm")
    config = Config({"pack": 0, "tile_h": (2, 14, 1, 2), "tile_k": (4, 2, 4, 2), "tile_n": (1, 1, 1, 1),
                     "tile_rc": (4, 16), "tile_rh": (3, 1), "tile_rw": (3, 1), "tile_w": (1, 7, 4, 2),
                     "unroll": 512, "vector_axis": "k", "write_at": 0})
    start = time.perf_counter()
    ex = tvm.compile(tpl.apply(config).mod, target=tpl.target.tvm)
    assert time.perf_counter() - start < 60
    inputs = workload.random_inputs(0)
    out = tvm.runtime.empty(workload.output_shapes[0], workload.dtype)
    ex(*[tvm.runtime.tensor(x) for x in inputs], out)
    np.testing.assert_allclose(out.numpy(), workload.reference(*inputs), *workload.tolerance)


def test_cuda_too_many_threads_raises():
    tpl = template("matmul_257x131x509", "sm_80")
    config = a_config("matmul_257x131x509", "sm_80")
    broken = config.replace(tile_i=(1, 1, 257, 1), tile_j=(1, 1, 131, 1))  # 33667 threads per block
    assert tpl.threads(broken) > 1024
    with pytest.raises(InvalidConfig, match="threads"):
        tpl.apply(broken)


def test_invalid_config_is_a_value_error():
    assert issubclass(InvalidConfig, ValueError)
