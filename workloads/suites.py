"""Suites of real model layers, each layer with its weight (occurrences per forward pass)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .registry import make
from .workload import Workload

SUITE_DIR = Path(__file__).parent / "suites"


@dataclass(frozen=True)
class SuiteEntry:
    workload: Workload
    weight: int
    layer: str


@dataclass(frozen=True)
class Suite:
    name: str
    source: str
    entries: tuple[SuiteEntry, ...]

    def __iter__(self) -> Iterator[SuiteEntry]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def workloads(self) -> list[Workload]:
        return [e.workload for e in self.entries]


def suite_names() -> list[str]:
    return sorted(p.stem for p in SUITE_DIR.glob("*.json"))


def load_suite(name: str) -> Suite:
    """Load `workloads/suites/<name>.json`: {"name", "source", "layers": [{"layer", "op", "weight", params...}]}."""
    path = SUITE_DIR / f"{name}.json"
    if not path.is_file():
        raise ValueError(f"unknown suite {name!r}; known: {', '.join(suite_names())}")
    data = json.loads(path.read_text())
    entries = []
    for layer in data["layers"]:
        params = dict(layer)
        label, op, weight = params.pop("layer"), params.pop("op"), params.pop("weight")
        entries.append(SuiteEntry(make(op, **params), int(weight), label))
    return Suite(data["name"], data["source"], tuple(entries))
