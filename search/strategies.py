"""Search strategies: walk a space on a scoring function (the cost model), propose what to measure.

Each strategy's `propose(space, score, rng, n, seeds, exclude)` returns up to `n` distinct
configs, best first, none in `exclude`. `score(configs) -> np.ndarray` (higher is better) is
called on batches; configs it scores -inf are treated as pruned. Strategies keep no state
between calls, so the same rng state, seeds and scores give the same proposals.
"""

from __future__ import annotations

from typing import Callable, Iterable, Protocol, Sequence

import numpy as np

from .config import Config
from .space import Space

Score = Callable[[Sequence[Config]], np.ndarray]


class Strategy(Protocol):
    """What every strategy is: a name, and `propose` as the module's docstring says."""

    name: str

    def propose(self, space: Space, score: Score, rng: np.random.Generator, n: int,
                seeds: Sequence[Config] = (), exclude: Iterable[Config] = ()) -> list[Config]: ...


def _best_distinct(scored: dict[Config, float], n: int, exclude: set[Config]) -> list[Config]:
    ranked = sorted((c for c in scored if c not in exclude and np.isfinite(scored[c])),
                    key=lambda c: (-scored[c], c.id))
    return ranked[:n]


class RandomSearch:
    """Uniform random configs, ignoring the score: the baseline every learned strategy must beat."""

    name = "random"

    def propose(self, space: Space, score: Score, rng: np.random.Generator, n: int,
                seeds: Sequence[Config] = (), exclude: Iterable[Config] = ()) -> list[Config]:
        return space.sample(rng, n, exclude=exclude)


class SimulatedAnnealing:
    """Parallel annealing chains from the best measured configs and random starts."""

    name = "annealing"

    def __init__(self, *, chains: int = 64, steps: int = 8, start_temperature: float = 1.0) -> None:
        self.chains, self.steps, self.start_temperature = chains, steps, start_temperature

    def propose(self, space: Space, score: Score, rng: np.random.Generator, n: int,
                seeds: Sequence[Config] = (), exclude: Iterable[Config] = ()) -> list[Config]:
        exclude = set(exclude)
        starts = list(seeds)[: self.chains // 2]
        starts += space.sample(rng, self.chains - len(starts))
        current = starts
        current_scores = np.asarray(score(current), dtype=float)
        scored = dict(zip(current, current_scores))
        for step in range(self.steps):
            temperature = self.start_temperature * (1 - step / self.steps) + 1e-3
            moves = [(space.neighbors(c, rng, 1) or [c])[0] for c in current]
            fresh = [m for m in dict.fromkeys(moves) if m not in scored]
            for config, value in zip(fresh, np.asarray(score(fresh), dtype=float) if fresh else []):
                scored[config] = value
            new_scores = np.array([scored[m] for m in moves])
            spread = np.nanstd(current_scores[np.isfinite(current_scores)]) if np.isfinite(current_scores).any() else 1.0
            with np.errstate(invalid="ignore"):  # -inf vs -inf (both pruned) is no step at all
                delta = np.nan_to_num((new_scores - current_scores) / (temperature * (spread or 1.0)), nan=0.0)
            accept = (new_scores >= current_scores) | (rng.random(len(moves)) < np.exp(np.minimum(delta, 0)))
            current = [m if a else c for m, c, a in zip(moves, current, accept)]
            current_scores = np.where(accept, new_scores, current_scores)
        return _best_distinct(scored, n, exclude)


class Evolutionary:
    """A population evolved by tournament selection, crossover and mutation (neighbors)."""

    name = "evolutionary"

    def __init__(self, *, population: int = 128, generations: int = 4, mutation_rate: float = 0.6) -> None:
        self.population, self.generations, self.mutation_rate = population, generations, mutation_rate

    def propose(self, space: Space, score: Score, rng: np.random.Generator, n: int,
                seeds: Sequence[Config] = (), exclude: Iterable[Config] = ()) -> list[Config]:
        exclude = set(exclude)
        members = list(dict.fromkeys(list(seeds)[: self.population // 2]))
        members += space.sample(rng, self.population - len(members), exclude=members)
        scored = dict(zip(members, np.asarray(score(members), dtype=float)))
        for _ in range(self.generations):
            fitness = np.array([scored[m] for m in members])
            fitness = np.where(np.isfinite(fitness), fitness, -1e30)
            children = []
            for _ in range(self.population):
                a, b = (members[max(rng.choice(len(members), 2), key=lambda i: fitness[i])] for _ in range(2))
                child = space.crossover(a, b, rng)
                if rng.random() < self.mutation_rate:
                    child = (space.neighbors(child, rng, 1) or [child])[0]
                children.append(child)
            fresh = [c for c in dict.fromkeys(children) if c not in scored]
            for config, value in zip(fresh, np.asarray(score(fresh), dtype=float) if fresh else []):
                scored[config] = value
            pool = list(dict.fromkeys(members + children))
            pool.sort(key=lambda c: (-(scored[c] if np.isfinite(scored[c]) else -1e30), c.id))
            members = pool[: self.population]
        return _best_distinct(scored, n, exclude)


STRATEGIES: dict[str, Callable[[], Strategy]] = {"random": RandomSearch, "annealing": SimulatedAnnealing,
                                                 "evolutionary": Evolutionary}


def make_strategy(name: str) -> Strategy:
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    return STRATEGIES[name]()
