"""Draft-then-verify (Pruner): the policy that turns a ranker into scores for a search strategy.

The analytic draft model prunes the candidates a strategy proposes, so that the costly program
features are read only for the survivors, which the learned ranker then orders. The draft prunes
hard only while it ranks the workload's measured configs well: an analytic model can be blind to
what limits a kernel (a memory-bound depthwise conv).

Pruning pays only where features are costly: by default (`prunes_by_default`) it runs where they
lower each candidate (GPUs, `PerStoreFeature`). On CPUs, whose features are read off the config, it
saved little time and, summed over the replayed searches, cost trials.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from search import Config, TargetInfo, Template

from .base import CostModel
from .draft import draft_score
from .features import reads_per_store
from .metrics import group_metrics

Extractor = Callable[[Sequence[Config]], np.ndarray]  # configs -> feature rows

DRAFT_KEEP = 0.3  # fraction of the draft model's ranking that the learned model scores (features cost most)
DRAFT_TRUST = 0.2  # the draft prunes that hard while its ranking of this workload's measurements agrees this well
DRAFT_KEEP_DOUBTED = 0.6  # and keeps this fraction when it does not (Spearman below DRAFT_TRUST)
DRAFT_JUDGED_AFTER = 8  # measured configs before the draft's agreement is judged


def prunes_by_default(target: TargetInfo) -> bool:
    """Whether the draft prunes a target's candidates unless told: where the features lower each
    candidate. On CPUs, in 20 replayed searches per workload (`benchmarks/search_efficiency.py`,
    2026-12-07), the search without pruning held at least as good a best after 32 trials on all
    six dense workloads of znver5 and of an unseen Intel host, and reached 95% of the best in
    1, 4 and 8 median trials where pruning took 34, 54 and 68 (batch matmul, 3x3 conv, depthwise
    on znver5); pruning won on the Intel host's depthwise (56 against 103) and, on znver4 as an
    unseen host, on its depthwise (37 against 72) and by one trial on two more. Summed over the 18
    (workload, host) medians: 292 trials without pruning, 439 with it."""
    return reads_per_store(target)


class DraftThenVerify:
    """Scores configs of one template (higher is faster); `draft=False` lets the ranker score all.

    Feature rows and draft scores are computed once per config and kept: a search revisits many
    configs, and the rows of measured configs are what the ranker then trains on.
    """

    def __init__(self, template: Template, model: CostModel, extractor: Extractor, *,
                 draft: bool | None = None) -> None:
        """`draft`: whether the draft prunes (default: `prunes_by_default` for the template's target)."""
        self.template, self.model, self.extractor = template, model, extractor
        self.draft = prunes_by_default(template.target) if draft is None else draft
        self.draft_trusted = True
        self._features: dict[Config, np.ndarray] = {}
        self._drafts: dict[Config, float] = {}

    def features(self, configs: Sequence[Config]) -> np.ndarray:
        """Feature rows, each config's extracted once."""
        missing = [c for c in dict.fromkeys(configs) if c not in self._features]
        if missing:
            self._features.update(zip(missing, self.extractor(missing)))
        return np.stack([self._features[c] for c in configs])

    def draft_scores(self, configs: Sequence[Config]) -> np.ndarray:
        for config in configs:
            if config not in self._drafts:
                self._drafts[config] = draft_score(self.template, config)
        return np.array([self._drafts[c] for c in configs])

    def judge(self, configs: Sequence[Config], throughputs: Sequence[float]) -> None:
        """Trust the draft to prune hard while it ranks these measured, successful configs well.

        The measured configs passed the draft's cut, so its ranking among them is often weak even
        where the cut helps; a doubted draft therefore still prunes, loosely, which keeps the cost
        of features bounded (not pruning at all tripled them on a ResNet-50 conv)."""
        if len(configs) >= DRAFT_JUDGED_AFTER:
            agreement = group_metrics(self.draft_scores(configs), np.asarray(throughputs, dtype=float))["spearman"]
            self.draft_trusted = bool(agreement >= DRAFT_TRUST)

    def __call__(self, configs: Sequence[Config]) -> np.ndarray:
        """The draft prunes (-inf), the learned model ranks the survivors."""
        configs = list(configs)
        if not configs:
            return np.zeros(0)
        drafts = self.draft_scores(configs)
        scores = np.full(len(configs), -np.inf)
        keep = np.arange(len(configs))
        if self.draft and len(configs) > 8:
            fraction = DRAFT_KEEP if self.draft_trusted else DRAFT_KEEP_DOUBTED
            keep = np.argsort(-drafts, kind="stable")[: max(8, int(len(configs) * fraction))]
        learned = self.model.predict(self.features([configs[i] for i in keep]))
        scores[keep] = learned + 1e-6 * drafts[keep]  # the draft breaks ties of an untrained model
        return scores
