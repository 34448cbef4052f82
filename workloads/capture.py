"""A PyTorch model's matrix products and convolutions as a suite of workloads to tune.

The model is captured as an ATen graph: with `torch.export`, or, where export fails, by tracing
one run of it on the example inputs. Every `linear`/`addmm`/`mm`/`bmm`/`matmul`/`conv2d` node whose shapes a
workload can express becomes one; the elementwise stages right after it that a workload fuses
(bias, eval-mode BatchNorm folded into a bias, ReLU or exact GELU) become its epilogue. Identical workloads are
merged, their count the weight. Anything else stays with torch, and is listed by name.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from .conv import conv2d, depthwise_conv2d
from .gemm import batch_matmul, matmul
from .suites import Suite, SuiteEntry
from .workload import Workload

if TYPE_CHECKING:
    import torch

Method = Literal["export", "fx"]

LINEAR = {"aten.linear.default"}
ADDMM = {"aten.addmm.default"}
MATMUL = {"aten.mm.default", "aten.bmm.default", "aten.matmul.default"}
CONV = {"aten.conv2d.default", "aten.convolution.default"}
BATCH_NORM = {"aten.batch_norm.default", "aten.native_batch_norm.default",
              "aten._native_batch_norm_legit_no_training.default"}
NO_TRAINING_BATCH_NORM = "aten._native_batch_norm_legit_no_training.default"  # no `training` argument
RELU = {"aten.relu.default", "aten.relu_.default"}
GELU = {"aten.gelu.default", "aten.gelu_.default"}
TRANSPOSE = {"aten.t.default", "aten.transpose.int", "aten.permute.default"}
RESHAPE = {"aten.reshape.default", "aten.view.default"}
CONSTANT = "autotune_constant"  # node.meta key: the placeholder holds a parameter or an unmutated buffer
GEMM_CONV = LINEAR | ADDMM | MATMUL | CONV
# Ops that move or create data but compute nothing: no FLOPs of their own.
NO_FLOPS = {"view", "reshape", "permute", "transpose", "t", "unsqueeze", "squeeze", "flatten", "select", "slice",
            "expand", "contiguous", "clone", "to", "_assert_tensor_metadata", "arange", "zeros", "zeros_like",
            "ones", "full", "embedding", "cat", "repeat", "dropout", "_to_copy", "detach", "alias", "lift_fresh_copy"}


@dataclass(frozen=True)
class Layer:
    """One captured node: the workload that computes it and the nodes folded into its epilogue."""

    node: str
    workload: Workload
    fused: tuple[str, ...] = ()
    module: str = ""  # the model's name for it, e.g. "layers.0.attention.query"


@dataclass(frozen=True)
class ModelSuite(Suite):
    """A `Suite` captured from a model, with what it covers: FLOPs of the captured layers against
    all matrix-product and convolution FLOPs (`coverage`) and against all FLOPs (`coverage_of_all`,
    counting one FLOP per output element of every other op)."""

    method: Method = "export"
    layers: tuple[Layer, ...] = ()
    left_to_torch: tuple[str, ...] = ()  # "op (count)" of every op kind that stays with torch
    covered_flops: int = 0
    gemm_conv_flops: int = 0
    total_flops: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def coverage(self) -> float:
        return self.covered_flops / self.gemm_conv_flops if self.gemm_conv_flops else 1.0

    @property
    def coverage_of_all(self) -> float:
        return self.covered_flops / self.total_flops if self.total_flops else 1.0


def _shape(node: Any) -> tuple[int, ...]:
    value = node.meta.get("val") if hasattr(node, "meta") else None
    return tuple(int(d) for d in value.shape) if value is not None and hasattr(value, "shape") else ()


def _dtype(node: Any) -> str:
    value = node.meta.get("val")
    return str(value.dtype).removeprefix("torch.") if value is not None and hasattr(value, "dtype") else ""


def op_name(node: Any) -> str:
    return str(node.target) if node.op == "call_function" else node.op


def _arg(node: Any, index: int, name: str, default: Any) -> Any:
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def module_name(node: Any) -> str:
    """The model's own name for the node: the path of the torch layer (`nn.Linear`, `nn.Conv2d`) that
    computes it, else the path of the module whose code does, with the node's name."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return str(node.name)
    path, kind = list(stack.values())[-1]
    if str(getattr(kind, "__module__", kind)).startswith("torch.nn"):
        return str(path)
    return f"{path}.{node.name}" if path else str(node.name)


def _single_user(node: Any, ops: set[str]) -> Any | None:
    users = list(node.users)
    return users[0] if len(users) == 1 and op_name(users[0]) in ops else None


def _training(norm: Any) -> bool:
    """Whether a batch-norm node normalizes by the batch (then it cannot be folded)."""
    return op_name(norm) != NO_TRAINING_BATCH_NORM and bool(_arg(norm, 5, "training", False))


def _uniform(values: Any, size: int = 2) -> int | None:
    """One int for a conv's stride/padding/dilation given as an int or as equal pairs."""
    items = [values] * size if isinstance(values, int) else list(values)
    return int(items[0]) if items and all(v == items[0] for v in items) else None


def _is_last_two_swap(node: Any) -> bool:
    """Whether a transpose-like node swaps exactly the last two dimensions of its input."""
    op, rank = op_name(node), len(_shape(node))
    if op == "aten.t.default":
        return True
    if op == "aten.transpose.int":
        dims = sorted(d % rank for d in node.args[1:3])
        return dims == [rank - 2, rank - 1]
    if op == "aten.permute.default":
        order = [d % rank for d in node.args[1]]
        return order == list(range(rank - 2)) + [rank - 1, rank - 2]
    return False


def written_in_place(graph: Any) -> set[Any]:
    """The nodes of `graph` whose tensors one of its ops writes in place (a buffer the model
    changes as it runs: `self.w.mul_(0.5)`, or export's `copy_` into it), seen through views."""
    written = set()
    for node in graph.nodes:
        schema = getattr(node.target, "_schema", None)
        if node.op != "call_function" or schema is None:
            continue
        values = [*zip(schema.arguments, node.args), *((a, node.kwargs[a.name]) for a in schema.arguments
                                                        if a.name in node.kwargs)]
        for argument, value in values:
            if argument.alias_info is not None and argument.alias_info.is_write and hasattr(value, "op"):
                while _is_view(value):
                    value = value.args[0]
                written.add(value)
    return written


def _is_view(node: Any) -> bool:
    """Whether a node's output aliases its first argument (a view of it)."""
    schema = getattr(node.target, "_schema", None)
    return (node.op == "call_function" and schema is not None and bool(schema.returns)
            and schema.returns[0].alias_info is not None and not schema.returns[0].alias_info.is_write)


def _is_constant(node: Any) -> bool:
    """Whether a node holds a constant of the model (a parameter or an unmutated buffer), seen
    through transposes and reshapes: a weight that a kernel may take in a layout of its own."""
    while op_name(node) in TRANSPOSE | RESHAPE:
        node = node.args[0]
    return node.op == "get_attr" or bool(node.meta.get(CONSTANT))


class LayerMatcher:
    """Turns supported nodes into workloads, folding the epilogues that follow them."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def epilogue(self, node: Any, bias: bool) -> tuple[str | None, tuple[str, ...], Any]:
        """(epilogue, fused node names, the node whose value the layer produces)."""
        fused: list[str] = []
        out = node
        norm = _single_user(out, BATCH_NORM)
        if norm is not None and not _training(norm):
            fused.append(norm.name)
            out, bias = norm, True
        activation = None
        relu, gelu = _single_user(out, RELU), _single_user(out, GELU)
        if gelu is not None and _arg(gelu, 1, "approximate", "none") != "none":
            gelu = None  # the tanh approximation stays in torch
        if (act := relu or gelu) is not None:
            fused.append(act.name)
            out, activation = act, "relu" if relu is not None else "gelu"
        kind = "_".join(part for part in ("bias" if bias else "", activation or "") if part) or None
        return kind, tuple(fused), out

    def linear(self, node: Any) -> Layer | None:
        x, w = node.args[0], node.args[1]
        bias = _arg(node, 2, "bias", None) is not None
        (N, K), leading = _shape(w), _shape(x)[:-1]
        epilogue, fused, _ = self.epilogue(node, bias)
        return Layer(node.name, matmul(math.prod(leading), N, K, transpose_b=True, epilogue=epilogue,
                                       constant_weights=_is_constant(w), dtype=_dtype(node)), fused)

    def addmm(self, node: Any) -> Layer | None:
        bias, a, b = node.args[:3]
        if len(_shape(bias)) != 1 or node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
            return None
        return self._product(node, a, b, bias=True)

    def product(self, node: Any) -> Layer | None:
        a, b = node.args[:2]
        return self._product(node, a, b, bias=False)

    def _product(self, node: Any, a: Any, b: Any, bias: bool) -> Layer | None:
        a_shape, b_shape = _shape(a), _shape(b)
        if len(a_shape) < 2 or len(b_shape) < 2:
            return None  # products with vectors stay in torch
        transposed = op_name(b) in TRANSPOSE and _is_last_two_swap(b)
        M, K = math.prod(a_shape[:-1]) if len(b_shape) == 2 else a_shape[-2], a_shape[-1]
        N = b_shape[-1]
        epilogue, fused, _ = self.epilogue(node, bias)
        if len(b_shape) == 2:
            return Layer(node.name, matmul(M, N, K, transpose_b=transposed, epilogue=epilogue,
                                           constant_weights=_is_constant(b), dtype=_dtype(node)), fused)
        if a_shape[:-2] != b_shape[:-2] or epilogue is not None:
            return None  # broadcast batches and fused batched epilogues stay in torch
        return Layer(node.name, batch_matmul(math.prod(a_shape[:-2]), a_shape[-2], N, K, transpose_b=transposed,
                                             dtype=_dtype(node)), fused)

    def conv(self, node: Any) -> Layer | None:
        x, w = node.args[0], node.args[1]
        bias = _arg(node, 2, "bias", None) is not None
        stride, padding, dilation = (_uniform(_arg(node, i, name, default)) for i, name, default in
                                     ((3, "stride", 1), (4, "padding", 0), (5, "dilation", 1)))
        if op_name(node) == "aten.convolution.default":
            if node.args[6] or any(node.args[7]):
                return None  # transposed convolution
            groups = node.args[8]
        else:
            groups = _arg(node, 6, "groups", 1)
        (N, C, H, W), (K, _, R, S) = _shape(x), _shape(w)
        if stride is None or padding is None or dilation is None or len(_shape(x)) != 4:
            return None
        epilogue, fused, _ = self.epilogue(node, bias)
        dtype, constant = _dtype(node), _is_constant(w)
        if groups == 1:
            return Layer(node.name, conv2d(N, C, H, W, K, R, S, stride=stride, padding=padding, dilation=dilation,
                                           epilogue=epilogue, constant_weights=constant, dtype=dtype), fused)
        if groups == C == K:
            return Layer(node.name, depthwise_conv2d(N, C, H, W, R, S, stride=stride, padding=padding,
                                                     dilation=dilation, epilogue=epilogue, constant_weights=constant,
                                                     dtype=dtype), fused)
        return None  # grouped convolutions stay in torch

    def match(self, node: Any) -> Layer | None:
        op = op_name(node)
        if _dtype(node) not in ("float32", "float16"):
            return None
        try:
            if op in LINEAR:
                return self.linear(node)
            if op in ADDMM:
                return self.addmm(node)
            if op in MATMUL:
                return self.product(node)
            if op in CONV:
                return self.conv(node)
        except ValueError as err:  # a shape no workload takes: the node stays in torch
            self.notes.append(f"{node.name}: {err}")
        return None


def _flops(node: Any) -> int:
    """FLOPs of a matrix product or convolution node, from its operand and output shapes."""
    op, out = op_name(node), _shape(node)
    if op in CONV:
        weight = _shape(node.args[1])
        return 2 * math.prod(out) * math.prod(weight[1:])
    a = _shape(node.args[1] if op in ADDMM else node.args[0])
    return 2 * math.prod(out) * (a[-1] if a else 1)


def _label(modules: list[str]) -> str:
    """A layer's name in a suite: the first module computing it, and how many more share its shape."""
    unique = list(dict.fromkeys(modules))
    return unique[0] + (f" (+{len(unique) - 1} more)" if len(unique) > 1 else "")


def _record(model: "torch.nn.Module", example_inputs: Sequence[Any]) -> Any:
    """Run the model once on the inputs and record every ATen op it dispatches, with the tensors
    it read and made, as an fx graph: a trace that follows whatever branch the inputs take."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves, tree_map

    graph = torch.fx.Graph()
    constants = {id(t) for t in (*model.parameters(), *model.buffers())}
    producers: dict[int, Any] = {}
    alive: list[torch.Tensor] = []  # keeps every tensor seen alive, so no id() is reused

    def node_of(value: Any) -> Any:
        if not isinstance(value, torch.Tensor):
            return value
        if id(value) not in producers:  # an input or a weight
            producers[id(value)] = graph.placeholder(f"tensor_{len(producers)}")
            producers[id(value)].meta.update({"val": value, CONSTANT: id(value) in constants})
            alive.append(value)
        return producers[id(value)]

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            node = graph.call_function(func, tree_map(node_of, args), tree_map(node_of, kwargs))
            tensors = [v for v in tree_leaves(out) if isinstance(v, torch.Tensor)]
            node.meta["val"] = tensors[0] if tensors else out
            for tensor in tensors:
                producers[id(tensor)] = node
                alive.append(tensor)
            return out

    with torch.no_grad(), Recorder():
        model(*example_inputs)
    for node in written_in_place(graph):
        node.meta[CONSTANT] = False
    return graph


def capture_graph(model: "torch.nn.Module", example_inputs: Sequence[Any]) -> tuple[Any, Method]:
    """The model's ATen graph (a `torch.fx.Graph` with shapes in `node.meta["val"]`) and how it was
    captured: `torch.export`, or, where export fails, a trace of one run on the inputs. The
    placeholders that hold the model's parameters and unmutated buffers are marked `CONSTANT`."""
    import torch

    model = model.eval()
    with torch.no_grad():
        try:
            program = torch.export.export(model, tuple(example_inputs))
        except Exception:  # export refuses much (data-dependent control flow, ...): trace instead
            return _record(model, example_inputs), "fx"
    signature = program.graph_signature
    mutated = set(signature.buffers_to_mutate.values())
    constants = {*signature.inputs_to_parameters, *signature.inputs_to_lifted_tensor_constants,
                 *(name for name, buffer in signature.inputs_to_buffers.items() if buffer not in mutated)}
    written = written_in_place(program.graph)
    for node in program.graph.nodes:
        if node.op == "placeholder":
            node.meta[CONSTANT] = node.name in constants and node not in written
    return program.graph, "export"


def input_sets(example_inputs: Sequence[Any]) -> list[tuple[Any, ...]]:
    """`example_inputs` as a list of input sets: one set (the model's arguments), or a list of sets
    (each a tuple or list of arguments, e.g. one per sequence length)."""
    items = list(example_inputs)
    if items and all(isinstance(item, (tuple, list)) for item in items):
        return [tuple(item) for item in items]
    return [tuple(items)]


@dataclass
class _Capture:
    """What one input set's graph holds."""

    method: Method
    layers: list[Layer]
    left: Counter[str]
    covered: int = 0
    gemm_conv: int = 0
    other: int = 0


def _capture(model: "torch.nn.Module", inputs: Sequence[Any], matcher: LayerMatcher) -> _Capture:
    graph, method = capture_graph(model, inputs)
    capture = _Capture(method, [], Counter())
    fused_away: set[str] = set()
    for node in (n for n in graph.nodes if n.op == "call_function"):
        layer = matcher.match(node) if op_name(node) in GEMM_CONV else None
        if op_name(node) in GEMM_CONV:
            flops = _flops(node)
            capture.gemm_conv += flops
            if layer is not None:
                capture.covered += flops
                capture.layers.append(replace(layer, module=module_name(node)))
                fused_away.update(layer.fused)
                continue
        if node.name not in fused_away:
            kind = op_name(node).removeprefix("aten.").split(".")[0]
            capture.left[kind] += 1
            computes = kind not in NO_FLOPS and _dtype(node).startswith("float")
            capture.other += math.prod(_shape(node)) if computes else 0
    return capture


def from_torch(model: "torch.nn.Module", example_inputs: Sequence[Any], name: str | None = None) -> ModelSuite:
    """The suite of `model`'s tunable layers on `example_inputs` (eval mode), with its coverage.
    `example_inputs` may be a list of input sets (see `input_sets`): every set's layers join the
    suite, a layer's weight counting its occurrences over one pass of each set. Unsupported layers
    are never an error: they stay in torch and are listed."""
    matcher = LayerMatcher()
    captures = [_capture(model, inputs, matcher) for inputs in input_sets(example_inputs)]
    layers = [layer for capture in captures for layer in capture.layers]
    left = sum((capture.left for capture in captures), Counter[str]())
    covered, gemm_conv = sum(c.covered for c in captures), sum(c.gemm_conv for c in captures)
    method: Method = "fx" if any(c.method == "fx" for c in captures) else "export"
    counts = Counter(layer.workload for layer in layers)
    modules: dict[Workload, list[str]] = {}
    for layer in layers:
        modules.setdefault(layer.workload, []).append(layer.module)
    entries = tuple(SuiteEntry(w, n, _label(modules[w])) for w, n in counts.items())
    title = name or type(model).__name__
    sets = f" on {len(captures)} input sets" if len(captures) > 1 else ""
    return ModelSuite(title, f"captured from {type(model).__name__} with {method}{sets}", entries, method=method,
                      layers=tuple(layers), left_to_torch=tuple(f"{op} ({n})" for op, n in left.most_common()),
                      covered_flops=covered, gemm_conv_flops=gemm_conv,
                      total_flops=gemm_conv + sum(c.other for c in captures), notes=tuple(matcher.notes))
