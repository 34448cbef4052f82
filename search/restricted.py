"""A space cut down to a given set of configs, e.g. those a record file holds, for replayed runs."""

from __future__ import annotations

from typing import Iterable

import numpy as np

from .config import Config
from .space import Space


class RestrictedSpace(Space):
    """Only `allowed` configs are valid; neighbors are the allowed configs nearest in knob values."""

    # set in __init__ (the dataclass is frozen): the configs, as a set, and their knob values' hashes
    allowed: tuple[Config, ...]
    _members: frozenset[Config]
    _matrix: np.ndarray

    def __init__(self, base: Space, allowed: Iterable[Config]) -> None:
        allowed = tuple(dict.fromkeys(c for c in allowed if base.is_valid(c)))
        if not allowed:
            raise ValueError("no allowed config is valid in the base space")
        super().__init__(base.knobs, base.rules)
        object.__setattr__(self, "allowed", allowed)
        object.__setattr__(self, "_members", frozenset(allowed))
        object.__setattr__(self, "_matrix", np.array([[hash(base.complete(c)[n]) for n in self.names]
                                                                for c in allowed]))

    @property
    def size(self) -> int:
        return len(self.allowed)

    def violation(self, config: Config) -> str | None:
        return None if config in self._members else "config is not among the allowed ones"

    def random_config(self, rng: np.random.Generator, attempts: int = 1000) -> Config:
        return self.allowed[int(rng.integers(len(self.allowed)))]

    def sample(self, rng: np.random.Generator, n: int, exclude: Iterable[Config] = ()) -> list[Config]:
        exclude = set(exclude)
        left = [c for c in self.allowed if c not in exclude]
        picks = rng.permutation(len(left))[:n]
        return [left[i] for i in picks]

    def neighbors(self, config: Config, rng: np.random.Generator, n: int = 8) -> list[Config]:
        """The allowed configs differing from `config` in the fewest knobs (random among ties)."""
        row = np.array([hash(self.complete(config)[name]) for name in self.names])
        distance = (self._matrix != row).sum(axis=1).astype(float) + rng.random(len(self.allowed)) * 0.5
        order = np.argsort(distance)
        return [self.allowed[i] for i in order if self.allowed[i] != config][:n]

    def crossover(self, a: Config, b: Config, rng: np.random.Generator) -> Config:
        full_a, full_b = self.complete(a), self.complete(b)
        child = Config({name: (full_a if rng.random() < 0.5 else full_b)[name] for name in self.names})
        return child if child in self._members else self.neighbors(child, rng, 1)[0] if len(self.allowed) > 1 else a
