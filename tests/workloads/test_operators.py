"""Tests of `workloads`: TVM kernels against the numpy references, torch, FLOPs, keys, suites, errors."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import tvm

import workloads
from workloads import batch_matmul, conv2d, depthwise_conv2d, from_key, load_suite, matmul, suite_names

REPO = Path(__file__).resolve().parents[2]
TARGET = tvm.target.Target({"kind": "llvm", "num-cores": 2})
EPILOGUES = (None, "bias", "relu", "bias_relu")
DTYPES = ("float32", "float16")

CONV_SHAPES = [  # (N, C, H, W, K, R, S, stride, padding, dilation)
    (1, 3, 9, 7, 5, 3, 3, 1, 1, 1),
    (2, 3, 11, 13, 4, 3, 5, 2, 3, 2),
    (1, 5, 7, 7, 3, 1, 1, 2, 0, 1),
]
DEPTHWISE_SHAPES = [  # (N, C, H, W, R, S, stride, padding, dilation)
    (1, 5, 9, 7, 3, 3, 1, 1, 1),
    (2, 3, 11, 13, 3, 5, 2, 3, 2),
]


def conv_of(shape, **kw):
    *sizes, stride, padding, dilation = shape
    return conv2d(*sizes, stride=stride, padding=padding, dilation=dilation, **kw)


def depthwise_of(shape, **kw):
    *sizes, stride, padding, dilation = shape
    return depthwise_conv2d(*sizes, stride=stride, padding=padding, dilation=dilation, **kw)


def run_tvm(w, inputs):
    """Compile the unscheduled PrimFunc for the CPU and run it on `inputs`."""
    ex = tvm.compile(w.prim_func(), target=TARGET)
    args = [tvm.runtime.tensor(x) for x in inputs]
    args += [tvm.runtime.tensor(np.zeros(s, w.dtype)) for s in w.output_shapes]
    ex(*args)
    return args[-1].numpy()


def check_against_reference(w, seed=0):
    inputs = w.random_inputs(seed)
    out = run_tvm(w, inputs)
    expected = w.reference(*inputs)
    assert out.shape == expected.shape and out.dtype == np.dtype(w.dtype)
    rtol, atol = w.tolerance
    np.testing.assert_allclose(out.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("transpose_b", [False, True])
def test_matmul_matches_reference(transpose_b, epilogue, dtype):
    check_against_reference(matmul(7, 13, 17, transpose_b=transpose_b, epilogue=epilogue, dtype=dtype))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("epilogue", ["gelu", "bias_gelu"])
def test_gelu_epilogues_match_reference(epilogue, dtype):
    """The kernel's GELU (a vectorizable erf) against the reference's exact one, over outputs
    spread wide enough to reach erf's clamped tails."""
    check_against_reference(matmul(7, 13, 64, transpose_b=True, epilogue=epilogue, dtype=dtype))
    check_against_reference(conv_of(CONV_SHAPES[0], epilogue=epilogue, dtype=dtype))


def test_the_gelu_reference_is_torchs():
    w = matmul(5, 6, 7, epilogue="bias_gelu")
    a, b, bias = w.random_inputs(0)
    expected = torch.nn.functional.gelu(torch.from_numpy(a @ b + bias).double()).numpy()
    np.testing.assert_allclose(w.reference(a, b, bias), expected, rtol=1e-6, atol=1e-7)


def test_gemv_matches_reference():
    check_against_reference(matmul(1, 9, 33, transpose_b=True, epilogue="bias"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("transpose_b", [False, True])
def test_batch_matmul_matches_reference(transpose_b, dtype):
    check_against_reference(batch_matmul(3, 7, 5, 11, transpose_b=transpose_b, dtype=dtype))


@pytest.mark.parametrize("shape", CONV_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv2d_matches_reference(layout, epilogue, dtype, shape):
    check_against_reference(conv_of(shape, layout=layout, epilogue=epilogue, dtype=dtype))


@pytest.mark.parametrize("shape", DEPTHWISE_SHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_depthwise_matches_reference(epilogue, dtype, shape):
    check_against_reference(depthwise_of(shape, epilogue=epilogue, dtype=dtype))


def torch_conv(w, inputs, groups=1):
    """The workload's output computed by torch in float64 (NHWC/HWIO converted to NCHW/OIHW)."""
    data, weight = (torch.from_numpy(x.astype(np.float64)) for x in inputs[:2])
    bias = torch.from_numpy(inputs[2].astype(np.float64)) if len(inputs) > 2 else None
    nhwc = getattr(w, "layout", "NCHW") == "NHWC"
    if nhwc:
        data, weight = data.permute(0, 3, 1, 2), weight.permute(3, 2, 0, 1)
    out = torch.nn.functional.conv2d(data, weight, bias, stride=w.stride, padding=w.padding,
                                     dilation=w.dilation, groups=groups)
    if w.epilogue in ("relu", "bias_relu"):
        out = torch.relu(out)
    return (out.permute(0, 2, 3, 1) if nhwc else out).numpy()


@pytest.mark.parametrize("shape", CONV_SHAPES)
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_conv2d_matches_torch(layout, epilogue, shape):
    w = conv_of(shape, layout=layout, epilogue=epilogue)
    inputs = w.random_inputs(1)
    np.testing.assert_allclose(w.reference(*inputs), torch_conv(w, inputs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", DEPTHWISE_SHAPES)
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_depthwise_matches_torch(epilogue, shape):
    w = depthwise_of(shape, epilogue=epilogue)
    inputs = w.random_inputs(1)
    np.testing.assert_allclose(w.reference(*inputs), torch_conv(w, inputs, groups=w.C), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("w, flops", [
    (matmul(7, 13, 17), 2 * 7 * 13 * 17),
    (matmul(7, 13, 17, transpose_b=True, epilogue="bias"), 2 * 7 * 13 * 17 + 7 * 13),
    (matmul(7, 13, 17, epilogue="relu"), 2 * 7 * 13 * 17 + 7 * 13),
    (matmul(7, 13, 17, epilogue="bias_relu"), 2 * 7 * 13 * 17 + 2 * 7 * 13),
    (batch_matmul(3, 7, 5, 11), 2 * 3 * 7 * 5 * 11),
    # OH = (11 + 6 - 5) // 2 + 1 = 7, OW = (13 + 6 - 9) // 2 + 1 = 6
    (conv2d(2, 3, 11, 13, 4, 3, 5, stride=2, padding=3, dilation=2, epilogue="bias_relu"),
     2 * 4 * 7 * 6 * (2 * 3 * 3 * 5 + 2)),
    # ResNet-50 stem: 224 -> 112
    (conv2d(1, 3, 224, 224, 64, 7, 7, stride=2, padding=3, layout="NHWC", epilogue="bias"),
     64 * 112 * 112 * (2 * 3 * 7 * 7 + 1)),
    (conv2d(1, 5, 7, 7, 3, 1, 1, stride=2), 3 * 4 * 4 * 2 * 5),
    # OH = (11 + 6 - 5) // 2 + 1 = 7, OW = (13 + 6 - 9) // 2 + 1 = 6
    (depthwise_conv2d(2, 3, 11, 13, 3, 5, stride=2, padding=3, dilation=2, epilogue="relu"),
     2 * 3 * 7 * 6 * (2 * 3 * 5 + 1)),
    (depthwise_conv2d(1, 32, 112, 112, 3, 3, padding=1), 32 * 112 * 112 * 2 * 9),
])
def test_flops(w, flops):
    assert w.flops == flops


CALLS = [  # constructor calls of pairwise different workloads
    "matmul(7, 13, 17)",
    "matmul(7, 13, 17, transpose_b=True)",
    "matmul(7, 13, 17, epilogue='bias')",
    "matmul(7, 13, 17, dtype='float16')",
    "matmul(7, 17, 13)",
    "batch_matmul(1, 7, 13, 17)",
    "batch_matmul(1, 7, 13, 17, transpose_b=True)",
    "conv2d(1, 3, 9, 9, 4, 3, 3)",
    "conv2d(1, 3, 9, 9, 4, 3, 3, padding=1)",
    "conv2d(1, 3, 9, 9, 4, 3, 3, stride=2)",
    "conv2d(1, 3, 9, 9, 4, 3, 3, dilation=2)",
    "conv2d(1, 3, 9, 9, 4, 3, 3, layout='NHWC')",
    "conv2d(1, 3, 9, 9, 4, 3, 3, epilogue='bias_relu', dtype='float16')",
    "depthwise_conv2d(1, 3, 9, 9, 3, 3)",
    "depthwise_conv2d(1, 3, 9, 9, 3, 3, epilogue='relu')",
    "matmul(4, 4, 4, transpose_b=True, constant_weights=True)",
    "conv2d(1, 3, 9, 9, 4, 3, 3, constant_weights=True)",
    "depthwise_conv2d(1, 3, 9, 9, 3, 3, constant_weights=True)",
]
DISTINCT = [eval(call, vars(workloads)) for call in CALLS]


def test_keys_distinct():
    assert len({w.key for w in DISTINCT}) == len(DISTINCT)


def test_constant_weights_are_a_weighted_operators_alone():
    """Operators with a weight operand switch it either way; attention's products have none."""
    layer = conv2d(1, 3, 9, 9, 4, 3, 3, epilogue="bias")
    assert layer.with_weights(constant=True).constant_weights
    assert layer.with_weights(constant=True).with_weights(constant=False) == layer
    scores = batch_matmul(2, 4, 4, 8)
    assert scores.with_weights(constant=True) is scores and not scores.constant_weights


@pytest.mark.parametrize("w", DISTINCT, ids=str)
def test_key_round_trip(w):
    assert from_key(w.key) == w
    assert from_key(w.key).key == w.key


def test_keys_stable_across_processes():
    code = f"from workloads import *\nfor w in [{', '.join(CALLS)}]: print(w.key)"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.split() == [w.key for w in DISTINCT]


def test_suite_names():
    assert suite_names() == ["bert_base", "llm_7b", "mobilenet_v2", "resnet50"]


@pytest.mark.parametrize("name", suite_names())
def test_suite_loads_and_builds(name):
    suite = load_suite(name)
    assert suite.name == name and suite.source and len(suite) > 0
    for entry in suite:
        assert isinstance(entry.weight, int) and entry.weight > 0, entry.layer
        assert entry.layer and entry.workload.flops > 0
        assert isinstance(entry.workload.prim_func(), tvm.tirx.PrimFunc)
    keys = [w.key for w in suite.workloads]
    assert len(set(keys)) == len(keys), "identical shapes should be merged"


def conv_weight(name, op):
    return sum(e.weight for e in load_suite(name) if e.workload.op == op)


def test_resnet50_layers():
    assert conv_weight("resnet50", "conv2d") == 53
    assert sum("downsample" in e.layer for e in load_suite("resnet50")) == 4
    (fc,) = [e.workload for e in load_suite("resnet50") if e.workload.op == "matmul"]
    assert (fc.M, fc.N, fc.K, fc.epilogue) == (1, 1000, 2048, "bias")
    # torchvision reports 4.09 GMACs (= 8.18 GFLOPs) for ResNet-50
    macs = sum(e.weight * e.workload.flops for e in load_suite("resnet50")) / 2
    assert macs == pytest.approx(4.09e9, rel=5e-3)


def test_mobilenet_v2_layers():
    assert conv_weight("mobilenet_v2", "depthwise_conv2d") == 17  # one per inverted-residual block


def test_bert_base_layers():
    suite = load_suite("bert_base")
    assert sum(e.weight for e in suite) == 97  # per layer: q, k, v, output, 2 attention products, 2 FFN; the pooler
    assert all(e.weight == 12 for e in suite if e.workload.op == "batch_matmul")


@pytest.mark.parametrize("make_it, match", [
    (lambda: matmul(0, 4, 4), "M must be a positive integer, got 0"),
    (lambda: matmul(4, -3, 4), "N must be a positive integer, got -3"),
    (lambda: batch_matmul(0, 4, 4, 4), "B must be a positive integer, got 0"),
    (lambda: conv2d(1, 3, 8, 8, 0, 3, 3), "K must be a positive integer, got 0"),
    (lambda: conv2d(1, 3, 8, 8, 4, 3, 3, stride=0), "stride must be a positive integer, got 0"),
    (lambda: conv2d(1, 3, 8, 8, 4, 3, 3, dilation=-1), "dilation must be a positive integer, got -1"),
    (lambda: depthwise_conv2d(1, 3, -8, 8, 3, 3), "H must be a positive integer, got -8"),
    (lambda: conv2d(1, 3, 4, 8, 4, 7, 3, padding=1), r"kernel R=7 .* larger than the padded input \(4 \+ 2\*1 = 6\)"),
    (lambda: conv2d(1, 3, 8, 4, 4, 3, 3, dilation=3), r"kernel S=3 \(dilation 3, span 7\) is larger"),
    (lambda: depthwise_conv2d(1, 3, 2, 2, 3, 3), r"kernel R=3 .* larger than the padded input"),
    (lambda: conv2d(1, 3, 8, 8, 4, 3, 3, layout="NWHC"), "layout must be one of .*, got 'NWHC'"),
    (lambda: matmul(4, 4, 4, dtype="bfloat16"), "dtype must be one of .*, got 'bfloat16'"),
    (lambda: depthwise_conv2d(1, 3, 8, 8, 3, 3, dtype="int8"), "dtype must be one of .*, got 'int8'"),
    (lambda: conv2d(1, 3, 8, 8, 4, 3, 3, epilogue="swish"), "epilogue must be one of .*, got 'swish'"),
    (lambda: matmul(4, 4, 4, epilogue="tanh"), "epilogue must be one of .*, got 'tanh'"),
    (lambda: conv2d(1, 3, 8, 8, 4, 3, 3, padding=-1), "padding must be a non-negative integer, got -1"),
    (lambda: depthwise_conv2d(1, 3, 8, 8, 3, 3, padding=-2), "padding must be a non-negative integer, got -2"),
    (lambda: matmul(4, 4, 4, constant_weights="yes"), "constant_weights must be True or False, got 'yes'"),
    (lambda: load_suite("vgg16"), "unknown suite 'vgg16'"),
    (lambda: workloads.make("softmax", N=4), "unknown operator 'softmax'"),
    (lambda: from_key("matmul 4x4x4"), "not a workload key: 'matmul 4x4x4'"),
])
def test_invalid_arguments(make_it, match):
    with pytest.raises(ValueError, match=match):
        make_it()
