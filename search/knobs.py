"""Knobs: declarative, finite sets of values one schedule decision can take."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np


@lru_cache(maxsize=None)
def factorizations(extent: int, parts: int) -> tuple[tuple[int, ...], ...]:
    """Every ordered way to write `extent` as a product of `parts` positive factors."""
    if parts == 1:
        return ((extent,),)
    result: list[tuple[int, ...]] = []
    for first in range(1, extent + 1):
        if extent % first == 0:
            result.extend((first,) + rest for rest in factorizations(extent // first, parts - 1))
    return tuple(result)


@dataclass(frozen=True)
class Knob:
    """A named decision with a finite tuple of options."""

    name: str
    options: tuple[Any, ...] = field(repr=False)
    # what a config recorded before this knob existed meant (None: the knob was always there);
    # `Space.complete` fills it in, so that older records still name valid programs
    default: Any = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        if not self.options:
            raise ValueError(f"knob {self.name!r} has no options")

    def __len__(self) -> int:
        return len(self.options)

    def sample(self, rng: np.random.Generator) -> Any:
        return self.options[int(rng.integers(len(self.options)))]

    def mutate(self, value: Any, rng: np.random.Generator) -> Any:
        """A different value, preferring a nearby one (options are ordered small to large)."""
        if len(self.options) == 1:
            return value
        index = self.options.index(value) if value in self.options else 0
        if rng.random() < 0.5:
            step = int(rng.choice([-1, 1]))
            return self.options[min(max(index + step, 0), len(self.options) - 1)]
        return self.options[int(rng.integers(len(self.options)))]


@dataclass(frozen=True)
class ChoiceKnob(Knob):
    """One value from a list, e.g. the unroll depth from (0, 16, 64, 512)."""


@dataclass(frozen=True)
class OrderKnob(Knob):
    """One loop order (e.g. which spatial axis is innermost and vectorized) from those worth trying."""


@dataclass(frozen=True)
class PlacementKnob(Knob):
    """The loop level at which a cache stage is computed (0 = outermost tile level)."""


def split_knob(name: str, extent: int, parts: int, max_options: int = 4096, seed: int = 0) -> "SplitKnob":
    """All ordered factorizations of `extent` into `parts`, or a bounded, seeded sample of them."""
    options = factorizations(extent, parts)
    if len(options) > max_options:
        picks = np.random.default_rng(seed).choice(len(options), size=max_options, replace=False)
        options = tuple(options[i] for i in sorted(picks))
    return SplitKnob(name, options, extent=extent, parts=parts)


@dataclass(frozen=True)
class SplitKnob(Knob):
    """A loop of `extent` split into `parts` nested loops (outermost first)."""

    extent: int = 1
    parts: int = 1

    def mutate(self, value: Any, rng: np.random.Generator) -> Any:
        """Move one prime factor from one level to another: a small step in tile shape."""
        candidates = []
        for src, dst in itertools.permutations(range(self.parts), 2):
            for prime in _primes(value[src]):
                moved = list(value)
                moved[src] //= prime
                moved[dst] *= prime
                candidates.append(tuple(moved))
        candidates = [c for c in candidates if c in self._option_set]
        if not candidates:
            return super().mutate(value, rng)
        return candidates[int(rng.integers(len(candidates)))]

    @property
    def _option_set(self) -> frozenset[Any]:
        return _option_set(self.options)


@lru_cache(maxsize=256)
def _option_set(options: tuple[Any, ...]) -> frozenset[Any]:
    return frozenset(options)


@lru_cache(maxsize=4096)
def _primes(n: int) -> tuple[int, ...]:
    found: list[int] = []
    p = 2
    while p * p <= n:
        if n % p == 0:
            found.append(p)
            while n % p == 0:
                n //= p
        p += 1
    if n > 1:
        found.append(n)
    return tuple(found)
