"""`Space`: an ordered set of knobs and the validity rules its configs must pass."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from .config import Config
from .knobs import Knob

Rule = Callable[[Config], "str | None"]  # returns why a config is invalid, or None


class InvalidConfig(ValueError):
    """A config that breaks a rule of its space, or cannot be applied to its workload."""


@dataclass(frozen=True)
class Space:
    knobs: tuple[Knob, ...]
    rules: tuple[Rule, ...] = ()

    def __post_init__(self) -> None:
        names = [k.name for k in self.knobs]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate knob names in {names}")

    @property
    def names(self) -> list[str]:
        return [k.name for k in self.knobs]

    def knob(self, name: str) -> Knob:
        for knob in self.knobs:
            if knob.name == name:
                return knob
        raise KeyError(f"no knob {name!r}; knobs: {', '.join(self.names)}")

    @property
    def size(self) -> int:
        """Number of knob combinations, before the validity rules."""
        return math.prod(len(k) for k in self.knobs)

    def complete(self, config: Config) -> Config:
        """`config` with the defaults of the knobs it predates (see `Knob.default`) filled in."""
        missing = {k.name: k.default for k in self.knobs if k.default is not None and k.name not in config}
        return Config({**config, **missing}) if missing else config

    def adopt(self, config: Config) -> Config:
        """`config`, from a space that has knobs this one lacks (the same operator with its weights
        given on every call, where the kernel chooses where to pack them), without those knobs."""
        extra = set(config) - set(self.names)
        return Config({k: v for k, v in config.items() if k not in extra}) if extra else config

    def violation(self, config: Config) -> str | None:
        """Why `config` is not in this space, or None when it is."""
        config = self.complete(config)
        if set(config) != set(self.names):
            return f"config knobs {sorted(config)} do not match the space's {sorted(self.names)}"
        for knob in self.knobs:
            if config[knob.name] not in knob.options:
                return f"{knob.name}={config[knob.name]!r} is not one of the knob's options"
        for rule in self.rules:
            reason = rule(config)
            if reason:
                return reason
        return None

    def is_valid(self, config: Config) -> bool:
        return self.violation(config) is None

    def check(self, config: Config) -> Config:
        """`config`, completed (`complete`), if it is in this space, else `InvalidConfig`."""
        reason = self.violation(config)
        if reason:
            raise InvalidConfig(reason)
        return self.complete(config)

    def random_config(self, rng: np.random.Generator, attempts: int = 20000) -> Config:
        """One valid config, drawn uniformly by rejection."""
        for _ in range(attempts):
            config = Config({k.name: k.sample(rng) for k in self.knobs})
            if self.is_valid(config):
                return config
        raise InvalidConfig(f"no valid config found in {attempts} random draws; the rules may be too strict")

    def sample(self, rng: np.random.Generator, n: int, exclude: Iterable[Config] = ()) -> list[Config]:
        """Up to `n` distinct valid configs not in `exclude` (fewer only if the space runs out)."""
        seen = set(exclude)
        found: list[Config] = []
        misses = 0
        while len(found) < n and misses < 20 * n + 100:
            config = self.random_config(rng)
            if config in seen:
                misses += 1
                continue
            seen.add(config)
            found.append(config)
        return found

    def neighbors(self, config: Config, rng: np.random.Generator, n: int = 8) -> list[Config]:
        """Up to `n` distinct valid configs that differ from `config` in one or two knobs."""
        config = self.complete(config)
        found: dict[Config, None] = {}
        for _ in range(20 * n):
            if len(found) >= n:
                break
            changed = dict(config)
            count = 1 if rng.random() < 0.7 or len(self.knobs) == 1 else 2
            for index in rng.choice(len(self.knobs), size=count, replace=False):
                knob = self.knobs[int(index)]
                changed[knob.name] = knob.mutate(changed[knob.name], rng)
            candidate = Config(changed)
            if candidate != config and self.is_valid(candidate):
                found[candidate] = None
        return list(found)

    def crossover(self, a: Config, b: Config, rng: np.random.Generator) -> Config:
        """A valid child taking each knob from one parent at random (a parent if none is valid)."""
        a, b = self.complete(a), self.complete(b)
        for _ in range(20):
            child = Config({name: (a if rng.random() < 0.5 else b)[name] for name in self.names})
            if self.is_valid(child):
                return child
        return a if rng.random() < 0.5 else b

    def estimate_valid(self, rng: np.random.Generator, draws: int = 4000) -> float:
        """Estimated number of valid configs: size times the valid fraction of uniform draws."""
        valid = sum(self.is_valid(Config({k.name: k.sample(rng) for k in self.knobs})) for _ in range(draws))
        return self.size * valid / draws

