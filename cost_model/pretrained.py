"""The shipped models, trained on the committed dataset of measured CPU candidates."""

from __future__ import annotations

from pathlib import Path

from .lightgbm_ranker import LightGBMRanker

PRETRAINED_DIR = Path(__file__).parent / "pretrained"


def pretrained_path(target_kind: str) -> Path:
    return PRETRAINED_DIR / f"lightgbm-{target_kind}.txt"


def has_pretrained(target_kind: str) -> bool:
    return pretrained_path(target_kind).is_file()


def load_pretrained(target_kind: str = "llvm", **params) -> LightGBMRanker:
    """The shipped LightGBM ranker for `target_kind` ('llvm'), ready to predict and keep learning."""
    path = pretrained_path(target_kind)
    if not path.is_file():
        shipped = ", ".join(sorted(p.stem.split("-", 1)[1] for p in PRETRAINED_DIR.glob("lightgbm-*.txt")))
        raise ValueError(f"no pretrained model for target {target_kind!r}; shipped: {shipped or 'none'}")
    return LightGBMRanker.load(path, **params)
