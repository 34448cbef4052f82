"""`optimize`: a PyTorch model whose captured layers run the best kernels a records file holds.

The model is exported (`torch.export`) once per input set, and each node `workloads.from_torch`
covers is replaced, with the epilogue nodes folded into it, by a call of one `torch.library`
custom op, `autotune::kernel`, which runs that layer's compiled kernel on torch's own tensors (no
copies, the output allocated by torch). The op has a fake implementation, so the optimized module
still works under `torch.compile` and `torch.export`. Before it is handed back, every replaced
layer's output is compared with the original model's on the example inputs. A kernel whose config
packs a constant weight into a blocked layout takes it packed once, here, instead of packing it on
every call (BERT-base's FFN layers: 3.7 -> 2.7 ms), as the layer's workload (`constant_weights`)
was tuned. Kernels are compiled for static shapes:
`OptimizedModule` picks the graph made for the inputs' shapes and runs inputs it was not made for
in the original model.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from search import Config, PackedWeight, TargetInfo, resolve_target, template_for
from search.records import RecordStore
from workloads import Workload, from_key, input_sets
from workloads.capture import NO_TRAINING_BATCH_NORM, Layer, LayerMatcher, module_name, op_name, written_in_place

from .result import Kernel, aligned, run_on_target_cores

MANIFEST = "manifest.json"
RTOL, ATOL = 1e-3, 1e-4  # float32 sums in another order; ATOL is relative to a layer's largest value


@dataclass(frozen=True)
class CompiledKernel:
    """A layer's kernel, its function looked up once, the output it makes, and what saving it
    needs: its config and a way to write its shared library."""

    layer: str
    workload: Workload
    function: Any
    output_shape: tuple[int, ...]
    dtype: torch.dtype
    config: Config
    packed_weight: PackedWeight | None  # the input it takes packed, not as the model holds it
    write_library: Callable[[str], Any]


KERNELS: dict[str, CompiledKernel] = {}  # by kernel id: custom ops take strings and tensors only
_ids = itertools.count()


@torch.library.custom_op("autotune::kernel", mutates_args=())
def run_kernel(kernel_id: str, inputs: list[torch.Tensor]) -> torch.Tensor:
    """Run a registered kernel on contiguous, aligned views of `inputs` (copies only where a view
    is strided or misaligned) into a new torch tensor."""
    kernel = KERNELS[kernel_id]
    out = torch.empty(kernel.output_shape, dtype=kernel.dtype, device=inputs[0].device)
    kernel.function(*[aligned(x.contiguous()) for x in inputs], out)
    return out


@run_kernel.register_fake
def _(kernel_id: str, inputs: list[torch.Tensor]) -> torch.Tensor:
    kernel = KERNELS[kernel_id]
    return inputs[0].new_empty(kernel.output_shape, dtype=kernel.dtype)


def _constant(gm: torch.fx.GraphModule, node: Any) -> torch.Tensor:
    """The tensor a get_attr node reads (a weight or a buffer of the exported module)."""
    if node.op != "get_attr":
        raise ValueError(f"{node.name} is computed, not a constant of the model")
    value: Any = gm
    for part in str(node.target).split("."):
        value = getattr(value, part)
    return value


def _constant_or_none(gm: torch.fx.GraphModule, node: Any, mutated: set[str]) -> torch.Tensor | None:
    """The value of a get_attr node, or of a reshape of one; None for a value computed from the
    inputs or a buffer the model changes (named in `mutated`): a copy packed once would go stale."""
    if node.op == "get_attr":
        return None if str(node.target) in mutated else _constant(gm, node)
    if node.op == "call_function" and node.target is torch.ops.aten.reshape.default:
        value = _constant_or_none(gm, node.args[0], mutated)
        return value.reshape(node.args[1]) if value is not None else None
    return None


class _Rewriter:
    """Replaces one layer's nodes in the exported module's graph by a kernel call."""

    def __init__(self, gm: torch.fx.GraphModule, mutated: set[str]):
        self.gm, self.graph, self.mutated = gm, gm.graph, mutated
        self.buffers = 0

    def _reshape(self, node: Any, shape: Sequence[int]) -> Any:
        return self.graph.call_function(torch.ops.aten.reshape.default, (node, list(shape)))

    def _buffer(self, tensor: torch.Tensor) -> Any:
        name = f"_autotune_constant_{self.buffers}"
        self.buffers += 1
        self.gm.register_buffer(name, tensor.detach().clone())
        return self.graph.get_attr(name)

    def product_inputs(self, node: Any, workload: Workload) -> list[Any]:
        op = op_name(node)
        if op == "aten.linear.default":  # the weight is [N, K] already
            a, b, bias = node.args[0], node.args[1], node.args[2] if len(node.args) > 2 else None
        else:  # B^T arrives as a transpose of the tensor the kernel reads
            bias, a, b = node.args[:3] if op == "aten.addmm.default" else (None, *node.args[:2])
            b = b.args[0] if getattr(workload, "transpose_b", False) else b
        shapes = workload.input_shapes
        inputs = [self._reshape(a, shapes[0]), self._reshape(b, shapes[1])]
        return inputs + ([bias] if len(shapes) > 2 else [])

    def conv_inputs(self, node: Any, layer: Layer, workload: Workload) -> list[Any]:
        data, weight = node.args[0], node.args[1]
        bias = node.args[2] if len(node.args) > 2 else None
        norms = [n for n in node.users if n.name in layer.fused and "batch_norm" in op_name(n)]
        if norms:  # fold eval-mode BatchNorm: w * g / sqrt(v + eps), (b - m) * g / sqrt(v + eps) + beta
            norm = norms[0]
            gamma, beta, mean, var = (_constant(self.gm, n) for n in norm.args[1:5])
            eps = float(norm.args[6] if op_name(norm) == NO_TRAINING_BATCH_NORM else norm.args[7])
            scale = gamma / torch.sqrt(var + eps)
            w = _constant(self.gm, weight)
            b = _constant(self.gm, bias) if bias is not None else torch.zeros_like(mean)
            weight = self._buffer(w * scale.reshape(-1, *([1] * (w.dim() - 1))))
            bias = self._buffer((b - mean) * scale + beta)
        return [data, weight] + ([bias] if len(workload.input_shapes) > 2 else [])

    def replace(self, layer: Layer, kernels: "_Kernels") -> Any:
        """Put the kernel call where the layer's last fused node was, route that node's users to
        it and remove the layer's own nodes (an in-place ReLU would otherwise be kept). A weight
        the kernel reads packed is packed here, once, when the graph holds it as a constant."""
        nodes = {n.name: n for n in self.graph.nodes}
        node = nodes[layer.node]
        chain = [node] + [nodes[name] for name in layer.fused]
        last = chain[-1]
        with self.graph.inserting_before(last.next):  # new nodes in the order they are made
            if layer.workload.op in ("conv2d", "depthwise_conv2d"):
                inputs = self.conv_inputs(node, layer, layer.workload)
            else:
                inputs = self.product_inputs(node, layer.workload)
            packing = kernels.packed_weight(layer.workload)
            weight = _constant_or_none(self.gm, inputs[packing.input], self.mutated) if packing is not None else None
            if packing is not None and weight is not None:
                inputs[packing.input] = self._buffer(packing.pack(weight))
            kernel_id = kernels.register(layer, packing if weight is not None else None)
            call = self.graph.call_function(torch.ops.autotune.kernel.default, (kernel_id, inputs))
            out = self._reshape(call, tuple(int(d) for d in last.meta["val"].shape))
        last.replace_all_uses_with(out)
        for old in reversed(chain):
            if not old.users:
                self.graph.erase_node(old)
        return out


Best = Callable[[Workload], "Config | None"]  # the best config known for a workload, if any


def _best_in(records: str | RecordStore | Mapping[str, Config], target: TargetInfo) -> Best:
    """The best config `records` holds for a workload; for a layer with constant weights that has
    none, the best of the same operator tuned with its weights given on every call (by `tune` on
    the bare operator, or in records older than `constant_weights`): its configs fit both."""
    lookup: Callable[[str], Config | None]
    if isinstance(records, Mapping):
        lookup = records.get
    else:
        store = records if isinstance(records, RecordStore) else RecordStore(records)

        def lookup(key: str) -> Config | None:
            record = store.best(key, target.key)
            return Config.from_json(record["config"]) if record is not None else None

    def best(workload: Workload) -> Config | None:
        config = lookup(workload.key)
        if config is not None:
            return config
        bare = lookup(workload.with_weights(constant=False).key)
        return None if bare is None else template_for(workload, target).space.adopt(bare)

    return best


def _compile(layer: Layer, target: TargetInfo, config: Config, packed_weight: PackedWeight | None,
             libraries: Mapping[Any, str]) -> CompiledKernel:
    """The layer's kernel for `config`, taking `packed_weight` packed if given: loaded from a saved
    library, else compiled."""
    dtype = getattr(torch, layer.workload.dtype)
    shape = tuple(layer.workload.output_shapes[0])
    prepacked = packed_weight is not None
    saved = libraries.get((layer.workload.key, prepacked))
    name = layer.module or layer.node
    if saved is not None:
        import tvm

        return CompiledKernel(name, layer.workload, tvm.runtime.load_module(saved)["main"], shape, dtype, config,
                              packed_weight, lambda path: shutil.copyfile(saved, path))
    kernel = Kernel(layer.workload.with_weights(constant=prepacked), target, config)
    return CompiledKernel(name, layer.workload, kernel.executable.mod["main"], shape, dtype, config,
                          packed_weight, kernel.export)


class _Kernels:
    """The kernels of one `optimize` call, shared by its input sets: compiled once per layer kind
    and weight layout, registered once per layer for the custom op."""

    def __init__(self, best: Best, target: TargetInfo, libraries: Mapping[Any, str]) -> None:
        self.best, self.target, self.libraries = best, target, libraries
        self.configs: dict[Workload, Config | None] = {}
        self.layouts: dict[Workload, PackedWeight | None] = {}
        self.compiled: dict[tuple[str, bool], CompiledKernel] = {}

    def config(self, workload: Workload) -> Config | None:
        if workload not in self.configs:
            self.configs[workload] = self.best(workload)
        return self.configs[workload]

    def _replaced_config(self, workload: Workload) -> Config:
        config = self.config(workload)
        assert config is not None  # only layers with a config are replaced
        return config

    def packed_weight(self, workload: Workload) -> PackedWeight | None:
        """The input the layer kind's config reads packed, if any (its template made once)."""
        if workload not in self.layouts:
            self.layouts[workload] = template_for(workload, self.target).packed_weight(self._replaced_config(workload))
        return self.layouts[workload]

    def register(self, layer: Layer, packed_weight: PackedWeight | None) -> str:
        """A new kernel id for the layer's kernel (compiled on first use), for the custom op."""
        key = (layer.workload.key, packed_weight is not None)
        if key not in self.compiled:
            config = self._replaced_config(layer.workload)
            self.compiled[key] = _compile(layer, self.target, config, packed_weight, self.libraries)
        kernel_id = f"k{next(_ids)}"
        KERNELS[kernel_id] = self.compiled[key]
        return kernel_id


def _values(gm: torch.fx.GraphModule, inputs: Sequence[Any], names: set[str]) -> dict[str, torch.Tensor]:
    """The values the named nodes take when `gm` runs on `inputs`."""
    seen: dict[str, torch.Tensor] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            value = super().run_node(n)
            if n.name in names:
                seen[n.name] = value
            return value

    with torch.no_grad():
        Recorder(gm).run(*inputs)
    return seen


Signature = tuple[Any, ...]


def _signature(inputs: Sequence[Any]) -> Signature:
    """What a graph is made for: each tensor input's shape, dtype and device; other inputs' repr."""
    return tuple((tuple(x.shape), x.dtype, x.device.type) if isinstance(x, torch.Tensor) else repr(x)
                 for x in inputs)


class OptimizedModule(torch.nn.Module):
    """A model with its tuned layers running their kernels: one exported graph per input set it was
    optimized for, picked by the inputs' shapes, dtypes and devices. Inputs of another kind run the
    original model, all in torch (one warning per kind). Strided inputs are copied to contiguous
    memory before a kernel reads them."""

    def __init__(self, model: torch.nn.Module, graphs: Mapping[Signature, torch.fx.GraphModule], target: str,
                 kernels: Mapping[tuple[str, bool], CompiledKernel]) -> None:
        super().__init__()
        self.model = model
        self.graphs = torch.nn.ModuleList(graphs.values())
        self.signatures = {signature: index for index, signature in enumerate(graphs)}
        self.target = target  # the key of the target the kernels were compiled for
        self.kernels = dict(kernels)  # by workload key and whether the kernel takes its weight packed
        self._warned: set[Signature] = set()

    def forward(self, *inputs: Any) -> Any:
        index = self.signatures.get(_signature(inputs))
        if index is None:
            return self._untuned(*inputs)
        return self.graphs[index](*inputs)

    @torch.compiler.disable
    def _untuned(self, *inputs: Any) -> Any:
        signature = _signature(inputs)
        if signature not in self._warned:
            self._warned.add(signature)
            shapes = ", ".join(str(list(s[0])) if isinstance(s, tuple) else s for s in signature)
            warnings.warn(f"no kernels were made for inputs of shapes {shapes}: they run in torch (optimize "
                          "with these inputs among the example input sets to tune them)", stacklevel=3)
        return self.model(*inputs)


def optimize(model: torch.nn.Module, example_inputs: Sequence[Any],
             records: str | RecordStore | Mapping[str, Config] = "runs.jsonl", target: Any = "llvm"
             ) -> OptimizedModule:
    """`model` with every captured layer that `records` (a records file, or the best config by
    workload key) has a kernel for running that kernel, compiled once per layer kind; the rest,
    and layers with no kernel (a warning names them), stay in torch. `example_inputs` is one input
    set or a list of them (`workloads.input_sets`), e.g. one per sequence length: each gets its
    own kernels. No tuning. Raises `ValueError` naming the first layer whose output differs from
    the original model's on an input set. `save_optimized` keeps the result for `load_optimized`."""
    resolved = resolve_target(target)
    _warn_if_torch_spins()
    return _optimize(model, example_inputs, _best_in(records, resolved), resolved, {})


def _warn_if_torch_spins() -> None:
    """Tuned kernels and torch's ops take turns on the same cores; torch's OpenMP threads, by
    default, spin between ops and take the cores from the kernels (BERT-base on 2 cores: 591 ms a
    pass, 191 ms with them passive; torch eager 148 ms and 159 ms)."""
    if os.environ.get("OMP_WAIT_POLICY", "").upper() != "PASSIVE":
        warnings.warn("torch's OpenMP threads spin between ops and slow the tuned kernels down several times: "
                      "set OMP_WAIT_POLICY=PASSIVE in the environment before torch is imported", stacklevel=3)


def _optimize(model: torch.nn.Module, example_inputs: Sequence[Any], best: Best, resolved: TargetInfo,
              libraries: Mapping[Any, str]) -> OptimizedModule:
    run_on_target_cores(resolved)
    sets = input_sets(example_inputs)
    _check_devices(sets, resolved)
    model = model.eval()
    kernels = _Kernels(best, resolved, libraries)
    graphs = {_signature(inputs): _optimized_graph(model, inputs, kernels) for inputs in sets}
    missing = sorted(w.key for w, config in kernels.configs.items() if config is None)
    if missing:
        warnings.warn(f"no kernel recorded for {len(missing)} layer kind(s), left to torch: " + ", ".join(missing),
                      stacklevel=3)
    return OptimizedModule(model, graphs, resolved.key, kernels.compiled)


def _check_devices(sets: Sequence[tuple[Any, ...]], target: TargetInfo) -> None:
    """Kernels read their inputs where the target runs: a CUDA target needs CUDA tensors, a CPU one CPU tensors."""
    want = "cuda" if target.is_cuda else "cpu"
    for x in (x for inputs in sets for x in inputs if isinstance(x, torch.Tensor)):
        if x.device.type != want:
            raise ValueError(f"target {target.kind} needs the model and its inputs on "
                             f"{'a CUDA device (model.cuda(), x.cuda())' if target.is_cuda else 'the CPU'}, "
                             f"got an input on {x.device}")


def _optimized_graph(model: torch.nn.Module, inputs: tuple[Any, ...], kernels: _Kernels) -> torch.fx.GraphModule:
    """The model exported on one input set, its covered layers calling their kernels, checked."""
    try:
        exported = torch.export.export(model, inputs)
    except Exception as err:
        raise ValueError(f"optimize needs torch.export to capture {type(model).__name__}: "
                         f"{str(err).splitlines()[0]}") from None
    original = exported.module()
    gm = exported.module()
    matcher = LayerMatcher()
    layers = [replace(layer, module=module_name(node)) for node in list(gm.graph.nodes)
              if (layer := matcher.match(node)) is not None]
    replaced: dict[str, str] = {}  # output node of the original layer -> output node of its kernel
    mutated = {*exported.graph_signature.buffers_to_mutate.values(),  # buffers the model changes as it runs
               *(str(node.target) for node in written_in_place(gm.graph) if node.op == "get_attr")}
    rewriter = _Rewriter(gm, mutated)
    for layer in layers:
        if kernels.config(layer.workload) is None:
            continue
        last = layer.fused[-1] if layer.fused else layer.node
        replaced[last] = rewriter.replace(layer, kernels).name
    gm.graph.eliminate_dead_code()
    gm.recompile()
    _check(original, gm, inputs, replaced, {n.name: n for n in original.graph.nodes}, mutated)
    return gm


def save_optimized(module: OptimizedModule, directory: str | Path) -> Path:
    """Write an optimized module's kernels (shared libraries) and a JSON manifest naming their
    workloads, configs and target, so that `load_optimized` needs no tuning and no compiling."""
    if not isinstance(module, OptimizedModule):
        raise ValueError("save_optimized takes a module made by tuner.optimize")
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    kernels = []
    for index, ((key, prepacked), kernel) in enumerate(sorted(module.kernels.items())):
        library = f"kernel{index}.so"
        kernel.write_library(str(folder / library))
        kernels.append({"workload": key, "config": kernel.config.to_json(), "library": library,
                        "prepacked_weights": prepacked})
    manifest = folder / MANIFEST
    manifest.write_text(json.dumps({"schema": 1, "target": module.target, "kernels": kernels}, indent=1) + "\n")
    return manifest


def load_optimized(model: torch.nn.Module, example_inputs: Sequence[Any], directory: str | Path,
                   target: Any = "llvm") -> OptimizedModule:
    """`model` running the kernels `save_optimized` wrote, checked as `optimize` checks, on one
    input set or a list of them as `optimize` takes. Saved for
    another target (another CPU), the libraries are not loaded: a warning says so, and each kernel
    is compiled again here from its config where this target's space allows it, else left to torch."""
    folder = Path(directory)
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        kernels = manifest["kernels"]
        saved_for = manifest["target"]
        configs = {k["workload"]: Config.from_json(k["config"]) for k in kernels}
        libraries = {(k["workload"], bool(k.get("prepacked_weights"))): str(folder / k["library"]) for k in kernels}
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{folder} holds no saved kernels ({MANIFEST}: {err})") from None
    resolved = resolve_target(target)
    if saved_for != resolved.key:
        warnings.warn(f"{folder} was tuned for {saved_for}, not this target ({resolved.key}): its kernels are "
                      "compiled again here where their configs fit, the others are left to torch", stacklevel=2)
        configs = {key: c for key, c in configs.items() if template_for(from_key(key), resolved).space.is_valid(c)}
        libraries = {}
    return _optimize(model, example_inputs, lambda workload: configs.get(workload.key), resolved, libraries)


def _state_restorer(modules: Sequence[torch.nn.Module], mutated: set[str]) -> Callable[[], None]:
    """A function that puts the `mutated` buffers of `modules` back as they are now, in place (the
    modules share them with the model)."""
    saved = [(buffer, buffer.detach().clone()) for module in modules for name in mutated
             for buffer in [module.get_buffer(name)]]

    def restore() -> None:
        with torch.no_grad():
            for buffer, value in saved:
                buffer.copy_(value)

    return restore


def _check(original: torch.fx.GraphModule, optimized: torch.fx.GraphModule, inputs: Sequence[Any],
           replaced: dict[str, str], nodes: dict[str, Any], mutated: set[str]) -> None:
    """Each replaced layer's output against the original's, in graph order, then the outputs; every
    run from the same state of the buffers the model changes, which are left as they were."""
    restore = _state_restorer([original, optimized], mutated)
    expected = _values(original, inputs, set(replaced))
    restore()
    got = _values(optimized, inputs, set(replaced.values()))
    restore()
    for name in (n for n in nodes if n in replaced):
        want, have = expected[name], got[replaced[name]]
        if not torch.allclose(have, want, rtol=RTOL, atol=ATOL * float(want.abs().max())):
            error = float((have - want).abs().max())
            raise ValueError(f"the tuned kernel of layer {module_name(nodes[name])} (node {name}) differs from "
                             f"the original model's: max abs error {error:.3g}")
    with torch.no_grad():
        have = optimized(*inputs)
        restore()
        want = original(*inputs)
        restore()
    torch.testing.assert_close(have, want, rtol=RTOL, atol=RTOL)
