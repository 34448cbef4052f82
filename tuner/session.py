"""`Session`: the tuning loop driven from outside, one `ask` / `tell` pair per measured batch.

`tune()` is a thin loop over it; batch scripts, device farms and notebooks drive it directly.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from cost_model import FeatureExtractor, draft_score
from cost_model.metrics import group_metrics
from search import Config, template_for, target_key
from search.restricted import RestrictedSpace
from search.strategies import make_strategy
from workloads import Workload

from .measure_result import ErrorKind, MeasureResult
from .models import make_model
from .records import RecordError, RecordStore, make_record
from .training import TrainingData

DRAFT_KEEP = 0.3  # fraction of the draft model's ranking that the learned model scores (features cost most)
DRAFT_TRUST = 0.2  # the draft prunes that hard while its ranking of this workload's measurements agrees this well
DRAFT_KEEP_DOUBTED = 0.6  # and keeps this fraction when it does not (Spearman below DRAFT_TRUST)
DRAFT_JUDGED_AFTER = 8  # measured configs before the draft's agreement is judged


class Session:
    """One workload on one target. Seeded: the same seed and measurements ask the same configs.

    Measured configs are never asked again, those in `records` (a resumed run) included.
    `model` and `training` may be shared between sessions (a suite's one cost model), and
    `shared_records` lets a records file hold other workloads too (a suite's one file), and
    `candidates` restricts the space to the given configs (replaying a record file), and
    `extractor` (configs -> feature rows) replaces the template's own feature extractor, e.g. with
    one whose rows were computed once for many replayed runs.
    """

    def __init__(self, workload: Workload, target: Any = "llvm", *, strategy: str = "evolutionary",
                 model: str | Any = "lightgbm", pretrained: bool = True, records: str | RecordStore | None = None,
                 seed: int = 0, draft: bool = True, exploration: float = 0.1,
                 training: TrainingData | None = None, shared_records: bool = False,
                 candidates: Sequence[Config] | None = None, extractor: Any = None):
        if not isinstance(workload, Workload):
            raise TypeError(f"workload must be a workloads.Workload, got {type(workload).__name__}")
        if not 0 <= exploration <= 1:
            raise ValueError(f"exploration must be within [0, 1], got {exploration}")
        self.workload = workload
        self.template = template_for(workload, target)
        if candidates is not None:  # e.g. the recorded configs of a replayed run
            self.template.space = RestrictedSpace(self.template.space, candidates)
        self.target = self.template.target
        self.target_key = target_key(self.target)
        self.strategy = make_strategy(strategy)
        self.learned = strategy != "random"
        self.model = make_model(model, self.target.kind.name, pretrained, seed) if isinstance(model, str) else model
        self.draft, self.exploration, self.shared_records = draft, exploration, shared_records
        self.rng = np.random.default_rng(seed)
        self.store = records if isinstance(records, RecordStore) or records is None else RecordStore(records)
        self.training = training if training is not None else TrainingData()
        self.extractor = (extractor or FeatureExtractor(self.template)) if self.learned else None
        self.measured: dict[Config, float] = {}  # config -> latency (inf when failed)
        self.trace: list[dict] = []
        self.round = 0
        self.started = time.monotonic()
        self._predicted: dict[Config, float] = {}
        self._features: dict[Config, np.ndarray] = {}
        self._recorded: set[Config] = set()
        self._drafts: dict[Config, float] = {}
        self.draft_trusted = True
        self._resume()

    # ----------------------------------------------------------------------------------- state

    def _resume(self) -> None:
        if self.store is None:
            return
        others = self.store.check_compatible(self.workload.key, self.target_key)
        if others and not self.shared_records and self.workload.key not in self.store.workloads():
            raise RecordError(f"{self.store.path} holds records of {', '.join(sorted(others))}, not {self.workload.key}; "
                              "use another records file (tune_suite shares one file between its workloads)")
        configs, latencies = [], []
        for record in self.store.select(self.workload.key, self.target_key):
            config = Config.from_json(record["config"])
            if config in self.measured or not self.template.space.is_valid(config):
                continue
            costs = record["costs"]
            latency = float(np.median(costs)) if record["error"] == "none" and costs else float("inf")
            self.measured[config] = latency
            self._recorded.add(config)
            configs.append(config)
            latencies.append(latency)
        if configs and self.learned:
            self.training.add(self.workload.key, self.extractor(configs), [self._throughput(l) for l in latencies])
            self.training.fit(self.model)
            self._judge_draft()

    def _throughput(self, latency: float) -> float:
        return self.workload.flops / latency if np.isfinite(latency) and latency > 0 else 0.0

    @property
    def best_config(self) -> Config | None:
        ok = {c: l for c, l in self.measured.items() if np.isfinite(l)}
        return min(ok, key=lambda c: (ok[c], c.id)) if ok else None

    @property
    def best_latency(self) -> float:
        return min((l for l in self.measured.values()), default=float("inf"))

    # ----------------------------------------------------------------------------------- ask

    def _draft_scores(self, configs: Sequence[Config]) -> np.ndarray:
        """The draft model's scores, each config's computed once (searches revisit many configs)."""
        for config in configs:
            if config not in self._drafts:
                self._drafts[config] = draft_score(self.template, config)
        return np.array([self._drafts[c] for c in configs])

    def _judge_draft(self) -> None:
        """Prune hard with the draft only while it ranks this workload's measured configs well: an
        analytic model can be blind to what limits a kernel (a memory-bound depthwise conv).

        The measured configs passed the draft's cut, so its ranking among them is often weak even
        where the cut helps; a doubted draft therefore still prunes, loosely, which keeps the cost
        of features bounded (not pruning at all tripled them on a ResNet-50 conv)."""
        ok = [c for c, latency in self.measured.items() if np.isfinite(latency)]
        if len(ok) >= DRAFT_JUDGED_AFTER:
            throughputs = np.array([self._throughput(self.measured[c]) for c in ok])
            agreement = group_metrics(self._draft_scores(ok), throughputs)["spearman"]
            self.draft_trusted = bool(agreement >= DRAFT_TRUST)

    def score(self, configs: Sequence[Config]) -> np.ndarray:
        """Draft-then-verify: the draft model prunes, the learned model ranks the survivors."""
        configs = list(configs)
        if not configs:
            return np.zeros(0)
        drafts = self._draft_scores(configs)
        scores = np.full(len(configs), -np.inf)
        keep = np.arange(len(configs))
        if self.draft and len(configs) > 8:
            fraction = DRAFT_KEEP if self.draft_trusted else DRAFT_KEEP_DOUBTED
            keep = np.argsort(-drafts, kind="stable")[: max(8, int(len(configs) * fraction))]
        learned = self.model.predict(self.features([configs[i] for i in keep]))
        scores[keep] = learned + 1e-6 * drafts[keep]  # the draft breaks ties of an untrained model
        return scores

    def features(self, configs: Sequence[Config]) -> np.ndarray:
        """Feature rows, each config extracted once per session (scoring and training share them)."""
        missing = [c for c in dict.fromkeys(configs) if c not in self._features]
        if missing:
            self._features.update(zip(missing, self.extractor(missing)))
        return np.stack([self._features[c] for c in configs])

    def ask(self, n: int) -> list[Config]:
        """Up to `n` configs to measure next, none measured before."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        exclude = set(self.measured)
        if not self.learned:
            return self.template.space.sample(self.rng, n, exclude=exclude)
        explore = int(round(n * self.exploration)) if self.measured else 0
        seeds = sorted((c for c, l in self.measured.items() if np.isfinite(l)), key=lambda c: self.measured[c])[:16]
        chosen = self.strategy.propose(self.template.space, self.score, self.rng, n - explore,
                                       seeds=seeds, exclude=exclude)
        chosen += self.template.space.sample(self.rng, n - len(chosen), exclude=exclude | set(chosen))
        predicted = self.score(chosen) if chosen else []
        self._predicted.update(zip(chosen, map(float, predicted)))
        return chosen

    # ----------------------------------------------------------------------------------- tell

    def record(self, config: Config, result: MeasureResult) -> None:
        """Save one finished measurement at once (a crash or Ctrl-C later loses nothing)."""
        if config in self._recorded:
            return
        self._recorded.add(config)
        if self.store is not None:
            predicted = self._predicted.get(config)
            extra = {"round": self.round, "elapsed_s": round(time.monotonic() - self.started, 3),
                     "build_s": round(result.build_s, 4), "run_s": round(result.run_s, 4)}
            if predicted is not None and np.isfinite(predicted):
                extra["predicted"] = predicted
            self.store.append(make_record(self.workload.key, self.target_key, config.to_json(), result, **extra))

    def tell(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Take a batch's results: records, trace rows, and a retrained model."""
        if len(configs) != len(results):
            raise ValueError(f"{len(configs)} configs but {len(results)} results")
        for config, result in zip(configs, results):
            self.record(config, result)
            self.measured[config] = result.latency
            best = self.best_latency
            self.trace.append({
                "round": self.round, "config": config.to_json(), "predicted_score": self._predicted.get(config),
                "latency_s": result.latency if result.ok else None, "error": str(result.error),
                "best_latency_s": best if np.isfinite(best) else None,
                "best_gflops": self.workload.flops / best / 1e9 if np.isfinite(best) else 0.0,
                "elapsed_s": time.monotonic() - self.started,
                "build_s": result.build_s, "run_s": result.run_s,
            })
        if self.learned and configs:
            self.training.add(self.workload.key, self.features(list(configs)),
                              [self._throughput(r.latency) for r in results])
            self.training.fit(self.model)
            self._judge_draft()
        self.round += 1

    def errors(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for row in self.trace:
            if row["error"] != ErrorKind.NONE.value:
                counts[row["error"]] = counts.get(row["error"], 0) + 1
        return counts
