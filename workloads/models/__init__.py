"""A model zoo in plain torch (random weights, no downloads): each entry builds a model in eval
mode and example inputs of the shapes the suites in `workloads/suites/` were captured at."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

Example = tuple["torch.nn.Module", tuple["torch.Tensor", ...]]

LLAMA_PROMPT = 128  # prefill tokens, and the cache a decode step attends to


def resnet50() -> Example:
    """ResNet-50 v1.5, batch 1, 224x224."""
    import torch

    from .resnet import ResNet50

    return ResNet50().eval(), (torch.randn(1, 3, 224, 224),)


def mobilenet_v2() -> Example:
    """MobileNet-V2, batch 1, 224x224."""
    import torch

    from .mobilenet import MobileNetV2

    return MobileNetV2().eval(), (torch.randn(1, 3, 224, 224),)


def bert_base() -> Example:
    """The BERT-base encoder and pooler, batch 1, 128 tokens."""
    import torch

    from .bert import BertModel

    return BertModel().eval(), (torch.randint(0, 30522, (1, 128)),)


def _llama(new: int, past: int) -> Example:
    import torch

    from .llama import LlamaDecoderLayer

    block = LlamaDecoderLayer().eval()
    cache = (1, block.heads, past, block.head_size)
    return block, (torch.randn(1, new, 4096), torch.randn(cache), torch.randn(cache))


def llama_7b_prefill() -> Example:
    """One Llama-2-7B decoder block reading a 128-token prompt."""
    return _llama(LLAMA_PROMPT, 0)


def llama_7b_decode() -> Example:
    """One Llama-2-7B decoder block making the next token after a 128-token prompt."""
    return _llama(1, LLAMA_PROMPT)


ZOO: dict[str, Callable[[], Example]] = {
    "resnet50": resnet50, "mobilenet_v2": mobilenet_v2, "bert_base": bert_base,
    "llama_7b_prefill": llama_7b_prefill, "llama_7b_decode": llama_7b_decode,
}

# The zoo models each committed suite is the capture of (weights added up over them).
SUITE_MODELS: dict[str, tuple[str, ...]] = {
    "resnet50": ("resnet50",), "mobilenet_v2": ("mobilenet_v2",), "bert_base": ("bert_base",),
    "llm_7b": ("llama_7b_prefill", "llama_7b_decode"),
}


def zoo_model(name: str) -> Example:
    """A zoo model with random weights (seeded) and its example inputs."""
    import torch

    if name not in ZOO:
        raise ValueError(f"unknown model {name!r}; the zoo has {', '.join(ZOO)}")
    torch.manual_seed(0)
    return ZOO[name]()
