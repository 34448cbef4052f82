"""Choosing the cost model a run starts from."""

from __future__ import annotations

from pathlib import Path

from .base import CostModel
from .lightgbm_ranker import LightGBMRanker
from .pretrained import has_pretrained, load_pretrained
from .torch_ranker import TorchRanker

MODELS = ("lightgbm", "torch")


def make_model(name: str, target_kind: str, pretrained: bool, seed: int) -> CostModel:
    """A fresh ranker by name ('lightgbm' starts from the shipped model for the target when asked
    and shipped), or one loaded from a saved model file (.txt: LightGBM, .pt: torch)."""
    if Path(name).suffix in (".txt", ".pt"):
        if not Path(name).is_file():
            raise ValueError(f"model file {name} does not exist")
        return LightGBMRanker.load(name, seed=seed) if name.endswith(".txt") else TorchRanker.load(name, seed=seed)
    if name == "lightgbm":
        if pretrained and has_pretrained(target_kind):
            return load_pretrained(target_kind, seed=seed)
        return LightGBMRanker(seed=seed)
    if name == "torch":
        return TorchRanker(seed=seed)
    raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)} or a model file (.txt, .pt)")
