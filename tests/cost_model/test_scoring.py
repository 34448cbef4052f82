"""Draft-then-verify: the draft orders what the learned model cannot tell apart, on one scale across calls."""

import numpy as np

from cost_model import DraftThenVerify
from cost_model.draft import draft_score
from search import template_for
from workloads import matmul

TEMPLATE = template_for(matmul(64, 64, 64), "llvm")
CONFIGS = TEMPLATE.space.sample(np.random.default_rng(0), 40)


class Fixed:
    """A ranker whose scores are a fixed function of the feature rows (never learns)."""

    def __init__(self, score=lambda rows: np.zeros(len(rows))) -> None:
        self.score = score

    def fit(self, features, throughputs, groups):
        return self

    update = fit

    def predict(self, features):
        return self.score(features)

    def save(self, path):
        raise NotImplementedError


def scorer(model):
    """A scorer whose feature rows are the configs' positions in CONFIGS (the Fixed models read them)."""
    index = {c: i for i, c in enumerate(CONFIGS)}
    return DraftThenVerify(TEMPLATE, model, lambda configs: np.array([[index.get(c, -1)] for c in configs], float),
                           draft=False)


def test_a_model_that_scores_all_alike_leaves_the_order_to_the_draft():
    scores = scorer(Fixed())(CONFIGS)
    drafts = [draft_score(TEMPLATE, c) for c in CONFIGS]
    assert list(np.argsort(-scores, kind="stable")) == list(np.argsort(-np.array(drafts), kind="stable"))


def test_scores_of_separate_calls_compare():
    """A strategy mixes scores of many calls: a config scores the same alone or in company."""
    score = scorer(Fixed(lambda rows: rows[:, 0] % 7))
    together = score(CONFIGS)
    alone = np.array([score([c])[0] for c in CONFIGS])
    np.testing.assert_allclose(together, alone)
