"""`optimize`: a model whose captured layers run tuned kernels, checked against the original."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch
from torch import nn

import tuner.torch_kernels
from search import resolve_target, template_for
from tuner import load_optimized, optimize, save_optimized
from tuner.analysis import kernel_layer_latency
from tuner.result import Kernel
from workloads import from_key, from_torch, matmul


class OddModel(nn.Module):
    """Odd shapes; BatchNorm and ReLU after a conv, a depthwise conv, attention-like products of
    strided views, and Linears with and without bias."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(6)
        self.depthwise = nn.Conv2d(6, 6, 3, groups=6, padding=1)
        self.q = nn.Linear(6, 10)
        self.k = nn.Linear(6, 10, bias=False)
        self.head = nn.Linear(35 * 10, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.depthwise(torch.relu(self.bn(self.conv(x))))
        tokens = x.flatten(2).transpose(1, 2)  # [1, 35, 6], a strided view
        q, k = self.q(tokens), self.k(tokens)
        scores = torch.matmul(q.view(1, 35, 2, 5).transpose(1, 2), k.view(1, 35, 2, 5).permute(0, 2, 3, 1))
        mixed = torch.matmul(torch.softmax(scores, -1), q.view(1, 35, 2, 5).transpose(1, 2))
        return self.head(mixed.transpose(1, 2).reshape(1, -1))


def _model() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    torch.manual_seed(0)
    model = OddModel().eval()
    with torch.no_grad():  # BatchNorm statistics that are not the identity
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
        model.bn.weight.uniform_(0.5, 1.5)
    return model, (torch.randn(1, 3, 5, 7),)


def _any_configs(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> dict:
    """A valid config per layer kind: every config of the space gives a correct kernel."""
    suite = from_torch(model, inputs)
    rng = np.random.default_rng(0)
    return {e.workload.key: template_for(e.workload, "llvm").space.sample(rng, 1)[0] for e in suite}


@pytest.fixture(scope="module")
def optimized():
    model, inputs = _model()
    return model, inputs, optimize(model, inputs, _any_configs(model, inputs))


def test_every_covered_layer_runs_its_kernel_and_the_outputs_agree(optimized):
    model, inputs, fast = optimized
    ops = [str(n.target) for n in fast.graphs[0].graph.nodes if n.op == "call_function"]
    assert ops.count("autotune.kernel.default") == 7  # conv, depthwise, q, k, two products, head
    assert not [op for op in ops if op.split(".")[1] in ("conv2d", "linear", "matmul", "batch_norm", "relu")]
    with torch.no_grad():
        other = torch.randn(1, 3, 5, 7)
        torch.testing.assert_close(fast(other), model(other), rtol=1e-3, atol=1e-4)


def test_the_optimized_module_compiles_and_exports(optimized):
    model, inputs, fast = optimized
    with torch.no_grad():
        torch.testing.assert_close(torch.compile(fast, backend="aot_eager")(*inputs), model(*inputs),
                                   rtol=1e-3, atol=1e-4)
    exported = torch.export.export(fast, inputs)
    assert "autotune.kernel.default" in {str(n.target) for n in exported.graph.nodes}


class Tokens(nn.Module):
    """A model whose layers' shapes follow the sequence length."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(6, 10), nn.Linear(10, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(nn.functional.gelu(self.up(x)))


def test_each_input_set_gets_its_kernels_and_other_shapes_run_in_torch():
    torch.manual_seed(0)
    model, sets = Tokens().eval(), [(torch.randn(1, 5, 6),), (torch.randn(1, 9, 6),)]
    suite = from_torch(model, sets)
    assert sorted(e.workload.key for e in suite) == sorted(
        matmul(m, n, k, transpose_b=True, epilogue=e, constant_weights=True).key for m in (5, 9) for n, k, e in ((10, 6, "bias_gelu"),
                                                                                         (6, 10, "bias")))
    fast = optimize(model, sets, _any_configs(model, sets))
    assert len(fast.graphs) == 2 and len(fast.kernels) == 4
    with torch.no_grad():
        for length in (5, 9):
            x = torch.randn(1, length, 6)
            torch.testing.assert_close(fast(x), model(x), rtol=1e-3, atol=1e-4)
        with pytest.warns(UserWarning, match=r"shapes \[1, 7, 6\].*run in torch") as caught:
            for _ in range(3):
                x = torch.randn(1, 7, 6)
                torch.testing.assert_close(fast(x), model(x))
    assert len([w for w in caught if "run in torch" in str(w.message)]) == 1  # once, not once a call


def _packing_configs(model: nn.Module, inputs: tuple[torch.Tensor, ...]) -> dict:
    """A config per layer kind that packs an operand wherever the layer's space can."""
    rng = np.random.default_rng(0)
    configs = {}
    for entry in from_torch(model, inputs):
        sampled = template_for(entry.workload, "llvm").space.sample(rng, 60)
        configs[entry.workload.key] = next((c for c in sampled if c.get("pack")), sampled[0])
    return configs


def test_constant_weights_are_packed_once_and_activations_on_every_call(tmp_path):
    model, inputs = _model()
    fast = optimize(model, inputs, _packing_configs(model, inputs))
    prepacked = {key.split("(")[0] for key, packed in fast.kernels if packed}
    per_call = {key.split("(")[0] for key, packed in fast.kernels if not packed}
    assert prepacked == {"conv2d", "depthwise_conv2d", "matmul"}  # the convs' (BN-folded) and Linears' weights
    assert "batch_matmul" in per_call  # attention's operands are activations
    for (key, packed), kernel in fast.kernels.items():
        if packed:  # the graph holds the weight in the kernel's layout, as a constant
            layout = template_for(kernel.workload, "llvm").packed_weight(kernel.config)
            assert layout == kernel.packed_weight
            shape = layout.packed_shape(tuple(kernel.workload.input_shapes[layout.input]))
            assert any(tuple(b.shape) == shape for name, b in fast.graphs[0].named_buffers()
                       if name.startswith("_autotune_constant")), key
    with torch.no_grad():
        other = torch.randn(1, 3, 5, 7)
        torch.testing.assert_close(fast(other), model(other), rtol=1e-3, atol=1e-4)
    latency = kernel_layer_latency(fast, min_s=0.001, repeat=1)  # each kernel timed as the module runs it
    assert set(latency) == {key for key, _ in fast.kernels} and all(s > 0 for s in latency.values())
    save_optimized(fast, tmp_path / "saved")
    loaded = load_optimized(model, inputs, tmp_path / "saved")
    assert set(loaded.kernels) == set(fast.kernels)
    with torch.no_grad():
        torch.testing.assert_close(loaded(other), fast(other))


class DriftingWeight(nn.Module):
    """A Linear whose weight is a buffer the model changes after each use."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("weight", torch.randn(24, 16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = nn.functional.linear(x, self.weight)
        self.weight.mul_(0.5)
        return y


def test_a_weight_the_model_changes_is_read_on_every_call_not_packed_once():
    torch.manual_seed(0)
    model, x = DriftingWeight(), torch.randn(8, 16)
    key = matmul(8, 24, 16, transpose_b=True).key
    sampled = template_for(from_key(key), "llvm").space.sample(np.random.default_rng(0), 60)
    fast = optimize(model, (x,), {key: next(c for c in sampled if c.get("pack"))})
    assert [packed for _, packed in fast.kernels] == [False]  # the kernel packs the weight on every call
    graph = fast.graphs[0]
    for _ in range(2):
        weight = graph.get_buffer("weight").clone()
        with torch.no_grad():
            torch.testing.assert_close(fast(x), x @ weight.T, rtol=1e-3, atol=1e-4)
        assert not torch.equal(graph.get_buffer("weight"), weight)  # the call changed it, as the model does


def test_layers_without_a_kernel_stay_in_torch_with_a_warning():
    model, inputs = _model()
    configs = _any_configs(model, inputs)
    dropped = next(key for key in configs if key.startswith("depthwise"))
    del configs[dropped]
    with pytest.warns(UserWarning, match="depthwise_conv2d"):
        fast = optimize(model, inputs, configs)
    ops = [str(n.target) for n in fast.graphs[0].graph.nodes if n.op == "call_function"]
    assert ops.count("autotune.kernel.default") == 6 and "aten.conv2d.default" in ops


def test_configs_of_the_bare_operators_serve_layers_with_constant_weights(optimized):
    """Records of the operators tuned with their weights given on every call (by `tune` on the bare
    operator, or older than `constant_weights`) still give the model's layers their kernels."""
    model, inputs, fast = optimized
    bare = {from_key(key).with_weights(constant=False).key: config
            for key, config in _any_configs(model, inputs).items()}
    assert set(bare) != set(_any_configs(model, inputs))
    assert optimize(model, inputs, bare).kernels.keys() == fast.kernels.keys()
    # a bare operator's config may pack its weight per task, a choice without meaning where it is constant
    per_task = {}
    for key, config in bare.items():
        packed = config.replace(pack=1, pack_at="task")
        per_task[key] = packed if template_for(from_key(key), "llvm").space.is_valid(packed) else config
    assert per_task != bare
    assert {key for key, _ in optimize(model, inputs, per_task).kernels} == {key for key, _ in fast.kernels}


def test_a_kernel_that_computes_something_else_is_named(monkeypatch):
    model, inputs = _model()
    compile_layer = tuner.torch_kernels._compile

    def wrong(layer, target, config, packed_weight, libraries):
        kernel = compile_layer(layer, target, config, packed_weight, libraries)
        if layer.module != "head":
            return kernel
        relu = dataclasses.replace(layer.workload, epilogue="bias_relu")  # same signature, other result
        bad = Kernel(relu.with_weights(constant=packed_weight is not None), target, config)
        return dataclasses.replace(kernel, function=bad.executable.mod["main"])

    monkeypatch.setattr(tuner.torch_kernels, "_compile", wrong)
    with pytest.raises(ValueError, match="layer head"):
        optimize(model, inputs, _any_configs(model, inputs))


def test_a_saved_model_loads_its_kernels_without_compiling(optimized, tmp_path, monkeypatch):
    model, inputs, fast = optimized
    manifest = save_optimized(fast, tmp_path / "saved")
    saved = json.loads(manifest.read_text())
    assert saved["target"] == resolve_target("llvm").key and len(saved["kernels"]) == 7
    assert all((tmp_path / "saved" / k["library"]).is_file() for k in saved["kernels"])

    def no_compiling(*args, **kwargs):
        raise AssertionError("a saved kernel was compiled again")

    monkeypatch.setattr(tuner.torch_kernels, "Kernel", no_compiling)
    loaded = load_optimized(model, inputs, tmp_path / "saved")
    with torch.no_grad():
        torch.testing.assert_close(loaded(*inputs), fast(*inputs))


def test_kernels_saved_for_another_cpu_are_compiled_again_or_left_to_torch(optimized, tmp_path):
    model, inputs, fast = optimized
    manifest = save_optimized(fast, tmp_path / "saved")
    saved = json.loads(manifest.read_text())
    saved["target"] = "llvm -mcpu=znver1 -num-cores=2"
    manifest.write_text(json.dumps(saved))
    with pytest.warns(UserWarning, match="tuned for llvm -mcpu=znver1"):
        loaded = load_optimized(model, inputs, tmp_path / "saved")
    with torch.no_grad():
        torch.testing.assert_close(loaded(*inputs), model(*inputs), rtol=1e-3, atol=1e-4)


def test_bad_saves_and_loads_are_clear_errors(tmp_path):
    model, inputs = _model()
    with pytest.raises(ValueError, match="made by tuner.optimize"):
        save_optimized(torch.fx.symbolic_trace(model), tmp_path / "x")
    with pytest.raises(ValueError, match="holds no saved kernels"):
        load_optimized(model, inputs, tmp_path)


def test_every_layer_builds_for_cuda(tmp_path):
    """Compile-only: each layer kind of the model gets a CUDA kernel through the path optimize takes,
    and saves as a library holding its device code."""
    model, inputs = _model()
    target = resolve_target("cuda")
    suite = from_torch(model, inputs)
    configs = {e.workload.key: template_for(e.workload, target).space.sample(np.random.default_rng(0), 1)[0]
               for e in suite}
    for layer in suite.layers:
        kernel = tuner.torch_kernels._compile(layer, target, configs[layer.workload.key], None, {})
        assert kernel.output_shape == tuple(layer.workload.output_shapes[0])
        kernel.write_library(str(tmp_path / "kernel.so"))
        assert b"__global__" in (tmp_path / "kernel.so").read_bytes()


def test_inputs_on_another_device_than_the_target_are_a_clear_error():
    model, inputs = _model()
    with pytest.raises(ValueError, match="target cuda.*on a CUDA device"):
        optimize(model, inputs, _any_configs(model, inputs), target="cuda")


THREADS_SCRIPT = """
import os, warnings
import tvm
from search import resolve_target
from tuner.result import run_on_target_cores
if {started_before}:
    tvm.runtime.num_threads()  # something ran TVM code first: the pool has its default width
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    run_on_target_cores(resolve_target({{"kind": "llvm", "num-cores": {cores}}}))
print(tvm.runtime.num_threads(), len(caught))
"""


@pytest.mark.parametrize("started_before", [False, True])
def test_kernels_run_on_the_targets_cores(started_before):
    """TVM's pool takes half the logical CPUs by default (one thread on 2 vCPUs): in-process kernels
    must run on the target's cores, or say why they cannot."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "TVM_NUM_THREADS"}
    default = int(subprocess.run([sys.executable, "-c", "import tvm; print(tvm.runtime.num_threads())"], env=env,
                                 capture_output=True, text=True, check=True).stdout)
    cores = default + 1
    out = subprocess.run([sys.executable, "-c", THREADS_SCRIPT.format(started_before=started_before, cores=cores)],
                         env=env, capture_output=True, text=True, check=True).stdout.split()
    assert out == ([str(default), "1"] if started_before else [str(cores), "0"])
