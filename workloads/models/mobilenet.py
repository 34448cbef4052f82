"""MobileNet-V2, as torchvision defines it (`torchvision/models/mobilenetv2.py`), after Sandler et
al. 2018, "MobileNetV2: Inverted Residuals and Linear Bottlenecks", arXiv:1801.04381, Table 2.
Written out here because torchvision's wheel does not load beside the CPU build of torch."""

from __future__ import annotations

import torch
from torch import nn

# expansion t, output channels c, repeats n, first stride s (the paper's Table 2)
SETTINGS = ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1))


def conv_bn_relu6(inp: int, out: int, kernel: int = 3, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(inp, out, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(out), nn.ReLU6(inplace=True))


class InvertedResidual(nn.Module):
    def __init__(self, inp: int, out: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = inp * expand_ratio
        self.use_residual = stride == 1 and inp == out
        layers: list[nn.Module] = [conv_bn_relu6(inp, hidden, kernel=1)] if expand_ratio != 1 else []
        layers += [conv_bn_relu6(hidden, hidden, stride=stride, groups=hidden),
                   nn.Conv2d(hidden, out, 1, bias=False), nn.BatchNorm2d(out)]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_residual else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int = 1000) -> None:
        super().__init__()
        features: list[nn.Module] = [conv_bn_relu6(3, 32, stride=2)]
        channels = 32
        for t, c, n, s in SETTINGS:
            for index in range(n):
                features.append(InvertedResidual(channels, c, s if index == 0 else 1, t))
                channels = c
        features.append(conv_bn_relu6(channels, 1280, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))
