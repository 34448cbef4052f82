"""What to tune: operators with their numpy references and FLOP counts, and suites of model layers."""

from .capture import Layer, ModelSuite, from_torch, input_sets
from .conv import Conv2d, DepthwiseConv2d, conv2d, depthwise_conv2d
from .gemm import BatchMatmul, Matmul, batch_matmul, matmul
from .registry import OPERATORS, from_key, make
from .suites import Suite, SuiteEntry, load_suite, suite_names
from .workload import Workload

__all__ = [
    "from_torch", "input_sets", "ModelSuite", "Layer",
    "Workload", "Matmul", "BatchMatmul", "Conv2d", "DepthwiseConv2d",
    "matmul", "batch_matmul", "conv2d", "depthwise_conv2d",
    "OPERATORS", "make", "from_key", "Suite", "SuiteEntry", "load_suite", "suite_names",
]
