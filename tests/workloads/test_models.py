"""`workloads.from_torch` and the model zoo: captures that agree with the committed suites, cover
the models' products and convolutions, fold what a workload fuses and leave the rest to torch."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
from torch import nn

from workloads import ModelSuite, conv2d, depthwise_conv2d, from_torch, load_suite, matmul
from workloads.models import SUITE_MODELS, ZOO, zoo_model


@pytest.fixture(scope="module")
def captures() -> dict[str, ModelSuite]:
    return {name: from_torch(*zoo_model(name), name=name) for name in ZOO}


@pytest.mark.parametrize("suite", sorted(SUITE_MODELS))
def test_each_committed_suite_is_the_capture_of_its_models(suite, captures):
    captured: Counter = Counter()
    for name in SUITE_MODELS[suite]:
        captured.update({e.workload.key: e.weight for e in captures[name]})
    committed = Counter({e.workload.key: e.weight for e in load_suite(suite)})
    assert committed == captured


@pytest.mark.parametrize("name", sorted(ZOO))
def test_the_zoo_is_covered_and_exported(name, captures):
    capture = captures[name]
    assert capture.method == "export"
    assert capture.coverage >= 0.95, capture.left_to_torch
    assert 0.9 < capture.coverage_of_all <= capture.coverage


def test_bert_has_separate_qkv_and_a_pooler(captures):
    weights = {e.workload.key: e.weight for e in captures["bert_base"]}
    assert weights[matmul(128, 768, 768, transpose_b=True, epilogue="bias", constant_weights=True).key] == 48
    assert weights[matmul(1, 768, 768, transpose_b=True, epilogue="bias", constant_weights=True).key] == 1


class SmallCNN(nn.Module):
    """Odd shapes, BatchNorm to fold, a grouped conv no workload takes, and a residual."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 10, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(10)
        self.depthwise = nn.Conv2d(10, 10, 3, stride=2, padding=1, groups=10)
        self.grouped = nn.Conv2d(10, 6, 1, groups=2)
        self.head = nn.Linear(6 * 4 * 4, 7)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv(x)))
        x = self.depthwise(x) + x[:, :, ::2, ::2]
        return self.head(torch.flatten(self.grouped(x), 1))


def test_a_users_cnn_folds_batchnorm_and_lists_what_stays_in_torch():
    suite = from_torch(SmallCNN(), (torch.randn(1, 3, 7, 7),), name="small")
    keys = {e.workload.key for e in suite}
    assert keys == {conv2d(1, 3, 7, 7, 10, 3, 3, padding=1, epilogue="bias_relu", constant_weights=True).key,
                    depthwise_conv2d(1, 10, 7, 7, 3, 3, stride=2, padding=1, epilogue="bias", constant_weights=True).key,
                    matmul(1, 7, 96, transpose_b=True, epilogue="bias", constant_weights=True).key}
    assert any(op.startswith("conv2d (1)") for op in suite.left_to_torch)  # the grouped conv
    assert not any(op.startswith(("batch_norm", "relu")) for op in suite.left_to_torch)  # folded
    assert 0 < suite.coverage < 1 and suite.name == "small"


class BranchyMLP(nn.Module):
    """Data-dependent control flow: `torch.export` refuses it, a trace follows the branch taken."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(13, 29)
        self.down = nn.Linear(29, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.up(x))
        if h.sum() > 0:
            h = h * 2
        return self.down(h)


class BranchyCNN(nn.Module):
    """The same refusal with a BatchNorm to fold, as the trace sees it (another ATen op)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn(self.conv(x)))
        return y if y.sum() > 0 else -y


def test_a_model_export_refuses_is_traced_instead():
    suite = from_torch(BranchyMLP(), (torch.randn(3, 13),))
    assert suite.method == "fx"
    assert {e.workload.key for e in suite} == {matmul(3, 29, 13, transpose_b=True, epilogue="bias_relu", constant_weights=True).key,
                                              matmul(3, 5, 29, transpose_b=True, epilogue="bias", constant_weights=True).key}
    assert suite.coverage == 1.0
    cnn = from_torch(BranchyCNN(), (torch.randn(1, 3, 6, 6),))
    assert cnn.method == "fx" and [e.workload.key for e in cnn] == [
        conv2d(1, 3, 6, 6, 4, 3, 3, epilogue="bias_relu", constant_weights=True).key]


class Products(nn.Module):
    """A layer's weight (a parameter) beside products of values computed from the input and of a
    buffer the model changes as it runs."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 6, bias=False)
        self.register_buffer("drift", torch.randn(6, 5))

    def forward(self, x: torch.Tensor, branch: bool = False) -> torch.Tensor:
        h = self.proj(x)
        out = h @ h.t() + (h @ torch.ones(6, 6)).sum() + (h @ self.drift).sum()
        self.drift[0].mul_(0.5)
        return -out if branch and out.sum() > 0 else out


@pytest.mark.parametrize("branch", [False, True], ids=["export", "fx"])
def test_only_the_models_own_weights_are_constant(branch):
    """A product whose right side is a parameter has constant weights (its kernel may take them
    laid out once); one whose right side is computed on every call, or is a buffer the model
    changes (through a view of it here), has not."""
    suite = from_torch(Products(), (torch.randn(4, 8), branch))
    assert suite.method == ("fx" if branch else "export")
    constant = {e.workload.key: e.workload.constant_weights for e in suite}
    assert constant == {matmul(4, 6, 8, transpose_b=True, constant_weights=True).key: True,
                        matmul(4, 4, 6, transpose_b=True).key: False, matmul(4, 6, 6).key: False,
                        matmul(4, 5, 6).key: False}
