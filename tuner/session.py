"""`Session`: the state of tuning one workload on one target, asked for configs and told results.

`tuner.loop.run` drives sessions against a measurer; batch scripts, device farms and notebooks
may drive one directly with `ask` / `tell`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from cost_model import CostModel, DraftThenVerify, FeatureExtractor, TrainingData, make_model
from cost_model.scoring import Extractor
from search import Config, TargetInfo, template_for
from search.records import ErrorKind, MeasureResult, RecordError, RecordStore, make_record, median_cost
from search.restricted import RestrictedSpace
from search.strategies import make_strategy
from workloads import Workload


class Session:
    """One workload on one target. Seeded: the same seed and measurements ask the same configs.

    Measured configs are never asked again, those in `records` (a resumed run) included; each
    result is saved to `records` once, as soon as it is observed.
    `model` and `training` may be shared between sessions (a suite's one cost model), and
    `shared_records` lets a records file hold other workloads too (a suite's one file), and
    `candidates` restricts the space to the given configs (replaying a record file), and
    `extractor` (configs -> feature rows) replaces the template's own feature extractor, e.g. with
    one whose rows were computed once for many replayed runs. `draft`: whether the draft model
    prunes candidates before the ranker scores them (default: where features are costly,
    `cost_model.scoring.prunes_by_default`).
    """

    def __init__(self, workload: Workload, target: Any = "llvm", *, strategy: str = "evolutionary",
                 model: str | CostModel = "lightgbm", pretrained: bool = True,
                 records: str | RecordStore | None = None, seed: int = 0, draft: bool | None = None,
                 exploration: float = 0.1, training: TrainingData | None = None, shared_records: bool = False,
                 candidates: Sequence[Config] | None = None, extractor: Extractor | None = None) -> None:
        if not isinstance(workload, Workload):
            raise TypeError(f"workload must be a workloads.Workload, got {type(workload).__name__}")
        if not 0 <= exploration <= 1:
            raise ValueError(f"exploration must be within [0, 1], got {exploration}")
        self.workload = workload
        self.template = template_for(workload, target)
        if candidates is not None:  # e.g. the recorded configs of a replayed run
            self.template.space = RestrictedSpace(self.template.space, candidates)
        self.target: TargetInfo = self.template.target
        self._host = self.target.host_facts()  # what each record says of the machine that measured it
        self.strategy = make_strategy(strategy)
        self.learned = strategy != "random"
        self.model: CostModel = make_model(model, self.target.kind, pretrained, seed) if isinstance(model, str) else model
        self.scorer = DraftThenVerify(self.template, self.model, extractor or FeatureExtractor(self.template),
                                      draft=draft) if self.learned else None
        self.exploration, self.shared_records = exploration, shared_records
        self.rng = np.random.default_rng(seed)
        self.store = records if isinstance(records, RecordStore) or records is None else RecordStore(records)
        self.training = training if training is not None else TrainingData()
        self.measured: dict[Config, float] = {}  # config -> latency (inf when failed)
        self.pending: set[Config] = set()  # asked, not observed yet: never asked again meanwhile
        self.trace: list[dict[str, Any]] = []
        self.round = 0
        self.started = time.monotonic()
        self._predicted: dict[Config, float] = {}
        self._resume()

    def _resume(self) -> None:
        if self.store is None:
            return
        others = self.store.check_compatible(self.workload.key, self.target.key)
        if others and not self.shared_records and self.workload.key not in self.store.workloads():
            raise RecordError(f"{self.store.path} holds records of {', '.join(sorted(others))}, not {self.workload.key}; "
                              "use another records file (tune_suite shares one file between its workloads)")
        configs = []
        for record in self.store.select(self.workload.key, self.target.key):
            # a record older than a knob of the space is completed with what it meant
            config = self.template.space.complete(Config.from_json(record["config"]))
            if config in self.measured or not self.template.space.is_valid(config):
                continue
            self.measured[config] = median_cost(record)
            configs.append(config)
        self._learn(configs)

    def _throughput(self, latency: float) -> float:
        return self.workload.flops / latency if np.isfinite(latency) and latency > 0 else 0.0

    @property
    def best_config(self) -> Config | None:
        ok = {c: latency for c, latency in self.measured.items() if np.isfinite(latency)}
        return min(ok, key=lambda c: (ok[c], c.id)) if ok else None

    @property
    def best_latency(self) -> float:
        return min(self.measured.values(), default=float("inf"))

    @property
    def exhausted(self) -> bool:
        """Whether the space has no config left to measure."""
        return not self.template.space.sample(self.rng, 1, exclude=self.measured)

    def ask(self, n: int) -> list[Config]:
        """Up to `n` configs to measure next, none measured or still being measured."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        exclude = set(self.measured) | self.pending
        if self.scorer is None:
            chosen = self.template.space.sample(self.rng, n, exclude=exclude)
        else:
            explore = int(round(n * self.exploration)) if self.measured else 0
            seeds = sorted((c for c, latency in self.measured.items() if np.isfinite(latency)),
                           key=lambda c: self.measured[c])[:16]
            chosen = self.strategy.propose(self.template.space, self.scorer, self.rng, n - explore,
                                           seeds=seeds, exclude=exclude)
            chosen += self.template.space.sample(self.rng, n - len(chosen), exclude=exclude | set(chosen))
            predicted: np.ndarray | list[float] = self.scorer(chosen) if chosen else []
            self._predicted.update(zip(chosen, map(float, predicted)))
        self.pending.update(chosen)
        return chosen

    def observe(self, config: Config, result: MeasureResult) -> None:
        """Take one finished measurement: saved at once (a crash or Ctrl-C later loses nothing),
        and a row of the trace."""
        if config in self.measured:
            raise ValueError(f"{config} of {self.workload.key} was measured already")
        if self.store is not None:
            predicted = self._predicted.get(config)
            extra: dict[str, Any] = {"round": self.round, "elapsed_s": round(time.monotonic() - self.started, 3),
                                     "build_s": round(result.build_s, 4), "run_s": round(result.run_s, 4)}
            if predicted is not None and np.isfinite(predicted):
                extra["predicted"] = predicted
            self.store.append(make_record(self.workload.key, self.target.key, config.to_json(), result,
                                          host=self._host, **extra))
        self.measured[config] = result.latency
        self.pending.discard(config)
        best = self.best_latency
        self.trace.append({
            "round": self.round, "config": config.to_json(), "predicted_score": self._predicted.get(config),
            "latency_s": result.latency if result.ok else None, "error": str(result.error),
            "best_latency_s": best if np.isfinite(best) else None,
            "best_gflops": self.workload.flops / best / 1e9 if np.isfinite(best) else 0.0,
            "elapsed_s": time.monotonic() - self.started, "build_s": result.build_s, "run_s": result.run_s,
        })

    def end_round(self, configs: Sequence[Config]) -> None:
        """Close a round whose configs were all observed: the cost model retrains on them too."""
        missing = [c for c in configs if c not in self.measured]
        if missing:
            raise ValueError(f"{len(missing)} of the round's configs were not observed")
        self._learn(list(configs))
        self.round += 1

    def tell(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Observe a batch's results and close the round."""
        if len(configs) != len(results):
            raise ValueError(f"{len(configs)} configs but {len(results)} results")
        for config, result in zip(configs, results):
            self.observe(config, result)
        self.end_round(configs)

    def _learn(self, configs: list[Config]) -> None:
        if not configs or self.scorer is None:
            return
        self.training.add(self.workload.key, self.scorer.features(configs),
                          [self._throughput(self.measured[c]) for c in configs])
        self.training.fit(self.model)
        ok = [c for c, latency in self.measured.items() if np.isfinite(latency)]
        self.scorer.judge(ok, [self._throughput(self.measured[c]) for c in ok])

    def errors(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self.trace:
            if row["error"] != ErrorKind.NONE.value:
                counts[row["error"]] = counts.get(row["error"], 0) + 1
        return counts
