"""The hand-picked configs of `benchmarks.space_quality` stay configs of the space they measure."""

from __future__ import annotations

import pytest

import search
from benchmarks.space_quality import WORKLOADS, family_configs, hand_configs
from search import Config
from workloads import from_key


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_hand_configs_and_their_family_are_valid_configs_of_the_space(name):
    template = search.template_for(from_key(WORKLOADS[name]), "llvm")
    for config in hand_configs(name):
        assert template.space.violation(Config(config)) is None, config
    assert family_configs(name, template)


def test_the_gemv_family_has_streamed_rows_and_register_tiles():
    template = search.template_for(from_key(WORKLOADS["gemv"]), "llvm")
    streamed = [template.vectorizes(c) for c in family_configs("gemv", template)]
    assert True in streamed and False in streamed
